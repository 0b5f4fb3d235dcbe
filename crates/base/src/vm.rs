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
    /// The NICs, `net0` first (it carries the node's address); never empty.
    pub networks: Vec<Nic>,
    /// Data disks, `scsi1` and up, in index order.
    pub disks: Vec<DataDisk>,
    /// Whether Proxmox talks to a QEMU guest agent (`agent: enabled=1`): only when
    /// the node's image has the `siderolabs/qemu-guest-agent` extension, since
    /// Proxmox otherwise waits on an agent that never answers.
    pub agent: bool,
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
    /// The VM's Proxmox HA resource (`vm:<vmid>`); `None`: not HA managed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha: Option<HaResource>,
}

/// A VM's HA resource as pve-ha-manager holds it (`/cluster/ha/resources`,
/// `sid` `vm:<vmid>`): the state the HA manager keeps it in, and its restart
/// and move budgets (`PVE::HA::Resources` properties).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaResource {
    /// `started`, `stopped`, `disabled` or `ignored`.
    pub state: String,
    /// `max_restart`: restarts on its host before a move.
    pub max_restart: u32,
    /// `max_relocate`: moves to another host after a failed start.
    pub max_relocate: u32,
}

impl HaResource {
    /// `state=started,max_restart=1,max_relocate=1`, as the plan shows it.
    pub fn text(&self) -> String {
        format!(
            "state={},max_restart={},max_relocate={}",
            self.state, self.max_restart, self.max_relocate
        )
    }

    /// The HA resource ID of `vmid`, `vm:<vmid>`.
    pub fn sid(vmid: u32) -> String {
        format!("vm:{vmid}")
    }
}

/// One `netN` NIC: a virtio NIC on a bridge (qemu-server `pve-qm-net` format).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nic {
    /// The bridge, e.g. `vmbr0`.
    pub bridge: String,
    /// The VLAN tag (`tag=`, 1..=4094): the bridge tags the NIC's frames, so
    /// the guest sees an untagged link.
    pub tag: Option<u16>,
    /// The MTU (`mtu=`, 576..=65520); `None` is the bridge's.
    pub mtu: Option<u16>,
    /// The MAC address, upper-case `XX:XX:XX:XX:XX:XX` as Proxmox writes it;
    /// `None` lets Proxmox pick one.
    pub mac: Option<String>,
    /// `firewall=1`: the NIC goes through Proxmox's firewall bridge.
    pub firewall: bool,
}

impl Nic {
    /// An untagged NIC on `bridge` whose MAC Proxmox picks: a node's one NIC
    /// when the topology lists none.
    pub fn on_bridge(bridge: &str) -> Nic {
        Nic {
            bridge: bridge.to_owned(),
            tag: None,
            mtu: None,
            mac: None,
            firewall: false,
        }
    }

    /// `virtio[=MAC],bridge=<bridge>[,firewall=1][,mtu=N][,tag=N]`.
    pub fn property_string(&self) -> String {
        let mut s = match &self.mac {
            Some(mac) => format!("virtio={mac},bridge={}", self.bridge),
            None => format!("virtio,bridge={}", self.bridge),
        };
        if self.firewall {
            s.push_str(",firewall=1");
        }
        if let Some(mtu) = self.mtu {
            s.push_str(&format!(",mtu={mtu}"));
        }
        if let Some(tag) = self.tag {
            s.push_str(&format!(",tag={tag}"));
        }
        s
    }
}

/// A `netN` value (`virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=20`) as a
/// [`Nic`], its MAC upper-cased; `None` when it is not a virtio NIC on a
/// bridge. Pure; follows the `pve-qm-net` format of qemu-server
/// `QemuServer/Network.pm` (the model key carries the MAC, `macaddr=` is its
/// long form; `firewall` defaults to 0).
pub fn parse_nic(value: &str) -> Option<Nic> {
    let mut nic = Nic {
        bridge: String::new(),
        tag: None,
        mtu: None,
        mac: None,
        firewall: false,
    };
    let mut virtio = false;
    for part in value.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let (k, v) = (k.trim(), v.trim());
        let mac = || (!v.is_empty()).then(|| v.to_ascii_uppercase());
        match k {
            "virtio" => {
                virtio = true;
                nic.mac = mac();
            }
            "model" => virtio = v == "virtio",
            "macaddr" => nic.mac = mac(),
            "bridge" => nic.bridge = v.to_owned(),
            "tag" => nic.tag = v.parse().ok(),
            "mtu" => nic.mtu = v.parse().ok(),
            "firewall" => nic.firewall = matches!(v, "1" | "yes" | "on" | "true"),
            _ => {}
        }
    }
    (virtio && !nic.bridge.is_empty()).then_some(nic)
}

