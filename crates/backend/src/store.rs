//! `StateStore`: a backend plus the optional age keys. Loads a state whether
//! plain or encrypted, and saves it with the serial incremented, keeping the
//! encryption it had: switching it is `state encrypt|decrypt`, never a side effect.

use std::sync::Mutex;

use uuid::Uuid;

use super::backend::{Backend, BackendError};
use super::encrypt::{self, Document, EncryptError, StateKeys};
use talosprov_statefile::format::{FormatError, State};
use talosprov_statefile::lock::{LockHeld, LockInfo, TakenOver};

/// Pacing of the wait for a held state lock: 250 ms doubling up to 8 s
/// (OpenTofu's `statemgr.LockWithContext` waits 1 s to 16 s).
pub const LOCK_RETRY: talosprov_retry::Backoff = talosprov_retry::Backoff {
    initial: std::time::Duration::from_millis(250),
    max: std::time::Duration::from_secs(8),
};

/// A state as loaded, and whether it was stored encrypted.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The state, decrypted and checked against the format version.
    pub state: State,
    /// Whether it was an age envelope.
    pub encrypted: bool,
}

/// Loading or saving the state failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The backend failed (including a lock conflict).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The stored document is not a state this build reads. Never taken as
    /// "no state": the advice says how to restore it.
    #[error("cannot read the state in {location}{advice}")]
    Format {
        /// The backend's description.
        location: String,
        /// `: <how to restore it>` ([`Backend::restore_hint`]), or empty.
        advice: String,
        /// Why.
        #[source]
        source: FormatError,
    },
    /// Saving a state of another lineage over the one loaded.
    #[error(
        "refusing to overwrite the state in {location}: it has lineage {stored}, the state \
         being saved has lineage {saving} (a different cluster)"
    )]
    LineageMismatch {
        /// The backend's description.
        location: String,
        /// The lineage loaded or last saved.
        stored: Uuid,
        /// The lineage being saved.
        saving: Uuid,
    },
    /// Encryption or decryption failed; nothing was written.
    #[error("cannot use the encrypted state in {location}")]
    Encryption {
        /// The backend's description.
        location: String,
        /// Why.
        #[source]
        source: EncryptError,
    },
}

/// The state behind a backend, with the keys to read and write it.
#[derive(Debug)]
pub struct StateStore<B> {
    backend: B,
    keys: Option<StateKeys>,
    /// The lineage last loaded or saved: a save of another lineage is refused.
    lineage: Mutex<Option<Uuid>>,
}

impl<B: Backend> StateStore<B> {
    /// A store over `backend`; `keys` are needed for encrypted states.
    pub fn new(backend: B, keys: Option<StateKeys>) -> Self {
        StateStore {
            backend,
            keys,
            lineage: Mutex::new(None),
        }
    }

    /// The backend the store reads and writes through (for its description
    /// and lock operations).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Whether keys are configured.
    pub fn has_keys(&self) -> bool {
        self.keys.is_some()
    }

    fn crypt_err(&self, source: EncryptError) -> StoreError {
        StoreError::Encryption {
            location: self.backend.describe(),
            source,
        }
    }

    /// Read the state; `None` when there is none yet.
    ///
    /// # Errors
    /// [`StoreError`]: a backend failure, a newer format, an encrypted state
    /// without keys or with the wrong key.
    pub async fn load(&self) -> Result<Option<Loaded>, StoreError> {
        let Some(bytes) = self.backend.get().await? else {
            return Ok(None);
        };
        let loaded = self.decode(&bytes)?;
        *self.lineage.lock().expect("lineage poisoned") = Some(loaded.state.lineage);
        Ok(Some(loaded))
    }

    fn decode(&self, bytes: &[u8]) -> Result<Loaded, StoreError> {
        let document = encrypt::decode(bytes).map_err(|source| {
            // A newer format is read by upgrading talosprov, not by restoring.
            let advice = match (&source, self.backend.restore_hint()) {
                (FormatError::NewerVersion { .. }, _) | (_, None) => String::new(),
                (_, Some(hint)) => format!(": it is not a state talosprov can read; {hint}"),
            };
            StoreError::Format {
                location: self.backend.describe(),
                advice,
                source,
            }
        })?;
        match document {
            Document::Plain(state) => Ok(Loaded {
                state: *state,
                encrypted: false,
            }),
            Document::Encrypted(envelope) => {
                let keys = self
                    .keys
                    .as_ref()
                    .ok_or_else(|| self.crypt_err(EncryptError::NoKey))?;
                let state = encrypt::open(&envelope, keys).map_err(|e| self.crypt_err(e))?;
                Ok(Loaded {
                    state,
                    encrypted: true,
                })
            }
        }
    }

