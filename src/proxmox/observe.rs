//! Read-back for the plan: one `GET /cluster/resources?type=vm` for the whole
//! cluster (status, cores, memory, disk, name, tags, pool of every VM), plus a VM's
//! config with its pending values (`GET .../pending`) only when its listing differs
//! from what the caller expects, or when the caller asks. The request count is
//! constant in the number of unchanged VMs.

use crate::proxmox::client::Client;
use crate::proxmox::error::ProxmoxError;
use crate::proxmox::lenient;
use crate::proxmox::request::{Operation, Request};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// A guest as `/cluster/resources?type=vm` lists it (VMs and containers share vmids).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ClusterVm {
    /// `qemu` for a VM, `lxc` for a container.
    #[serde(rename = "type", default = "qemu")]
    pub kind: String,
    /// The vmid.
    #[serde(deserialize_with = "lenient::req_u64_u32")]
    pub vmid: u32,
    /// The node it is on.
    pub node: String,
    /// The VM name.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub name: Option<String>,
    /// `running`, `stopped`, or `unknown` when its node is offline.
    #[serde(default)]
    pub status: String,
    /// vCPUs (cores × sockets).
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub maxcpu: Option<u64>,
    /// Memory in bytes.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub maxmem: Option<u64>,
    /// Boot disk size in bytes.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub maxdisk: Option<u64>,
    /// Tags, `;`-separated.
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub tags: Option<String>,
    /// The pool it is in.
    #[serde(default)]
    pub pool: Option<String>,
    /// A config lock (`create`, `backup`, ...).
    #[serde(default)]
    pub lock: Option<String>,
    /// 1 for a template.
    #[serde(default, deserialize_with = "lenient::flag")]
    pub template: bool,
}

fn qemu() -> String {
    "qemu".to_string()
}

impl ClusterVm {
    /// True for a QEMU VM (not a container).
    pub fn is_vm(&self) -> bool {
        self.kind == "qemu"
    }

    /// Memory in MiB.
    pub fn memory_mib(&self) -> Option<u64> {
        self.maxmem.map(|b| b / MIB)
    }

    /// Boot disk size in GiB, rounded down.
    pub fn disk_gib(&self) -> Option<u64> {
        self.maxdisk.map(|b| b / GIB)
    }

    /// Tags as a set, lower-cased (PVE's default tag style).
    pub fn tag_set(&self) -> BTreeSet<String> {
        tag_set(self.tags.as_deref().unwrap_or(""))
    }
}

/// Tags split on `;`, `,` and spaces, lower-cased.
pub fn tag_set(tags: &str) -> BTreeSet<String> {
    tags.split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// What the caller (the state) expects of one VM; `None` fields are not compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedVm {
    /// The vmid.
    pub vmid: u32,
    /// The Proxmox node.
    pub node: Option<String>,
    /// The name.
    pub name: Option<String>,
    /// Cores (one socket).
    pub cores: Option<u32>,
    /// Memory, MiB.
    pub memory_mib: Option<u64>,
    /// Boot disk, GiB.
    pub disk_gib: Option<u64>,
    /// Tags.
    pub tags: Option<BTreeSet<String>>,
    /// Pool.
    pub pool: Option<String>,
    /// Read the config even when the listing matches.
    pub want_config: bool,
}

impl ExpectedVm {
    /// The fields of the listing that differ from this expectation.
    pub fn differences(&self, seen: &ClusterVm) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.node.as_deref().is_some_and(|n| n != seen.node) {
            out.push("node");
        }
        if self.name.is_some() && self.name != seen.name {
            out.push("name");
        }
        if self
            .cores
            .is_some_and(|c| Some(u64::from(c)) != seen.maxcpu)
        {
            out.push("cores");
        }
        if self.memory_mib.is_some() && self.memory_mib != seen.memory_mib() {
            out.push("memory");
        }
        if self.disk_gib.is_some() && self.disk_gib != seen.disk_gib() {
            out.push("disk");
        }
        if self.tags.as_ref().is_some_and(|t| *t != seen.tag_set()) {
            out.push("tags");
        }
        if self.pool.is_some() && self.pool != seen.pool {
            out.push("pool");
        }
        out
    }
}

