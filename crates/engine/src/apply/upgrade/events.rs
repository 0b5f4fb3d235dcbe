//! What a rollout reports: one event per step and node, for the engine to record
//! in the state and show; and the error that names the node a rollout stopped at.

use crate::health::probe::HealthError;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::UpgradePath;

use super::snapshot::{SnapshotError, SnapshotFile};

/// Progress of a rollout, one event at a time, named by hostname.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeEvent {
    /// Waiting for etcd to be healthy before touching the control plane.
    WaitingForEtcd {
        /// The control plane about to be touched.
        node: String,
    },
    /// An etcd snapshot was saved.
    SnapshotSaved {
        /// The control plane it was taken from.
        node: String,
        /// Where the snapshot was written, and its size.
        file: SnapshotFile,
    },
    /// The node accepted the upgrade and is rebooting.
    Rebooting {
        /// Hostname of the node rebooting into the new version.
        node: String,
        /// The RPC path used (1.13 lifecycle or legacy).
        path: UpgradePath,
    },
    /// The node is back at the target version and healthy (and, for a control
    /// plane, etcd is healthy again). Record it in the state.
    Upgraded {
        /// Hostname of the node upgraded.
        node: String,
        /// The Talos version it reports now (`v1.13.9`).
        version: String,
    },
    /// The node already reported the target version (upgraded by an earlier,
    /// interrupted run). Record it in the state.
    AlreadyUpgraded {
        /// Hostname of the node upgraded.
        node: String,
        /// The Talos version it reports now (`v1.13.9`).
        version: String,
    },
    /// A Kubernetes roll's config was applied to the node, which is healthy again.
    ConfigApplied {
        /// Hostname of the node that took the config.
        node: String,
        /// Which phase.
        phase: KubernetesPhase,
    },
}

/// A rollout stopped at a node; the nodes after it were not touched.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The node did not answer before its upgrade.
    #[error("cannot reach {node} to upgrade it")]
    Connect {
        /// Hostname of the node that did not answer.
        node: String,
        /// The client's error.
        #[source]
        source: TalosError,
    },
    /// etcd was not healthy before touching a control plane.
    #[error("etcd is not healthy, so {node} was not touched")]
    EtcdBefore {
        /// The control plane.
        node: String,
        /// The failing checks.
        #[source]
        source: HealthError,
    },
    /// The snapshot could not be saved.
    #[error("cannot save the etcd snapshot before touching {node}")]
    Snapshot {
        /// The control plane.
        node: String,
        /// Why.
        #[source]
        source: SnapshotError,
    },
    /// The node refused or failed the upgrade (it stays on its version).
    #[error("upgrade of {node} to {image} failed")]
    Upgrade {
        /// Hostname of the node that refused or failed the upgrade.
        node: String,
        /// The installer image reference the upgrade was asked with.
        image: String,
        /// The client's error.
        #[source]
        source: TalosError,
    },
    /// The node refused the new config.
    #[error("apply-config on {node} failed")]
    Apply {
        /// Hostname of the node that refused the config.
        node: String,
        /// The client's error.
        #[source]
        source: TalosError,
    },
    /// The node did not come back at the new version in time.
    #[error("{node} did not come back at Talos {version} in time")]
    NotBack {
        /// Hostname of the node waited for.
        node: String,
        /// The Talos version waited for (`v1.13.9`).
        version: String,
        /// The deadline error (names the wait and its length).
        #[source]
        source: TalosError,
    },
    /// The node came back but was not healthy in time.
    #[error("{node} is not healthy after the change")]
    NodeUnhealthy {
        /// Hostname of the node found unhealthy.
        node: String,
        /// The failing checks.
        #[source]
        source: HealthError,
    },
    /// etcd was not healthy again after a control plane.
    #[error("etcd is not healthy after the change on {node}")]
    EtcdAfter {
        /// The control plane.
        node: String,
        /// The failing checks.
        #[source]
        source: HealthError,
    },
}

impl UpgradeError {
    /// The node the rollout stopped at.
    pub fn node(&self) -> &str {
        match self {
            UpgradeError::Connect { node, .. }
            | UpgradeError::EtcdBefore { node, .. }
            | UpgradeError::Snapshot { node, .. }
            | UpgradeError::Upgrade { node, .. }
            | UpgradeError::Apply { node, .. }
            | UpgradeError::NotBack { node, .. }
            | UpgradeError::NodeUnhealthy { node, .. }
            | UpgradeError::EtcdAfter { node, .. } => node,
        }
    }
}

/// Which phase of a Kubernetes roll a config belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesPhase {
    /// The control-plane component images.
    ControlPlaneComponents,
    /// The kubelet image.
    Kubelet,
}
