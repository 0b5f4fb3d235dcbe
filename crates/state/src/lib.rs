//! The state's storage: the backends (`local` file, `http` as GitLab serves
//! it), the lock holder as the system tells it (`holder`), age encryption at
//! rest (`encrypt`), and `StateStore`, which joins them. Only this crate touches
//! the state file. The format itself is pure and lives in
//! `talosprov_core::state`, re-exported here.

#![warn(missing_docs)]

use std::future::Future;

pub mod encrypt;
pub mod holder;
pub mod http;
pub mod local;
pub mod store;

pub use store::{Loaded, StateStore, StoreError};
pub use talosprov_core::state::{
    Address, BackendConfig, CreateIntent, FORMAT_VERSION, HolderProcess, HttpBackendConfig,
    LockHeld, LockInfo, Sensitive, State, StateSection, TakenOver,
};
pub use talosprov_core::state::{address, config, format, intent, lock, summary};

/// Where state documents are kept: get, put, lock and unlock raw bytes (plain
/// JSON or an encrypted envelope, both with top-level `serial` and `lineage`).
/// Follows OpenTofu's `statemgr` (Locker) and `remote.Client`.
pub trait Backend: Send + Sync {
    /// A short description for messages: the state path or the address.
    fn describe(&self) -> String;

    /// The stored document; `None` when there is no state yet.
    fn get(&self) -> impl Future<Output = Result<Option<Vec<u8>>, BackendError>> + Send;

    /// Replace the stored document (atomically where the backend can).
    fn put(&self, document: &[u8]) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Take the lock for `info.id`; [`BackendError::Locked`] names the holder
    /// when someone else has it. A lock left by a holder on this host whose
    /// process is gone is taken over, and returned so the run can say so.
    fn lock(
        &self,
        info: &LockInfo,
    ) -> impl Future<Output = Result<Option<TakenOver>, BackendError>> + Send;

    /// Release the lock `id`: the one this backend took, or another one
    /// (`force-unlock`). A different ID is refused, and so is a lock whose
    /// holder still runs ([`BackendError::HolderRunning`]).
    fn unlock(&self, id: &str) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// How to restore the stored state when it cannot be read (it names the
    /// backup, or where earlier versions are kept); `None` when the backend
    /// keeps none.
    fn restore_hint(&self) -> Option<String> {
        None
    }
}

/// A backend failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// Someone else holds the lock.
    #[error("{0}")]
    Locked(Box<LockHeld>),
    /// `force-unlock` of a lock whose holder still runs: releasing it would let
    /// two runs change the cluster at once.
    #[error(
        "refusing to release lock {}: it is held by {}, which is still running; stop that \
         run first (or let it finish), and its lock is released with it",
        .0.holder.id,
        .0.holder_summary()
    )]
    HolderRunning(Box<LockHeld>),
    /// The local file backend failed.
    #[error(transparent)]
    Local(#[from] local::LocalError),
    /// The http backend failed.
    #[error(transparent)]
    Http(#[from] http::HttpError),
}

impl BackendError {
    /// The holder when this is a lock conflict.
    pub fn lock_held(&self) -> Option<&LockHeld> {
        match self {
            BackendError::Locked(h) => Some(h),
            _ => None,
        }
    }
}

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
