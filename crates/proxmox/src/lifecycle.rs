//! Changes to existing VMs: update in place (cores, memory, hostpci, tags; a disk may
//! grow, never shrink), reboot, and removal (shutdown with a timeout and
//! `forceStop`, then stop, then delete with `purge=1&destroy-unreferenced-disks=1`).
//! Settings Proxmox keeps pending on a running VM are reported as needing a
//! restart through Proxmox.

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::pending;
use crate::request::{Operation, Request};
use crate::task;
use crate::vm;
use serde_json::Value;
use std::collections::BTreeMap;
use talosprov_base::vm::{DataDisk, HostPci, Nic};

/// The in-place changes wanted; `None` leaves a setting alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmUpdate {
    /// The VM name (the Talos node's hostname); PVE applies it at once.
    pub name: Option<String>,
    /// Cores.
    pub cores: Option<u32>,
    /// Memory, MiB.
    pub memory_mib: Option<u64>,
    /// The complete list of PCI devices; keys not listed are removed.
    pub hostpci: Option<Vec<HostPci>>,
    /// Tags, compared as a lower-cased set (PVE stores them sorted and lower-cased).
    pub tags: Option<Vec<String>>,
    /// Size of `scsi0`, GiB: grown when larger, refused when smaller.
    pub disk_gib: Option<u64>,
    /// The complete list of NICs, `net0` first; `netN` beyond it are removed.
    pub networks: Option<Vec<Nic>>,
    /// The complete list of data disks: a missing one is allocated, a smaller
    /// one grown; one not listed is left as it is (removing a disk deletes
    /// its data: [`detach_disk`] does it, when the plan allows it).
    pub disks: Option<Vec<DataDisk>>,
    /// `agent`: `enabled=1` or `0`.
    pub agent: Option<bool>,
}

/// What [`update_vm`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// Config keys set or deleted.
    pub changed: Vec<String>,
    /// Keys Proxmox keeps pending until the VM's next start whose value differs
    /// from the one it runs with (`cores`, `memory`, `hostpciN`): set now, or
    /// left pending by an earlier run or by hand.
    pub pending: Vec<String>,
    /// The VM is not running: what is pending applies when it starts.
    pub stopped: bool,
    /// `scsi0` was grown.
    pub resized: bool,
    /// The config the VM gets at its next start, read back after the change
    /// (with `scsi0` at its new size when it was grown): what Proxmox
    /// confirmed.
    pub config: crate::vm_config::VmConfig,
}

impl UpdateOutcome {
    /// True when a restart through Proxmox is needed for the VM to run with
    /// the config (a reboot inside the guest keeps the same QEMU process).
    pub fn needs_reboot(&self) -> bool {
        !self.pending.is_empty() && !self.stopped
    }
}

/// The config changes (`key=value` to set, keys to delete) from the config
/// the VM gets at its next start. Pure.
pub fn config_changes(
    current: &crate::vm_config::VmConfig,
    want: &VmUpdate,
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    if let Some(name) = &want.name
        && current.raw.get("name") != Some(name)
    {
        set.insert("name".to_string(), name.clone());
    }
    if let Some(cores) = want.cores
        && current.cores != Some(u64::from(cores))
    {
        set.insert("cores".to_string(), cores.to_string());
    }
    if let Some(mem) = want.memory_mib
        && current.memory_mib != Some(mem)
    {
        set.insert("memory".to_string(), mem.to_string());
    }
    if let Some(tags) = &want.tags {
        let wanted = crate::vm_config::tag_set(&tags.join(";"));
        if wanted != current.tags {
            if wanted.is_empty() {
                delete.push("tags".to_string());
            } else {
                let list: Vec<String> = wanted.into_iter().collect();
                set.insert("tags".to_string(), list.join(";"));
            }
        }
    }
    if let Some(nics) = &want.networks {
        for (i, nic) in nics.iter().enumerate() {
            let key = format!("net{i}");
            let value = nic.property_string();
            if !talosprov_base::vm::nic_equivalent(
                current.net.get(&key).map(String::as_str),
                Some(&value),
            ) {
                set.insert(key, value);
            }
        }
        for key in current.net.keys() {
            let index = key.trim_start_matches("net").parse::<usize>().unwrap_or(0);
            if index >= nics.len() {
                delete.push(key.clone());
            }
        }
    }
    if let Some(disks) = &want.disks {
        for d in disks {
            match current.data_disks.get(&d.key()) {
                None => {
                    set.insert(d.key(), d.create_string());
                }
                // Same volume, other options (ssd, cache, …): set them on it.
                Some(have) if !same_disk_options(have, d) => {
                    set.insert(d.key(), d.update_string(have));
                }
                Some(_) => {}
            }
        }
    }
    if let Some(on) = want.agent
        && current.agent != on
    {
        set.insert("agent".into(), if on { "enabled=1" } else { "0" }.into());
    }
    if let Some(devices) = &want.hostpci {
        let wanted: BTreeMap<String, String> = devices
            .iter()
            .map(|d| (d.key(), d.property_string()))
            .collect();
        for (key, value) in &wanted {
            let have = current.hostpci.get(key).map(String::as_str);
            if !talosprov_base::vm::hostpci_equivalent(have, Some(value)) {
                set.insert(key.clone(), value.clone());
            }
        }
        for key in current.hostpci.keys() {
            if !wanted.contains_key(key) {
                delete.push(key.clone());
            }
        }
    }
    (set, delete)
}

