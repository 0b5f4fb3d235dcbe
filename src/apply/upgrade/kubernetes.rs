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

/// Applies each node's new config with mode NO_REBOOT, one node at a time,
/// control planes first (in the order given), then workers. Before each control
/// plane etcd must be healthy (and a snapshot is saved unless skipped); after each
/// node it must answer healthy at `talos_version`, and etcd be healthy again.
/// Stops at the first failure; the nodes after it keep their config.
///
/// Errors: [`UpgradeError`] naming the node; [`UpgradeError::Apply`] when Talos
/// refuses the config or says it would need a reboot.
pub async fn upgrade_kubernetes(
    cluster: &[ClusterNode],
    updates: &[ConfigUpdate],
    talos_version: &str,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    let one_at_a_time = std::num::NonZeroUsize::MIN;
    for wave in rollout_waves(updates, |u| &u.node, one_at_a_time) {
        for update in wave {
            let node = &update.node;
            let client = connect(node, credentials).await?;
            if node.is_control_plane() {
                before_control_plane(
                    cluster,
                    node,
                    &client,
                    "kubernetes-upgrade",
                    credentials,
                    options,
                    on_event,
                )
                .await?;
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
            });
        }
    }
    Ok(())
}
