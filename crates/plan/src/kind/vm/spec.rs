//! The VM part of the diff (pure): a desired VM against its record and what
//! Proxmox shows gives create, replace (another vmid or host), update (cores,
//! memory, disk growth, PCI devices, tags) or nothing; drift is noted; a disk
//! shrink is refused. An update restarts the VM through Proxmox only when the
//! running VM does not have the wanted values (Proxmox keeps them pending).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

use talosprov_statefile::address::Address;
use talosprov_statefile::format;
use talosprov_statefile::intent::CreateIntent;

use crate::change::{Action, Change, FieldChange, VmOp};
use crate::desired::DesiredVm;
use crate::field::{Field, VmField};
use crate::model::{Drift, DriftKind, PlanError, field};
use crate::observed::{Observed, ObservedVm};
use crate::ownership::{self, Found};
use crate::planned::PlannedVm;

/// What a create or replace of `want`'s VM makes.
fn made(want: &DesiredVm) -> PlannedVm {
    PlannedVm {
        spec: want.spec.clone(),
        restart: false,
    }
}

/// The create of `want`'s VM at `host`.
fn create(host: &str, want: &DesiredVm, reason: String) -> Change {
    let op = VmOp::Create {
        vm: made(want),
        role: want.role,
    };
    Change::vm(host, op, reason)
}

/// The replace of `host`'s VM by `want`'s.
fn replace(host: &str, want: &DesiredVm, reason: String) -> Change {
    let op = VmOp::Replace {
        vm: made(want),
        role: want.role,
    };
    Change::vm(host, op, reason)
}

/// The values to compare a desired VM with: the observed ones where known,
/// else the recorded ones.
fn current_of(recorded: &format::Vm, seen: Option<&ObservedVm>) -> format::Vm {
    let mut cur = recorded.clone();
    if let Some(s) = seen {
        if let Some(name) = &s.name {
            cur.name.clone_from(name);
        }
        cur.cores = s.cores.unwrap_or(cur.cores);
        cur.memory_mib = s.memory_mib.unwrap_or(cur.memory_mib);
        cur.disk_gib = s.disk_gib.unwrap_or(cur.disk_gib);
        cur.tags = s.tags.iter().cloned().collect();
        if let Some(h) = &s.hostpci {
            cur.hostpci = h.clone();
        }
        if let Some(n) = &s.net {
            cur.net = n.clone();
        }
        if let Some(d) = &s.disks {
            cur.disks = d.clone();
        }
        if let Some(a) = s.agent {
            cur.agent = a;
        }
        if let Some(h) = &s.ha {
            cur.ha.clone_from(h);
        }
    }
    cur
}

