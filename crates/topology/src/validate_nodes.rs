//! The `nodes:` checks: each node on its own (names, addresses, sizes, VM ID,
//! schematic, PCI devices), then across nodes (duplicates, control-plane count
//! and placement, PCI mapping ownership).

use super::check::{Cx, known};
use super::raw::{RawNode, Spanned};
use super::syntax::{self, Ipv4Net};
use crate::model::{HostPci, MIN_DISK_GIB, Node, PciMapping, SchematicSpec};
use crate::syntax::Vmid;
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use talosprov_base::diagnostics::{Code, Diagnostic, Pos, did_you_mean};
use talosprov_base::role::Role;

/// What the node checks need from the rest of the file.
pub(super) struct NodeContext<'a> {
    /// The cluster network, when the gateway and prefix are valid.
    pub network: Option<Ipv4Net>,
    /// The VIP, when valid.
    pub vip: Option<Ipv4Addr>,
    /// `proxmox.node`, when given.
    pub proxmox_node: Option<&'a str>,
    /// The valid schematics.
    pub schematics: &'a IndexMap<String, SchematicSpec>,
    /// The valid `default_schematic`.
    pub default_schematic: Option<&'a str>,
    /// The valid PCI mappings.
    pub pci_mappings: &'a IndexMap<String, PciMapping>,
    /// Every schematic name declared, valid or not.
    pub declared_schematics: Vec<&'a String>,
    /// Every PCI mapping name declared, valid or not.
    pub declared_pci_mappings: Vec<&'a String>,
    /// The cluster's name (it seeds derived MACs).
    pub cluster: &'a str,
    /// `proxmox.bridge`, the default of a NIC's `bridge`.
    pub bridge: &'a str,
    /// `proxmox.datastore`, the default of a data disk's `datastore`.
    pub datastore: &'a str,
    /// `proxmox.networks`, valid.
    pub default_networks: &'a [crate::model::Network],
    /// `proxmox.disks`, valid.
    pub default_disks: &'a [crate::model::DataDisk],
    /// `proxmox.ha`, valid.
    pub default_ha: Option<&'a super::model::Ha>,
}

/// A PCI mapping a node uses: its name as written, and the field path
/// (`nodes[2].hostpci[0].mapping`) for a diagnostic.
type UsedMapping = (Spanned<String>, String);

/// What one node contributes to the checks across nodes.
struct Draft {
    /// The hostname as written (for naming the node in diagnostics).
    label: Option<String>,
    hostname: Option<Spanned<String>>,
    ip: Option<Spanned<Ipv4Addr>>,
    role: Option<Role>,
    vm_id: Option<(Spanned<u32>, bool)>,
    proxmox_node: Option<String>,
    mappings: Vec<UsedMapping>,
    /// Each NIC's MAC with where it comes from (the `mac` key, else the
    /// node's `networks` or the default list) and its field path.
    macs: Vec<(String, Pos, String)>,
}

/// Validate every node, then the rules across nodes. `None` when any node has
/// an error or `nodes` is missing.
pub(super) fn nodes(
    cx: &mut Cx<'_>,
    raw: Option<&Spanned<Vec<Spanned<RawNode>>>>,
    ctx: &NodeContext<'_>,
) -> Option<Vec<Node>> {
    let Some(raw) = raw else {
        cx.missing(None, None, "nodes", " (the list of Talos nodes)");
        return None;
    };
    if let Some(over) = raw.value.get(talosprov_base::limits::MAX_NODES) {
        let msg = format!(
            "the topology has {} nodes, over talosprov's limit of {} per cluster",
            raw.value.len(),
            talosprov_base::limits::MAX_NODES
        );
        let field = format!("nodes[{}]", talosprov_base::limits::MAX_NODES);
        cx.error(Code::InputLimit, over.pos, &field, msg);
        return None;
    }
    let mut drafts = Vec::new();
    let mut nodes = Vec::new();
    for (i, n) in raw.value.iter().enumerate() {
        let (draft, node) = one(cx, i, n, ctx);
        drafts.push(draft);
        nodes.push(node);
    }
    across(cx, raw.pos, &drafts, ctx);
    nodes.into_iter().collect()
}

