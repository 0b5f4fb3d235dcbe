//! State encryption at rest with age: an envelope keeping `version`, `lineage`
//! and `serial` in clear (GitLab needs the serial) beside the armored age
//! ciphertext of the whole state. Keys: a passphrase (scrypt) from
//! `TALOSPROV_STATE_PASSPHRASE`, or age recipients and identity files.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use age::armor::{ArmoredReader, ArmoredWriter, Format};
use age::secrecy::SecretString;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::format::{FormatError, State, check_version};

/// The passphrase variable.
pub const PASSPHRASE_VAR: &str = "TALOSPROV_STATE_PASSPHRASE";
/// A file of age recipients (`age1...`, one per line, `#` comments).
pub const RECIPIENTS_FILE_VAR: &str = "TALOSPROV_STATE_AGE_RECIPIENTS_FILE";
/// A file of age identities (`AGE-SECRET-KEY-1...`), as `age-keygen` writes.
pub const IDENTITY_FILE_VAR: &str = "TALOSPROV_STATE_AGE_IDENTITY_FILE";

/// An encrypted state as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The state format version.
    pub version: u32,
    /// The encrypted state's lineage.
    pub lineage: Uuid,
    /// The encrypted state's serial.
    pub serial: u64,
    /// Always `age`.
    pub encryption: String,
    /// The state JSON, age-encrypted and armored.
    pub encrypted_state: String,
}

impl Envelope {
    /// The envelope as pretty JSON with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("an envelope always serialises");
        out.push(b'\n');
        out
    }
}

/// A stored document: plain state or encrypted envelope.
#[derive(Debug)]
pub enum Document {
    /// Plain JSON state.
    Plain(Box<State>),
    /// An age envelope.
    Encrypted(Envelope),
}

/// Tell plain and encrypted documents apart (an envelope has
/// `encrypted_state`), checking the format version of either.
///
/// # Errors
/// [`FormatError`], including a newer format version.
pub fn decode(bytes: &[u8]) -> Result<Document, FormatError> {
    talosprov_statefile::format::check_bounds(bytes)?;
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(FormatError::Json)?;
    let version = check_version(&value)?;
    if value.get("encrypted_state").is_some() {
        let envelope = serde_json::from_value(value)
            .map_err(|source| FormatError::Shape { version, source })?;
        Ok(Document::Encrypted(envelope))
    } else {
        State::from_json(bytes).map(|s| Document::Plain(Box::new(s)))
    }
}

/// Where the keys come from, read from the environment (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// No key configured.
    None,
    /// `TALOSPROV_STATE_PASSPHRASE`.
    Passphrase(Sensitive),
    /// Age key files; at least one is set. Recipients default to the identities'
    /// public keys.
    Files {
        /// Recipients file.
        recipients: Option<PathBuf>,
        /// Identity file.
        identities: Option<PathBuf>,
    },
}

/// Encryption or decryption failed. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum EncryptError {
    /// Both a passphrase and key files are configured.
    #[error(
        "set either {PASSPHRASE_VAR} or the age key files ({RECIPIENTS_FILE_VAR}, {IDENTITY_FILE_VAR}), not both"
    )]
    TwoKeySources,
    /// An encrypted state and no key.
    #[error(
        "the state is encrypted: set {PASSPHRASE_VAR}, or {IDENTITY_FILE_VAR} for age identities"
    )]
    NoKey,
    /// A key file cannot be read or holds no key.
    #[error("cannot use the age key file {}: {reason}", path.display())]
    KeyFile {
        /// The key file's path, from the environment variable naming it.
        path: PathBuf,
        /// What is wrong (never the key itself).
        reason: String,
    },
    /// Encrypting with identities only and no recipients.
    #[error("no age recipients to encrypt to: set {RECIPIENTS_FILE_VAR} or {IDENTITY_FILE_VAR}")]
    NoRecipients,
    /// The envelope was made with a passphrase and we have identities, or the reverse.
    #[error("the state is encrypted with {found}, but the configured key is {configured}")]
    KeyKind {
        /// `a passphrase` or `an age identity`.
        found: &'static str,
        /// What the environment gives.
        configured: &'static str,
    },
    /// Wrong passphrase or identity.
    #[error("cannot decrypt the state: wrong passphrase or age identity")]
    WrongKey,
    /// The ciphertext is damaged, or age failed otherwise.
    #[error("cannot {0} the state with age")]
    Age(
        &'static str,
        #[source] Box<dyn std::error::Error + Send + Sync>,
    ),
    /// The decrypted state does not match the envelope's clear fields.
    #[error(
        "the decrypted state (lineage {inner_lineage}, serial {inner_serial}) does not match its envelope (lineage {lineage}, serial {serial})"
    )]
    EnvelopeMismatch {
        /// From the envelope.
        lineage: Uuid,
        /// From the envelope.
        serial: u64,
        /// From the decrypted state.
        inner_lineage: Uuid,
        /// From the decrypted state.
        inner_serial: u64,
    },
    /// The decrypted text is not a state.
    #[error("the decrypted state is malformed")]
    Format(#[source] FormatError),
}

