//! The VMs and images talosprov wants on Proxmox, as plain values built from the
//! topology: what a plan records and the Proxmox client sends (qemu-server
//! `API2/Qemu.pm` parameters, pve-storage volume names). Pure: no I/O.

use std::net::IpAddr;

/// A VM as talosprov wants it; plain values the caller builds from the topology.
/// Serialized in plans (JSON) with these field names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSpec {
    /// The vmid (100..999999999).
    pub vmid: u32,
    /// The VM name, which is the Talos node's hostname (a DNS name).
    pub name: String,
    /// The Proxmox node it runs on.
    pub node: String,
    /// CPU cores (one socket).
    pub cores: u32,
    /// Memory in MiB; ballooning is off.
    pub memory_mib: u64,
    /// Size of the system disk `scsi0` in GiB (Proxmox's `G`).
    pub disk_gib: u64,
    /// Storage for the system disk, the EFI disk and the cloud-init drive.
    pub datastore: String,
    /// The image volume to import: `<storage>:import/<file>`.
    pub image_volid: String,
    /// The bridge of `net0`, e.g. `vmbr0`.
    pub bridge: String,
    /// The node's address.
    pub ip: IpAddr,
    /// Its prefix length, e.g. 24.
    pub prefix: u8,
    /// The default gateway.
    pub gateway: Option<IpAddr>,
    /// DNS servers for cloud-init.
    pub nameservers: Vec<IpAddr>,
    /// The pool the VM joins.
    pub pool: Option<String>,
    /// Tags (PVE stores them lower-cased and sorted).
    pub tags: Vec<String>,
    /// PCI devices through hardware mappings.
    pub hostpci: Vec<HostPci>,
}

/// One `hostpciN` device through a PCI hardware mapping (raw host IDs need root@pam).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostPci {
    /// N in `hostpciN` (0..15).
    pub index: u8,
    /// The mapping ID.
    pub mapping: String,
    /// `true` sends `pcie=1` (PCI Express; needs q35, which talosprov always
    /// sets); `false` leaves it out, PVE's default (conventional PCI).
    pub pcie: bool,
    /// `false` sends `rombar=0` (PVE's default is on).
    pub rombar: bool,
    /// `true` sends `x-vga=1` (primary GPU).
    pub x_vga: bool,
}

impl HostPci {
    /// The config key, `hostpci<N>`.
    pub fn key(&self) -> String {
        format!("hostpci{}", self.index)
    }

    /// `mapping=<name>[,pcie=1][,rombar=0][,x-vga=1]`: each option only when
    /// it differs from PVE's default (`pcie=0`, `rombar=1`, `x-vga=0`).
    pub fn property_string(&self) -> String {
        let mut s = format!("mapping={}", self.mapping);
        if self.pcie {
            s.push_str(",pcie=1");
        }
        if !self.rombar {
            s.push_str(",rombar=0");
        }
        if self.x_vga {
            s.push_str(",x-vga=1");
        }
        s
    }
}

/// A `hostpciN` property string as key-value pairs with PVE's defaults filled
/// in and booleans as `0`/`1`, so that two spellings of the same device compare
/// equal (`mapping=gpu` and `mapping=gpu,pcie=0,rombar=1`). Pure; follows the
/// `pve-qm-hostpci` format of qemu-server `QemuServer/PCI.pm`.
pub fn hostpci_settings(property: &str) -> std::collections::BTreeMap<String, String> {
    let mut out: std::collections::BTreeMap<String, String> = [
        ("pcie", "0"),
        ("rombar", "1"),
        ("x-vga", "0"),
        ("legacy-igd", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for part in property.split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = part.split_once('=').unwrap_or(("host", part));
        let key = key.trim().to_owned();
        let value = value.trim();
        let value = if out.contains_key(&key) {
            match value.to_ascii_lowercase().as_str() {
                "1" | "yes" | "on" | "true" => "1".to_owned(),
                "0" | "no" | "off" | "false" => "0".to_owned(),
                other => other.to_owned(),
            }
        } else {
            value.to_owned()
        };
        out.insert(key, value);
    }
    out
}

/// Whether two `hostpciN` values describe the same device with the same
/// options (see [`hostpci_settings`]); `None` is no device.
pub fn hostpci_equivalent(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => hostpci_settings(a) == hostpci_settings(b),
        (None, None) => true,
        _ => false,
    }
}

impl VmSpec {
    /// `ip=<ip>/<prefix>[,gw=<gateway>]`.
    pub fn ipconfig0(&self) -> String {
        match self.gateway {
            Some(gw) => format!("ip={}/{},gw={gw}", self.ip, self.prefix),
            None => format!("ip={}/{}", self.ip, self.prefix),
        }
    }
}

/// A Talos disk image from the Image Factory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Image {
    /// Talos version, e.g. `v1.13.8`.
    pub talos_version: String,
    /// The 64-hex schematic ID.
    pub schematic: String,
}

impl Image {
    /// `talos-<version>-<schematic first 8>-nocloud-amd64.qcow2`.
    pub fn filename(&self) -> String {
        let short: String = self.schematic.chars().take(8).collect();
        format!("talos-{}-{short}-nocloud-amd64.qcow2", self.talos_version)
    }

    /// The volume ID on `storage`: `<storage>:import/<filename>`, for `import-from`.
    pub fn volid(&self, storage: &str) -> String {
        format!("{storage}:import/{}", self.filename())
    }

    /// The factory's uncompressed qcow2: `<factory>/image/<schematic>/<version>/nocloud-amd64.qcow2`.
    pub fn url(&self, factory: &str) -> String {
        format!(
            "{}/image/{}/{}/nocloud-amd64.qcow2",
            factory.trim_end_matches('/'),
            self.schematic,
            self.talos_version
        )
    }
}
