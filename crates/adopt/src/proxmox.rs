//! What a state's bpg/proxmox resources say about the VMs, images and PCI
//! mappings (the provider's `proxmoxtf/resource/vm`, `download_file` and
//! `hardware_mapping_pci` schemas). The provider names each type twice:
//! `proxmox_virtual_environment_<kind>` and the shorter `proxmox_<kind>`;
//! both are read, except `proxmox_vm`, the provider's other VM resource
//! with its own schema, which is listed as left out.
//!
//! The VM resource is an SDKv2 one: its blocks (`cpu`, `memory`, `disk`,
//! `network_device`, `initialization`, ...) are lists in the state, of one
//! element for a single block.

use serde_json::Value;

use super::tfstate::{Instance, TfState};

/// A disk of a VM (`disk[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmDisk {
    /// `interface`: `scsi0`, `virtio0`, ...
    pub interface: String,
    /// `datastore_id`.
    pub datastore: Option<String>,
    /// `size`, GiB.
    pub size_gib: Option<u64>,
    /// `file_id` or `import_from`: the image it was made from (a volid).
    pub source: Option<String>,
}

/// A NIC (`network_device[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmNic {
    /// `bridge`.
    pub bridge: Option<String>,
    /// `vlan_id` (0 or unset: untagged).
    pub vlan: Option<u32>,
    /// `mac_address`.
    pub mac: Option<String>,
    /// `mtu`.
    pub mtu: Option<u32>,
}

/// A PCI device (`hostpci[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmPci {
    /// `device`: `hostpci0`, ...
    pub device: String,
    /// `mapping`: the resource mapping's name.
    pub mapping: Option<String>,
    /// `id`: a raw host address, when no mapping is used.
    pub id: Option<String>,
    /// `pcie`.
    pub pcie: bool,
    /// `rombar`.
    pub rombar: bool,
}

/// One VM of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateVm {
    /// Its address.
    pub address: String,
    /// `vm_id`.
    pub vmid: Option<u32>,
    /// `node_name`: its Proxmox node.
    pub node: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `tags`.
    pub tags: Vec<String>,
    /// `pool_id`.
    pub pool: Option<String>,
    /// `cpu.cores`.
    pub cores: Option<u32>,
    /// `memory.dedicated`, MiB.
    pub memory_mib: Option<u64>,
    /// `disk[]`, in state order.
    pub disks: Vec<VmDisk>,
    /// `efi_disk` is set.
    pub efi_disk: bool,
    /// `hostpci[]`.
    pub hostpci: Vec<VmPci>,
    /// `network_device[]`, in order (`net0` first).
    pub nics: Vec<VmNic>,
    /// `initialization.ip_config[].ipv4.address`, as written (`10.0.0.121/24`).
    pub addresses: Vec<String>,
    /// `initialization.ip_config[0].ipv4.gateway`.
    pub gateway: Option<String>,
    /// `initialization.dns.servers`.
    pub nameservers: Vec<String>,
}

/// A downloaded image (`download_file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateImage {
    /// Its address.
    pub address: String,
    /// `url`.
    pub url: String,
    /// `node_name`.
    pub node: Option<String>,
    /// `datastore_id`.
    pub storage: Option<String>,
    /// `file_name`.
    pub file_name: Option<String>,
    /// The schematic ID in an Image Factory URL
    /// (`/image/<schematic>/<version>/<file>`).
    pub schematic: Option<String>,
    /// The Talos version in that URL, e.g. `v1.13.8`.
    pub talos_version: Option<String>,
}

/// One host's entry of a PCI mapping (`map[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMapEntry {
    /// `node`.
    pub node: Option<String>,
    /// `path`, e.g. `0000:01:00.0`.
    pub path: Option<String>,
    /// `id`, `vendor:device`.
    pub id: Option<String>,
    /// `subsystem_id`.
    pub subsystem_id: Option<String>,
    /// `iommu_group`.
    pub iommu_group: Option<u32>,
    /// `comment`.
    pub comment: Option<String>,
}

