//! Rolling Talos upgrades to `<factory host>/nocloud-installer/<schematic>:<version>`:
//! control planes one at a time and first, each between two etcd health gates and
//! after an etcd snapshot; then workers, `max_parallel` at a time. Progress goes to a
//! callback per node, so the engine can record each upgraded node in the state.

mod events;
mod kubernetes;
mod rolling;
mod snapshot;
pub use events::{KubernetesPhase, UpgradeError, UpgradeEvent};
pub use kubernetes::{
    ConfigUpdate, KubernetesRoll, PhaseOneError, kubelet_image, upgrade_kubernetes,
    with_kubelet_image,
};
pub use rolling::{RolloutOptions, UpgradeNode, UpgradeTarget, rolling_upgrade, rollout_waves};
pub(crate) use rolling::{after_change, before_control_plane, connect};
pub use snapshot::{SnapshotError, SnapshotFile, SnapshotPolicy, save_snapshot, snapshot_reason};
