//! The `nodes:` checks: each node on its own (names, addresses, sizes, VM ID,
//! schematic, PCI devices), then across nodes (duplicates, control-plane count
//! and placement, PCI mapping ownership).

use super::diagnostics::{Code, Diagnostic, Pos, did_you_mean};
use super::raw::{RawNode, Spanned};
use super::syntax::{self, Ipv4Net};
use super::validate::{Cx, known};
use super::{HostPci, MIN_DISK_GIB, Node, PciMapping, Role, SchematicSpec, Vmid};
use indexmap::IndexMap;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;

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
}

/// What one node contributes to the checks across nodes.
struct Draft {
    /// The hostname as written (for naming the node in diagnostics).
    label: Option<String>,
    hostname: Option<Spanned<String>>,
    ip: Option<Spanned<Ipv4Addr>>,
    role: Option<Role>,
    vm_id: Option<(Spanned<u32>, bool)>,
    proxmox_node: Option<String>,
    mappings: Vec<(Spanned<String>, String)>,
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
    if let Some(over) = raw.value.get(super::limits::MAX_NODES) {
        let msg = format!(
            "the topology has {} nodes, over talosprov's limit of {} per cluster",
            raw.value.len(),
            super::limits::MAX_NODES
        );
        let field = format!("nodes[{}]", super::limits::MAX_NODES);
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

fn one(
    cx: &mut Cx<'_>,
    i: usize,
    n: &Spanned<RawNode>,
    ctx: &NodeContext<'_>,
) -> (Draft, Option<Node>) {
    let r = &n.value;
    let label = r.hostname.as_ref().map(|h| h.value.clone());
    let node = label.as_deref();
    let f = |key: &str| format!("nodes[{i}].{key}");
    let err = |cx: &mut Cx<'_>, code: Code, pos: Pos, key: &str, msg: String| {
        cx.push(
            Diagnostic::error(code, cx.file, msg)
                .at(pos)
                .on_node(node)
                .field(f(key)),
        );
    };

    let hostname = match &r.hostname {
        None => {
            cx.missing(Some(n.pos), None, &f("hostname"), "");
            None
        }
        Some(h) if syntax::is_dns_label(&h.value) => Some(h.clone()),
        Some(h) => {
            let msg = format!(
                "hostname {:?} must be a lowercase RFC 1123 label: a-z, 0-9 and '-', not starting or ending with '-', at most 63 characters",
                h.value
            );
            err(cx, Code::InvalidHostname, h.pos, "hostname", msg);
            None
        }
    };
    let ip = match &r.ip {
        None => {
            cx.missing(
                Some(n.pos),
                node,
                &f("ip"),
                " (the node's static IPv4 address)",
            );
            None
        }
        Some(s) => match s.value.parse::<Ipv4Addr>() {
            Ok(a) => {
                if let Some(net) = ctx.network {
                    cx.in_network(net, a, s.pos, node, &f("ip"));
                }
                Some(Spanned::new(a, s.pos))
            }
            Err(_) => {
                let msg = format!(
                    "ip must be an IPv4 address such as 192.168.1.121, found {:?}",
                    s.value
                );
                err(cx, Code::InvalidIpv4, s.pos, "ip", msg);
                None
            }
        },
    };
    let role = match &r.role {
        None => Some(Role::Controlplane),
        Some(s) => Role::parse(&s.value).or_else(|| {
            let msg = format!(
                "role must be `controlplane` or `worker`, found {:?}{}",
                s.value,
                did_you_mean(&s.value, ["controlplane", "worker"])
            );
            err(cx, Code::InvalidRole, s.pos, "role", msg);
            None
        }),
    };
    let cores = match &r.cores {
        None => {
            cx.missing(
                Some(n.pos),
                node,
                &f("cores"),
                " (the number of vCPU cores)",
            );
            None
        }
        Some(c) if (1..=1024).contains(&c.value) => u32::try_from(c.value).ok(),
        Some(c) => {
            err(
                cx,
                Code::OutOfRange,
                c.pos,
                "cores",
                format!("cores must be 1 to 1024, found {}", c.value),
            );
            None
        }
    };
    let memory = match (&r.memory, role) {
        (None, _) => {
            cx.missing(Some(n.pos), node, &f("memory"), " (MiB, such as 4096)");
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
            err(cx, Code::MemoryBelowMinimum, m.pos, "memory", msg);
            None
        }
        (Some(m), _) => u32::try_from(m.value).ok().or_else(|| {
            err(
                cx,
                Code::OutOfRange,
                m.pos,
                "memory",
                format!("memory {} MiB is too large", m.value),
            );
            None
        }),
    };
    let disk_size = match &r.disk_size {
        None => Some(40),
        Some(d) if d.value < u64::from(MIN_DISK_GIB) => {
            let msg = format!(
                "disk_size {} GiB is below Talos's minimum of {MIN_DISK_GIB} GiB",
                d.value
            );
            err(cx, Code::DiskBelowMinimum, d.pos, "disk_size", msg);
            None
        }
        Some(d) => u32::try_from(d.value).ok().or_else(|| {
            err(
                cx,
                Code::OutOfRange,
                d.pos,
                "disk_size",
                format!("disk_size {} GiB is too large", d.value),
            );
            None
        }),
    };
    let vm_id = match (&r.vm_id, &ip) {
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
            err(cx, Code::VmidOutOfRange, v.pos, "vm_id", msg);
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
            err(cx, Code::VmidRequired, ip.pos, "vm_id", msg);
            None
        }
        (None, None) => None,
    };
    let proxmox_node = match &r.proxmox_node {
        None => ctx.proxmox_node.map(str::to_owned),
        Some(p) if syntax::is_pve_node_name(&p.value) => Some(p.value.clone()),
        Some(p) => {
            let msg = format!(
                "proxmox_node must be a Proxmox node name: letters, digits and '-', found {:?}",
                p.value
            );
            err(cx, Code::InvalidValue, p.pos, "proxmox_node", msg);
            None
        }
    };
    let schematic = match &r.schematic {
        None => Some(ctx.default_schematic.map(str::to_owned)),
        Some(s) if ctx.schematics.contains_key(&s.value) => Some(Some(s.value.clone())),
        Some(s) if ctx.declared_schematics.contains(&&s.value) => None,
        Some(s) => {
            let msg = format!(
                "schematic `{}` is not declared under `schematics`{}",
                s.value,
                known(ctx.declared_schematics.iter().copied())
            );
            err(cx, Code::UnknownSchematic, s.pos, "schematic", msg);
            None
        }
    };
    let mut hostpci = Vec::new();
    let mut mappings = Vec::new();
    let mut devices: HashMap<u8, u32> = HashMap::new();
    let mut pci_ok = true;
    for (j, h) in r.hostpci.iter().flat_map(|h| &h.value).enumerate() {
        let key = |k: &str| format!("hostpci[{j}].{k}");
        let index = match &h.value.device {
            None => {
                cx.missing(
                    Some(h.pos),
                    node,
                    &f(&key("device")),
                    " (hostpci0 to hostpci15)",
                );
                None
            }
            Some(d) => match syntax::hostpci_index(&d.value) {
                None => {
                    let msg = format!("device must be hostpci0 to hostpci15, found {:?}", d.value);
                    err(cx, Code::InvalidHostpciDevice, d.pos, &key("device"), msg);
                    None
                }
                Some(idx) => {
                    if let Some(line) = devices.insert(idx, d.pos.line) {
                        let msg = format!(
                            "device hostpci{idx} is already used by this node (line {line})"
                        );
                        err(cx, Code::DuplicateHostpciDevice, d.pos, &key("device"), msg);
                        None
                    } else {
                        Some(idx)
                    }
                }
            },
        };
        let mapping = match &h.value.mapping {
            None => {
                cx.missing(
                    Some(h.pos),
                    node,
                    &f(&key("mapping")),
                    " (a pci_mappings name)",
                );
                None
            }
            Some(m) => match ctx.pci_mappings.get(&m.value) {
                // Declared but invalid: that mapping's own error says why.
                None if ctx.declared_pci_mappings.contains(&&m.value) => None,
                None => {
                    let msg = format!(
                        "mapping `{}` is not declared under `pci_mappings`{}",
                        m.value,
                        known(ctx.declared_pci_mappings.iter().copied())
                    );
                    err(cx, Code::UnknownPciMapping, m.pos, &key("mapping"), msg);
                    None
                }
                Some(pm) => {
                    mappings.push((m.clone(), f(&key("mapping"))));
                    let host = pm.node.as_deref();
                    if let (Some(want), Some(have)) = (host, proxmox_node.as_deref()) {
                        if want != have {
                            let msg = format!(
                                "mapping `{}` is a device on Proxmox host `{want}`, but this node runs on `{have}`; set proxmox_node: {want}",
                                m.value
                            );
                            err(cx, Code::PciMappingWrongHost, m.pos, &key("mapping"), msg);
                        }
                    }
                    Some(m.value.clone())
                }
            },
        };
        let flag =
            |v: &Option<Spanned<bool>>, default: bool| v.as_ref().map_or(default, |b| b.value);
        match (index, mapping) {
            (Some(index), Some(mapping)) => hostpci.push(HostPci {
                index,
                mapping,
                pcie: flag(&h.value.pcie, true),
                rombar: flag(&h.value.rombar, true),
                xvga: flag(&h.value.xvga, false),
            }),
            _ => pci_ok = false,
        }
    }
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
            err(cx, Code::InvalidTag, t.pos, &format!("tags[{j}]"), msg);
            tags_ok = false;
        }
    }

    let draft = Draft {
        label: label.clone(),
        hostname: hostname.clone(),
        ip: ip.clone(),
        role,
        vm_id: vm_id.clone(),
        proxmox_node: proxmox_node.clone(),
        mappings,
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
            hostpci: pci_ok.then_some(hostpci)?,
            tags: tags_ok.then_some(tags)?,
        })
    })();
    (draft, built)
}

fn across(cx: &mut Cx<'_>, list_pos: Pos, drafts: &[Draft], ctx: &NodeContext<'_>) {
    let mut hostnames: HashMap<&str, (&str, u32)> = HashMap::new();
    let mut ips: HashMap<Ipv4Addr, (&str, u32)> = HashMap::new();
    let mut vmids: HashMap<u32, (&str, u32)> = HashMap::new();
    let mut mappings: HashMap<&str, (&str, u32)> = HashMap::new();
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
        if let Some(h) = &d.hostname {
            if let Some((_, line)) = hostnames.insert(&h.value, (me, h.pos.line)) {
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
        if let Some((v, derived)) = &d.vm_id {
            if let Some((other, line)) = vmids.insert(v.value, (me, v.pos.line)) {
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
        }
        for (m, field) in &d.mappings {
            if let Some((other, line)) = mappings.insert(&m.value, (me, m.pos.line)) {
                let msg = format!(
                    "PCI mapping `{}` is already given to {other} (line {line}); a device can be passed to one VM only",
                    m.value
                );
                report(cx, Code::PciMappingShared, m.pos, field.clone(), msg);
            }
        }
    }

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
    if cps.len() > 1 && cps.len() % 2 == 0 {
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
