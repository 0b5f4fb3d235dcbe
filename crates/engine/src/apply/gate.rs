//! The health gate around a node's restart: for a configured control plane,
//! etcd healthy before; afterwards the node healthy at its recorded Talos
//! version. Shared by config applies that reboot, Proxmox restarts and
//! removals.

use crate::health::cluster::ClusterNode;

use super::context::Context;
use super::reporter::Reporter;
use crate::apply::upgrade;
use crate::apply::upgrade::events::UpgradeEvent;

/// Every node of the topology, as the health checks name them.
pub(super) fn cluster_nodes(ctx: &Context) -> Vec<ClusterNode> {
    ctx.desired
        .configs
        .iter()
        .map(|(host, c)| ClusterNode {
            hostname: host.clone(),
            ip: c.ip,
            role: c.role,
        })
        .collect()
}

pub(super) fn describe(event: &UpgradeEvent) -> String {
    match event {
        UpgradeEvent::WaitingForEtcd { .. } => "waiting for etcd to be healthy".into(),
        UpgradeEvent::SnapshotSaved { file, .. } => format!(
            "etcd snapshot saved, encrypted, to {} ({} bytes)",
            file.archive, file.bytes
        ),
        UpgradeEvent::Rebooting { .. } => "upgrading: rebooting into the new version".into(),
        UpgradeEvent::Upgraded { version, .. } => format!("upgraded to {version}, healthy"),
        UpgradeEvent::AlreadyUpgraded { version, .. } => {
            format!("already at {version} (upgraded by an earlier run), healthy")
        }
        UpgradeEvent::ConfigApplied { node, phase } => match phase {
            upgrade::events::KubernetesPhase::ControlPlaneComponents => {
                format!("new control-plane component images applied on {node}, healthy")
            }
            upgrade::events::KubernetesPhase::Kubelet => {
                format!("new kubelet image applied on {node}, healthy")
            }
        },
    }
}

/// Restart the VM of `host` through Proxmox with the health gate: for a
/// configured control plane, etcd healthy first; afterwards the node healthy
/// at its recorded Talos version (and etcd again). A node not configured yet
/// (or with no talosconfig) is restarted without the gate.
///
/// # Errors
/// The restart's error, or the [`upgrade::UpgradeError`] of the gate.
pub(super) async fn gated_restart(
    ctx: &Context,
    host: &str,
    r: &Reporter,
    restart: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let cluster = cluster_nodes(ctx);
    let gate = match (
        ctx.credentials.as_ref(),
        ctx.recorded_configs.get(host).filter(|c| c.secure_mode),
        cluster.iter().find(|n| n.hostname == host),
    ) {
        (Some(credentials), Some(recorded), Some(node)) => {
            Some((credentials, recorded.talos_version.clone(), node.clone()))
        }
        _ => None,
    };
    let Some((credentials, version, node)) = gate else {
        return restart.await;
    };
    if node.is_control_plane() {
        let client = upgrade::rolling::connect(&node, credentials).await?;
        upgrade::rolling::before_control_plane(
            &cluster,
            &node,
            &client,
            None,
            credentials,
            &ctx.rollout,
            &|e| r.progress(describe(&e)),
        )
        .await?;
    }
    restart.await?;
    r.progress("waiting for the node to be healthy again");
    r.waiting(upgrade::rolling::after_change(
        &cluster,
        &node,
        &version,
        credentials,
        &ctx.rollout,
    ))
    .await?;
    Ok(())
}
