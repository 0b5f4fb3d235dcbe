//! Private keys as Talos stores them (PEM labels and encodings of siderolabs/crypto `x509`),
//! generated with RustCrypto crates from a caller's RNG, and a signer that hands them to rcgen.
//! Signatures are deterministic (RFC 6979 ECDSA, Ed25519), so a seeded RNG gives a fixed bundle.

use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::der::pem::{self, LineEnding};
use rand::{CryptoRng, RngCore};
use std::fmt;

/// Errors reading or using a private key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text is not a PEM block.
    #[error("not a PEM block: {0}")]
    Pem(String),
    /// The PEM label is not one Talos reads.
    #[error("unsupported private key type {0:?} (Talos reads EC, ED25519, RSA and PKCS#8 keys)")]
    UnsupportedLabel(String),
    /// The DER inside the PEM block does not decode as the label says.
    #[error("malformed {label} private key")]
    Malformed {
        /// The PEM label.
        label: String,
    },
    /// RSA keys can be stored and passed on, but talosprov does not sign certificates with them.
    #[error("signing with an {0} key is not supported (only ECDSA P-256 and Ed25519 CAs)")]
    CannotSign(KeyAlgorithm),
    /// Key generation failed.
    #[error("generating an {0} key failed")]
    Generate(KeyAlgorithm),
}

/// The key algorithms of a Talos secrets bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    /// ECDSA on NIST P-256 (etcd, Kubernetes and aggregator CAs; Kubernetes client certs).
    EcdsaP256,
    /// Ed25519 (the Talos API CA and talosconfig client certificates).
    Ed25519,
    /// RSA (the service-account key, 4096 bits).
    Rsa,
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyAlgorithm::EcdsaP256 => "ECDSA P-256",
            KeyAlgorithm::Ed25519 => "Ed25519",
            KeyAlgorithm::Rsa => "RSA",
        })
    }
}

/// A private key. `Debug` shows only the algorithm.
#[derive(Clone)]
pub enum PrivateKey {
    /// ECDSA P-256, stored as `EC PRIVATE KEY` (SEC1 with the curve OID and public key, as Go's
    /// `x509.MarshalECPrivateKey`).
    EcdsaP256(p256::ecdsa::SigningKey),
    /// Ed25519, stored as `ED25519 PRIVATE KEY` holding PKCS#8 v1 DER (Talos's own label).
    Ed25519(ed25519_dalek::SigningKey),
    /// RSA, stored as `RSA PRIVATE KEY` (PKCS#1).
    Rsa(Box<rsa::RsaPrivateKey>),
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKey({}, (sensitive))", self.algorithm())
    }
}

/// PEM labels used by siderolabs/crypto `x509/constants.go`.
const LABEL_EC: &str = "EC PRIVATE KEY";
const LABEL_ED25519: &str = "ED25519 PRIVATE KEY";
const LABEL_RSA: &str = "RSA PRIVATE KEY";
const LABEL_PKCS8: &str = "PRIVATE KEY";

/// SEC1 `ECPrivateKey` for P-256 with `[0] namedCurve prime256v1` and `[1] publicKey`, the fixed
/// layout Go writes: header, 32-byte scalar, curve OID, then the 65-byte uncompressed point.
const SEC1_P256_HEAD: [u8; 7] = [0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20];
const SEC1_P256_MIDDLE: [u8; 17] = [
    0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0xa1, 0x44, 0x03, 0x42,
    0x00,
];

