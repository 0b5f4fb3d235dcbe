//! The age keys of archives. Three kinds, in the order the engine prefers them
//! for writing:
//! - recipients (`--recipient age1…`, or the state's recipients file), read
//!   back with identities (`--identity FILE`, as `age -d -i` takes, or the
//!   state's identity file);
//! - a passphrase (the state's `TALOSPROV_STATE_PASSPHRASE`), with scrypt;
//! - the cluster's own key: an X25519 identity derived (HKDF-SHA256, RFC 5869)
//!   from the cluster's Kubernetes secrets-at-rest key in its secrets bundle.
//!   Whoever holds the state holds it, and a snapshot is of no use without
//!   that key anyway: Kubernetes encrypts Secrets in etcd with it.

use age::secrecy::SecretString;
use serde::{Deserialize, Serialize};
use talosprov_base::sensitive::Sensitive;

use crate::error::BackupError;

/// Which key an archive was sealed with (recorded in its manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyKind {
    /// age X25519 recipients.
    Recipients,
    /// An scrypt passphrase.
    Passphrase,
    /// The identity derived from the cluster's secrets-at-rest key.
    Cluster,
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyKind::Recipients => "age recipients",
            KeyKind::Passphrase => "a passphrase",
            KeyKind::Cluster => "the cluster's own key",
        })
    }
}

/// Keys for sealing and opening archives. `Debug` never shows key material.
pub struct Keys {
    kind: KeyKind,
    passphrase: Option<Sensitive>,
    recipients: Vec<age::x25519::Recipient>,
    identities: Vec<age::x25519::Identity>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Keys {{ kind: {:?}, {} recipient(s), {} identity(ies) }}",
            self.kind,
            self.recipients.len(),
            self.identities.len()
        )
    }
}

const HKDF_SALT: &[u8] = b"talosprov etcd snapshot archives";
const HKDF_INFO: &[u8] = b"age X25519 identity, version 1";

impl Keys {
    /// An scrypt passphrase (seals and opens).
    pub fn passphrase(passphrase: Sensitive) -> Keys {
        Keys {
            kind: KeyKind::Passphrase,
            passphrase: Some(passphrase),
            recipients: Vec::new(),
            identities: Vec::new(),
        }
    }

    /// age X25519 recipients (seal) and identities (open); either may be empty.
    pub fn age(
        recipients: Vec<age::x25519::Recipient>,
        identities: Vec<age::x25519::Identity>,
    ) -> Keys {
        Keys {
            kind: KeyKind::Recipients,
            passphrase: None,
            recipients,
            identities,
        }
    }