fn vm_fields(before: &format::Vm, after: &format::Vm) -> Vec<FieldChange> {
    let mut f = Vec::new();
    if before.name != after.name {
        f.push(field(VmField::Name, Some(&before.name), Some(&after.name)));
    }
    if before.cores != after.cores {
        f.push(field(VmField::Cores, Some(before.cores), Some(after.cores)));
    }
    if before.memory_mib != after.memory_mib {
        f.push(field(
            VmField::MemoryMib,
            Some(before.memory_mib),
            Some(after.memory_mib),
        ));
    }
    if before.disk_gib != after.disk_gib {
        f.push(field(
            VmField::DiskGib,
            Some(before.disk_gib),
            Some(after.disk_gib),
        ));
    }
    let keys: BTreeSet<&String> = before.hostpci.keys().chain(after.hostpci.keys()).collect();
    for key in keys {
        let (b, a) = (before.hostpci.get(key), after.hostpci.get(key));
        // Records hold `hostpciN` keys only; another key is no PCI device.
        let Some(device) = VmField::parse(key) else {
            continue;
        };
        if !talosprov_base::vm::hostpci_equivalent(b.map(String::as_str), a.map(String::as_str)) {
            f.push(field(device, b, a));
        }
    }
    // A record from before NICs were recorded has none: nothing to compare.
    if !before.net.is_empty() {
        let keys: BTreeSet<&String> = before.net.keys().chain(after.net.keys()).collect();
        for key in keys {
            let (b, a) = (before.net.get(key), after.net.get(key));
            if let Some(nic) = VmField::parse(key)
                && !talosprov_base::vm::nic_equivalent(b.map(String::as_str), a.map(String::as_str))
            {
                f.push(field(nic, b, a));
            }
        }
    }
    let keys: BTreeSet<&String> = before.disks.keys().chain(after.disks.keys()).collect();
    for key in keys {
        let (b, a) = (before.disks.get(key), after.disks.get(key));
        if let Some(disk) = VmField::parse(key)
            && b != a
        {
            f.push(field(disk, b, a));
        }
    }
    if before.agent != after.agent {
        let text = |on: bool| if on { "enabled=1" } else { "0" };
        f.push(field(
            VmField::Agent,
            Some(text(before.agent)),
            Some(text(after.agent)),
        ));
    }
    if before.ha != after.ha {
        f.push(field(
            VmField::Ha,
            before.ha.as_ref().map(talosprov_base::vm::HaResource::text),
            after.ha.as_ref().map(talosprov_base::vm::HaResource::text),
        ));
    }
    let (bt, at): (BTreeSet<&String>, BTreeSet<&String>) =
        (before.tags.iter().collect(), after.tags.iter().collect());
    if bt != at {
        let text = |tags: &[String]| (!tags.is_empty()).then(|| tags.join(";"));
        f.push(field(VmField::Tags, text(&before.tags), text(&after.tags)));
    }
    f
}

/// `VM 122 "legacy-db" on pve1`.
fn vm_text(seen: &ObservedVm) -> String {
    match &seen.name {
        Some(name) => format!("VM {} {name:?} on {}", seen.vmid, seen.node),
        None => format!("VM {} on {}", seen.vmid, seen.node),
    }
}

/// The change for one VM, from what the topology wants (`want`), what the
/// state holds (`recorded`: its record, and its create intent) and what
/// refresh saw; a VM talosprov does not own at the vmid is a conflict.
pub(super) fn plan_vm(
    host: &str,
    want: &DesiredVm,
    recorded: (Option<&format::Vm>, Option<&CreateIntent>),
    (obs, vacating): (&Observed, &Vacating),
    found: &mut Found<'_>,
) -> Result<Option<Change>, PlanError> {
    let address = Address::Vm(host.to_owned());
    let w = &want.record;
    let (recorded, intent) = recorded;
    let Some(rec) = recorded else {
        let mut c = plan_unrecorded_vm(host, want, intent, (obs, vacating), found);
        if let Some(c) = &mut c {
            after_the_vm_it_replaces(c, w, vacating);
        }
        return Ok(c);
    };
    if let Some(mut c) = plan_moved_vm(host, rec, want) {
        // The new vmid must be free, or freed by this plan.
        if let Some(seen) = obs
            .vms
            .get(&w.vmid)
            .filter(|seen| vacated_by(w, Some(seen), vacating).is_none())
        {
            found.conflicts.push(ownership::conflict(
                &address,
                &w.vmid.to_string(),
                vm_text(seen),
                false,
            ));
            return Ok(None);
        }
        after_the_vm_it_replaces(&mut c, w, vacating);
        return Ok(Some(c));
    }
    let seen = if obs.refreshed {
        match find_recorded_vm(host, rec, want, obs, found) {
            ControlFlow::Continue(seen) => Some(seen),
            ControlFlow::Break(c) => return Ok(c),
        }
    } else {
        None
    };
    let current = current_of(rec, seen);
    let running = seen.map(|s| &s.running);
    let mut drifted = vm_fields(rec, &current);
    for f in &mut drifted {
        f.pending = running.is_some_and(|r| f.name.vm().is_some_and(|v| r.contains_key(&v)));
    }
    if !drifted.is_empty() {
        found.drift.push(Drift {
            address: address.clone(),
            kind: DriftKind::Changed,
            diff: None,
            fields: drifted,
        });
    }
    if let Some(e) = data_disk_loss(host, w, rec, &current) {
        return Err(e);
    }
    if w.disk_gib < current.disk_gib {
        return Err(PlanError::DiskShrink {
            hostname: host.to_owned(),
            vmid: w.vmid,
            current_gib: current.disk_gib,
            wanted_gib: w.disk_gib,
        });
    }
    Ok(plan_vm_update(host, want, &current, seen))
}

