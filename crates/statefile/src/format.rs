//! The state document (pure): versioned JSON with `version`, `lineage` and
//! `serial`, the secrets bundle, the recorded resources and the outputs. Modelled
//! on OpenTofu's `internal/states/statefile`: a newer format version is refused.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::address::{Address, ObjectAddress};
use super::intent::CreateIntent;

/// The state format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

/// The secrets the state holds (the secrets bundle, kubeconfig, machine
/// configs) are [`Sensitive`] text, serialised as the plain string.
use talosprov_base::sensitive::Sensitive;

/// The whole state, as stored (before any encryption).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// Format version ([`FORMAT_VERSION`] when written by this build).
    pub version: u32,
    /// Set once when the state is created; a state with another lineage is a
    /// different cluster.
    pub lineage: Uuid,
    /// Incremented on every write (see `StateStore::save`).
    pub serial: u64,
    /// The talosprov version that wrote this state.
    pub talosprov_version: String,
    /// The cluster's secrets bundle, as the text of talosctl's `secrets.yaml`
    /// (parsed by the `machine` module). Set once, at the first apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Sensitive>,
    /// What talosprov created and the settings it applied.
    #[serde(default)]
    pub resources: Resources,
    /// Values users fetch with `talosprov output`.
    #[serde(default)]
    pub outputs: Outputs,
    /// Each Helm add-on's rendered manifests, by add-on name, with the digest
    /// of what they were rendered from: charts such as Cilium's generate
    /// certificates at every render, so a plan renders anew only when the
    /// chart, its version, its values, the namespace or the Kubernetes
    /// version change.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub renderings: BTreeMap<String, Rendering>,
    /// Each pool's members as allocated, by pool name (see
    /// [`crate::topology::pools`]): a member keeps its index, IP, vmid and
    /// host for life. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, Vec<RecordedMember>>,
    /// A CA rotation in progress (`rotate-ca`), with the stage being applied;
    /// absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<crate::rotation::CaRotation>,
    /// An `etcd restore` that began changing the cluster and has not
    /// recovered etcd yet; absent when none is. The bootstrap that recovers
    /// etcd (or bootstraps a new one) clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_restore: Option<EtcdRestore>,
}

/// An unfinished `etcd restore`, as the state records it, with what the
/// command that finishes it needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdRestore {
    /// The snapshot, as `--from` takes it: the archive's path or `s3://` URL.
    pub from: String,
    /// When the restore began changing the cluster, RFC 3339 UTC.
    pub started: String,
    /// `--identity FILE`, when given: the age identity that opens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// `--skip-hash-check`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_hash_check: bool,
    /// `--force`, while the control planes are being reset: they may still
    /// hold the etcd the snapshot replaces. False once every one is reset.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resetting: bool,
}

impl EtcdRestore {
    /// The words after `talosprov` of the command that finishes it (without
    /// the flags that find the topology and the state).
    pub fn command_words(&self) -> Vec<String> {
        let mut words: Vec<String> = ["etcd", "restore", "--from", &self.from]
            .map(str::to_owned)
            .to_vec();
        if let Some(identity) = &self.identity {
            words.extend(["--identity".to_owned(), identity.clone()]);
        }
        if self.skip_hash_check {
            words.push("--skip-hash-check".to_owned());
        }
        if self.resetting {
            words.push("--force".to_owned());
        }
        words
    }
}

/// A pool member as the state records it: what it keeps for life (see
/// `topology::pools`, which allocates members).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedMember {
    /// Its index in the pool, from 1.
    pub index: u32,
    /// Its hostname.
    pub hostname: String,
    /// Its IPv4 address.
    pub ip: Ipv4Addr,
    /// Its vmid.
    pub vmid: u32,
    /// Its Proxmox host.
    pub proxmox_node: String,
}

/// One add-on's rendered manifests and what they were rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rendering {
    /// Lowercase hex SHA-256 of the rendering's inputs
    /// (`addon::helm::inputs_digest`).
    pub digest: String,
    /// The manifests as `helm template` printed them: they may hold Secrets
    /// (a CA the chart generated), so they are sensitive.
    pub manifests: Sensitive,
}