/// A VM's config, read with `GET /nodes/{node}/qemu/{vmid}/config`, in plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmConfig {
    /// Cores per socket.
    pub cores: Option<u64>,
    /// Sockets.
    pub sockets: Option<u64>,
    /// Memory in MiB (`memory` is a property string `[current=]N` since PVE 8).
    pub memory_mib: Option<u64>,
    /// `balloon` (0 is off).
    pub balloon: Option<u64>,
    /// Size of `scsi0` in GiB, from its `size=`.
    pub disk_gib: Option<u64>,
    /// `hostpciN` keys and values.
    pub hostpci: BTreeMap<String, String>,
    /// `ipconfig0`.
    pub ipconfig0: Option<String>,
    /// Tags as a set.
    pub tags: BTreeSet<String>,
    /// The config digest, for a later update.
    pub digest: Option<String>,
    /// Every key as PVE returned it.
    pub raw: BTreeMap<String, String>,
}

/// A drive size (`528K`, `50G`, `1T`, plain bytes) in bytes.
pub fn size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (num, unit) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&text[..i], c.to_ascii_uppercase()),
        _ => (text, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let factor = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => MIB as f64,
        'G' => GIB as f64,
        'T' => (GIB * 1024) as f64,
        _ => return None,
    };
    Some((n * factor) as u64)
}

/// The `size=` of a drive property string, in bytes.
pub fn drive_size(drive: &str) -> Option<u64> {
    drive
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .and_then(size_bytes)
}

/// Plain values from a config answer. Pure.
pub fn parse_config(data: &Value) -> VmConfig {
    let raw: BTreeMap<String, String> = data
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| lenient::string_of(v).map(|s| (k.clone(), s)))
                .collect()
        })
        .unwrap_or_default();
    let num = |k: &str| data.get(k).and_then(lenient::u64_of);
    let memory_mib = data.get("memory").and_then(|m| {
        lenient::u64_of(m).or_else(|| {
            m.as_str()?
                .split(',')
                .find_map(|p| {
                    p.strip_prefix("current=")
                        .or((!p.contains('=')).then_some(p))
                })
                .and_then(|n| n.trim().parse().ok())
        })
    });
    VmConfig {
        cores: num("cores"),
        sockets: num("sockets"),
        memory_mib,
        balloon: num("balloon"),
        disk_gib: raw
            .get("scsi0")
            .and_then(|d| drive_size(d))
            .map(|b| b / GIB),
        hostpci: raw
            .iter()
            .filter(|(k, _)| k.starts_with("hostpci"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ipconfig0: raw.get("ipconfig0").cloned(),
        tags: tag_set(raw.get("tags").map_or("", String::as_str)),
        digest: raw.get("digest").cloned(),
        raw,
    }
}

/// A VM's config as `GET /nodes/{node}/qemu/{vmid}/pending` lists it: each key
/// with its current `value`, and a `pending` value or a `delete` (1, or 2 for a
/// forced delete) that the VM takes at its next start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmPending {
    /// The config with the pending values applied: what the VM gets at its next
    /// start, and what `GET .../config` shows by default (`current=0`).
    pub next_start: VmConfig,
    /// The config without them: what a running VM was started with.
    pub current: VmConfig,
    /// Keys whose pending value or pending delete differs from the current
    /// value. An entry equal to the current value is not pending (PVE's
    /// `cleanup_pending` drops those; fakepve keeps them).
    pub keys: BTreeSet<String>,
}

impl VmPending {
    /// The settings a running VM takes only at its next start whose next-start
    /// value differs from the current one, in key order.
    pub fn awaiting_restart(&self) -> Vec<RestartSetting> {
        awaiting_restart(&self.current, &self.next_start)
    }
}

