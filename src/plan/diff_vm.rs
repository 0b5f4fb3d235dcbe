//! The VM part of the diff (pure): a desired VM against its record and what
//! Proxmox shows gives create, replace (another vmid or host), update (cores,
//! memory, disk growth, PCI devices, tags) or nothing; drift is noted; a disk
//! shrink is refused.

use std::collections::{BTreeMap, BTreeSet};

use crate::state::Address;
use crate::state::format;

use super::desired::DesiredVm;
use super::diff::{PlanError, change, field};
use super::observed::{Observed, ObservedVm};
use super::{Action, Change, Drift, DriftKind, FieldChange, PlanWarning};

/// The values to compare a desired VM with: the observed ones where known,
/// else the recorded ones.
fn current_of(recorded: &format::Vm, seen: Option<&ObservedVm>) -> format::Vm {
    let mut cur = recorded.clone();
    if let Some(s) = seen {
        cur.cores = s.cores.unwrap_or(cur.cores);
        cur.memory_mib = s.memory_mib.unwrap_or(cur.memory_mib);
        cur.disk_gib = s.disk_gib.unwrap_or(cur.disk_gib);
        cur.tags = s.tags.iter().cloned().collect();
        if let Some(h) = &s.hostpci {
            cur.hostpci = h.clone();
        }
    }
    cur
}

fn vm_fields(before: &format::Vm, after: &format::Vm) -> Vec<FieldChange> {
    let mut f = Vec::new();
    if before.cores != after.cores {
        f.push(field("cores", Some(before.cores), Some(after.cores)));
    }
    if before.memory_mib != after.memory_mib {
        f.push(field(
            "memory_mib",
            Some(before.memory_mib),
            Some(after.memory_mib),
        ));
    }
    if before.disk_gib != after.disk_gib {
        f.push(field(
            "disk_gib",
            Some(before.disk_gib),
            Some(after.disk_gib),
        ));
    }
    let keys: BTreeSet<&String> = before.hostpci.keys().chain(after.hostpci.keys()).collect();
    for key in keys {
        let (b, a) = (before.hostpci.get(key), after.hostpci.get(key));
        if b != a {
            f.push(field(key, b, a));
        }
    }
    let (bt, at): (BTreeSet<&String>, BTreeSet<&String>) =
        (before.tags.iter().collect(), after.tags.iter().collect());
    if bt != at {
        f.push(field(
            "tags",
            Some(before.tags.join(";")),
            Some(after.tags.join(";")),
        ));
    }
    f
}

pub(super) fn plan_vm(
    host: &str,
    want: &DesiredVm,
    recorded: Option<&format::Vm>,
    obs: &Observed,
    drift: &mut Vec<Drift>,
    warnings: &mut Vec<PlanWarning>,
) -> Result<Option<Change>, PlanError> {
    let address = Address::Vm(host.to_owned());
    let w = &want.record;
    let Some(rec) = recorded else {
        if let Some(seen) = obs.vms.get(&w.vmid) {
            if seen.name.as_deref() == Some(host) && seen.node == w.node {
                warnings.push(PlanWarning {
                    address: Some(address.clone()),
                    message: format!(
                        "VM {} already exists on {} with this name but is not in the state: \
                         apply adopts it as is",
                        w.vmid, w.node
                    ),
                });
            } else {
                warnings.push(PlanWarning {
                    address: Some(address.clone()),
                    message: format!(
                        "vmid {} is held by {} on {}: apply will fail until it is free or \
                         the node gets another vm_id",
                        w.vmid,
                        seen.name.as_deref().unwrap_or("a guest"),
                        seen.node
                    ),
                });
            }
        }
        let mut c = change(
            address,
            Action::Create,
            format!(
                "new {} node: VM {} on {}",
                want.role.as_str(),
                w.vmid,
                w.node
            ),
        );
        c.fields = vm_fields(
            &format::Vm {
                cores: 0,
                memory_mib: 0,
                disk_gib: 0,
                hostpci: BTreeMap::new(),
                tags: Vec::new(),
                ..w.clone()
            },
            w,
        )
        .into_iter()
        .map(|f| FieldChange { before: None, ..f })
        .collect();
        c.fields.insert(0, field("vmid", None, Some(w.vmid)));
        return Ok(Some(c));
    };
    if rec.vmid != w.vmid || rec.node != w.node {
        let mut c = change(
            address,
            Action::Replace,
            format!(
                "moves from VM {} on {} to VM {} on {}: the VM is deleted and created anew",
                rec.vmid, rec.node, w.vmid, w.node
            ),
        );
        if rec.vmid != w.vmid {
            c.fields.push(field("vmid", Some(rec.vmid), Some(w.vmid)));
        }
        if rec.node != w.node {
            c.fields.push(field("node", Some(&rec.node), Some(&w.node)));
        }
        return Ok(Some(c));
    }
    let seen = if obs.refreshed {
        match obs.vms.get(&rec.vmid) {
            Some(s) if s.node == rec.node && s.name.as_deref() == Some(host) => Some(s),
            _ => {
                drift.push(Drift {
                    address: address.clone(),
                    kind: DriftKind::Deleted,
                    fields: Vec::new(),
                });
                let mut c = change(
                    address,
                    Action::Create,
                    format!("VM {} was deleted outside talosprov: created again", w.vmid),
                );
                c.fields.push(field("vmid", None, Some(w.vmid)));
                return Ok(Some(c));
            }
        }
    } else {
        None
    };
    let current = current_of(rec, seen);
    let drifted = vm_fields(rec, &current);
    if !drifted.is_empty() {
        drift.push(Drift {
            address: address.clone(),
            kind: DriftKind::Changed,
            fields: drifted,
        });
    }
    if w.disk_gib < current.disk_gib {
        return Err(PlanError::DiskShrink {
            hostname: host.to_owned(),
            vmid: w.vmid,
            current_gib: current.disk_gib,
            wanted_gib: w.disk_gib,
        });
    }
    let fields = vm_fields(&current, w);
    if fields.is_empty() {
        return Ok(None);
    }
    // Without CPU and memory hotplug, Proxmox keeps these pending on a running
    // VM until it restarts; tags and a disk grow apply at once.
    let restart = fields
        .iter()
        .any(|f| f.name == "cores" || f.name == "memory_mib" || f.name.starts_with("hostpci"));
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    let mut c = change(
        address,
        Action::Update,
        format!(
            "{} changed{}",
            names.join(", "),
            if restart {
                ": the VM restarts through Proxmox to apply it"
            } else {
                ""
            }
        ),
    );
    c.fields = fields;
    c.reboot = Some(restart);
    Ok(Some(c))
}