/// The recorded resources, each map keyed by the name part of its address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// `image/<schematic8>-<version>` (with `-<node>` when the storage is not
    /// shared), keyed by the part after `image/`.
    #[serde(default)]
    pub images: BTreeMap<String, Image>,
    /// `pool/<name>`, keyed by the pool name.
    #[serde(default)]
    pub pools: BTreeMap<String, Pool>,
    /// `pci_mapping/<name>`, keyed by the Proxmox mapping name.
    #[serde(default)]
    pub pci_mappings: BTreeMap<String, PciMapping>,
    /// `vm/<hostname>`, keyed by hostname.
    #[serde(default)]
    pub vms: BTreeMap<String, Vm>,
    /// `ha_rule/<entry>`, keyed by the `proxmox.spread` entry. Absent when
    /// empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ha_rules: BTreeMap<String, HaRule>,
    /// `config/<hostname>`, keyed by hostname.
    #[serde(default)]
    pub configs: BTreeMap<String, NodeConfig>,
    /// `bootstrap`, once the first control plane was bootstrapped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Bootstrap>,
    /// VMs, pools and PCI mappings talosprov is about to create, keyed by
    /// address (`vm/<hostname>`, `pool/<name>`, `pci_mapping/<name>`): saved
    /// before the create request is sent, replaced by the record once Proxmox
    /// confirmed the object (see [`crate::state::intent`]). Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub creating: BTreeMap<String, CreateIntent>,
    /// The add-ons' Kubernetes objects talosprov applied (its inventory),
    /// keyed by [`crate::state::ObjectAddress::key`] (the address after
    /// `addon/`): recorded once the API server accepted the server-side
    /// apply; an object that leaves its add-on is deleted (pruned) and
    /// forgotten. Absent when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub objects: BTreeMap<String, KubeObject>,
}

/// One Kubernetes object talosprov applied for an add-on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeObject {
    /// The `apiVersion` it was applied with, e.g. `apps/v1` (how it is read
    /// back and deleted).
    pub api_version: String,
    /// Hex SHA-256 of the object as applied (its canonical JSON): a manifest
    /// that renders otherwise is a change.
    pub digest: String,
}

/// A Talos disk image downloaded into Proxmox storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Image {
    /// Proxmox volume ID, e.g. `local:import/talos-376567988ad3-v1.13.8-nocloud-amd64.qcow2`.
    pub volid: String,
    /// Proxmox node the download ran on.
    pub node: String,
    /// Proxmox storage holding the image.
    pub storage: String,
    /// Image Factory schematic ID (64 hex digits).
    pub schematic_id: String,
    /// Talos version, e.g. `v1.13.8`.
    pub talos_version: String,
}

/// A Proxmox resource pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// Pool comment as applied, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// A Proxmox HA rule that keeps VMs on different hosts (PVE 9's
/// `/cluster/ha/rules`, `type=resource-affinity`, `affinity=negative`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaRule {
    /// The rule ID in Proxmox, such as `talosprov-lab-controlplane`.
    pub rule: String,
    /// The VMs it keeps apart, by vmid, sorted.
    pub vmids: Vec<u32>,
    /// Its comment, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// On PVE 8, which has no HA rules: one HA group per VM instead
    /// (`<rule>-<vmid>`), by vmid, with its `nodes` (`pve1:2,pve2:1`, its
    /// host first). Empty on PVE 9.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<u32, String>,
}

/// A Proxmox PCI hardware mapping (cluster-wide, one entry per node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciMapping {
    /// Description as applied, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// One entry per Proxmox node, as in the mapping's `map` property.
    pub map: Vec<PciMapEntry>,
}

/// One `map` entry of a PCI mapping: `node=..,path=..,id=..,iommugroup=..`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PciMapEntry {
    /// Proxmox node name.
    pub node: String,
    /// PCI path, e.g. `0000:01:00`.
    pub path: String,
    /// Vendor and device ID, e.g. `10de:2507`.
    pub id: String,
    /// Subsystem vendor and device ID, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_id: Option<String>,
    /// IOMMU group number, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_group: Option<u32>,
}