/// Where one node's diagnostics point: its index in `nodes` and its
/// hostname as written.
#[derive(Clone, Copy)]
struct At<'n> {
    i: usize,
    node: Option<&'n str>,
}

impl At<'_> {
    /// The field path of `key` under this node, such as `nodes[2].ip`.
    fn field(&self, key: &str) -> String {
        format!("nodes[{}].{key}", self.i)
    }

    /// Report an error on this node's `key`.
    fn err(&self, cx: &mut Cx<'_>, code: Code, pos: Pos, key: &str, msg: String) {
        cx.push(
            Diagnostic::error(code, cx.file, msg)
                .at(pos)
                .on_node(self.node)
                .field(self.field(key)),
        );
    }
}

/// Check one node's fields in order; gives what the checks across nodes need
/// and the node, `None` when any of its fields has an error.
fn one(
    cx: &mut Cx<'_>,
    i: usize,
    n: &Spanned<RawNode>,
    ctx: &NodeContext<'_>,
) -> (Draft, Option<Node>) {
    let r = &n.value;
    let label = r.hostname.as_ref().map(|h| h.value.clone());
    let at = At {
        i,
        node: label.as_deref(),
    };
    let hostname = check_hostname(cx, at, n);
    let ip = check_ip(cx, at, n, ctx);
    let role = check_role(cx, at, r);
    let cores = check_cores(cx, at, n);
    let memory = check_memory(cx, at, n, role);
    let disk_size = check_disk_size(cx, at, r);
    let vm_id = check_vm_id(cx, at, r, ip.as_ref());
    let proxmox_node = check_proxmox_node(cx, at, r, ctx);
    let schematic = check_schematic(cx, at, r, ctx);
    let (hostpci, mappings) = check_hostpci(cx, at, r, ctx, proxmox_node.as_deref());
    let tags = check_tags(cx, at, r);
    let networks = check_networks(cx, at, n, ctx);
    let disks = check_disks(cx, at, r, ctx);
    let ha = match &r.ha {
        Some(raw) => {
            let field = at.field("ha");
            let place = super::validate_devices::Place {
                field: &field,
                node: at.node,
            };
            super::validate_devices::ha(cx, raw, place).map(Some)
        }
        None => Some(ctx.default_ha.cloned()),
    };
    let macs = networks
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(k, net)| {
            let given = r
                .networks
                .as_ref()
                .and_then(|l| l.value.get(k))
                .and_then(|e| e.value.mac.as_ref().map(|m| m.pos));
            let pos = given
                .or(r.networks.as_ref().map(|l| l.pos))
                .unwrap_or(n.pos);
            Some((
                net.mac.clone()?,
                pos,
                at.field(&format!("networks[{k}].mac")),
            ))
        })
        .collect();

    let draft = Draft {
        label: label.clone(),
        hostname: hostname.clone(),
        ip: ip.clone(),
        role,
        vm_id: vm_id.clone(),
        proxmox_node: proxmox_node.clone(),
        mappings,
        macs,
    };
    let built = (|| {
        Some(Node {
            hostname: hostname?.value,
            ip: ip?.value,
            role: role?,
            cores: cores?,
            memory: memory?,
            disk_size: disk_size?,
            vm_id: Vmid(vm_id?.0.value),
            proxmox_node: proxmox_node?,
            schematic: schematic?,
            hostpci: hostpci?,
            tags: tags?,
            pool: None,
            networks: networks?,
            disks: disks?,
            ha: ha?,
        })
    })();
    (draft, built)
}

