//! The nodes' machine configs (`config/<hostname>`): applied in maintenance
//! mode to a new node, applied again when changed (the node's own dry run
//! says whether it reboots), rolled for a Kubernetes version change, and
//! Talos upgraded with the installer image. A config goes with its VM: a
//! destroy deletes no config of its own.

use std::collections::BTreeSet;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::{NodeConfig, State};

use crate::change::{Action, Change, ConfigOp};
use crate::config_diff;
use crate::desired::DesiredConfig;
use crate::field::ConfigField;
use crate::model::{Drift, DriftKind, PlanWarning, field};
use crate::observed::Observed;
use crate::planned::{ApplyMode, KubernetesChange, PlannedConfig};
use crate::staged::{Planned, StagedNote, staged_note};
use talosprov_base::role::Role;

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `config/<hostname>` kind.
#[derive(Debug, Clone, Copy)]
pub struct Config;

impl ResourceKind for Config {
    type Op = ConfigOp;

    fn action(op: &ConfigOp) -> Action {
        match op {
            ConfigOp::ApplyConfig { .. } => Action::ApplyConfig,
            ConfigOp::Upgrade { .. } => Action::Upgrade,
        }
    }

    fn phase(op: &ConfigOp) -> Phase {
        match op {
            ConfigOp::ApplyConfig { .. } | ConfigOp::Upgrade { .. } => Phase::Configs,
        }
    }

    /// Reads the VMs planned before it ([`Planning::fresh_vms`]): a new
    /// VM's node gets its config in maintenance mode.
    fn plan(p: &mut Planning<'_>) {
        let fresh_vms = std::mem::take(&mut p.fresh_vms);
        let nodes = ConfigContext {
            state: p.state,
            obs: p.observed,
            fresh_vms: &fresh_vms,
            bootstrapped: p.state.resources.bootstrap.as_ref().is_some_and(|b| b.done),
            addons: p.desired.objects.keys().map(|o| o.addon.as_str()).collect(),
        };
        for (host, want) in &p.desired.configs {
            plan_config(&nodes, host, want, p);
        }
        p.fresh_vms = fresh_vms;
        warn_bootstrap_manifests(p);
    }

    /// A config is the node's VM's: deleting the VM forgets it.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}

/// What planning a node's machine config reads besides the node's own
/// desired config.
struct ConfigContext<'a> {
    state: &'a State,
    obs: &'a Observed,
    /// Hosts whose VM is created or replaced by this plan.
    fresh_vms: &'a BTreeSet<String>,
    /// Whether etcd was bootstrapped (the state's bootstrap record is done).
    bootstrapped: bool,
    /// The add-ons whose objects talosprov applies through the Kubernetes
    /// API: their inline manifests need no `upgrade-k8s` to take effect.
    addons: BTreeSet<&'a str>,
}

/// A config change for `host` (an upgrade when `upgrade`, else an
/// apply-config), carrying what apply sends.
fn config_change(
    host: &str,
    want: &DesiredConfig,
    upgrade: bool,
    reason: &str,
    mode: ApplyMode,
) -> Change {
    let config = PlannedConfig {
        ip: want.ip,
        config_sha256: want.record.config_sha256.clone(),
        talos_version: want.record.talos_version.clone(),
        installer_image: want.record.installer_image.clone(),
        mode,
        kubernetes: None,
    };
    let role = want.role;
    let op = if upgrade {
        ConfigOp::Upgrade { config, role }
    } else {
        ConfigOp::ApplyConfig { config, role }
    };
    Change::config(host, op, reason)
}

