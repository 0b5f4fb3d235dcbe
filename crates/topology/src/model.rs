//! The validated topology model: what a topology file means once every
//! default is applied and every reference resolved. [`super::validate`] builds
//! it from the raw file; everything after validation reads only this.

use indexmap::IndexMap;
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use super::syntax::Version;
use talosprov_base::preset::Preset;
use talosprov_base::preset::spec::Phase;
use talosprov_base::role::Role;

/// The environment variable that gives the Proxmox API URL when the file has no
/// `proxmox.endpoint` (the name the bpg/proxmox provider uses).
pub const PROXMOX_ENDPOINT_ENV: &str = "PROXMOX_VE_ENDPOINT";

/// The validated topology: every default applied, every reference resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    /// The file it was read from, as given on the command line.
    pub file: PathBuf,
    /// `cluster:`.
    pub cluster: Cluster,
    /// `proxmox:`.
    pub proxmox: ProxmoxSettings,
    /// `image_factory.url`, default `https://factory.talos.dev`, no trailing `/`.
    pub image_factory_url: String,
    /// `schematics:` by name, in file order.
    pub schematics: IndexMap<String, SchematicSpec>,
    /// `pci_mappings:` by name, in file order.
    pub pci_mappings: IndexMap<String, PciMapping>,
    /// `nodes:`, in file order, then every pool's members (pool by pool, in
    /// index order).
    pub nodes: Vec<Node>,
    /// The patch tree: the first folder of `patches_dir` resolved against
    /// the file's folder (default `patches` beside the file).
    pub patches_dir: PathBuf,
    /// Every folder of `patches_dir`, resolved, in the order given: each
    /// level (common, role, pool, node) reads them in this order.
    pub patches_dirs: Vec<PathBuf>,
    /// `pools:` in file order, with their members' allocation.
    pub pools: Vec<super::pools::Pool>,
    /// `state:`, default a local state file.
    pub state: StateSettings,
    /// `addons:` by name, in file order.
    pub addons: IndexMap<String, Addon>,
    /// `backup:`, when given.
    pub backup: Option<talosprov_base::backup::BackupSettings>,
}

impl Topology {
    /// The control-plane nodes, in file order.
    pub fn controlplanes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.role == Role::Controlplane)
    }

    /// Whether the node's image runs a QEMU guest agent: its schematic has the
    /// [`GUEST_AGENT_EXTENSION`], or is given by ID (what it holds is not
    /// known offline, and such a schematic is usually a full one). Its VM
    /// gets `agent: enabled=1` only then.
    pub fn has_guest_agent(&self, node: &Node) -> bool {
        match node.schematic.as_ref().and_then(|n| self.schematics.get(n)) {
            Some(SchematicSpec::Customization { extensions, .. }) => {
                extensions.iter().any(|e| e == GUEST_AGENT_EXTENSION)
            }
            Some(SchematicSpec::Id(_)) => true,
            None => false,
        }
    }

    /// The `proxmox.spread` groups, in order: each entry (a role or a pool
    /// name) with the nodes it holds (a role's nodes, pool members
    /// included; a pool's members), in topology order.
    pub fn spread_groups(&self) -> Vec<(&str, Vec<&Node>)> {
        self.proxmox
            .spread
            .iter()
            .map(|entry| {
                let members = self
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.role.as_str() == entry
                            || n.pool.as_ref().is_some_and(|m| &m.pool == entry)
                    })
                    .collect();
                (entry.as_str(), members)
            })
            .collect()
    }

    /// The HA resource of `node`'s VM: its own or `proxmox.ha`, else
    /// Proxmox's defaults when a spread group holds it, else none.
    pub fn ha_of(&self, node: &Node) -> Option<Ha> {
        node.ha.clone().or_else(|| {
            self.spread_groups()
                .iter()
                .any(|(_, members)| members.iter().any(|m| m.hostname == node.hostname))
                .then(Ha::default)
        })
    }

    /// The node with this hostname.
    pub fn node(&self, hostname: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.hostname == hostname)
    }
}

