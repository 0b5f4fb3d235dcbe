//! Ownership in the plan (pure): talosprov changes or deletes only what it
//! created or imported. A VM, pool or PCI mapping found in Proxmox at an ID
//! the topology declares, with neither a record nor a create intent in the
//! state, is a conflict: the plan names it with the command that takes it
//! over, and holds back the changes that depend on it. An object found where
//! a create intent says an interrupted apply was making it is adopted. The
//! pool and the mappings are compared with what Proxmox holds (drift).

use std::collections::BTreeSet;

use crate::state::format::{self, State};
use crate::state::{Address, CreateIntent};

use super::desired::Desired;
use super::field::MappingField;
use super::model::field;
use super::observed::Observed;
use super::{Action, Change, Conflict, Drift, DriftKind, MappingOp, Plan, PoolOp, VmOp};

/// What planning collects besides the changes.
pub(super) struct Found<'a> {
    /// Drift (recorded differs from observed).
    pub drift: &'a mut Vec<Drift>,
    /// Objects talosprov does not own.
    pub conflicts: &'a mut Vec<Conflict>,
}

/// A conflict at `address` (Proxmox ID `id`); `recorded` when the state holds
/// a stale record there, which `state rm` forgets first.
pub(super) fn conflict(address: &Address, id: &str, found: String, recorded: bool) -> Conflict {
    let mut c = Conflict::at(address, id, found);
    if recorded {
        c.commands
            .insert(0, format!("talosprov state rm {address}"));
    }
    c
}

/// The change that adopts an object an interrupted apply created but did not
/// record.
pub(super) const ADOPTED: &str = "created by an interrupted apply and not recorded: adopted";

/// The reason of the delete of an object an interrupted apply was
/// creating, which the topology no longer has: deleted if it was made
/// (`exists` false: it was not, and only the intent is dropped).
pub(super) fn leftover(exists: Option<bool>) -> &'static str {
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

fn pool_text(name: &str, pool: &format::Pool) -> String {
    match pool.comment.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => format!("pool {name} (comment {c:?})"),
        None => format!("pool {name}"),
    }
}

/// The pool: created, adopted, re-created when deleted outside talosprov,
/// deleted when no longer wanted; a pool talosprov does not own is a
/// conflict. Its comment is not managed (the topology has none).
pub(super) fn plan_pool(
    d: &Desired,
    state: &State,
    obs: &Observed,
    changes: &mut Vec<Change>,
    found: &mut Found<'_>,
) {
    let rec = &state.resources;
    let seen = obs.pools.as_ref();
    if let Some(name) = &d.pool {
        let address = Address::Pool(name.clone());
        let there = seen.map(|p| p.get(name));
        if rec.pools.contains_key(name) {
            if let Some(None) = there {
                found.drift.push(Drift {
                    address: address.clone(),
                    kind: DriftKind::Deleted,
                    fields: Vec::new(),
                });
                changes.push(Change::pool(
                    name.clone(),
                    PoolOp::Create,
                    "deleted outside talosprov: created again",
                ));
            }
        } else {
            match (there.flatten(), state.intent(&address)) {
                (Some(p), None) => {
                    found
                        .conflicts
                        .push(conflict(&address, name, pool_text(name, p), false))
                }
                (Some(_), Some(_)) => {
                    changes.push(Change::pool(name.clone(), PoolOp::Create, ADOPTED))
                }
                (None, _) => changes.push(Change::pool(
                    name.clone(),
                    PoolOp::Create,
                    "resource pool for the cluster's VMs",
                )),
            }
        }
    }
    for name in rec.pools.keys() {
        if d.pool.as_ref() != Some(name) {
            changes.push(Change::pool(
                name.clone(),
                PoolOp::Delete,
                "no longer in the topology",
            ));
        }
    }
    for (address, _) in state.intents() {
        if let Address::Pool(name) = &address
            && !rec.pools.contains_key(name)
            && d.pool.as_ref() != Some(name)
        {
            let exists = seen.map(|p| p.contains_key(name));
            changes.push(Change::pool(name.clone(), PoolOp::Delete, leftover(exists)));
        }
    }
}

/// A mapping with its values as Proxmox compares them: entries sorted, PCI
/// IDs in lower case, and an empty description as none.
fn normalised(m: &format::PciMapping) -> format::PciMapping {
    let mut map: Vec<format::PciMapEntry> = m
        .map
        .iter()
        .map(|e| format::PciMapEntry {
            node: e.node.clone(),
            path: e.path.to_ascii_lowercase(),
            id: e.id.to_ascii_lowercase().replace("0x", ""),
            subsystem_id: e
                .subsystem_id
                .as_ref()
                .map(|s| s.to_ascii_lowercase().replace("0x", "")),
            iommu_group: e.iommu_group,
        })
        .collect();
    map.sort_by(|a, b| (&a.node, &a.path, &a.id).cmp(&(&b.node, &b.path, &b.id)));
    format::PciMapping {
        description: m.description.clone().filter(|d| !d.is_empty()),
        map,
    }
}

/// Whether two mapping records say the same (see `normalised`): entry order,
/// the case of PCI IDs and an empty description do not count.
pub fn same_mapping(a: &format::PciMapping, b: &format::PciMapping) -> bool {
    normalised(a) == normalised(b)
}