/// The machine config change of one node, if any, with its drift and
/// warnings.
fn plan_config(
    nodes: &ConfigContext<'_>,
    host: &str,
    want: &DesiredConfig,
    out: &mut Planning<'_>,
) {
    let obs = nodes.obs;
    let recorded = nodes.state.resources.configs.get(host);
    let fresh = nodes.fresh_vms.contains(host);
    if let (Some(r), Some(seen)) = (recorded, obs.talos_versions.get(host))
        && r.secure_mode
        && *seen != r.talos_version
    {
        out.drift.push(Drift {
            address: Address::Config(host.to_owned()),
            kind: DriftKind::Changed,
            diff: None,
            fields: vec![field(
                ConfigField::TalosVersion,
                Some(&r.talos_version),
                Some(seen),
            )],
        });
    }
    if let Some(r) = recorded.filter(|r| r.secure_mode)
        && obs.in_maintenance.contains(host)
        && !fresh
    {
        out.changes
            .push(reapply_after_reset(host, want, r, &mut out.drift));
        return;
    }
    let current = match recorded {
        Some(r) if !fresh => r,
        _ => {
            let why = if fresh {
                "new VM: applied in maintenance mode"
            } else {
                "no config applied yet: applied in maintenance mode"
            };
            let mut c = config_change(host, want, false, why, ApplyMode::Maintenance);
            c.fields.push(field(
                ConfigField::ConfigSha256,
                None,
                Some(&want.record.config_sha256),
            ));
            out.changes.push(c);
            return;
        }
    };
    // A version seen on the node outranks the record (an upgrade made
    // outside talosprov).
    let running = obs
        .talos_versions
        .get(host)
        .unwrap_or(&current.talos_version);
    let upgrade = *running != want.record.talos_version
        || current.installer_image != want.record.installer_image;
    let config_changed = current.config_sha256 != want.record.config_sha256;
    let address = Address::Config(host.to_owned());
    if drift_handled(host, want, current, !upgrade && !config_changed, out) {
        return;
    }
    if let Some(staged) = current.staged {
        let boot_time = obs.boot_times.get(host).copied();
        let planned = Planned {
            upgrade,
            config_changed,
        };
        match staged_note(&address, want.ip, staged, boot_time, obs.refreshed, planned) {
            StagedNote::Taken(d) => out.drift.push(d),
            StagedNote::Waiting(w) => out.warnings.push(w),
        }
    }
    if !upgrade && !config_changed {
        if !current.secure_mode {
            out.changes.push(config_change(
                host,
                want,
                false,
                "applied, but the node was not seen in secure mode: checked and applied if missing",
                ApplyMode::Maintenance,
            ));
        }
        return;
    }
    let mut c = config_change(
        host,
        want,
        upgrade,
        "machine config changed",
        ApplyMode::UnknownUntilApply,
    );
    if upgrade && describe_upgrade(&mut c, running, current, want) {
        out.warnings.push(PlanWarning {
            address: Some(c.address().clone()),
            message: format!(
                "Talos {running} -> {} goes back a version: Talos migrates the machine config \
                 and its data forward only, and tests that between adjacent minor releases; a \
                 node that does not boot the older version rolls back to {running} (the A-B \
                 boot scheme)",
                want.record.talos_version
            ),
        });
    }
    if config_changed {
        let edit = ConfigEdit {
            nodes,
            host,
            want,
            current,
            upgrade,
        };
        describe_config_edit(&edit, &mut c, out);
    }
    out.changes.push(c);
}

/// A config changed on the node outside talosprov: the drift, and the change that sets it
/// back when nothing else changes for the node (`alone`; otherwise that change sets it
/// back). True when the node is done with: set back, or another cluster's config.
fn drift_handled(
    host: &str,
    want: &DesiredConfig,
    current: &NodeConfig,
    alone: bool,
    out: &mut Planning<'_>,
) -> bool {
    let obs = out.observed;
    let Some(running) = obs
        .running_configs
        .get(host)
        .filter(|_| current.secure_mode && current.staged.is_none())
    else {
        return false;
    };
    if !changed_on_node(host, want, current, running, out) {
        return true;
    }
    if alone {
        out.changes.push(set_back(host, want, running, obs));
        return true;
    }
    // The planned change diffs the recorded config against the desired one; the drift
    // shows what the apply does to the node as it runs now.
    if let Some(d) = out.drift.last_mut() {
        d.diff = Some(config_diff::unified_diff_headed(
            &config_diff::redacted(running.yaml.expose()),
            &config_diff::redacted(want.yaml.expose()),
            ("running", "desired"),
        ));
    }
    false
}