/// `cluster:` with defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    /// The cluster name, a DNS label.
    pub name: String,
    /// The Talos version, such as `v1.13.8`.
    pub talos_version: Version,
    /// The Kubernetes version; `None` means the default of the Talos version
    /// (decided where machine configs are generated).
    pub kubernetes_version: Option<Version>,
    /// The shared control-plane VIP, when there is one.
    pub vip: Option<Ipv4Addr>,
    /// The Kubernetes API URL: given, or `https://<vip or first control plane's IP>:6443`.
    pub endpoint: String,
    /// The default gateway.
    pub gateway: Ipv4Addr,
    /// The nodes' network prefix length, in bits (default 24).
    pub prefix_length: u8,
    /// DNS servers (default none: Talos then uses its own defaults).
    pub nameservers: Vec<IpAddr>,
    /// The disk Talos installs to (default `/dev/sda`).
    pub install_disk: String,
}

/// `proxmox:` with defaults applied. Credentials are never here: they come
/// from the environment when a client is built.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProxmoxSettings {
    /// The PVE API base URL, such as `https://pve.example:8006` (from the file,
    /// else `PROXMOX_VE_ENDPOINT`), without a trailing `/`.
    pub endpoint: String,
    /// The default Proxmox host (`node` in PVE's API paths).
    pub node: String,
    /// Storage for VM, EFI and cloud-init disks.
    pub datastore: String,
    /// Storage that images are downloaded to (default `local`).
    pub image_storage: String,
    /// The network bridge (default `vmbr0`).
    pub bridge: String,
    /// `proxmox.networks`: the NICs of nodes that set none (their `mac` is
    /// `None` here; each node derives its own). Empty: one NIC on `bridge`.
    pub networks: Vec<Network>,
    /// `proxmox.disks`: the data disks of nodes that set none.
    pub disks: Vec<DataDisk>,
    /// `proxmox.ha`: the HA resource of nodes that set none.
    pub ha: Option<Ha>,
    /// `proxmox.spread`: roles (`controlplane`, `worker`) and pool names,
    /// each a group of VMs kept on different hosts by HA rules.
    pub spread: Vec<String>,
    /// The resource pool the VMs join, when given.
    pub pool: Option<String>,
    /// Skip TLS certificate verification (default false).
    pub insecure: bool,
    /// A PEM file of CA certificates to trust, resolved against the file's folder.
    pub ca_file: Option<PathBuf>,
    /// The server certificate's SHA-256 fingerprint to pin, as written.
    pub fingerprint: Option<String>,
}

/// What a schematic is made of: extensions and kernel arguments for the Image
/// Factory to build, or the ID of a schematic already registered there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchematicSpec {
    /// Built from official extensions (`siderolabs/qemu-guest-agent`) and extra
    /// kernel arguments, in the order given.
    Customization {
        /// Official extension names, `<org>/<name>`.
        extensions: Vec<String>,
        /// Extra kernel command-line arguments.
        kernel_args: Vec<String>,
    },
    /// A schematic ID: 64 lowercase hex digits.
    Id(String),
}

/// A Proxmox cluster PCI hardware mapping (`/cluster/mapping/pci`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciMapping {
    /// The PCI address, `0000:01:00` or `0000:01:00.0`.
    pub path: String,
    /// Vendor and device, `10de:2507`.
    pub id: String,
    /// The IOMMU group.
    pub iommu_group: u32,
    /// Subsystem vendor and device, `10de:2507`.
    pub subsystem_id: String,
    /// A free-text description.
    pub comment: Option<String>,
    /// The Proxmox host the device is in; `None` means `proxmox.node`.
    pub node: Option<String>,
    /// The devices on other hosts under the same name (`map[1..]`; the fields
    /// above are `map[0]`'s): one VM per host's device. In JSON
    /// `other_hosts`, left out when empty.
    #[serde(rename = "other_hosts", skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<PciHostDevice>,
}

impl PciMapping {
    /// Every host's device: the first (on `node`, else `default_node`), then
    /// `others`.
    pub fn devices(&self, default_node: &str) -> Vec<PciHostDevice> {
        let first = PciHostDevice {
            node: self.node.clone().unwrap_or_else(|| default_node.to_owned()),
            path: self.path.clone(),
            id: self.id.clone(),
            iommu_group: self.iommu_group,
            subsystem_id: self.subsystem_id.clone(),
        };
        std::iter::once(first)
            .chain(self.others.iter().cloned())
            .collect()
    }

    /// The hosts with a device, in order.
    pub fn hosts(&self, default_node: &str) -> Vec<String> {
        self.devices(default_node)
            .into_iter()
            .map(|d| d.node)
            .collect()
    }
}