/// A PCI mapping (`hardware_mapping_pci`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMapping {
    /// Its address.
    pub address: String,
    /// `name`.
    pub name: String,
    /// `comment`.
    pub comment: Option<String>,
    /// `map[]`, one entry per host.
    pub map: Vec<StateMapEntry>,
}

/// The Proxmox side of a state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxmoxSide {
    /// The VMs.
    pub vms: Vec<StateVm>,
    /// The images.
    pub images: Vec<StateImage>,
    /// The PCI mappings.
    pub mappings: Vec<StateMapping>,
    /// The resource pools (`pool`): `(address, pool_id, comment)`.
    pub pools: Vec<(String, String, Option<String>)>,
    /// bpg resources not read, with why: `(address, reason)`.
    pub left_out: Vec<(String, String)>,
}

/// `proxmox_virtual_environment_<kind>` or `proxmox_<kind>`: `<kind>`.
fn kind_of(i: &Instance) -> Option<(&str, bool)> {
    if let Some(k) = i.kind.strip_prefix("proxmox_virtual_environment_") {
        return Some((k, true));
    }
    i.kind.strip_prefix("proxmox_").map(|k| (k, false))
}

/// A block's object: the first element of an SDKv2 list block, or the
/// object itself (a framework nested attribute).
fn block(v: Option<&Value>) -> Option<&Value> {
    match v? {
        Value::Array(list) => list.first(),
        obj @ Value::Object(_) => Some(obj),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => None,
    }
}

/// A list block's objects (a single object counts as one).
fn blocks(v: Option<&Value>) -> Vec<&Value> {
    match v {
        Some(Value::Array(list)) => list.iter().filter(|e| e.is_object()).collect(),
        Some(obj @ Value::Object(_)) => vec![obj],
        Some(Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)) | None => {
            Vec::new()
        }
    }
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn number(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
    }
}

