//! The sections of the topology besides `nodes`: `cluster`, `proxmox`,
//! `schematics`, `pci_mappings` and `state`, each checked with its defaults
//! applied. Called by `validate::validate`.

use super::check::{Cx, resolve};
use super::raw::{RawBackup, RawCluster, RawProxmox, RawState, RawTopology, Spanned};
use super::syntax::{self, Ipv4Net, Version};
use crate::model::{
    Environment, PROXMOX_ENDPOINT_ENV, PciMapping, ProxmoxSettings, SchematicSpec, StateSettings,
};
use indexmap::IndexMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use talosprov_base::diagnostics::{Code, Diagnostic, Pos, did_you_mean};

/// The system disk of a talosprov VM as Talos sees it: `scsi0` on the
/// virtio-scsi-single controller, the first SCSI disk.
pub const SYSTEM_DISK: &str = "/dev/sda";

/// Why `path` cannot be the system disk of a talosprov VM, whose only
/// system disk is `scsi0` on virtio-scsi (`/dev/sda`; data disks are
/// `scsi1`… as `/dev/sdb`…): a virtio-blk (`/dev/vd*`), Xen, NVMe or IDE
/// name, or another SCSI disk. `/dev/disk/by-*` links and anything else
/// are taken as written.
pub fn install_disk_bus_problem(path: &str) -> Option<String> {
    let name = path.strip_prefix("/dev/")?;
    let bus = |prefix: &str| name.starts_with(prefix);
    let other = if bus("vd") {
        Some("a virtio-blk disk (virtio0)")
    } else if bus("xvd") {
        Some("a Xen disk")
    } else if bus("nvme") {
        Some("an NVMe disk")
    } else if bus("hd") {
        Some("an IDE disk")
    } else {
        None
    };
    if let Some(kind) = other {
        return Some(format!(
            "is {kind}, which talosprov's VMs do not have: their system disk is scsi0 on \
             virtio-scsi, which Talos sees as {SYSTEM_DISK} (the default)"
        ));
    }
    let letters = name.strip_prefix("sd")?;
    (letters.len() == 1 && letters != "a" && letters.bytes().all(|b| b.is_ascii_lowercase())).then(
        || {
            format!(
                "is a data disk (scsi1 and up are /dev/sdb and on): the system disk, scsi0, \
                 is {SYSTEM_DISK} (the default)"
            )
        },
    )
}

/// The kinds of Proxmox identifiers the file names, each with PVE's format.
#[derive(Debug, Clone, Copy)]
pub(super) enum PveName {
    /// A node (host) name, `pve-node`.
    Node,
    /// A storage ID, `pve-storage-id`.
    Storage,
    /// A bridge, `pve-bridge-id`.
    Bridge,
    /// A pool ID, `pve-poolid`.
    Pool,
}

impl PveName {
    fn check(self, s: &str) -> bool {
        match self {
            PveName::Node => syntax::is_pve_node_name(s),
            PveName::Storage => syntax::is_pve_storage_id(s),
            PveName::Bridge => syntax::is_pve_bridge(s),
            PveName::Pool => syntax::is_pve_pool_id(s),
        }
    }

    fn form(self) -> &'static str {
        match self {
            PveName::Node => "a Proxmox node name: letters, digits and '-', such as pve",
            PveName::Storage => syntax::STORAGE_ID_FORM,
            PveName::Bridge => syntax::BRIDGE_FORM,
            PveName::Pool => {
                "a Proxmox pool ID: letters, digits, '.', '-' and '_', with '/' between nested \
                 pools (3 levels at most)"
            }
        }
    }
}

/// `cluster:` as far as it could be validated; `None` marks a field with an error.
pub(super) struct ClusterDraft {
    pub(super) name: Option<String>,
    pub(super) talos_version: Option<Version>,
    pub(super) kubernetes_version: Option<Option<Version>>,
    pub(super) vip: Option<Ipv4Addr>,
    pub(super) endpoint: Option<String>,
    pub(super) gateway: Option<Ipv4Addr>,
    pub(super) network: Option<Ipv4Net>,
    pub(super) nameservers: Option<Vec<IpAddr>>,
    pub(super) install_disk: Option<String>,
}

