//! The diff (pure): desired resources against the recorded state and the
//! observed cluster give the changes, each with an action, a reason and field
//! values; drift (observed differs from recorded) is listed apart; a disk
//! shrink, and a new disk smaller than the image already in storage, are
//! refused. `order` then sorts the result.

use std::collections::BTreeSet;

use crate::state::Address;
use crate::state::format::{NodeConfig, State};

use crate::plan::removal::check_removal;

use super::config_diff;
use super::desired::{Desired, DesiredConfig};
use super::diff_vm::plan_vm;
use super::field::{ConfigField, Field, VmField};
use super::model::{GIB, PlanError, field};
use super::observed::Observed;
use super::ownership;
use super::planned::{ApplyMode, KubernetesChange, PlannedConfig, PlannedImage};
use super::staged::{Planned, StagedNote, staged_note};
use super::{
    Action, Change, ConfigOp, Conflict, Drift, DriftKind, ImageOp, MappingOp, PLAN_FORMAT_VERSION,
    Plan, PlanWarning, PoolOp, VmOp,
};
use crate::topology::Role;

/// What planning reads: all plain data.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// What the topology asks for.
    pub desired: &'a Desired,
    /// The state, `None` before the first apply.
    pub state: Option<&'a State>,
    /// What refresh saw (`Observed::default()` offline).
    pub observed: &'a Observed,
}

/// The size of the image a new VM imports, when refresh listed it: on the
/// VM's host, or on any host when the storage is shared.
fn image_size<'o>(obs: &'o Observed, host: &str, volid: &str) -> Option<(&'o str, u64)> {
    let on = |h: &'o String, listing: &'o std::collections::BTreeMap<String, u64>| {
        listing.get(volid).map(|size| (h.as_str(), *size))
    };
    obs.image_sizes
        .get_key_value(host)
        .and_then(|(h, l)| on(h, l))
        .or_else(|| {
            (obs.image_storage_shared == Some(true))
                .then(|| obs.image_sizes.iter().find_map(|(h, l)| on(h, l)))
                .flatten()
        })
}

/// What a plan shows for a value computed only during the apply, as OpenTofu
/// does.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// Show the machine config digests as [`KNOWN_AFTER_APPLY`] (pure): for a plan
/// rendered with cluster secrets generated only for it (no state yet), whose
/// configs, and so digests, are made again with the secrets the apply keeps.
pub fn digests_known_after_apply(plan: &mut Plan) {
    for f in plan
        .changes
        .iter_mut()
        .flat_map(|c| c.fields.iter_mut())
        .filter(|f| f.name == Field::Config(ConfigField::ConfigSha256) && f.after.is_some())
    {
        f.after = Some(KNOWN_AFTER_APPLY.to_owned());
    }
}

/// What planning collects, in the order found: the plan's lists, the changes
/// refused, and the first Kubernetes version change seen.
#[derive(Default)]
struct Collected {
    changes: Vec<Change>,
    drift: Vec<Drift>,
    warnings: Vec<PlanWarning>,
    conflicts: Vec<Conflict>,
    errors: Vec<PlanError>,
    /// The first Kubernetes version change seen (from, to), for one plan-wide
    /// warning about the bootstrap manifests.
    kubernetes_change: Option<(String, String)>,
}

impl Collected {
    /// The changes, and the drift and conflicts as the ownership checks
    /// take them, borrowed together.
    fn changes_and_found(&mut self) -> (&mut Vec<Change>, ownership::Found<'_>) {
        (
            &mut self.changes,
            ownership::Found {
                drift: &mut self.drift,
                conflicts: &mut self.conflicts,
            },
        )
    }
}

