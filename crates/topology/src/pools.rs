//! Node pools (pure): `pools.<name>` declares `replicas` nodes of one role drawn
//! from an IP range, the way a Cluster API `MachineDeployment` with CAPMOX's
//! `ipv4Config.addresses` does. Allocation gives each member an index, an IP, a
//! vmid and a Proxmox host, deterministically:
//! - a member keeps what it was given for its whole life (the state records it,
//!   and passes it back as [`RecordedMember`]s); an edit that would move one is
//!   an error;
//! - scaling down removes the highest indexes first;
//! - a new member takes the lowest free index, the lowest free IP of the range
//!   (free: not a listed node's, the VIP's, the gateway's, another pool's or a
//!   member's), the vmid that follows (`vm_id_start + index - 1`, else the IP's
//!   last octet, as for nodes) and the host of `proxmox_nodes` with the fewest
//!   members of the pool (ties: list order).
//!
//! Members then become `nodes` entries, checked by the same rules as listed
//! nodes (hostnames, vmids, mappings per host), their diagnostics pointing at
//! the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use talosprov_statefile::format::RecordedMember;

use super::raw::{Entry, RawNode, RawPool, Spanned};
use super::syntax::{self, Ipv4Net};
use crate::syntax::Vmid;
use talosprov_base::diagnostics::{Code, Diagnostic, Pos};

/// Most members one pool may have (a range of a /16 is far beyond a cluster).
pub const MAX_REPLICAS: u64 = 250;

/// What a Proxmox host has free for new members, as a plan reads it
/// (`/nodes/<node>/status` and the datastore's `/nodes/<node>/storage/<id>/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostCapacity {
    /// Free memory, MiB (`memory.available`, else `memory.free`).
    pub memory_mib: u64,
    /// Free space on `proxmox.datastore`, GiB (`avail`); `None` when not read.
    pub disk_gib: Option<u64>,
}

/// A pool's members after allocation, in index order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pool {
    /// The pool's name.
    pub name: String,
    /// `replicas`.
    pub replicas: u32,
    /// The Proxmox hosts its members spread over (`proxmox_nodes`, default
    /// `proxmox.node`).
    pub hosts: Vec<String>,
    /// Its members, by index.
    pub members: Vec<RecordedMember>,
}

/// Where a member comes from, as its node carries it (patches of
/// `pools/<pool>/`, and the templates' `pool` and `index`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Membership {
    /// The pool's name.
    pub pool: String,
    /// The member's index, from 1.
    pub index: u32,
}

/// A pool's range of addresses: first to last, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    first: Ipv4Addr,
    last: Ipv4Addr,
}

impl Range {
    /// `a.b.c.d-e.f.g.h` or a CIDR (`a.b.c.d/n`, its hosts: the network and
    /// broadcast addresses left out).
    fn parse(text: &str) -> Option<Range> {
        if let Some((a, b)) = text.split_once('-') {
            let (first, last): (Ipv4Addr, Ipv4Addr) =
                (a.trim().parse().ok()?, b.trim().parse().ok()?);
            return (first <= last).then_some(Range { first, last });
        }
        let (addr, prefix) = text.split_once('/')?;
        let net = Ipv4Net::containing(addr.trim().parse().ok()?, prefix.trim().parse().ok()?);
        let (n, b) = (u32::from(net.network), u32::from(net.broadcast()));
        if b - n < 2 {
            return None;
        }
        Some(Range {
            first: Ipv4Addr::from(n + 1),
            last: Ipv4Addr::from(b - 1),
        })
    }

    fn contains(self, ip: Ipv4Addr) -> bool {
        self.first <= ip && ip <= self.last
    }

    fn overlaps(self, other: Range) -> bool {
        self.first <= other.last && other.first <= self.last
    }

    fn addresses(self) -> impl Iterator<Item = Ipv4Addr> {
        (u32::from(self.first)..=u32::from(self.last)).map(Ipv4Addr::from)
    }
}