impl PrivateKey {
    /// A new ECDSA P-256 key from `rng`.
    pub fn generate_p256<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        PrivateKey::EcdsaP256(p256::ecdsa::SigningKey::random(rng))
    }

    /// A new Ed25519 key from `rng`.
    pub fn generate_ed25519<R: RngCore + CryptoRng>(rng: &mut R) -> Self {
        PrivateKey::Ed25519(ed25519_dalek::SigningKey::generate(rng))
    }

    /// A new RSA key of `bits` bits (Talos uses 4096) from `rng`.
    ///
    /// # Errors
    /// [`KeyError::Generate`] when the RSA crate refuses the size.
    pub fn generate_rsa<R: RngCore + CryptoRng>(
        rng: &mut R,
        bits: usize,
    ) -> Result<Self, KeyError> {
        rsa::RsaPrivateKey::new(rng, bits)
            .map(|k| PrivateKey::Rsa(Box::new(k)))
            .map_err(|_| KeyError::Generate(KeyAlgorithm::Rsa))
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> KeyAlgorithm {
        match self {
            PrivateKey::EcdsaP256(_) => KeyAlgorithm::EcdsaP256,
            PrivateKey::Ed25519(_) => KeyAlgorithm::Ed25519,
            PrivateKey::Rsa(_) => KeyAlgorithm::Rsa,
        }
    }

    /// The key as PEM text with Talos's label and encoding, 64-column lines, LF endings.
    pub fn to_pem(&self) -> String {
        let (label, der) = match self {
            PrivateKey::EcdsaP256(k) => {
                let mut der = Vec::with_capacity(121);
                der.extend_from_slice(&SEC1_P256_HEAD);
                der.extend_from_slice(&k.to_bytes());
                der.extend_from_slice(&SEC1_P256_MIDDLE);
                der.extend_from_slice(k.verifying_key().to_encoded_point(false).as_bytes());
                (LABEL_EC, der)
            }
            PrivateKey::Ed25519(k) => {
                // Go's MarshalPKCS8PrivateKey writes version 1 without the public key.
                let seed = k.to_bytes();
                let mut der = vec![
                    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04,
                    0x22, 0x04, 0x20,
                ];
                der.extend_from_slice(&seed);
                (LABEL_ED25519, der)
            }
            PrivateKey::Rsa(k) => {
                use rsa::pkcs1::EncodeRsaPrivateKey;
                let der = k
                    .to_pkcs1_der()
                    .map(|d| d.as_bytes().to_vec())
                    .unwrap_or_default();
                (LABEL_RSA, der)
            }
        };
        pem_encode(label, &der)
    }

    /// Parse a PEM private key as Talos does (`PEMEncodedKey.GetKey`): `EC PRIVATE KEY`,
    /// `ED25519 PRIVATE KEY`, `RSA PRIVATE KEY`, or PKCS#8 `PRIVATE KEY` of any of the three.
    ///
    /// # Errors
    /// [`KeyError`] naming the label when the text is not a key Talos would accept.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let (label, der) = pem_decode(text)?;
        let label = label.as_str();
        let malformed = || KeyError::Malformed {
            label: label.to_string(),
        };
        match label {
            LABEL_EC => p256::SecretKey::from_sec1_der(&der)
                .map(|k| PrivateKey::EcdsaP256(k.into()))
                .map_err(|_| malformed()),
            LABEL_RSA => {
                use rsa::pkcs1::DecodeRsaPrivateKey;
                rsa::RsaPrivateKey::from_pkcs1_der(&der)
                    .map(|k| PrivateKey::Rsa(Box::new(k)))
                    .map_err(|_| malformed())
            }
            LABEL_ED25519 | LABEL_PKCS8 => from_pkcs8(&der).ok_or_else(malformed),
            other => Err(KeyError::UnsupportedLabel(other.to_string())),
        }
    }

    /// A signer for rcgen.
    ///
    /// # Errors
    /// [`KeyError::CannotSign`] for RSA keys.
    pub(crate) fn signer(&self) -> Result<Signer, KeyError> {
        match self {
            PrivateKey::EcdsaP256(k) => Ok(Signer {
                public: k
                    .verifying_key()
                    .to_encoded_point(false)
                    .as_bytes()
                    .to_vec(),
                key: SignerKey::EcdsaP256(k.clone()),
            }),
            PrivateKey::Ed25519(k) => Ok(Signer {
                public: k.verifying_key().to_bytes().to_vec(),
                key: SignerKey::Ed25519(k.clone()),
            }),
            PrivateKey::Rsa(_) => Err(KeyError::CannotSign(KeyAlgorithm::Rsa)),
        }
    }
}