/// Plan an apply: every change that brings the cluster to `desired`.
///
/// # Errors
/// Every [`PlanError`] found (each a change refused).
pub fn plan(input: PlanInput<'_>) -> Result<Plan, Vec<PlanError>> {
    let empty = State::new(uuid::Uuid::nil());
    let state = input.state.unwrap_or(&empty);
    let d = input.desired;
    let obs = input.observed;
    let mut out = Collected::default();

    plan_pool_and_mappings(d, state, obs, &mut out);
    let fresh_vms = plan_vms(d, state, obs, &mut out);
    plan_images(d, state, &fresh_vms, &mut out.changes);
    check_controlplane_removal(d, state, &mut out);
    plan_vm_deletions(d, state, &mut out.changes);
    ownership::leftover_vms(d, state, obs, &mut out.changes);

    let nodes = ConfigContext {
        state,
        obs,
        fresh_vms: &fresh_vms,
        bootstrapped: state.resources.bootstrap.as_ref().is_some_and(|b| b.done),
        addons: d.objects.keys().map(|o| o.addon.as_str()).collect(),
    };
    for (host, want) in &d.configs {
        plan_config(&nodes, host, want, &mut out);
    }
    warn_bootstrap_manifests(d, &mut out);
    plan_bootstrap(d, state, nodes.bootstrapped, &mut out.changes);
    super::objects::plan_objects(
        &d.objects,
        state,
        obs.kubernetes.as_ref(),
        super::objects::Found {
            changes: &mut out.changes,
            drift: &mut out.drift,
            warnings: &mut out.warnings,
            errors: &mut out.errors,
        },
    );

    if !out.errors.is_empty() {
        return Err(out.errors);
    }
    let mut plan = Plan {
        format_version: PLAN_FORMAT_VERSION,
        lineage: input.state.map(|s| s.lineage),
        serial: input.state.map(|s| s.serial),
        refreshed: obs.refreshed,
        destroy: false,
        changes: out.changes,
        drift: out.drift,
        warnings: out.warnings,
        conflicts: out.conflicts,
        addons: Vec::new(),
        pools: Vec::new(),
    };
    ownership::order_holding_back(&mut plan, d);
    Ok(plan)
}

/// The pool and the PCI mappings, with what apply writes for each mapping
/// it creates or updates.
fn plan_pool_and_mappings(d: &Desired, state: &State, obs: &Observed, out: &mut Collected) {
    let (changes, mut found) = out.changes_and_found();
    ownership::plan_pool(d, state, obs, changes, &mut found);
    ownership::plan_mappings(d, state, obs, changes, &mut found);
}

/// Each desired VM's change; gives the hosts whose VM is created or
/// replaced (their disk, and so their machine config, starts fresh).
fn plan_vms<'d>(
    d: &'d Desired,
    state: &State,
    obs: &Observed,
    out: &mut Collected,
) -> BTreeSet<&'d str> {
    let mut fresh_vms: BTreeSet<&str> = BTreeSet::new();
    let vacating =
        super::diff_vm::vacating(&state.resources.vms, |h| d.vms.get(h).map(|v| &v.record));
    for (host, want) in &d.vms {
        let mut below_image = None;
        let (changes, mut found) = out.changes_and_found();
        let intent = state.intent(&Address::Vm(host.clone()));
        let recorded = state.resources.vms.get(host);
        match plan_vm(host, want, (recorded, intent), (obs, &vacating), &mut found) {
            Ok(Some(c)) => {
                if matches!(c.action(), Action::Create | Action::Replace) {
                    fresh_vms.insert(host.as_str());
                    let spec = &want.spec;
                    if let Some((on, size)) = image_size(obs, &spec.node, &spec.image_volid)
                        && spec.disk_gib.saturating_mul(GIB) < size
                    {
                        below_image = Some(PlanError::DiskBelowImage {
                            hostname: host.clone(),
                            vmid: spec.vmid,
                            disk_gib: spec.disk_gib,
                            volid: spec.image_volid.clone(),
                            host: on.to_owned(),
                            image_bytes: size,
                        });
                    }
                }
                changes.push(c);
            }
            Ok(None) => {}
            Err(e) => out.errors.push(e),
        }
        out.errors.extend(below_image);
    }
    fresh_vms
}