/// The first data disk the VM has (as refresh saw it, else as recorded) that
/// `w` shrinks or moves, or drops while the state does not record it
/// (talosprov did not make it, so it neither deletes nor adopts it):
/// refused. A recorded disk that leaves the topology is planned as a removal
/// (`- scsiN`), which apply makes only with `-allow-data-loss` on the VM.
fn data_disk_loss(
    host: &str,
    w: &format::Vm,
    rec: &format::Vm,
    current: &format::Vm,
) -> Option<PlanError> {
    let size = |text: &str| {
        text.split(',')
            .next()
            .and_then(|v| v.rsplit_once(':'))
            .and_then(|(_, s)| talosprov_base::vm::size_gib(s))
    };
    current.disks.iter().find_map(|(key, have)| {
        let storage = |text: &str| text.split(':').next().unwrap_or_default().to_owned();
        let what = match w.disks.get(key) {
            None if rec.disks.contains_key(key) => return None,
            None => "is not in the topology's disks, and the state does not record it: \
                     talosprov did not make it, so it neither deletes nor adopts it (declare \
                     it in `disks`, or detach it in Proxmox)"
                .to_owned(),
            Some(want) if storage(want) != storage(have) => format!(
                "would move from storage {} to {}: talosprov makes a volume only when it adds \
                 the disk (move it in Proxmox, Move Storage, then apply)",
                storage(have),
                storage(want)
            ),
            Some(want) => match (size(have), size(want)) {
                (Some(h), Some(n)) if n < h => {
                    format!("would shrink from {h} GiB to {n} GiB (disks only grow)")
                }
                _ => return None,
            },
        };
        Some(PlanError::DataDiskLoss {
            hostname: host.to_owned(),
            vmid: w.vmid,
            disk: key.clone(),
            what,
        })
    })
}

/// The VMs talosprov made whose vmid this plan frees, by vmid: each is the
/// record of a node that leaves the topology or moves to another vmid or host
/// (`(hostname, record)`). A new VM may take such a vmid once that VM is gone.
pub(super) type Vacating = BTreeMap<u32, (String, format::Vm)>;

/// The vmids `state_vms` (the state's VM records by hostname) frees when the
/// topology wants `desired_vms`.
pub(super) fn vacating<'a>(
    state_vms: &BTreeMap<String, format::Vm>,
    mut desired: impl FnMut(&str) -> Option<&'a format::Vm>,
) -> Vacating {
    state_vms
        .iter()
        .filter(|(host, rec)| {
            desired(host).is_none_or(|w| w.vmid != rec.vmid || w.node != rec.node)
        })
        .map(|(host, rec)| (rec.vmid, (host.clone(), rec.clone())))
        .collect()
}

/// The hostname whose VM, made by talosprov and leaving this plan, holds
/// `w`'s vmid on `w`'s host as refresh saw it (or as recorded, offline).
fn vacated_by<'v>(
    w: &format::Vm,
    seen: Option<&ObservedVm>,
    vacating: &'v Vacating,
) -> Option<&'v str> {
    let (host, rec) = vacating.get(&w.vmid)?;
    let same = |node: &str, name: Option<&str>| node == rec.node && name == Some(rec.name.as_str());
    let ours = seen.is_none_or(|s| same(&s.node, s.name.as_deref()));
    (ours && rec.node == w.node).then_some(host.as_str())
}

