//! Saving an etcd snapshot to a local file through the Talos API (EtcdSnapshot),
//! before a control-plane upgrade or removal. The file holds every Kubernetes
//! secret, so it is written with mode 0600, to a temporary name first.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt as _;

use talosprov_talos::{TalosClient, TalosError};

/// Whether to save an etcd snapshot before touching a control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotPolicy {
    /// `--skip-etcd-snapshot`.
    Skip,
    /// Save into this folder (created when missing).
    SaveIn(PathBuf),
}

/// A snapshot written to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its size, bytes.
    pub bytes: u64,
}

/// Saving the snapshot failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The snapshot file being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The node did not stream the snapshot.
    #[error(transparent)]
    Talos(#[from] TalosError),
    /// The node streamed nothing.
    #[error("the node sent an empty snapshot")]
    Empty,
}

/// The snapshot file name for `hostname` before `action`, e.g.
/// `etcd-cp-1-before-talos-v1.13.8.snapshot`. Pure.
pub fn snapshot_file_name(hostname: &str, action: &str) -> String {
    let action: String = action
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("etcd-{hostname}-before-{action}.snapshot")
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError + '_ {
    move |source| SnapshotError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// Streams an etcd snapshot from `client` (a control plane that is an etcd member)
/// into `dir/name`: written to `name.part` with mode 0600, flushed, then renamed.
///
/// Errors: [`SnapshotError`]; a partial file is removed.
pub async fn save_snapshot(
    client: &TalosClient,
    dir: &Path,
    name: &str,
) -> Result<SnapshotFile, SnapshotError> {
    let path = dir.join(name);
    let part = dir.join(format!("{name}.part"));
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(write_err(dir))?;
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(&part).await.map_err(write_err(&part))?;
    let streamed = client.etcd_snapshot(&mut file).await;
    let finished = match streamed {
        Ok(0) => Err(SnapshotError::Empty),
        Ok(bytes) => match file.flush().await.and(file.sync_all().await) {
            Ok(()) => Ok(bytes),
            Err(e) => Err(write_err(&part)(e)),
        },
        Err(e) => Err(e.into()),
    };
    drop(file);
    let bytes = match finished {
        Ok(b) => b,
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(e);
        }
    };
    tokio::fs::rename(&part, &path)
        .await
        .map_err(write_err(&path))?;
    Ok(SnapshotFile { path, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_say_which_node_and_before_what() {
        assert_eq!(
            snapshot_file_name("cp-1", "talos v1.13.8"),
            "etcd-cp-1-before-talos-v1.13.8.snapshot"
        );
        assert_eq!(
            snapshot_file_name("cp-2", "removal"),
            "etcd-cp-2-before-removal.snapshot"
        );
    }
}
