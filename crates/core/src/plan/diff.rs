//! The diff (pure): desired resources against the recorded state and the
//! observed cluster give the changes, each with an action, a reason and field
//! values; drift (observed differs from recorded) is listed apart; a disk
//! shrink, and a new disk smaller than the image already in storage, are
//! refused. `order` then sorts the result.

use std::collections::BTreeSet;

use crate::state::format::State;
use crate::state::{Address, Sensitive};

use crate::plan::removal::{RemovalRefused, check_removal};

use super::config_diff;
use super::desired::Desired;
use super::diff_vm::plan_vm;
use super::observed::Observed;
use super::ownership;
use super::planned::{ApplyMode, KubernetesChange, PlannedConfig, PlannedImage, PlannedVm};
use super::staged::{Planned, StagedNote, staged_note};
use super::{
    Action, Change, Drift, DriftKind, FieldChange, PLAN_FORMAT_VERSION, Plan, PlanWarning,
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

/// A change planning refuses to make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Proxmox cannot shrink a disk, and talosprov never loses data to do it.
    #[error(
        "vm/{hostname} (vmid {vmid}): disk_size {wanted_gib} GiB is smaller than the disk's \
         {current_gib} GiB; disks only grow (raise disk_size back, or replace the node)"
    )]
    DiskShrink {
        /// The node.
        hostname: String,
        /// Its vmid.
        vmid: u32,
        /// Size now, GiB.
        current_gib: u64,
        /// Size asked for, GiB.
        wanted_gib: u64,
    },
    /// A new VM's disk would be smaller than the image it is imported from:
    /// Proxmox imports the image at its virtual size, and the resize to
    /// `disk_size` that follows cannot shrink it, so the create would fail
    /// half-way, after the VM was made.
    #[error(
        "vm/{hostname} (vmid {vmid}): disk_size {disk_gib} GiB is smaller than its image \
         {volid} on {host}, whose virtual size is {} ({image_bytes} bytes); raise disk_size \
         to {} GiB or more",
        gib_text(*image_bytes),
        image_bytes.div_ceil(GIB)
    )]
    DiskBelowImage {
        /// The node.
        hostname: String,
        /// Its vmid.
        vmid: u32,
        /// Its `disk_size`, GiB.
        disk_gib: u64,
        /// The image volume it imports.
        volid: String,
        /// The Proxmox host whose storage listing gave the size.
        host: String,
        /// The image's virtual size, bytes.
        image_bytes: u64,
    },
    /// The topology removes every control plane the cluster has (see
    /// [`check_removal`]).
    #[error(transparent)]
    Removal(#[from] RemovalRefused),
}

/// Bytes in a GiB (Proxmox's `G` in disk sizes).
const GIB: u64 = 1 << 30;

