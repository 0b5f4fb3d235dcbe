//! Raw topology to validated model: defaults, references and every check in
//! one pass, collecting all problems. The node checks live in `validate_nodes`.

use super::diagnostics::{Code, Diagnostic, Pos};
use super::raw::{RawCluster, RawProxmox, RawState, RawTopology, Spanned};
use super::syntax::{self, Ipv4Net, Version};
use super::validate_nodes::{self, NodeContext};
use super::{
    Cluster, Environment, PROXMOX_ENDPOINT_ENV, PciMapping, ProxmoxSettings, SchematicSpec,
    StateSettings, Topology,
};
use indexmap::IndexMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Component, Path, PathBuf};

/// The Image Factory used when `image_factory.url` is not given.
pub const DEFAULT_IMAGE_FACTORY: &str = "https://factory.talos.dev";

/// Convert the raw topology into the model, applying every default and
/// running every check of the format.
///
/// Returns the model (complete only when no error was found; callers must
/// check the diagnostics) and every diagnostic, errors and warnings. `file`
/// labels diagnostics and anchors relative paths; `env` supplies
/// `PROXMOX_VE_ENDPOINT`. Pure: no I/O.
pub fn validate(
    raw: &RawTopology,
    file: &Path,
    env: &Environment,
) -> (Option<Topology>, Vec<Diagnostic>) {
    let mut cx = Cx {
        file,
        diagnostics: Vec::new(),
    };
    let base = file.parent().unwrap_or(Path::new(""));
    let cluster = cx.cluster(raw.cluster.as_ref());
    let proxmox = cx.proxmox(raw.proxmox.as_ref(), env, base);
    let image_factory_url = match raw
        .image_factory
        .as_ref()
        .and_then(|f| f.value.url.as_ref())
    {
        Some(url) => cx.url(url, "image_factory.url", false),
        None => Some(DEFAULT_IMAGE_FACTORY.to_owned()),
    };
    let schematics = cx.schematics(raw);
    let pci_mappings = cx.pci_mappings(raw);
    let declared_schematics: Vec<&String> = raw
        .schematics
        .iter()
        .flat_map(|s| &s.value)
        .map(|e| &e.name.value)
        .collect();
    let declared_pci_mappings: Vec<&String> = raw
        .pci_mappings
        .iter()
        .flat_map(|s| &s.value)
        .map(|e| &e.name.value)
        .collect();
    let default_schematic = raw.default_schematic.as_ref().and_then(|d| {
        if schematics.contains_key(&d.value) {
            Some(d.value.clone())
        } else if declared_schematics.contains(&&d.value) {
            // Declared but invalid: that schematic's own error says why.
            None
        } else {
            let msg = format!(
                "default_schematic `{}` is not declared under `schematics`{}",
                d.value,
                known(declared_schematics.iter().copied())
            );
            cx.error(Code::UnknownSchematic, d.pos, "default_schematic", msg);
            None
        }
    });
    let nodes = validate_nodes::nodes(
        &mut cx,
        raw.nodes.as_ref(),
        &NodeContext {
            network: cluster.network,
            vip: cluster.vip,
            proxmox_node: proxmox.as_ref().map(|p| p.node.as_str()),
            schematics: &schematics,
            default_schematic: default_schematic.as_deref(),
            pci_mappings: &pci_mappings,
            declared_schematics: declared_schematics.clone(),
            declared_pci_mappings,
        },
    );
    let state = cx.state(raw.state.as_ref(), base);
    let patches_dir = resolve(
        base,
        raw.patches_dir
            .as_ref()
            .map_or("patches", |p| p.value.as_str()),
    );

    let endpoint = cluster.endpoint.clone().or_else(|| {
        let host = cluster.vip.or_else(|| {
            nodes
                .as_ref()?
                .iter()
                .find(|n| n.role == super::Role::Controlplane)
                .map(|n| n.ip)
        })?;
        Some(format!("https://{host}:6443"))
    });
    let topology = (|| {
        Some(Topology {
            file: file.to_path_buf(),
            cluster: Cluster {
                name: cluster.name?,
                talos_version: cluster.talos_version?,
                kubernetes_version: cluster.kubernetes_version?,
                vip: cluster.vip,
                endpoint: endpoint?,
                gateway: cluster.gateway?,
                prefix_length: cluster.network?.prefix,
                nameservers: cluster.nameservers?,
                install_disk: cluster.install_disk?,
            },
            proxmox: proxmox?,
            image_factory_url: image_factory_url?,
            schematics,
            pci_mappings,
            nodes: nodes?,
            patches_dir,
            state: state?,
        })
    })();
    let topology = topology.filter(|_| !super::diagnostics::has_errors(&cx.diagnostics));
    (topology, cx.diagnostics)
}