/// `PUT /nodes/{node}/qemu/{vmid}/config` with the changes and the digest read before.
pub fn config_request(
    node: &str,
    vmid: u32,
    set: &BTreeMap<String, String>,
    delete: &[String],
    digest: Option<&str>,
) -> Request {
    let mut r = Request::put(
        &["nodes", node, "qemu", &vmid.to_string(), "config"],
        Operation::new("update VM config").node(node).vmid(vmid),
    );
    for (k, v) in set {
        r = r.form(k, v);
    }
    if !delete.is_empty() {
        r = r.form("delete", delete.join(","));
    }
    if let Some(d) = digest {
        r = r.form("digest", d);
    }
    r
}

/// Update cores, memory and hostpci in place and grow the disk, then say which
/// settings wait for a restart. The settings are compared with the values of
/// the VM's next start (pending applied, as PVE's config view shows them), so a
/// value pending by hand is set back. The disk check comes first: asking for a
/// smaller disk changes nothing and fails.
///
/// Requests: `GET .../pending`; when something differs, the `PUT .../config`
/// and `GET .../pending` again; `status/current` only when a setting awaits a
/// restart; `resize` only to grow the disk.
///
/// # Errors
/// [`ProxmoxError::DiskShrink`]; request errors (a held config lock is retried until the deadline).
pub async fn update_vm(
    client: &Client,
    node: &str,
    vmid: u32,
    want: &VmUpdate,
) -> Result<UpdateOutcome, ProxmoxError> {
    let before = pending::vm_pending(client, node, vmid).await?;
    let next = &before.next_start;
    let current_gib = next.disk_gib.unwrap_or(0);
    if let Some(gib) = want.disk_gib
        && gib < current_gib
    {
        return Err(ProxmoxError::DiskShrink {
            vmid,
            node: node.to_string(),
            disk: "scsi0".into(),
            current_gib,
            wanted_gib: gib,
        });
    }
    let (set, delete) = config_changes(next, want);
    let mut outcome = UpdateOutcome::default();
    let after = if set.is_empty() && delete.is_empty() {
        before
    } else {
        let req = config_request(node, vmid, &set, &delete, next.digest.as_deref());
        client.send(&req).await?;
        outcome.changed = set.keys().cloned().chain(delete.iter().cloned()).collect();
        pending::vm_pending(client, node, vmid).await?
    };
    outcome.pending = after
        .awaiting_restart()
        .iter()
        .map(|s| s.key().to_owned())
        .collect();
    if !outcome.pending.is_empty() {
        outcome.stopped = power_state(client, node, vmid).await?.as_deref() != Some("running");
    }
    outcome.config = after.next_start;
    if let Some(gib) = want.disk_gib
        && gib > current_gib
    {
        vm::resize(client, node, vmid, "scsi0", gib).await?;
        outcome.resized = true;
        outcome.config.disk_gib = Some(gib);
    }
    for d in want.disks.iter().flatten() {
        let Some(shown) = outcome.config.data_disks.get(&d.key()).cloned() else {
            continue;
        };
        let have = crate::vm_config::drive_size(&shown).map_or(0, |b| b >> 30);
        if d.size_gib > have {
            vm::resize(client, node, vmid, &d.key(), d.size_gib).await?;
            outcome.resized = true;
            outcome
                .config
                .data_disks
                .insert(d.key(), with_size(&shown, d.size_gib));
        }
    }
    Ok(outcome)
}