/// `hostname`: required, an RFC 1123 label.
fn check_hostname(cx: &mut Cx<'_>, at: At<'_>, n: &Spanned<RawNode>) -> Option<Spanned<String>> {
    match &n.value.hostname {
        None => {
            cx.missing(Some(n.pos), None, &at.field("hostname"), "");
            None
        }
        Some(h) if syntax::is_dns_label(&h.value) => Some(h.clone()),
        Some(h) => {
            let msg = format!(
                "hostname {:?} must be a lowercase RFC 1123 label: a-z, 0-9 and '-', not starting or ending with '-', at most 63 characters",
                h.value
            );
            at.err(cx, Code::InvalidHostname, h.pos, "hostname", msg);
            None
        }
    }
}

/// `ip`: required, an IPv4 address, inside the cluster network when that is
/// known.
fn check_ip(
    cx: &mut Cx<'_>,
    at: At<'_>,
    n: &Spanned<RawNode>,
    ctx: &NodeContext<'_>,
) -> Option<Spanned<Ipv4Addr>> {
    let Some(s) = &n.value.ip else {
        cx.missing(
            Some(n.pos),
            at.node,
            &at.field("ip"),
            " (the node's static IPv4 address)",
        );
        return None;
    };
    match s.value.parse::<Ipv4Addr>() {
        Ok(a) => {
            if let Some(net) = ctx.network {
                cx.in_network(net, a, s.pos, at.node, &at.field("ip"));
            }
            Some(Spanned::new(a, s.pos))
        }
        Err(_) => {
            let msg = format!(
                "ip must be an IPv4 address such as 192.168.1.121, found {:?}",
                s.value
            );
            at.err(cx, Code::InvalidIpv4, s.pos, "ip", msg);
            None
        }
    }
}

/// `role`: `controlplane` (the default) or `worker`.
fn check_role(cx: &mut Cx<'_>, at: At<'_>, r: &RawNode) -> Option<Role> {
    match &r.role {
        None => Some(Role::Controlplane),
        Some(s) => Role::parse(&s.value).or_else(|| {
            let msg = format!(
                "role must be `controlplane` or `worker`, found {:?}{}",
                s.value,
                did_you_mean(&s.value, ["controlplane", "worker"])
            );
            at.err(cx, Code::InvalidRole, s.pos, "role", msg);
            None
        }),
    }
}

/// `cores`: required, 1 to 1024 vCPUs.
fn check_cores(cx: &mut Cx<'_>, at: At<'_>, n: &Spanned<RawNode>) -> Option<u32> {
    match &n.value.cores {
        None => {
            cx.missing(
                Some(n.pos),
                at.node,
                &at.field("cores"),
                " (the number of vCPU cores)",
            );
            None
        }
        Some(c) if (1..=1024).contains(&c.value) => u32::try_from(c.value).ok(),
        Some(c) => {
            at.err(
                cx,
                Code::OutOfRange,
                c.pos,
                "cores",
                format!("cores must be 1 to 1024, found {}", c.value),
            );
            None
        }
    }
}

/// `memory`: required, in MiB, at least Talos's minimum for the role (when
/// the role is valid).
fn check_memory(
    cx: &mut Cx<'_>,
    at: At<'_>,
    n: &Spanned<RawNode>,
    role: Option<Role>,
) -> Option<u32> {
    match (&n.value.memory, role) {
        (None, _) => {
            cx.missing(
                Some(n.pos),
                at.node,
                &at.field("memory"),
                " (MiB, such as 4096)",
            );
            None
        }
        (Some(m), Some(role)) if m.value < u64::from(role.min_memory_mib()) => {
            let what = match role {
                Role::Controlplane => "a control plane",
                Role::Worker => "a worker",
            };
            let msg = format!(
                "memory {} MiB is below Talos's minimum of {} MiB for {what}",
                m.value,
                role.min_memory_mib()
            );
            at.err(cx, Code::MemoryBelowMinimum, m.pos, "memory", msg);
            None
        }
        (Some(m), _) => u32::try_from(m.value).ok().or_else(|| {
            at.err(
                cx,
                Code::OutOfRange,
                m.pos,
                "memory",
                format!("memory {} MiB is too large", m.value),
            );
            None
        }),
    }
}