/// A setting a running VM takes only when it starts again (no CPU or memory
/// hotplug in our VMs; a PCI passthrough device needs a new QEMU process).
/// Tags apply at once and a disk grows through `resize`, so neither is one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RestartSetting {
    /// `cores`.
    Cores,
    /// `memory`.
    Memory,
    /// `hostpciN`, by key.
    HostPci(String),
}

impl RestartSetting {
    /// The PVE config key.
    pub fn key(&self) -> &str {
        match self {
            RestartSetting::Cores => "cores",
            RestartSetting::Memory => "memory",
            RestartSetting::HostPci(k) => k,
        }
    }
}

/// The restart settings whose value in `next` differs from `current`,
/// compared as values (`memory` `4096` and `current=4096` are equal). Pure.
pub fn awaiting_restart(current: &VmConfig, next: &VmConfig) -> Vec<RestartSetting> {
    let mut out = Vec::new();
    if current.cores != next.cores {
        out.push(RestartSetting::Cores);
    }
    if current.memory_mib != next.memory_mib {
        out.push(RestartSetting::Memory);
    }
    let keys: BTreeSet<&String> = current.hostpci.keys().chain(next.hostpci.keys()).collect();
    out.extend(
        keys.into_iter()
            .filter(|k| current.hostpci.get(*k) != next.hostpci.get(*k))
            .map(|k| RestartSetting::HostPci(k.clone())),
    );
    out
}

/// Both views of a `GET .../pending` answer (an array of `{key, value?,
/// pending?, delete?}`). Values arrive as strings or numbers. Pure.
pub fn parse_pending(data: &Value) -> VmPending {
    let mut current = serde_json::Map::new();
    let mut next = serde_json::Map::new();
    let mut keys = BTreeSet::new();
    for item in data.as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(key) = item.get("key").and_then(Value::as_str) else {
            continue;
        };
        let value = item.get("value").filter(|v| !v.is_null());
        let pending = item.get("pending").filter(|v| !v.is_null());
        let delete = item
            .get("delete")
            .and_then(lenient::bool_of)
            .unwrap_or(false);
        if let Some(v) = value {
            current.insert(key.to_owned(), v.clone());
        }
        let text = |v: Option<&Value>| v.and_then(lenient::string_of);
        let after = if delete { None } else { pending.or(value) };
        if text(after) != text(value) {
            keys.insert(key.to_owned());
        }
        if let Some(v) = after {
            next.insert(key.to_owned(), v.clone());
        }
    }
    VmPending {
        next_start: parse_config(&Value::Object(next)),
        current: parse_config(&Value::Object(current)),
        keys,
    }
}

/// `GET /nodes/{node}/qemu/{vmid}/pending` request.
pub fn pending_request(node: &str, vmid: u32) -> Request {
    Request::get(
        &["nodes", node, "qemu", &vmid.to_string(), "pending"],
        Operation::new("read pending VM changes")
            .node(node)
            .vmid(vmid),
    )
}

/// A VM's config with what is pending, in one request.
///
/// # Errors
/// Request errors; not-found when the VM is gone.
pub async fn vm_pending(client: &Client, node: &str, vmid: u32) -> Result<VmPending, ProxmoxError> {
    Ok(parse_pending(
        &client.send(&pending_request(node, vmid)).await?,
    ))
}

/// One VM as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedVm {
    /// The cluster listing's entry.
    pub listing: ClusterVm,
    /// Listing fields that differ from the expectation.
    pub differences: Vec<&'static str>,
    /// The config with its pending values applied (the values of its next
    /// start), when read.
    pub config: Option<VmConfig>,
    /// The config without the pending values (what a running VM was started
    /// with), when read.
    pub current: Option<VmConfig>,
}

/// The read-back: every guest of the cluster, and each expected VM's observation
/// (`None` when no guest has its vmid; a container holding it shows with kind `lxc`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// Every VM in the cluster, by vmid.
    pub all: BTreeMap<u32, ClusterVm>,
    /// Per expected vmid.
    pub expected: BTreeMap<u32, Option<ObservedVm>>,
}

