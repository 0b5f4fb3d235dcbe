//! The raw topology: a mirror of `cluster.yaml` exactly as written, every field
//! optional and carrying the position of its key, before defaults and checks.
//! `read.rs` fills it from YAML; `validate.rs` turns it into the model.

use schemars::JsonSchema;
use serde::Serialize;
use talosprov_base::diagnostics::Pos;

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
    /// The Kubernetes cluster: its name, Talos and Kubernetes versions, and the
    /// nodes' network (gateway, prefix length, VIP, nameservers). Required.
    pub cluster: Option<Spanned<RawCluster>>,
    /// The Proxmox VE cluster the VMs are made on: API endpoint, default host,
    /// storages, bridge and resource pool. Required; credentials come from the
    /// environment (`PROXMOX_VE_API_TOKEN`), never this file.
    pub proxmox: Option<Spanned<RawProxmox>>,
    /// The Talos Image Factory that builds the schematics and serves the nodes'
    /// disk and installer images. Optional: the public factory by default.
    pub image_factory: Option<Spanned<RawImageFactory>>,
    /// Image Factory schematics by name: the system extensions and kernel
    /// arguments a node's Talos image is built with, or an existing schematic ID.
    /// Nodes choose one with `schematic` or `default_schematic`.
    pub schematics: Option<Spanned<Vec<Entry<RawSchematic>>>>,
    /// The `schematics` name used by every node and pool that sets no
    /// `schematic`. Without it, those nodes run the factory's plain Talos image
    /// (no extensions).
    pub default_schematic: Option<Spanned<String>>,
    /// PCI devices to pass through, by name: each becomes a Proxmox cluster PCI
    /// resource mapping of that name, which talosprov creates. A node's `hostpci`
    /// entry names one as its `mapping`.
    pub pci_mappings: Option<Spanned<Vec<Entry<RawPciMapping>>>>,
    /// The Talos nodes, one Proxmox VM each, in order. Required unless `pools`
    /// is given; at least one node or pool member must be a control plane, and
    /// at most 1000 nodes in all.
    pub nodes: Option<Spanned<Vec<Spanned<RawNode>>>>,
    /// The patch tree: one folder or a list of folders, relative to this file's
    /// folder (default `patches`). Each patch level (common, role, pool, node)
    /// reads the folders in the order given.
    #[schemars(with = "Option<OneOrMany>", extend("default" = "patches"))]
    pub patches_dir: Option<Spanned<Vec<Spanned<String>>>>,
    /// Where talosprov keeps its state: a local file (the default,
    /// `talosprov.tfstate` beside this file) or an OpenTofu-style HTTP backend
    /// such as GitLab's managed state.
    pub state: Option<Spanned<RawState>>,
    /// Kubernetes add-ons by name (a lowercase DNS label of at most 53
    /// characters, also the Helm release's name), each with exactly one source:
    /// `helm`, `manifests` or `url`.
    pub addons: Option<Spanned<Vec<Entry<RawAddon>>>>,
    /// Node pools by name: `replicas` alike nodes whose IP, vmid and Proxmox host
    /// talosprov allocates, each member keeping them for its whole life.
    pub pools: Option<Spanned<Vec<Entry<RawPool>>>>,
    /// Where etcd snapshots go and how many are kept: `talosprov etcd
    /// snapshot` and apply's automatic snapshots write there, age-encrypted,
    /// and `talosprov etcd restore --from latest` reads the newest. Optional:
    /// without it, apply's snapshots stay in a local folder beside the state.
    pub backup: Option<Spanned<RawBackup>>,
}

/// Where etcd snapshots go, and which are kept (the newest `keep_last`, and
/// the newest of each of the last `keep_daily` days; the newest is never
/// deleted).
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawBackup {
    /// A folder, relative to this file's folder, or an S3-compatible bucket
    /// and prefix, `s3://bucket/prefix`, with the endpoint, region and
    /// credentials from the usual `AWS_*` variables. Required.
    pub destination: Option<Spanned<String>>,
    /// Keep the newest N snapshots, 0 to 10000.
    #[schemars(range(max = 10000), extend("default" = 7))]
    pub keep_last: Option<Spanned<u64>>,
    /// Also keep the newest snapshot of each of the last D days (UTC), 0 to
    /// 3650.
    #[schemars(range(max = 3650), extend("default" = 14))]
    pub keep_daily: Option<Spanned<u64>>,
    /// `plan` warns when the newest snapshot in `destination` is older than
    /// this: a duration such as `26h` or `2d`, or a whole number of seconds.
    /// Default: no warning.
    #[schemars(with = "Option<DurationText>")]
    pub max_age: Option<Spanned<String>>,
    /// How an `s3://` destination is reached beyond the `AWS_*` variables.
    pub s3: Option<Spanned<RawBackupS3>>,
}

