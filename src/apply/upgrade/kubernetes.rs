//! A Kubernetes version change: the new machine configs (control-plane component
//! images, kubelet image) applied node by node with no reboot, control planes
//! first, behind the same etcd gate as a Talos upgrade. The bootstrap manifests
//! (kube-proxy, CoreDNS) are not synced through the Kubernetes API here.

use crate::health::ClusterNode;
use crate::talos::{ApplyMode, ApplyOptions, ClientCredentials};

use super::{
    RolloutOptions, UpgradeError, UpgradeEvent, after_change, before_control_plane, connect,
    rollout_waves,
};

/// One node's new machine config. The bytes hold the cluster's secrets: they are
/// sent to the node and never printed.
#[derive(Clone)]
pub struct ConfigUpdate {
    /// The node.
    pub node: ClusterNode,
    /// The whole rendered machine config (YAML, several documents allowed).
    pub config: Vec<u8>,
}

impl std::fmt::Debug for ConfigUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigUpdate")
            .field("node", &self.node)
            .field(
                "config",
                &format_args!("(sensitive, {} bytes)", self.config.len()),
            )
            .finish()
    }
}

/// The configs of a Kubernetes version change, in the two phases talosctl's
/// `upgrade-k8s` uses, so that no kubelet is ever newer than an API server it may
/// reach (Kubernetes version skew policy).
#[derive(Debug, Clone)]
pub struct KubernetesRoll {
    /// Phase 1, control planes only: configs with the new kube-apiserver,
    /// kube-controller-manager and kube-scheduler images and the old kubelet image.
    /// Empty to go straight to phase 2 (a patch release, say).
    pub control_plane_components: Vec<ConfigUpdate>,
    /// Phase 2, every node: the final configs, with the new kubelet image.
    pub kubelet: Vec<ConfigUpdate>,
}

/// Which phase of a Kubernetes roll a config belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubernetesPhase {
    /// The control-plane component images.
    ControlPlaneComponents,
    /// The kubelet image.
    Kubelet,
}

/// Applies a Kubernetes version change with mode NO_REBOOT, one node at a time:
/// phase 1 on the control planes, then phase 2 on the control planes and then the
/// workers (each in the order given). Before each control plane etcd must be
/// healthy; an etcd snapshot is saved before the first one unless skipped. After
/// each node it must answer healthy at `talos_version`, and etcd be healthy again.
/// Stops at the first failure; the nodes after it keep their config.
///
/// Errors: [`UpgradeError`] naming the node; [`UpgradeError::Apply`] when Talos
/// refuses the config or says it would need a reboot.
pub async fn upgrade_kubernetes(
    cluster: &[ClusterNode],
    roll: &KubernetesRoll,
    talos_version: &str,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    let one_at_a_time = std::num::NonZeroUsize::MIN;
    let components = roll
        .control_plane_components
        .iter()
        .filter(|u| u.node.is_control_plane())
        .map(|u| (u, KubernetesPhase::ControlPlaneComponents));
    let kubelet = rollout_waves(&roll.kubelet, |u| &u.node, one_at_a_time)
        .into_iter()
        .flatten()
        .map(|u| (u, KubernetesPhase::Kubelet));
    let mut snapshot_taken = false;
    for (update, phase) in components.chain(kubelet) {
        let node = &update.node;
        let client = connect(node, credentials).await?;
        if node.is_control_plane() {
            let snapshot = (!snapshot_taken).then_some("kubernetes-upgrade");
            before_control_plane(
                cluster,
                node,
                &client,
                snapshot,
                credentials,
                options,
                on_event,
            )
            .await?;
            snapshot_taken = true;
        }
        let apply = ApplyOptions {
            mode: ApplyMode::NoReboot,
            dry_run: false,
            try_mode_timeout: None,
        };
        client
            .apply_configuration(&update.config, &apply)
            .await
            .map_err(|source| UpgradeError::Apply {
                node: node.hostname.clone(),
                source,
            })?;
        after_change(cluster, node, talos_version, credentials, options).await?;
        on_event(UpgradeEvent::ConfigApplied {
            node: node.hostname.clone(),
            phase,
        });
    }
    Ok(())
}