/// A VM and the settings talosprov applied to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vm {
    /// Proxmox VM ID (100 to 999999999).
    pub vmid: u32,
    /// Proxmox node the VM lives on.
    pub node: String,
    /// VM name (the node's hostname, which Talos reads from cloud-init).
    pub name: String,
    /// vCPU cores.
    pub cores: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Size of `scsi0` in GiB.
    pub disk_gib: u64,
    /// `hostpciN` values as applied, e.g. `hostpci0` -> `mapping=gpu,pcie=1`.
    #[serde(default)]
    pub hostpci: BTreeMap<String, String>,
    /// Proxmox tags, sorted.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `netN` values as applied (`net0` -> `virtio=02:…,bridge=vmbr0,tag=20`).
    /// Empty in states written before NICs were recorded: then refresh's view
    /// stands.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub net: BTreeMap<String, String>,
    /// Data disks by key (`scsi1` -> `local-lvm:100G,serial=scsi1,ssd=1`, see
    /// `vm::DataDisk::record_string`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub disks: BTreeMap<String, String>,
    /// Whether the VM has `agent: enabled=1` (VMs made before this was
    /// recorded all have it).
    #[serde(default = "agent_default", skip_serializing_if = "is_true")]
    pub agent: bool,
    /// The VM's Proxmox HA resource, when it is HA managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha: Option<talosprov_base::vm::HaResource>,
}

fn agent_default() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_true(b: &bool) -> bool {
    *b
}

/// The Talos machine config applied to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Hex SHA-256 of the machine config bytes sent with ApplyConfiguration.
    pub config_sha256: String,
    /// Talos version the node runs.
    pub talos_version: String,
    /// Installer image, e.g. `factory.talos.dev/nocloud-installer/<id>:v1.13.8`.
    pub installer_image: String,
    /// Whether the node came up in secure mode (Talos API with mTLS) after the
    /// config was applied.
    pub secure_mode: bool,
    /// Set while the config was applied in staged mode (`apply --staged`) and
    /// the node has not been seen rebooted since: Talos writes a staged config
    /// to its STATE partition and keeps running the previous one until its
    /// next boot. Absent otherwise, and in states written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<Staged>,
    /// The node's role when the config was applied (`controlplane`,
    /// `worker`); absent in states written before it was recorded, where the
    /// applied machine config's `machine.type` tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<talosprov_base::role::Role>,
    /// Hex SHA-256 of the bytes the node runs, when they are not the bytes
    /// of `config_sha256` but the same config: a node adopted from OpenTofu
    /// or talosctl (`talosprov adopt`), whose config Talos's own encoder
    /// wrote with another key order. Refresh takes a running config with
    /// this digest as the applied one; the next apply of the node's config
    /// drops it. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_sha256: Option<String>,
}

impl NodeConfig {
    /// Whether a running config whose bytes have the digest `sha256` (hex)
    /// is the config applied (see [`NodeConfig::running_sha256`]).
    pub fn runs(&self, sha256: &str) -> bool {
        self.config_sha256 == sha256 || self.running_sha256.as_deref() == Some(sha256)
    }
}

/// A machine config staged on a node, which the node takes at its next boot
/// (ApplyConfiguration mode STAGED; machined's `SetPersistedConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Staged {
    /// When the node had last booted at the time the config was staged, in
    /// seconds since the Unix epoch (SystemStat `boot_time`); `None` when the
    /// node did not say, and then only a later apply clears the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_time: Option<u64>,
}

impl Staged {
    /// How far, in seconds, a node's reported boot time may move without a
    /// boot: the kernel derives btime from the wall clock in whole seconds, so
    /// two readings can differ by one. A reboot moves it by at least the
    /// node's uptime plus the time the reboot takes.
    pub const BOOT_TIME_SLACK_SECONDS: u64 = 2;

    /// Whether a node that now reports `boot_time` (seconds since the Unix
    /// epoch) has booted since the config was staged, and so runs it. `false`
    /// when the boot time at staging is unknown.
    pub fn taken_at(&self, boot_time: u64) -> bool {
        self.boot_time
            .is_some_and(|then| boot_time > then + Self::BOOT_TIME_SLACK_SECONDS)
    }
}

