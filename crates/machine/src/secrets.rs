//! The cluster secrets bundle: what `talosctl gen secrets` makes (CAs, service-account key,
//! tokens, cluster id and secret, encryption secret), generated from a passed-in RNG and clock.
//! Source: Talos `pkg/machinery/config/generate/secrets/{bundle.go,ca.go,utils.go}`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use rand::{CryptoRng, Rng, RngCore};
use time::{Duration, OffsetDateTime};

use super::keys::PrivateKey;
use super::pki::{CaSpec, PkiError, self_signed_ca};
use talosprov_base::pem::CertAndKey;
use talosprov_base::sensitive::Sensitive;

/// CA validity: 87600 h, ten years (`secrets.CAValidityTime`).
pub const CA_VALIDITY: Duration = Duration::hours(87_600);

/// RSA size of the service-account key (contracts after 1.6).
pub const SERVICE_ACCOUNT_RSA_BITS: usize = 4096;

/// Errors generating a bundle.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// A CA certificate or key could not be made.
    #[error("generating the {what} failed")]
    Generate {
        /// Which part of the bundle (e.g. "etcd CA").
        what: &'static str,
        /// The key or certificate generator's error.
        #[source]
        source: PkiError,
    },
}

/// `cluster.id` and `cluster.secret`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// 32 random bytes, URL-safe base64 with padding (used for discovery; not a secret).
    pub id: String,
    /// 32 random bytes, standard base64.
    pub secret: Sensitive<String>,
}

/// The Kubernetes secrets-at-rest key. Exactly one is present in a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncryptionSecret {
    /// `secrets.secretboxencryptionsecret` (every contract after 1.2).
    Secretbox(Sensitive<String>),
    /// `secrets.aescbcencryptionsecret` (bundles made for Talos 1.2 and older).
    AesCbc(Sensitive<String>),
}

impl EncryptionSecret {
    /// The secret value, 32 bytes in standard base64.
    pub fn value(&self) -> &Sensitive<String> {
        match self {
            EncryptionSecret::Secretbox(s) | EncryptionSecret::AesCbc(s) => s,
        }
    }
}

/// The certificates and keys of a bundle (`certs` in secrets.yaml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certs {
    /// etcd CA: ECDSA P-256, `O=etcd`.
    pub etcd: CertAndKey,
    /// Kubernetes CA: ECDSA P-256, `O=kubernetes`.
    pub k8s: CertAndKey,
    /// Kubernetes aggregator (front-proxy) CA: ECDSA P-256, empty subject.
    pub k8s_aggregator: CertAndKey,
    /// Service-account signing key, PEM: RSA 4096 (`RSA PRIVATE KEY`); older bundles hold
    /// ECDSA P-256 keys, which Talos also accepts.
    pub k8s_service_account: Sensitive<String>,
    /// Talos API (OS) CA: Ed25519, `O=talos`.
    pub os: CertAndKey,
}

/// A cluster's secrets bundle, the same material as talosctl's `secrets.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretsBundle {
    /// `cluster.id` and `cluster.secret`.
    pub cluster: ClusterIdentity,
    /// `secrets.bootstraptoken`: `[a-z0-9]{6}.[a-z0-9]{16}`.
    pub bootstrap_token: Sensitive<String>,
    /// The secrets-at-rest key.
    pub encryption: EncryptionSecret,
    /// `trustdinfo.token`: same format as the bootstrap token.
    pub trustd_token: Sensitive<String>,
    /// CAs and the service-account key.
    pub certs: Certs,
}

impl SecretsBundle {
    /// Generate a bundle as `talosctl gen secrets` does for contracts after 1.6, from `rng` and
    /// with the CAs valid from `now` for [`CA_VALIDITY`]. Key generation dominates: an RSA 4096
    /// key takes around a second even optimised.
    ///
    /// # Errors
    /// [`SecretsError`] when a certificate cannot be made (not expected with these keys).
    pub fn generate<R: RngCore + CryptoRng>(
        rng: &mut R,
        now: OffsetDateTime,
    ) -> Result<Self, SecretsError> {
        Self::generate_with(rng, now, ServiceAccountKey::Rsa4096)
    }

    /// Generate a bundle whose service-account key is ECDSA P-256, as `talosctl gen secrets`
    /// made before contract 1.7 (Talos still accepts it). Every key and certificate is real,
    /// but there is no RSA key to wait for: it is meant for checking configs offline
    /// (`validate`), where the secret values do not change the outcome, never for a cluster.
    ///
    /// # Errors
    /// [`SecretsError`] when a certificate cannot be made (not expected with these keys).
    pub fn generate_for_checks<R: RngCore + CryptoRng>(
        rng: &mut R,
        now: OffsetDateTime,
    ) -> Result<Self, SecretsError> {
        Self::generate_with(rng, now, ServiceAccountKey::EcdsaP256)
    }

