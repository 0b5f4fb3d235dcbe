//! What refresh saw (plain data, filled by the apply module's refresh): each
//! VM as Proxmox reports it (with what a running VM keeps pending), the pools
//! and PCI mappings, the Talos version each reachable node runs, whether
//! the image storage is shared and the images it holds. Planning reads it and
//! never fetches.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use talosprov_statefile::format;

/// The cluster as observed at plan time. `Observed::default()` (with
/// `refreshed: false`) is what `--offline` plans with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// True when Proxmox was read back; when false, nothing below is known
    /// and the plan compares the topology with the state only.
    pub refreshed: bool,
    /// Every VM of the cluster-wide listing (`/cluster/resources?type=vm`),
    /// keyed by vmid.
    pub vms: BTreeMap<u32, ObservedVm>,
    /// The Talos version each node reported (`Version` over the Talos API),
    /// keyed by hostname; nodes that did not answer are absent.
    pub talos_versions: BTreeMap<String, String>,
    /// Nodes recorded as configured that answered in maintenance mode instead
    /// (reset outside talosprov), by hostname.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub in_maintenance: BTreeSet<String>,
    /// Whether applying the desired machine config reboots the node, as the
    /// node answered an ApplyConfiguration dry run in auto mode, keyed by
    /// hostname; only nodes whose config changes and that answered.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub apply_reboots: BTreeMap<String, bool>,
    /// When each node recorded with a staged machine config last booted, in
    /// seconds since the Unix epoch (SystemStat `boot_time`), keyed by
    /// hostname; nodes without a staged config, or that did not answer, are
    /// absent. A boot time later than the one recorded at staging means the
    /// node rebooted and runs the staged config.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub boot_times: BTreeMap<String, u64>,
    /// The machine config each node runs (Talos's active `MachineConfig` resource, byte for
    /// byte as submitted), keyed by hostname: only the nodes whose running config is not
    /// the one the state records as applied (drift: changed outside talosprov). Never
    /// serialised: it holds the cluster's secrets.
    #[serde(skip)]
    pub running_configs: BTreeMap<String, RunningConfig>,
    /// Whether `proxmox.image_storage` is shared between hosts (`shared` in
    /// `/storage/{storage}`); `None` when not read.
    pub image_storage_shared: Option<bool>,
    /// The images already in `proxmox.image_storage` (the storage content
    /// listing, `content=import`), by Proxmox host and then volid, each with
    /// its size in bytes (the listing's `size`: the image's virtual size,
    /// which a disk imported from it starts at). Read on the hosts the VMs
    /// go to (one host when the storage is shared); a host whose listing was
    /// not read is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_sizes: BTreeMap<String, BTreeMap<String, u64>>,
    /// The bridges of each Proxmox host the VMs go to
    /// (`/nodes/{node}/network?type=any_bridge`), by host; a host whose list
    /// was not read is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bridges: BTreeMap<String, BTreeSet<String>>,
    /// Every pool the token may see (`GET /pools`), by name, as its state
    /// record would hold it; `None` when not read (then a pool talosprov did
    /// not create is found only at apply, which refuses to touch it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<BTreeMap<String, format::Pool>>,
    /// Every PCI mapping the token may see (`GET /cluster/mapping/pci`), by
    /// name, as its state record would hold it; `None` when not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_mappings: Option<BTreeMap<String, format::PciMapping>>,
    /// The negative resource-affinity HA rules, keyed by rule ID, when
    /// `/cluster/ha/rules` was read.
    pub ha_rules: Option<BTreeMap<String, format::HaRule>>,
    /// Whether Proxmox answered that it has no HA rules (PVE before 9).
    pub no_ha_rules: bool,
    /// The add-ons' objects as the Kubernetes API showed them; `None` when
    /// the API was not read (offline, no cluster yet, or it did not answer:
    /// then objects compare with the state's inventory only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<ObservedObjects>,
    /// Nodes recorded as configured that answered neither in secure mode
    /// nor in maintenance mode, by hostname, with what the last attempt
    /// said: their state is unknown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unreachable: BTreeMap<String, String>,
    /// Why the Kubernetes API could not be read when the plan needed it
    /// (the add-ons' objects); `None` when it was read or not needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_unread: Option<String>,
    /// Control planes in secure mode whose etcd waits for a bootstrap:
    /// Talos's etcd service `Preparing`, "etcd is waiting to join the
    /// cluster, if this node is the first node in the cluster, please run
    /// `talosctl bootstrap`". Such a node holds no etcd data.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub etcd_waiting: BTreeSet<String>,
}

/// One VM as observed: listing values, and config values where read. Where
/// the config was read, `cores`, `memory_mib`, `disk_gib`, `hostpci` and
/// `tags` are the values of the VM's next start (pending values applied, as
/// Proxmox's config view shows them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedVm {
    /// Proxmox VM ID.
    pub vmid: u32,
    /// Proxmox node it runs on.
    pub node: String,
    /// VM name.
    pub name: Option<String>,
    /// `running`, `stopped`, ...
    pub status: String,
    /// Cores (`maxcpu`, or `cores` from the config).
    pub cores: Option<u32>,
    /// Memory, MiB.
    pub memory_mib: Option<u64>,
    /// Size of `scsi0`, GiB.
    pub disk_gib: Option<u64>,
    /// `hostpciN` values, from the config; `None` when the config was not read.
    pub hostpci: Option<BTreeMap<String, String>>,
    /// Tags, lower-cased.
    pub tags: BTreeSet<String>,
    /// `netN` values, from the config; `None` when the config was not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net: Option<BTreeMap<String, String>>,
    /// Data disks `scsiN` (N from 1) in the form of
    /// `vm::DataDisk::record_string`, from the config; `None` when not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disks: Option<BTreeMap<String, String>>,
    /// Whether `agent` is enabled, from the config; `None` when not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<bool>,
    /// Its HA resource, when `/cluster/ha/resources` was read: `Some(None)`
    /// when it is not HA managed.
    pub ha: Option<Option<talosprov_base::vm::HaResource>>,
    /// For a running VM, the settings Proxmox keeps pending until its next
    /// start (`GET .../pending`) that the VM does not run with yet: field name
    /// (`cores`, `memory_mib`, `hostpciN`) to the value it runs with, as text
    /// (`None`: the device is not attached). Empty when nothing is pending or
    /// the VM is stopped (a start applies what is pending).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub running: BTreeMap<super::field::VmField, Option<String>>,
}

/// What refresh saw of one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observation {
    /// The API server has no such object (or not its namespace).
    Absent,
    /// The API server does not serve its kind yet (a CRD this apply makes).
    UnknownKind,
    /// The object is there: `live` as read, `applied` as the server-side
    /// apply dry run would leave it.
    Present {
        /// The live object.
        live: Value,
        /// The dry run's result.
        applied: Value,
    },
    /// The dry run was refused because another field manager owns fields
    /// with other values (HTTP 409): the API server's message.
    Conflict(String),
    /// The dry run was refused for another reason (an invalid object): the
    /// API server's message.
    Refused(String),
}

/// What refresh read from the Kubernetes API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedObjects {
    /// Each desired or recorded object, keyed by [`ObjectAddress::key`].
    pub objects: BTreeMap<String, Observation>,
}

/// A node's running machine config that differs from the one the state records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningConfig {
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its text (YAML, one or more documents).
    pub yaml: talosprov_base::sensitive::Sensitive<String>,
}
