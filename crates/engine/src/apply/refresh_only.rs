//! `-refresh-only` (pure): the records that make the state match what refresh
//! observed, changing nothing in the cluster, as OpenTofu's refresh-only mode
//! does: VM settings read back, VMs gone, Talos versions the nodes report,
//! nodes found back in maintenance mode, and staged configs taken at a reboot.

use talosprov_plan::observed::Observed;
use talosprov_statefile::format::State;

use super::record::Record;

/// The records that bring `state` in line with `observed`; none when refresh
/// did not read Proxmox (`observed.refreshed` false).
pub fn observed_records(state: &State, observed: &Observed) -> Vec<Record> {
    if !observed.refreshed {
        return Vec::new();
    }
    let r = &state.resources;
    let mut out = Vec::new();
    for (host, vm) in &r.vms {
        // Another VM at the vmid is not ours: ours is gone.
        let Some(seen) = observed
            .vms
            .get(&vm.vmid)
            .filter(|s| s.name.as_deref() == Some(vm.name.as_str()))
        else {
            out.push(Record::VmGone(host.clone()));
            continue;
        };
        let mut now = vm.clone();
        now.node.clone_from(&seen.node);
        if let Some(cores) = seen.cores {
            now.cores = cores;
        }
        if let Some(memory) = seen.memory_mib {
            now.memory_mib = memory;
        }
        if let Some(disk) = seen.disk_gib {
            now.disk_gib = disk;
        }
        if let Some(hostpci) = &seen.hostpci {
            now.hostpci.clone_from(hostpci);
        }
        if now != *vm {
            out.push(Record::Vm {
                host: host.clone(),
                vm: now,
                fresh: false,
            });
        }
    }
    for (host, config) in &r.configs {
        let vm_seen = r
            .vms
            .get(host)
            .is_some_and(|vm| observed.vms.contains_key(&vm.vmid));
        if !vm_seen {
            continue;
        }
        if let Some(version) = observed.talos_versions.get(host)
            && *version != config.talos_version
        {
            out.push(Record::Upgraded {
                host: host.clone(),
                talos_version: version.clone(),
                installer_image: config.installer_image.clone(),
            });
        }
        if observed.in_maintenance.contains(host) && config.secure_mode {
            out.push(Record::NotSecure(host.clone()));
        } else if let (Some(staged), Some(boot_time)) =
            (config.staged, observed.boot_times.get(host))
            && staged.taken_at(*boot_time)
        {
            out.push(Record::StagedTaken(host.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_plan::observed::ObservedVm;
    use talosprov_statefile::format;

    fn state() -> State {
        let mut s = State::new(uuid::Uuid::nil());
        for (host, vmid) in [("cp-01", 121), ("w-01", 122)] {
            s.resources.vms.insert(
                host.into(),
                format::Vm {
                    vmid,
                    node: "pve".into(),
                    name: host.into(),
                    cores: 2,
                    memory_mib: 4096,
                    disk_gib: 50,
                    hostpci: Default::default(),
                    tags: Vec::new(),
                    net: Default::default(),
                    disks: Default::default(),
                    agent: true,
                    ha: None,
                },
            );
            s.resources.configs.insert(
                host.into(),
                format::NodeConfig {
                    config_sha256: "ab".into(),
                    talos_version: "v1.13.7".into(),
                    installer_image: "i:v1.13.7".into(),
                    secure_mode: true,
                    staged: None,
                    role: None,
                    running_sha256: None,
                },
            );
        }
        s
    }

    #[test]
    fn refresh_only_records_hand_changes_deleted_vms_and_resets() {
        let s = state();
        let mut o = Observed {
            refreshed: true,
            ..Observed::default()
        };
        o.vms.insert(
            121,
            ObservedVm {
                vmid: 121,
                node: "pve".into(),
                name: Some("cp-01".into()),
                status: "running".into(),
                cores: Some(8),
                memory_mib: Some(4096),
                disk_gib: Some(50),
                hostpci: None,
                tags: Default::default(),
                net: None,
                disks: None,
                agent: None,
                running: Default::default(),
                ha: None,
            },
        );
        o.in_maintenance.insert("cp-01".into());
        let records = observed_records(&s, &o);
        let mut after = s.clone();
        for r in records {
            super::super::record::apply(&mut after, r);
        }
        assert_eq!(after.resources.vms["cp-01"].cores, 8);
        assert!(!after.resources.vms.contains_key("w-01"));
        assert!(!after.resources.configs["cp-01"].secure_mode);
        assert!(observed_records(&s, &Observed::default()).is_empty());
    }

    #[test]
    fn refresh_only_records_a_staged_config_taken_at_a_reboot() {
        let mut s = state();
        for host in ["cp-01", "w-01"] {
            s.resources.configs.get_mut(host).expect("config").staged = Some(format::Staged {
                boot_time: Some(1_000),
            });
        }
        let mut o = Observed {
            refreshed: true,
            ..Observed::default()
        };
        for (vmid, name) in [(121, "cp-01"), (122, "w-01")] {
            o.vms.insert(
                vmid,
                ObservedVm {
                    vmid,
                    node: "pve".into(),
                    name: Some(name.into()),
                    status: "running".into(),
                    cores: Some(2),
                    memory_mib: Some(4096),
                    disk_gib: Some(50),
                    hostpci: None,
                    tags: Default::default(),
                    net: None,
                    disks: None,
                    agent: None,
                    running: Default::default(),
                    ha: None,
                },
            );
        }
        // cp-01 rebooted since; w-01 still runs the boot it had when staged.
        o.boot_times.insert("cp-01".into(), 1_090);
        o.boot_times.insert("w-01".into(), 1_000);
        assert_eq!(
            observed_records(&s, &o),
            vec![Record::StagedTaken("cp-01".into())]
        );
    }
}