/// The cluster bootstrap (etcd on the first control plane), done once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bootstrap {
    /// Whether the Bootstrap call succeeded.
    pub done: bool,
    /// Hostname of the control plane it ran on.
    pub node: String,
    /// When, as RFC 3339 UTC.
    pub at: String,
}

/// One output value. All talosprov outputs hold credentials, so all are
/// marked sensitive; the flag is stored so that views need not know that.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// The value (YAML text).
    pub value: Sensitive,
    /// Whether the human view must hide it.
    pub sensitive: bool,
}

impl Output {
    /// A sensitive output.
    pub fn sensitive(value: impl Into<String>) -> Self {
        Output {
            value: Sensitive::new(value),
            sensitive: true,
        }
    }
}

/// Values for `talosprov output`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outputs {
    /// The talosconfig (Talos API client config, with a client key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub talosconfig: Option<Output>,
    /// The admin kubeconfig (with a client key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<Output>,
    /// Each node's rendered machine config, keyed by hostname.
    #[serde(default)]
    pub machineconfigs: BTreeMap<String, Output>,
}

impl Outputs {
    /// Every output as `(name, output)`: `kubeconfig`, `machineconfig.<hostname>`
    /// and `talosconfig`, sorted by name.
    pub fn named(&self) -> Vec<(String, &Output)> {
        let mut all: Vec<(String, &Output)> = Vec::new();
        if let Some(k) = &self.kubeconfig {
            all.push(("kubeconfig".to_owned(), k));
        }
        for (host, m) in &self.machineconfigs {
            all.push((format!("machineconfig.{host}"), m));
        }
        if let Some(t) = &self.talosconfig {
            all.push(("talosconfig".to_owned(), t));
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// Why a state document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Not JSON, or not a JSON object.
    #[error("the state is not valid JSON")]
    Json(#[source] serde_json::Error),
    /// Beyond the bounds of a state document ([`crate::load::Budget::STATE`]): nested
    /// too deep, or too many values; where, and why.
    #[error("the state is beyond talosprov's bounds for a state document: {0}")]
    Bounds(String),
    /// No integer `version` field.
    #[error("the state has no format version (the \"version\" field)")]
    MissingVersion,
    /// Written by a newer talosprov.
    #[error(
        "the state has format version {found}, but this talosprov (version {binary}) reads \
         at most version {supported}: upgrade talosprov to use this state"
    )]
    NewerVersion {
        /// The version found in the document.
        found: u64,
        /// [`FORMAT_VERSION`].
        supported: u32,
        /// This binary's version.
        binary: &'static str,
    },
    /// The fields do not match the format.
    #[error("the state (format version {version}) does not match its format")]
    Shape {
        /// The version found in the document.
        version: u32,
        /// Serde's message, naming the field.
        #[source]
        source: serde_json::Error,
    },
}

impl State {
    /// A new, empty state: format [`FORMAT_VERSION`], serial 0, the lineage given
    /// (a fresh UUID v4 chosen by the caller, so this stays pure).
    pub fn new(lineage: Uuid) -> Self {
        State {
            version: FORMAT_VERSION,
            lineage,
            serial: 0,
            talosprov_version: env!("CARGO_PKG_VERSION").to_owned(),
            secrets: None,
            resources: Resources::default(),
            outputs: Outputs::default(),
            renderings: BTreeMap::new(),
            pools: BTreeMap::new(),
            ca_rotation: None,
            etcd_restore: None,
        }
    }

    /// Parse a plain (not encrypted) state document, checked against
    /// [`crate::load::Budget::STATE`] before anything is built.
    ///
    /// # Errors
    /// [`FormatError::NewerVersion`] when written by a newer format, and the
    /// other variants for malformed documents.
    pub fn from_json(bytes: &[u8]) -> Result<Self, FormatError> {
        check_bounds(bytes)?;
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(FormatError::Json)?;
        let version = check_version(&value)?;
        serde_json::from_value(value).map_err(|source| FormatError::Shape { version, source })
    }

    /// The document as pretty JSON with a final newline. Deterministic: struct
    /// fields in declaration order, maps sorted by key.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("the state always serialises");
        out.push(b'\n');
        out
    }

