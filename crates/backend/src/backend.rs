//! What a state backend is: the [`Backend`] trait the local file and the
//! http backend implement, and their errors. Follows OpenTofu's `statemgr`
//! (Locker) and `remote.Client`.

use std::future::Future;
use std::io;
use std::path::PathBuf;

use reqwest::StatusCode;

use talosprov_statefile::lock::{LockHeld, LockInfo, TakenOver};

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
    Local(#[from] LocalError),
    /// The http backend failed.
    #[error(transparent)]
    Http(#[from] HttpError),
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

impl From<crate::bounded::FileError> for BackendError {
    fn from(e: crate::bounded::FileError) -> Self {
        BackendError::Local(LocalError::File(e))
    }
}

/// A local backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file operation failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done, e.g. `write the state file`.
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A file (the state, its backup, the lock file) is not a regular file,
    /// or is over its limit ([`crate::bounded`]); the message names it.
    #[error(transparent)]
    File(#[from] crate::bounded::FileError),
    /// `unlock` named another lock than the one recorded.
    #[error(
        "lock ID {requested} does not match the lock on {} (held with ID {held})",
        path.display()
    )]
    LockMismatch {
        /// The state file.
        path: PathBuf,
        /// The ID given.
        requested: String,
        /// The ID recorded in the lock file.
        held: String,
    },
    /// `unlock` when there is no lock.
    #[error("the state {} is not locked", path.display())]
    NotLocked {
        /// The state file.
        path: PathBuf,
    },
    /// The state file is empty or blank: never read as "no state", since a
    /// run would then start a new cluster with new secrets over it.
    #[error(
        "the state file {} is empty: talosprov does not read it as \"no state\", which \
         would start a new cluster with new secrets; {restore}",
        path.display()
    )]
    EmptyState {
        /// The state file.
        path: PathBuf,
        /// How to restore it ([`crate::local::LocalBackend::restore_hint`]).
        restore: String,
    },
}

/// An http backend request failed. Messages name the method and URL, never
/// the credentials.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for the state backend")]
    Client(#[source] reqwest::Error),
    /// A configured method is not a valid HTTP method.
    #[error("{0:?} is not a valid HTTP method")]
    Method(String),
    /// No answer (connection refused or lost), after every retry.
    #[error("{what}: {method} {url} failed after {attempts} attempt(s)")]
    Transport {
        /// What was being done, e.g. `save the state`.
        what: &'static str,
        /// The request method.
        method: String,
        /// The request URL.
        url: String,
        /// Attempts made (1 + retries).
        attempts: u32,
        /// The last error.
        #[source]
        source: reqwest::Error,
    },
    /// 401 or 403.
    #[error(
        "{what}: {method} {url} was refused with HTTP {status}: check TF_HTTP_USERNAME and \
         TF_HTTP_PASSWORD (in GitLab CI: gitlab-ci-token and $CI_JOB_TOKEN)"
    )]
    Auth {
        /// What was being done.
        what: &'static str,
        /// The request method.
        method: String,
        /// The request URL.
        url: String,
        /// 401 or 403.
        status: StatusCode,
    },
    /// Any other unexpected status.
    #[error("{what}: {method} {url} answered HTTP {status}{detail}")]
    Status {
        /// What was being done.
        what: &'static str,
        /// The request method.
        method: String,
        /// The request URL.
        url: String,
        /// The HTTP status the backend answered with.
        status: StatusCode,
        /// `: <start of the body>` when the server said why.
        detail: String,
    },
    /// The server answered 200 with an empty body. A server with no state
    /// answers 404 (GitLab: 204 for a state created by a lock and never
    /// written); an empty 200 is a state that did not come through (GitLab
    /// reached without its Workhorse answers so for a state kept in object
    /// storage), never "no state".
    #[error(
        "read the state: GET {url} answered HTTP 200 with an empty body, which is not a state; \
         talosprov does not take it as \"no state\", which would start a new cluster with new \
         secrets. A server without this state answers 404. Check the address (GitLab sends a \
         state kept in object storage only through its own front end, not from a Rails \
         worker reached directly), then run the command again"
    )]
    EmptyBody {
        /// The state URL.
        url: String,
    },
    /// The answer's body is longer than [`crate::bounded::MAX_STATE_BYTES`]:
    /// reading stopped there.
    #[error(
        "{what}: {method} {url} answered with a body of {bytes} bytes or more, over \
         talosprov's limit of {} for a state",
        crate::bounded::size_text(*limit)
    )]
    TooLarge {
        /// What was being done.
        what: &'static str,
        /// The request method.
        method: String,
        /// The request URL, without credentials.
        url: String,
        /// The size seen: the `Content-Length`, or the limit plus one.
        bytes: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// `force-unlock` on a state that is not locked.
    #[error("the state at {url} is not locked")]
    NotLocked {
        /// The state URL.
        url: String,
    },
    /// The state read does not match its `Content-MD5` header.
    #[error("the state from {url} does not match its Content-MD5 header (corrupted in transit)")]
    Md5Mismatch {
        /// The state URL.
        url: String,
    },
    /// The server keeps the lock: it is held with another ID (GitLab: 409).
    #[error(
        "the state server refused to release lock {requested}: the lock is held with another ID"
    )]
    UnlockRefused {
        /// The ID given.
        requested: String,
    },
    /// `unlock` named a lock ID other than the one this run holds.
    #[error("lock ID {requested} is not the lock this run holds ({held})")]
    LockMismatch {
        /// The ID given.
        requested: String,
        /// The ID held.
        held: String,
    },
}