/// What allocation needs from the rest of the topology.
pub(super) struct Context<'a> {
    /// The cluster's name (`{cluster}` in hostname patterns).
    pub cluster: &'a str,
    /// The cluster network, when valid.
    pub network: Option<Ipv4Net>,
    /// Addresses already taken: the listed nodes', the VIP, the gateway.
    pub taken: BTreeSet<Ipv4Addr>,
    /// VM IDs the listed nodes hold (given, or their IP's last octet).
    pub taken_vmids: BTreeSet<u32>,
    /// `proxmox.node`, the default host.
    pub proxmox_node: Option<&'a str>,
    /// What the state recorded, by pool.
    pub recorded: &'a BTreeMap<String, Vec<RecordedMember>>,
    /// What each host has free, by host; empty offline (then members go to
    /// the host with the fewest of the pool's members).
    pub capacity: &'a BTreeMap<String, HostCapacity>,
    /// The GiB of `proxmox.disks` (the data disks of a pool without its own).
    pub default_data_gib: u64,
    /// Each valid PCI mapping's hosts with a device.
    pub pci_hosts: BTreeMap<String, Vec<String>>,
    /// The `(mapping, host)` devices listed nodes take.
    pub pci_used: BTreeSet<(String, String)>,
}

/// Allocate every pool's members: the pools, and each member as a `nodes`
/// entry (its keys at the pool's positions). Problems are diagnostics.
pub(super) fn allocate(
    pools: &[Entry<RawPool>],
    cx: &Context<'_>,
    diagnostics: &mut Vec<Diagnostic>,
    file: &std::path::Path,
) -> (Vec<Pool>, Vec<(Spanned<RawNode>, Membership)>) {
    let mut out = Vec::new();
    let mut nodes = Vec::new();
    let mut handed = Handed {
        taken: cx.taken.clone(),
        vmids: cx.taken_vmids.clone(),
        placed: BTreeMap::new(),
        devices: cx.pci_used.clone(),
    };
    for recorded in cx.recorded.values() {
        handed.vmids.extend(recorded.iter().map(|m| m.vmid));
    }
    let mut ranges: Vec<(&str, Range, Pos)> = Vec::new();
    for entry in pools {
        let name = entry.name.value.as_str();
        let p = &entry.value;
        let err = |code: Code, pos: Pos, field: &str, msg: String| {
            Diagnostic::error(code, file, msg)
                .at(pos)
                .field(format!("pools.{name}.{field}"))
        };
        let Some(range) = check_range(name, p, cx, &ranges, &err, diagnostics) else {
            continue;
        };
        ranges.push((name, range, p.ip_range.as_ref().map_or(p.pos, |r| r.pos)));
        let Some(replicas) = replicas_of(name, p, &err, diagnostics) else {
            continue;
        };
        if !vm_id_start_fits(p, replicas, &err, diagnostics) {
            continue;
        }
        let hosts = hosts_of(p, cx);
        let pattern = p
            .hostname
            .as_ref()
            .map_or("{cluster}-{pool}-{index}", |h| h.value.as_str());
        if let Some(problem) = pattern_problem(pattern, cx.cluster, name) {
            let pos = p.hostname.as_ref().map_or(p.pos, |h| h.pos);
            diagnostics.push(err(Code::InvalidPool, pos, "hostname", problem));
            continue;
        }
        let recorded = cx.recorded.get(name).map_or(&[][..], Vec::as_slice);
        let mut kept: Vec<RecordedMember> = recorded.to_vec();
        kept.sort_by_key(|m| m.index);
        kept.truncate(replicas as usize);
        let mappings = pool_mappings(p, cx);
        if let Err(msg) = enough_devices(name, replicas, &mappings, &hosts, cx, &handed.devices) {
            let pos = p.hostpci.as_ref().map_or(p.pos, |h| h.pos);
            diagnostics.push(err(Code::PciMappingShared, pos, "hostpci", msg));
            continue;
        }
        for m in &kept {
            check_kept(name, p, m, range, &hosts, pattern, cx, &err, diagnostics);
            handed.taken.insert(m.ip);
            handed
                .devices
                .extend(mappings.iter().map(|g| (g.clone(), m.proxmox_node.clone())));
        }
        let with_devices = device_hosts(&hosts, &mappings, cx);
        let mut members = kept;
        let input = PoolInput {
            name,
            p,
            replicas,
            range,
            pattern,
            with_devices,
            mappings,
        };
        grow(&input, &mut members, &mut handed, cx, &err, diagnostics);
        nodes.extend(members.iter().map(|m| {
            let membership = Membership {
                pool: name.to_owned(),
                index: m.index,
            };
            (member_node(p, m), membership)
        }));
        out.push(Pool {
            name: name.to_owned(),
            replicas,
            members,
            hosts: hosts.clone(),
        });
    }
    (out, nodes)
}