/// `GET /cluster/resources?type=vm` request.
pub fn cluster_vms_request() -> Request {
    Request::get(
        &["cluster", "resources"],
        Operation::new("list the cluster's VMs"),
    )
    .query("type", "vm")
}

/// Every VM of the cluster, in one request.
///
/// # Errors
/// Request errors.
pub async fn cluster_vms(client: &Client) -> Result<Vec<ClusterVm>, ProxmoxError> {
    let data = client.send(&cluster_vms_request()).await?;
    let items = data.as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .filter(|i| {
            i.get("type")
                .and_then(Value::as_str)
                .is_none_or(|t| t == "qemu")
        })
        .map(|i| {
            serde_json::from_value(i).map_err(|e| ProxmoxError::Decode {
                op: cluster_vms_request().op,
                detail: e.to_string(),
            })
        })
        .collect()
}

/// A VM's config.
///
/// # Errors
/// Request errors; not-found when the VM is gone.
pub async fn vm_config(client: &Client, node: &str, vmid: u32) -> Result<VmConfig, ProxmoxError> {
    let req = Request::get(
        &["nodes", node, "qemu", &vmid.to_string(), "config"],
        Operation::new("read VM config").node(node).vmid(vmid),
    );
    Ok(parse_config(&client.send(&req).await?))
}