/// `disk_size`: in GiB, 40 by default, at least Talos's minimum.
fn check_disk_size(cx: &mut Cx<'_>, at: At<'_>, r: &RawNode) -> Option<u32> {
    match &r.disk_size {
        None => Some(40),
        Some(d) if d.value < u64::from(MIN_DISK_GIB) => {
            let msg = format!(
                "disk_size {} GiB is below Talos's minimum of {MIN_DISK_GIB} GiB",
                d.value
            );
            at.err(cx, Code::DiskBelowMinimum, d.pos, "disk_size", msg);
            None
        }
        Some(d) => u32::try_from(d.value).ok().or_else(|| {
            at.err(
                cx,
                Code::OutOfRange,
                d.pos,
                "disk_size",
                format!("disk_size {} GiB is too large", d.value),
            );
            None
        }),
    }
}

/// `vm_id`: in Proxmox's range; by default the IP's last octet, which must
/// then be in range too. The flag is true for an ID derived from the IP.
fn check_vm_id(
    cx: &mut Cx<'_>,
    at: At<'_>,
    r: &RawNode,
    ip: Option<&Spanned<Ipv4Addr>>,
) -> Option<(Spanned<u32>, bool)> {
    match (&r.vm_id, ip) {
        (Some(v), _) if (u64::from(Vmid::MIN)..=u64::from(Vmid::MAX)).contains(&v.value) => {
            Some((Spanned::new(v.value as u32, v.pos), false))
        }
        (Some(v), _) => {
            let msg = format!(
                "vm_id {} is outside Proxmox's range {}..{}",
                v.value,
                Vmid::MIN,
                Vmid::MAX
            );
            at.err(cx, Code::VmidOutOfRange, v.pos, "vm_id", msg);
            None
        }
        (None, Some(ip)) if u32::from(ip.value.octets()[3]) >= Vmid::MIN => {
            Some((Spanned::new(u32::from(ip.value.octets()[3]), ip.pos), true))
        }
        (None, Some(ip)) => {
            let msg = format!(
                "vm_id is required: the default, the IP's last octet ({}), is below {}",
                ip.value.octets()[3],
                Vmid::MIN
            );
            at.err(cx, Code::VmidRequired, ip.pos, "vm_id", msg);
            None
        }
        (None, None) => None,
    }
}

/// `proxmox_node`: a Proxmox node name, by default `proxmox.node`.
fn check_proxmox_node(
    cx: &mut Cx<'_>,
    at: At<'_>,
    r: &RawNode,
    ctx: &NodeContext<'_>,
) -> Option<String> {
    match &r.proxmox_node {
        None => ctx.proxmox_node.map(str::to_owned),
        Some(p) if syntax::is_pve_node_name(&p.value) => Some(p.value.clone()),
        Some(p) => {
            let msg = format!(
                "proxmox_node must be a Proxmox node name: letters, digits and '-', found {:?}",
                p.value
            );
            at.err(cx, Code::InvalidValue, p.pos, "proxmox_node", msg);
            None
        }
    }
}

/// `schematic`: a declared schematic, by default `default_schematic`. The
/// outer `None` is an error (a schematic declared but invalid reports its
/// own); the inner one means no schematic.
fn check_schematic(
    cx: &mut Cx<'_>,
    at: At<'_>,
    r: &RawNode,
    ctx: &NodeContext<'_>,
) -> Option<Option<String>> {
    match &r.schematic {
        None => Some(ctx.default_schematic.map(str::to_owned)),
        Some(s) if ctx.schematics.contains_key(&s.value) => Some(Some(s.value.clone())),
        Some(s) if ctx.declared_schematics.contains(&&s.value) => None,
        Some(s) => {
            let msg = format!(
                "schematic `{}` is not declared under `schematics`{}",
                s.value,
                known(ctx.declared_schematics.iter().copied())
            );
            at.err(cx, Code::UnknownSchematic, s.pos, "schematic", msg);
            None
        }
    }
}

