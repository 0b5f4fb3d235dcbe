//! The raw topology: a mirror of `cluster.yaml` exactly as written, every field
//! optional and carrying the position of its key, before defaults and checks.
//! `read.rs` fills it from YAML; `validate.rs` turns it into the model.

use super::diagnostics::Pos;
use schemars::JsonSchema;
use serde::Serialize;

/// A value with the position of the key (or list item) that introduced it.
/// Serializes as the bare value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spanned<T> {
    /// The value as written.
    pub value: T,
    /// Where its key (or list item) starts.
    pub pos: Pos,
}

impl<T> Spanned<T> {
    /// Wrap a value with its position.
    pub fn new(value: T, pos: Pos) -> Self {
        Spanned { value, pos }
    }
}

impl<T: Serialize> Serialize for Spanned<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// A map entry whose order and key position matter (`schematics`, `pci_mappings`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry<T> {
    /// The key, such as the schematic name.
    pub name: Spanned<String>,
    /// The entry's content, as read (checked later by validation).
    pub value: T,
}

/// The whole file. Every section is optional here; `validate` reports the
/// required ones that are missing.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawTopology {
    /// `cluster:`.
    pub cluster: Option<Spanned<RawCluster>>,
    /// `proxmox:`.
    pub proxmox: Option<Spanned<RawProxmox>>,
    /// `image_factory:`.
    pub image_factory: Option<Spanned<RawImageFactory>>,
    /// `schematics:`, in file order.
    pub schematics: Option<Spanned<Vec<Entry<RawSchematic>>>>,
    /// `default_schematic:`.
    pub default_schematic: Option<Spanned<String>>,
    /// `pci_mappings:`, in file order.
    pub pci_mappings: Option<Spanned<Vec<Entry<RawPciMapping>>>>,
    /// `nodes:`, in file order.
    pub nodes: Option<Spanned<Vec<Spanned<RawNode>>>>,
    /// `patches_dir:`, one folder or a list, each relative to the file's
    /// folder; each patch level reads the folders in the order given.
    #[schemars(with = "Option<OneOrMany>", extend("default" = "patches"))]
    pub patches_dir: Option<Spanned<Vec<Spanned<String>>>>,
    /// `state:`.
    pub state: Option<Spanned<RawState>>,
    /// `addons:`, in file order.
    pub addons: Option<Spanned<Vec<Entry<RawAddon>>>>,
    /// `pools:`, in file order.
    pub pools: Option<Spanned<Vec<Entry<RawPool>>>>,
}

/// What the schema says of a key that takes one string or a list of them
/// (`patches_dir`); only the schema uses it.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum OneOrMany {
    /// One folder.
    One(String),
    /// Several folders, in order.
    Many(Vec<String>),
}

/// One `pools.<name>` entry: `replicas` nodes alike, drawn from `ip_range`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPool {
    /// Where the entry starts.
    #[serde(skip)]
    #[schemars(skip)]
    pub pos: super::diagnostics::Pos,
    /// `role`: `controlplane` or `worker` (default `worker`).
    #[schemars(with = "Option<crate::role::Role>", extend("default" = "worker"))]
    pub role: Option<Spanned<String>>,
    /// `replicas`: how many members.
    pub replicas: Option<Spanned<u64>>,
    /// `hostname`: the pattern, with `{cluster}`, `{pool}`, `{index}`.
    pub hostname: Option<Spanned<String>>,
    /// `ip_range`: `FIRST-LAST` or a CIDR inside the cluster network.
    pub ip_range: Option<Spanned<String>>,
    /// `vm_id_start`: member `index` gets `vm_id_start + index - 1`.
    pub vm_id_start: Option<Spanned<u64>>,
    /// `proxmox_nodes`: the hosts members spread over.
    pub proxmox_nodes: Option<Spanned<Vec<Spanned<String>>>>,
    /// `cores`.
    pub cores: Option<Spanned<u64>>,
    /// `memory`, MiB.
    pub memory: Option<Spanned<u64>>,
    /// `disk_size`, GiB.
    pub disk_size: Option<Spanned<u64>>,
    /// `schematic`.
    pub schematic: Option<Spanned<String>>,
    /// `tags`.
    pub tags: Option<Spanned<Vec<Spanned<String>>>>,
    /// `hostpci`.
    pub hostpci: Option<Spanned<Vec<Spanned<RawHostPci>>>>,
}