/// What allocation has handed out so far, across pools: addresses, vmids,
/// memory and disk per host, and `(mapping, host)` devices.
struct Handed {
    taken: BTreeSet<Ipv4Addr>,
    vmids: BTreeSet<u32>,
    placed: BTreeMap<String, (u64, u64)>,
    devices: BTreeSet<(String, String)>,
}

/// One pool's allocation inputs: its name, entry, replicas, range, hostname
/// pattern, the hosts with its devices and its mappings.
struct PoolInput<'p> {
    name: &'p str,
    p: &'p RawPool,
    replicas: u32,
    range: Range,
    pattern: &'p str,
    with_devices: Vec<String>,
    mappings: Vec<String>,
}

/// Add new members to `members` until the pool has its replicas: the lowest
/// free index and address, a vmid and a host; a diagnostic when the range or
/// the hosts run out.
fn grow(
    pi: &PoolInput<'_>,
    members: &mut Vec<RecordedMember>,
    h: &mut Handed,
    cx: &Context<'_>,
    err: &impl Fn(Code, Pos, &str, String) -> Diagnostic,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let PoolInput {
        name,
        p,
        replicas,
        range,
        pattern,
        ref with_devices,
        ref mappings,
    } = *pi;
    while members.len() < replicas as usize {
        let index = (1..)
            .find(|i| !members.iter().any(|m| m.index == *i))
            .unwrap_or(1);
        let Some(ip) = range
            .addresses()
            .find(|a| !h.taken.contains(a) && usable(cx.network, *a))
        else {
            let free = members.len()
                + range
                    .addresses()
                    .filter(|a| !h.taken.contains(a) && usable(cx.network, *a))
                    .count();
            let pos = p.ip_range.as_ref().map_or(p.pos, |r| r.pos);
            let msg = format!(
                "pool `{name}` needs {replicas} addresses and its range has {free} free (the \
                 VIP, the gateway, listed nodes and other pools' members are skipped)"
            );
            diagnostics.push(err(Code::PoolRangeTooSmall, pos, "ip_range", msg));
            break;
        };
        h.taken.insert(ip);
        let need = needs_of(p, cx.default_data_gib);
        let Ok(host) = host_for(h, with_devices, mappings, members, need, cx).map_err(|why| {
            let pos = p.proxmox_nodes.as_ref().map_or(p.pos, |h| h.pos);
            let msg = format!(
                "pool `{name}`: member {index} needs {} MiB of memory and {} GiB of disk, \
                     and no host has them free: {why}",
                need.0, need.1
            );
            diagnostics.push(err(Code::PoolNoCapacity, pos, "proxmox_nodes", msg));
        }) else {
            break;
        };
        let vmid = match &p.vm_id_start {
            // In range: vm_id_start_fits checked the last member's.
            Some(start) => u32::try_from(nth_vmid(start.value, index)).unwrap_or(u32::MAX),
            None => default_vmid(ip, &h.vmids),
        };
        h.vmids.insert(vmid);
        members.push(RecordedMember {
            index,
            hostname: hostname(pattern, cx.cluster, name, index),
            ip,
            vmid,
            proxmox_node: host,
        });
        members.sort_by_key(|m| m.index);
    }
}