/// `backup.s3`: where S3 credentials may come from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawBackupS3 {
    /// Take the credentials from the cloud instance's metadata service
    /// (169.254.169.254: the instance's role) when `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` are not set. Default: false, so a job that
    /// meant the `AWS_*` variables never uses the runner's role by accident.
    #[schemars(extend("default" = false))]
    pub instance_credentials: Option<Spanned<bool>>,
}

/// A duration as the topology takes it: text such as `26h`, or seconds.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum DurationText {
    /// A duration such as `90s`, `26h` or `2d`.
    Text(String),
    /// Whole seconds.
    Seconds(u64),
}

/// One folder, or a list of folders read in the order given.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum OneOrMany {
    /// One folder.
    One(String),
    /// Several folders, in order.
    Many(Vec<String>),
}

/// One node pool, named by its key: `replicas` alike nodes drawn from
/// `ip_range`, each member keeping its IP, vmid and Proxmox host for life.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPool {
    /// Where the entry starts.
    #[serde(skip)]
    #[schemars(skip)]
    pub pos: talosprov_base::diagnostics::Pos,
    /// Every member's role: `controlplane` (etcd and the Kubernetes control
    /// plane) or `worker`. Default `worker`, unlike a `nodes` entry.
    #[schemars(with = "Option<talosprov_base::role::Role>", extend("default" = "worker"))]
    pub role: Option<Spanned<String>>,
    /// How many members the pool has, 0 to 250. Required; scaling down removes
    /// the highest indexes first.
    #[schemars(range(max = 250))]
    pub replicas: Option<Spanned<u64>>,
    /// The members' hostname pattern: `{cluster}`, `{pool}` and `{index}`
    /// (counting from 1) are replaced, and `{index}` is required. Each result
    /// must be a lowercase RFC 1123 label.
    #[schemars(extend("default" = "{cluster}-{pool}-{index}"))]
    pub hostname: Option<Spanned<String>>,
    /// The IPv4 addresses members take, lowest free first: `FIRST-LAST`
    /// (`192.168.1.130-192.168.1.140`) or a CIDR (its host addresses), inside the
    /// cluster network and overlapping no other pool. Required; listed nodes'
    /// IPs, the VIP and the gateway are skipped.
    pub ip_range: Option<Spanned<String>>,
    /// The Proxmox VM ID (vmid) of member 1: member N gets `vm_id_start + N - 1`.
    /// Default: each member's IP's last octet when it is 100 or more (as for a
    /// node), else 1000 plus it, counting up past vmids already taken; every
    /// member's vmid must be 100 to 999999999.
    pub vm_id_start: Option<Spanned<u64>>,
    /// The Proxmox hosts (PVE node names) the members spread over: a new member
    /// goes to the one with the fewest members of the pool, ties in list order.
    /// Default: `proxmox.node` alone.
    pub proxmox_nodes: Option<Spanned<Vec<Spanned<String>>>>,
    /// Each member's number of vCPU cores, the Proxmox VM's `cores` (one socket,
    /// CPU type `host`), 1 to 1024. Required.
    pub cores: Option<Spanned<u64>>,
    /// Each member's memory in MiB, the Proxmox VM's `memory`. Required; at least
    /// Talos's minimum: 2048 for control planes, 1024 for workers.
    pub memory: Option<Spanned<u64>>,
    /// The size of each member's system disk (`scsi0`) in GiB, at least Talos's
    /// minimum of 10.
    #[schemars(extend("default" = 40))]
    pub disk_size: Option<Spanned<u64>>,
    /// The name of the `schematics` entry the members' Talos image is built
    /// from. Default `default_schematic`, else the factory's plain Talos image.
    pub schematic: Option<Spanned<String>>,
    /// Proxmox tags on every member's VM: letters, digits, '_', '-', '+' and '.',
    /// not starting with '-', '+' or '.'.
    pub tags: Option<Spanned<Vec<Spanned<String>>>>,
    /// PCI devices passed through to every member, as a node's `hostpci`. A
    /// mapping's device is on one Proxmox host and goes to one VM only, so a
    /// member placed on another host, or two sharing it, is refused.
    pub hostpci: Option<Spanned<Vec<Spanned<RawHostPci>>>>,
    /// Every member's NICs, as a node's `networks` (a `mac` here would be
    /// every member's, so leave it out). Default `proxmox.networks`.
    pub networks: Option<Spanned<Vec<Spanned<RawNetwork>>>>,
    /// Every member's data disks, as a node's `disks`. Default
    /// `proxmox.disks`.
    pub disks: Option<Spanned<Vec<Spanned<RawDisk>>>>,
    /// Every member's Proxmox HA resource, as a node's `ha`. Default
    /// `proxmox.ha`.
    pub ha: Option<Spanned<RawHa>>,
}