/// `cluster:`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawCluster {
    /// `name`: a DNS label.
    pub name: Option<Spanned<String>>,
    /// `talos_version`, such as `v1.13.8`.
    pub talos_version: Option<Spanned<String>>,
    /// `kubernetes_version`, such as `v1.36.2`.
    pub kubernetes_version: Option<Spanned<String>>,
    /// `vip`: the shared control-plane IPv4 address.
    pub vip: Option<Spanned<String>>,
    /// `endpoint`: the Kubernetes API URL.
    pub endpoint: Option<Spanned<String>>,
    /// `gateway`: the default route's IPv4 address.
    pub gateway: Option<Spanned<String>>,
    /// `prefix_length`: the nodes' network prefix, in bits.
    #[schemars(extend("default" = 24))]
    pub prefix_length: Option<Spanned<u64>>,
    /// `nameservers`: IP addresses.
    pub nameservers: Option<Spanned<Vec<Spanned<String>>>>,
    /// `install_disk`: the disk Talos installs to.
    #[schemars(extend("default" = "/dev/sda"))]
    pub install_disk: Option<Spanned<String>>,
}

/// `proxmox:`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawProxmox {
    /// `endpoint`: the PVE API URL (`https://host:8006`).
    pub endpoint: Option<Spanned<String>>,
    /// `node`: the default Proxmox host.
    pub node: Option<Spanned<String>>,
    /// `datastore`: storage for VM, EFI and cloud-init disks.
    pub datastore: Option<Spanned<String>>,
    /// `image_storage`: storage that images are downloaded to.
    #[schemars(extend("default" = "local"))]
    pub image_storage: Option<Spanned<String>>,
    /// `bridge`: the network bridge.
    #[schemars(extend("default" = "vmbr0"))]
    pub bridge: Option<Spanned<String>>,
    /// `pool`: the resource pool.
    pub pool: Option<Spanned<String>>,
    /// `insecure`: skip TLS verification.
    #[schemars(extend("default" = false))]
    pub insecure: Option<Spanned<bool>>,
    /// `ca_file`: a PEM file of CA certificates to trust.
    pub ca_file: Option<Spanned<String>>,
    /// `fingerprint`: the SHA-256 fingerprint of the server certificate.
    pub fingerprint: Option<Spanned<String>>,
}

/// `image_factory:`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawImageFactory {
    /// `url`: the Image Factory base URL.
    #[schemars(extend("default" = "https://factory.talos.dev"))]
    pub url: Option<Spanned<String>>,
}

/// One `schematics.<name>` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSchematic {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// `extensions`: official extension names, `<org>/<name>`.
    pub extensions: Option<Spanned<Vec<Spanned<String>>>>,
    /// `kernel_args`: extra kernel arguments.
    pub kernel_args: Option<Spanned<Vec<Spanned<String>>>>,
    /// `id`: a schematic ID already registered with the factory.
    pub id: Option<Spanned<String>>,
}

/// One `pci_mappings.<name>` entry (a Proxmox cluster PCI hardware mapping).
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPciMapping {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// `path`: the PCI address, `0000:01:00` or `0000:01:00.0`.
    pub path: Option<Spanned<String>>,
    /// `id`: vendor and device, `10de:2507`.
    pub id: Option<Spanned<String>>,
    /// `iommu_group`.
    pub iommu_group: Option<Spanned<u64>>,
    /// `subsystem_id`: subsystem vendor and device, `10de:2507`.
    pub subsystem_id: Option<Spanned<String>>,
    /// `comment`.
    pub comment: Option<Spanned<String>>,
    /// `node`: the Proxmox host the device is in.
    pub node: Option<Spanned<String>>,
}

