//! Test PKI and machine configs for the Talos client and simulator tests: an OS CA and
//! client certificates as `talosctl gen secrets` makes them (Ed25519, roles in O), a
//! Kubernetes CA (P-256, SEC1 key), and minimal v1alpha1 configs that use them.

use std::net::IpAddr;

use base64::Engine as _;
use p256::pkcs8::DecodePrivateKey as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use talosprov_base::sensitive::Sensitive;
use talosprov_talos::credentials::ClientCredentials;

/// A CA certificate (PEM) and its key pair.
pub struct Ca {
    pub crt_pem: String,
    pub key: KeyPair,
    params: CertificateParams,
}

impl Ca {
    /// The key as Talos writes it.
    pub fn key_pem(&self) -> String {
        let pem = self.key.serialize_pem();
        if self.key.algorithm() == &rcgen::PKCS_ED25519 {
            pem.replace("PRIVATE KEY", "ED25519 PRIVATE KEY")
        } else {
            p256::SecretKey::from_pkcs8_der(self.key.serialized_der())
                .unwrap()
                .to_sec1_pem(p256::pkcs8::LineEnding::LF)
                .unwrap()
                .to_string()
        }
    }

    fn issuer(&self) -> Issuer<'_, &KeyPair> {
        Issuer::from_params(&self.params, &self.key)
    }
}

fn ca(alg: &'static rcgen::SignatureAlgorithm, organization: &str) -> Ca {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, organization);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let crt_pem = params.self_signed(&key).unwrap().pem();
    Ca {
        crt_pem,
        key,
        params,
    }
}

/// The OS (Talos API) CA: Ed25519, O=talos.
pub fn os_ca() -> Ca {
    ca(&rcgen::PKCS_ED25519, "talos")
}

/// The Kubernetes CA: ECDSA P-256, O=kubernetes.
pub fn k8s_ca() -> Ca {
    ca(&rcgen::PKCS_ECDSA_P256_SHA256, "kubernetes")
}

/// A talosconfig-style client certificate signed by `ca`, with one Organization per
/// role and ExtKeyUsage exactly ClientAuth; the key carries Talos's Ed25519 label.
pub fn client_credentials(ca: &Ca, roles: &[&str]) -> ClientCredentials {
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    for role in roles {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *role);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let crt = params.signed_by(&key, &ca.issuer()).unwrap().pem();
    let key_pem = key
        .serialize_pem()
        .replace("PRIVATE KEY", "ED25519 PRIVATE KEY");
    ClientCredentials::from_pem(ca.crt_pem.clone(), crt, Sensitive::new(key_pem))
}

/// A server certificate and key (PEM) signed by `ca` for the given IP SANs.
pub fn server_cert(ca: &Ca, ips: &[IpAddr]) -> (String, String) {
    let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut params = CertificateParams::default();
    params.subject_alt_names = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let crt = params.signed_by(&key, &ca.issuer()).unwrap().pem();
    (crt, key.serialize_pem())
}

/// The secrets of one test cluster.
pub struct ClusterPki {
    pub os: Ca,
    pub k8s: Ca,
    pub admin: ClientCredentials,
    pub cluster_id: String,
}

impl ClusterPki {
    pub fn new(cluster_id: &str) -> ClusterPki {
        let os = os_ca();
        let admin = client_credentials(&os, &["os:admin"]);
        ClusterPki {
            os,
            k8s: k8s_ca(),
            admin,
            cluster_id: cluster_id.to_string(),
        }
    }

    /// A minimal v1alpha1 machine config for `role` (`controlplane` or `worker`), with
    /// the CA keys only on control planes, as `talosctl gen config` does.
    pub fn machine_config(&self, role: &str, hostname: &str, endpoint_ip: IpAddr) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let control_plane = role == "controlplane";
        let os_key = if control_plane {
            b64(&self.os.key_pem())
        } else {
            String::new()
        };
        let k8s_key = if control_plane {
            b64(&self.k8s.key_pem())
        } else {
            String::new()
        };
        format!(
            "version: v1alpha1\ndebug: false\npersist: true\nmachine:\n  type: {role}\n  token: abcdef.0123456789abcdef\n  ca:\n    crt: {os_crt}\n    key: \"{os_key}\"\n  certSANs: []\n  network:\n    hostname: {hostname}\n  install:\n    disk: /dev/sda\n    image: ghcr.io/siderolabs/installer:v1.13.8\ncluster:\n  id: {id}\n  secret: c2VjcmV0\n  controlPlane:\n    endpoint: https://{endpoint_ip}:6443\n  clusterName: demo\n  network:\n    dnsDomain: cluster.local\n  token: abcdef.fedcba9876543210\n  ca:\n    crt: {k8s_crt}\n    key: \"{k8s_key}\"\n",
            os_crt = b64(&self.os.crt_pem),
            k8s_crt = b64(&self.k8s.crt_pem),
            id = self.cluster_id,
        )
    }
}
