//! Certificates of a generated secrets bundle, the talosconfig and the admin kubeconfig, checked
//! with an independent parser (x509-parser), signatures verified with RustCrypto, and with
//! `openssl verify` when openssl is installed.

use ::time::macros::datetime;
use ::time::{Duration, OffsetDateTime};
use p256::ecdsa::signature::Verifier as _;
use rand::SeedableRng;
use std::sync::OnceLock;
use talosprov_base::pem::CertAndKey;
use talosprov_machine::kubeconfig::{AdminKubeconfig, KubeconfigInput};
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;
use talosprov_machine::talosconfig::{TalosconfigInput, generate};
use x509_parser::prelude::*;

const NOW: OffsetDateTime = datetime!(2026-01-02 03:04:05 UTC);
const OID_ED25519: &str = "1.3.101.112";
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_ECDSA_SHA256: &str = "1.2.840.10045.4.3.2";

fn bundle() -> &'static SecretsBundle {
    static BUNDLE: OnceLock<SecretsBundle> = OnceLock::new();
    BUNDLE.get_or_init(|| {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(42);
        SecretsBundle::generate(&mut rng, NOW).expect("generate")
    })
}

fn der(pem: &str) -> Vec<u8> {
    let (label, der) = p256::pkcs8::der::pem::decode_vec(pem.as_bytes()).expect("PEM");
    assert_eq!(label, "CERTIFICATE");
    der
}

fn organizations(name: &X509Name<'_>) -> Vec<String> {
    name.iter_organization()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn common_names(name: &X509Name<'_>) -> Vec<String> {
    name.iter_common_name()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Verify `child`'s signature with `issuer`'s public key.
fn verify_signed_by(child: &X509Certificate<'_>, issuer: &X509Certificate<'_>) {
    let tbs = child.tbs_certificate.as_ref();
    let sig = child.signature_value.data.as_ref();
    let key = issuer.public_key().subject_public_key.data.as_ref();
    match issuer
        .public_key()
        .algorithm
        .algorithm
        .to_id_string()
        .as_str()
    {
        OID_EC_PUBLIC_KEY => {
            assert_eq!(
                child.signature_algorithm.algorithm.to_id_string(),
                OID_ECDSA_SHA256
            );
            let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(key).expect("P-256 key");
            let sig = p256::ecdsa::Signature::from_der(sig).expect("DER signature");
            vk.verify(tbs, &sig).expect("ECDSA signature verifies");
        }
        OID_ED25519 => {
            assert_eq!(
                child.signature_algorithm.algorithm.to_id_string(),
                OID_ED25519
            );
            let vk = ed25519_dalek::VerifyingKey::from_bytes(key.try_into().unwrap()).unwrap();
            let sig = ed25519_dalek::Signature::from_slice(sig).unwrap();
            vk.verify(tbs, &sig).expect("Ed25519 signature verifies");
        }
        other => panic!("unexpected issuer key algorithm {other}"),
    }
    assert_eq!(
        child.issuer().as_raw(),
        issuer.subject().as_raw(),
        "issuer name matches"
    );
}

/// `openssl verify` of `leaf` against `ca`, at the bundle's time, when openssl is installed.
fn openssl_verify(ca_pem: &str, leaf_pem: &str) {
    let Ok(out) = std::process::Command::new("openssl")
        .arg("version")
        .output()
    else {
        return;
    };
    if !out.status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, leaf) = (dir.path().join("ca.pem"), dir.path().join("leaf.pem"));
    std::fs::write(&ca, ca_pem).unwrap();
    std::fs::write(&leaf, leaf_pem).unwrap();
    let at = (NOW + Duration::hours(1)).unix_timestamp().to_string();
    let out = std::process::Command::new("openssl")
        .args(["verify", "-attime", &at, "-CAfile"])
        .arg(&ca)
        .arg(&leaf)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn check_ca(pair: &CertAndKey, key_oid: &str, organization: Option<&str>) {
    let der = der(&pair.crt);
    let (_, cert) = parse_x509_certificate(&der).unwrap();
    assert_eq!(
        cert.public_key().algorithm.algorithm.to_id_string(),
        key_oid
    );
    assert_eq!(
        organizations(cert.subject()),
        organization
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    );
    assert!(common_names(cert.subject()).is_empty());
    assert_eq!(cert.validity().not_before.to_datetime(), NOW);
    assert_eq!(
        cert.validity().not_after.to_datetime(),
        NOW + Duration::hours(87_600)
    );
    let bc = cert
        .basic_constraints()
        .unwrap()
        .expect("basic constraints");
    assert!(bc.critical && bc.value.ca);
    let ku = cert.key_usage().unwrap().expect("key usage");
    assert!(ku.critical && ku.value.key_cert_sign() && ku.value.digital_signature());
    let eku = cert.extended_key_usage().unwrap().expect("EKU").value;
    assert!(eku.server_auth && eku.client_auth && eku.other.is_empty());
    let ski = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.len()),
            _ => None,
        })
        .expect("subject key identifier");
    assert_eq!(ski, 20);
    assert!(cert.tbs_certificate.raw_serial().len() <= 17);
    verify_signed_by(&cert, &cert);
    openssl_verify(&pair.crt, &pair.crt);
}