    fn generate_with<R: RngCore + CryptoRng>(
        rng: &mut R,
        now: OffsetDateTime,
        service_account_key: ServiceAccountKey,
    ) -> Result<Self, SecretsError> {
        let now = now.replace_nanosecond(0).unwrap_or(now);
        let not_after = now + CA_VALIDITY;
        let ca = |what: &'static str, key: PrivateKey, organization: Option<&str>, rng: &mut R| {
            let spec = CaSpec {
                organization,
                not_before: now,
                not_after,
            };
            self_signed_ca(&key, &spec, rng)
                .map_err(|source| SecretsError::Generate { what, source })
        };
        let etcd_key = PrivateKey::generate_p256(rng);
        let etcd = ca("etcd CA", etcd_key, Some("etcd"), rng)?;
        let k8s_key = PrivateKey::generate_p256(rng);
        let k8s = ca("Kubernetes CA", k8s_key, Some("kubernetes"), rng)?;
        let aggregator_key = PrivateKey::generate_p256(rng);
        let k8s_aggregator = ca("Kubernetes aggregator CA", aggregator_key, None, rng)?;
        let service_account = match service_account_key {
            ServiceAccountKey::Rsa4096 => PrivateKey::generate_rsa(rng, SERVICE_ACCOUNT_RSA_BITS)
                .map_err(|e| SecretsError::Generate {
                what: "service-account key",
                source: e.into(),
            })?,
            ServiceAccountKey::EcdsaP256 => PrivateKey::generate_p256(rng),
        };
        let os_key = PrivateKey::generate_ed25519(rng);
        let os = ca("Talos API CA", os_key, Some("talos"), rng)?;

        let bootstrap_token = token(rng);
        let encryption =
            EncryptionSecret::Secretbox(Sensitive::new(STANDARD.encode(random_32(rng))));
        let trustd_token = token(rng);
        let cluster = ClusterIdentity {
            id: URL_SAFE.encode(random_32(rng)),
            secret: Sensitive::new(STANDARD.encode(random_32(rng))),
        };
        Ok(SecretsBundle {
            cluster,
            bootstrap_token: Sensitive::new(bootstrap_token),
            encryption,
            trustd_token: Sensitive::new(trustd_token),
            certs: Certs {
                etcd,
                k8s,
                k8s_aggregator,
                k8s_service_account: Sensitive::new(service_account.to_pem()),
                os,
            },
        })
    }
}

/// The service-account key type a bundle is generated with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServiceAccountKey {
    /// RSA 4096, what talosctl makes today.
    Rsa4096,
    /// ECDSA P-256, what talosctl made before contract 1.7.
    EcdsaP256,
}

fn random_32<R: RngCore>(rng: &mut R) -> [u8; 32] {
    let mut b = [0u8; 32];
    rng.fill_bytes(&mut b);
    b
}

/// A kubeadm-style token `[a-z0-9]{6}.[a-z0-9]{16}`. Bytes ≥ 252 are skipped so that every
/// character is equally likely (Talos `randBootstrapTokenString`).
pub fn token<R: RngCore>(rng: &mut R) -> String {
    format!("{}.{}", token_part(rng, 6), token_part(rng, 16))
}

fn token_part<R: RngCore>(rng: &mut R, len: usize) -> String {
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(len);
    while out.len() < len {
        let b: u8 = rng.r#gen();
        if b < 252 {
            out.push(ALPHABET[usize::from(b) % ALPHABET.len()] as char);
        }
    }
    out
}

/// Whether `s` has the bootstrap/trustd token format `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn is_token(s: &str) -> bool {
    let ok = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    matches!(s.split_once('.'), Some((a, b)) if ok(a, 6) && ok(b, 16))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn bundle_for_checks_has_an_ecdsa_service_account_key_and_round_trips() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(2);
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let bundle = SecretsBundle::generate_for_checks(&mut rng, now).unwrap();
        let key = PrivateKey::from_pem(bundle.certs.k8s_service_account.expose()).unwrap();
        assert_eq!(key.algorithm(), crate::keys::KeyAlgorithm::EcdsaP256);
        let text = crate::secrets_file::secrets_yaml(&bundle);
        assert_eq!(
            crate::secrets_file::parse_secrets_yaml(&text).unwrap(),
            bundle
        );
    }

    #[test]
    fn tokens_have_the_kubeadm_format() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        for _ in 0..200 {
            let t = token(&mut rng);
            assert!(is_token(&t), "{t}");
        }
        assert!(!is_token("ABCDEF.0123456789abcdef"));
        assert!(!is_token("abcdef0123456789abcdef"));
    }
}
