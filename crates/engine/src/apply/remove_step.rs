//! The engine's node removal, before a VM of a node gone from the topology is
//! deleted: through [`remove::remove_node`] (etcd snapshot first for a control
//! plane, graceful reset, or the etcd member removed through another control
//! plane when the node does not answer), so there is one way to remove a node.

use anyhow::Context as _;

use crate::health::cluster::ClusterNode;
use talosprov_base::role::Role;

use super::context::Context;
use super::gate::cluster_nodes;
use super::remove::{self, RemovalOptions, RemovalOutcome};
use super::reporter::Reporter;
use super::talos_steps;

/// Take `host` (recorded, no longer in the topology, with the role the state
/// records) out of the cluster: a
/// worker is reset when it answers; a control plane leaves etcd (graceful
/// reset, else `EtcdRemoveMemberByID` through another control plane) after an
/// etcd snapshot (unless `--skip-etcd-snapshot`), and the step waits until etcd
/// is healthy without it. When no control plane of the topology remains (a
/// destroy), the node is only reset, as the whole cluster goes.
///
/// # Errors
/// The [`remove::RemoveError`]: the VM is then kept, and the next apply tries
/// again.
pub(super) async fn remove(
    ctx: &Context,
    host: &str,
    recorded_role: Option<talosprov_base::role::Role>,
    r: &Reporter,
) -> anyhow::Result<()> {
    let cluster_stays = ctx
        .desired
        .configs
        .values()
        .any(|c| c.role == talosprov_base::role::Role::Controlplane);
    if !cluster_stays {
        talos_steps::reset_node(ctx, host, recorded_role, r).await;
        return Ok(());
    }
    let Some(credentials) = &ctx.credentials else {
        r.warn("no talosconfig in the state: not reset through the Talos API");
        return Ok(());
    };
    let Some(ip) = talos_steps::node_address(ctx, host).await else {
        r.warn("no address known for this node: not reset through the Talos API");
        return Ok(());
    };
    let role = if recorded_role == Some(talosprov_base::role::Role::Controlplane) {
        Role::Controlplane
    } else {
        Role::Worker
    };
    let node = ClusterNode {
        hostname: host.to_owned(),
        ip,
        role,
    };
    let mut cluster = cluster_nodes(ctx);
    cluster.push(node.clone());
    let options = RemovalOptions {
        backoff: ctx.waits.backoff,
        ..RemovalOptions::new(ctx.rollout.etcd_snapshot.clone())
    };
    r.progress(if node.is_control_plane() {
        "removing the control plane from etcd"
    } else {
        "resetting Talos"
    });
    let removal = remove::remove_node(&cluster, &node, credentials, &options)
        .await
        .with_context(|| format!("cannot remove {host} from the cluster"))?;
    if let Some(file) = &removal.snapshot {
        r.progress(format!(
            "etcd snapshot saved, encrypted, to {} ({} bytes)",
            file.archive, file.bytes
        ));
    }
    match removal.outcome {
        RemovalOutcome::Reset => r.progress("reset through the Talos API"),
        RemovalOutcome::MemberRemoved { member_id, via } => r.warn(format!(
            "the node did not answer: its etcd member {member_id:x} was removed through {via}"
        )),
        RemovalOutcome::Unreachable => {
            r.warn("the node did not answer: the VM is deleted without a reset");
        }
    }
    for w in removal.warnings {
        r.warn(w.to_string());
    }
    Ok(())
}
