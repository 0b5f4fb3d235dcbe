//! Read-back for the plan: one `GET /cluster/resources?type=vm` for the whole
//! cluster (status, cores, memory, disk, name, tags, pool of every VM), plus a VM's
//! config with its pending values (`GET .../pending`) only when its listing differs
//! from what the caller expects, or when the caller asks. The request count is
//! constant in the number of unchanged VMs.

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::lenient;
use crate::pending::vm_pending;
use crate::request::{Operation, Request};
use crate::vm_config::{VmConfig, parse_config, tag_set};
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
    /// The guest's numeric ID, unique across the Proxmox cluster.
    #[serde(deserialize_with = "lenient::req_u64_u32")]
    pub vmid: u32,
    /// The Proxmox host it runs on (`pve1`).
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
    /// The resource pool it belongs to, if any.
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

/// What the caller (the state) expects of one VM; `None` fields are not compared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedVm {
    /// The VM ID the state records for it.
    pub vmid: u32,
    /// The Proxmox host it should be on.
    pub node: Option<String>,
    /// The VM name it should have (the node's hostname).
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

/// The bridges of Proxmox host `node` a VM's NIC can use
/// (`GET /nodes/{node}/network?type=any_bridge`: Linux and OVS bridges, and
/// SDN VNets), by name.
///
/// # Errors
/// Request errors.
pub async fn bridges(client: &Client, node: &str) -> Result<BTreeSet<String>, ProxmoxError> {
    let req = Request::get(
        &["nodes", node, "network"],
        Operation::new("list network bridges").node(node),
    )
    .query("type", "any_bridge");
    let answer = client.send(&req).await?;
    Ok(answer
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|i| i.get("iface").and_then(Value::as_str).map(str::to_owned))
        .collect())
}

/// The free memory of Proxmox host `node`, bytes (`GET /nodes/{node}/status`:
/// `memory.available` where PVE 9 gives it, which counts reclaimable cache,
/// else `memory.free`).
///
/// # Errors
/// Request errors; an answer without the memory figures.
pub async fn free_memory(client: &Client, node: &str) -> Result<u64, ProxmoxError> {
    let op = Operation::new("read the host's free memory").node(node);
    let answer = client
        .send(&Request::get(&["nodes", node, "status"], op.clone()))
        .await?;
    let memory = answer.get("memory");
    memory
        .and_then(|m| m.get("available"))
        .or_else(|| memory.and_then(|m| m.get("free")))
        .and_then(crate::lenient::u64_of)
        .ok_or_else(|| ProxmoxError::Decode {
            op,
            detail: "no memory.free in the node's status".into(),
        })
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
    use crate::vm_config::drive_size;
    use serde_json::json;
    use talosprov_base::vm::size_bytes;

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
