//! [`BackupError`]: what went wrong with a backup or its destination.

/// What went wrong with a backup or its destination. Never carries key
/// material or snapshot content.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The destination text is neither a folder nor `s3://bucket[/prefix]`.
    #[error("backup destination {text:?}: {reason}")]
    Location {
        /// The destination as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store refused or failed a request (S3 403 or 500, an unreachable
    /// endpoint, a folder that cannot be written).
    #[error("{action} {location}: {}", chain(.cause))]
    Store {
        /// What was being done (`cannot list`, `cannot write …`).
        action: String,
        /// The destination.
        location: String,
        /// The store's error, shown with its sources by the message (so not
        /// also a `source()`: a report of the chain would repeat it).
        cause: object_store::Error,
    },
    /// The destination cannot be used at all: a folder that does not exist,
    /// or S3 without credentials.
    #[error("cannot use {location}: {reason}")]
    Unusable {
        /// The destination.
        location: String,
        /// Why.
        reason: &'static str,
    },
    /// A folder's archive or manifest that is not a regular file.
    #[error("cannot read {path}: it is {what}, not a regular file")]
    NotAFile {
        /// The file.
        path: String,
        /// What it is ("a FIFO", "a device file", "a folder").
        what: &'static str,
    },
    /// No archive of this cluster in the destination.
    #[error("there is no etcd snapshot of cluster {cluster} in {location}")]
    NoArchive {
        /// The cluster name.
        cluster: String,
        /// The destination.
        location: String,
    },
    /// A manifest that cannot be read.
    #[error("the manifest {name} in {location} is not valid: {reason}")]
    Manifest {
        /// The manifest's object name.
        name: String,
        /// The destination.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// A key that cannot be used, or that does not open the archive.
    #[error("{0}")]
    Key(String),
    /// The archive is not an age file, or its ciphertext is damaged.
    #[error("the snapshot archive {name} cannot be decrypted: {reason}")]
    Damaged {
        /// The archive's object name.
        name: String,
        /// age's reason.
        reason: String,
    },
    /// The plaintext's digest differs from the manifest's.
    #[error(
        "the snapshot {name} fails its checksum: the manifest says SHA-256 {expected} ({expected_bytes} bytes), the archive holds {found} ({found_bytes} bytes)"
    )]
    Checksum {
        /// The archive's object name.
        name: String,
        /// The manifest's digest.
        expected: String,
        /// The manifest's size.
        expected_bytes: u64,
        /// The digest of what was decrypted.
        found: String,
        /// What was decrypted, bytes.
        found_bytes: u64,
    },
    /// Encrypting or streaming failed.
    #[error("{0}")]
    Io(String),
}

/// `e` and each of its sources, joined with `: `, a source left out when the
/// text before it already ends with it (as object_store's errors repeat
/// reqwest's): "error sending request: client error (Connect): tcp connect
/// error: Connection refused".
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !part.is_empty() && !text.ends_with(&part) && !text.contains(&format!("{part}:")) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}