/// Read the key settings from an environment map.
///
/// # Errors
/// [`EncryptError::TwoKeySources`].
pub fn key_source(env: &BTreeMap<String, String>) -> Result<KeySource, EncryptError> {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty());
    let passphrase = get(PASSPHRASE_VAR).map(Sensitive::new);
    let recipients = get(RECIPIENTS_FILE_VAR).map(PathBuf::from);
    let identities = get(IDENTITY_FILE_VAR).map(PathBuf::from);
    match (passphrase, recipients.is_some() || identities.is_some()) {
        (Some(_), true) => Err(EncryptError::TwoKeySources),
        (Some(p), false) => Ok(KeySource::Passphrase(p)),
        (None, true) => Ok(KeySource::Files {
            recipients,
            identities,
        }),
        (None, false) => Ok(KeySource::None),
    }
}

/// Keys ready to use.
pub enum StateKeys {
    /// scrypt passphrase.
    Passphrase(Sensitive),
    /// X25519 age keys.
    Age {
        /// Who can decrypt what we write.
        recipients: Vec<age::x25519::Recipient>,
        /// Our private keys.
        identities: Vec<age::x25519::Identity>,
    },
}

impl std::fmt::Debug for StateKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateKeys::Passphrase(_) => f.write_str("StateKeys::Passphrase((sensitive))"),
            StateKeys::Age {
                recipients,
                identities,
            } => write!(
                f,
                "StateKeys::Age {{ {} recipient(s), {} identity(ies) }}",
                recipients.len(),
                identities.len()
            ),
        }
    }
}

impl StateKeys {
    /// Load the keys a [`KeySource`] names (reads the key files).
    ///
    /// # Errors
    /// [`EncryptError::KeyFile`] for a missing or malformed file.
    pub fn load(source: &KeySource) -> Result<Option<StateKeys>, EncryptError> {
        match source {
            KeySource::None => Ok(None),
            KeySource::Passphrase(p) => Ok(Some(StateKeys::Passphrase(p.clone()))),
            KeySource::Files {
                recipients,
                identities,
            } => {
                let identities: Vec<age::x25519::Identity> = match identities {
                    Some(p) => parse_keys(p, "AGE-SECRET-KEY-")?,
                    None => Vec::new(),
                };
                let recipients = match recipients {
                    Some(p) => parse_keys(p, "age1")?,
                    None => identities
                        .iter()
                        .map(age::x25519::Identity::to_public)
                        .collect(),
                };
                Ok(Some(StateKeys::Age {
                    recipients,
                    identities,
                }))
            }
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            StateKeys::Passphrase(_) => "a passphrase",
            StateKeys::Age { .. } => "an age identity",
        }
    }
}