fn small(v: &Value, key: &str) -> Option<u32> {
    number(v, key).and_then(|n| u32::try_from(n).ok())
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Read the Proxmox side of `state`.
pub fn proxmox_side(state: &TfState) -> ProxmoxSide {
    let mut side = ProxmoxSide::default();
    for i in state
        .instances
        .iter()
        .filter(|i| i.provider_name() == "bpg/proxmox")
    {
        match kind_of(i) {
            Some(("vm", true)) => side.vms.push(vm(i)),
            Some(("vm", false)) => side.left_out.push((
                i.address.clone(),
                "proxmox_vm is the provider's other VM resource, whose schema adopt does not \
                 read: move it to proxmox_virtual_environment_vm, or declare the node by hand"
                    .into(),
            )),
            Some(("download_file", _)) => side.images.push(image(i)),
            Some(("hardware_mapping_pci", _)) => side.mappings.push(mapping(i)),
            Some(("pool", _)) => side.pools.push((
                i.address.clone(),
                string(&i.attributes, "pool_id").unwrap_or_default(),
                string(&i.attributes, "comment"),
            )),
            _ if i.mode == super::tfstate::Mode::Data => {}
            _ => side.left_out.push((
                i.address.clone(),
                format!("{} has no counterpart in a talosprov topology", i.kind),
            )),
        }
    }
    side
}

fn vm(i: &Instance) -> StateVm {
    let a = &i.attributes;
    let init = block(a.get("initialization"));
    let ip_configs = init.map(|v| blocks(v.get("ip_config"))).unwrap_or_default();
    let ipv4: Vec<&Value> = ip_configs
        .iter()
        .filter_map(|c| block(c.get("ipv4")))
        .collect();
    StateVm {
        address: i.address.clone(),
        vmid: small(a, "vm_id"),
        node: string(a, "node_name"),
        name: string(a, "name"),
        tags: strings(a.get("tags")),
        pool: string(a, "pool_id"),
        cores: block(a.get("cpu")).and_then(|c| small(c, "cores")),
        memory_mib: block(a.get("memory")).and_then(|m| number(m, "dedicated")),
        disks: blocks(a.get("disk"))
            .into_iter()
            .map(|d| VmDisk {
                interface: string(d, "interface").unwrap_or_default(),
                datastore: string(d, "datastore_id"),
                size_gib: number(d, "size"),
                source: string(d, "file_id").or_else(|| string(d, "import_from")),
            })
            .collect(),
        efi_disk: block(a.get("efi_disk")).is_some(),
        hostpci: blocks(a.get("hostpci"))
            .into_iter()
            .map(|p| VmPci {
                device: string(p, "device").unwrap_or_default(),
                mapping: string(p, "mapping"),
                id: string(p, "id"),
                pcie: p.get("pcie").and_then(Value::as_bool).unwrap_or(false),
                rombar: p.get("rombar").and_then(Value::as_bool).unwrap_or(true),
            })
            .collect(),
        nics: blocks(a.get("network_device"))
            .into_iter()
            .map(|n| VmNic {
                bridge: string(n, "bridge"),
                vlan: small(n, "vlan_id").filter(|v| *v != 0),
                mac: string(n, "mac_address"),
                mtu: small(n, "mtu").filter(|v| *v != 0),
            })
            .collect(),
        addresses: ipv4.iter().filter_map(|v| string(v, "address")).collect(),
        gateway: ipv4.first().and_then(|v| string(v, "gateway")),
        nameservers: init
            .and_then(|v| block(v.get("dns")))
            .map(|d| strings(d.get("servers")))
            .unwrap_or_default(),
    }
}

fn image(i: &Instance) -> StateImage {
    let a = &i.attributes;
    let url = string(a, "url").unwrap_or_default();
    let (schematic, talos_version) = factory_parts(&url);
    StateImage {
        address: i.address.clone(),
        node: string(a, "node_name"),
        storage: string(a, "datastore_id"),
        file_name: string(a, "file_name"),
        schematic,
        talos_version,
        url,
    }
}

/// The schematic and version of an Image Factory image URL:
/// `https://<factory>/image/<64 hex>/<vX.Y.Z>/<file>`.
fn factory_parts(url: &str) -> (Option<String>, Option<String>) {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let parts: Vec<&str> = path.split('/').collect();
    let Some(at) = parts.iter().position(|p| *p == "image") else {
        return (None, None);
    };
    let schematic = parts
        .get(at + 1)
        .filter(|s| s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()))
        .map(|s| (*s).to_owned());
    let version = parts
        .get(at + 2)
        .filter(|v| v.starts_with('v'))
        .map(|v| (*v).to_owned());
    (schematic, version)
}

fn mapping(i: &Instance) -> StateMapping {
    let a = &i.attributes;
    StateMapping {
        address: i.address.clone(),
        name: string(a, "name").unwrap_or_default(),
        comment: string(a, "comment"),
        map: blocks(a.get("map"))
            .into_iter()
            .map(|m| StateMapEntry {
                node: string(m, "node"),
                path: string(m, "path"),
                id: string(m, "id"),
                subsystem_id: string(m, "subsystem_id"),
                iommu_group: small(m, "iommu_group"),
                comment: string(m, "comment"),
            })
            .collect(),
    }
}

impl ProxmoxSide {
    /// The VM of the node the Talos API reaches at `node` (an IP or a name):
    /// the one whose cloud-init address is that IP, else the one named
    /// `hostname` (or `node`). `None` when no VM matches, or when two do.
    pub fn vm_of(&self, node: &str, hostname: Option<&str>) -> Option<&StateVm> {
        let by_ip: Vec<&StateVm> = self
            .vms
            .iter()
            .filter(|v| {
                v.addresses
                    .iter()
                    .any(|a| a.split('/').next() == Some(node))
            })
            .collect();
        if let [one] = by_ip.as_slice() {
            return Some(one);
        }
        if by_ip.len() > 1 {
            return None;
        }
        let name = hostname.unwrap_or(node);
        let by_name: Vec<&StateVm> = self
            .vms
            .iter()
            .filter(|v| v.name.as_deref() == Some(name))
            .collect();
        match by_name.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}