/// Whether the `scsiN` value Proxmox shows has `want`'s options and serial
/// (its size and storage are compared by the plan, not here).
fn same_disk_options(have: &str, want: &DataDisk) -> bool {
    let shown = talosprov_base::vm::DataDisk {
        size_gib: want.size_gib,
        datastore: want.datastore.clone(),
        ..want.clone()
    };
    talosprov_base::vm::disk_record_string(have).is_some_and(|h| {
        let storage = h.split(':').next().unwrap_or_default().to_owned();
        let size = h
            .split(',')
            .next()
            .and_then(|v| v.rsplit_once(':'))
            .map(|(_, s)| s.to_owned())
            .unwrap_or_default();
        h == talosprov_base::vm::DataDisk {
            datastore: storage,
            size_gib: talosprov_base::vm::size_gib(&size).unwrap_or(0),
            ..shown
        }
        .record_string()
    })
}

/// A drive value with its `size=` set to `gib` GiB (added when missing).
fn with_size(drive: &str, gib: u64) -> String {
    let mut parts: Vec<String> = drive
        .split(',')
        .filter(|p| !p.starts_with("size="))
        .map(str::to_owned)
        .collect();
    parts.push(format!("size={gib}G"));
    parts.join(",")
}

/// Remove data disk `key` (`scsiN`, N ≥ 1) and delete its volume: the
/// `delete=<key>` detaches it (PVE keeps an owned volume as `unusedN`), then
/// the `unusedN` that holds the same volume is deleted, which frees it. Only
/// for a plan that allowed the data loss.
///
/// # Errors
/// Request errors.
pub async fn detach_disk(
    client: &Client,
    node: &str,
    vmid: u32,
    key: &str,
) -> Result<(), ProxmoxError> {
    let before = pending::vm_pending(client, node, vmid).await?;
    let Some(value) = before.next_start.raw.get(key).cloned() else {
        return Ok(());
    };
    let volume = value.split(',').next().unwrap_or_default().to_owned();
    let req = config_request(
        node,
        vmid,
        &BTreeMap::new(),
        &[key.to_owned()],
        before.next_start.digest.as_deref(),
    );
    client.send(&req).await?;
    let after = pending::vm_pending(client, node, vmid).await?;
    let unused: Vec<String> = after
        .next_start
        .raw
        .iter()
        .filter(|(k, v)| k.starts_with("unused") && v.split(',').next() == Some(volume.as_str()))
        .map(|(k, _)| k.clone())
        .collect();
    if !unused.is_empty() {
        let req = config_request(
            node,
            vmid,
            &BTreeMap::new(),
            &unused,
            after.next_start.digest.as_deref(),
        );
        client.send(&req).await?;
    }
    Ok(())
}

/// Keys with a pending value or pending delete that differs from the current
/// value (`GET .../pending`).
///
/// # Errors
/// Request errors.
pub async fn pending_keys(
    client: &Client,
    node: &str,
    vmid: u32,
) -> Result<Vec<String>, ProxmoxError> {
    Ok(pending::vm_pending(client, node, vmid)
        .await?
        .keys
        .into_iter()
        .collect())
}

/// Reboot the VM through Proxmox (applies pending changes) and wait.
///
/// # Errors
/// Request and task errors.
pub async fn reboot(client: &Client, node: &str, vmid: u32) -> Result<(), ProxmoxError> {
    task::run(client, &vm::power_request(node, vmid, "reboot"))
        .await
        .map(|_| ())
}

/// What [`destroy_vm`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestroyOutcome {
    /// No such VM on that node: nothing to do.
    Absent,
    /// Shut down (or stopped) and deleted.
    Destroyed {
        /// The guest did not power off in time and was stopped.
        forced: bool,
    },
}