    /// Write `state` with its serial incremented and this talosprov's version,
    /// encrypted or not. On failure the serial is put back and the stored
    /// state is unchanged.
    ///
    /// # Errors
    /// [`StoreError`]: another lineage than the one loaded, no keys for an
    /// encrypted save, or a backend failure.
    pub async fn save(&self, state: &mut State, encrypted: bool) -> Result<(), StoreError> {
        if let Some(stored) = *self.lineage.lock().expect("lineage poisoned")
            && stored != state.lineage
        {
            return Err(StoreError::LineageMismatch {
                location: self.backend.describe(),
                stored,
                saving: state.lineage,
            });
        }
        state.serial += 1;
        let written_by = std::mem::replace(
            &mut state.talosprov_version,
            env!("CARGO_PKG_VERSION").to_owned(),
        );
        let result = self.write(state, encrypted).await;
        match &result {
            Ok(()) => *self.lineage.lock().expect("lineage poisoned") = Some(state.lineage),
            Err(_) => {
                state.serial -= 1;
                state.talosprov_version = written_by;
            }
        }
        result
    }

    async fn write(&self, state: &State, encrypted: bool) -> Result<(), StoreError> {
        let bytes = if encrypted {
            let keys = self
                .keys
                .as_ref()
                .ok_or_else(|| self.crypt_err(EncryptError::NoKey))?;
            encrypt::seal(state, keys)
                .map_err(|e| self.crypt_err(e))?
                .to_json()
        } else {
            state.to_json()
        };
        self.backend.put(&bytes).await?;
        Ok(())
    }

    /// Take the state lock; a lock left by a dead holder of this host is taken
    /// over and returned, for the warning.
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder, or a backend failure.
    pub async fn lock(&self, info: &LockInfo) -> Result<Option<TakenOver>, StoreError> {
        Ok(self.backend.lock(info).await?)
    }

    /// Take the state lock, trying again while another run holds it until
    /// `timeout` has passed (`-lock-timeout`; zero tries once), paced by
    /// [`LOCK_RETRY`]. `on_held` is called once per holder seen, before the
    /// first wait for it (to say whom the run waits for).
    ///
    /// # Errors
    /// [`BackendError::Locked`] naming the holder still there at the
    /// deadline, or a backend failure.
    pub async fn lock_waiting(
        &self,
        info: &LockInfo,
        timeout: std::time::Duration,
        mut on_held: impl FnMut(&LockHeld),
    ) -> Result<Option<TakenOver>, StoreError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut attempt = 0u32;
        let mut told: Option<String> = None;
        loop {
            match self.backend.lock(info).await {
                Ok(taken_over) => return Ok(taken_over),
                Err(BackendError::Locked(held)) => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        return Err(BackendError::Locked(held).into());
                    }
                    if told.as_deref() != Some(held.holder.id.as_str()) {
                        on_held(&held);
                        told = Some(held.holder.id.clone());
                    }
                    tokio::time::sleep(LOCK_RETRY.delay(attempt).min(deadline - now)).await;
                    attempt = attempt.saturating_add(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Release the lock `id`.
    ///
    /// # Errors
    /// A backend failure or a lock ID mismatch.
    pub async fn unlock(&self, id: &str) -> Result<(), StoreError> {
        Ok(self.backend.unlock(id).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::LocalBackend;
    use talosprov_statefile::format::sample;

    fn age_keys() -> StateKeys {
        let id = age::x25519::Identity::generate();
        StateKeys::Age {
            recipients: vec![id.to_public()],
            identities: vec![id],
        }
    }

    #[tokio::test]
    async fn save_increments_serial_and_load_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(LocalBackend::new(dir.path().join("s.tfstate")), None);
        assert!(store.load().await.unwrap().is_none());
        let mut state = sample();
        store.save(&mut state, false).await.unwrap();
        assert_eq!(state.serial, 8);
        let loaded = store.load().await.unwrap().unwrap();
        assert_eq!(
            loaded,
            Loaded {
                state,
                encrypted: false
            }
        );
    }

    #[tokio::test]
    async fn saving_another_lineage_over_the_loaded_state_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::new(LocalBackend::new(dir.path().join("s.tfstate")), None);
        store.save(&mut sample(), false).await.unwrap();
        let mut other = State::new(Uuid::from_u128(99));
        let err = store.save(&mut other, false).await.unwrap_err();
        assert!(matches!(err, StoreError::LineageMismatch { .. }), "{err}");
        assert_eq!(other.serial, 0);
        assert_eq!(store.load().await.unwrap().unwrap().state.serial, 8);
    }

    #[tokio::test]
    async fn wrong_key_leaves_the_encrypted_state_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.tfstate");
        let store = StateStore::new(LocalBackend::new(path.clone()), Some(age_keys()));
        store.save(&mut sample(), true).await.unwrap();
        let before = std::fs::read(&path).unwrap();
        assert!(!String::from_utf8_lossy(&before).contains("s3cr3t"));

        let other = StateStore::new(LocalBackend::new(path.clone()), Some(age_keys()));
        let err = other.load().await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Encryption {
                    source: EncryptError::WrongKey,
                    ..
                }
            ),
            "{err:?}"
        );
        let mut s = sample();
        let keyless = StateStore::new(LocalBackend::new(path.clone()), None);
        assert!(keyless.save(&mut s, true).await.is_err());
        assert_eq!(s.serial, 7, "a failed save puts the serial back");
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
