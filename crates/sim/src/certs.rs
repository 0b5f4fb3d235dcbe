//! Certificates the simulated node makes: the throwaway maintenance-mode identity, the
//! secure-mode apid certificate issued from `machine.ca`, and the admin kubeconfig
//! signed by `cluster.ca`, with the key types and SANs Talos uses (talos.md §1.5, §4).

use std::net::IpAddr;

use base64::Engine as _;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};

use super::config::NodeConfig;
use talosprov_talos::credentials::relabel_ed25519;

/// A server certificate chain and its key, ready for rustls.
pub(crate) struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Loads a CA key in any form Talos writes: PKCS#8 (`PRIVATE KEY` or Talos's
/// `ED25519 PRIVATE KEY`) or SEC1 (`EC PRIVATE KEY`, the etcd and Kubernetes CAs).
pub(crate) fn key_pair_from_pem(pem: &str) -> Result<KeyPair, String> {
    let relabelled = relabel_ed25519(pem);
    let der = rustls_pemfile::private_key(&mut relabelled.as_bytes())
        .map_err(err)?
        .ok_or("no private key block")?;
    match der {
        PrivateKeyDer::Pkcs8(pkcs8) => KeyPair::try_from(&pkcs8).map_err(err),
        PrivateKeyDer::Sec1(sec1) => {
            let secret = p256::SecretKey::from_sec1_der(sec1.secret_sec1_der()).map_err(err)?;
            let pkcs8 = secret.to_pkcs8_der().map_err(err)?;
            KeyPair::try_from(pkcs8.as_bytes()).map_err(err)
        }
        _ => Err("unsupported key type (RSA CA keys are not used by Talos)".to_string()),
    }
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::seconds(10);
    params.not_after = now + lifetime;
}

fn pkcs8(key: &KeyPair) -> PrivateKeyDer<'static> {
    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()))
}

/// The maintenance-mode identity: an ephemeral self-signed Ed25519 CA made at boot and
/// a 24 h server certificate from it (internal/app/maintenance). Clients skip
/// verification, so only the encryption matters.
pub(crate) fn maintenance_identity(ip: IpAddr) -> Result<Identity, String> {
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(err)?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name
        .push(DnType::OrganizationName, "talos");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca, Duration::hours(24));
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let issuer = Issuer::new(ca, &ca_key);
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(err)?;
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = DistinguishedName::new();
    leaf.subject_alt_names = vec![SanType::IpAddress(ip)];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut leaf, Duration::hours(24));
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    Ok(Identity {
        chain: vec![leaf_cert.der().clone(), ca_cert.der().clone()],
        key: pkcs8(&leaf_key),
    })
}

/// The secure-mode apid certificate: Ed25519 (the key type follows the OS CA), 24 h,
/// ServerAuth, SANs = node IP, 127.0.0.1, hostname, `machine.certSANs`; issued by the
/// OS CA whose certificate and key are given (on a worker they come from a control
/// plane, as trustd would provide).
pub(crate) fn apid_identity(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    ip: IpAddr,
    hostname: &str,
    cert_sans: &[String],
) -> Result<Identity, String> {
    let mut sans = vec![SanType::IpAddress(ip)];
    let loopback: IpAddr = [127, 0, 0, 1].into();
    if ip != loopback {
        sans.push(SanType::IpAddress(loopback));
    }
    for name in std::iter::once(hostname.to_string()).chain(cert_sans.iter().cloned()) {
        match name.parse::<IpAddr>() {
            Ok(addr) => sans.push(SanType::IpAddress(addr)),
            Err(_) => sans.push(SanType::DnsName(name.try_into().map_err(err)?)),
        }
    }
    server_leaf(ca_crt_pem, ca_key_pem, &rcgen::PKCS_ED25519, hostname, sans)
}

/// The kube-apiserver's serving certificate: P-256, 24 h, ServerAuth, issued by the
/// Kubernetes CA (`cluster.ca`), for the given addresses (the endpoint's and the
/// control planes').
pub(crate) fn apiserver_identity(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    addresses: &[IpAddr],
) -> Result<Identity, String> {
    let sans = addresses.iter().map(|a| SanType::IpAddress(*a)).collect();
    server_leaf(
        ca_crt_pem,
        ca_key_pem,
        &rcgen::PKCS_ECDSA_P256_SHA256,
        "kube-apiserver",
        sans,
    )
}

/// A 24 h ServerAuth certificate with a new `algorithm` key, CN `common_name` and
/// `sans`, issued by the CA whose certificate and key are given.
fn server_leaf(
    ca_crt_pem: &str,
    ca_key_pem: &str,
    algorithm: &'static rcgen::SignatureAlgorithm,
    common_name: &str,
    sans: Vec<SanType>,
) -> Result<Identity, String> {
    let ca_key = key_pair_from_pem(ca_key_pem)?;
    let issuer = Issuer::from_ca_cert_pem(ca_crt_pem, &ca_key).map_err(err)?;
    let leaf_key = KeyPair::generate_for(algorithm).map_err(err)?;
    let mut leaf = CertificateParams::default();
    leaf.distinguished_name = DistinguishedName::new();
    leaf.distinguished_name
        .push(DnType::CommonName, common_name);
    leaf.subject_alt_names = sans;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    validity(&mut leaf, Duration::hours(24));
    let cert = leaf.signed_by(&leaf_key, &issuer).map_err(err)?;
    Ok(Identity {
        chain: vec![cert.der().clone()],
        key: pkcs8(&leaf_key),
    })
}

/// The admin kubeconfig Talos builds from the config (pkg/kubeconfig/generate.go): one
/// cluster `<clusterName>` at the control-plane endpoint with the Kubernetes CA, one
/// user `admin@<clusterName>` with a P-256 client certificate (CN=admin,
/// O=system:masters, 365 days), one context, which is current.
pub(crate) fn admin_kubeconfig(config: &NodeConfig) -> Result<String, String> {
    let ca_crt = config
        .k8s_ca_crt_pem
        .as_deref()
        .ok_or("cluster.ca.crt is missing")?;
    let ca_key = config
        .k8s_ca_key_pem
        .as_deref()
        .ok_or("cluster.ca.key is missing")?;
    let ca_key = key_pair_from_pem(ca_key)?;
    let issuer = Issuer::from_ca_cert_pem(ca_crt, &ca_key).map_err(err)?;
    let client_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(err)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, "admin");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    validity(&mut params, Duration::days(365));
    let cert = params.signed_by(&client_key, &issuer).map_err(err)?;
    // SEC1 with the curve OID and the public key, as Go's x509.MarshalECPrivateKey
    // writes it: Go's TLS stack (kubectl) refuses an EC key without the curve.
    let secret = p256::SecretKey::from_pkcs8_der(client_key.serialized_der()).map_err(err)?;
    let key_pem = talosprov_machine::keys::PrivateKey::EcdsaP256(secret.into()).to_pem();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let name = &config.cluster_name;
    let user = format!("admin@{name}");
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {crt}\n    client-key-data: {key}\ncontexts:\n- context:\n    cluster: {name}\n    namespace: default\n    user: {user}\n  name: {user}\ncurrent-context: {user}\n",
        server = config.endpoint,
        ca = b64(ca_crt),
        crt = b64(&cert.pem()),
        key = b64(&key_pem),
    ))
}