/// `hostpci`: each entry's device and mapping. Gives the devices (`None`
/// when any entry has an error) and every valid mapping used, with its field
/// path, for the check that a device goes to one VM only.
fn check_hostpci(
    cx: &mut Cx<'_>,
    at: At<'_>,
    r: &RawNode,
    ctx: &NodeContext<'_>,
    proxmox_node: Option<&str>,
) -> (Option<Vec<HostPci>>, Vec<UsedMapping>) {
    let mut hostpci = Vec::new();
    let mut mappings = Vec::new();
    let mut devices: HashMap<u8, u32> = HashMap::new();
    let mut pci_ok = true;
    for (j, h) in r.hostpci.iter().flat_map(|h| &h.value).enumerate() {
        let entry = PciEntry { at, j, pos: h.pos };
        let index = check_hostpci_device(cx, &entry, h.value.device.as_ref(), &mut devices);
        let mapping =
            check_hostpci_mapping(cx, &entry, h.value.mapping.as_ref(), ctx, proxmox_node);
        if let Some((m, _)) = &mapping {
            mappings.push((m.clone(), at.field(&entry.key("mapping"))));
        }
        let flag =
            |v: &Option<Spanned<bool>>, default: bool| v.as_ref().map_or(default, |b| b.value);
        match (index, mapping) {
            (Some(index), Some((_, mapping))) => hostpci.push(HostPci {
                index,
                mapping,
                pcie: flag(&h.value.pcie, true),
                rombar: flag(&h.value.rombar, true),
                xvga: flag(&h.value.xvga, false),
            }),
            _ => pci_ok = false,
        }
    }
    (pci_ok.then_some(hostpci), mappings)
}

/// One `hostpci` entry being checked: its node, index and position.
struct PciEntry<'n> {
    at: At<'n>,
    j: usize,
    pos: Pos,
}

impl PciEntry<'_> {
    /// The key of `k` under this entry, such as `hostpci[0].device`.
    fn key(&self, k: &str) -> String {
        format!("hostpci[{}].{k}", self.j)
    }
}

/// A `hostpci` entry's `device`: required, `hostpci0` to `hostpci15`, not
/// used twice on the node (`devices`: index to the line that used it).
fn check_hostpci_device(
    cx: &mut Cx<'_>,
    entry: &PciEntry<'_>,
    device: Option<&Spanned<String>>,
    devices: &mut HashMap<u8, u32>,
) -> Option<u8> {
    let at = entry.at;
    let Some(d) = device else {
        cx.missing(
            Some(entry.pos),
            at.node,
            &at.field(&entry.key("device")),
            " (hostpci0 to hostpci15)",
        );
        return None;
    };
    let Some(idx) = syntax::hostpci_index(&d.value) else {
        let msg = format!("device must be hostpci0 to hostpci15, found {:?}", d.value);
        at.err(
            cx,
            Code::InvalidHostpciDevice,
            d.pos,
            &entry.key("device"),
            msg,
        );
        return None;
    };
    if let Some(line) = devices.insert(idx, d.pos.line) {
        let msg = format!("device hostpci{idx} is already used by this node (line {line})");
        at.err(
            cx,
            Code::DuplicateHostpciDevice,
            d.pos,
            &entry.key("device"),
            msg,
        );
        None
    } else {
        Some(idx)
    }
}