/// A node whose running machine config is not the one recorded as applied: the drift, and
/// whether talosprov sets it back (true). A config of another cluster (its
/// [`config_diff::cluster_identity`] is not the desired one's: a node reinstalled, or
/// taken into another cluster) is not re-configured: a warning says so, the drift carries
/// the diff from the running config to the desired one, and no change is planned for the
/// node.
fn changed_on_node(
    host: &str,
    want: &DesiredConfig,
    current: &NodeConfig,
    running: &crate::observed::RunningConfig,
    out: &mut Planning<'_>,
) -> bool {
    let address = Address::Config(host.to_owned());
    out.drift.push(Drift {
        address: address.clone(),
        kind: DriftKind::Changed,
        diff: None,
        fields: vec![field(
            ConfigField::ConfigSha256,
            Some(&current.config_sha256),
            Some(&running.sha256),
        )],
    });
    let theirs = config_diff::cluster_identity(running.yaml.expose());
    let ours = config_diff::cluster_identity(want.yaml.expose());
    if theirs.is_some() && ours.is_some() && theirs != ours {
        if let Some(d) = out.drift.last_mut() {
            d.diff = Some(config_diff::unified_diff_headed(
                &config_diff::redacted(running.yaml.expose()),
                &config_diff::redacted(want.yaml.expose()),
                ("running", "desired"),
            ));
        }
        out.warnings.push(PlanWarning {
            address: Some(address),
            message: format!(
                "{host} runs a machine config talosprov did not apply: its cluster ID is another \
                 cluster's (a node reinstalled, or taken into another cluster), so talosprov \
                 does not re-configure it; reset the node (`talosctl reset`) for talosprov to \
                 apply its config in maintenance mode, or take it out of the topology"
            ),
        });
        return false;
    }
    true
}

/// The change that sets a node's machine config, changed outside talosprov, back to the
/// desired one, with the diff from the running config and the apply mode the node's dry
/// run gave.
fn set_back(
    host: &str,
    want: &DesiredConfig,
    running: &crate::observed::RunningConfig,
    obs: &Observed,
) -> Change {
    let mode = match obs.apply_reboots.get(host) {
        Some(true) => ApplyMode::Reboot,
        Some(false) => ApplyMode::NoReboot,
        None => ApplyMode::UnknownUntilApply,
    };
    let mut c = config_change(
        host,
        want,
        false,
        "machine config changed outside talosprov (talosctl edit or patch): set back to the \
         topology's",
        mode,
    );
    c.fields.push(field(
        ConfigField::ConfigSha256,
        Some(&running.sha256),
        Some(&want.record.config_sha256),
    ));
    c.config_diff = Some(config_diff::unified_diff_headed(
        &config_diff::redacted(running.yaml.expose()),
        &config_diff::redacted(want.yaml.expose()),
        ("running", "desired"),
    ));
    c.reboot = mode.reboots();
    c
}

/// A node reset outside talosprov waits in maintenance mode: its machine
/// config is applied again, and the reset is drift.
fn reapply_after_reset(
    host: &str,
    want: &DesiredConfig,
    recorded: &NodeConfig,
    drift: &mut Vec<Drift>,
) -> Change {
    drift.push(Drift {
        address: Address::Config(host.to_owned()),
        kind: DriftKind::Changed,
        diff: None,
        fields: vec![field(
            ConfigField::Mode,
            Some("secure"),
            Some("maintenance (reset)"),
        )],
    });
    let mut c = config_change(
        host,
        want,
        false,
        "the node was reset outside talosprov and waits in maintenance mode: its machine \
         config is applied again",
        ApplyMode::Maintenance,
    );
    c.fields.push(field(
        ConfigField::ConfigSha256,
        Some(&recorded.config_sha256),
        Some(&want.record.config_sha256),
    ));
    c
}