/// The Kubernetes cluster: its name, versions and the nodes' network.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawCluster {
    /// The cluster's name, such as `homelab`: a lowercase RFC 1123 label (a-z,
    /// 0-9 and '-', at most 63 characters). Required; it is Talos's
    /// `cluster.clusterName` and `{cluster}` in pool hostnames.
    pub name: Option<Spanned<String>>,
    /// The Talos Linux release the nodes run, `vMAJOR.MINOR.PATCH` such as
    /// `v1.13.8`, v1.10.0 or later (the first with the Image Factory's
    /// `nocloud-installer` image). Required.
    pub talos_version: Option<Spanned<String>>,
    /// The Kubernetes release, `vMAJOR.MINOR.PATCH` such as `v1.36.2`. Default:
    /// the release that `talos_version` ships by default (v1.36.2 for Talos
    /// v1.13.8).
    pub kubernetes_version: Option<Spanned<String>>,
    /// The control planes' shared virtual IP: an IPv4 address in the cluster
    /// network that no node has. Optional; it is added to the API server
    /// certificate, given to patch templates as `vip`, and is the default
    /// `endpoint`'s host.
    pub vip: Option<Spanned<String>>,
    /// The Kubernetes API URL, `https://` only, such as
    /// `https://192.168.1.120:6443`. Default: `https://<vip>:6443`, or the first
    /// control plane's IP in place of the VIP when there is none.
    pub endpoint: Option<Spanned<String>>,
    /// The default route's IPv4 address, given to every node through cloud-init.
    /// Required; with `prefix_length` it defines the cluster network that node
    /// IPs, the VIP and pool ranges must lie in.
    pub gateway: Option<Spanned<String>>,
    /// The cluster network's prefix length in bits, 1 to 30 (24 is a
    /// 255.255.255.0 netmask), given to every node with its IP.
    #[schemars(range(min = 1, max = 30), extend("default" = 24))]
    pub prefix_length: Option<Spanned<u64>>,
    /// DNS servers for the nodes, IPv4 or IPv6 addresses, given through
    /// cloud-init and to patch templates as `nameservers`. Default: none, and
    /// Talos uses its own defaults.
    pub nameservers: Option<Spanned<Vec<Spanned<String>>>>,
    /// The disk Talos installs to inside each VM, a `/dev/` path; talosprov sets
    /// `machine.install.disk` to it. The default, `/dev/sda`, is the VM's system
    /// disk (`scsi0`).
    #[schemars(extend("default" = "/dev/sda"))]
    pub install_disk: Option<Spanned<String>>,
}