/// A `hostpci` entry's `mapping`: required, a valid `pci_mappings` name
/// (one declared but invalid reports its own error), whose device is on the
/// node's Proxmox host. Gives the name as written and as stored.
fn check_hostpci_mapping(
    cx: &mut Cx<'_>,
    entry: &PciEntry<'_>,
    mapping: Option<&Spanned<String>>,
    ctx: &NodeContext<'_>,
    proxmox_node: Option<&str>,
) -> Option<(Spanned<String>, String)> {
    let at = entry.at;
    let Some(m) = mapping else {
        cx.missing(
            Some(entry.pos),
            at.node,
            &at.field(&entry.key("mapping")),
            " (a pci_mappings name)",
        );
        return None;
    };
    match ctx.pci_mappings.get(&m.value) {
        None if ctx.declared_pci_mappings.contains(&&m.value) => None,
        None => {
            let msg = format!(
                "mapping `{}` is not declared under `pci_mappings`{}",
                m.value,
                known(ctx.declared_pci_mappings.iter().copied())
            );
            at.err(
                cx,
                Code::UnknownPciMapping,
                m.pos,
                &entry.key("mapping"),
                msg,
            );
            None
        }
        Some(pm) => {
            // A mapping without `node` is made on `proxmox.node`.
            let hosts = ctx.proxmox_node.map(|d| pm.hosts(d)).unwrap_or_default();
            if let Some(have) = proxmox_node
                && !hosts.is_empty()
                && !hosts.iter().any(|h| h == have)
            {
                let whence = if pm.node.is_none() {
                    " (`proxmox.node`: the mapping names no `node`)"
                } else {
                    ""
                };
                let want = hosts.join("`, `");
                let msg = if hosts.len() > 1 {
                    format!(
                        "mapping `{}` has devices on Proxmox hosts `{want}`, but this node runs on `{have}`; set proxmox_node to one of them, or add a `map` entry for {have}",
                        m.value
                    )
                } else {
                    format!(
                        "mapping `{}` is a device on Proxmox host `{want}`{whence}, but this node runs on `{have}`; set proxmox_node: {want}, or the mapping's node",
                        m.value
                    )
                };
                at.err(
                    cx,
                    Code::PciMappingWrongHost,
                    m.pos,
                    &entry.key("mapping"),
                    msg,
                );
            }
            Some((m.clone(), m.value.clone()))
        }
    }
}

/// `tags`: each in Proxmox's tag format; `None` when any is not.
fn check_tags(cx: &mut Cx<'_>, at: At<'_>, r: &RawNode) -> Option<Vec<String>> {
    let mut tags = Vec::new();
    let mut tags_ok = true;
    for (j, t) in r.tags.iter().flat_map(|t| &t.value).enumerate() {
        if syntax::is_proxmox_tag(&t.value) {
            tags.push(t.value.clone());
        } else {
            let msg = format!(
                "tag {:?} must match Proxmox's tag format: letters, digits, '_', '-', '+' and '.', not starting with '-', '+' or '.'",
                t.value
            );
            at.err(cx, Code::InvalidTag, t.pos, &format!("tags[{j}]"), msg);
            tags_ok = false;
        }
    }
    tags_ok.then_some(tags)
}

/// The rules across nodes: no duplicate hostname, IP, VM ID or PCI
/// mapping, then the control-plane count and placement.
/// A node's NICs: its own `networks` (checked here), else the default
/// list; each with its MAC, given or derived from the hostname (see
/// [`super::validate_devices::with_macs`]). `None` after a diagnostic, or
/// without a valid hostname to derive MACs from.
fn check_networks(
    cx: &mut Cx<'_>,
    at: At<'_>,
    n: &Spanned<RawNode>,
    ctx: &NodeContext<'_>,
) -> Option<Vec<crate::model::Network>> {
    let list = match &n.value.networks {
        Some(list) => {
            let field = at.field("networks");
            let place = super::validate_devices::Place {
                field: &field,
                node: at.node,
            };
            super::validate_devices::networks(cx, list, place, ctx.bridge)?
        }
        None => ctx.default_networks.to_vec(),
    };
    let hostname = n.value.hostname.as_ref()?;
    Some(super::validate_devices::with_macs(
        &list,
        ctx.cluster,
        &hostname.value,
    ))
}