/// Whether two `netN` values describe the same NIC (see [`parse_nic`]): the
/// same bridge, tag, MTU and firewall, and the same MAC where both name one
/// (Proxmox fills in a MAC it picked for a NIC given without). `None` is no NIC.
pub fn nic_equivalent(a: Option<&str>, b: Option<&str>) -> bool {
    match (a.map(parse_nic), b.map(parse_nic)) {
        (None, None) => true,
        (Some(Some(a)), Some(Some(b))) => {
            let mac = match (&a.mac, &b.mac) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            };
            mac && Nic { mac: None, ..a } == Nic { mac: None, ..b }
        }
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// One data disk, `scsiN` (N from 1): a new volume on a storage, given to
/// Talos by its serial.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataDisk {
    /// N in `scsiN`, 1..=30.
    pub index: u8,
    /// Its size in GiB (Proxmox's `G`).
    pub size_gib: u64,
    /// The storage the volume is allocated on.
    pub datastore: String,
    /// `ssd=1`: the guest sees a non-rotational disk.
    pub ssd: bool,
    /// `iothread=1`: its own I/O thread (virtio-scsi-single).
    pub iothread: bool,
    /// `discard=on`: the guest's TRIM frees space on thin storage.
    pub discard: bool,
    /// `cache=` (`none`, `writethrough`, `writeback`, `directsync`, `unsafe`);
    /// `None` is Proxmox's default (no cache).
    pub cache: Option<String>,
}

impl DataDisk {
    /// The config key, `scsi<N>`.
    pub fn key(&self) -> String {
        format!("scsi{}", self.index)
    }

    /// The disk's serial as the guest reads it: see [`disk_serial`].
    pub fn serial(&self) -> String {
        disk_serial(self.index)
    }

    /// The property string of a new volume: `<storage>:<size>,serial=…[,…]`
    /// (the size in GiB allocates a new volume).
    pub fn create_string(&self) -> String {
        let mut s = format!(
            "{}:{},serial={}",
            self.datastore,
            self.size_gib,
            self.serial()
        );
        s.push_str(&self.options());
        s
    }

    /// The property string that sets this disk's serial and options on the
    /// volume `shown` already names (a `scsiN` value as Proxmox shows it):
    /// `<volume>,serial=…[,…]`.
    pub fn update_string(&self, shown: &str) -> String {
        let volume = shown.split(',').next().unwrap_or_default();
        format!("{volume},serial={}{}", self.serial(), self.options())
    }

    /// `,cache=…,discard=on,iothread=1,ssd=1`, each only when set.
    fn options(&self) -> String {
        let mut s = String::new();
        if let Some(c) = &self.cache {
            s.push_str(&format!(",cache={c}"));
        }
        if self.discard {
            s.push_str(",discard=on");
        }
        if self.iothread {
            s.push_str(",iothread=1");
        }
        if self.ssd {
            s.push_str(",ssd=1");
        }
        s
    }

    /// The value a recorded disk is compared by: storage, size and options as
    /// `<storage>:<size>G,serial=…[,…]` (the volume name left out, since
    /// Proxmox names it when it allocates it).
    pub fn record_string(&self) -> String {
        disk_text(
            &self.datastore,
            self.size_gib,
            Some(&self.serial()),
            &self.options(),
        )
    }
}

fn disk_text(storage: &str, size_gib: u64, serial: Option<&str>, options: &str) -> String {
    match serial {
        Some(serial) => format!("{storage}:{size_gib}G,serial={serial}{options}"),
        None => format!("{storage}:{size_gib}G{options}"),
    }
}

/// The serial talosprov gives data disk `scsi<index>` (Proxmox's `serial=`,
/// at most 20 characters, which the guest reads from the disk's VPD page):
/// `scsi<index>`, which Talos matches as `disk.serial`.
pub fn disk_serial(index: u8) -> String {
    format!("scsi{index}")
}

/// A `scsiN` value Proxmox shows (`local-lvm:vm-100-disk-3,iothread=1,size=100G,…`)
/// in the form of [`DataDisk::record_string`]: its storage, its size in whole
/// GiB, its serial and the options talosprov sets, so that it compares with a
/// desired disk. `None` for a value without a storage (a CD-ROM, `none`). Pure.
pub fn disk_record_string(value: &str) -> Option<String> {
    let mut parts = value.split(',');
    let (storage, _) = parts.next()?.trim().split_once(':')?;
    let mut size = 0;
    let mut serial = None;
    let mut disk = DataDisk {
        index: 0,
        size_gib: 0,
        datastore: storage.to_owned(),
        ssd: false,
        iothread: false,
        discard: false,
        cache: None,
    };
    for part in parts {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim(), v.trim());
        let on = matches!(v, "1" | "on" | "yes" | "true");
        match k {
            "size" => size = size_gib(v).unwrap_or(0),
            "serial" => serial = Some(v.to_owned()),
            "ssd" => disk.ssd = on,
            "iothread" => disk.iothread = on,
            "discard" => disk.discard = on,
            "cache" if v != "none" => disk.cache = Some(v.to_owned()),
            _ => {}
        }
    }
    Some(disk_text(storage, size, serial.as_deref(), &disk.options()))
}

/// A drive size as Proxmox writes it (`528K`, `50G`, `1T`, plain bytes) in
/// bytes; `None` when it does not parse.
pub fn size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (num, unit) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&text[..i], c.to_ascii_uppercase()),
        _ => (text, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let factor: f64 = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => 1024.0 * 1024.0,
        'G' => 1024.0 * 1024.0 * 1024.0,
        'T' => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = n * factor;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

/// [`size_bytes`] in whole GiB, rounded down.
pub fn size_gib(text: &str) -> Option<u64> {
    size_bytes(text).map(|b| b >> 30)
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