/// Observe the cluster for the plan: one listing, then configs only where needed.
///
/// # Errors
/// Request errors.
pub async fn observe(
    client: &Client,
    expected: &[ExpectedVm],
) -> Result<Observation, ProxmoxError> {
    let all: BTreeMap<u32, ClusterVm> = cluster_vms(client)
        .await?
        .into_iter()
        .map(|v| (v.vmid, v))
        .collect();
    let mut out = Observation {
        all,
        expected: BTreeMap::new(),
    };
    for want in expected {
        let Some(seen) = out.all.get(&want.vmid).cloned() else {
            out.expected.insert(want.vmid, None);
            continue;
        };
        let differences = want.differences(&seen);
        let read = if seen.is_vm() && (want.want_config || !differences.is_empty()) {
            Some(vm_pending(client, &seen.node, seen.vmid).await?)
        } else {
            None
        };
        let (config, current) =
            read.map_or((None, None), |p| (Some(p.next_start), Some(p.current)));
        out.expected.insert(
            want.vmid,
            Some(ObservedVm {
                listing: seen,
                differences,
                config,
                current,
            }),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed() -> ClusterVm {
        serde_json::from_value(json!({
            "id": "qemu/121", "type": "qemu", "vmid": "121", "node": "pve1", "name": "talos-controlplane-01",
            "status": "running", "maxcpu": 2, "maxmem": 4294967296u64, "maxdisk": 53687091200u64,
            "tags": "controlplane;talos", "pool": "TALOS", "template": 0
        }))
        .expect("decodes")
    }

    #[test]
    fn listing_matches_the_expected_values() {
        let want = ExpectedVm {
            vmid: 121,
            node: Some("pve1".into()),
            name: Some("talos-controlplane-01".into()),
            cores: Some(2),
            memory_mib: Some(4096),
            disk_gib: Some(50),
            tags: Some(tag_set("talos;ControlPlane")),
            pool: Some("TALOS".into()),
            want_config: false,
        };
        assert!(want.differences(&listed()).is_empty());
        let grown = ExpectedVm {
            cores: Some(4),
            disk_gib: Some(60),
            ..want
        };
        assert_eq!(grown.differences(&listed()), vec!["cores", "disk"]);
    }

    #[test]
    fn config_values_are_read_leniently() {
        let c = parse_config(&json!({
            "cores": 4, "memory": "8192", "balloon": 0,
            "scsi0": "local-lvm:vm-122-disk-2,discard=on,iothread=1,size=100G,ssd=1",
            "hostpci0": "mapping=gpu,pcie=1", "ipconfig0": "ip=192.168.1.122/24,gw=192.168.1.1",
            "tags": "talos;worker", "digest": "abc"
        }));
        assert_eq!(c.cores, Some(4));
        assert_eq!(c.memory_mib, Some(8192));
        assert_eq!(c.balloon, Some(0));
        assert_eq!(c.disk_gib, Some(100));
        assert_eq!(
            c.hostpci.get("hostpci0").map(String::as_str),
            Some("mapping=gpu,pcie=1")
        );
        assert_eq!(c.tags.len(), 2);
        assert_eq!(
            parse_config(&json!({"memory": "current=2048"})).memory_mib,
            Some(2048)
        );
    }

    #[test]
    fn pending_answer_gives_next_start_and_current_values() {
        // As PVE lists it: strings, a forced delete, a key only pending.
        let p = parse_pending(&json!([
            {"key": "cores", "value": "2", "pending": "4"},
            {"key": "memory", "value": 4096, "pending": "8192"},
            {"key": "hostpci0", "value": "mapping=gpu,pcie=1", "delete": 2},
            {"key": "hostpci1", "pending": "mapping=nic,pcie=1"},
            {"key": "tags", "value": "talos;worker"},
            {"key": "digest", "value": "d1"}
        ]));
        assert_eq!(p.next_start.cores, Some(4));
        assert_eq!(p.current.cores, Some(2));
        assert_eq!(p.next_start.memory_mib, Some(8192));
        assert_eq!(p.current.memory_mib, Some(4096));
        assert_eq!(
            p.next_start.hostpci.keys().collect::<Vec<_>>(),
            vec!["hostpci1"]
        );
        assert_eq!(
            p.current.hostpci.keys().collect::<Vec<_>>(),
            vec!["hostpci0"]
        );
        assert_eq!(p.next_start.tags, tag_set("talos;worker"));
        assert_eq!(p.next_start.digest.as_deref(), Some("d1"));
        assert_eq!(
            p.keys.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["cores", "hostpci0", "hostpci1", "memory"]
        );
        assert_eq!(
            p.awaiting_restart(),
            vec![
                RestartSetting::Cores,
                RestartSetting::Memory,
                RestartSetting::HostPci("hostpci0".into()),
                RestartSetting::HostPci("hostpci1".into()),
            ]
        );
    }

    #[test]
    fn pending_entry_equal_to_the_current_value_is_not_pending() {
        // fakepve keeps `memory` pending after it is set back to its value;
        // PVE's cleanup_pending drops such an entry.
        let p = parse_pending(&json!([
            {"key": "memory", "value": 4096, "pending": "4096"},
            {"key": "cores", "value": 2},
            {"key": "balloon", "delete": 1}
        ]));
        assert!(p.keys.is_empty(), "{:?}", p.keys);
        assert!(p.awaiting_restart().is_empty());
        assert_eq!(p.next_start, p.current);
    }

    #[test]
    fn memory_written_as_a_property_string_is_the_same_value() {
        let p = parse_pending(&json!([
            {"key": "memory", "value": "current=4096", "pending": "4096"}
        ]));
        assert!(p.awaiting_restart().is_empty());
        assert!(parse_pending(&json!(null)).keys.is_empty());
    }

    #[test]
    fn drive_sizes_have_units() {
        assert_eq!(size_bytes("528K"), Some(528 * 1024));
        assert_eq!(size_bytes("50G"), Some(50 * GIB));
        assert_eq!(size_bytes("1T"), Some(1024 * GIB));
        assert_eq!(size_bytes("1048576"), Some(1_048_576));
        assert_eq!(size_bytes("1.5G"), Some(GIB + GIB / 2));
        assert_eq!(size_bytes("x"), None);
        assert_eq!(drive_size("local:vm-1-disk-0,size=4M"), Some(4 * MIB));
    }
}
