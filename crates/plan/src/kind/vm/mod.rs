//! The nodes' VMs (`vm/<hostname>`): q35/OVMF VMs on Proxmox, created from
//! the node's image, changed in place (cores, memory, disk growth, PCI
//! devices), replaced at another vmid or host, and deleted when their node
//! leaves (a control plane leaves etcd first).

mod spec;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;

use crate::change::{Action, Change, VmOp};
use crate::desired::{Desired, DesiredVm};
use crate::field::VmField;
use crate::model::{GIB, PlanError, PlanWarning, field};
use crate::observed::Observed;
use crate::ownership::{self, leftover, made_vm_seen};
use crate::removal::check_removal;
use talosprov_base::role::Role;

use super::config::recorded_role;
use super::resource::{Destroying, Phase, Planning, ResourceKind};

use spec::plan_vm;

/// The `vm/<hostname>` kind.
#[derive(Debug, Clone, Copy)]
pub struct Vm;

impl ResourceKind for Vm {
    type Op = VmOp;

    fn action(op: &VmOp) -> Action {
        match op {
            VmOp::Create { .. } => Action::Create,
            VmOp::Update { .. } => Action::Update,
            VmOp::Replace { .. } => Action::Replace,
            VmOp::Delete { .. } => Action::Delete,
        }
    }

    fn phase(op: &VmOp) -> Phase {
        match op {
            VmOp::Create { .. } | VmOp::Update { .. } | VmOp::Replace { .. } => Phase::Vms,
            VmOp::Delete { .. } => Phase::VmDeletes,
        }
    }

    /// Also refuses removing every control plane of a running cluster, and
    /// deletes the VMs an interrupted apply was creating for nodes no longer
    /// in the topology.
    fn plan(p: &mut Planning<'_>) {
        plan_vms(p);
        check_controlplane_removal(p.desired, p.state, p);
        plan_vm_deletions(p.desired, p.state, &mut p.changes);
        leftover_vms(p.desired, p.state, p.observed, &mut p.changes);
    }

    /// Each VM is deleted after a Talos reset where the node answers.
    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>) {
        let s = d.state;
        for (host, vm) in &s.resources.vms {
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
        ownership::leftover_deletes(s, |a| matches!(a, Address::Vm(_)), changes);
    }
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

/// Each desired VM's change; the hosts whose VM is created or replaced
/// (their disk, and so their machine config, starts fresh) go to
/// [`Planning::fresh_vms`].
fn plan_vms(out: &mut Planning<'_>) {
    let (d, state, obs) = (out.desired, out.state, out.observed);
    let vacating = spec::vacating(&state.resources.vms, |h| d.vms.get(h).map(|v| &v.record));
    for (host, want) in &d.vms {
        let (mut below_image, mut fresh) = (None, false);
        let (changes, mut found) = out.changes_and_found();
        let intent = state.intent(&Address::Vm(host.clone()));
        let recorded = state.resources.vms.get(host);
        match plan_vm(host, want, (recorded, intent), (obs, &vacating), &mut found) {
            Ok(Some(c)) => {
                if matches!(c.action(), Action::Create | Action::Replace) {
                    fresh = true;
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
        out.errors.extend(unknown_bridges(host, want, obs));
        if fresh {
            out.fresh_vms.insert(host.clone());
        }
    }
}

/// Each NIC of `want` whose bridge its host lacks, as refresh listed the
/// host's bridges (nothing when they were not read).
fn unknown_bridges(host: &str, want: &DesiredVm, obs: &Observed) -> Vec<PlanError> {
    let Some(known) = obs.bridges.get(&want.spec.node) else {
        return Vec::new();
    };
    want.spec
        .networks
        .iter()
        .enumerate()
        .filter(|(_, n)| !known.contains(&n.bridge))
        .map(|(i, n)| PlanError::UnknownBridge {
            hostname: host.to_owned(),
            nic: format!("net{i}"),
            bridge: n.bridge.clone(),
            host: want.spec.node.clone(),
            bridges: known.iter().cloned().collect(),
        })
        .collect()
}

/// Refuse removing the recorded nodes when no control plane of the running
/// cluster stays (new ones cannot join an etcd that is gone; the count left
/// includes new ones), and warn when few do.
fn check_controlplane_removal(d: &Desired, state: &State, out: &mut Planning<'_>) {
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

/// Deletes of VMs an interrupted apply was creating for nodes the topology no
/// longer has (deleted only if the VM at the vmid is the one it was making).
fn leftover_vms(d: &Desired, state: &State, obs: &Observed, changes: &mut Vec<Change>) {
    for (address, intent) in state.intents() {
        let Address::Vm(host) = &address else {
            continue;
        };
        if state.resources.vms.contains_key(host) || d.vms.contains_key(host) {
            continue;
        }
        let exists = obs.refreshed.then(|| made_vm_seen(intent, obs));
        changes.push(Change::vm(
            host.clone(),
            VmOp::Delete { role: None },
            leftover(exists),
        ));
    }
}