/// A size in bytes as GiB with two decimals, such as `1.50 GiB`.
fn gib_text(bytes: u64) -> String {
    // Exact in f64 up to 2^53 bytes (8 PiB), beyond any disk image.
    format!("{:.2} GiB", bytes as f64 / GIB as f64)
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

pub(super) fn change(address: Address, action: Action, reason: impl Into<String>) -> Change {
    Change::new(address, action, reason)
}

pub(super) fn field<T: ToString>(name: &str, before: Option<T>, after: Option<T>) -> FieldChange {
    FieldChange::new(
        name,
        before.map(|v| v.to_string()),
        after.map(|v| v.to_string()),
    )
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
        .filter(|f| f.name == "config_sha256" && f.after.is_some())
    {
        f.after = Some(KNOWN_AFTER_APPLY.to_owned());
    }
}

/// Plan an apply: every change that brings the cluster to `desired`.
///
/// # Errors
/// Every [`PlanError`] found (each a change refused).
pub fn plan(input: PlanInput<'_>) -> Result<Plan, Vec<PlanError>> {
    let empty = State::new(uuid::Uuid::nil());
    let state = input.state.unwrap_or(&empty);
    let rec = &state.resources;
    let d = input.desired;
    let obs = input.observed;
    let mut changes = Vec::new();
    let mut drift = Vec::new();
    let mut warnings = Vec::new();
    // The first Kubernetes version change seen (from, to), for one plan-wide
    // warning about the bootstrap manifests.
    let mut kubernetes_change: Option<(String, String)> = None;
    let mut errors = Vec::new();

    let mut conflicts = Vec::new();
    let mut found = ownership::Found {
        drift: &mut drift,
        conflicts: &mut conflicts,
    };
    ownership::plan_pool(d, state, obs, &mut changes, &mut found);
    ownership::plan_mappings(d, state, obs, &mut changes, &mut found);
    // What apply writes for each mapping it creates or updates.
    for c in &mut changes {
        if let (Address::PciMapping(name), Action::Create | Action::Update) = (&c.address, c.action)
        {
            c.pci_mapping = d.pci_mappings.get(name).cloned();
        }
    }

    let mut fresh_vms: BTreeSet<&str> = BTreeSet::new();
    for (host, want) in &d.vms {
        let mut found = ownership::Found {
            drift: &mut drift,
            conflicts: &mut conflicts,
        };
        let intent = state.intent(&Address::Vm(host.clone()));
        match plan_vm(host, want, (rec.vms.get(host), intent), obs, &mut found) {
            Ok(Some(mut c)) => {
                if matches!(c.action, Action::Create | Action::Replace) {
                    fresh_vms.insert(host.as_str());
                    let spec = &want.spec;
                    if let Some((on, size)) = image_size(obs, &spec.node, &spec.image_volid)
                        && spec.disk_gib.saturating_mul(GIB) < size
                    {
                        errors.push(PlanError::DiskBelowImage {
                            hostname: host.clone(),
                            vmid: spec.vmid,
                            disk_gib: spec.disk_gib,
                            volid: spec.image_volid.clone(),
                            host: on.to_owned(),
                            image_bytes: size,
                        });
                    }
                }
                c.role = Some(want.role);
                c.vm = Some(PlannedVm {
                    spec: want.spec.clone(),
                    restart: c.action == Action::Update && c.reboot == Some(true),
                });
                changes.push(c);
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    // An image is downloaded for the VMs created from it: a node upgraded in
    // place keeps its disk, so a new version's image waits for a new node.
    let needed: BTreeSet<&str> = d
        .vms
        .iter()
        .filter(|(host, _)| fresh_vms.contains(host.as_str()))
        .map(|(_, vm)| vm.image.as_str())
        .collect();
    for (name, image) in &d.images {
        if !rec.images.contains_key(name) && needed.contains(name.as_str()) {
            let mut c = change(
                Address::Image(name.clone()),
                Action::Create,
                format!(
                    "download Talos {} ({}) to {} on {}",
                    image.record.talos_version,
                    short(&image.record.schematic_id),
                    image.record.storage,
                    image.record.node
                ),
            );
            c.fields
                .push(field("volid", None, Some(&image.record.volid)));
            c.image = Some(PlannedImage {
                record: image.record.clone(),
                factory_url: d.factory_url.clone(),
            });
            changes.push(c);
        }
    }
    let recorded_controlplane = |host: &str| recorded_role(state, host) == Some(Role::Controlplane);
    let controlplanes: Vec<&str> = rec
        .vms
        .keys()
        .map(String::as_str)
        .filter(|h| recorded_controlplane(h))
        .collect();
    let removing: Vec<&str> = rec
        .vms
        .keys()
        .map(String::as_str)
        .filter(|h| !d.vms.contains_key(*h))
        .collect();
    // Refused when no control plane of the running cluster stays (new ones
    // cannot join an etcd that is gone); the count left includes new ones.
    let mut after: Vec<&str> = controlplanes.clone();
    after.extend(
        d.configs
            .iter()
            .filter(|(h, c)| {
                c.role == crate::topology::Role::Controlplane && !rec.vms.contains_key(*h)
            })
            .map(|(h, _)| h.as_str()),
    );
    match check_removal(&controlplanes, &removing).and_then(|_| check_removal(&after, &removing)) {
        Ok(found) => warnings.extend(found.into_iter().map(|w| PlanWarning {
            address: None,
            message: w.to_string(),
        })),
        Err(refused) => errors.push(refused.into()),
    }
    for (host, vm) in &rec.vms {
        if !d.vms.contains_key(host) {
            let controlplane = recorded_controlplane(host);
            let how = if controlplane {
                "Talos reset (graceful: leaves etcd), then"
            } else {
                "Talos reset, then"
            };
            let mut c = change(
                Address::Vm(host.clone()),
                Action::Delete,
                format!(
                    "not in the topology: {how} VM {} shut down and deleted",
                    vm.vmid
                ),
            );
            c.fields.push(field("vmid", Some(vm.vmid), None));
            c.role = recorded_role(state, host);
            changes.push(c);
        }
    }
    ownership::leftover_vms(d, state, obs, &mut changes);

    let bootstrapped = rec.bootstrap.as_ref().is_some_and(|b| b.done);
    for (host, want) in &d.configs {
        let planned = |mode: ApplyMode| PlannedConfig {
            ip: want.ip,
            config_sha256: want.record.config_sha256.clone(),
            talos_version: want.record.talos_version.clone(),
            installer_image: want.record.installer_image.clone(),
            mode,
            kubernetes: None,
        };
        let config_change = |action: Action, reason: &str, mode: ApplyMode| {
            let mut c = change(Address::Config(host.clone()), action, reason);
            c.role = Some(want.role);
            c.config = Some(planned(mode));
            c.reboot = mode.reboots();
            c
        };
        let recorded = rec.configs.get(host);
        let recorded_text = state.outputs.machineconfigs.get(host).map(|o| &o.value);
        if let (Some(r), Some(seen)) = (recorded, obs.talos_versions.get(host))
            && r.secure_mode
            && *seen != r.talos_version
        {
            drift.push(Drift {
                address: Address::Config(host.clone()),
                kind: DriftKind::Changed,
                fields: vec![field("talos_version", Some(&r.talos_version), Some(seen))],
            });
        }
        let address = Address::Config(host.clone());
        if let Some(r) = recorded.filter(|r| r.secure_mode)
            && obs.in_maintenance.contains(host)
            && !fresh_vms.contains(host.as_str())
        {
            drift.push(Drift {
                address: address.clone(),
                kind: DriftKind::Changed,
                fields: vec![field("mode", Some("secure"), Some("maintenance (reset)"))],
            });
            let mut c = config_change(
                Action::ApplyConfig,
                "the node was reset outside talosprov and waits in maintenance mode: its machine \
                 config is applied again",
                ApplyMode::Maintenance,
            );
            c.fields.push(field(
                "config_sha256",
                Some(&r.config_sha256),
                Some(&want.record.config_sha256),
            ));
            changes.push(c);
            continue;
        }
        let current = match recorded {
            Some(r) if !fresh_vms.contains(host.as_str()) => r,
            _ => {
                let why = if fresh_vms.contains(host.as_str()) {
                    "new VM: applied in maintenance mode"
                } else {
                    "no config applied yet: applied in maintenance mode"
                };
                let mut c = config_change(Action::ApplyConfig, why, ApplyMode::Maintenance);
                c.fields.push(field(
                    "config_sha256",
                    None,
                    Some(&want.record.config_sha256),
                ));
                changes.push(c);
                continue;
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
        if let Some(staged) = current.staged {
            let boot_time = obs.boot_times.get(host).copied();
            let planned = Planned {
                upgrade,
                config_changed,
            };
            match staged_note(&address, want.ip, staged, boot_time, obs.refreshed, planned) {
                StagedNote::Taken(d) => drift.push(d),
                StagedNote::Waiting(w) => warnings.push(w),
            }
        }
        if !upgrade && !config_changed {
            if !current.secure_mode {
                changes.push(config_change(
                    Action::ApplyConfig,
                    "applied, but the node was not seen in secure mode: checked and applied if missing",
                    ApplyMode::Maintenance,
                ));
            }
            continue;
        }
        let mut c = config_change(
            Action::ApplyConfig,
            "machine config changed",
            ApplyMode::UnknownUntilApply,
        );
        if upgrade {
            c.action = Action::Upgrade;
            c.reason = format!(
                "Talos {running} -> {} (installer image {})",
                want.record.talos_version, want.record.installer_image
            );
            c.reboot = Some(true);
            if *running != want.record.talos_version {
                c.fields.push(field(
                    "talos_version",
                    Some(running),
                    Some(&want.record.talos_version),
                ));
            }
            if current.installer_image != want.record.installer_image {
                c.fields.push(field(
                    "installer_image",
                    Some(&current.installer_image),
                    Some(&want.record.installer_image),
                ));
            }
        }
        if config_changed {
            c.fields.push(field(
                "config_sha256",
                Some(&current.config_sha256),
                Some(&want.record.config_sha256),
            ));
            let before = recorded_text.map(Sensitive::expose).unwrap_or("");
            let after = want.yaml.expose();
            c.config_diff = Some(config_diff::unified_diff(
                &config_diff::redacted(before),
                &config_diff::redacted(after),
            ));
            let kubernetes = (
                config_diff::kubernetes_version(before),
                config_diff::kubernetes_version(after),
            );
            if let (false, (Some(from), Some(to))) = (upgrade, &kubernetes)
                && from != to
            {
                c.reason = if want.role == crate::topology::Role::Controlplane {
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
                c.fields
                    .insert(0, field("kubernetes_version", Some(from), Some(to)));
                kubernetes_change.get_or_insert_with(|| (from.clone(), to.clone()));
            }
            if !upgrade {
                // The node's own answer to a dry run; unknown when it did not
                // answer at plan time (the view then gives the settings' hint).
                let mode = match obs.apply_reboots.get(host) {
                    Some(true) => ApplyMode::Reboot,
                    Some(false) => ApplyMode::NoReboot,
                    None => ApplyMode::UnknownUntilApply,
                };
                if let Some(p) = c.config.as_mut() {
                    p.mode = mode;
                }
                c.reboot = mode.reboots();
                if let (Some(from), Some(to)) = &kubernetes
                    && from != to
                    && let Some(p) = c.config.as_mut()
                {
                    p.kubernetes = Some(KubernetesChange {
                        from: from.clone(),
                        to: to.clone(),
                        // A change the node reboots for is applied whole with
                        // its reboot; otherwise the two phases of upgrade-k8s.
                        rolled: mode != ApplyMode::Reboot && current.secure_mode,
                        control_plane_components: Vec::new(),
                    });
                }
                if c.reboot.is_none() && config_diff::needs_reboot(before, after) {
                    c.reason =
                        "machine config changed; by the settings changed, likely with a reboot"
                            .into();
                }
                if let (Some(true), (Some(from), Some(to))) = (c.reboot, &kubernetes)
                    && from != to
                {
                    c.reason = format!(
                        "Kubernetes {from} -> {to} with other settings the node reboots for: \
                         the whole config applied with a reboot, node by node (control planes, \
                         then workers), each behind the health gate"
                    );
                }
            }
            if bootstrapped {
                for name in config_diff::bootstrap_only_changes(before, after) {
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
        }
        changes.push(c);
    }

    if let Some((from, to)) = kubernetes_change {
        warnings.push(PlanWarning {
            address: None,
            message: format!(
                "Kubernetes {from} -> {to}: the machine configs carry the new component and \
                 kubelet images, but the bootstrap manifests (kube-proxy, CoreDNS) are not \
                 synced through the Kubernetes API by this change. To roll them out, run \
                 `talosctl --nodes <control plane> upgrade-k8s --to {to}` afterwards, or apply \
                 them with kubectl"
            ),
        });
    }

    if let Some(node) = &d.bootstrap_node
        && !bootstrapped
    {
        changes.push(change(
            Address::Bootstrap,
            Action::Bootstrap,
            format!("etcd bootstrap on the first control plane, {node}"),
        ));
    }
    let bootstrap_planned = changes.iter().any(|c| c.action == Action::Bootstrap);
    if d.bootstrap_node.is_some() && (state.outputs.kubeconfig.is_none() || bootstrap_planned) {
        changes.push(change(
            Address::Kubeconfig,
            Action::Create,
            "admin kubeconfig, fetched through the Talos API after bootstrap",
        ));
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    let mut plan = Plan {
        format_version: PLAN_FORMAT_VERSION,
        lineage: input.state.map(|s| s.lineage),
        serial: input.state.map(|s| s.serial),
        refreshed: obs.refreshed,
        destroy: false,
        changes,
        drift,
        warnings,
        conflicts,
    };
    ownership::order_holding_back(&mut plan, d);
    Ok(plan)
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
            let mut c = change(
                Address::Vm(host.clone()),
                Action::Delete,
                format!(
                    "Talos reset where reachable, then VM {} on {} shut down and deleted",
                    vm.vmid, vm.node
                ),
            );
            c.fields.push(field("vmid", Some(vm.vmid), None));
            c.role = recorded_role(s, host);
            changes.push(c);
        }
        for name in r.pools.keys() {
            changes.push(change(
                Address::Pool(name.clone()),
                Action::Delete,
                "cluster destroyed",
            ));
        }
        for name in r.pci_mappings.keys() {
            changes.push(change(
                Address::PciMapping(name.clone()),
                Action::Delete,
                "cluster destroyed",
            ));
        }
        for (address, _) in s.intents() {
            if !s.has_record(&address) {
                changes.push(ownership::leftover(address, None));
            }
        }
        if purge_images {
            for (name, image) in &r.images {
                let mut c = change(
                    Address::Image(name.clone()),
                    Action::Delete,
                    "--purge-images",
                );
                c.fields.push(field("volid", Some(&image.volid), None));
                changes.push(c);
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
    };
    super::order::order_destroy(&mut plan);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_of_configs_from_new_secrets_are_known_after_apply() {
        let mut c = change(Address::Config("cp-01".into()), Action::ApplyConfig, "new");
        c.fields.push(field("config_sha256", None, Some("ab12")));
        c.fields.push(field("talos_version", None, Some("v1.13.8")));
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
        };
        digests_known_after_apply(&mut p);
        let fields = &p.changes[0].fields;
        assert_eq!(fields[0].after.as_deref(), Some(KNOWN_AFTER_APPLY));
        assert_eq!(fields[1].after.as_deref(), Some("v1.13.8"));
    }
}