fn from_pkcs8(der: &[u8]) -> Option<PrivateKey> {
    use p256::pkcs8::DecodePrivateKey;
    if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(der) {
        return Some(PrivateKey::Ed25519(k));
    }
    if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_der(der) {
        return Some(PrivateKey::EcdsaP256(k));
    }
    rsa::RsaPrivateKey::from_pkcs8_der(der)
        .ok()
        .map(|k| PrivateKey::Rsa(Box::new(k)))
}

/// PEM text as Go's `pem.Encode` writes it: 64-column base64 lines, LF, trailing newline.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    // Labels are constants of ours and lengths are small, so encoding cannot fail.
    pem::encode_string(label, LineEnding::LF, der).unwrap_or_default()
}

/// Decode one PEM block, returning its label and DER bytes.
pub(crate) fn pem_decode(text: &str) -> Result<(String, Vec<u8>), KeyError> {
    if !text.trim_start().starts_with("-----BEGIN ") {
        return Err(KeyError::Pem("no \"-----BEGIN\" line".into()));
    }
    pem::decode_vec(text.trim_start().as_bytes())
        .map(|(label, der)| (label.to_string(), der))
        .map_err(|e| KeyError::Pem(e.to_string()))
}

enum SignerKey {
    EcdsaP256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

/// A P-256 or Ed25519 key in the shape rcgen signs with.
pub(crate) struct Signer {
    key: SignerKey,
    public: Vec<u8>,
}

impl rcgen::PublicKeyData for Signer {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        match self.key {
            SignerKey::EcdsaP256(_) => &rcgen::PKCS_ECDSA_P256_SHA256,
            SignerKey::Ed25519(_) => &rcgen::PKCS_ED25519,
        }
    }
}

impl rcgen::SigningKey for Signer {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        Ok(match &self.key {
            SignerKey::EcdsaP256(k) => {
                let sig: p256::ecdsa::Signature = k.sign(msg);
                sig.to_der().as_bytes().to_vec()
            }
            SignerKey::Ed25519(k) => k.sign(msg).to_bytes().to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> rand_chacha::ChaCha20Rng {
        rand_chacha::ChaCha20Rng::seed_from_u64(7)
    }

    #[test]
    fn p256_key_round_trips_through_talos_pem() {
        let key = PrivateKey::generate_p256(&mut rng());
        let pem = key.to_pem();
        assert!(pem.starts_with("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI"));
        let again = PrivateKey::from_pem(&pem).unwrap();
        assert_eq!(again.to_pem(), pem);
    }

    #[test]
    fn ed25519_key_uses_talos_label_and_pkcs8_v1() {
        let key = PrivateKey::generate_ed25519(&mut rng());
        let pem = key.to_pem();
        // Go's PKCS#8 v1 Ed25519 encoding is 48 bytes: base64 "MC4CAQAwBQYDK2VwBCIEI...".
        assert!(pem.starts_with("-----BEGIN ED25519 PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI"));
        assert_eq!(PrivateKey::from_pem(&pem).unwrap().to_pem(), pem);
    }

    #[test]
    fn unknown_label_is_refused_with_its_name() {
        let pem = pem_encode("DSA PRIVATE KEY", &[1, 2, 3]);
        let err = PrivateKey::from_pem(&pem).unwrap_err();
        assert!(err.to_string().contains("DSA PRIVATE KEY"), "{err}");
    }

    #[test]
    fn debug_never_shows_key_material() {
        let key = PrivateKey::generate_ed25519(&mut rng());
        assert_eq!(format!("{key:?}"), "PrivateKey(Ed25519, (sensitive))");
    }
}