/// The image downloads: an image is downloaded for the VMs created from it;
/// a node upgraded in place keeps its disk, so a new version's image waits
/// for a new node.
fn plan_images(d: &Desired, state: &State, fresh_vms: &BTreeSet<&str>, changes: &mut Vec<Change>) {
    let needed: BTreeSet<&str> = d
        .vms
        .iter()
        .filter(|(host, _)| fresh_vms.contains(host.as_str()))
        .map(|(_, vm)| vm.image.as_str())
        .collect();
    for (name, image) in &d.images {
        if !state.resources.images.contains_key(name) && needed.contains(name.as_str()) {
            let address = Address::Image(name.clone());
            let started = if state.intent(&address).is_some() {
                " (an interrupted apply started it: a download still running is waited for)"
            } else {
                ""
            };
            let planned = PlannedImage {
                record: image.record.clone(),
                factory_url: d.factory_url.clone(),
            };
            let reason = format!(
                "download Talos {} ({}) to {} on {}{started}",
                image.record.talos_version,
                short(&image.record.schematic_id),
                image.record.storage,
                image.record.node
            );
            let volid = field(Field::Volid, None, Some(&image.record.volid));
            changes.push(
                Change::image(name.clone(), ImageOp::Create(planned), reason)
                    .with_fields(vec![volid]),
            );
        }
    }
    // Downloads an interrupted apply started for VMs that are no longer to
    // be made: deleted once their task ends, so nothing is left unrecorded.
    for (address, _) in state.intents() {
        if let Address::Image(name) = &address
            && !state.resources.images.contains_key(name)
            && !changes.iter().any(|c| *c.address() == address)
        {
            changes.push(Change::image(
                name.clone(),
                ImageOp::Delete,
                ownership::leftover(None),
            ));
        }
    }
}

/// Refuse removing the recorded nodes when no control plane of the running
/// cluster stays (new ones cannot join an etcd that is gone; the count left
/// includes new ones), and warn when few do.
fn check_controlplane_removal(d: &Desired, state: &State, out: &mut Collected) {
    let rec = &state.resources;
    let controlplanes: Vec<&str> = rec
        .vms
        .keys()
        .map(String::as_str)
        .filter(|h| recorded_role(state, h) == Some(Role::Controlplane))
        .collect();
    let removing: Vec<&str> = rec
        .vms
        .keys()
        .map(String::as_str)
        .filter(|h| !d.vms.contains_key(*h))
        .collect();
    let mut after: Vec<&str> = controlplanes.clone();
    after.extend(
        d.configs
            .iter()
            .filter(|(h, c)| c.role == Role::Controlplane && !rec.vms.contains_key(*h))
            .map(|(h, _)| h.as_str()),
    );
    match check_removal(&controlplanes, &removing).and_then(|_| check_removal(&after, &removing)) {
        Ok(found) => out.warnings.extend(found.into_iter().map(|w| PlanWarning {
            address: None,
            message: w.to_string(),
        })),
        Err(refused) => out.errors.push(refused.into()),
    }
}

/// A delete for each recorded VM the topology no longer has.
fn plan_vm_deletions(d: &Desired, state: &State, changes: &mut Vec<Change>) {
    for (host, vm) in &state.resources.vms {
        if d.vms.contains_key(host) {
            continue;
        }
        let how = if recorded_role(state, host) == Some(Role::Controlplane) {
            "Talos reset (graceful: leaves etcd), then"
        } else {
            "Talos reset, then"
        };
        let role = recorded_role(state, host);
        let reason = format!(
            "not in the topology: {how} VM {} shut down and deleted",
            vm.vmid
        );
        changes.push(
            Change::vm(host.clone(), VmOp::Delete { role }, reason).with_fields(vec![field(
                VmField::Vmid,
                Some(vm.vmid),
                None,
            )]),
        );
    }
}

