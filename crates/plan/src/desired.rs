//! Desired resources (pure): the topology, each node's rendered machine config
//! and whether the image storage is shared give the images (one per schematic,
//! Talos version and storage, and per host on unshared storage), the pool, the
//! PCI mappings, the VMs (as `proxmox::VmSpec` values), the configs, the
//! bootstrap node and the kubeconfig.

use std::collections::BTreeMap;
use std::net::IpAddr;

use talosprov_base::role::Role;
use talosprov_base::schematic::Schematic;
use talosprov_base::sensitive::Sensitive;
use talosprov_base::vm;
use talosprov_base::vm::{HostPci, VmSpec};
use talosprov_statefile::format;
use talosprov_topology::model::{Node, ProxmoxSettings, SchematicSpec, Topology};

/// One node's final machine config, as the machine module renders it (the
/// fields of `machine::node::NodeConfig` that planning needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedConfig {
    /// The node's hostname.
    pub hostname: String,
    /// Image Factory schematic ID of the node's image (64 hex digits).
    pub schematic_id: String,
    /// `machine.install.image`, e.g. `factory.talos.dev/nocloud-installer/<id>:v1.13.8`.
    pub installer_image: String,
    /// Talos version, e.g. `v1.13.8`.
    pub talos_version: String,
    /// The exact bytes sent with ApplyConfiguration (holds secrets).
    pub yaml: Sensitive<String>,
    /// Hex SHA-256 of `yaml`.
    pub sha256: String,
}

/// A Talos image to have in Proxmox storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredImage {
    /// The state record it becomes (volid, node, storage, schematic, version).
    pub record: format::Image,
}

/// A VM to have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredVm {
    /// The node's role.
    pub role: Role,
    /// The create request's values.
    pub spec: VmSpec,
    /// The state record it becomes.
    pub record: format::Vm,
    /// Name part of its image's address (`image/<name>`).
    pub image: String,
}

/// A machine config to have applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredConfig {
    /// The node's role.
    pub role: Role,
    /// The node's address (Talos API on port 50000).
    pub ip: IpAddr,
    /// The state record it becomes (`secure_mode` true: applied and up).
    pub record: format::NodeConfig,
    /// The config text to send (holds secrets).
    pub yaml: Sensitive<String>,
}

/// Everything the topology asks for (`Default`: nothing, as for a destroy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Desired {
    /// Images keyed by address name.
    pub images: BTreeMap<String, DesiredImage>,
    /// The pool name, if the topology names one.
    pub pool: Option<String>,
    /// PCI mappings keyed by name, as state records.
    pub pci_mappings: BTreeMap<String, format::PciMapping>,
    /// VMs keyed by hostname.
    pub vms: BTreeMap<String, DesiredVm>,
    /// The `proxmox.spread` HA rules, keyed by entry (a role or a pool), for
    /// the entries with two VMs or more.
    pub ha_rules: BTreeMap<String, DesiredHaRule>,
    /// Configs keyed by hostname.
    pub configs: BTreeMap<String, DesiredConfig>,
    /// The control plane to bootstrap: the first in the topology.
    pub bootstrap_node: Option<String>,
    /// The Image Factory base URL (images are downloaded from it).
    pub factory_url: String,
    /// The add-ons' Kubernetes objects, by address: what server-side apply
    /// sends after the bootstrap.
    pub objects: BTreeMap<
        talosprov_statefile::address::ObjectAddress,
        talosprov_addon::object::DesiredObject,
    >,
}

impl Desired {
    /// Every address the topology asks for: its images, pool, PCI mappings,
    /// VMs and configs, the bootstrap and the kubeconfig (when there is a
    /// control plane to bootstrap) and the add-ons' objects; whether or not
    /// a change is planned at it.
    pub fn addresses(&self) -> Vec<talosprov_statefile::address::Address> {
        use talosprov_statefile::address::Address;
        let mut all: Vec<Address> = Vec::new();
        all.extend(self.images.keys().cloned().map(Address::Image));
        all.extend(self.pool.iter().cloned().map(Address::Pool));
        all.extend(self.pci_mappings.keys().cloned().map(Address::PciMapping));
        all.extend(self.vms.keys().cloned().map(Address::Vm));
        all.extend(self.ha_rules.keys().cloned().map(Address::HaRule));
        all.extend(self.configs.keys().cloned().map(Address::Config));
        if self.bootstrap_node.is_some() {
            all.extend([Address::Bootstrap, Address::Kubeconfig]);
        }
        all.extend(
            self.objects
                .keys()
                .map(|o| Address::Object(Box::new(o.clone()))),
        );
        all
    }
}