/// One host's device of a PCI mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PciHostDevice {
    /// The Proxmox host.
    pub node: String,
    /// The PCI address, `0000:01:00`.
    pub path: String,
    /// Vendor and device, `10de:2507`.
    pub id: String,
    /// The IOMMU group.
    pub iommu_group: u32,
    /// Subsystem vendor and device.
    pub subsystem_id: String,
}

/// The official extension that runs the QEMU guest agent in Talos.
pub const GUEST_AGENT_EXTENSION: &str = "siderolabs/qemu-guest-agent";

/// Talos's minimum system disk, GiB (Talos system requirements: 10 GiB).
pub const MIN_DISK_GIB: u32 = 10;

use crate::syntax::Vmid;

/// A PCI device passed through to a VM by mapping (`hostpciN: mapping=...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPci {
    /// N in `hostpciN`, 0..=15.
    pub index: u8,
    /// The `pci_mappings` key.
    pub mapping: String,
    /// Attach as PCI Express (default true; needs the q35 machine type).
    pub pcie: bool,
    /// Expose the device ROM (default true).
    pub rombar: bool,
    /// Make it the VM's primary GPU (default false).
    pub xvga: bool,
}

impl HostPci {
    /// The Proxmox config key, `hostpci0`..`hostpci15`.
    pub fn device(&self) -> String {
        format!("hostpci{}", self.index)
    }
}

/// One node: a Proxmox VM running Talos.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// The hostname, a lowercase DNS label; also the VM name.
    pub hostname: String,
    /// The static IPv4 address.
    pub ip: Ipv4Addr,
    /// Control plane or worker (default control plane).
    pub role: Role,
    /// vCPU cores.
    pub cores: u32,
    /// Memory, MiB.
    pub memory: u32,
    /// System disk size, GiB (Proxmox's `G`; default 40).
    pub disk_size: u32,
    /// The VM ID: given, or the IP's last octet.
    pub vm_id: Vmid,
    /// The Proxmox host the VM runs on (default `proxmox.node`).
    pub proxmox_node: String,
    /// The schematic name (`schematic`, else `default_schematic`); `None`
    /// means Talos without extensions.
    pub schematic: Option<String>,
    /// Passed-through PCI devices.
    pub hostpci: Vec<HostPci>,
    /// Proxmox tags.
    pub tags: Vec<String>,
    /// The pool it is a member of (`pools.<name>`), with its index; `None`
    /// for a node listed in `nodes`.
    pub pool: Option<super::pools::Membership>,
    /// Its NICs (`networks`, else `proxmox.networks`), `net0` first, each
    /// with its MAC (given or derived, see `validate_devices::derived_mac`).
    /// Empty: one NIC on `proxmox.bridge` whose MAC Proxmox picks, and no
    /// link in the machine config (Talos takes `net0`'s address from
    /// cloud-init).
    pub networks: Vec<Network>,
    /// Its data disks (`disks`, else `proxmox.disks`), `scsi1` first.
    pub disks: Vec<DataDisk>,
    /// Its Proxmox HA resource (`ha`, else `proxmox.ha`); `None`: not HA
    /// managed, unless a `proxmox.spread` group holds it.
    pub ha: Option<Ha>,
}

/// A VM's Proxmox HA resource (`/cluster/ha/resources`, `vm:<vmid>`), as
/// pve-ha-manager's resource config holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ha {
    /// `started`, `stopped`, `disabled` or `ignored`.
    pub state: String,
    /// Restarts on the same host before a move.
    pub max_restart: u32,
    /// Moves to another host after a failed start.
    pub max_relocate: u32,
}

impl Default for Ha {
    /// Proxmox's defaults: `started`, one restart, one move.
    fn default() -> Self {
        Ha {
            state: "started".to_owned(),
            max_restart: 1,
            max_relocate: 1,
        }
    }
}

/// The states pve-ha-manager keeps a resource in (`state`).
pub const HA_STATES: [&str; 4] = ["started", "stopped", "disabled", "ignored"];

/// One NIC of a node's VM (`networks[]`), Proxmox's `netN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Network {
    /// The Proxmox bridge.
    pub bridge: String,
    /// The VLAN tag, 1..=4094.
    pub vlan: Option<u16>,
    /// The MTU, 576..=65520.
    pub mtu: Option<u16>,
    /// The MAC address, upper-case `XX:XX:XX:XX:XX:XX`; `None` only in
    /// `proxmox.networks`, before a node derives its own.
    pub mac: Option<String>,
    /// Through the Proxmox firewall.
    pub firewall: bool,
}