    /// Recipients given as text (`age1…`, as `age -r` takes them).
    ///
    /// # Errors
    /// [`BackupError::Key`] naming the first text that is not an X25519
    /// recipient.
    pub fn recipients(texts: &[String]) -> Result<Keys, BackupError> {
        let recipients = texts
            .iter()
            .map(|t| {
                t.trim().parse::<age::x25519::Recipient>().map_err(|_| {
                    BackupError::Key(format!("--recipient {t:?} is not an age recipient (age1…)"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Keys::age(recipients, Vec::new()))
    }

    /// The cluster's own key, derived from `secret_at_rest` (the bundle's
    /// `secretboxencryptionsecret` or `aescbcencryptionsecret`, as written).
    /// The same secret always gives the same key.
    pub fn cluster(secret_at_rest: &Sensitive) -> Keys {
        let identity = derived_identity(secret_at_rest);
        Keys {
            kind: KeyKind::Cluster,
            passphrase: None,
            recipients: vec![identity.to_public()],
            identities: vec![identity],
        }
    }

    /// The kind of these keys.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// An age encryptor to these keys.
    ///
    /// # Errors
    /// [`BackupError::Key`] when there is no recipient to encrypt to.
    pub fn encryptor(&self) -> Result<age::Encryptor, BackupError> {
        if let Some(p) = &self.passphrase {
            return Ok(age::Encryptor::with_user_passphrase(SecretString::from(
                p.expose().to_owned(),
            )));
        }
        if self.recipients.is_empty() {
            return Err(BackupError::Key(
                "no age recipient to encrypt the snapshot to".to_owned(),
            ));
        }
        age::Encryptor::with_recipients(self.recipients.iter().map(|r| r as &dyn age::Recipient))
            .map_err(|e| BackupError::Key(format!("cannot encrypt to the recipients: {e}")))
    }

    /// Open an archive's age stream.
    ///
    /// # Errors
    /// [`BackupError::Key`] for keys of another kind or that do not open it
    /// (a wrong passphrase or identity), [`BackupError::Damaged`] otherwise.
    pub fn open<R: futures::AsyncRead + Unpin>(
        &self,
        decryptor: age::Decryptor<R>,
        name: &str,
    ) -> Result<age::stream::StreamReader<R>, BackupError> {
        let scrypt;
        let identities: Vec<&dyn age::Identity> = match (&self.passphrase, decryptor.is_scrypt()) {
            (Some(p), true) => {
                scrypt = age::scrypt::Identity::new(SecretString::from(p.expose().to_owned()));
                vec![&scrypt]
            }
            (None, false) if !self.identities.is_empty() => self
                .identities
                .iter()
                .map(|i| i as &dyn age::Identity)
                .collect(),
            (None, false) => {
                return Err(BackupError::Key(format!(
                    "{name} is encrypted to age recipients: give the identity file with --identity"
                )));
            }
            (Some(_), false) => {
                return Err(BackupError::Key(format!(
                    "{name} is encrypted to age recipients, not with a passphrase: give the identity file with --identity"
                )));
            }
            (None, true) => {
                return Err(BackupError::Key(format!(
                    "{name} is encrypted with a passphrase: set TALOSPROV_STATE_PASSPHRASE"
                )));
            }
        };
        decryptor
            .decrypt_async(identities.into_iter())
            .map_err(|e| match e {
                age::DecryptError::DecryptionFailed
                | age::DecryptError::NoMatchingKeys
                | age::DecryptError::KeyDecryptionFailed
                | age::DecryptError::InvalidMac => BackupError::Key(format!(
                    "cannot decrypt {name}: {}",
                    match self.kind {
                        KeyKind::Recipients => "the age identity given does not open it",
                        KeyKind::Passphrase => "the passphrase is not the one it was sealed with",
                        KeyKind::Cluster =>
                            "the cluster's own key does not open it (the state's secrets are not \
                             the ones it was sealed with)",
                    }
                )),
                other => BackupError::Damaged {
                    name: name.to_owned(),
                    reason: other.to_string(),
                },
            })
    }
}

/// The cluster's own age identity, as `age-keygen` writes one
/// (`AGE-SECRET-KEY-1…`), for decrypting an archive with `age -d -i`.
pub fn cluster_identity_text(secret_at_rest: &Sensitive) -> Sensitive {
    Sensitive::new(encode_identity(&derive_bytes(secret_at_rest)))
}

fn derive_bytes(secret_at_rest: &Sensitive) -> [u8; 32] {
    let hk = hkdf::Hkdf::<sha2::Sha256>::new(Some(HKDF_SALT), secret_at_rest.expose().as_bytes());
    let mut okm = [0u8; 32];
    hk.expand(HKDF_INFO, &mut okm)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    okm
}

fn encode_identity(bytes: &[u8; 32]) -> String {
    let hrp = bech32::Hrp::parse("age-secret-key-").expect("a valid HRP");
    bech32::encode::<bech32::Bech32>(hrp, bytes)
        .expect("32 bytes fit a Bech32 string")
        .to_uppercase()
}

fn derived_identity(secret_at_rest: &Sensitive) -> age::x25519::Identity {
    encode_identity(&derive_bytes(secret_at_rest))
        .parse()
        .expect("an encoded X25519 secret key parses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_key_is_stable_and_its_own() {
        let a = Sensitive::new("c2VjcmV0LWF0LXJlc3QtYS0zMi1ieXRlcy1sb25nLi4=".to_owned());
        let b = Sensitive::new("c2VjcmV0LWF0LXJlc3QtYi0zMi1ieXRlcy1sb25nLi4=".to_owned());
        let text = cluster_identity_text(&a);
        assert!(
            text.expose().starts_with("AGE-SECRET-KEY-1"),
            "age-keygen's form"
        );
        assert_eq!(text.expose(), cluster_identity_text(&a).expose());
        assert_ne!(text.expose(), cluster_identity_text(&b).expose());
        let keys = Keys::cluster(&a);
        assert_eq!(keys.kind(), KeyKind::Cluster);
        assert!(!format!("{keys:?}").contains("AGE-SECRET"));
    }
}