/// Describe `c`, a Talos upgrade, from `running` (the version seen, else
/// recorded) to the desired version and installer image (Talos's Upgrade
/// API installs whichever version the image holds); true when the desired
/// version is older than `running`, a downgrade, which the reason says.
fn describe_upgrade(
    c: &mut Change,
    running: &str,
    current: &NodeConfig,
    want: &DesiredConfig,
) -> bool {
    use talosprov_base::version::TalosVersion;
    let downgrade = matches!(
        (running.parse::<TalosVersion>(), want.record.talos_version.parse::<TalosVersion>()),
        (Ok(from), Ok(to)) if (to.major, to.minor, to.patch) < (from.major, from.minor, from.patch)
    );
    c.reason = format!(
        "Talos {running} -> {}{} (installer image {})",
        want.record.talos_version,
        if downgrade { ", a downgrade" } else { "" },
        want.record.installer_image
    );
    c.reboot = Some(true);
    if running != want.record.talos_version {
        c.fields.push(field(
            ConfigField::TalosVersion,
            Some(running),
            Some(&want.record.talos_version),
        ));
    }
    if current.installer_image != want.record.installer_image {
        c.fields.push(field(
            ConfigField::InstallerImage,
            Some(&current.installer_image),
            Some(&want.record.installer_image),
        ));
    }
    downgrade
}

/// A node whose machine config text changed, as [`describe_config_edit`]
/// reads it.
struct ConfigEdit<'a> {
    nodes: &'a ConfigContext<'a>,
    host: &'a str,
    want: &'a DesiredConfig,
    /// The config record in the state.
    current: &'a NodeConfig,
    /// Whether the same change upgrades Talos (which reboots anyway).
    upgrade: bool,
}

/// Add to `c` what a changed machine config brings: its digest and redacted
/// diff, a Kubernetes version change, the apply mode the node answered, and
/// warnings for settings a bootstrapped cluster ignores.
fn describe_config_edit(edit: &ConfigEdit<'_>, c: &mut Change, out: &mut Planning<'_>) {
    let (want, current) = (edit.want, edit.current);
    c.fields.push(field(
        ConfigField::ConfigSha256,
        Some(&current.config_sha256),
        Some(&want.record.config_sha256),
    ));
    let recorded_text = edit.nodes.state.outputs.machineconfigs.get(edit.host);
    let before = recorded_text.map(|o| o.value.as_str()).unwrap_or("");
    let after = want.yaml.expose();
    c.config_diff = Some(config_diff::unified_diff(
        &config_diff::redacted(before),
        &config_diff::redacted(after),
    ));
    let kubernetes = (
        config_diff::kubernetes_version(before),
        config_diff::kubernetes_version(after),
    );
    if let (false, (Some(from), Some(to))) = (edit.upgrade, &kubernetes)
        && from != to
    {
        c.reason = if want.role == Role::Controlplane {
            format!(
                "Kubernetes {from} -> {to}: the new control-plane component images on \
                 every control plane first, then this node's kubelet; no reboot, behind \
                 the health gate"
            )
        } else {
            format!(
                "Kubernetes {from} -> {to}: the kubelet, after the control planes; no \
                 reboot, behind the health gate"
            )
        };
        c.fields.insert(
            0,
            field(ConfigField::KubernetesVersion, Some(from), Some(to)),
        );
        out.kubernetes_change
            .get_or_insert_with(|| (from.clone(), to.clone()));
    }
    if !edit.upgrade {
        describe_apply_mode(edit, c, &kubernetes, (before, after));
    }
    if edit.nodes.bootstrapped {
        warn_bootstrap_only(
            c.address(),
            before,
            after,
            &edit.nodes.addons,
            &mut out.warnings,
        );
    }
}