    /// Whether this state records anything applied to a cluster: a resource,
    /// or an output (the talosconfig, written before the first step, counts:
    /// it trusts the secrets' CA). Secrets are generated only for a state
    /// that does not; one that does and has lost its secrets needs them back.
    pub fn has_applied(&self) -> bool {
        let r = &self.resources;
        let o = &self.outputs;
        !(r.images.is_empty()
            && r.pools.is_empty()
            && r.pci_mappings.is_empty()
            && r.vms.is_empty()
            && r.ha_rules.is_empty()
            && r.configs.is_empty()
            && r.bootstrap.is_none()
            && r.objects.is_empty()
            && o.talosconfig.is_none()
            && o.kubeconfig.is_none()
            && o.machineconfigs.is_empty())
    }

    /// Every recorded address, sorted as `state list` prints them.
    pub fn addresses(&self) -> Vec<Address> {
        let r = &self.resources;
        let mut all: Vec<Address> = Vec::new();
        all.extend(r.images.keys().map(|k| Address::Image(k.clone())));
        all.extend(
            r.pci_mappings
                .keys()
                .map(|k| Address::PciMapping(k.clone())),
        );
        all.extend(r.pools.keys().map(|k| Address::Pool(k.clone())));
        all.extend(r.vms.keys().map(|k| Address::Vm(k.clone())));
        all.extend(r.ha_rules.keys().map(|k| Address::HaRule(k.clone())));
        all.extend(r.configs.keys().map(|k| Address::Config(k.clone())));
        if r.bootstrap.is_some() {
            all.push(Address::Bootstrap);
        }
        if self.outputs.kubeconfig.is_some() {
            all.push(Address::Kubeconfig);
        }
        if self.outputs.talosconfig.is_some() {
            all.push(Address::Talosconfig);
        }
        all.extend(
            r.objects
                .keys()
                .filter_map(|k| ObjectAddress::from_key(k).map(|o| Address::Object(Box::new(o)))),
        );
        for (address, _) in self.intents() {
            if !all.contains(&address) {
                all.push(address);
            }
        }
        // The cluster's resources first, then the add-ons' objects.
        all.sort_by_key(|a| (matches!(a, Address::Object(_)), a.to_string()));
        all
    }

    /// The recorded attributes at `address` as JSON, with sensitive values
    /// replaced by `"(sensitive)"`; for an address with only a create intent,
    /// `{"creating": {...}}`; `None` when nothing is recorded there.
    pub fn show(&self, address: &Address) -> Option<serde_json::Value> {
        let r = &self.resources;
        if let Some(intent) = self.intent(address)
            && !self.has_record(address)
        {
            return Some(serde_json::json!({ "creating": intent }));
        }
        let value = match address {
            Address::Image(k) => serde_json::to_value(r.images.get(k)?),
            Address::PciMapping(k) => serde_json::to_value(r.pci_mappings.get(k)?),
            Address::Pool(k) => serde_json::to_value(r.pools.get(k)?),
            Address::Vm(k) => serde_json::to_value(r.vms.get(k)?),
            Address::HaRule(k) => serde_json::to_value(r.ha_rules.get(k)?),
            Address::Config(k) => serde_json::to_value(r.configs.get(k)?),
            Address::Bootstrap => serde_json::to_value(r.bootstrap.as_ref()?),
            Address::Kubeconfig => {
                let k = self.outputs.kubeconfig.as_ref()?;
                Ok(serde_json::json!({ "value": "(sensitive)", "sensitive": k.sensitive }))
            }
            Address::Talosconfig => {
                let t = self.outputs.talosconfig.as_ref()?;
                Ok(serde_json::json!({ "value": "(sensitive)", "sensitive": t.sensitive }))
            }
            Address::Object(o) => serde_json::to_value(r.objects.get(&o.key())?),
        };
        Some(value.expect("state records always serialise"))
    }