/// The Proxmox VE cluster the VMs are made on. Credentials are never here:
/// they come from the environment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawProxmox {
    /// The Proxmox VE API URL, `https://` with host and port, such as
    /// `https://pve.example:8006`. Required unless the `PROXMOX_VE_ENDPOINT`
    /// environment variable is set (this key wins over it).
    pub endpoint: Option<Spanned<String>>,
    /// The Proxmox host (PVE node name, such as `pve`) VMs go to unless a node
    /// sets `proxmox_node` or a pool `proxmox_nodes`: letters, digits and '-'.
    /// Required.
    pub node: Option<Spanned<String>>,
    /// The Proxmox storage ID for each VM's system, EFI and cloud-init disks,
    /// such as `local-lvm`. Required.
    pub datastore: Option<Spanned<String>>,
    /// The Proxmox storage ID that Talos disk images are downloaded to; it must
    /// allow the `import` content type (PVE 8.4 or later).
    #[schemars(extend("default" = "local"))]
    pub image_storage: Option<Spanned<String>>,
    /// The Proxmox network bridge each VM's one network device (`net0`, virtio)
    /// is attached to, and the default `bridge` of `networks` entries: 1 to 15
    /// letters, digits, '-', '_' and '.' (a Linux interface name).
    #[schemars(extend("default" = "vmbr0"), length(min = 1, max = 15), regex(pattern = r"^[-_.A-Za-z0-9]+$"))]
    pub bridge: Option<Spanned<String>>,
    /// The NICs of every node and pool member that sets no `networks`, as a
    /// node's `networks`.
    pub networks: Option<Spanned<Vec<Spanned<RawNetwork>>>>,
    /// The data disks of every node and pool member that sets no `disks`, as a
    /// node's `disks`.
    pub disks: Option<Spanned<Vec<Spanned<RawDisk>>>>,
    /// The Proxmox HA resource of every node and pool member that sets no
    /// `ha`, as a node's `ha`.
    pub ha: Option<Spanned<RawHa>>,
    /// Groups of VMs kept on different Proxmox hosts: each entry a role
    /// (`controlplane`, `worker`) or a pool name. Each group's VMs become HA
    /// resources and get one negative resource-affinity HA rule on PVE 9
    /// (`/cluster/ha/rules`, named `talosprov-<cluster>-<entry>`), or on PVE 8
    /// one HA group per VM that prefers its own host (`/cluster/ha/groups`).
    pub spread: Option<Spanned<Vec<Spanned<String>>>>,
    /// A Proxmox resource pool ID the VMs join, `parent/child` for a nested
    /// pool. Optional; talosprov creates it (an existing pool must be imported
    /// first) and deletes it on destroy.
    pub pool: Option<Spanned<String>>,
    /// Turn off TLS certificate verification of the Proxmox API, with a
    /// warning. Not allowed together with `ca_file` or `fingerprint`.
    #[schemars(extend("default" = false))]
    pub insecure: Option<Spanned<bool>>,
    /// A PEM file of CA certificates to trust for the Proxmox API (such as a
    /// copy of `/etc/pve/pve-root-ca.pem`, or the self-signed server certificate
    /// itself), relative to this file's folder.
    pub ca_file: Option<Spanned<String>>,
    /// The Proxmox API server certificate's SHA-256 fingerprint to pin, as the
    /// node's System > Certificates shows it: 32 hex pairs joined by ':', or 64
    /// hex digits.
    pub fingerprint: Option<Spanned<String>>,
}

/// The Talos Image Factory that builds schematics and serves the nodes'
/// images.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawImageFactory {
    /// The Image Factory's base URL, `http://` or `https://`: nodes boot its
    /// nocloud disk image and install and upgrade with its `nocloud-installer`
    /// image.
    #[schemars(extend("default" = "https://factory.talos.dev"))]
    pub url: Option<Spanned<String>>,
}

/// One Image Factory schematic, named by its key: `extensions` and
/// `kernel_args` for the factory to build, or the `id` of one it already has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawSchematic {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// Official Talos system extensions built into the image, `<org>/<name>`
    /// such as `siderolabs/qemu-guest-agent`. Order matters: the same set in
    /// another order is another schematic.
    pub extensions: Option<Spanned<Vec<Spanned<String>>>>,
    /// Extra kernel command-line arguments built into the image (the factory's
    /// `extraKernelArgs`), such as `console=ttyS0`.
    pub kernel_args: Option<Spanned<Vec<Spanned<String>>>>,
    /// The ID of a schematic already registered with the Image Factory, 64
    /// lowercase hex digits; give it instead of `extensions` and `kernel_args`.
    pub id: Option<Spanned<String>>,
}