/// A VM created at a vmid that another of talosprov's VMs frees in the same
/// plan (a node renamed, or moved into a pool) is created once that VM is
/// deleted: the change depends on it, and the reason says so.
fn after_the_vm_it_replaces(c: &mut Change, w: &format::Vm, vacating: &Vacating) {
    if !matches!(c.action(), Action::Create | Action::Replace) {
        return;
    }
    let Some((host, _)) = vacating
        .get(&w.vmid)
        .filter(|(h, r)| r.node == w.node && Address::Vm(h.clone()) != *c.address())
    else {
        return;
    };
    let other = Address::Vm(host.clone());
    if !c.depends_on.contains(&other) {
        c.depends_on.push(other.clone());
    }
    c.reason = format!("{}, once {other} has freed VM {}", c.reason, w.vmid);
}

/// A VM the state has no record of: created, or adopted when an interrupted
/// apply left it half-made (its create intent matches what Proxmox shows);
/// another VM at the vmid is a conflict, unless it is one of talosprov's own
/// that this plan deletes or moves (`vacating`).
fn plan_unrecorded_vm(
    host: &str,
    want: &DesiredVm,
    intent: Option<&CreateIntent>,
    (obs, vacating): (&Observed, &Vacating),
    found: &mut Found<'_>,
) -> Option<Change> {
    let address = Address::Vm(host.to_owned());
    let w = &want.record;
    let made = intent.is_some_and(|i| i.is_vm(w.vmid, &w.node, &w.name));
    if let Some(seen) = obs
        .vms
        .get(&w.vmid)
        .filter(|seen| vacated_by(w, Some(seen), vacating).is_none())
    {
        let ours = seen.node == w.node && seen.name.as_deref() == Some(w.name.as_str());
        if made && ours {
            let mut c = create(
                host,
                want,
                format!(
                    "VM {} was left half-made by an interrupted apply: adopted, brought to \
                     its spec (settings, disk size) and started",
                    w.vmid
                ),
            );
            c.fields = vm_fields(&current_of(w, Some(seen)), w);
            c.fields.insert(0, field(VmField::Vmid, None, Some(w.vmid)));
            return Some(c);
        }
        found.conflicts.push(ownership::conflict(
            &address,
            &w.vmid.to_string(),
            vm_text(seen),
            false,
        ));
        return None;
    }
    // A VM an interrupted apply was making at another vmid or host (the
    // topology changed since) goes first.
    let mut c = match intent.filter(|i| !made && ownership::made_vm_seen(i, obs)) {
        Some(i) => replace(
            host,
            want,
            format!(
                "VM {} left half-made by an interrupted apply is deleted; VM {} is created on {}",
                i.id, w.vmid, w.node
            ),
        ),
        None => create(
            host,
            want,
            format!(
                "new {} node: VM {} on {}",
                want.role.as_str(),
                w.vmid,
                w.node
            ),
        ),
    };
    c.fields = vm_fields(
        &format::Vm {
            cores: 0,
            memory_mib: 0,
            disk_gib: 0,
            hostpci: BTreeMap::new(),
            tags: Vec::new(),
            net: [("net0".to_owned(), String::new())].into_iter().collect(),
            disks: BTreeMap::new(),
            agent: !w.agent,
            ha: None,
            ..w.clone()
        },
        w,
    )
    .into_iter()
    .map(|f| FieldChange { before: None, ..f })
    .collect();
    c.fields.insert(0, field(VmField::Vmid, None, Some(w.vmid)));
    Some(c)
}

/// A replace when the VM moves to another vmid or Proxmox host.
fn plan_moved_vm(host: &str, rec: &format::Vm, want: &DesiredVm) -> Option<Change> {
    let w = &want.record;
    if rec.vmid == w.vmid && rec.node == w.node {
        return None;
    }
    let mut c = replace(
        host,
        want,
        format!(
            "moves from VM {} on {} to VM {} on {}: the VM is deleted and created anew",
            rec.vmid, rec.node, w.vmid, w.node
        ),
    );
    if rec.vmid != w.vmid {
        c.fields
            .push(field(VmField::Vmid, Some(rec.vmid), Some(w.vmid)));
    }
    if rec.node != w.node {
        c.fields
            .push(field(VmField::Node, Some(&rec.node), Some(&w.node)));
    }
    Some(c)
}