/// Parse every non-comment line of a key file as `T`.
fn parse_keys<T: std::str::FromStr>(path: &Path, prefix: &str) -> Result<Vec<T>, EncryptError> {
    let bad = |reason: String| EncryptError::KeyFile {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = crate::bounded::read_file(path, "the key file", crate::bounded::MAX_KEY_FILE_BYTES)
        .map_err(|e| bad(e.problem.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text".to_owned()))?;
    let mut keys = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with(prefix) {
            return Err(bad(format!(
                "line {} is not a key starting with {prefix}",
                n + 1
            )));
        }
        keys.push(
            line.parse()
                .map_err(|_| bad(format!("line {} is not a valid key", n + 1)))?,
        );
    }
    if keys.is_empty() {
        return Err(bad("it holds no key".to_owned()));
    }
    Ok(keys)
}

/// Encrypt any bytes (a state, a saved plan holding secrets) to the keys, as
/// armored age text.
///
/// # Errors
/// [`EncryptError::NoRecipients`] or an age failure.
pub fn seal_bytes(plaintext: &[u8], keys: &StateKeys) -> Result<String, EncryptError> {
    let encryptor = match keys {
        StateKeys::Passphrase(p) => {
            age::Encryptor::with_user_passphrase(SecretString::from(p.expose().to_owned()))
        }
        StateKeys::Age { recipients, .. } => {
            if recipients.is_empty() {
                return Err(EncryptError::NoRecipients);
            }
            age::Encryptor::with_recipients(recipients.iter().map(|r| r as &dyn age::Recipient))
                .map_err(|e| EncryptError::Age("encrypt", Box::new(e)))?
        }
    };
    let age_err = |e: std::io::Error| EncryptError::Age("encrypt", Box::new(e));
    let mut armored = Vec::new();
    let mut writer = encryptor
        .wrap_output(ArmoredWriter::wrap_output(&mut armored, Format::AsciiArmor).map_err(age_err)?)
        .map_err(age_err)?;
    writer.write_all(plaintext).map_err(age_err)?;
    writer.finish().and_then(|w| w.finish()).map_err(age_err)?;
    Ok(String::from_utf8(armored).expect("armor is ASCII"))
}

/// Decrypt armored age text made by [`seal_bytes`].
///
/// # Errors
/// [`EncryptError::WrongKey`], [`EncryptError::KeyKind`] (a passphrase where
/// age identities are configured, or the reverse), or an age failure.
pub fn open_bytes(armored: &str, keys: &StateKeys) -> Result<Vec<u8>, EncryptError> {
    let decryptor = age::Decryptor::new_buffered(ArmoredReader::new(armored.as_bytes()))
        .map_err(|e| EncryptError::Age("read", Box::new(e)))?;
    let found = if decryptor.is_scrypt() {
        "a passphrase"
    } else {
        "an age identity"
    };
    if found != keys.kind() {
        return Err(EncryptError::KeyKind {
            found,
            configured: keys.kind(),
        });
    }
    let scrypt;
    let identities: Vec<&dyn age::Identity> = match keys {
        StateKeys::Passphrase(p) => {
            scrypt = age::scrypt::Identity::new(SecretString::from(p.expose().to_owned()));
            vec![&scrypt]
        }
        StateKeys::Age { identities, .. } => {
            if identities.is_empty() {
                return Err(EncryptError::NoKey);
            }
            identities.iter().map(|i| i as &dyn age::Identity).collect()
        }
    };
    let mut reader = decryptor
        .decrypt(identities.into_iter())
        .map_err(|e| match e {
            age::DecryptError::DecryptionFailed
            | age::DecryptError::NoMatchingKeys
            | age::DecryptError::KeyDecryptionFailed
            | age::DecryptError::InvalidMac => EncryptError::WrongKey,
            other => EncryptError::Age("decrypt", Box::new(other)),
        })?;
    let mut plain = Vec::new();
    reader
        .read_to_end(&mut plain)
        .map_err(|e| EncryptError::Age("decrypt", Box::new(e)))?;
    Ok(plain)
}

/// Encrypt a state into an envelope.
///
/// # Errors
/// See [`seal_bytes`].
pub fn seal(state: &State, keys: &StateKeys) -> Result<Envelope, EncryptError> {
    Ok(Envelope {
        version: state.version,
        lineage: state.lineage,
        serial: state.serial,
        encryption: "age".to_owned(),
        encrypted_state: seal_bytes(&state.to_json(), keys)?,
    })
}

/// Decrypt an envelope and check that the state inside matches its clear
/// fields.
///
/// # Errors
/// See [`open_bytes`]; also [`EncryptError::EnvelopeMismatch`]. Nothing is
/// changed anywhere.
pub fn open(envelope: &Envelope, keys: &StateKeys) -> Result<State, EncryptError> {
    let plain = open_bytes(&envelope.encrypted_state, keys)?;
    let state = State::from_json(&plain).map_err(EncryptError::Format)?;
    if state.lineage != envelope.lineage || state.serial != envelope.serial {
        return Err(EncryptError::EnvelopeMismatch {
            lineage: envelope.lineage,
            serial: envelope.serial,
            inner_lineage: state.lineage,
            inner_serial: state.serial,
        });
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_statefile::format::sample;

    fn age_keys() -> StateKeys {
        let id = age::x25519::Identity::generate();
        StateKeys::Age {
            recipients: vec![id.to_public()],
            identities: vec![id],
        }
    }

    #[test]
    fn age_envelope_round_trips_and_hides_secrets() {
        let keys = age_keys();
        let state = sample();
        let envelope = seal(&state, &keys).unwrap();
        let bytes = envelope.to_json();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            !text.contains("s3cr3t") && !text.contains("kind: Config"),
            "{text}"
        );
        assert!(text.contains("\"serial\": 7"));
        let Document::Encrypted(back) = decode(&bytes).unwrap() else {
            panic!("expected an envelope")
        };
        assert_eq!(open(&back, &keys).unwrap(), state);
    }

    #[test]
    fn plain_state_decodes_as_plain() {
        assert!(matches!(
            decode(&sample().to_json()).unwrap(),
            Document::Plain(_)
        ));
    }

    #[test]
    fn passphrase_round_trips_and_a_wrong_one_is_named() {
        let state = sample();
        let envelope = seal(
            &state,
            &StateKeys::Passphrase(Sensitive::new("right horse")),
        )
        .unwrap();
        let back = open(
            &envelope,
            &StateKeys::Passphrase(Sensitive::new("right horse")),
        )
        .unwrap();
        assert_eq!(back, state);
        let err = open(
            &envelope,
            &StateKeys::Passphrase(Sensitive::new("wrong horse")),
        )
        .unwrap_err();
        assert!(matches!(err, EncryptError::WrongKey), "{err:?}");
        let err = open(&envelope, &age_keys()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the state is encrypted with a passphrase, but the configured key is an age identity"
        );
    }

    #[test]
    fn wrong_age_identity_is_refused() {
        let envelope = seal(&sample(), &age_keys()).unwrap();
        assert!(matches!(
            open(&envelope, &age_keys()),
            Err(EncryptError::WrongKey)
        ));
    }

    #[test]
    fn envelope_with_tampered_serial_is_refused() {
        let keys = age_keys();
        let mut envelope = seal(&sample(), &keys).unwrap();
        envelope.serial += 1;
        assert!(matches!(
            open(&envelope, &keys),
            Err(EncryptError::EnvelopeMismatch { .. })
        ));
    }

    #[test]
    fn key_files_are_read_and_recipients_default_to_identities() {
        let dir = tempfile::tempdir().unwrap();
        let id = age::x25519::Identity::generate();
        let path = dir.path().join("key.txt");
        std::fs::write(
            &path,
            format!(
                "# created: today\n{}\n",
                age::secrecy::ExposeSecret::expose_secret(&id.to_string())
            ),
        )
        .unwrap();
        let env = BTreeMap::from([(IDENTITY_FILE_VAR.to_owned(), path.display().to_string())]);
        let keys = StateKeys::load(&key_source(&env).unwrap())
            .unwrap()
            .unwrap();
        let envelope = seal(&sample(), &keys).unwrap();
        assert_eq!(open(&envelope, &keys).unwrap(), sample());

        std::fs::write(&path, "AGE-SECRET-KEY-1NOPE\n").unwrap();
        let err = StateKeys::load(&key_source(&env).unwrap()).unwrap_err();
        assert!(
            err.to_string().ends_with("line 1 is not a valid key"),
            "{err}"
        );
    }

    #[test]
    fn passphrase_and_key_files_together_are_refused() {
        let env = BTreeMap::from([
            (PASSPHRASE_VAR.to_owned(), "p".to_owned()),
            (RECIPIENTS_FILE_VAR.to_owned(), "r.txt".to_owned()),
        ]);
        assert!(matches!(key_source(&env), Err(EncryptError::TwoKeySources)));
    }
}