#[test]
fn generated_cas_have_talos_algorithms_subjects_and_validity() {
    let certs = &bundle().certs;
    check_ca(&certs.etcd, OID_EC_PUBLIC_KEY, Some("etcd"));
    check_ca(&certs.k8s, OID_EC_PUBLIC_KEY, Some("kubernetes"));
    check_ca(&certs.k8s_aggregator, OID_EC_PUBLIC_KEY, None);
    check_ca(&certs.os, OID_ED25519, Some("talos"));
}

#[test]
fn generated_keys_use_talos_pem_labels() {
    let certs = &bundle().certs;
    assert!(
        certs
            .etcd
            .key
            .expose()
            .starts_with("-----BEGIN EC PRIVATE KEY-----\n")
    );
    assert!(
        certs
            .os
            .key
            .expose()
            .starts_with("-----BEGIN ED25519 PRIVATE KEY-----\n")
    );
    let sa = certs.k8s_service_account.expose();
    assert!(sa.starts_with("-----BEGIN RSA PRIVATE KEY-----\n"));
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::traits::PublicKeyParts;
    let (_, der) = p256::pkcs8::der::pem::decode_vec(sa.as_bytes()).unwrap();
    let key = rsa::RsaPrivateKey::from_pkcs1_der(&der).unwrap();
    assert_eq!(key.size() * 8, 4096);
}

#[test]
fn generation_with_the_same_seed_gives_the_same_bundle() {
    let again =
        SecretsBundle::generate(&mut rand_chacha::ChaCha20Rng::seed_from_u64(42), NOW).unwrap();
    assert_eq!(secrets_yaml(&again), secrets_yaml(bundle()));
    let b = bundle();
    assert!(talosprov_machine::secrets::is_token(
        b.bootstrap_token.expose()
    ));
    assert!(talosprov_machine::secrets::is_token(
        b.trustd_token.expose()
    ));
    use base64::Engine as _;
    let id = base64::engine::general_purpose::URL_SAFE
        .decode(&b.cluster.id)
        .unwrap();
    assert_eq!(id.len(), 32);
    let secret = base64::engine::general_purpose::STANDARD
        .decode(b.cluster.secret.expose())
        .unwrap();
    assert_eq!(secret.len(), 32);
}

#[test]
fn talosconfig_client_certificate_is_an_ed25519_os_admin_client_cert() {
    let input = TalosconfigInput {
        context: "homelab".into(),
        endpoints: vec!["192.168.1.121".into()],
        nodes: vec!["192.168.1.121".into(), "192.168.1.122".into()],
        secrets: bundle(),
        now: NOW,
        lifetime: talosprov_machine::talosconfig::ADMIN_CERTIFICATE_VALIDITY,
    };
    let tc = generate(&input, &mut rand_chacha::ChaCha20Rng::seed_from_u64(1)).unwrap();
    let leaf_der = der(&tc.client.crt);
    let (_, leaf) = parse_x509_certificate(&leaf_der).unwrap();
    assert_eq!(
        leaf.public_key().algorithm.algorithm.to_id_string(),
        OID_ED25519
    );
    assert_eq!(organizations(leaf.subject()), vec!["os:admin"]);
    assert!(common_names(leaf.subject()).is_empty());
    assert_eq!(leaf.validity().not_before.to_datetime(), NOW);
    assert_eq!(
        leaf.validity().not_after.to_datetime(),
        NOW + Duration::days(365)
    );
    let eku = leaf.extended_key_usage().unwrap().expect("EKU").value;
    assert!(eku.client_auth && !eku.server_auth && eku.other.is_empty());
    assert!(leaf.basic_constraints().unwrap().is_none());
    assert!(
        tc.client
            .key
            .expose()
            .starts_with("-----BEGIN ED25519 PRIVATE KEY-----")
    );
    let ca_der = der(&bundle().certs.os.crt);
    let (_, ca) = parse_x509_certificate(&ca_der).unwrap();
    verify_signed_by(&leaf, &ca);
    openssl_verify(&bundle().certs.os.crt, &tc.client.crt);
}

#[test]
fn kubeconfig_client_certificate_is_admin_in_system_masters_signed_by_the_kubernetes_ca() {
    let input = KubeconfigInput {
        cluster_name: "homelab".into(),
        endpoint: "https://192.168.1.120:6443".into(),
        secrets: bundle(),
        now: NOW,
        lifetime: Duration::days(365),
    };
    let kc =
        AdminKubeconfig::generate(&input, &mut rand_chacha::ChaCha20Rng::seed_from_u64(2)).unwrap();
    let leaf_der = der(&kc.client.crt);
    let (_, leaf) = parse_x509_certificate(&leaf_der).unwrap();
    assert_eq!(
        leaf.public_key().algorithm.algorithm.to_id_string(),
        OID_EC_PUBLIC_KEY
    );
    assert_eq!(organizations(leaf.subject()), vec!["system:masters"]);
    assert_eq!(common_names(leaf.subject()), vec!["admin"]);
    assert_eq!(
        leaf.validity().not_before.to_datetime(),
        NOW - Duration::seconds(10)
    );
    assert_eq!(
        leaf.validity().not_after.to_datetime(),
        NOW + Duration::days(365)
    );
    let ku = leaf.key_usage().unwrap().expect("key usage").value;
    assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
    let eku = leaf.extended_key_usage().unwrap().expect("EKU").value;
    assert!(eku.client_auth && !eku.server_auth);
    let ca_der = der(&bundle().certs.k8s.crt);
    let (_, ca) = parse_x509_certificate(&ca_der).unwrap();
    verify_signed_by(&leaf, &ca);
    openssl_verify(&bundle().certs.k8s.crt, &kc.client.crt);
}