/// The recorded VM as refresh saw it; breaks with the plan's answer when it
/// is gone: created again, or a conflict when another VM took its vmid (both
/// are drift).
fn find_recorded_vm<'o>(
    host: &str,
    rec: &format::Vm,
    want: &DesiredVm,
    obs: &'o Observed,
    found: &mut Found<'_>,
) -> ControlFlow<Option<Change>, &'o ObservedVm> {
    let address = &Address::Vm(host.to_owned());
    let w = &want.record;
    match obs.vms.get(&rec.vmid) {
        Some(s) if s.node == rec.node && s.name.as_deref() == Some(rec.name.as_str()) => {
            ControlFlow::Continue(s)
        }
        Some(other) => {
            // Ours is gone, and another VM took its vmid.
            found.drift.push(Drift {
                address: address.clone(),
                kind: DriftKind::Deleted,
                diff: None,
                fields: Vec::new(),
            });
            found.conflicts.push(ownership::conflict(
                address,
                &rec.vmid.to_string(),
                vm_text(other),
                true,
            ));
            ControlFlow::Break(None)
        }
        None => {
            found.drift.push(Drift {
                address: address.clone(),
                kind: DriftKind::Deleted,
                diff: None,
                fields: Vec::new(),
            });
            let mut c = create(
                host,
                want,
                format!("VM {} was deleted outside talosprov: created again", w.vmid),
            );
            c.fields.push(field(VmField::Vmid, None, Some(w.vmid)));
            ControlFlow::Break(Some(c))
        }
    }
}

/// The update bringing a VM from `current` to `w`, if any field differs or
/// waits in Proxmox for a restart; the VM restarts when it runs without the
/// wanted values.
fn plan_vm_update(
    host: &str,
    want: &DesiredVm,
    current: &format::Vm,
    seen: Option<&ObservedVm>,
) -> Option<Change> {
    let w = &want.record;
    let running = seen.map(|s| &s.running);
    let mut fields = vm_fields(current, w);
    let changed: Vec<Field> = fields.iter().map(|f| f.name.clone()).collect();
    // Unknown power state (an offline plan): assume the VM runs.
    let runs = seen.is_none_or(|s| s.status == "running");
    let empty = BTreeMap::new();
    let to_restart = if runs {
        restart_fields(current, running.unwrap_or(&empty), w)
    } else {
        Vec::new()
    };
    // Already set for the next start, but not running yet.
    let waiting: Vec<VmField> = to_restart
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !changed.contains(&Field::Vm(*name)))
        .collect();
    for (name, run) in &to_restart {
        if waiting.contains(name) {
            let mut f = FieldChange::new(*name, run.clone(), value_of(w, *name));
            f.pending = true;
            fields.push(f);
        }
    }
    if fields.is_empty() {
        return None;
    }
    let restart = !to_restart.is_empty();
    let mut parts = Vec::new();
    let list = |names: Vec<String>| names.join(", ");
    if !changed.is_empty() {
        let names = changed.iter().map(ToString::to_string).collect();
        parts.push(format!("{} changed", list(names)));
    }
    if !waiting.is_empty() {
        let names = waiting.iter().map(ToString::to_string).collect();
        parts.push(format!("{} set but pending in Proxmox", list(names)));
    }
    let suffix = if restart {
        ": the VM restarts through Proxmox to apply it"
    } else if !changed
        .iter()
        .any(|n| n.vm().is_some_and(VmField::needs_restart))
    {
        ""
    } else if runs {
        ": the VM already runs with the wanted value, so it is not restarted"
    } else {
        ": the VM is stopped and takes it at its next start"
    };
    let op = VmOp::Update {
        vm: PlannedVm {
            spec: want.spec.clone(),
            restart,
        },
        role: want.role,
    };
    let mut c = Change::vm(host, op, format!("{}{suffix}", parts.join("; ")));
    c.fields = fields;
    c.reboot = Some(restart);
    Some(c)
}