impl Cx<'_> {
    /// Check a Proxmox identifier against PVE's format for its kind.
    pub(super) fn pve_name(
        &mut self,
        s: &Spanned<String>,
        field: &str,
        kind: PveName,
    ) -> Option<String> {
        if kind.check(&s.value) {
            Some(s.value.clone())
        } else {
            let msg = format!("`{field}` must be {}, found {:?}", kind.form(), s.value);
            self.error(Code::InvalidValue, s.pos, field, msg);
            None
        }
    }

    pub(super) fn cluster(&mut self, raw: Option<&Spanned<RawCluster>>) -> ClusterDraft {
        let pos = raw.map(|r| r.pos);
        let empty = RawCluster::default();
        let c = raw.map_or(&empty, |r| &r.value);
        let name = self.cluster_name(c, pos);
        let talos_version = match &c.talos_version {
            None => {
                self.missing(pos, None, "cluster.talos_version", " (such as v1.13.8)");
                None
            }
            Some(v) => self.version(v, "cluster.talos_version").and_then(|parsed| {
                let (major, minor, patch) = talosprov_base::schematic::FIRST_PLATFORM_INSTALLER;
                if (parsed.major, parsed.minor, parsed.patch) >= (major, minor, patch) {
                    return Some(parsed);
                }
                let msg = format!(
                    "Talos {parsed} has no nocloud-installer image in the Image Factory, which \
                     serves <platform>-installer images from v{major}.{minor}.{patch}: talosprov \
                     installs and upgrades nodes with <factory>/nocloud-installer/<schematic>:<version>, \
                     so cluster.talos_version must be v{major}.{minor}.{patch} or later"
                );
                self.error(Code::NoNocloudInstaller, v.pos, "cluster.talos_version", msg);
                None
            }),
        };
        let kubernetes_version = match &c.kubernetes_version {
            None => Some(None),
            Some(v) => self.version(v, "cluster.kubernetes_version").map(Some),
        };
        let vip = c.vip.as_ref().and_then(|v| self.ipv4(v, "cluster.vip"));
        let endpoint = c
            .endpoint
            .as_ref()
            .and_then(|e| self.url(e, "cluster.endpoint", true));
        let (gateway, network) = self.cluster_network(c, pos);
        if let (Some(net), Some(addr), Some(v)) = (network, vip, &c.vip) {
            self.in_network(net, addr, v.pos, None, "cluster.vip");
        }
        let nameservers = self.nameservers(c);
        let install_disk = self.install_disk(c);
        ClusterDraft {
            name,
            talos_version,
            kubernetes_version,
            vip,
            endpoint,
            gateway,
            network,
            nameservers,
            install_disk,
        }
    }

    /// `cluster.name`: required, a DNS label.
    fn cluster_name(&mut self, c: &RawCluster, pos: Option<Pos>) -> Option<String> {
        match &c.name {
            None => {
                self.missing(pos, None, "cluster.name", " (a DNS label such as homelab)");
                None
            }
            Some(n) if syntax::is_dns_label(&n.value) => Some(n.value.clone()),
            Some(n) => {
                let msg = format!(
                    "cluster name {:?} must be a lowercase RFC 1123 label: a-z, 0-9 and '-', at most 63 characters",
                    n.value
                );
                self.error(Code::InvalidHostname, n.pos, "cluster.name", msg);
                None
            }
        }
    }

    /// `cluster.gateway` (required) and `cluster.prefix_length` (24 by
    /// default): the gateway and the network they make, the gateway checked
    /// to be a host address in it.
    fn cluster_network(
        &mut self,
        c: &RawCluster,
        pos: Option<Pos>,
    ) -> (Option<Ipv4Addr>, Option<Ipv4Net>) {
        let gateway = match &c.gateway {
            None => {
                self.missing(
                    pos,
                    None,
                    "cluster.gateway",
                    " (the default route's IPv4 address)",
                );
                None
            }
            Some(g) => self.ipv4(g, "cluster.gateway"),
        };
        let prefix = match &c.prefix_length {
            None => Some(24),
            Some(p) if (1..=30).contains(&p.value) => u8::try_from(p.value).ok(),
            Some(p) => {
                let msg = format!(
                    "cluster.prefix_length must be 1 to 30 bits, found {}",
                    p.value
                );
                self.error(Code::OutOfRange, p.pos, "cluster.prefix_length", msg);
                None
            }
        };
        let network = gateway.zip(prefix).map(|(g, p)| Ipv4Net::containing(g, p));
        if let (Some(net), Some(g)) = (network, &c.gateway) {
            self.in_network(
                net,
                gateway.unwrap_or(net.network),
                g.pos,
                None,
                "cluster.gateway",
            );
        }
        (gateway, network)
    }

    /// `cluster.nameservers`: IP addresses; empty when not given, `None`
    /// when any is invalid.
    fn nameservers(&mut self, c: &RawCluster) -> Option<Vec<IpAddr>> {
        c.nameservers.as_ref().map_or(Some(Vec::new()), |list| {
            let mut out = Vec::new();
            for (i, ns) in list.value.iter().enumerate() {
                match ns.value.parse::<IpAddr>() {
                    Ok(a) => out.push(a),
                    Err(_) => {
                        let field = format!("cluster.nameservers[{i}]");
                        let msg = format!("`{field}` must be an IP address, found {:?}", ns.value);
                        self.error(Code::InvalidIpv4, ns.pos, &field, msg);
                    }
                }
            }
            (out.len() == list.value.len()).then_some(out)
        })
    }

    /// `cluster.install_disk`: a `/dev/` path naming the system disk, `/dev/sda`
    /// by default (see [`install_disk_bus_problem`]).
    fn install_disk(&mut self, c: &RawCluster) -> Option<String> {
        match &c.install_disk {
            None => Some(SYSTEM_DISK.to_owned()),
            Some(d) if d.value.starts_with("/dev/") && d.value.len() > 5 => {
                if let Some(problem) = install_disk_bus_problem(&d.value) {
                    let msg = format!("cluster.install_disk {:?} {problem}", d.value);
                    self.error(Code::InstallDiskBus, d.pos, "cluster.install_disk", msg);
                    return None;
                }
                Some(d.value.clone())
            }
            Some(d) => {
                let msg = format!(
                    "cluster.install_disk must be a device path such as /dev/sda, found {:?}",
                    d.value
                );
                self.error(Code::InvalidValue, d.pos, "cluster.install_disk", msg);
                None
            }
        }
    }

    pub(super) fn proxmox(
        &mut self,
        raw: Option<&Spanned<RawProxmox>>,
        env: &Environment,
        base: &Path,
    ) -> Option<ProxmoxSettings> {
        let pos = raw.map(|r| r.pos);
        let empty = RawProxmox::default();
        let p = raw.map_or(&empty, |r| &r.value);
        let endpoint = match (&p.endpoint, &env.proxmox_endpoint) {
            (Some(e), _) => self.url(e, "proxmox.endpoint", true),
            (None, Some(e)) => {
                let spanned = Spanned::new(e.clone(), pos.unwrap_or_default());
                self.url(&spanned, PROXMOX_ENDPOINT_ENV, true)
            }
            (None, None) => {
                let hint = format!(
                    " (the PVE API URL such as https://pve.example:8006), or set {PROXMOX_ENDPOINT_ENV}"
                );
                self.missing(pos, None, "proxmox.endpoint", &hint);
                None
            }
        };
        let node = match &p.node {
            None => {
                self.missing(
                    pos,
                    None,
                    "proxmox.node",
                    " (the Proxmox host VMs go to by default)",
                );
                None
            }
            Some(n) => self.pve_name(n, "proxmox.node", PveName::Node),
        };
        let datastore = match &p.datastore {
            None => {
                let hint = " (the storage for VM disks, such as local-lvm)";
                self.missing(pos, None, "proxmox.datastore", hint);
                None
            }
            Some(d) => self.pve_name(d, "proxmox.datastore", PveName::Storage),
        };
        let mut optional =
            |v: &Option<Spanned<String>>, field: &str, kind: PveName, default: &str| match v {
                None => Some(default.to_owned()),
                Some(s) => self.pve_name(s, field, kind),
            };
        let image_storage = optional(
            &p.image_storage,
            "proxmox.image_storage",
            PveName::Storage,
            "local",
        );
        let bridge = optional(&p.bridge, "proxmox.bridge", PveName::Bridge, "vmbr0");
        let pool = match &p.pool {
            None => Some(None),
            Some(s) => self.pve_name(s, "proxmox.pool", PveName::Pool).map(Some),
        };
        let insecure = p.insecure.as_ref().is_some_and(|i| i.value);
        if let Some(i) = p.insecure.as_ref().filter(|i| i.value)
            && (p.ca_file.is_some() || p.fingerprint.is_some())
        {
            let msg = "proxmox.insecure turns certificate checks off, so ca_file and fingerprint would be ignored; use one of them".to_owned();
            self.error(Code::ConflictingFields, i.pos, "proxmox.insecure", msg);
        }
        let fingerprint = match &p.fingerprint {
            Some(f) if !syntax::is_sha256_fingerprint(&f.value) => {
                let msg = format!(
                    "proxmox.fingerprint must be a SHA-256 fingerprint (32 hex pairs, such as AB:CD:...), found {:?}",
                    f.value
                );
                self.error(Code::InvalidFingerprint, f.pos, "proxmox.fingerprint", msg);
                None
            }
            other => Some(other.as_ref().map(|f| f.value.clone())),
        };
        let place = |field| super::validate_devices::Place { field, node: None };
        let networks = match &p.networks {
            Some(list) => super::validate_devices::networks(
                self,
                list,
                place("proxmox.networks"),
                bridge.as_deref().unwrap_or("vmbr0"),
            ),
            None => Some(Vec::new()),
        };
        let disks = match &p.disks {
            Some(list) => super::validate_devices::disks(
                self,
                list,
                place("proxmox.disks"),
                datastore.as_deref().unwrap_or_default(),
            ),
            None => Some(Vec::new()),
        };
        let ha = p.ha.as_ref().map_or(Some(None), |raw| {
            super::validate_devices::ha(self, raw, place("proxmox.ha")).map(Some)
        });
        Some(ProxmoxSettings {
            endpoint: endpoint?,
            node: node?,
            datastore: datastore?,
            image_storage: image_storage?,
            bridge: bridge?,
            networks: networks?,
            disks: disks?,
            ha: ha?,
            spread: p
                .spread
                .iter()
                .flat_map(|l| &l.value)
                .map(|s| s.value.clone())
                .collect(),
            pool: pool?,
            insecure,
            ca_file: p.ca_file.as_ref().map(|f| resolve(base, &f.value)),
            fingerprint: fingerprint?,
        })
    }

    pub(super) fn schematics(&mut self, raw: &RawTopology) -> IndexMap<String, SchematicSpec> {
        let mut out = IndexMap::new();
        for entry in raw.schematics.iter().flat_map(|s| &s.value) {
            let name = &entry.name.value;
            let s = &entry.value;
            let base = format!("schematics.{name}");
            let mut ok = true;
            if let Some(id) = &s.id {
                if s.extensions.is_some() || s.kernel_args.is_some() {
                    let msg = format!(
                        "schematic `{name}` gives both `id` and extensions/kernel_args; give an existing schematic id, or what to build, not both"
                    );
                    self.error(Code::InvalidSchematic, entry.name.pos, &base, msg);
                    ok = false;
                }
                if !syntax::is_schematic_id(&id.value) {
                    let msg = format!(
                        "schematic id must be 64 lowercase hex digits, found {:?}",
                        id.value
                    );
                    self.error(Code::InvalidSchematicId, id.pos, &format!("{base}.id"), msg);
                    ok = false;
                }
                if ok {
                    out.insert(name.clone(), SchematicSpec::Id(id.value.clone()));
                }
                continue;
            }
            let mut extensions = Vec::new();
            for (i, ext) in s.extensions.iter().flat_map(|e| &e.value).enumerate() {
                if syntax::is_extension_name(&ext.value) {
                    extensions.push(ext.value.clone());
                } else {
                    let msg = format!(
                        "extension {:?} must be an official extension name <org>/<name>, such as siderolabs/qemu-guest-agent",
                        ext.value
                    );
                    self.error(
                        Code::InvalidExtension,
                        ext.pos,
                        &format!("{base}.extensions[{i}]"),
                        msg,
                    );
                    ok = false;
                }
            }
            let kernel_args: Vec<String> = s
                .kernel_args
                .iter()
                .flat_map(|k| &k.value)
                .map(|k| k.value.clone())
                .collect();
            if ok {
                out.insert(
                    name.clone(),
                    SchematicSpec::Customization {
                        extensions,
                        kernel_args,
                    },
                );
            }
        }
        out
    }

    pub(super) fn pci_mappings(&mut self, raw: &RawTopology) -> IndexMap<String, PciMapping> {
        let mut out = IndexMap::new();
        for entry in raw.pci_mappings.iter().flat_map(|s| &s.value) {
            let name = &entry.name.value;
            let m = &entry.value;
            let base = format!("pci_mappings.{name}");
            if !syntax::is_pve_config_id(name) {
                let msg = format!(
                    "the PCI mapping name {name:?} must be a Proxmox configuration ID: a letter, \
                     then letters, digits, '-' and '_' (2 characters at least), such as gpu"
                );
                self.error(Code::InvalidPciMapping, entry.name.pos, &base, msg);
            }
            if let Some(map) = &m.map {
                if let Some(mapping) = self.pci_mapping_map(&base, m, map) {
                    out.insert(name.clone(), mapping);
                }
                continue;
            }
            let text = |cx: &mut Self,
                        v: &Option<Spanned<String>>,
                        key: &str,
                        valid: fn(&str) -> bool,
                        form: &str| {
                let field = format!("{base}.{key}");
                match v {
                    None => {
                        cx.missing(Some(m.pos), None, &field, &format!(" ({form})"));
                        None
                    }
                    Some(s) if valid(&s.value) => Some(s.value.clone()),
                    Some(s) => {
                        let msg = format!("`{field}` must be {form}, found {:?}", s.value);
                        cx.error(Code::InvalidPciMapping, s.pos, &field, msg);
                        None
                    }
                }
            };
            let path = text(
                self,
                &m.path,
                "path",
                syntax::is_pci_path,
                "a PCI address such as 0000:01:00",
            );
            let id = text(
                self,
                &m.id,
                "id",
                syntax::is_pci_id,
                "vendor:device such as 10de:2507",
            );
            let subsystem_id = text(
                self,
                &m.subsystem_id,
                "subsystem_id",
                syntax::is_pci_id,
                "vendor:device such as 10de:2507",
            );
            // Only the id: some devices report subsystem 0000:0000 in earnest.
            if let Some(v) = m.id.as_ref().filter(|v| syntax::is_pci_id(&v.value))
                && v.value.split(':').any(|part| part == "0000")
            {
                let field = format!("{base}.id");
                let msg = format!(
                    "`{field}` is {:?}, a placeholder: no PCI device has vendor or device \
                     0000. Fill it in from the Proxmox host (`lspci -nn` gives it) before \
                     apply creates the mapping",
                    v.value
                );
                self.push(
                    Diagnostic::warning(Code::PlaceholderPciMapping, self.file, msg)
                        .at(v.pos)
                        .field(field),
                );
            }
            let iommu_group = match &m.iommu_group {
                None => {
                    self.missing(
                        Some(m.pos),
                        None,
                        &format!("{base}.iommu_group"),
                        " (the device's IOMMU group number)",
                    );
                    None
                }
                Some(g) => u32::try_from(g.value).ok().or_else(|| {
                    let msg = format!(
                        "iommu_group must be 0 to {}, found {} (the group number under \
                         /sys/kernel/iommu_groups on the Proxmox host)",
                        u32::MAX,
                        g.value
                    );
                    self.error(Code::OutOfRange, g.pos, &format!("{base}.iommu_group"), msg);
                    None
                }),
            };
            let node = match &m.node {
                None => Some(None),
                Some(n) => self
                    .pve_name(n, &format!("{base}.node"), PveName::Node)
                    .map(Some),
            };
            if let (Some(path), Some(id), Some(iommu_group), Some(subsystem_id), Some(node)) =
                (path, id, iommu_group, subsystem_id, node)
            {
                let mapping = PciMapping {
                    path,
                    id,
                    iommu_group,
                    subsystem_id,
                    comment: m.comment.as_ref().map(|c| c.value.clone()),
                    node,
                    others: Vec::new(),
                };
                out.insert(name.clone(), mapping);
            }
        }
        out
    }

    /// A PCI mapping given per host (`map`): each entry's node, path and IOMMU
    /// group, its IDs defaulting to the mapping's; one entry per host.
    fn pci_mapping_map(
        &mut self,
        base: &str,
        m: &super::raw::RawPciMapping,
        map: &Spanned<Vec<Spanned<super::raw::RawPciHost>>>,
    ) -> Option<PciMapping> {
        let mut ok = true;
        for (key, v) in [
            ("path", m.path.as_ref().map(|v| v.pos)),
            ("node", m.node.as_ref().map(|v| v.pos)),
            ("iommu_group", m.iommu_group.as_ref().map(|v| v.pos)),
        ] {
            if let Some(pos) = v {
                let msg = format!(
                    "`{base}.{key}` and `{base}.map` both given: with `map`, give {key} in each \
                     host's entry"
                );
                self.error(Code::ConflictingFields, pos, &format!("{base}.{key}"), msg);
                ok = false;
            }
        }
        if map.value.is_empty() {
            let msg = format!("`{base}.map` is empty: list one entry per Proxmox host");
            self.error(
                Code::InvalidPciMapping,
                map.pos,
                &format!("{base}.map"),
                msg,
            );
            return None;
        }
        let mut devices: Vec<super::model::PciHostDevice> = Vec::new();
        for (i, e) in map.value.iter().enumerate() {
            let at = format!("{base}.map[{i}]");
            let Some(device) = self.pci_host_entry(&at, e, m) else {
                ok = false;
                continue;
            };
            if devices.iter().any(|d| d.node == device.node) {
                let pos = e.value.node.as_ref().map_or(e.pos, |n| n.pos);
                let msg = format!(
                    "`{at}.node` {} has an entry already: a mapping holds one device per \
                     Proxmox host (declare another mapping for a second device)",
                    device.node
                );
                self.error(Code::InvalidPciMapping, pos, &format!("{at}.node"), msg);
                ok = false;
            }
            devices.push(device);
        }
        if !ok {
            return None;
        }
        let mut devices = devices.into_iter();
        let first = devices.next()?;
        Some(PciMapping {
            path: first.path,
            id: first.id,
            iommu_group: first.iommu_group,
            subsystem_id: first.subsystem_id,
            comment: m.comment.as_ref().map(|c| c.value.clone()),
            node: Some(first.node),
            others: devices.collect(),
        })
    }

    /// One host's entry of a mapping's `map` (`at` is its field path), its IDs
    /// defaulting to the mapping's; `None` after a diagnostic.
    fn pci_host_entry(
        &mut self,
        at: &str,
        e: &Spanned<super::raw::RawPciHost>,
        m: &super::raw::RawPciMapping,
    ) -> Option<super::model::PciHostDevice> {
        let text = |cx: &mut Self,
                    v: Option<&Spanned<String>>,
                    key: &str,
                    valid: fn(&str) -> bool,
                    form: &str| {
            let field = format!("{at}.{key}");
            match v {
                None => {
                    cx.missing(Some(e.pos), None, &field, &format!(" ({form})"));
                    None
                }
                Some(s) if valid(&s.value) => Some(s.value.clone()),
                Some(s) => {
                    let msg = format!("`{field}` must be {form}, found {:?}", s.value);
                    cx.error(Code::InvalidPciMapping, s.pos, &field, msg);
                    None
                }
            }
        };
        let r = &e.value;
        let node = match &r.node {
            Some(n) => self.pve_name(n, &format!("{at}.node"), PveName::Node),
            None => {
                self.missing(
                    Some(e.pos),
                    None,
                    &format!("{at}.node"),
                    " (the Proxmox host)",
                );
                None
            }
        };
        let ids = "vendor:device such as 10de:2507";
        let path = text(
            self,
            r.path.as_ref(),
            "path",
            syntax::is_pci_path,
            "a PCI address such as 0000:01:00",
        );
        let id = text(
            self,
            r.id.as_ref().or(m.id.as_ref()),
            "id",
            syntax::is_pci_id,
            ids,
        );
        let sub_id = text(
            self,
            r.subsystem_id.as_ref().or(m.subsystem_id.as_ref()),
            "subsystem_id",
            syntax::is_pci_id,
            ids,
        );
        let group = match &r.iommu_group {
            Some(g) => u32::try_from(g.value).ok(),
            None => {
                self.missing(
                    Some(e.pos),
                    None,
                    &format!("{at}.iommu_group"),
                    " (the device's IOMMU group number)",
                );
                None
            }
        };
        Some(super::model::PciHostDevice {
            node: node?,
            path: path?,
            id: id?,
            iommu_group: group?,
            subsystem_id: sub_id?,
        })
    }

    /// `backup:`: `Some(None)` without it, `None` when it is wrong (the
    /// diagnostics say why).
    pub(super) fn backup(
        &mut self,
        raw: Option<&Spanned<RawBackup>>,
        base: &Path,
    ) -> Option<Option<talosprov_base::backup::BackupSettings>> {
        use talosprov_base::backup::{
            BackupSettings, DEFAULT_KEEP_DAILY, DEFAULT_KEEP_LAST, Location, MAX_KEEP_DAILY,
            MAX_KEEP_LAST,
        };
        let Some(raw) = raw else {
            return Some(None);
        };
        let b = &raw.value;
        let destination = match &b.destination {
            None => {
                let msg = "backup.destination is required: a folder or s3://bucket/prefix";
                self.error(
                    Code::MissingField,
                    raw.pos,
                    "backup.destination",
                    msg.to_owned(),
                );
                None
            }
            Some(d) => match Location::parse(&d.value, base) {
                Ok(l) => Some(l),
                Err(why) => {
                    let msg = format!("backup.destination {:?}: {why}", d.value);
                    self.error(Code::InvalidValue, d.pos, "backup.destination", msg);
                    None
                }
            },
        };
        let mut count = |v: &Option<Spanned<u64>>, key: &str, max: u64, default: u32| match v {
            None => Some(default),
            Some(n) if n.value <= max => Some(n.value as u32),
            Some(n) => {
                let msg = format!("backup.{key} is {}, above the most, {max}", n.value);
                self.error(Code::OutOfRange, n.pos, &format!("backup.{key}"), msg);
                None
            }
        };
        let keep_last = count(&b.keep_last, "keep_last", MAX_KEEP_LAST, DEFAULT_KEEP_LAST);
        let keep_daily = count(
            &b.keep_daily,
            "keep_daily",
            MAX_KEEP_DAILY,
            DEFAULT_KEEP_DAILY,
        );
        let max_age = match &b.max_age {
            None => Some(None),
            Some(a) => match talosprov_base::duration::parse(&a.value) {
                Ok(d) if !d.is_zero() => Some(Some(d)),
                Ok(_) | Err(_) => {
                    let msg = format!(
                        "backup.max_age {:?} is {}",
                        a.value,
                        talosprov_base::duration::EXPECTED
                            .replace("not a number", "not a positive number")
                    );
                    self.error(Code::InvalidValue, a.pos, "backup.max_age", msg);
                    None
                }
            },
        };
        Some(Some(BackupSettings {
            destination: destination?,
            keep_last: keep_last?,
            keep_daily: keep_daily?,
            max_age: max_age?,
            instance_credentials: b
                .s3
                .as_ref()
                .and_then(|s| s.value.instance_credentials.as_ref())
                .is_some_and(|v| v.value),
        }))
    }

    pub(super) fn state(
        &mut self,
        raw: Option<&Spanned<RawState>>,
        base: &Path,
    ) -> Option<StateSettings> {
        let Some(raw) = raw else {
            return Some(StateSettings::Local { path: None });
        };
        let s = &raw.value;
        let backend = s.backend.as_ref().map_or("local", |b| b.value.as_str());
        let not_for = |cx: &mut Self, v: &Option<Spanned<String>>, key: &str| {
            if let Some(v) = v {
                let msg = format!("state.{key} does not apply to the `{backend}` backend");
                cx.error(Code::ConflictingFields, v.pos, &format!("state.{key}"), msg);
            }
        };
        match backend {
            "local" => {
                for (v, key) in [
                    (&s.address, "address"),
                    (&s.lock_address, "lock_address"),
                    (&s.unlock_address, "unlock_address"),
                    (&s.lock_method, "lock_method"),
                    (&s.unlock_method, "unlock_method"),
                ] {
                    not_for(self, v, key);
                }
                Some(StateSettings::Local {
                    path: s.path.as_ref().map(|p| resolve(base, &p.value)),
                })
            }
            "http" => {
                not_for(self, &s.path, "path");
                // Without an address here, the backend takes TF_HTTP_ADDRESS at run
                // time, as GitLab's OpenTofu tooling sets it.
                let address = s
                    .address
                    .as_ref()
                    .map(|a| self.url(a, "state.address", false));
                let lock_address = s
                    .lock_address
                    .as_ref()
                    .map(|a| self.url(a, "state.lock_address", false));
                let unlock_address = s
                    .unlock_address
                    .as_ref()
                    .map(|a| self.url(a, "state.unlock_address", false));
                let mut method = |v: &Option<Spanned<String>>, key: &str, default: &str| match v {
                    None => Some(default.to_owned()),
                    Some(m)
                        if !m.value.is_empty()
                            && m.value.bytes().all(|c| c.is_ascii_uppercase()) =>
                    {
                        Some(m.value.clone())
                    }
                    Some(m) => {
                        let msg = format!(
                            "state.{key} must be an HTTP method in capitals such as {default} or POST, found {:?}",
                            m.value
                        );
                        self.error(Code::InvalidValue, m.pos, &format!("state.{key}"), msg);
                        None
                    }
                };
                let lock_method = method(&s.lock_method, "lock_method", "LOCK");
                let unlock_method = method(&s.unlock_method, "unlock_method", "UNLOCK");
                Some(StateSettings::Http {
                    address: address.map_or(Some(None), |a| a.map(Some))?,
                    lock_address: lock_address.map_or(Some(None), |a| a.map(Some))?,
                    unlock_address: unlock_address.map_or(Some(None), |a| a.map(Some))?,
                    lock_method: lock_method?,
                    unlock_method: unlock_method?,
                })
            }
            other => {
                let pos = s.backend.as_ref().map_or(raw.pos, |b| b.pos);
                let msg = format!(
                    "state.backend must be `local` or `http`, found {other:?}{}",
                    did_you_mean(other, ["local", "http"])
                );
                self.error(Code::InvalidValue, pos, "state.backend", msg);
                None
            }
        }
    }
}