/// A node's data disks: its own `disks` (checked here), else the default
/// list. `None` after a diagnostic.
fn check_disks(
    cx: &mut Cx<'_>,
    at: At<'_>,
    r: &RawNode,
    ctx: &NodeContext<'_>,
) -> Option<Vec<crate::model::DataDisk>> {
    match &r.disks {
        Some(list) => {
            let field = at.field("disks");
            let place = super::validate_devices::Place {
                field: &field,
                node: at.node,
            };
            super::validate_devices::disks(cx, list, place, ctx.datastore)
        }
        None => Some(ctx.default_disks.to_vec()),
    }
}

/// No two NICs share a MAC: a `mac` given twice, or one in a default list
/// (`proxmox.networks`, a pool's) that every node takes.
fn check_macs(cx: &mut Cx<'_>, drafts: &[Draft]) {
    let mut seen: HashMap<&str, (&str, &str)> = HashMap::new();
    for d in drafts {
        let me = d.label.as_deref().unwrap_or("?");
        for (mac, pos, field) in &d.macs {
            if let Some(&(other, other_field)) = seen.get(mac.as_str()) {
                let msg = if other == me {
                    format!("MAC {mac} is given to two of {me}'s NICs ({other_field} too)")
                } else {
                    format!(
                        "MAC {mac} is already {other}'s ({other_field}): two NICs with one MAC \
                         break both links (a `mac` in a list that several nodes take is \
                         every one's)"
                    )
                };
                cx.push(
                    Diagnostic::error(Code::DuplicateMac, cx.file, msg)
                        .at(*pos)
                        .on_node(d.label.as_deref())
                        .field(field.clone()),
                );
            } else {
                seen.insert(mac, (me, field));
            }
        }
    }
}

fn across(cx: &mut Cx<'_>, list_pos: Pos, drafts: &[Draft], ctx: &NodeContext<'_>) {
    check_duplicates(cx, drafts, ctx);
    check_macs(cx, drafts);
    check_controlplanes(cx, list_pos, drafts);
}

