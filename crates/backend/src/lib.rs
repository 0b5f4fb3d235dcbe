//! The state's storage: the backends (`local` file, `http` as GitLab serves
//! it), the lock holder as the system tells it (`holder`), age encryption at
//! rest (`encrypt`), the bounded reader of every file it reads (`bounded`),
//! and `StateStore`, which joins them. Only this crate touches
//! the state file. The format itself is pure and lives in
//! `talosprov_statefile`.

#![warn(missing_docs)]

pub mod backend;
pub mod bounded;
pub mod encrypt;
pub mod holder;
pub mod http;
pub mod local;
pub mod store;

use crate::backend::{Backend, BackendError};

use talosprov_statefile::config::BackendConfig;
use talosprov_statefile::lock::{LockInfo, TakenOver};

/// The backend chosen by [`BackendConfig`]: local file or http.
#[derive(Debug)]
pub enum StateBackend {
    /// `talosprov.tfstate` on disk.
    Local(local::LocalBackend),
    /// The Terraform http protocol (GitLab-managed state).
    Http(Box<http::HttpBackend>),
}

impl StateBackend {
    /// Build the backend a resolved configuration names.
    ///
    /// # Errors
    /// [`http::HttpError::Client`] when the HTTP client cannot be built.
    pub fn open(config: BackendConfig) -> Result<Self, BackendError> {
        Ok(match config {
            BackendConfig::Local { path } => StateBackend::Local(local::LocalBackend::new(path)),
            BackendConfig::Http(c) => StateBackend::Http(Box::new(http::HttpBackend::new(*c)?)),
        })
    }
}

impl Backend for StateBackend {
    fn describe(&self) -> String {
        match self {
            StateBackend::Local(b) => b.describe(),
            StateBackend::Http(b) => b.describe(),
        }
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        match self {
            StateBackend::Local(b) => b.get().await,
            StateBackend::Http(b) => b.get().await,
        }
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        match self {
            StateBackend::Local(b) => b.put(document).await,
            StateBackend::Http(b) => b.put(document).await,
        }
    }

    fn restore_hint(&self) -> Option<String> {
        match self {
            StateBackend::Local(b) => Backend::restore_hint(b),
            StateBackend::Http(b) => Backend::restore_hint(b.as_ref()),
        }
    }

    async fn lock(&self, info: &LockInfo) -> Result<Option<TakenOver>, BackendError> {
        match self {
            StateBackend::Local(b) => b.lock(info).await,
            StateBackend::Http(b) => b.lock(info).await,
        }
    }

    async fn unlock(&self, id: &str) -> Result<(), BackendError> {
        match self {
            StateBackend::Local(b) => b.unlock(id).await,
            StateBackend::Http(b) => b.unlock(id).await,
        }
    }
}
