//! The topology file (`cluster.yaml`) of an adopted cluster, from what its
//! sources say: the cluster values from the Talos side and the configs the
//! nodes run, the Proxmox values from the VMs, and what neither holds from
//! adopt's settings. Everything talosprov cannot express goes to the report,
//! never away in silence.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde_yaml_ng::{Mapping, Value};

use super::proxmox::{ProxmoxSide, StateVm};
use super::talos::ClusterFacts;
use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;
use talosprov_patch::document::MachineConfig;

/// The values a source does not hold, given to `talosprov adopt`; each
/// `None` is read from the source, or left to talosprov's default.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `proxmox.endpoint` to write (else `PROXMOX_VE_ENDPOINT` serves).
    pub proxmox_endpoint: Option<String>,
    /// `proxmox.ca_file` to write.
    pub proxmox_ca_file: Option<String>,
    /// `proxmox.node`: the default host (else the VMs' most common one).
    pub proxmox_node: Option<String>,
    /// `proxmox.datastore` (else the system disks' datastore).
    pub datastore: Option<String>,
    /// `proxmox.image_storage` (else the images' datastore).
    pub image_storage: Option<String>,
    /// `proxmox.bridge` (else the first NICs' bridge).
    pub bridge: Option<String>,
    /// `cluster.talos_version`, as `vX.Y.Z` (else the state's, the images'
    /// or the nodes').
    pub talos_version: Option<String>,
    /// `image_factory.url` (else the images' factory).
    pub image_factory: Option<String>,
    /// The schematic ID of the nodes whose installer image and VM disk
    /// image name none (64 hex digits).
    pub schematic: Option<String>,
}

/// One node to adopt, as its sources give it.
#[derive(Debug, Clone)]
pub struct NodeSource {
    /// Where it comes from, for messages: the
    /// `talos_machine_configuration_apply` address, or `node <ip>`.
    pub source: String,
    /// How the Talos API reaches it (an IPv4 address or a name).
    pub node: String,
    /// The machine config it runs, as text (the bytes Talos holds).
    pub running: Sensitive<String>,
    /// The config the patches applied to, when the source kept it.
    pub input: Option<Sensitive<String>>,
    /// The patches applied to `input`, in order.
    pub patches: Vec<Sensitive<String>>,
}

/// A node of the adopted topology.
#[derive(Debug, Clone)]
pub struct AdoptedNode {
    /// Where it comes from (see [`NodeSource::source`]).
    pub source: String,
    /// Its hostname: the VM's name.
    pub hostname: String,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its role, from the config's `machine.type`.
    pub role: Role,
    /// Its VM.
    pub vm: StateVm,
    /// The config it runs, parsed.
    pub running: MachineConfig,
    /// Its text.
    pub running_text: Sensitive<String>,
    /// The input and patches of the source, when kept and readable.
    pub input: Option<MachineConfig>,
    /// The source's patches.
    pub patches: Vec<Sensitive<String>>,
    /// The schematic name in the topology.
    pub schematic: Option<String>,
}

/// Why a source cannot be adopted: each problem with its place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", problems.join("\n"))]
pub struct AdoptError {
    /// One line per problem, naming the source address and field.
    pub problems: Vec<String>,
}

fn v1alpha1(config: &MachineConfig) -> Option<&Mapping> {
    config
        .documents
        .iter()
        .filter_map(Value::as_mapping)
        .find(|d| !d.contains_key("kind"))
}

fn at<'v>(doc: &'v Mapping, path: &[&str]) -> Option<&'v Value> {
    let mut v = doc.get(path.first()?)?;
    for k in &path[1..] {
        v = v.get(*k)?;
    }
    Some(v)
}