/// "; declared: a, b" or "; none is declared", for reference errors.
pub(super) fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        " (none is declared)".to_owned()
    } else {
        format!(" (declared: {})", names.join(", "))
    }
}

/// The checking context: the file and the diagnostics so far.
pub(super) struct Cx<'f> {
    pub(super) file: &'f Path,
    pub(super) diagnostics: Vec<Diagnostic>,
}

/// `cluster:` as far as it could be validated; `None` marks a field with an error.
struct ClusterDraft {
    name: Option<String>,
    talos_version: Option<Version>,
    kubernetes_version: Option<Option<Version>>,
    vip: Option<Ipv4Addr>,
    endpoint: Option<String>,
    gateway: Option<Ipv4Addr>,
    network: Option<Ipv4Net>,
    nameservers: Option<Vec<IpAddr>>,
    install_disk: Option<String>,
}

impl Cx<'_> {
    pub(super) fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    pub(super) fn error(&mut self, code: Code, pos: Pos, field: &str, message: String) {
        let d = Diagnostic::error(code, self.file, message)
            .at(pos)
            .field(field);
        self.push(d);
    }

    /// Report a missing required field of a section that starts at `pos`.
    pub(super) fn missing(
        &mut self,
        pos: Option<Pos>,
        node: Option<&str>,
        field: &str,
        hint: &str,
    ) {
        let mut d = Diagnostic::error(
            Code::MissingField,
            self.file,
            format!("`{field}` is required{hint}"),
        )
        .on_node(node)
        .field(field);
        d.pos = pos;
        self.push(d);
    }

    fn ipv4(&mut self, s: &Spanned<String>, field: &str) -> Option<Ipv4Addr> {
        match s.value.parse::<Ipv4Addr>() {
            Ok(a) => Some(a),
            Err(_) => {
                let msg = format!(
                    "`{field}` must be an IPv4 address such as 192.168.1.10, found {:?}",
                    s.value
                );
                self.error(Code::InvalidIpv4, s.pos, field, msg);
                None
            }
        }
    }

    fn version(&mut self, s: &Spanned<String>, field: &str) -> Option<Version> {
        let v = Version::parse(&s.value);
        if v.is_none() {
            let msg = format!(
                "`{field}` must be a version vMAJOR.MINOR.PATCH such as v1.13.8, found {:?}",
                s.value
            );
            self.error(Code::InvalidVersion, s.pos, field, msg);
        }
        v
    }

    /// An `http(s)://host[:port][/path]` URL, returned without a trailing `/`.
    fn url(&mut self, s: &Spanned<String>, field: &str, https_only: bool) -> Option<String> {
        let parsed = url::Url::parse(&s.value).ok().filter(|u| u.has_host());
        let scheme_ok =
            |u: &url::Url| u.scheme() == "https" || (!https_only && u.scheme() == "http");
        match parsed {
            Some(u) if scheme_ok(&u) && u.query().is_none() && u.fragment().is_none() => {
                Some(s.value.trim_end_matches('/').to_owned())
            }
            _ => {
                let want = if https_only {
                    "an https:// URL"
                } else {
                    "an http:// or https:// URL"
                };
                let msg = format!(
                    "`{field}` must be {want} with a host and no query, found {:?}",
                    s.value
                );
                self.error(Code::InvalidUrl, s.pos, field, msg);
                None
            }
        }
    }

    /// Check that `addr` is a usable host address of `net`.
    pub(super) fn in_network(
        &mut self,
        net: Ipv4Net,
        addr: Ipv4Addr,
        pos: Pos,
        node: Option<&str>,
        field: &str,
    ) {
        let d = if !net.contains(addr) {
            Diagnostic::error(
                Code::OutsideNetwork,
                self.file,
                format!(
                    "{addr} is outside the cluster network {net} (from cluster.gateway and cluster.prefix_length)"
                ),
            )
        } else if addr == net.network || addr == net.broadcast() {
            let which = if addr == net.network {
                "network"
            } else {
                "broadcast"
            };
            Diagnostic::error(
                Code::ReservedAddress,
                self.file,
                format!("{addr} is the {which} address of {net}; use a host address"),
            )
        } else {
            return;
        };
        self.push(d.at(pos).on_node(node).field(field));
    }

    fn cluster(&mut self, raw: Option<&Spanned<RawCluster>>) -> ClusterDraft {
        let pos = raw.map(|r| r.pos);
        let empty = RawCluster::default();
        let c = raw.map_or(&empty, |r| &r.value);
        let name = match &c.name {
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
        };
        let talos_version = match &c.talos_version {
            None => {
                self.missing(pos, None, "cluster.talos_version", " (such as v1.13.8)");
                None
            }
            Some(v) => self.version(v, "cluster.talos_version"),
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
        if let (Some(net), Some(addr), Some(v)) = (network, vip, &c.vip) {
            self.in_network(net, addr, v.pos, None, "cluster.vip");
        }
        let nameservers = c.nameservers.as_ref().map_or(Some(Vec::new()), |list| {
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
        });
        let install_disk = match &c.install_disk {
            None => Some("/dev/sda".to_owned()),
            Some(d) if d.value.starts_with("/dev/") && d.value.len() > 5 => Some(d.value.clone()),
            Some(d) => {
                let msg = format!(
                    "cluster.install_disk must be a device path such as /dev/sda, found {:?}",
                    d.value
                );
                self.error(Code::InvalidValue, d.pos, "cluster.install_disk", msg);
                None
            }
        };
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

    fn proxmox(
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
        let required = |cx: &mut Self, v: &Option<Spanned<String>>, field: &str, hint: &str| match v
        {
            Some(s) if !s.value.trim().is_empty() => Some(s.value.clone()),
            Some(s) => {
                cx.error(
                    Code::InvalidValue,
                    s.pos,
                    field,
                    format!("`{field}` must not be empty"),
                );
                None
            }
            None => {
                cx.missing(pos, None, field, hint);
                None
            }
        };
        let node = required(
            self,
            &p.node,
            "proxmox.node",
            " (the Proxmox host VMs go to by default)",
        );
        let datastore = required(
            self,
            &p.datastore,
            "proxmox.datastore",
            " (the storage for VM disks, such as local-lvm)",
        );
        let insecure = p.insecure.as_ref().is_some_and(|i| i.value);
        if let Some(i) = p.insecure.as_ref().filter(|i| i.value) {
            if p.ca_file.is_some() || p.fingerprint.is_some() {
                let msg = "proxmox.insecure turns certificate checks off, so ca_file and fingerprint would be ignored; use one of them".to_owned();
                self.error(Code::ConflictingFields, i.pos, "proxmox.insecure", msg);
            }
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
        let text = |v: &Option<Spanned<String>>, default: &str| {
            v.as_ref().map_or(default.to_owned(), |s| s.value.clone())
        };
        Some(ProxmoxSettings {
            endpoint: endpoint?,
            node: node?,
            datastore: datastore?,
            image_storage: text(&p.image_storage, "local"),
            bridge: text(&p.bridge, "vmbr0"),
            pool: p.pool.as_ref().map(|s| s.value.clone()),
            insecure,
            ca_file: p.ca_file.as_ref().map(|f| resolve(base, &f.value)),
            fingerprint: fingerprint?,
        })
    }

    fn schematics(&mut self, raw: &RawTopology) -> IndexMap<String, SchematicSpec> {
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

    fn pci_mappings(&mut self, raw: &RawTopology) -> IndexMap<String, PciMapping> {
        let mut out = IndexMap::new();
        for entry in raw.pci_mappings.iter().flat_map(|s| &s.value) {
            let name = &entry.name.value;
            let m = &entry.value;
            let base = format!("pci_mappings.{name}");
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
                Some(g) => u32::try_from(g.value).ok(),
            };
            if let (Some(path), Some(id), Some(iommu_group), Some(subsystem_id)) =
                (path, id, iommu_group, subsystem_id)
            {
                let mapping = PciMapping {
                    path,
                    id,
                    iommu_group,
                    subsystem_id,
                    comment: m.comment.as_ref().map(|c| c.value.clone()),
                    node: m.node.as_ref().map(|n| n.value.clone()),
                };
                out.insert(name.clone(), mapping);
            }
        }
        out
    }

    fn state(&mut self, raw: Option<&Spanned<RawState>>, base: &Path) -> Option<StateSettings> {
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
                let address = match &s.address {
                    None => {
                        self.missing(
                            Some(raw.pos),
                            None,
                            "state.address",
                            " for the http backend (the state URL)",
                        );
                        None
                    }
                    Some(a) => self.url(a, "state.address", false),
                };
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
                    address: address?,
                    lock_address: lock_address.map_or(Some(None), |a| a.map(Some))?,
                    unlock_address: unlock_address.map_or(Some(None), |a| a.map(Some))?,
                    lock_method: lock_method?,
                    unlock_method: unlock_method?,
                })
            }
            other => {
                let pos = s.backend.as_ref().map_or(raw.pos, |b| b.pos);
                let msg = format!("state.backend must be `local` or `http`, found {other:?}");
                self.error(Code::InvalidValue, pos, "state.backend", msg);
                None
            }
        }
    }
}