/// `status/current` of a VM, or `None` when it does not exist.
async fn power_state(
    client: &Client,
    node: &str,
    vmid: u32,
) -> Result<Option<String>, ProxmoxError> {
    let req = Request::get(
        &[
            "nodes",
            node,
            "qemu",
            &vmid.to_string(),
            "status",
            "current",
        ],
        Operation::new("read VM status").node(node).vmid(vmid),
    );
    match client.send(&req).await {
        Ok(v) => Ok(Some(
            v.get("status")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        )),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Shut the VM down (ACPI, `timeout` seconds, `forceStop=1`), stop it if it is
/// still running, then delete it with `purge=1&destroy-unreferenced-disks=1`.
/// Downloaded images are kept.
///
/// # Errors
/// Request and task errors.
pub async fn destroy_vm(
    client: &Client,
    node: &str,
    vmid: u32,
    timeout_secs: u64,
) -> Result<DestroyOutcome, ProxmoxError> {
    let Some(state) = power_state(client, node, vmid).await? else {
        return Ok(DestroyOutcome::Absent);
    };
    let mut forced = false;
    if state == "running" {
        let shutdown = vm::power_request(node, vmid, "shutdown")
            .form("timeout", timeout_secs)
            .form("forceStop", 1);
        match task::run(client, &shutdown).await {
            Ok(_) => {}
            // Already stopped in between (real PVE: OK; some answer 500 "not running").
            Err(e) if e.message().is_some_and(|m| m.contains("not running")) => {}
            Err(e) => {
                tracing::debug!(error = %e, "shutdown failed; stopping");
                forced = true;
            }
        }
        if power_state(client, node, vmid).await?.as_deref() == Some("running") {
            forced = true;
            task::run(client, &vm::power_request(node, vmid, "stop")).await?;
        }
    }
    let delete = Request::delete(
        &["nodes", node, "qemu", &vmid.to_string()],
        Operation::new("delete VM").node(node).vmid(vmid),
    )
    .query("purge", 1)
    .query("destroy-unreferenced-disks", 1);
    match task::run(client, &delete).await {
        Ok(_) => Ok(DestroyOutcome::Destroyed { forced }),
        Err(e) if e.is_not_found() => Ok(DestroyOutcome::Absent),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current() -> crate::vm_config::VmConfig {
        crate::vm_config::parse_config(&serde_json::json!({
            "cores": 4, "memory": "8192", "hostpci0": "mapping=gpu,pcie=1", "hostpci1": "mapping=nic,pcie=1",
            "scsi0": "local-lvm:vm-123-disk-2,size=100G", "digest": "d1"
        }))
    }

    #[test]
    fn only_differing_settings_are_sent() {
        let want = VmUpdate {
            cores: Some(4),
            memory_mib: Some(16384),
            hostpci: Some(vec![HostPci {
                index: 0,
                mapping: "gpu".into(),
                pcie: true,
                rombar: true,
                x_vga: false,
            }]),
            disk_gib: None,
            tags: None,
            name: None,
            networks: None,
            disks: None,
            agent: None,
        };
        let (set, delete) = config_changes(&current(), &want);
        assert_eq!(
            set.into_iter().collect::<Vec<_>>(),
            vec![("memory".to_string(), "16384".to_string())]
        );
        assert_eq!(delete, vec!["hostpci1".to_string()]);
    }

    #[test]
    fn tags_compare_as_sets() {
        let mut cfg = current();
        cfg.tags = crate::vm_config::tag_set("talos;worker");
        let same = VmUpdate {
            tags: Some(vec!["Worker".into(), "talos".into()]),
            ..VmUpdate::default()
        };
        assert_eq!(config_changes(&cfg, &same), (BTreeMap::new(), Vec::new()));
        let more = VmUpdate {
            tags: Some(vec!["talos".into(), "worker".into(), "gpu".into()]),
            ..VmUpdate::default()
        };
        let (set, _) = config_changes(&cfg, &more);
        assert_eq!(
            set.get("tags").map(String::as_str),
            Some("gpu;talos;worker")
        );
    }

    #[test]
    fn config_request_carries_delete_and_digest() {
        let mut set = BTreeMap::new();
        set.insert("cores".to_string(), "6".to_string());
        let r = config_request("pve1", 123, &set, &["hostpci1".into()], Some("d1"));
        assert_eq!(
            r.body().as_deref(),
            Some("cores=6&delete=hostpci1&digest=d1")
        );
    }
}