/// One data disk of a node's VM (`disks[]`), Proxmox's `scsiN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataDisk {
    /// N in `scsiN`: 1 for the first entry, and so on.
    pub index: u8,
    /// Size, GiB.
    pub size_gib: u32,
    /// The storage the volume is on.
    pub datastore: String,
    /// `ssd=1`.
    pub ssd: bool,
    /// `iothread=1`.
    pub iothread: bool,
    /// `discard=on`.
    pub discard: bool,
    /// `cache=`; `None` is Proxmox's default, `none`.
    pub cache: Option<String>,
    /// The Talos user volume name it is mounted as, `/var/mnt/<name>`;
    /// `None` leaves the disk raw.
    pub volume: Option<String>,
}

/// Where the state lives (`state:`). Credentials for the HTTP backend come from
/// the environment (`TF_HTTP_USERNAME`, `TF_HTTP_PASSWORD`), never the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "backend", rename_all = "lowercase")]
pub enum StateSettings {
    /// A local JSON file.
    Local {
        /// The file, resolved against the topology file's folder; `None` means
        /// the default place chosen by the state backend.
        path: Option<PathBuf>,
    },
    /// OpenTofu's HTTP backend protocol (GitLab-managed state, say).
    Http {
        /// The state URL (GET and POST); `None` means `TF_HTTP_ADDRESS` gives it
        /// at run time.
        address: Option<String>,
        /// The lock URL; `None` means no locking.
        lock_address: Option<String>,
        /// The unlock URL; `None` means no locking.
        unlock_address: Option<String>,
        /// The HTTP method for locking (default `LOCK`).
        lock_method: String,
        /// The HTTP method for unlocking (default `UNLOCK`).
        unlock_method: String,
    },
}

/// A Kubernetes add-on the cluster is handed over with (`addons.<name>`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Addon {
    /// The add-on's name: the Helm release name, the inline manifest's name.
    pub name: String,
    /// Where its entry starts in the topology file (for later diagnostics).
    #[serde(skip)]
    pub pos: talosprov_base::diagnostics::Pos,
    /// The preset whose values and checks apply.
    pub preset: Option<Preset>,
    /// Where its objects come from.
    pub source: AddonSource,
    /// Where namespaced objects go: given, else the preset's, else `default`.
    pub namespace: String,
    /// Labels of the namespace (the GPU operator's preset adds
    /// `pod-security.kubernetes.io/enforce: privileged`), sorted by key.
    pub namespace_labels: std::collections::BTreeMap<String, String>,
    /// When it is installed.
    pub phase: Phase,
    /// Add-ons applied before this one, as written.
    pub depends_on: Vec<String>,
}

/// An add-on's one source of objects.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddonSource {
    /// A pinned chart, rendered with `helm template`.
    Helm {
        /// An `https://` chart repository, or an `oci://` registry path (then
        /// `chart` is not looked up in a repository index).
        repo: String,
        /// The chart's name.
        chart: String,
        /// The chart version.
        version: String,
        /// `values` as written (merged over the preset's values, after the
        /// values files).
        values: serde_json::Value,
        /// Values files resolved against the topology file's folder, in order.
        values_files: Vec<PathBuf>,
    },
    /// Files or globs resolved against the topology file's folder (a glob's
    /// `*` stays in the last component), literal or minijinja (`.j2`).
    Manifests(Vec<PathBuf>),
    /// One manifest file to download, checked against its digest.
    Url {
        /// The file's `https://` (or `http://`) URL.
        url: String,
        /// Its lowercase hex SHA-256.
        sha256: String,
    },
}

/// What the topology takes from the process environment, read by the caller
/// (`talosprov-files` reads the process's) and passed to [`super::parse`]: the core
/// reads no environment itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// `PROXMOX_VE_ENDPOINT`, used when the file has no `proxmox.endpoint`.
    pub proxmox_endpoint: Option<String>,
    /// The pools' members the state records, by pool: each keeps its
    /// allocation (see [`super::pools`]); empty without a state.
    pub recorded_pools:
        std::collections::BTreeMap<String, Vec<talosprov_statefile::format::RecordedMember>>,
    /// What each Proxmox host has free, read by a plan (see
    /// [`super::pools::HostCapacity`]); empty offline.
    pub host_capacity: std::collections::BTreeMap<String, super::pools::HostCapacity>,
}