fn text_at(config: &MachineConfig, path: &[&str]) -> Option<String> {
    v1alpha1(config)
        .and_then(|d| at(d, path))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The role of a config (`machine.type`: `init` is a control plane).
fn role_of(config: &MachineConfig) -> Option<Role> {
    match text_at(config, &["machine", "type"])?.as_str() {
        "controlplane" | "init" => Some(Role::Controlplane),
        "worker" => Some(Role::Worker),
        _ => None,
    }
}

/// The shared VIP of a control plane's config, if it has one.
fn vip_of(config: &MachineConfig) -> Option<String> {
    let interfaces = v1alpha1(config)
        .and_then(|d| at(d, &["machine", "network", "interfaces"]))
        .and_then(Value::as_sequence)?;
    interfaces.iter().find_map(|i| {
        i.get("vip")
            .and_then(|v| v.get("ip"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

/// The address of `node` as talosprov declares it: the Talos endpoint when
/// it is an IPv4 address, else the VM's first cloud-init address.
fn address_of(node: &str, vm: &StateVm) -> Option<Ipv4Addr> {
    node.parse().ok().or_else(|| {
        vm.addresses
            .first()
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
    })
}

/// Match each node with its VM, hostname, address and role.
///
/// # Errors
/// Every node that no VM matches, whose config cannot be read or has no
/// role, or whose address is not IPv4.
pub fn match_nodes(
    sources: Vec<NodeSource>,
    proxmox: &ProxmoxSide,
) -> Result<Vec<AdoptedNode>, AdoptError> {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for s in sources {
        let running = match MachineConfig::parse(s.running.expose()) {
            Ok(c) => c,
            Err(e) => {
                problems.push(format!(
                    "{}: the machine config does not parse: {e}",
                    s.source
                ));
                continue;
            }
        };
        let config_hostname = text_at(&running, &["machine", "network", "hostname"]);
        let Some(vm) = proxmox.vm_of(&s.node, config_hostname.as_deref()) else {
            let left_out: Vec<&str> = proxmox
                .left_out
                .iter()
                .filter(|(a, _)| a.contains("proxmox_vm."))
                .map(|(a, _)| a.as_str())
                .collect();
            let hint = if left_out.is_empty() {
                String::new()
            } else {
                format!(" (adopt does not read proxmox_vm: {})", left_out.join(", "))
            };
            problems.push(format!(
                "{}: node {} matches no VM of the state, by cloud-init address or by name \
                 ({}); adopt needs the node's VM{hint}",
                s.source,
                s.node,
                config_hostname
                    .as_deref()
                    .unwrap_or("no hostname in its config")
            ));
            continue;
        };
        let Some(role) = role_of(&running) else {
            problems.push(format!(
                "{}: the machine config has no machine.type of controlplane, init or worker",
                s.source
            ));
            continue;
        };
        let Some(ip) = address_of(&s.node, vm) else {
            problems.push(format!(
                "{}: node {} is not an IPv4 address, and its VM ({}) has no cloud-init IPv4 \
                 address",
                s.source, s.node, vm.address
            ));
            continue;
        };
        let Some(hostname) = vm.name.clone().or(config_hostname) else {
            problems.push(format!("{}: its VM {} has no name", s.source, vm.address));
            continue;
        };
        let input = s
            .input
            .as_ref()
            .and_then(|t| MachineConfig::parse(t.expose()).ok());
        out.push(AdoptedNode {
            source: s.source,
            hostname,
            ip,
            role,
            vm: vm.clone(),
            running,
            running_text: s.running,
            input,
            patches: s.patches,
            schematic: None,
        });
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(AdoptError { problems })
    }
}

/// The most common value, the first seen on a tie.
fn most_common<'a>(values: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for v in values {
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    counts
        .into_iter()
        .find(|(_, n)| *n == best)
        .map(|(v, _)| v.to_owned())
}

/// The schematic ID and factory host of an Image Factory installer image
/// (`<host>/[<platform>-]installer[-secureboot]/<64 hex>:<version>`).
fn installer_schematic(image: &str) -> Option<(String, String)> {
    let (host, rest) = image.split_once('/')?;
    let (repo, rest) = rest.split_once('/')?;
    let (id, _) = rest.split_once(':')?;
    (repo.contains("installer") && talosprov_topology::syntax::is_schematic_id(id))
        .then(|| (id.to_owned(), host.to_owned()))
}

/// What the topology writer needs besides the nodes.
pub struct Sides<'a> {
    /// The cluster's values from the Talos side.
    pub facts: &'a ClusterFacts,
    /// The Proxmox side.
    pub proxmox: &'a ProxmoxSide,
    /// Adopt's settings.
    pub settings: &'a Settings,
}

fn put(m: &mut Mapping, key: &str, value: impl Into<Value>) {
    m.insert(key.into(), value.into());
}

fn put_some(m: &mut Mapping, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        put(m, key, v);
    }
}

fn strings(list: &[String]) -> Value {
    Value::Sequence(list.iter().map(|s| Value::from(s.as_str())).collect())
}

/// A full `vX.Y.Z` version, or `None`.
fn full_version(v: &str) -> Option<String> {
    let v = if v.starts_with('v') {
        v.to_owned()
    } else {
        format!("v{v}")
    };
    (v[1..].split('.').count() == 3 && v[1..].split('.').all(|p| p.parse::<u32>().is_ok()))
        .then_some(v)
}

/// The `cluster:` section.
fn cluster(
    sides: &Sides<'_>,
    nodes: &[AdoptedNode],
    problems: &mut Vec<String>,
    report: &mut Vec<String>,
) -> Mapping {
    let facts = sides.facts;
    let first = nodes.first().map(|n| &n.running);
    let mut c = Mapping::new();
    let name = facts
        .name
        .clone()
        .or_else(|| first.and_then(|f| text_at(f, &["cluster", "clusterName"])));
    match name {
        Some(n) => put(&mut c, "name", n),
        None => problems.push("cluster name: neither the state nor the configs hold it".into()),
    }
    let talos = sides
        .settings
        .talos_version
        .clone()
        .or_else(|| facts.talos_version.as_deref().and_then(full_version))
        .or_else(|| {
            most_common(
                sides
                    .proxmox
                    .images
                    .iter()
                    .filter_map(|i| i.talos_version.as_deref()),
            )
        });
    match talos {
        Some(v) => put(&mut c, "talos_version", v),
        None => problems.push(
            "cluster.talos_version: the state holds no full Talos version (vX.Y.Z); give \
             --talos-version"
                .into(),
        ),
    }
    let kubernetes = facts.kubernetes_version.clone().or_else(|| {
        first
            .and_then(|f| text_at(f, &["machine", "kubelet", "image"]))
            .and_then(|i| i.rsplit_once(':').map(|(_, t)| t.to_owned()))
    });
    put_some(
        &mut c,
        "kubernetes_version",
        kubernetes.and_then(|k| full_version(&k)),
    );
    let vip = nodes
        .iter()
        .filter(|n| n.role == Role::Controlplane)
        .find_map(|n| vip_of(&n.running));
    let endpoint = facts
        .endpoint
        .clone()
        .or_else(|| first.and_then(|f| text_at(f, &["cluster", "controlPlane", "endpoint"])));
    put_some(&mut c, "vip", vip.clone());
    match (&endpoint, &vip) {
        (Some(e), Some(v)) if *e == format!("https://{v}:6443") => {}
        (Some(e), _) => put(&mut c, "endpoint", e.as_str()),
        (None, _) => {}
    }
    let vms: Vec<&StateVm> = nodes.iter().map(|n| &n.vm).collect();
    let gateway = most_common(vms.iter().filter_map(|v| v.gateway.as_deref()));
    let prefix = most_common(
        vms.iter()
            .filter_map(|v| v.addresses.first())
            .filter_map(|a| a.split_once('/').map(|(_, p)| p)),
    );
    match gateway {
        Some(g) => put(&mut c, "gateway", g),
        None => problems.push(
            "cluster.gateway: no VM has an initialization.ip_config gateway; adopt needs the \
             nodes' default route"
                .into(),
        ),
    }
    if let Some(p) = prefix.and_then(|p| p.parse::<u64>().ok()) {
        put(&mut c, "prefix_length", p);
    }
    if let Some(v) = vms.iter().find(|v| !v.nameservers.is_empty()) {
        put(&mut c, "nameservers", strings(&v.nameservers));
    }
    if let Some(d) = first.and_then(|f| text_at(f, &["machine", "install", "disk"])) {
        put(&mut c, "install_disk", d);
    }
    if !facts.conflicts.is_empty() {
        for (field, address, value) in &facts.conflicts {
            report.push(format!(
                "{address} sets {field} to {value:?}, unlike the first data source: the first \
                 one's is written"
            ));
        }
    }
    c
}

/// The `proxmox:` section.
fn proxmox(
    sides: &Sides<'_>,
    nodes: &[AdoptedNode],
    problems: &mut Vec<String>,
    report: &mut Vec<String>,
) -> Mapping {
    let s = sides.settings;
    let vms: Vec<&StateVm> = nodes.iter().map(|n| &n.vm).collect();
    let mut p = Mapping::new();
    put_some(&mut p, "endpoint", s.proxmox_endpoint.clone());
    let node = s
        .proxmox_node
        .clone()
        .or_else(|| most_common(vms.iter().filter_map(|v| v.node.as_deref())));
    match node {
        Some(n) => put(&mut p, "node", n),
        None => problems.push("proxmox.node: no VM has a node_name; give --proxmox-node".into()),
    }
    let datastore = s.datastore.clone().or_else(|| {
        most_common(
            vms.iter()
                .filter_map(|v| system_disk(v))
                .filter_map(|d| d.datastore.as_deref()),
        )
    });
    match datastore {
        Some(d) => put(&mut p, "datastore", d),
        None => problems.push("proxmox.datastore: no VM disk names one; give --datastore".into()),
    }
    let image_storage = s.image_storage.clone().or_else(|| {
        most_common(
            sides
                .proxmox
                .images
                .iter()
                .filter_map(|i| i.storage.as_deref()),
        )
    });
    put_some(&mut p, "image_storage", image_storage);
    let bridge = s.bridge.clone().or_else(|| {
        most_common(
            vms.iter()
                .filter_map(|v| v.nics.first())
                .filter_map(|n| n.bridge.as_deref()),
        )
    });
    put_some(&mut p, "bridge", bridge);
    let pools: Vec<&str> = vms.iter().filter_map(|v| v.pool.as_deref()).collect();
    let managed = |id: &str| sides.proxmox.pools.iter().any(|(_, p, _)| p == id);
    match pools.first() {
        Some(first)
            if pools.len() == vms.len() && pools.iter().all(|x| x == first) && managed(first) =>
        {
            put(&mut p, "pool", *first);
        }
        Some(first) => report.push(format!(
            "the VMs are in Proxmox pool {first}{}, which the state does not manage as one \
             pool of every VM: proxmox.pool is left out (to manage it, add `pool: {first}` \
             and run `talosprov import pool/{first} {first}`)",
            if pools.len() == vms.len() {
                ""
            } else {
                " (some of them)"
            }
        )),
        None => {}
    }
    put_some(&mut p, "ca_file", s.proxmox_ca_file.clone());
    p
}

/// A VM's system disk: the one made from an image, else `scsi0`.
pub(crate) fn system_disk(vm: &StateVm) -> Option<&super::proxmox::VmDisk> {
    vm.disks
        .iter()
        .find(|d| d.source.is_some())
        .or_else(|| vm.disks.iter().find(|d| d.interface == "scsi0"))
}

/// The schematic of each node (by its installer image, else its VM's
/// image), as `schematics:` entries named `s<first 8 digits>`; the
/// factory URL seen.
fn schematics(
    sides: &Sides<'_>,
    nodes: &mut [AdoptedNode],
    report: &mut Vec<String>,
) -> (Mapping, Option<String>, Option<String>) {
    let mut by_id: BTreeMap<String, String> = BTreeMap::new();
    let mut factory = None;
    for n in nodes.iter_mut() {
        let image = text_at(&n.running, &["machine", "install", "image"]);
        let from_installer = image.as_deref().and_then(installer_schematic);
        let from_disk = system_disk(&n.vm)
            .and_then(|d| d.source.as_deref())
            .and_then(|volid| {
                sides.proxmox.images.iter().find(|i| {
                    i.file_name
                        .as_deref()
                        .is_some_and(|f| volid.ends_with(&format!("/{f}")))
                })
            })
            .and_then(|i| i.schematic.clone());
        let id = match (from_installer, from_disk) {
            (Some((id, host)), _) => {
                factory.get_or_insert(format!("https://{host}"));
                Some(id)
            }
            (None, Some(id)) => Some(id),
            (None, None) if sides.settings.schematic.is_some() => sides
                .settings
                .schematic
                .clone()
                .filter(|id| talosprov_topology::syntax::is_schematic_id(id)),
            (None, None) => {
                report.push(format!(
                    "{}: its installer image ({}) names no Image Factory schematic, nor does \
                     its VM's disk image: the node gets the default schematic (no \
                     extensions, so no QEMU guest agent), and the installer image stays in its \
                     patch; give --schematic ID when you know the one it runs",
                    n.hostname,
                    image.as_deref().unwrap_or("none")
                ));
                None
            }
        };
        if let Some(id) = id {
            let name = format!("s{}", id.get(..8).unwrap_or(&id));
            by_id.insert(id, name.clone());
            n.schematic = Some(name);
        }
    }
    let mut out = Mapping::new();
    for (id, name) in &by_id {
        let mut entry = Mapping::new();
        put(&mut entry, "id", id.as_str());
        out.insert(name.as_str().into(), Value::Mapping(entry));
    }
    let default = most_common(nodes.iter().filter_map(|n| n.schematic.as_deref()));
    (out, default, factory)
}

/// The `pci_mappings:` section, from the state's mappings the nodes use.
fn pci_mappings(sides: &Sides<'_>, nodes: &[AdoptedNode], report: &mut Vec<String>) -> Mapping {
    let used: Vec<&str> = nodes
        .iter()
        .flat_map(|n| n.vm.hostpci.iter().filter_map(|p| p.mapping.as_deref()))
        .collect();
    let mut out = Mapping::new();
    for m in &sides.proxmox.mappings {
        if !used.contains(&m.name.as_str()) {
            report.push(format!(
                "{}: PCI mapping {} is used by no adopted node: left out",
                m.address, m.name
            ));
            continue;
        }
        let mut hosts = Vec::new();
        for e in &m.map {
            let mut h = Mapping::new();
            put_some(&mut h, "node", e.node.clone());
            put_some(&mut h, "path", e.path.clone());
            put_some(&mut h, "id", e.id.clone());
            put_some(&mut h, "subsystem_id", e.subsystem_id.clone());
            put_some(&mut h, "iommu_group", e.iommu_group.map(u64::from));
            hosts.push(Value::Mapping(h));
        }
        let mut entry = Mapping::new();
        if let [Value::Mapping(one)] = hosts.as_slice() {
            entry = one.clone();
        } else {
            put(&mut entry, "map", Value::Sequence(hosts));
        }
        put_some(&mut entry, "comment", m.comment.clone());
        out.insert(m.name.as_str().into(), Value::Mapping(entry));
    }
    out
}

/// One `nodes:` entry.
fn node_entry(n: &AdoptedNode, proxmox: &Mapping, default_schematic: Option<&str>) -> Mapping {
    let vm = &n.vm;
    let mut e = Mapping::new();
    put(&mut e, "hostname", n.hostname.as_str());
    put(&mut e, "ip", n.ip.to_string());
    put(&mut e, "role", n.role.as_str());
    put_some(&mut e, "cores", vm.cores.map(u64::from));
    put_some(&mut e, "memory", vm.memory_mib);
    put_some(
        &mut e,
        "disk_size",
        system_disk(vm).and_then(|d| d.size_gib),
    );
    put_some(&mut e, "vm_id", vm.vmid.map(u64::from));
    if vm.node.as_deref() != proxmox.get("node").and_then(Value::as_str) {
        put_some(&mut e, "proxmox_node", vm.node.clone());
    }
    if n.schematic.as_deref() != default_schematic {
        put_some(&mut e, "schematic", n.schematic.clone());
    }
    if !vm.hostpci.is_empty() {
        let list = vm
            .hostpci
            .iter()
            .filter_map(|p| {
                let mut h = Mapping::new();
                put(&mut h, "device", p.device.as_str());
                put(&mut h, "mapping", p.mapping.clone()?);
                if p.pcie {
                    put(&mut h, "pcie", true);
                }
                if !p.rombar {
                    put(&mut h, "rombar", false);
                }
                Some(Value::Mapping(h))
            })
            .collect();
        put(&mut e, "hostpci", Value::Sequence(list));
    }
    if !vm.tags.is_empty() {
        put(&mut e, "tags", strings(&vm.tags));
    }
    let bridge = proxmox.get("bridge").and_then(Value::as_str);
    let plain = vm.nics.len() <= 1
        && vm.nics.first().is_none_or(|nic| {
            nic.vlan.is_none() && nic.mtu.is_none() && nic.bridge.as_deref() == bridge
        });
    if !plain {
        let list = vm
            .nics
            .iter()
            .map(|nic| {
                let mut m = Mapping::new();
                put_some(&mut m, "bridge", nic.bridge.clone());
                put_some(&mut m, "vlan", nic.vlan.map(u64::from));
                put_some(&mut m, "mtu", nic.mtu.map(u64::from));
                Value::Mapping(m)
            })
            .collect();
        put(&mut e, "networks", Value::Sequence(list));
    }
    e
}

/// What the adopted topology is: its text and the nodes with their
/// schematic names, and the report lines it adds.
pub struct Written {
    /// `cluster.yaml`.
    pub text: String,
    /// The nodes, their `schematic` set.
    pub nodes: Vec<AdoptedNode>,
    /// The factory URL written.
    pub factory: String,
}

/// Write the topology of `nodes`.
///
/// # Errors
/// Every value the topology needs that neither the sources nor the
/// settings hold.
pub fn write(
    sides: &Sides<'_>,
    mut nodes: Vec<AdoptedNode>,
    report: &mut Vec<String>,
) -> Result<Written, AdoptError> {
    let mut problems = Vec::new();
    if let Some(id) = &sides.settings.schematic
        && !talosprov_topology::syntax::is_schematic_id(id)
    {
        problems.push(format!(
            "--schematic {id:?} is not an Image Factory schematic ID (64 hex digits)"
        ));
    }
    let cluster = cluster(sides, &nodes, &mut problems, report);
    let proxmox = proxmox(sides, &nodes, &mut problems, report);
    let (schematics, default, seen_factory) = schematics(sides, &mut nodes, report);
    let factory = sides
        .settings
        .image_factory
        .clone()
        .or(seen_factory)
        .or_else(|| {
            sides.proxmox.images.iter().find_map(|i| {
                let rest = i.url.split_once("://")?.1;
                let host = rest.split('/').next()?;
                Some(format!("https://{host}"))
            })
        })
        .unwrap_or_else(|| "https://factory.talos.dev".to_owned());
    let pci = pci_mappings(sides, &nodes, report);
    if !problems.is_empty() {
        return Err(AdoptError { problems });
    }
    for n in &nodes {
        if n.vm.hostpci.iter().any(|p| p.mapping.is_none()) {
            report.push(format!(
                "{}: a hostpci device by raw host address (no mapping) cannot be declared: \
                 the plan shows it removed; make a PCI mapping for it",
                n.vm.address
            ));
        }
        for d in n.vm.disks.iter().filter(|d| Some(*d) != system_disk(&n.vm)) {
            report.push(format!(
                "{}: disk {} is not declared (talosprov's data disks carry a serial and \
                 options of their own): the plan shows it",
                n.vm.address, d.interface
            ));
        }
    }
    let mut top = Mapping::new();
    put(&mut top, "cluster", Value::Mapping(cluster));
    let mut px = proxmox;
    let entries: Vec<Value> = nodes
        .iter()
        .map(|n| Value::Mapping(node_entry(n, &px, default.as_deref())))
        .collect();
    if px.get("bridge").is_none() {
        put(&mut px, "bridge", "vmbr0");
    }
    put(&mut top, "proxmox", Value::Mapping(px));
    let mut f = Mapping::new();
    put(&mut f, "url", factory.as_str());
    put(&mut top, "image_factory", Value::Mapping(f));
    if !schematics.is_empty() {
        put(&mut top, "schematics", Value::Mapping(schematics));
    }
    put_some(&mut top, "default_schematic", default);
    if !pci.is_empty() {
        put(&mut top, "pci_mappings", Value::Mapping(pci));
    }
    put(&mut top, "nodes", Value::Sequence(entries));
    put(&mut top, "patches_dir", "patches");
    let body = talosprov_base::yaml::to_string(
        &Value::Mapping(top),
        talosprov_base::yaml::Flavour::Marshal,
    );
    let text = format!(
        "# Adopted by talosprov adopt: the cluster as its sources describe it.\n\
         # The machine configs' differences from talosprov's own base config are in\n\
         # patches/; the secrets are in the state only.\n{body}"
    );
    Ok(Written {
        text,
        nodes,
        factory,
    })
}