/// `p` from the file against the file's folder `base`, with `.` and `name/..`
/// removed lexically (no file system access, so symlinks are not followed):
/// `examples/homelab` + `../../patches` is `patches`.
pub fn resolve(base: &Path, p: &str) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    let joined = base.join(p);
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Code, Environment, Role, Severity, StateSettings, Topology, parse};
    use std::path::{Path, PathBuf};

    const BASE: &str = "\
cluster:
  name: lab
  talos_version: v1.13.8
  kubernetes_version: v1.36.2
  vip: 10.0.0.100
  gateway: 10.0.0.1
proxmox:
  endpoint: https://pve.test:8006
  node: pve
  datastore: local-lvm
schematics:
  base:
    extensions: [siderolabs/qemu-guest-agent]
default_schematic: base
pci_mappings:
  gpu:
    path: \"0000:01:00\"
    id: \"10de:2507\"
    iommu_group: 10
    subsystem_id: \"10de:2507\"
nodes:
  - hostname: cp-01
    ip: 10.0.0.101
    cores: 2
    memory: 4096
  - hostname: w-01
    ip: 10.0.0.102
    role: worker
    cores: 2
    memory: 2048
    hostpci:
      - device: hostpci0
        mapping: gpu
";

    fn env() -> Environment {
        Environment::default()
    }

    fn valid(text: &str, env: &Environment) -> Topology {
        let loaded = parse(text, Path::new("dir/cluster.yaml"), env);
        assert!(loaded.diagnostics.is_empty(), "{:#?}", loaded.diagnostics);
        loaded.topology.expect("a topology")
    }

    /// Diagnostics (code, field) for BASE with `from` replaced by `to`.
    fn problems(from: &str, to: &str) -> Vec<(Code, Severity, Option<String>)> {
        assert!(BASE.contains(from), "BASE has no {from:?}");
        let text = BASE.replacen(from, to, 1);
        let loaded = parse(&text, Path::new("cluster.yaml"), &env());
        if loaded.diagnostics.iter().any(|d| d.is_error()) {
            assert!(loaded.topology.is_none());
        }
        loaded
            .diagnostics
            .into_iter()
            .map(|d| (d.code, d.severity, d.field))
            .collect()
    }

    #[test]
    fn base_topology_is_valid_with_defaults_applied() {
        let t = valid(BASE, &env());
        assert_eq!(t.cluster.endpoint, "https://10.0.0.100:6443");
        assert_eq!(t.cluster.prefix_length, 24);
        assert_eq!(t.cluster.install_disk, "/dev/sda");
        assert!(t.cluster.nameservers.is_empty());
        assert_eq!(t.proxmox.image_storage, "local");
        assert_eq!(t.proxmox.bridge, "vmbr0");
        assert_eq!(t.image_factory_url, "https://factory.talos.dev");
        assert_eq!(t.patches_dir, PathBuf::from("dir/patches"));
        assert_eq!(t.state, StateSettings::Local { path: None });
        let cp = &t.nodes[0];
        assert_eq!(cp.role, Role::Controlplane);
        assert_eq!(cp.vm_id.0, 101);
        assert_eq!(cp.disk_size, 40);
        assert_eq!(cp.proxmox_node, "pve");
        assert_eq!(cp.schematic.as_deref(), Some("base"));
        let h = &t.nodes[1].hostpci[0];
        assert_eq!(
            (h.device(), h.pcie, h.rombar, h.xvga),
            ("hostpci0".to_owned(), true, true, false)
        );
    }

    #[test]
    fn endpoint_defaults_to_first_controlplane_without_vip() {
        let t = valid(&BASE.replace("  vip: 10.0.0.100\n", ""), &env());
        assert_eq!(t.cluster.endpoint, "https://10.0.0.101:6443");
    }

    #[test]
    fn proxmox_endpoint_comes_from_the_environment_when_the_file_has_none() {
        let text = BASE.replace("  endpoint: https://pve.test:8006\n", "");
        let env = Environment {
            proxmox_endpoint: Some("https://pve.env:8006/".into()),
        };
        assert_eq!(valid(&text, &env).proxmox.endpoint, "https://pve.env:8006");
        // The file wins over the environment.
        assert_eq!(valid(BASE, &env).proxmox.endpoint, "https://pve.test:8006");
        let missing = parse(&text, Path::new("c.yaml"), &Environment::default());
        assert_eq!(missing.diagnostics[0].code, Code::MissingField);
        assert_eq!(
            missing.diagnostics[0].field.as_deref(),
            Some("proxmox.endpoint")
        );
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let text =
            format!("{BASE}patches_dir: ../shared/patches\nstate:\n  path: state/lab.json\n");
        let t = valid(&text, &env());
        assert_eq!(t.patches_dir, PathBuf::from("shared/patches"));
        assert_eq!(
            t.state,
            StateSettings::Local {
                path: Some(PathBuf::from("dir/state/lab.json"))
            }
        );
        assert_eq!(super::resolve(Path::new(""), "."), PathBuf::from("."));
    }

    #[test]
    fn http_state_backend_defaults_its_methods() {
        let text = format!(
            "{BASE}state:\n  backend: http\n  address: https://gitlab.example/state\n  lock_address: https://gitlab.example/state/lock\n"
        );
        match valid(&text, &env()).state {
            StateSettings::Http {
                address,
                lock_address,
                unlock_address,
                lock_method,
                unlock_method,
            } => {
                assert_eq!(address, "https://gitlab.example/state");
                assert_eq!(
                    lock_address.as_deref(),
                    Some("https://gitlab.example/state/lock")
                );
                assert_eq!(unlock_address, None);
                assert_eq!(
                    (lock_method.as_str(), unlock_method.as_str()),
                    ("LOCK", "UNLOCK")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn schematic_id_is_accepted_as_given() {
        let id = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
        let text = BASE.replace(
            "    extensions: [siderolabs/qemu-guest-agent]",
            &format!("    id: {id}"),
        );
        let t = valid(&text, &env());
        assert_eq!(t.schematics["base"], super::SchematicSpec::Id(id.into()));
    }

    /// One row per validation: the change to BASE, and the code and field it must give.
    #[test]
    fn each_validation_reports_its_code_and_field() {
        let cases: &[(&str, &str, Code, &str)] = &[
            (
                "role: worker",
                "role: boss",
                Code::InvalidRole,
                "nodes[1].role",
            ),
            (
                "hostname: w-01",
                "hostname: cp-01",
                Code::DuplicateHostname,
                "nodes[1].hostname",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0.101\n    vm_id: 102",
                Code::DuplicateIp,
                "nodes[1].ip",
            ),
            (
                "  - hostname: cp-01\n    ip: 10.0.0.101\n",
                "  - hostname: cp-01\n    role: worker\n    ip: 10.0.0.101\n",
                Code::NoControlplane,
                "nodes",
            ),
            (
                "vip: 10.0.0.100",
                "vip: 10.0.0.102",
                Code::VipIsNodeIp,
                "nodes[1].ip",
            ),
            (
                "mapping: gpu",
                "mapping: gpu1",
                Code::UnknownPciMapping,
                "nodes[1].hostpci[0].mapping",
            ),
            (
                "hostname: w-01",
                "hostname: W-01",
                Code::InvalidHostname,
                "nodes[1].hostname",
            ),
            (
                "name: lab",
                "name: my_lab",
                Code::InvalidHostname,
                "cluster.name",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0",
                Code::InvalidIpv4,
                "nodes[1].ip",
            ),
            (
                "gateway: 10.0.0.1",
                "gateway: 10.0.0.1\n  nameservers: [x]",
                Code::InvalidIpv4,
                "cluster.nameservers[0]",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.1.102",
                Code::OutsideNetwork,
                "nodes[1].ip",
            ),
            (
                "vip: 10.0.0.100",
                "vip: 10.9.0.100",
                Code::OutsideNetwork,
                "cluster.vip",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0.255\n    vm_id: 255",
                Code::ReservedAddress,
                "nodes[1].ip",
            ),
            (
                "gateway: 10.0.0.1",
                "gateway: 10.0.0.0",
                Code::ReservedAddress,
                "cluster.gateway",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0.102\n    vm_id: 101",
                Code::DuplicateVmid,
                "nodes[1].vm_id",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0.102\n    vm_id: 42",
                Code::VmidOutOfRange,
                "nodes[1].vm_id",
            ),
            (
                "ip: 10.0.0.102",
                "ip: 10.0.0.12",
                Code::VmidRequired,
                "nodes[1].vm_id",
            ),
            (
                "device: hostpci0",
                "device: hostpci16",
                Code::InvalidHostpciDevice,
                "nodes[1].hostpci[0].device",
            ),
            (
                "        mapping: gpu\n",
                "        mapping: gpu\n      - device: hostpci0\n        mapping: gpu\n",
                Code::DuplicateHostpciDevice,
                "nodes[1].hostpci[1].device",
            ),
            (
                "    memory: 4096\n",
                "    memory: 4096\n    hostpci: [{device: hostpci1, mapping: gpu}]\n",
                Code::PciMappingShared,
                "nodes[1].hostpci[0].mapping",
            ),
            (
                "    subsystem_id: \"10de:2507\"\n",
                "    subsystem_id: \"10de:2507\"\n    node: pve9\n",
                Code::PciMappingWrongHost,
                "nodes[1].hostpci[0].mapping",
            ),
            (
                "default_schematic: base",
                "default_schematic: nvidia",
                Code::UnknownSchematic,
                "default_schematic",
            ),
            (
                "    memory: 4096\n",
                "    memory: 4096\n    schematic: gpu\n",
                Code::UnknownSchematic,
                "nodes[0].schematic",
            ),
            (
                "[siderolabs/qemu-guest-agent]",
                "[qemu-guest-agent]",
                Code::InvalidExtension,
                "schematics.base.extensions[0]",
            ),
            (
                "    extensions: [siderolabs/qemu-guest-agent]",
                "    id: abc",
                Code::InvalidSchematicId,
                "schematics.base.id",
            ),
            (
                "talos_version: v1.13.8",
                "talos_version: v1.13",
                Code::InvalidVersion,
                "cluster.talos_version",
            ),
            (
                "kubernetes_version: v1.36.2",
                "kubernetes_version: 1.36.2",
                Code::InvalidVersion,
                "cluster.kubernetes_version",
            ),
            (
                "memory: 4096",
                "memory: 2047",
                Code::MemoryBelowMinimum,
                "nodes[0].memory",
            ),
            (
                "memory: 2048",
                "memory: 1023",
                Code::MemoryBelowMinimum,
                "nodes[1].memory",
            ),
            (
                "    memory: 4096\n",
                "    memory: 4096\n    disk_size: 9\n",
                Code::DiskBelowMinimum,
                "nodes[0].disk_size",
            ),
            (
                "cores: 2\n    memory: 4096",
                "cores: 2\n    memroy: 4096",
                Code::UnknownKey,
                "nodes[0].memroy",
            ),
            (
                "cores: 2\n    memory: 4096",
                "cores: [2]\n    memory: 4096",
                Code::WrongType,
                "nodes[0].cores",
            ),
            (
                "  datastore: local-lvm\n",
                "",
                Code::MissingField,
                "proxmox.datastore",
            ),
        ];
        for (from, to, code, field) in cases {
            let got = problems(from, to);
            assert!(
                got.iter().any(|(c, s, f)| c == code
                    && *s == Severity::Error
                    && f.as_deref() == Some(*field)),
                "{} ({}): replacing {from:?} gave {got:?}",
                code.code(),
                code.name()
            );
        }
    }

    #[test]
    fn even_controlplane_count_is_a_warning() {
        let got = problems("role: worker", "role: controlplane");
        assert_eq!(
            got,
            [(
                Code::EvenControlplanes,
                Severity::Warning,
                Some("nodes".into())
            )]
        );
    }

    #[test]
    fn controlplanes_crowded_on_one_host_is_a_warning() {
        let three = BASE.replacen("role: worker", "role: controlplane", 1)
            + "  - {hostname: cp-03, ip: 10.0.0.103, cores: 2, memory: 4096, proxmox_node: pve2}\n";
        let loaded = parse(&three, Path::new("c.yaml"), &env());
        let codes: Vec<Code> = loaded.diagnostics.iter().map(|d| d.code).collect();
        assert_eq!(codes, [Code::ControlplanesShareHost]);
        assert!(loaded.topology.is_some(), "warnings do not fail validation");
        // Spread over three hosts: no warning.
        let spread = three.replacen(
            "    role: controlplane\n",
            "    role: controlplane\n    proxmox_node: pve3\n",
            1,
        );
        assert!(
            parse(&spread, Path::new("c.yaml"), &env())
                .diagnostics
                .is_empty()
        );
    }

    #[test]
    fn a_wrong_type_is_not_also_reported_missing() {
        let got = problems("cores: 2\n    memory: 4096", "cores: 2\n    memory: lots");
        assert_eq!(
            got,
            [(
                Code::WrongType,
                Severity::Error,
                Some("nodes[0].memory".into())
            )]
        );
    }
}