/// One PCI device as a Proxmox cluster resource mapping (Datacenter >
/// Resource Mappings), named by its key and created by talosprov.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPciMapping {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// The device's PCI address on its Proxmox host, `domain:bus:device`:
    /// `0000:01:00` for all its functions, or `0000:01:00.0` for one. Required.
    pub path: Option<Spanned<String>>,
    /// The device's PCI vendor and device IDs in hex, `vendor:device` such as
    /// `10de:2507` (as `lspci -n` prints them). Required.
    pub id: Option<Spanned<String>>,
    /// The device's IOMMU group number on its Proxmox host (its folder under
    /// `/sys/kernel/iommu_groups`), which Proxmox checks when the VM starts.
    /// Required.
    #[schemars(range(max = 4_294_967_295u64))]
    pub iommu_group: Option<Spanned<u64>>,
    /// The device's subsystem vendor and device IDs in hex, `vendor:device` such
    /// as `10de:2507`, which Proxmox checks when the VM starts. Required.
    pub subsystem_id: Option<Spanned<String>>,
    /// Free text kept as the Proxmox mapping's description, such as the card's
    /// model.
    pub comment: Option<Spanned<String>>,
    /// The Proxmox host (PVE node name) the device is in. Default
    /// `proxmox.node`; a node that uses the mapping must run on this host.
    pub node: Option<Spanned<String>>,
    /// One device per Proxmox host under this one mapping name, as Proxmox's
    /// mapping holds them: nodes and pool members on any of these hosts can
    /// use the mapping, one VM per host's device. Give `node`, `path` and
    /// `iommu_group` here, per host, instead of at the mapping's level; `id` and
    /// `subsystem_id` at the mapping's level are every entry's default.
    pub map: Option<Spanned<Vec<Spanned<RawPciHost>>>>,
}

/// One host's device of a PCI mapping (`pci_mappings.<name>.map[]`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawPciHost {
    /// The Proxmox host (PVE node name) the device is in. Required, once per
    /// mapping.
    pub node: Option<Spanned<String>>,
    /// The device's PCI address on that host, such as `0000:01:00`. Required.
    pub path: Option<Spanned<String>>,
    /// Vendor and device IDs, `vendor:device`. Default: the mapping's `id`.
    pub id: Option<Spanned<String>>,
    /// Subsystem vendor and device IDs. Default: the mapping's `subsystem_id`.
    pub subsystem_id: Option<Spanned<String>>,
    /// The device's IOMMU group on that host. Required.
    #[schemars(range(max = 4_294_967_295u64))]
    pub iommu_group: Option<Spanned<u64>>,
}