/// What planning a node's machine config reads besides the node's own
/// desired config.
struct ConfigContext<'a> {
    state: &'a State,
    obs: &'a Observed,
    /// Hosts whose VM is created or replaced by this plan.
    fresh_vms: &'a BTreeSet<&'a str>,
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
fn plan_config(nodes: &ConfigContext<'_>, host: &str, want: &DesiredConfig, out: &mut Collected) {
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
    use crate::machine::TalosVersion;
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
fn describe_config_edit(edit: &ConfigEdit<'_>, c: &mut Change, out: &mut Collected) {
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
fn warn_bootstrap_manifests(d: &Desired, out: &mut Collected) {
    if let Some((from, to)) = &out.kubernetes_change {
        let kube_proxy_off = d
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

/// The etcd bootstrap, when not done yet, and the admin kubeconfig fetched
/// after it (or when the state has none).
fn plan_bootstrap(d: &Desired, state: &State, bootstrapped: bool, changes: &mut Vec<Change>) {
    if let Some(node) = &d.bootstrap_node
        && !bootstrapped
    {
        changes.push(Change::bootstrap(format!(
            "etcd bootstrap on the first control plane, {node}"
        )));
    }
    let bootstrap_planned = changes.iter().any(|c| c.action() == Action::Bootstrap);
    if d.bootstrap_node.is_some() && (state.outputs.kubeconfig.is_none() || bootstrap_planned) {
        changes.push(Change::kubeconfig(
            "admin kubeconfig, fetched through the Talos API after bootstrap",
        ));
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

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

/// Plan a destroy: every recorded VM, the pool and the PCI mappings are
/// deleted, and what an interrupted apply was creating (each only if it is
/// the object talosprov was making); images too when `purge_images`.
pub fn destroy_plan(state: Option<&State>, observed: &Observed, purge_images: bool) -> Plan {
    let mut changes = Vec::new();
    if let Some(s) = state {
        let r = &s.resources;
        for (host, vm) in &r.vms {
            let role = recorded_role(s, host);
            let reason = format!(
                "Talos reset where reachable, then VM {} on {} shut down and deleted",
                vm.vmid, vm.node
            );
            changes.push(
                Change::vm(host.clone(), VmOp::Delete { role }, reason).with_fields(vec![field(
                    VmField::Vmid,
                    Some(vm.vmid),
                    None,
                )]),
            );
        }
        for name in r.pools.keys() {
            changes.push(Change::pool(
                name.clone(),
                PoolOp::Delete,
                "cluster destroyed",
            ));
        }
        for name in r.pci_mappings.keys() {
            changes.push(Change::pci_mapping(
                name.clone(),
                MappingOp::Delete,
                "cluster destroyed",
            ));
        }
        for (address, _) in s.intents() {
            if !s.has_record(&address) {
                changes.extend(Change::delete(address, ownership::leftover(None)));
            }
        }
        if purge_images {
            for (name, image) in &r.images {
                let volid = field(Field::Volid, Some(&image.volid), None);
                changes.push(
                    Change::image(name.clone(), ImageOp::Delete, "--purge-images")
                        .with_fields(vec![volid]),
                );
            }
        }
    }
    let mut plan = Plan {
        format_version: PLAN_FORMAT_VERSION,
        lineage: state.map(|s| s.lineage),
        serial: state.map(|s| s.serial),
        refreshed: observed.refreshed,
        destroy: true,
        changes,
        drift: Vec::new(),
        warnings: Vec::new(),
        conflicts: Vec::new(),
        addons: Vec::new(),
        pools: Vec::new(),
    };
    super::order::order_destroy(&mut plan);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_of_configs_from_new_secrets_are_known_after_apply() {
        let config = PlannedConfig {
            ip: "10.0.0.1".parse().unwrap(),
            config_sha256: "ab12".into(),
            talos_version: "v1.13.8".into(),
            installer_image: "installer".into(),
            mode: ApplyMode::Maintenance,
            kubernetes: None,
        };
        let op = ConfigOp::ApplyConfig {
            config,
            role: Role::Controlplane,
        };
        let c = Change::config("cp-01", op, "new").with_fields(vec![
            field(ConfigField::ConfigSha256, None, Some("ab12")),
            field(ConfigField::TalosVersion, None, Some("v1.13.8")),
        ]);
        let mut p = Plan {
            format_version: PLAN_FORMAT_VERSION,
            lineage: None,
            serial: None,
            refreshed: true,
            destroy: false,
            changes: vec![c],
            drift: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
        };
        digests_known_after_apply(&mut p);
        let fields = &p.changes[0].fields;
        assert_eq!(fields[0].after.as_deref(), Some(KNOWN_AFTER_APPLY));
        assert_eq!(fields[1].after.as_deref(), Some("v1.13.8"));
    }
}