/// The apply mode of a config change without a Talos upgrade: the node's own
/// answer to a dry run, unknown when it did not answer at plan time (the view
/// then gives the settings' hint); with a Kubernetes version change, how it
/// rolls out.
fn describe_apply_mode(
    edit: &ConfigEdit<'_>,
    c: &mut Change,
    kubernetes: &(Option<String>, Option<String>),
    (before, after): (&str, &str),
) {
    let mode = match edit.nodes.obs.apply_reboots.get(edit.host) {
        Some(true) => ApplyMode::Reboot,
        Some(false) => ApplyMode::NoReboot,
        None => ApplyMode::UnknownUntilApply,
    };
    if let Some(p) = c.config_payload_mut() {
        p.mode = mode;
    }
    c.reboot = mode.reboots();
    if let (Some(from), Some(to)) = kubernetes
        && from != to
        && let Some(p) = c.config_payload_mut()
    {
        p.kubernetes = Some(KubernetesChange {
            from: from.clone(),
            to: to.clone(),
            // A change the node reboots for is applied whole with
            // its reboot; otherwise the two phases of upgrade-k8s.
            rolled: mode != ApplyMode::Reboot && edit.current.secure_mode,
            control_plane_components: Vec::new(),
        });
    }
    if c.reboot.is_none() && config_diff::needs_reboot(before, after) {
        c.reason = "machine config changed; by the settings changed, likely with a reboot".into();
    }
    if let (Some(true), (Some(from), Some(to))) = (c.reboot, kubernetes)
        && from != to
    {
        c.reason = format!(
            "Kubernetes {from} -> {to} with other settings the node reboots for: \
             the whole config applied with a reboot, node by node (control planes, \
             then workers), each behind the health gate"
        );
    }
}

/// A warning for each changed setting Talos applies only when the cluster is
/// bootstrapped (the cluster already is). Inline manifests that are only
/// add-ons' are no such setting: talosprov applies the add-ons' objects
/// through the Kubernetes API, and the inline manifest follows them.
fn warn_bootstrap_only(
    address: &Address,
    before: &str,
    after: &str,
    addons: &BTreeSet<&str>,
    warnings: &mut Vec<PlanWarning>,
) {
    for name in config_diff::bootstrap_only_changes(before, after) {
        if name == "inlineManifests"
            && config_diff::changed_inline_manifests(before, after)
                .iter()
                .all(|m| addons.contains(m.as_str()))
        {
            continue;
        }
        warnings.push(PlanWarning {
            address: Some(address.clone()),
            message: format!(
                "{name} is applied only when the cluster is bootstrapped; this \
                 cluster is, so the change has no effect on it. To roll it out, \
                 run `talosctl --nodes <control plane> upgrade-k8s --to <the \
                 cluster's Kubernetes version>`, which syncs the bootstrap \
                 manifests, or apply the manifests with kubectl"
            ),
        });
    }
}

/// One plan-wide warning when a Kubernetes version changes: the bootstrap
/// manifests are not synced by the machine configs. They are CoreDNS, and
/// kube-proxy unless the control planes' configs turn it off.
fn warn_bootstrap_manifests(out: &mut Planning<'_>) {
    if let Some((from, to)) = &out.kubernetes_change {
        let kube_proxy_off = out
            .desired
            .configs
            .values()
            .find(|c| c.role == Role::Controlplane)
            .is_some_and(|c| config_diff::kube_proxy_disabled(c.yaml.expose()));
        let manifests = if kube_proxy_off {
            "CoreDNS"
        } else {
            "kube-proxy, CoreDNS"
        };
        out.warnings.push(PlanWarning {
            address: None,
            message: format!(
                "Kubernetes {from} -> {to}: the machine configs carry the new component and \
                 kubelet images, but the bootstrap manifests ({manifests}) are not \
                 synced through the Kubernetes API by this change. To roll them out, run \
                 `talosctl --nodes <control plane> upgrade-k8s --to {to}` afterwards, or apply \
                 them with kubectl"
            ),
        });
    }
}

/// The role the state records for `host`: the config record's, else (a
/// state written before roles were recorded) the applied machine config's
/// `machine.type`; `None` when the node has no applied config.
pub fn recorded_role(state: &State, host: &str) -> Option<Role> {
    state
        .resources
        .configs
        .get(host)
        .and_then(|c| c.role)
        .or_else(|| {
            let text = state.outputs.machineconfigs.get(host)?;
            Some(if config_diff::is_controlplane(text.value.expose()) {
                Role::Controlplane
            } else {
                Role::Worker
            })
        })
}