/// `node:path=id` for each entry, as the plan shows a mapping.
pub(super) fn map_text(m: &format::PciMapping) -> String {
    m.map
        .iter()
        .map(|e| format!("{}:{}={}", e.node, e.path, e.id))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mapping_fields(
    before: &format::PciMapping,
    after: &format::PciMapping,
) -> Vec<super::FieldChange> {
    let (b, a) = (normalised(before), normalised(after));
    let mut fields = Vec::new();
    if b.description != a.description {
        fields.push(field(
            MappingField::Description,
            b.description.as_ref(),
            a.description.as_ref(),
        ));
    }
    if b.map != a.map {
        fields.push(field(
            MappingField::Map,
            Some(map_text(&b)),
            Some(map_text(&a)),
        ));
    }
    fields
}

/// The PCI mappings: created, adopted, updated to the topology (from what
/// Proxmox holds when it was read, with drift), re-created when deleted
/// outside talosprov, deleted when no longer wanted; a mapping talosprov does
/// not own is a conflict.
pub(super) fn plan_mappings(
    d: &Desired,
    state: &State,
    obs: &Observed,
    changes: &mut Vec<Change>,
    found: &mut Found<'_>,
) {
    let rec = &state.resources;
    let seen = obs.pci_mappings.as_ref();
    for (name, want) in &d.pci_mappings {
        let address = Address::PciMapping(name.clone());
        let there = seen.map(|m| m.get(name));
        let Some(have) = rec.pci_mappings.get(name) else {
            match (there.flatten(), state.intent(&address)) {
                (Some(m), None) => {
                    let text = format!("PCI mapping {name} ({})", map_text(m));
                    found.conflicts.push(conflict(&address, name, text, false));
                }
                (Some(m), Some(_)) => {
                    let op = MappingOp::Create(want.clone());
                    let c = Change::pci_mapping(name.clone(), op, ADOPTED);
                    changes.push(c.with_fields(mapping_fields(m, want)));
                }
                (None, _) => {
                    let op = MappingOp::Create(want.clone());
                    let c = Change::pci_mapping(name.clone(), op, "PCI hardware mapping");
                    let map = field(MappingField::Map, None, Some(map_text(want)));
                    changes.push(c.with_fields(vec![map]));
                }
            }
            continue;
        };
        let current = match there {
            Some(None) => {
                found.drift.push(Drift {
                    address: address.clone(),
                    kind: DriftKind::Deleted,
                    fields: Vec::new(),
                });
                let c = Change::pci_mapping(
                    name.clone(),
                    MappingOp::Create(want.clone()),
                    "deleted outside talosprov: created again",
                );
                let map = field(MappingField::Map, None, Some(map_text(want)));
                changes.push(c.with_fields(vec![map]));
                continue;
            }
            Some(Some(seen)) => {
                if !same_mapping(have, seen) {
                    found.drift.push(Drift {
                        address: address.clone(),
                        kind: DriftKind::Changed,
                        fields: mapping_fields(have, seen),
                    });
                }
                seen
            }
            None => have,
        };
        if !same_mapping(current, want) {
            let op = MappingOp::Update(want.clone());
            let c = Change::pci_mapping(name.clone(), op, "PCI mapping changed");
            changes.push(c.with_fields(mapping_fields(current, want)));
        }
    }
    for name in rec.pci_mappings.keys() {
        if !d.pci_mappings.contains_key(name) {
            changes.push(Change::pci_mapping(
                name.clone(),
                MappingOp::Delete,
                "no longer in the topology",
            ));
        }
    }
    for (address, _) in state.intents() {
        if let Address::PciMapping(name) = &address
            && !rec.pci_mappings.contains_key(name)
            && !d.pci_mappings.contains_key(name)
        {
            let exists = seen.map(|m| m.contains_key(name));
            changes.push(Change::pci_mapping(
                name.clone(),
                MappingOp::Delete,
                leftover(exists),
            ));
        }
    }
}

/// Deletes of VMs an interrupted apply was creating for nodes the topology no
/// longer has (deleted only if the VM at the vmid is the one it was making).
pub(super) fn leftover_vms(d: &Desired, state: &State, obs: &Observed, changes: &mut Vec<Change>) {
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

/// Whether refresh saw the VM `intent` names, with the name and node the
/// create request gives it.
pub(super) fn made_vm_seen(intent: &CreateIntent, obs: &Observed) -> bool {
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
            let vm = super::PlannedVm {
                spec: want.spec.clone(),
                restart: false,
            };
            let role = want.role;
            Some(Change::vm(host.clone(), VmOp::Create { vm, role }, ""))
        }
        Address::Image(_)
        | Address::Config(_)
        | Address::Bootstrap
        | Address::Kubeconfig
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
            | Address::Pool(_)
            | Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(node: &str, path: &str, id: &str) -> format::PciMapEntry {
        format::PciMapEntry {
            node: node.into(),
            path: path.into(),
            id: id.into(),
            subsystem_id: None,
            iommu_group: Some(10),
        }
    }

    #[test]
    fn mappings_compare_as_proxmox_does() {
        let a = format::PciMapping {
            description: Some(String::new()),
            map: vec![
                entry("pve1", "0000:01:00", "10DE:2507"),
                entry("pve2", "0000:02:00", "10de:2507"),
            ],
        };
        let b = format::PciMapping {
            description: None,
            map: vec![
                entry("pve2", "0000:02:00", "10de:2507"),
                entry("pve1", "0000:01:00", "10de:2507"),
            ],
        };
        assert!(same_mapping(&a, &b));
        let mut c = b.clone();
        c.map.pop();
        assert!(!same_mapping(&a, &c));
        let fields = mapping_fields(&a, &c);
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].name, MappingField::Map.into());
    }
}
