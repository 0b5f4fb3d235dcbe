//! The etcd snapshot apply takes before touching a control plane (an
//! upgrade, a removal): streamed through the cluster's [`Archiver`],
//! age-encrypted before it leaves the process, into the `backup:`
//! destination (else the local default folder), with its manifest. The
//! snapshot holds every Kubernetes Secret: it is never written in clear.

use std::sync::Arc;

use talosprov_talos::client::TalosClient;

use crate::backups::{Archiver, Live};

/// Whether to save an etcd snapshot before touching a control plane.
#[derive(Debug, Clone)]
pub enum SnapshotPolicy {
    /// `--skip-etcd-snapshot`.
    Skip,
    /// Archive it with this archiver.
    Archive(Arc<Archiver>),
}

/// A snapshot saved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Where it is: the destination and the archive's name
    /// (`s3://backups/lab/etcd-20261205T191500.123Z-lab-r1234.snapshot.age`).
    pub archive: String,
    /// The snapshot's size before encryption, bytes.
    pub bytes: u64,
}

/// Saving the snapshot failed (nothing is left in the destination); the
/// message carries the node's or the destination's reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SnapshotError(pub String);

/// The reason a snapshot before `action` carries in its manifest:
/// `before talos v1.13.8 on cp-1`. Pure.
pub fn snapshot_reason(hostname: &str, action: &str) -> String {
    format!("before {action} on {hostname}")
}

/// Streams an etcd snapshot from `client` (a control plane that is an etcd
/// member, `node`) into `archiver`'s destination, with `reason` and the
/// node's Talos version in its manifest.
///
/// # Errors
/// [`SnapshotError`]: the node's stream or the destination failed.
pub async fn save_snapshot(
    client: &TalosClient,
    archiver: &Archiver,
    node: &str,
    reason: &str,
) -> Result<SnapshotFile, SnapshotError> {
    let talos_version = client.version().await.map(|v| v.tag).unwrap_or_default();
    let live = archiver.live().await.unwrap_or_else(|why| {
        tracing::warn!(error = %why, "the etcd revision is not known: the snapshot is named r0");
        Live::default()
    });
    let taken = archiver
        .take(client, node, &talos_version, &live, reason)
        .await
        .map_err(|e| SnapshotError(format!("{e:#}")))?;
    if let Some(why) = &taken.prune_error {
        tracing::warn!(error = %why, "the snapshot is saved, but retention could not finish");
    }
    let location = taken.location.trim_end_matches('/');
    Ok(SnapshotFile {
        archive: format!("{location}/{}", taken.name.archive()),
        bytes: taken.manifest.plaintext_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reasons_say_which_node_and_before_what() {
        assert_eq!(
            snapshot_reason("cp-1", "talos v1.13.8"),
            "before talos v1.13.8 on cp-1"
        );
        assert_eq!(snapshot_reason("cp-2", "removal"), "before removal on cp-2");
    }
}