/// One Talos node: a Proxmox VM with a static IPv4 address.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNode {
    /// The node's name, unique: a lowercase RFC 1123 label (a-z, 0-9 and '-', at
    /// most 63 characters). Required; it is the VM's name and the Talos and
    /// Kubernetes node name.
    pub hostname: Option<Spanned<String>>,
    /// The node's static IPv4 address, given through cloud-init: unique, inside
    /// the cluster network (`gateway`/`prefix_length`), not its network or
    /// broadcast address and not the VIP. Required.
    pub ip: Option<Spanned<String>>,
    /// `controlplane` (etcd and the Kubernetes control plane) or `worker`. The
    /// default is `controlplane`, so give every worker `role: worker`.
    #[schemars(with = "Option<talosprov_base::role::Role>", extend("default" = "controlplane"))]
    pub role: Option<Spanned<String>>,
    /// The number of vCPU cores, the Proxmox VM's `cores` (one socket, CPU type
    /// `host`), 1 to 1024. Required.
    #[schemars(range(min = 1, max = 1024))]
    pub cores: Option<Spanned<u64>>,
    /// The VM's memory in MiB, such as 4096: the Proxmox VM's `memory` (no
    /// ballooning). Required; at least Talos's minimum: 2048 for a control
    /// plane, 1024 for a worker.
    #[schemars(range(min = 1024, max = 4_294_967_295u64))]
    pub memory: Option<Spanned<u64>>,
    /// The size of the VM's system disk (`scsi0`) in GiB, at least Talos's
    /// minimum of 10.
    #[schemars(range(min = 10, max = 4_294_967_295u64), extend("default" = 40))]
    pub disk_size: Option<Spanned<u64>>,
    /// The Proxmox VM ID (vmid), 100 to 999999999, unique. Default: the last
    /// octet of `ip` (192.168.1.121 gives 121); set it when that is below 100 or
    /// another node has it.
    #[schemars(range(min = 100, max = 999_999_999))]
    pub vm_id: Option<Spanned<u64>>,
    /// The Proxmox host (PVE node name) this VM runs on. Default `proxmox.node`.
    pub proxmox_node: Option<Spanned<String>>,
    /// The name of the `schematics` entry this node's Talos image is built from.
    /// Default `default_schematic`, else the factory's plain Talos image.
    pub schematic: Option<Spanned<String>>,
    /// PCI devices passed through to the VM: each a Proxmox `hostpciN` slot with
    /// a `pci_mappings` name as its `mapping`. A mapping goes to one VM only, on
    /// the mapping's host.
    pub hostpci: Option<Spanned<Vec<Spanned<RawHostPci>>>>,
    /// Proxmox tags on the VM: letters, digits, '_', '-', '+' and '.', not
    /// starting with '-', '+' or '.'. Proxmox keeps them lowercased and sorted.
    pub tags: Option<Spanned<Vec<Spanned<String>>>>,
    /// The VM's NICs, `net0` first: `net0` carries the node's IP (its bridge
    /// replaces `proxmox.bridge`), each becomes `netN` (virtio), and the node's
    /// machine config selects each by its MAC address. Default
    /// `proxmox.networks`, else one NIC on `proxmox.bridge`.
    pub networks: Option<Spanned<Vec<Spanned<RawNetwork>>>>,
    /// Data disks beside the system disk, `scsi1` and up in order: each a new
    /// volume, given to Talos by its serial and mounted where `mount` says.
    /// Default `proxmox.disks`, else none.
    pub disks: Option<Spanned<Vec<Spanned<RawDisk>>>>,
    /// Make the VM a Proxmox HA resource (`/cluster/ha/resources`, `vm:<vmid>`).
    /// Default `proxmox.ha`, else none (a VM in a `proxmox.spread` group is one
    /// with Proxmox's defaults).
    pub ha: Option<Spanned<RawHa>>,
}

/// A VM's Proxmox HA resource (`/cluster/ha/resources`): the HA manager
/// keeps it in `state` and restarts or moves it when its host fails.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHa {
    /// The state the HA manager keeps the VM in: `started`, `stopped`,
    /// `disabled` or `ignored` (Proxmox's `state`).
    #[schemars(extend("default" = "started", "enum" = ["started", "stopped", "disabled", "ignored"]))]
    pub state: Option<Spanned<String>>,
    /// How many times the HA manager restarts the VM on its host before it
    /// moves it (Proxmox's `max_restart`).
    #[schemars(extend("default" = 1), range(max = 4_294_967_295u64))]
    pub max_restart: Option<Spanned<u64>>,
    /// How many times the HA manager moves the VM to another host after a
    /// failed start (Proxmox's `max_relocate`).
    #[schemars(extend("default" = 1), range(max = 4_294_967_295u64))]
    pub max_relocate: Option<Spanned<u64>>,
}

/// One NIC of a VM, Proxmox's `netN` (virtio).
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawNetwork {
    /// The Proxmox bridge, such as `vmbr0`: 1 to 15 letters, digits, '-', '_'
    /// and '.' (a Linux interface name); it must exist on the VM's host
    /// (checked at plan time). Default `proxmox.bridge`.
    #[schemars(length(min = 1, max = 15), regex(pattern = r"^[-_.A-Za-z0-9]+$"))]
    pub bridge: Option<Spanned<String>>,
    /// The VLAN tag, 1 to 4094 (Proxmox's `tag`): the bridge tags the NIC's
    /// traffic, and the node sees an untagged link. Default: untagged.
    #[schemars(range(min = 1, max = 4094))]
    pub vlan: Option<Spanned<u64>>,
    /// The MTU, 576 to 65520 (Proxmox's `mtu`), set on the VM's NIC and on
    /// the node's link. Default: the bridge's.
    #[schemars(range(min = 576, max = 65520))]
    pub mtu: Option<Spanned<u64>>,
    /// The MAC address, six hex pairs joined by ':', unicast. Default: one
    /// talosprov derives from the cluster, the hostname and the NIC's index
    /// (locally administered, stable for the node's life). Unique.
    pub mac: Option<Spanned<String>>,
    /// Filter the NIC through the Proxmox firewall (Proxmox's `firewall`).
    #[schemars(extend("default" = false))]
    pub firewall: Option<Spanned<bool>>,
}

