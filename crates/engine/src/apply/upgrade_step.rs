//! The engine's Talos upgrade step: one node of a rollout (the plan chains the
//! nodes: control planes one at a time, then workers), through
//! [`upgrade::rolling_upgrade`], recorded in the state as soon as the node is
//! back healthy at the new version; a config change planned with it follows.

use anyhow::Context as _;

use crate::health::cluster::ClusterNode;
use talosprov_plan::planned::KubernetesChange;

use super::context::{ConfigChange, Context, credentials, planned_config};
use super::gate::{cluster_nodes, describe};
use super::record::Record;
use super::reporter::Reporter;
use super::talos_steps;
use crate::apply::upgrade;
use crate::apply::upgrade::events::UpgradeEvent;
use crate::apply::upgrade::rolling::{UpgradeNode, UpgradeTarget};

/// Upgrade Talos on `host` to the desired version and installer image, never
/// touching its VM: the etcd gate and snapshot first for a control plane, the
/// upgrade, the wait for the node back at the version and healthy (and etcd
/// healthy again). Records `talos_version` and `installer_image` at once; a
/// machine config change planned with the upgrade is applied after it.
///
/// # Errors
/// The [`upgrade::UpgradeError`] naming the node, or the config's error.
pub(super) async fn upgrade(
    ctx: &Context,
    host: &str,
    change: &ConfigChange<'_>,
    r: &Reporter,
) -> anyhow::Result<()> {
    let (want, _) = planned_config(ctx, host, change)?;
    let recorded = ctx
        .recorded_configs
        .get(host)
        .with_context(|| format!("config/{host} has no applied config to upgrade from"))?;
    let credentials = credentials(ctx)?;
    let cluster = cluster_nodes(ctx);
    let node = cluster
        .iter()
        .find(|n| n.hostname == host)
        .cloned()
        .with_context(|| format!("{host} is not in the topology"))?;
    let target = UpgradeTarget {
        image: want.installer_image.clone(),
        version: want.talos_version.clone(),
    };
    r.progress(format!(
        "upgrading Talos {} -> {}",
        recorded.talos_version, target.version
    ));
    let item = UpgradeNode {
        node,
        from_version: recorded.talos_version.clone(),
    };
    let on_event = |event: UpgradeEvent| {
        r.progress(describe(&event));
        if matches!(
            event,
            UpgradeEvent::Upgraded { .. } | UpgradeEvent::AlreadyUpgraded { .. }
        ) {
            r.record(Record::Upgraded {
                host: host.to_owned(),
                talos_version: target.version.clone(),
                installer_image: target.image.clone(),
            });
        }
    };
    upgrade::rolling::rolling_upgrade(
        &cluster,
        std::slice::from_ref(&item),
        &target,
        credentials,
        &ctx.rollout,
        &on_event,
    )
    .await
    .map_err(anyhow::Error::new)?;
    if recorded.config_sha256 != want.config_sha256 {
        talos_steps::apply_config(ctx, host, change, r).await?;
    }
    Ok(())
}

/// Phase 1 of a Kubernetes version change, for the step of the first control
/// plane of the roll (the plan lists the roll's control planes on that
/// change only): for each, its new machine config with the kubelet image it
/// runs now, so that the new kube-apiserver, kube-controller-manager and
/// kube-scheduler run on every control plane before any kubelet is newer
/// (Kubernetes version skew policy). A control plane whose kubelet image does
/// not change needs no phase 1.
fn control_plane_components(
    ctx: &Context,
    roll: &KubernetesChange,
    cluster: &[ClusterNode],
) -> anyhow::Result<Vec<upgrade::kubernetes::ConfigUpdate>> {
    let mut updates = Vec::new();
    for cp in &roll.control_plane_components {
        let new = ctx
            .desired
            .configs
            .get(cp)
            .with_context(|| format!("config/{cp} is not in the topology"))?
            .yaml
            .expose();
        let running = ctx
            .recorded_machineconfigs
            .get(cp)
            .and_then(|m| upgrade::kubernetes::kubelet_image(m.expose()));
        let (Some(running), Some(node)) = (running, cluster.iter().find(|n| &n.hostname == cp))
        else {
            continue;
        };
        if upgrade::kubernetes::kubelet_image(new).as_deref() == Some(running.as_str()) {
            continue;
        }
        let config = upgrade::kubernetes::with_kubelet_image(new, &running)
            .with_context(|| format!("cannot make the control-plane component config of {cp}"))?;
        updates.push(upgrade::kubernetes::ConfigUpdate {
            node: node.clone(),
            config: config.into_bytes(),
        });
    }
    Ok(updates)
}

/// A Kubernetes version change on `host` through
/// [`upgrade::upgrade_kubernetes`], in talosctl `upgrade-k8s`'s two phases.
/// The step of the roll's first control plane first applies phase 1 (see
/// [`control_plane_components`]) to every control plane of the roll, one at a
/// time; every step then applies its node's final config (the new kubelet
/// image). Each apply uses mode NO_REBOOT; before a control plane etcd must be
/// healthy (an etcd snapshot first unless skipped), and after each the node
/// must be healthy and etcd healthy again. The plan orders the steps (control
/// planes one at a time, then workers). The final config is recorded once
/// applied; phase 1 is not recorded (an interrupted roll applies it again).
///
/// # Errors
/// The [`upgrade::UpgradeError`] naming the node (Talos refusing the config, or
/// saying it needs a reboot, included).
pub(super) async fn kubernetes(
    ctx: &Context,
    host: &str,
    change: &ConfigChange<'_>,
    r: &Reporter,
) -> anyhow::Result<()> {
    let (want, yaml) = planned_config(ctx, host, change)?;
    let k8s = want
        .kubernetes
        .as_ref()
        .with_context(|| format!("config/{host}: the plan carries no Kubernetes version change"))?;
    let recorded = ctx
        .recorded_configs
        .get(host)
        .with_context(|| format!("config/{host} has no applied config"))?;
    let credentials = credentials(ctx)?;
    let cluster = cluster_nodes(ctx);
    let node = cluster
        .iter()
        .find(|n| n.hostname == host)
        .cloned()
        .with_context(|| format!("{host} is not in the topology"))?;
    let roll = upgrade::kubernetes::KubernetesRoll {
        control_plane_components: control_plane_components(ctx, k8s, &cluster)?,
        kubelet: vec![upgrade::kubernetes::ConfigUpdate {
            node,
            config: yaml.expose().as_bytes().to_vec(),
        }],
    };
    if !roll.control_plane_components.is_empty() {
        r.progress(format!(
            "new control-plane component images first, on {}",
            roll.control_plane_components
                .iter()
                .map(|u| u.node.hostname.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    upgrade::kubernetes::upgrade_kubernetes(
        &cluster,
        &roll,
        &recorded.talos_version,
        credentials,
        &ctx.rollout,
        &|e| r.progress(describe(&e)),
    )
    .await
    .map_err(anyhow::Error::new)?;
    r.record(talos_steps::config_record(host, change, want, yaml, true));
    Ok(())
}