/// One `nodes[]` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNode {
    /// `hostname`.
    pub hostname: Option<Spanned<String>>,
    /// `ip`.
    pub ip: Option<Spanned<String>>,
    /// `role`: `controlplane` or `worker`.
    #[schemars(with = "Option<crate::role::Role>", extend("default" = "controlplane"))]
    pub role: Option<Spanned<String>>,
    /// `cores`.
    pub cores: Option<Spanned<u64>>,
    /// `memory`, MiB.
    pub memory: Option<Spanned<u64>>,
    /// `disk_size`, GiB.
    #[schemars(extend("default" = 40))]
    pub disk_size: Option<Spanned<u64>>,
    /// `vm_id`.
    pub vm_id: Option<Spanned<u64>>,
    /// `proxmox_node`.
    pub proxmox_node: Option<Spanned<String>>,
    /// `schematic`: a `schematics` key.
    pub schematic: Option<Spanned<String>>,
    /// `hostpci`: passed-through PCI devices.
    pub hostpci: Option<Spanned<Vec<Spanned<RawHostPci>>>>,
    /// `tags`: Proxmox tags.
    pub tags: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `nodes[].hostpci[]` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHostPci {
    /// `device`: `hostpci0`..`hostpci15`.
    pub device: Option<Spanned<String>>,
    /// `mapping`: a `pci_mappings` key.
    pub mapping: Option<Spanned<String>>,
    /// `pcie`: attach as PCI Express (default true).
    #[schemars(extend("default" = true))]
    pub pcie: Option<Spanned<bool>>,
    /// `rombar`: expose the device ROM (default true).
    #[schemars(extend("default" = true))]
    pub rombar: Option<Spanned<bool>>,
    /// `xvga`: primary GPU (default false).
    #[schemars(extend("default" = false))]
    pub xvga: Option<Spanned<bool>>,
}

/// `state:`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawState {
    /// `backend`: `local` or `http`.
    #[schemars(extend("enum" = ["local", "http", null], "default" = "local"))]
    pub backend: Option<Spanned<String>>,
    /// `path`: the local state file.
    pub path: Option<Spanned<String>>,
    /// `address`: the HTTP backend's state URL.
    pub address: Option<Spanned<String>>,
    /// `lock_address`.
    pub lock_address: Option<Spanned<String>>,
    /// `unlock_address`.
    pub unlock_address: Option<Spanned<String>>,
    /// `lock_method`.
    #[schemars(extend("default" = "LOCK"))]
    pub lock_method: Option<Spanned<String>>,
    /// `unlock_method`.
    #[schemars(extend("default" = "UNLOCK"))]
    pub unlock_method: Option<Spanned<String>>,
}

/// One `addons.<name>` entry: a Kubernetes add-on with exactly one source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawAddon {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// `preset`: `cilium`, `nvidia-gpu-operator` or `talos-ccm`.
    #[schemars(with = "Option<super::model::Preset>")]
    pub preset: Option<Spanned<String>>,
    /// `helm`: a pinned chart rendered with `helm template`.
    pub helm: Option<Spanned<RawHelm>>,
    /// `manifests`: files or globs relative to the topology file, literal or
    /// minijinja (`.j2`).
    pub manifests: Option<Spanned<Vec<Spanned<String>>>>,
    /// `url`: one manifest file to download.
    pub url: Option<Spanned<String>>,
    /// `sha256`: the download's digest, 64 hex digits.
    pub sha256: Option<Spanned<String>>,
    /// `namespace`: where namespaced objects go.
    pub namespace: Option<Spanned<String>>,
    /// `namespace_labels`: labels of the namespace, in file order.
    #[schemars(with = "Option<std::collections::BTreeMap<String, String>>")]
    pub namespace_labels: Option<Spanned<Vec<Label>>>,
    /// `phase`: `bootstrap` or `cluster`.
    #[schemars(with = "Option<super::model::Phase>")]
    pub phase: Option<Spanned<String>>,
    /// `depends_on`: add-on names applied first.
    pub depends_on: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `namespace_labels` entry: its key and its value, each with its
/// position.
pub type Label = (Spanned<String>, Spanned<String>);

/// `addons.<name>.helm`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHelm {
    /// `repo`: an `https://` chart repository or an `oci://` registry path.
    pub repo: Option<Spanned<String>>,
    /// `chart`: the chart's name in the repository.
    pub chart: Option<Spanned<String>>,
    /// `version`: the chart version, always pinned.
    pub version: Option<Spanned<String>>,
    /// `values`: a mapping merged over the preset's values.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub values: Option<Spanned<serde_json::Value>>,
    /// `values_files`: YAML files relative to the topology file, merged in order
    /// before `values`.
    pub values_files: Option<Spanned<Vec<Spanned<String>>>>,
}