/// One data disk of a VM, Proxmox's `scsiN` (N from 1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawDisk {
    /// The size in GiB, 1 or more. Required; it grows in place and never
    /// shrinks.
    #[schemars(range(min = 1, max = 4_294_967_295u64))]
    pub size: Option<Spanned<u64>>,
    /// The Proxmox storage ID the volume is allocated on. Default
    /// `proxmox.datastore`.
    pub datastore: Option<Spanned<String>>,
    /// Show the disk to the node as an SSD (Proxmox's `ssd`).
    #[schemars(extend("default" = true))]
    pub ssd: Option<Spanned<bool>>,
    /// Give the disk its own I/O thread (Proxmox's `iothread`).
    #[schemars(extend("default" = true))]
    pub iothread: Option<Spanned<bool>>,
    /// Pass the node's TRIM on to the storage (Proxmox's `discard=on`).
    #[schemars(extend("default" = true))]
    pub discard: Option<Spanned<bool>>,
    /// Proxmox's `cache`: `none`, `writethrough`, `writeback`, `directsync`
    /// or `unsafe`. Default `none`.
    #[schemars(extend("enum" = ["none", "writethrough", "writeback", "directsync", "unsafe"]))]
    pub cache: Option<Spanned<String>>,
    /// Where Talos mounts the disk: `/var/mnt/<name>`, `<name>` a Talos
    /// user volume name (letters, digits and '-', at most 34 characters); the
    /// machine config gets a `UserVolumeConfig` of that name that takes the
    /// whole disk (XFS). Default: none, and the disk stays raw (for Rook Ceph,
    /// say).
    pub mount: Option<Spanned<String>>,
}

/// One PCI device passed through to a VM: a Proxmox `hostpciN` slot given a
/// `pci_mappings` entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHostPci {
    /// The VM's PCI slot, Proxmox's `hostpciN`: `hostpci0` to `hostpci15`, each
    /// once per node. Required.
    pub device: Option<Spanned<String>>,
    /// The name of the `pci_mappings` entry to pass through, set as the slot's
    /// Proxmox `mapping`. Required.
    pub mapping: Option<Spanned<String>>,
    /// Attach the device as PCI Express (Proxmox's `pcie`).
    #[schemars(extend("default" = true))]
    pub pcie: Option<Spanned<bool>>,
    /// Make the device's option ROM visible to the VM (Proxmox's `rombar`).
    #[schemars(extend("default" = true))]
    pub rombar: Option<Spanned<bool>>,
    /// Make the device the VM's primary graphics card (Proxmox's `x-vga`).
    #[schemars(extend("default" = false))]
    pub xvga: Option<Spanned<bool>>,
}

/// Where talosprov keeps its state: a local file, or an OpenTofu-style HTTP
/// backend.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawState {
    /// `local` for a state file, or `http` for an OpenTofu-style HTTP backend
    /// such as GitLab's managed Terraform state.
    #[schemars(extend("enum" = ["local", "http", null], "default" = "local"))]
    pub backend: Option<Spanned<String>>,
    /// The local state file, relative to this file's folder; `local` backend
    /// only. Default: `talosprov.tfstate` beside this file.
    pub path: Option<Spanned<String>>,
    /// The HTTP backend's state URL, `http://` or `https://` (GitLab:
    /// `<api>/projects/<id>/terraform/state/<name>`); `http` backend only.
    /// Default: the `TF_HTTP_ADDRESS` environment variable.
    pub address: Option<Spanned<String>>,
    /// The URL that locks the state (GitLab: `address` plus `/lock`); `http`
    /// backend only. Default: `TF_HTTP_LOCK_ADDRESS`; with neither, runs take
    /// no lock.
    pub lock_address: Option<Spanned<String>>,
    /// The URL that releases the lock; `http` backend only. Default:
    /// `TF_HTTP_UNLOCK_ADDRESS`, else `lock_address`.
    pub unlock_address: Option<Spanned<String>>,
    /// The HTTP method of the lock request, in capitals (GitLab: `POST`);
    /// `http` backend only. Default: `TF_HTTP_LOCK_METHOD`, else `LOCK`.
    #[schemars(extend("default" = "LOCK"))]
    pub lock_method: Option<Spanned<String>>,
    /// The HTTP method of the unlock request, in capitals (GitLab: `DELETE`);
    /// `http` backend only. Default: `TF_HTTP_UNLOCK_METHOD`, else `UNLOCK`.
    #[schemars(extend("default" = "UNLOCK"))]
    pub unlock_method: Option<Spanned<String>>,
}

