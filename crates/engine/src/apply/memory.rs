//! An in-memory state backend for the engine's unit tests: every document
//! saved is kept, and one save can be made to fail as a crash of the disk
//! would.

use std::sync::{Arc, Mutex};

use talosprov_backend::backend::{Backend, BackendError};
use talosprov_statefile::format::State;
use talosprov_statefile::lock::{LockInfo, TakenOver};

/// A state backend in memory that keeps every document saved, and can fail
/// the save numbered `fail_at` (1-based) as a crash of the disk would.
#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) saves: Mutex<Vec<Vec<u8>>>,
    pub(crate) fail_at: Option<usize>,
}

impl Memory {
    pub(crate) fn states(&self) -> Vec<State> {
        self.saves
            .lock()
            .expect("saves")
            .iter()
            .map(|b| State::from_json(b).expect("a state"))
            .collect()
    }

    /// The pools recorded in the last saved state.
    pub(crate) fn pools(&self) -> Vec<String> {
        self.states()
            .last()
            .map(|s| s.resources.pools.keys().cloned().collect())
            .unwrap_or_default()
    }
}

impl Backend for Memory {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        Ok(self.saves.lock().expect("saves").last().cloned())
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        let mut saves = self.saves.lock().expect("saves");
        if self.fail_at == Some(saves.len() + 1) {
            return Err(BackendError::Local(
                talosprov_backend::backend::LocalError::Io {
                    action: "write the state",
                    path: "memory".into(),
                    source: std::io::Error::other("disk gone"),
                },
            ));
        }
        saves.push(document.to_vec());
        Ok(())
    }

    async fn lock(&self, _: &LockInfo) -> Result<Option<TakenOver>, BackendError> {
        Ok(None)
    }

    async fn unlock(&self, _: &str) -> Result<(), BackendError> {
        Ok(())
    }
}

/// The in-memory backend shared between the test and the store.
pub(crate) struct SharedMemory(pub(crate) Arc<Memory>);

impl Backend for SharedMemory {
    fn describe(&self) -> String {
        self.0.describe()
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        self.0.get().await
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        self.0.put(document).await
    }

    async fn lock(&self, info: &LockInfo) -> Result<Option<TakenOver>, BackendError> {
        self.0.lock(info).await
    }

    async fn unlock(&self, id: &str) -> Result<(), BackendError> {
        self.0.unlock(id).await
    }
}