/// A `proxmox.spread` entry's HA rule: the record apply writes, and the
/// hostnames of its VMs (which it waits for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredHaRule {
    /// The rule as the state records it.
    pub record: format::HaRule,
    /// Its VMs' hostnames, in topology order.
    pub hosts: Vec<String>,
    /// Each VM's Proxmox host, by vmid: PVE 8's groups prefer it.
    pub placement: BTreeMap<u32, String>,
}

impl DesiredHaRule {
    /// The rule in PVE 8's form: the same, with one group per VM whose
    /// `nodes` is its host at priority 2, then the group's other hosts at 1
    /// (sorted), so each VM goes back to its own host while that host is up.
    pub fn with_groups(&self) -> format::HaRule {
        let hosts: std::collections::BTreeSet<&String> = self.placement.values().collect();
        let groups = self
            .placement
            .iter()
            .map(|(vmid, host)| {
                let others = hosts
                    .iter()
                    .filter(|h| **h != host)
                    .map(|h| format!("{h}:1"));
                let nodes: Vec<String> =
                    std::iter::once(format!("{host}:2")).chain(others).collect();
                (*vmid, nodes.join(","))
            })
            .collect();
        format::HaRule {
            groups,
            ..self.record.clone()
        }
    }
}

/// The Proxmox rule ID of a spread entry: `talosprov-<cluster>-<entry>`
/// (a `pve-configid`).
pub fn ha_rule_id(cluster: &str, entry: &str) -> String {
    format!("talosprov-{cluster}-{entry}")
}

/// The topology's spread rules (see [`Desired::ha_rules`]).
fn desired_ha_rules(topology: &Topology) -> BTreeMap<String, DesiredHaRule> {
    let cluster = &topology.cluster.name;
    topology
        .spread_groups()
        .into_iter()
        .filter(|(_, members)| members.len() >= 2)
        .map(|(entry, members)| {
            let mut vmids: Vec<u32> = members.iter().map(|n| n.vm_id.0).collect();
            vmids.sort_unstable();
            let record = format::HaRule {
                rule: ha_rule_id(cluster, entry),
                vmids,
                comment: Some(format!(
                    "talosprov: the {entry} VMs of cluster {cluster}, each on its own host"
                )),
                groups: BTreeMap::new(),
            };
            let hosts = members.iter().map(|n| n.hostname.clone()).collect();
            let placement = members
                .iter()
                .map(|n| (n.vm_id.0, n.proxmox_node.clone()))
                .collect();
            (
                entry.to_owned(),
                DesiredHaRule {
                    record,
                    hosts,
                    placement,
                },
            )
        })
        .collect()
}

/// Why the desired resources could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DesiredError {
    /// A node of the topology has no rendered config.
    #[error("node {hostname} has no rendered machine config")]
    MissingConfig {
        /// Hostname of the node with no rendered machine config.
        hostname: String,
    },
    /// A node names a schematic the topology does not define (validation
    /// normally catches this first).
    #[error("node {hostname} uses schematic {schematic}, which is not defined")]
    UnknownSchematic {
        /// Hostname of the node naming the schematic.
        hostname: String,
        /// The name the node gives, which `schematics` does not declare.
        schematic: String,
    },
}

/// The schematic ID a topology schematic stands for: computed as the Image
/// Factory does for extensions and kernel args, or the ID as given.
pub fn schematic_id(spec: Option<&SchematicSpec>) -> String {
    match spec {
        Some(SchematicSpec::Id(id)) => id.to_ascii_lowercase(),
        Some(SchematicSpec::Customization {
            extensions,
            kernel_args,
        }) => Schematic {
            extensions: extensions.clone(),
            kernel_args: kernel_args.clone(),
        }
        .id()
        .to_string(),
        None => Schematic::default().id().to_string(),
    }
}

