//! Ownership in the plan (pure), the rules each kind's module applies:
//! talosprov changes or deletes only what it created or imported. A VM, pool
//! or PCI mapping found in Proxmox at an ID the topology declares, with
//! neither a record nor a create intent in the state, is a conflict: the
//! plan names it with the command that takes it over, and holds back the
//! changes that depend on it. An object found where a create intent says an
//! interrupted apply was making it is adopted.

use std::collections::BTreeSet;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;
use talosprov_statefile::intent::CreateIntent;

use super::desired::Desired;
use super::observed::Observed;
use crate::change::{Action, Change, MappingOp, PoolOp, VmOp};
use crate::model::{Conflict, Drift, Plan};

/// What planning collects besides the changes.
pub(crate) struct Found<'a> {
    /// Drift (recorded differs from observed).
    pub drift: &'a mut Vec<Drift>,
    /// Objects talosprov does not own.
    pub conflicts: &'a mut Vec<Conflict>,
}

/// A conflict at `address` (Proxmox ID `id`); `recorded` when the state holds
/// a stale record there, which `state rm` forgets first.
pub(crate) fn conflict(address: &Address, id: &str, found: String, recorded: bool) -> Conflict {
    let mut c = Conflict::at(address, id, found);
    if recorded {
        c.commands
            .insert(0, format!("talosprov state rm {address}"));
    }
    c
}

/// The payload-free delete of each create intent in `state` at an address
/// `of_kind` accepts and with no record there: what an interrupted apply
/// was making, deleted on destroy only if it is the object it was making.
pub(crate) fn leftover_deletes(
    state: &State,
    of_kind: impl Fn(&Address) -> bool,
    changes: &mut Vec<Change>,
) {
    for (address, _) in state.intents() {
        if of_kind(&address) && !state.has_record(&address) {
            changes.extend(Change::delete(&address, leftover(None)));
        }
    }
}

/// The change that adopts an object an interrupted apply created but did not
/// record.
pub(crate) const ADOPTED: &str = "created by an interrupted apply and not recorded: adopted";

/// The reason of the delete of an object an interrupted apply was
/// creating, which the topology no longer has: deleted if it was made
/// (`exists` false: it was not, and only the intent is dropped).
pub(crate) fn leftover(exists: Option<bool>) -> &'static str {
    match exists {
        Some(false) => {
            "an interrupted apply was creating it and the topology no longer has it; it was \
             not created, so only the record of the attempt is dropped"
        }
        _ => {
            "left by an interrupted apply and no longer in the topology: deleted (only if it \
             is the one talosprov was creating)"
        }
    }
}

/// Whether refresh saw the VM `intent` names, with the name and node the
/// create request gives it.
pub(crate) fn made_vm_seen(intent: &CreateIntent, obs: &Observed) -> bool {
    intent
        .vmid()
        .and_then(|id| obs.vms.get(&id))
        .is_some_and(|s| {
            s.name.as_deref() == intent.name.as_deref()
                && Some(s.node.as_str()) == intent.node.as_deref()
        })
}

/// The create the topology wants at a conflict's `address`, ordered like
/// the real one and then held back with what depends on it.
fn stand_in(address: &Address, desired: &Desired) -> Option<Change> {
    match address {
        Address::Pool(name) => Some(Change::pool(name.clone(), PoolOp::Create, "")),
        Address::PciMapping(name) => {
            let want = desired.pci_mappings.get(name)?;
            Some(Change::pci_mapping(
                name.clone(),
                MappingOp::Create(want.clone()),
                "",
            ))
        }
        Address::Vm(host) => {
            let want = desired.vms.get(host)?;
            let vm = crate::planned::PlannedVm {
                spec: want.spec.clone(),
                restart: false,
            };
            let role = want.role;
            Some(Change::vm(host.clone(), VmOp::Create { vm, role }, ""))
        }
        Address::Image(_)
        | Address::HaRule(_)
        | Address::Config(_)
        | Address::Bootstrap
        | Address::Kubeconfig
        | Address::Talosconfig
        | Address::Object(_) => None,
    }
}

/// Order the plan (see `order::order`) and hold back every change that
/// depends, directly or not, on an object in conflict; each conflict lists the
/// changes it holds back.
pub(super) fn order_holding_back(plan: &mut Plan, desired: &Desired) {
    let at: BTreeSet<Address> = plan.conflicts.iter().map(|c| c.address.clone()).collect();
    // Stand-ins at the conflicts' addresses, so that ordering links what
    // depends on them.
    for a in &at {
        if plan.change(a).is_none()
            && let Some(c) = stand_in(a, desired)
        {
            plan.changes.push(c);
        }
    }
    super::order::order(plan, desired);
    if at.is_empty() {
        return;
    }
    let closure = |from: &Address| -> BTreeSet<Address> {
        let mut held: BTreeSet<Address> = BTreeSet::from([from.clone()]);
        // Changes are in dependency order: one pass reaches every dependant.
        for c in &plan.changes {
            if c.depends_on.iter().any(|d| held.contains(d)) {
                held.insert(c.address().clone());
            }
        }
        held
    };
    let mut all: BTreeSet<Address> = BTreeSet::new();
    let held: Vec<BTreeSet<Address>> = plan.conflicts.iter().map(|c| closure(&c.address)).collect();
    for (conflict, held) in plan.conflicts.iter_mut().zip(held) {
        conflict.blocked = held
            .iter()
            .filter(|a| **a != conflict.address)
            .cloned()
            .collect();
        all.extend(held);
    }
    plan.changes.retain(|c| !all.contains(c.address()));
    // An image is downloaded for the VMs created from it: none, when they
    // are all held back.
    let needed: BTreeSet<Address> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.action(), Action::Create | Action::Replace))
        .filter_map(|c| match &c.address() {
            Address::Vm(host) => desired.vms.get(host),
            Address::Image(_)
            | Address::PciMapping(_)
            | Address::HaRule(_)
            | Address::Pool(_)
            | Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
            | Address::Talosconfig
            | Address::Object(_) => None,
        })
        .map(|vm| Address::Image(vm.image.clone()))
        .collect();
    plan.changes.retain(|c| {
        !(matches!(c.address(), Address::Image(_))
            && c.action() == Action::Create
            && !needed.contains(c.address()))
    });
    for c in &mut plan.changes {
        c.depends_on.retain(|d| !all.contains(d));
    }
}