/// One Kubernetes add-on, named by its key, with exactly one source: `helm`,
/// `manifests` or `url`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawAddon {
    /// Where the entry starts.
    #[serde(skip)]
    pub pos: Pos,
    /// Talos's documented values and checks for a well-known add-on: `cilium`,
    /// `nvidia-gpu-operator` or `talos-ccm`. Optional; it also sets the default
    /// `namespace` and `phase`.
    #[schemars(with = "Option<talosprov_base::preset::Preset>")]
    pub preset: Option<Spanned<String>>,
    /// A Helm chart pinned to one version, rendered with `helm template` (Helm
    /// from `TALOSPROV_HELM`, else on `PATH`).
    pub helm: Option<Spanned<RawHelm>>,
    /// Manifest files or globs (wildcards in the file name only), relative to
    /// this file's folder: `.yaml` as written, `.yaml.j2` with minijinja,
    /// `.yaml.tftpl` with OpenTofu `templatefile` syntax.
    pub manifests: Option<Spanned<Vec<Spanned<String>>>>,
    /// One manifest file to download, `http://` or `https://` (at most 32 MiB),
    /// checked against `sha256`.
    pub url: Option<Spanned<String>>,
    /// The SHA-256 of the `url` download, 64 hex digits (quote it if it is all
    /// digits). Required with `url`: a download with another digest is refused.
    pub sha256: Option<Spanned<String>>,
    /// The Kubernetes namespace of namespaced objects that name none, a
    /// lowercase DNS label. Default: `kube-system` for `cilium` and `talos-ccm`,
    /// `gpu-operator` for `nvidia-gpu-operator`, else `default`.
    pub namespace: Option<Spanned<String>>,
    /// Labels of the add-on's Namespace object (made for a namespace other than
    /// `default` and `kube-system`), Kubernetes label keys and values such as
    /// `pod-security.kubernetes.io/enforce: privileged`.
    #[schemars(with = "Option<std::collections::BTreeMap<String, String>>")]
    pub namespace_labels: Option<Spanned<Vec<Label>>>,
    /// When it is installed: `bootstrap` (in the control planes' inline
    /// manifests, applied by Talos at bootstrap, as a CNI needs) or `cluster`
    /// (through the Kubernetes API). Default `cluster`; `bootstrap` for the
    /// `cilium` preset.
    #[schemars(with = "Option<talosprov_base::preset::spec::Phase>")]
    pub phase: Option<Spanned<String>>,
    /// Names of other add-ons whose objects are applied first. No cycles, and a
    /// `bootstrap` add-on may depend only on `bootstrap` ones.
    pub depends_on: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `namespace_labels` entry: its key and its value, each with its
/// position.
pub type Label = (Spanned<String>, Spanned<String>);

/// A Helm chart, always pinned to one version.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RawHelm {
    /// The chart repository, an `https://` (or `http://`) URL, or an
    /// `oci://<registry>/<path>` reference to the chart itself. Required.
    pub repo: Option<Spanned<String>>,
    /// The chart's name in the repository, such as `cilium`. Required, except
    /// with an `oci://` repo.
    pub chart: Option<Spanned<String>>,
    /// The one exact chart version to render, such as `1.19.6` or `v26.3.3`;
    /// ranges are refused. Required.
    pub version: Option<Spanned<String>>,
    /// Chart values, merged key by key over the preset's values and the
    /// `values_files` (`null` removes a key).
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub values: Option<Spanned<serde_json::Value>>,
    /// YAML values files relative to this file's folder, merged in order over
    /// the preset's values and before `values`.
    pub values_files: Option<Spanned<Vec<Spanned<String>>>>,
}