/// A field's value in a VM record, as text (`None`: no such PCI device).
fn value_of(vm: &format::Vm, name: VmField) -> Option<String> {
    match name {
        VmField::Agent => Some(if vm.agent { "enabled=1" } else { "0" }.to_owned()),
        VmField::Cores => Some(vm.cores.to_string()),
        VmField::MemoryMib => Some(vm.memory_mib.to_string()),
        VmField::Net(_) => vm.net.get(&name.to_string()).cloned(),
        VmField::Scsi(_) => vm.disks.get(&name.to_string()).cloned(),
        VmField::HostPci(_) => vm.hostpci.get(&name.to_string()).cloned(),
        VmField::DiskGib => Some(vm.disk_gib.to_string()),
        VmField::Ha => vm.ha.as_ref().map(talosprov_base::vm::HaResource::text),
        VmField::Name => Some(vm.name.clone()),
        VmField::Node => Some(vm.node.clone()),
        VmField::Tags => Some(vm.tags.join(";")),
        VmField::Vmid => Some(vm.vmid.to_string()),
    }
}

/// The restart-class fields whose value in the running VM differs from the
/// desired one, with the running value (pure). The running value is the one
/// `running` names (what Proxmox keeps pending the VM does not run with), else
/// the next-start value: a hand edit still pending and set back needs no
/// restart, a change the VM runs with, or one left pending, does.
fn restart_fields(
    next: &format::Vm,
    running: &BTreeMap<VmField, Option<String>>,
    want: &format::Vm,
) -> Vec<(VmField, Option<String>)> {
    let names: BTreeSet<VmField> = vm_fields(next, want)
        .into_iter()
        .filter_map(|f| f.name.vm())
        .chain(running.keys().copied())
        .filter(|n| n.needs_restart())
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let run = running
                .get(&name)
                .cloned()
                .unwrap_or_else(|| value_of(next, name));
            (run != value_of(want, name)).then_some((name, run))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(cores: u32, memory_mib: u64, hostpci: &[(&str, &str)]) -> format::Vm {
        format::Vm {
            vmid: 122,
            node: "pve1".into(),
            name: "worker-01".into(),
            cores,
            memory_mib,
            disk_gib: 100,
            hostpci: hostpci
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            tags: vec!["talos".into()],
            net: BTreeMap::new(),
            disks: BTreeMap::new(),
            agent: true,
            ha: None,
        }
    }

    fn running(pairs: &[(&str, Option<&str>)]) -> BTreeMap<VmField, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| (VmField::parse(k).expect("a VM field"), v.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn changed_memory_on_a_running_vm_needs_a_restart() {
        let r = restart_fields(&vm(4, 8192, &[]), &BTreeMap::new(), &vm(4, 12288, &[]));
        assert_eq!(r, vec![(VmField::MemoryMib, Some("8192".to_owned()))]);
    }

    #[test]
    fn hand_edit_still_pending_and_set_back_needs_no_restart() {
        // Next start 6144 (set by hand), the VM runs with 8192, as wanted.
        let r = restart_fields(
            &vm(4, 6144, &[]),
            &running(&[("memory_mib", Some("8192"))]),
            &vm(4, 8192, &[]),
        );
        assert!(r.is_empty(), "{r:?}");
    }

    #[test]
    fn value_left_pending_needs_a_restart_though_the_config_matches() {
        let r = restart_fields(
            &vm(4, 12288, &[]),
            &running(&[("memory_mib", Some("8192"))]),
            &vm(4, 12288, &[]),
        );
        assert_eq!(r, vec![(VmField::MemoryMib, Some("8192".to_owned()))]);
    }

    #[test]
    fn pending_pci_device_compares_with_what_the_vm_runs_without() {
        let gpu = [("hostpci0", "mapping=gpu,pcie=1")];
        let r = restart_fields(
            &vm(4, 8192, &gpu),
            &running(&[("hostpci0", None)]),
            &vm(4, 8192, &gpu),
        );
        assert_eq!(r, vec![(VmField::HostPci(0), None)]);
        // Tags and the disk never need one.
        let mut more = vm(4, 8192, &[]);
        more.tags.push("gpu".into());
        more.disk_gib = 200;
        assert!(restart_fields(&vm(4, 8192, &[]), &BTreeMap::new(), &more).is_empty());
    }
}