/// No two nodes share a hostname, IP, VM ID or PCI mapping, and no node has
/// the VIP; each duplicate names the first node that has the value.
fn check_duplicates(cx: &mut Cx<'_>, drafts: &[Draft], ctx: &NodeContext<'_>) {
    let mut hostnames: HashMap<&str, (&str, u32)> = HashMap::new();
    let mut ips: HashMap<Ipv4Addr, (&str, u32)> = HashMap::new();
    let mut vmids: HashMap<u32, (&str, u32)> = HashMap::new();
    // A mapping has one entry per Proxmox host: nodes on different hosts each
    // take their host's device; two on one host would share one device.
    let mut mappings: HashMap<(&str, Option<&str>), (&str, u32)> = HashMap::new();
    for (i, d) in drafts.iter().enumerate() {
        let me = d.label.as_deref().unwrap_or("?");
        let node = d.label.as_deref();
        let report = |cx: &mut Cx<'_>, code: Code, pos: Pos, field: String, msg: String| {
            cx.push(
                Diagnostic::error(code, cx.file, msg)
                    .at(pos)
                    .on_node(node)
                    .field(field),
            );
        };
        if let Some(h) = &d.hostname
            && let Some((_, line)) = hostnames.insert(&h.value, (me, h.pos.line))
        {
            let msg = format!(
                "hostname {} is already used by the node on line {line}",
                h.value
            );
            report(
                cx,
                Code::DuplicateHostname,
                h.pos,
                format!("nodes[{i}].hostname"),
                msg,
            );
        }
        if let Some(ip) = &d.ip {
            if let Some((other, line)) = ips.insert(ip.value, (me, ip.pos.line)) {
                let msg = format!("IP {} is already used by {other} (line {line})", ip.value);
                report(cx, Code::DuplicateIp, ip.pos, format!("nodes[{i}].ip"), msg);
            }
            if ctx.vip == Some(ip.value) {
                let msg = format!(
                    "IP {} is the cluster VIP (cluster.vip); the VIP must be an address no node has",
                    ip.value
                );
                report(cx, Code::VipIsNodeIp, ip.pos, format!("nodes[{i}].ip"), msg);
            }
        }
        if let Some((v, derived)) = &d.vm_id
            && let Some((other, line)) = vmids.insert(v.value, (me, v.pos.line))
        {
            let how = if *derived {
                " (from the IP's last octet; set vm_id)"
            } else {
                ""
            };
            let msg = format!(
                "VM ID {}{how} is already used by {other} (line {line})",
                v.value
            );
            report(
                cx,
                Code::DuplicateVmid,
                v.pos,
                format!("nodes[{i}].vm_id"),
                msg,
            );
        }
        for (m, field) in &d.mappings {
            let host = d.proxmox_node.as_deref();
            if let Some((other, line)) = mappings.insert((&m.value, host), (me, m.pos.line)) {
                let msg = format!(
                    "PCI mapping `{}` is already given to {other} (line {line}) on the same Proxmox host{}; a device can be passed to one VM only",
                    m.value,
                    host.map(|h| format!(" {h}")).unwrap_or_default()
                );
                report(cx, Code::PciMappingShared, m.pos, field.clone(), msg);
            }
        }
    }
}

/// At least one control plane, an odd count of them, and no Proxmox host
/// carrying more of them than etcd's quorum tolerates losing.
fn check_controlplanes(cx: &mut Cx<'_>, list_pos: Pos, drafts: &[Draft]) {
    let cps: Vec<&Draft> = drafts
        .iter()
        .filter(|d| d.role == Some(Role::Controlplane))
        .collect();
    let roles_known = drafts.iter().all(|d| d.role.is_some());
    if cps.is_empty() && roles_known {
        let msg =
            "no node is a control plane; at least one node needs role: controlplane (the default)"
                .to_owned();
        cx.error(Code::NoControlplane, list_pos, "nodes", msg);
    }
    if cps.len() > 1 && cps.len().is_multiple_of(2) {
        let msg = format!(
            "{} control planes: an even count tolerates no more failures than one fewer (etcd quorum); use an odd count",
            cps.len()
        );
        cx.push(
            Diagnostic::warning(Code::EvenControlplanes, cx.file, msg)
                .at(list_pos)
                .field("nodes"),
        );
    }
    // Placement: etcd survives the loss of (n-1)/2 members; warn when one
    // Proxmox host carries more control planes than that.
    let all_hosts: BTreeSet<&str> = drafts
        .iter()
        .filter_map(|d| d.proxmox_node.as_deref())
        .collect();
    let mut per_host: BTreeMap<&str, usize> = BTreeMap::new();
    for host in cps.iter().filter_map(|d| d.proxmox_node.as_deref()) {
        *per_host.entry(host).or_default() += 1;
    }
    let tolerated = cps.len().saturating_sub(1) / 2;
    let busiest = per_host.iter().max_by_key(|(_, n)| **n);
    if let Some((host, count)) =
        busiest.filter(|(_, n)| all_hosts.len() > 1 && cps.len() > 1 && **n > tolerated)
    {
        let msg = format!(
            "{count} of the {} control planes run on Proxmox host `{host}`: losing that host would lose etcd quorum; spread them over more hosts with proxmox_node",
            cps.len()
        );
        cx.push(
            Diagnostic::warning(Code::ControlplanesShareHost, cx.file, msg)
                .at(list_pos)
                .field("nodes"),
        );
    }
}