    /// Whether a record (not only a create intent) is kept at `address`.
    pub fn has_record(&self, address: &Address) -> bool {
        let r = &self.resources;
        match address {
            Address::Image(k) => r.images.contains_key(k),
            Address::PciMapping(k) => r.pci_mappings.contains_key(k),
            Address::Pool(k) => r.pools.contains_key(k),
            Address::Vm(k) => r.vms.contains_key(k),
            Address::HaRule(k) => r.ha_rules.contains_key(k),
            Address::Config(k) => r.configs.contains_key(k),
            Address::Bootstrap => r.bootstrap.is_some(),
            Address::Kubeconfig => self.outputs.kubeconfig.is_some(),
            Address::Talosconfig => self.outputs.talosconfig.is_some(),
            Address::Object(o) => r.objects.contains_key(&o.key()),
        }
    }

    /// Forget what is recorded at `address` (OpenTofu's `state rm`), its
    /// create intent included; returns whether anything was there.
    /// Forgetting `vm/<host>` does not forget `config/<host>`: each address is
    /// removed on its own.
    pub fn remove(&mut self, address: &Address) -> bool {
        let intent = self.clear_intent(address);
        let r = &mut self.resources;
        intent
            | match address {
                Address::Image(k) => r.images.remove(k).is_some(),
                Address::PciMapping(k) => r.pci_mappings.remove(k).is_some(),
                Address::Pool(k) => r.pools.remove(k).is_some(),
                Address::Vm(k) => r.vms.remove(k).is_some(),
                Address::HaRule(k) => r.ha_rules.remove(k).is_some(),
                Address::Config(k) => r.configs.remove(k).is_some(),
                Address::Bootstrap => r.bootstrap.take().is_some(),
                Address::Kubeconfig => self.outputs.kubeconfig.take().is_some(),
                Address::Talosconfig => self.outputs.talosconfig.take().is_some(),
                Address::Object(o) => r.objects.remove(&o.key()).is_some(),
            }
    }
}

/// Read and check the `version` field of any state document (plain or
/// encrypted envelope).
///
/// # Errors
/// [`FormatError::MissingVersion`] or [`FormatError::NewerVersion`].
pub fn check_version(value: &serde_json::Value) -> Result<u32, FormatError> {
    let found = value
        .get("version")
        .and_then(serde_json::Value::as_u64)
        .ok_or(FormatError::MissingVersion)?;
    if found > u64::from(FORMAT_VERSION) {
        return Err(FormatError::NewerVersion {
            found,
            supported: FORMAT_VERSION,
            binary: env!("CARGO_PKG_VERSION"),
        });
    }
    u32::try_from(found).map_err(|_| FormatError::MissingVersion)
}

/// A state with one resource of each kind, a lineage and secrets: the fixture
/// the state backends' and the format's own tests store and show.
#[doc(hidden)]
pub fn sample() -> State {
    let mut s = State::new(Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0));
    s.talosprov_version = "0.1.0".to_owned();
    s.serial = 7;
    s.secrets = Some(Sensitive::new("cluster:\n  id: abc\n  secret: s3cr3t\n"));
    let r = &mut s.resources;
    r.images.insert(
        "376567988ad3-v1.13.8".to_owned(),
        Image {
            volid: "local:import/talos-376567988ad3-v1.13.8.qcow2".to_owned(),
            node: "pve".to_owned(),
            storage: "local".to_owned(),
            schematic_id: "376567988ad3".repeat(5) + "abcd",
            talos_version: "v1.13.8".to_owned(),
        },
    );
    r.pools.insert("TALOS".to_owned(), Pool { comment: None });
    r.pci_mappings.insert(
        "gpu".to_owned(),
        PciMapping {
            description: Some("GeForce RTX 3050".to_owned()),
            map: vec![PciMapEntry {
                node: "pve".to_owned(),
                path: "0000:01:00".to_owned(),
                id: "10de:2507".to_owned(),
                subsystem_id: Some("10de:2507".to_owned()),
                iommu_group: Some(10),
            }],
        },
    );
    r.vms.insert(
        "talos-worker-01".to_owned(),
        Vm {
            vmid: 122,
            node: "pve".to_owned(),
            name: "talos-worker-01".to_owned(),
            cores: 4,
            memory_mib: 8192,
            disk_gib: 100,
            hostpci: BTreeMap::from([("hostpci0".to_owned(), "mapping=gpu,pcie=1".to_owned())]),
            tags: vec!["talos".to_owned(), "worker".to_owned()],
            net: BTreeMap::from([("net0".to_owned(), "virtio,bridge=vmbr0".to_owned())]),
            disks: BTreeMap::new(),
            agent: true,
            ha: None,
        },
    );
    r.configs.insert(
        "talos-worker-01".to_owned(),
        NodeConfig {
            config_sha256: "ab".repeat(32),
            talos_version: "v1.13.8".to_owned(),
            installer_image: "factory.talos.dev/nocloud-installer/abc:v1.13.8".to_owned(),
            secure_mode: true,
            staged: None,
            role: None,
            running_sha256: None,
        },
    );
    r.bootstrap = Some(Bootstrap {
        done: true,
        node: "talos-controlplane-01".to_owned(),
        at: "2026-01-02T03:04:05Z".to_owned(),
    });
    s.outputs.kubeconfig = Some(Output::sensitive("apiVersion: v1\nkind: Config\n"));
    s.outputs.talosconfig = Some(Output::sensitive("context: homelab\n"));
    s.outputs.machineconfigs.insert(
        "talos-worker-01".to_owned(),
        Output::sensitive("version: v1alpha1\n"),
    );
    s
}

