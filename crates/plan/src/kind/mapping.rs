//! The cluster-wide PCI hardware mappings (`pci_mapping/<name>`) the GPU
//! nodes' `hostpci` entries name: Proxmox's `/cluster/mapping/pci`.

use talosprov_statefile::address::Address;
use talosprov_statefile::format;

use crate::change::{Action, Change, FieldChange, MappingOp};
use crate::field::MappingField;
use crate::model::{Drift, DriftKind, field};
use crate::ownership::{self, ADOPTED, conflict, leftover};

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `pci_mapping/<name>` kind.
#[derive(Debug, Clone, Copy)]
pub struct Mapping;

impl ResourceKind for Mapping {
    type Op = MappingOp;

    fn action(op: &MappingOp) -> Action {
        match op {
            MappingOp::Create(_) => Action::Create,
            MappingOp::Update(_) => Action::Update,
            MappingOp::Delete => Action::Delete,
        }
    }

    fn phase(op: &MappingOp) -> Phase {
        match op {
            MappingOp::Create(_) | MappingOp::Update(_) => Phase::Provision,
            MappingOp::Delete => Phase::ProvisionDeletes,
        }
    }

    fn plan(p: &mut Planning<'_>) {
        plan_mappings(p);
    }

    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>) {
        let recorded = d.state.resources.pci_mappings.keys();
        changes.extend(
            recorded
                .map(|n| Change::pci_mapping(n.clone(), MappingOp::Delete, "cluster destroyed")),
        );
        ownership::leftover_deletes(d.state, |a| matches!(a, Address::PciMapping(_)), changes);
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
fn map_text(m: &format::PciMapping) -> String {
    m.map
        .iter()
        .map(|e| format!("{}:{}={}", e.node, e.path, e.id))
        .collect::<Vec<_>>()
        .join(", ")
}

fn mapping_fields(before: &format::PciMapping, after: &format::PciMapping) -> Vec<FieldChange> {
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
fn plan_mappings(p: &mut Planning<'_>) {
    let (d, state, obs) = (p.desired, p.state, p.observed);
    let (changes, mut found) = p.changes_and_found();
    let found = &mut found;
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
                    diff: None,
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
                        diff: None,
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
