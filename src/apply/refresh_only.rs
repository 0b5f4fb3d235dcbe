//! `-refresh-only` (pure): the records that make the state match what refresh
//! observed, changing nothing in the cluster, as OpenTofu's refresh-only mode
//! does: VM settings read back, VMs gone, Talos versions the nodes report, and
//! nodes found back in maintenance mode.

use crate::plan::Observed;
use crate::state::format::State;

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
        let Some(seen) = observed.vms.get(&vm.vmid) else {
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
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ObservedVm;
    use crate::state::format;

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
                },
            );
            s.resources.configs.insert(
                host.into(),
                format::NodeConfig {
                    config_sha256: "ab".into(),
                    talos_version: "v1.13.7".into(),
                    installer_image: "i:v1.13.7".into(),
                    secure_mode: true,
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
                running: Default::default(),
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
}