/// The address name of an image: `<schematic8>-<version>`, with `-<host>`
/// when the storage is not shared (one download per host).
pub fn image_name(schematic_id: &str, talos_version: &str, host: Option<&str>) -> String {
    let short: String = schematic_id.chars().take(8).collect();
    match host {
        Some(h) => format!("{short}-{talos_version}-{h}"),
        None => format!("{short}-{talos_version}"),
    }
}

/// The state record of a VM made from `spec`: what talosprov compares with
/// Proxmox on every refresh.
pub fn vm_record(spec: &VmSpec) -> format::Vm {
    format::Vm {
        vmid: spec.vmid,
        node: spec.node.clone(),
        name: spec.name.clone(),
        cores: spec.cores,
        memory_mib: spec.memory_mib,
        disk_gib: spec.disk_gib,
        hostpci: spec
            .hostpci
            .iter()
            .map(|d| (d.key(), d.property_string()))
            .collect(),
        tags: spec.tags.clone(),
        net: spec
            .networks
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("net{i}"), n.property_string()))
            .collect(),
        disks: spec
            .disks
            .iter()
            .map(|d| (d.key(), d.record_string()))
            .collect(),
        agent: spec.agent,
        ha: spec.ha.clone(),
    }
}

/// Build the desired resources. `configs` holds one rendered config per node
/// (any order); `image_storage_shared` says whether one download serves every
/// host.
///
/// # Errors
/// Every [`DesiredError`] found.
pub fn desired(
    topology: &Topology,
    configs: &[RenderedConfig],
    image_storage_shared: bool,
) -> Result<Desired, Vec<DesiredError>> {
    let mut errors = Vec::new();
    let px = &topology.proxmox;
    let by_host: BTreeMap<&str, &RenderedConfig> =
        configs.iter().map(|c| (c.hostname.as_str(), c)).collect();
    // The shared-storage download runs on the first host by name, as
    // proxmox::storage::plan_downloads picks it.
    let first_host = topology
        .nodes
        .iter()
        .map(|n| n.proxmox_node.as_str())
        .min()
        .unwrap_or(px.node.as_str());

    let mut out = Desired {
        images: BTreeMap::new(),
        pool: px.pool.clone(),
        pci_mappings: desired_pci_mappings(topology),
        vms: BTreeMap::new(),
        ha_rules: desired_ha_rules(topology),
        configs: BTreeMap::new(),
        bootstrap_node: topology.controlplanes().next().map(|n| n.hostname.clone()),
        factory_url: topology.image_factory_url.clone(),
        objects: BTreeMap::new(),
    };

    for node in &topology.nodes {
        if let Some(name) = &node.schematic
            && !topology.schematics.contains_key(name)
        {
            errors.push(DesiredError::UnknownSchematic {
                hostname: node.hostname.clone(),
                schematic: name.clone(),
            });
            continue;
        }
        let Some(rendered) = by_host.get(node.hostname.as_str()) else {
            errors.push(DesiredError::MissingConfig {
                hostname: node.hostname.clone(),
            });
            continue;
        };
        let image_host = if image_storage_shared {
            None
        } else {
            Some(node.proxmox_node.as_str())
        };
        let image_name = image_name(&rendered.schematic_id, &rendered.talos_version, image_host);
        let image = desired_image(px, rendered, image_host.unwrap_or(first_host));
        let spec = vm_spec(topology, node, image.record.volid.clone());
        out.images.entry(image_name.clone()).or_insert(image);
        let record = vm_record(&spec);
        out.vms.insert(
            node.hostname.clone(),
            DesiredVm {
                role: node.role,
                spec,
                record,
                image: image_name,
            },
        );
        out.configs
            .insert(node.hostname.clone(), desired_config(node, rendered));
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The topology's PCI mappings as state records, keyed by name; a mapping
/// without a host is on `proxmox.node`.
fn desired_pci_mappings(topology: &Topology) -> BTreeMap<String, format::PciMapping> {
    let px = &topology.proxmox;
    topology
        .pci_mappings
        .iter()
        .map(|(name, m)| {
            let map = m
                .devices(&px.node)
                .into_iter()
                .map(|d| format::PciMapEntry {
                    node: d.node,
                    path: d.path,
                    id: d.id,
                    subsystem_id: Some(d.subsystem_id),
                    iommu_group: Some(d.iommu_group),
                })
                .collect();
            let record = format::PciMapping {
                description: m.comment.clone(),
                map,
            };
            (name.clone(), record)
        })
        .collect()
}

/// The disk image a node boots from, downloaded to `host`'s image storage.
/// The machine module picked the schematic and version the installer image
/// names; the disk image must be the same.
fn desired_image(px: &ProxmoxSettings, rendered: &RenderedConfig, host: &str) -> DesiredImage {
    let image = vm::Image {
        talos_version: rendered.talos_version.clone(),
        schematic: rendered.schematic_id.clone(),
    };
    DesiredImage {
        record: format::Image {
            volid: image.volid(&px.image_storage),
            node: host.to_owned(),
            storage: px.image_storage.clone(),
            schematic_id: rendered.schematic_id.clone(),
            talos_version: rendered.talos_version.clone(),
        },
    }
}

/// A node's VM create request, booting from `image_volid`; tags are
/// lowercased, sorted and deduplicated as Proxmox stores them.
fn vm_spec(topology: &Topology, node: &Node, image_volid: String) -> VmSpec {
    let px = &topology.proxmox;
    let hostpci: Vec<HostPci> = node
        .hostpci
        .iter()
        .map(|d| HostPci {
            index: d.index,
            mapping: d.mapping.clone(),
            pcie: d.pcie,
            rombar: d.rombar,
            x_vga: d.xvga,
        })
        .collect();
    let mut tags: Vec<String> = node.tags.iter().map(|t| t.to_ascii_lowercase()).collect();
    tags.sort();
    tags.dedup();
    VmSpec {
        vmid: node.vm_id.0,
        name: node.hostname.clone(),
        node: node.proxmox_node.clone(),
        cores: node.cores,
        memory_mib: u64::from(node.memory),
        disk_gib: u64::from(node.disk_size),
        datastore: px.datastore.clone(),
        image_volid,
        networks: vm_networks(px, node),
        disks: node
            .disks
            .iter()
            .map(|d| vm::DataDisk {
                index: d.index,
                size_gib: u64::from(d.size_gib),
                datastore: d.datastore.clone(),
                ssd: d.ssd,
                iothread: d.iothread,
                discard: d.discard,
                cache: d.cache.clone(),
            })
            .collect(),
        agent: topology.has_guest_agent(node),
        ip: IpAddr::V4(node.ip),
        prefix: topology.cluster.prefix_length,
        gateway: Some(IpAddr::V4(topology.cluster.gateway)),
        nameservers: topology.cluster.nameservers.clone(),
        pool: px.pool.clone(),
        tags,
        hostpci,
        ha: topology.ha_of(node).map(|h| vm::HaResource {
            state: h.state,
            max_restart: h.max_restart,
            max_relocate: h.max_relocate,
        }),
    }
}

/// A node's NICs: its `networks`, else one NIC on `proxmox.bridge` whose MAC
/// Proxmox picks.
fn vm_networks(px: &ProxmoxSettings, node: &Node) -> Vec<vm::Nic> {
    if node.networks.is_empty() {
        return vec![vm::Nic::on_bridge(&px.bridge)];
    }
    node.networks
        .iter()
        .map(|n| vm::Nic {
            bridge: n.bridge.clone(),
            tag: n.vlan,
            mtu: n.mtu,
            mac: n.mac.clone(),
            firewall: n.firewall,
        })
        .collect()
}

/// A node's machine config to apply, recorded as applied in secure mode.
fn desired_config(node: &Node, rendered: &RenderedConfig) -> DesiredConfig {
    DesiredConfig {
        role: node.role,
        ip: IpAddr::V4(node.ip),
        record: format::NodeConfig {
            config_sha256: rendered.sha256.clone(),
            talos_version: rendered.talos_version.clone(),
            installer_image: rendered.installer_image.clone(),
            secure_mode: true,
            staged: None,
            role: Some(node.role),
            running_sha256: None,
        },
        yaml: rendered.yaml.clone(),
    }
}