// Create intents, kept in `resources.creating` (see [`super::intent`]).
impl State {
    /// The intent recorded for `address`, if any.
    pub fn intent(&self, address: &Address) -> Option<&CreateIntent> {
        self.resources.creating.get(&address.to_string())
    }

    /// Record the intent to create `address` (replacing an older one).
    pub fn set_intent(&mut self, address: &Address, intent: CreateIntent) {
        self.resources.creating.insert(address.to_string(), intent);
    }

    /// Drop the intent for `address`; returns whether there was one.
    pub fn clear_intent(&mut self, address: &Address) -> bool {
        self.resources
            .creating
            .remove(&address.to_string())
            .is_some()
    }

    /// Every address with an intent, with it.
    pub fn intents(&self) -> Vec<(Address, &CreateIntent)> {
        self.resources
            .creating
            .iter()
            .filter_map(|(a, i)| a.parse().ok().map(|a| (a, i)))
            .collect()
    }
}

/// Check a state document's bytes against [`crate::load::Budget::STATE`] (size, nesting,
/// values) before anything is built from them.
///
/// # Errors
/// [`FormatError::Bounds`], saying where and which bound.
pub fn check_bounds(bytes: &[u8]) -> Result<(), FormatError> {
    talosprov_base::load::check_json_bytes(bytes, talosprov_base::load::Budget::STATE)
        .map_err(|e| FormatError::Bounds(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state with one of everything, for round trips and snapshots.

    #[test]
    fn state_round_trips_through_json() {
        let s = sample();
        let back = State::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.to_json(), s.to_json());
    }

    #[test]
    fn state_json_is_deterministic_and_sorted() {
        insta::assert_snapshot!(String::from_utf8(sample().to_json()).unwrap());
    }

    #[test]
    fn newer_format_version_is_refused() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        v["version"] = serde_json::json!(FORMAT_VERSION + 1);
        let err = State::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, FormatError::NewerVersion { found: 2, .. }),
            "{err:?}"
        );
        let text = err.to_string().replace(env!("CARGO_PKG_VERSION"), "X.Y.Z");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn state_without_version_is_refused() {
        let err = State::from_json(br#"{"lineage":"x","serial":1}"#).unwrap_err();
        assert!(matches!(err, FormatError::MissingVersion));
    }

    #[test]
    fn unknown_field_is_an_error_naming_it() {
        let mut v: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        v["resources"]["vms"]["talos-worker-01"]["colour"] = serde_json::json!("red");
        let err = State::from_json(v.to_string().as_bytes()).unwrap_err();
        let FormatError::Shape { source, .. } = err else {
            panic!("expected a shape error")
        };
        assert!(source.to_string().contains("colour"), "{source}");
    }

    #[test]
    fn sensitive_values_are_redacted_in_debug() {
        let text = format!("{:?}", sample());
        assert!(!text.contains("s3cr3t"));
        assert!(!text.contains("kind: Config"));
        assert!(text.contains("(sensitive)"));
    }

    #[test]
    fn addresses_list_every_recorded_resource() {
        let names: Vec<String> = sample()
            .addresses()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "bootstrap",
                "config/talos-worker-01",
                "image/376567988ad3-v1.13.8",
                "kubeconfig",
                "pci_mapping/gpu",
                "pool/TALOS",
                "talosconfig",
                "vm/talos-worker-01",
            ]
        );
    }

    #[test]
    fn has_applied_is_false_only_for_a_state_that_records_nothing() {
        let mut s = State::new(Uuid::from_u128(1));
        s.secrets = Some(Sensitive::new("cluster: {}\n"));
        assert!(!s.has_applied(), "secrets alone are not applied");
        s.outputs.talosconfig = Some(Output::sensitive("context: lab\n"));
        assert!(s.has_applied());
        let mut only_a_pool = State::new(Uuid::from_u128(1));
        only_a_pool
            .resources
            .pools
            .insert("TALOS".to_owned(), Pool { comment: None });
        assert!(only_a_pool.has_applied());
        assert!(sample().has_applied());
    }

    #[test]
    fn show_redacts_the_kubeconfig() {
        let s = sample();
        let shown = s.show(&Address::Kubeconfig).unwrap().to_string();
        assert!(!shown.contains("kind: Config"), "{shown}");
        let vm = s.show(&Address::Vm("talos-worker-01".to_owned())).unwrap();
        assert_eq!(vm["vmid"], 122);
    }

    #[test]
    fn remove_forgets_one_address_only() {
        let mut s = sample();
        assert!(s.remove(&Address::Vm("talos-worker-01".to_owned())));
        assert!(!s.remove(&Address::Vm("talos-worker-01".to_owned())));
        assert!(s.resources.configs.contains_key("talos-worker-01"));
    }

    #[test]
    fn staged_config_is_written_only_when_pending_and_older_states_read() {
        let mut config = sample().resources.configs["talos-worker-01"].clone();
        let plain = serde_json::to_value(&config).unwrap();
        assert!(plain.get("staged").is_none(), "{plain}");
        let back: NodeConfig = serde_json::from_value(plain).unwrap();
        assert_eq!(
            back.staged, None,
            "a state without the field reads as not staged"
        );
        config.staged = Some(Staged {
            boot_time: Some(1_764_400_000),
        });
        insta::assert_snapshot!(
            serde_json::to_string(&config).unwrap(),
            @r#"{"config_sha256":"abababababababababababababababababababababababababababababababab","talos_version":"v1.13.8","installer_image":"factory.talos.dev/nocloud-installer/abc:v1.13.8","secure_mode":true,"staged":{"boot_time":1764400000}}"#
        );
    }

    #[test]
    fn staged_config_is_taken_once_the_boot_time_moves_on() {
        let staged = Staged {
            boot_time: Some(1_000),
        };
        assert!(!staged.taken_at(1_000));
        assert!(!staged.taken_at(1_000 + Staged::BOOT_TIME_SLACK_SECONDS));
        assert!(staged.taken_at(1_060));
        assert!(!staged.taken_at(900), "an earlier boot time is not a boot");
        assert!(!Staged { boot_time: None }.taken_at(5_000));
    }
}

#[cfg(test)]
mod bounds_tests {
    use super::*;

    #[test]
    fn a_state_document_is_checked_against_its_bounds_before_it_is_parsed() {
        // Twenty million values in 40 MB: refused by the count, before a value is built.
        let dense = format!("{{\"version\": 1, \"x\": [{}1]}}", "1,".repeat(20_000_000));
        let e = State::from_json(dense.as_bytes()).unwrap_err();
        assert!(matches!(e, FormatError::Bounds(_)), "{e}");
        assert!(e.to_string().contains("1000000"), "{e}");
        // 100,000 levels: refused at its place, not a stack overflow.
        let deep = format!("{{\"x\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        let e = State::from_json(deep.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("deeper than 128"), "{e}");
        // Values nested as deep as a YAML input may be, inside the state's own levels: fine
        // for the bounds (the shape is another matter).
        let nested = format!("{{\"x\": {}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(check_bounds(nested.as_bytes()).is_ok());
        assert!(crate::summary::Summary::of(dense.as_bytes()).is_none());
    }
}