/// The pool's `replicas`, checked with what every member needs (`cores`,
/// `memory`); `None` after a diagnostic.
fn replicas_of(
    name: &str,
    p: &RawPool,
    err: &impl Fn(Code, Pos, &str, String) -> Diagnostic,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<u32> {
    let replicas = match &p.replicas {
        Some(r) if r.value <= MAX_REPLICAS => r.value as u32,
        Some(r) => {
            diagnostics.push(err(
                Code::InvalidPool,
                r.pos,
                "replicas",
                format!(
                    "replicas {} is over talosprov's limit of {MAX_REPLICAS}",
                    r.value
                ),
            ));
            return None;
        }
        None => {
            diagnostics.push(err(
                Code::MissingField,
                p.pos,
                "replicas",
                format!("pool `{name}` has no `replicas`"),
            ));
            return None;
        }
    };
    let mut sized = true;
    for (key, value, what) in [
        ("cores", &p.cores, "the number of vCPU cores"),
        ("memory", &p.memory, "MiB, such as 4096"),
    ] {
        if value.is_none() {
            diagnostics.push(err(
                Code::MissingField,
                p.pos,
                key,
                format!("`pools.{name}.{key}` is required ({what})"),
            ));
            sized = false;
        }
    }
    sized.then_some(replicas)
}

/// Not the network's or the broadcast address.
fn usable(network: Option<Ipv4Net>, ip: Ipv4Addr) -> bool {
    network.is_none_or(|n| ip != n.network && ip != n.broadcast())
}

/// The pool's range, checked: valid, inside the cluster network without its
/// network and broadcast addresses, overlapping no other pool's.
fn check_range(
    name: &str,
    p: &RawPool,
    cx: &Context<'_>,
    ranges: &[(&str, Range, Pos)],
    err: &impl Fn(Code, Pos, &str, String) -> Diagnostic,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Range> {
    let Some(text) = &p.ip_range else {
        diagnostics.push(err(
            Code::MissingField,
            p.pos,
            "ip_range",
            format!("pool `{name}` has no `ip_range` (first-last, or a CIDR)"),
        ));
        return None;
    };
    let Some(range) = Range::parse(&text.value) else {
        diagnostics.push(err(
            Code::InvalidPoolRange,
            text.pos,
            "ip_range",
            format!(
                "ip_range {:?} is not a range of IPv4 addresses: write FIRST-LAST \
                 (192.168.1.130-192.168.1.140) or a CIDR (192.168.1.128/27)",
                text.value
            ),
        ));
        return None;
    };
    if let Some(net) = cx.network {
        if !net.contains(range.first) || !net.contains(range.last) {
            diagnostics.push(err(
                Code::InvalidPoolRange,
                text.pos,
                "ip_range",
                format!(
                    "ip_range {} is not inside the cluster network {}/{}",
                    text.value, net.network, net.prefix
                ),
            ));
            return None;
        }
        for (what, a) in [("network", net.network), ("broadcast", net.broadcast())] {
            if range.contains(a) {
                diagnostics.push(err(
                    Code::InvalidPoolRange,
                    text.pos,
                    "ip_range",
                    format!(
                        "ip_range {} includes the cluster network's {what} address {a}",
                        text.value
                    ),
                ));
                return None;
            }
        }
    }
    if let Some((other, _, _)) = ranges.iter().find(|(_, r, _)| r.overlaps(range)) {
        diagnostics.push(err(
            Code::OverlappingPools,
            text.pos,
            "ip_range",
            format!("ip_range {} overlaps pool `{other}`'s range", text.value),
        ));
        return None;
    }
    Some(range)
}

/// A recorded member must stay where it is: an edit of the pool that would
/// move it (its IP out of the range, another hostname, vmid or host) is an
/// error, naming the member.
#[allow(clippy::too_many_arguments)]
fn check_kept(
    name: &str,
    p: &RawPool,
    m: &RecordedMember,
    range: Range,
    hosts: &[String],
    pattern: &str,
    cx: &Context<'_>,
    err: &impl Fn(Code, Pos, &str, String) -> Diagnostic,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let moved = |field: &str, pos: Option<Pos>, what: String| {
        err(
            Code::PoolMemberMoved,
            pos.unwrap_or(p.pos),
            field,
            format!(
                "pool `{name}`: member {} ({}) {what}; a member keeps its IP, hostname, vmid \
                 and host for its whole life, so this edit would move it (scale the pool down \
                 past it first, or put the value back)",
                m.index, m.hostname
            ),
        )
    };
    if !range.contains(m.ip) {
        diagnostics.push(moved(
            "ip_range",
            p.ip_range.as_ref().map(|r| r.pos),
            format!("has IP {}, outside the new range", m.ip),
        ));
    }
    if hostname(pattern, cx.cluster, name, m.index) != m.hostname {
        diagnostics.push(moved(
            "hostname",
            p.hostname.as_ref().map(|h| h.pos),
            format!(
                "would be named {}",
                hostname(pattern, cx.cluster, name, m.index)
            ),
        ));
    }
    if let Some(start) = &p.vm_id_start
        && nth_vmid(start.value, m.index) != u64::from(m.vmid)
    {
        diagnostics.push(moved(
            "vm_id_start",
            Some(start.pos),
            format!(
                "has vmid {}, not {}",
                m.vmid,
                nth_vmid(start.value, m.index)
            ),
        ));
    }
    if !hosts.contains(&m.proxmox_node) {
        diagnostics.push(moved(
            "proxmox_nodes",
            p.proxmox_nodes.as_ref().map(|h| h.pos),
            format!(
                "runs on {}, which `proxmox_nodes` leaves out",
                m.proxmox_node
            ),
        ));
    }
}

/// The hosts of `hosts` where every one of `mappings` has a device: a member
/// with PCI devices goes only there.
fn device_hosts(hosts: &[String], mappings: &[String], cx: &Context<'_>) -> Vec<String> {
    hosts
        .iter()
        .filter(|h| {
            mappings
                .iter()
                .all(|g| cx.pci_hosts.get(g).is_some_and(|l| l.contains(h)))
        })
        .cloned()
        .collect()
}

/// The host a new member goes to (see [`place`]) among `with_devices` whose
/// devices of `mappings` are still free; the member's devices are then taken.
fn host_for(
    Handed {
        placed, devices, ..
    }: &mut Handed,
    with_devices: &[String],
    mappings: &[String],
    members: &[RecordedMember],
    need: (u64, u64),
    cx: &Context<'_>,
) -> Result<String, String> {
    let free: Vec<String> = with_devices
        .iter()
        .filter(|h| {
            !mappings
                .iter()
                .any(|g| devices.contains(&(g.clone(), (*h).clone())))
        })
        .cloned()
        .collect();
    let host = place(&free, members, need, cx.capacity, placed)?;
    devices.extend(mappings.iter().map(|g| (g.clone(), host.clone())));
    Ok(host)
}

/// The valid PCI mappings a pool's members pass through.
fn pool_mappings(p: &RawPool, cx: &Context<'_>) -> Vec<String> {
    p.hostpci
        .iter()
        .flat_map(|l| &l.value)
        .filter_map(|h| h.value.mapping.as_ref().map(|m| m.value.clone()))
        .filter(|m| cx.pci_hosts.contains_key(m))
        .collect()
}

/// Whether each mapping the pool passes through has a device for every
/// member: one per host of the pool that the mapping has a device on and no
/// listed node takes. `Err` says which mapping falls short, with its hosts.
fn enough_devices(
    name: &str,
    replicas: u32,
    mappings: &[String],
    hosts: &[String],
    cx: &Context<'_>,
    used: &BTreeSet<(String, String)>,
) -> Result<(), String> {
    for m in mappings {
        let on: Vec<&String> = cx
            .pci_hosts
            .get(m)
            .map(|l| l.iter().filter(|h| hosts.contains(h)).collect())
            .unwrap_or_default();
        let free = on
            .iter()
            .filter(|h| !used.contains(&(m.clone(), (**h).clone())))
            .count();
        if (replicas as usize) > free {
            let list: Vec<&str> = on.iter().map(|h| h.as_str()).collect();
            return Err(format!(
                "pool `{name}` has {replicas} members and mapping `{m}` has {free} free device(s) \
                 on the pool's hosts ({}): a device goes to one VM only, so give the mapping a \
                 `map` entry on more hosts, or lower replicas",
                if list.is_empty() {
                    "none".to_owned()
                } else {
                    list.join(", ")
                }
            ));
        }
    }
    Ok(())
}

/// The hosts a pool's members spread over: `proxmox_nodes`, else `proxmox.node`.
fn hosts_of(p: &RawPool, cx: &Context<'_>) -> Vec<String> {
    match &p.proxmox_nodes {
        Some(l) if !l.value.is_empty() => l.value.iter().map(|h| h.value.clone()).collect(),
        _ => cx.proxmox_node.map(str::to_owned).into_iter().collect(),
    }
}

/// A member's (memory MiB, disk GiB): `memory`, and `disk_size` (default 40)
/// plus its data disks (the pool's `disks`, else `proxmox.disks`).
fn needs_of(p: &RawPool, default_data_gib: u64) -> (u64, u64) {
    let memory = p.memory.as_ref().map_or(0, |m| m.value);
    let system = p.disk_size.as_ref().map_or(40, |d| d.value);
    let data = p.disks.as_ref().map_or(default_data_gib, |l| {
        l.value
            .iter()
            .map(|d| d.value.size.as_ref().map_or(0, |s| s.value))
            .sum()
    });
    (memory, system.saturating_add(data))
}

/// The host a new member goes to: among `hosts` whose free memory and disk (less
/// what this allocation already placed there) fit `need`, the one with the most
/// memory left, ties to the fewest of the pool's members, then list order. A host
/// whose capacity was not read fits, after the others; with none read (offline)
/// the fewest members decide. `Err` names each host with what it has free.
fn place(
    hosts: &[String],
    members: &[RecordedMember],
    need: (u64, u64),
    capacity: &BTreeMap<String, HostCapacity>,
    placed: &mut BTreeMap<String, (u64, u64)>,
) -> Result<String, String> {
    let host = choose(hosts, members, need, capacity, placed)?;
    let slot = placed.entry(host.clone()).or_default();
    slot.0 += need.0;
    slot.1 += need.1;
    Ok(host)
}

/// [`place`]'s choice, without recording it.
fn choose(
    hosts: &[String],
    members: &[RecordedMember],
    need: (u64, u64),
    capacity: &BTreeMap<String, HostCapacity>,
    placed: &BTreeMap<String, (u64, u64)>,
) -> Result<String, String> {
    let count = |h: &String| members.iter().filter(|m| &m.proxmox_node == h).count();
    let left = |h: &String| {
        let c = capacity.get(h)?;
        let (mem, disk) = placed.get(h).copied().unwrap_or_default();
        Some((
            c.memory_mib.saturating_sub(mem),
            c.disk_gib.map(|d| d.saturating_sub(disk)),
        ))
    };
    let fits = |h: &String| {
        left(h).is_none_or(|(mem, disk)| mem >= need.0 && disk.is_none_or(|d| d >= need.1))
    };
    hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| fits(h))
        .min_by_key(|(i, h)| {
            let mem = left(h).map_or(0, |(m, _)| m);
            (left(h).is_none(), std::cmp::Reverse(mem), count(h), *i)
        })
        .map(|(_, h)| h.clone())
        .ok_or_else(|| {
            hosts
                .iter()
                .map(|h| match left(h) {
                    Some((mem, Some(disk))) => {
                        format!("{h} has {mem} MiB of memory and {disk} GiB on the datastore")
                    }
                    Some((mem, None)) => format!("{h} has {mem} MiB of memory"),
                    None => format!("{h} was not read"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
}

/// Whether every member's vmid from `vm_id_start` (member N gets
/// `vm_id_start + N - 1`) is in Proxmox's range; a diagnostic on `vm_id_start`
/// otherwise. True without a `vm_id_start`.
fn vm_id_start_fits(
    p: &RawPool,
    replicas: u32,
    err: &impl Fn(Code, Pos, &str, String) -> Diagnostic,
    diagnostics: &mut Vec<Diagnostic>,
) -> bool {
    let Some(start) = &p.vm_id_start else {
        return true;
    };
    let last = nth_vmid(start.value, replicas.max(1));
    let range = u64::from(Vmid::MIN)..=u64::from(Vmid::MAX);
    if range.contains(&start.value) && range.contains(&last) {
        return true;
    }
    let msg = if range.contains(&start.value) {
        format!(
            "vm_id_start {} gives member {replicas} the vmid {last}, beyond Proxmox's range \
             {}..{}",
            start.value,
            Vmid::MIN,
            Vmid::MAX
        )
    } else {
        format!(
            "vm_id_start {} is outside Proxmox's range {}..{}",
            start.value,
            Vmid::MIN,
            Vmid::MAX
        )
    };
    diagnostics.push(err(Code::VmidOutOfRange, start.pos, "vm_id_start", msg));
    false
}

/// The vmid of a member of a pool without `vm_id_start`: the address's last
/// octet when it is in Proxmox's range (as for a listed node), else 1000 plus
/// the last octet (as `init` picks), counting up past vmids already taken.
fn default_vmid(ip: Ipv4Addr, taken: &BTreeSet<u32>) -> u32 {
    let octet = u32::from(ip.octets()[3]);
    let first = if octet >= Vmid::MIN {
        octet
    } else {
        1000 + octet
    };
    (first..Vmid::MAX)
        .find(|v| !taken.contains(v))
        .unwrap_or(first)
}

/// The vmid of member `index` (from 1) of a pool whose `vm_id_start` is
/// `start`: `start + index - 1`, saturating rather than wrapping, so a start
/// near the top of u64 gives a vmid that the range check refuses.
fn nth_vmid(start: u64, index: u32) -> u64 {
    start.saturating_add(u64::from(index)).saturating_sub(1)
}

/// The hostname `pattern` gives member `index` of `pool`.
pub fn hostname(pattern: &str, cluster: &str, pool: &str, index: u32) -> String {
    pattern
        .replace("{cluster}", cluster)
        .replace("{pool}", pool)
        .replace("{index}", &index.to_string())
}

/// The `nodes` entry of member `m`: the pool's settings, the member's
/// allocation, every key at the pool's position.
fn member_node(p: &RawPool, m: &RecordedMember) -> Spanned<RawNode> {
    let at = |v: String| Spanned::new(v, p.pos);
    Spanned::new(
        RawNode {
            hostname: Some(at(m.hostname.clone())),
            ip: Some(at(m.ip.to_string())),
            role: p.role.clone().or_else(|| Some(at("worker".to_owned()))),
            cores: p.cores.clone(),
            memory: p.memory.clone(),
            disk_size: p.disk_size.clone(),
            vm_id: Some(Spanned::new(u64::from(m.vmid), p.pos)),
            proxmox_node: Some(at(m.proxmox_node.clone())),
            schematic: p.schematic.clone(),
            hostpci: p.hostpci.clone(),
            networks: p.networks.clone(),
            disks: p.disks.clone(),
            ha: p.ha.clone(),
            tags: p.tags.clone(),
        },
        p.pos,
    )
}

/// Whether a hostname pattern can only give valid, distinct names: it has
/// `{index}` (else every member has the same name) and gives an RFC 1123
/// label for index 1.
pub(super) fn pattern_problem(pattern: &str, cluster: &str, pool: &str) -> Option<String> {
    if !pattern.contains("{index}") {
        return Some(format!(
            "hostname pattern {pattern:?} has no {{index}}: every member would have the same name"
        ));
    }
    let sample = hostname(pattern, cluster, pool, 1);
    (!syntax::is_dns_label(&sample)).then(|| {
        format!(
            "hostname pattern {pattern:?} gives {sample:?}, not a lowercase RFC 1123 label \
             (a-z, 0-9 and '-', at most 63 characters)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Environment;
    use crate::parse;
    use std::path::Path;

    const BASE: &str = "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n  \
        vip: 10.0.0.131\nproxmox:\n  endpoint: https://pve.test:8006\n  node: pve1\n  \
        datastore: local-lvm\nnodes:\n  - hostname: cp-01\n    ip: 10.0.0.130\n    cores: 2\n    \
        memory: 4096\n";

    fn pools(pool: &str, recorded: BTreeMap<String, Vec<RecordedMember>>) -> Vec<Pool> {
        let text = format!("{BASE}pools:\n{pool}");
        let env = Environment {
            recorded_pools: recorded,
            ..Environment::default()
        };
        let loaded = parse(&text, Path::new("c.yaml"), &env);
        talosprov_base::diagnostics::assert_clean(&loaded.diagnostics);
        loaded.topology.expect("valid").pools
    }

    fn rows(p: &Pool) -> Vec<String> {
        p.members
            .iter()
            .map(|m| {
                format!(
                    "{} {} {} {} {}",
                    m.index, m.hostname, m.ip, m.vmid, m.proxmox_node
                )
            })
            .collect()
    }

    const WORKERS: &str = "  wk:\n    replicas: REPLICAS\n    ip_range: 10.0.0.128/28\n    \
        proxmox_nodes: [pve1, pve2]\n    vm_id_start: 2001\n    cores: 2\n    memory: 4096\n";

    #[test]
    fn without_vm_id_start_every_member_gets_a_valid_vmid() {
        // .30 and up: the last octet is below Proxmox's 100, so 1000 plus it.
        let low = "  wk:\n    replicas: 2\n    ip_range: 10.0.0.30-10.0.0.40\n    cores: 2\n    \
                   memory: 4096\n";
        assert_eq!(
            rows(&pools(low, BTreeMap::new())[0]),
            [
                "1 lab-wk-1 10.0.0.30 1030 pve1",
                "2 lab-wk-2 10.0.0.31 1031 pve1"
            ]
        );
        // In range, the last octet, as for a listed node (cp-01 holds .130 and 130).
        let high = "  wk:\n    replicas: 2\n    ip_range: 10.0.0.129-10.0.0.140\n    cores: 2\n    \
                    memory: 4096\n";
        assert_eq!(
            rows(&pools(high, BTreeMap::new())[0]),
            [
                "1 lab-wk-1 10.0.0.129 129 pve1",
                "2 lab-wk-2 10.0.0.132 132 pve1"
            ]
        );
        // A listed node holding the vmid a member would take: the member counts up.
        let text = format!(
            "{}    vm_id: 129\npools:\n{high}",
            BASE.replace("10.0.0.130", "10.0.0.150")
        );
        let loaded = parse(&text, Path::new("c.yaml"), &Environment::default());
        talosprov_base::diagnostics::assert_clean(&loaded.diagnostics);
        let t = loaded.topology.expect("valid");
        assert_eq!(rows(&t.pools[0])[0], "1 lab-wk-1 10.0.0.129 130 pve1");
    }

    #[test]
    fn a_vm_id_start_out_of_range_is_named() {
        for (start, want) in [
            (
                "30",
                "vm_id_start 30 is outside Proxmox's range 100..999999999",
            ),
            (
                "999999999",
                "vm_id_start 999999999 gives member 2 the vmid 1000000000, beyond Proxmox's range",
            ),
        ] {
            let pool = WORKERS
                .replace("REPLICAS", "2")
                .replace("vm_id_start: 2001", &format!("vm_id_start: {start}"));
            let text = format!("{BASE}pools:\n{pool}");
            let loaded = parse(&text, Path::new("c.yaml"), &Environment::default());
            let d: Vec<_> = loaded
                .diagnostics
                .iter()
                .filter(|d| d.code != talosprov_base::diagnostics::Code::NoGuestAgent)
                .collect();
            assert!(loaded.topology.is_none());
            assert_eq!(d.len(), 1, "{d:#?}");
            assert_eq!(d[0].field.as_deref(), Some("pools.wk.vm_id_start"));
            assert!(d[0].message.starts_with(want), "{}", d[0].message);
            let line = text
                .lines()
                .position(|l| l.contains("vm_id_start"))
                .map(|i| u32::try_from(i + 1).unwrap_or(0));
            assert_eq!(d[0].pos.map(|p| p.line), line);
        }
    }

    #[test]
    fn members_take_the_lowest_free_addresses_and_spread_over_the_hosts() {
        let p = pools(&WORKERS.replace("REPLICAS", "3"), BTreeMap::new());
        // .128 is the CIDR's own network address, .130 a node's, .131 the VIP.
        assert_eq!(
            rows(&p[0]),
            [
                "1 lab-wk-1 10.0.0.129 2001 pve1",
                "2 lab-wk-2 10.0.0.132 2002 pve2",
                "3 lab-wk-3 10.0.0.133 2003 pve1"
            ]
        );
    }

    #[test]
    fn recorded_members_stay_and_scaling_down_removes_the_highest() {
        let recorded = |p: &Pool| -> BTreeMap<String, Vec<RecordedMember>> {
            [(p.name.clone(), p.members.clone())].into_iter().collect()
        };
        let three = pools(&WORKERS.replace("REPLICAS", "3"), BTreeMap::new());
        // Member 2 moved to .140 by an earlier range: it stays there.
        let mut history = recorded(&three[0]);
        history.get_mut("wk").expect("wk")[1].ip = "10.0.0.140".parse().expect("ip");
        let four = pools(&WORKERS.replace("REPLICAS", "4"), history.clone());
        assert_eq!(
            rows(&four[0]),
            [
                "1 lab-wk-1 10.0.0.129 2001 pve1",
                "2 lab-wk-2 10.0.0.140 2002 pve2",
                "3 lab-wk-3 10.0.0.133 2003 pve1",
                "4 lab-wk-4 10.0.0.132 2004 pve2"
            ]
        );
        let one = pools(&WORKERS.replace("REPLICAS", "1"), recorded(&four[0]));
        assert_eq!(rows(&one[0]), ["1 lab-wk-1 10.0.0.129 2001 pve1"]);
    }

    #[test]
    fn ranges_parse_as_first_last_or_cidr_hosts() {
        let r = Range::parse("10.0.0.8/30").expect("cidr");
        assert_eq!(
            r.addresses().map(|a| a.to_string()).collect::<Vec<_>>(),
            ["10.0.0.9", "10.0.0.10"]
        );
        assert!(Range::parse("10.0.0.9-10.0.0.8").is_none());
        assert!(Range::parse("10.0.0.1/32").is_none());
        assert_eq!(
            hostname("{cluster}-{pool}-{index}", "lab", "wk", 7),
            "lab-wk-7"
        );
    }
}
