//! The cluster `init` writes, worked out from its settings: the cluster's
//! name, the nodes' network, gateway and VIP, each node's hostname, role and
//! vmid, and the checks `validate` would make of them.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use anyhow::{anyhow, bail};

use super::request::{DataDisk, InitRequest};
use talosprov_topology::syntax::{Vmid, is_dns_label};

/// The nodes' network prefix, as in the reference cluster.
pub(super) const PREFIX_LENGTH: u8 = 24;
/// The network used when no flag names an address (the reference cluster's).
const DEFAULT_NETWORK: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 0);
/// Where the first default control plane goes in the network (the reference's).
const DEFAULT_CONTROLPLANE_HOST: u8 = 121;
/// The cluster name when neither `--name` nor the folder's name is a usable one.
const DEFAULT_NAME: &str = "talos";
/// The longest role suffix a hostname gets (`-gpu-01`): the cluster name must
/// leave room for it within a DNS label's 63 characters.
const LONGEST_SUFFIX: usize = "-gpu-01".len();

/// A node's role in the scaffold, which decides its hostname, size and schematic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    ControlPlane,
    Worker,
    /// A worker with the GPU of this PCI mapping.
    Gpu(String),
}

impl Kind {
    /// The hostname's role part: `cp`, `wk` or `gpu`.
    fn tag(&self) -> &'static str {
        match self {
            Kind::ControlPlane => "cp",
            Kind::Worker => "wk",
            Kind::Gpu(_) => "gpu",
        }
    }
}

/// One node of the scaffold, with everything its entry in `nodes:` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) hostname: String,
    pub(super) ip: Ipv4Addr,
    pub(super) kind: Kind,
    /// Set when the default (the IP's last octet) cannot be used.
    pub(super) vm_id: Option<u32>,
}

/// The cluster the flags describe, defaults applied.
#[derive(Debug, Clone)]
pub(super) struct Scaffold {
    pub(super) name: String,
    pub(super) vip: Ipv4Addr,
    pub(super) gateway: Ipv4Addr,
    pub(super) nodes: Vec<Node>,
    pub(super) endpoint: Option<String>,
    pub(super) gitlab: bool,
    pub(super) vlan: Option<u16>,
    pub(super) data_disks: Vec<DataDisk>,
}

/// `<cluster>-<cp|wk|gpu>-<NN>`: the hostname of the `index`-th (from 1) node of a role.
fn hostname(cluster: &str, kind: &Kind, index: usize) -> String {
    format!("{cluster}-{}-{index:02}", kind.tag())
}

/// The explicit `vm_id` of each address, in order: `None` where the project's
/// default, the IP's last octet, is a valid and unused VM ID; otherwise 1000
/// plus the last octet, counting up past IDs already taken (a last octet below
/// 100 is below Proxmox's range, and two subnets may share a last octet).
fn vm_ids(ips: &[Ipv4Addr]) -> Vec<Option<u32>> {
    let mut used = BTreeSet::new();
    ips.iter()
        .map(|ip| {
            let octet = u32::from(ip.octets()[3]);
            if octet >= Vmid::MIN && used.insert(octet) {
                return None;
            }
            let mut id = 1000 + octet;
            while !used.insert(id) {
                id += 1;
            }
            Some(id)
        })
        .collect()
}

/// The /24 network `ip` is in.
fn network_of(ip: Ipv4Addr) -> Ipv4Addr {
    let [a, b, c, _] = ip.octets();
    Ipv4Addr::new(a, b, c, 0)
}

/// The first host address of `network` not in `used`, trying `start` and
/// then the ones below it (down to `.2`), then the ones above it.
fn free_address(network: Ipv4Addr, start: u8, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    let [a, b, c, _] = network.octets();
    (2..=start.min(254))
        .rev()
        .chain(start.saturating_add(1)..=254)
        .map(|h| Ipv4Addr::new(a, b, c, h))
        .find(|ip| !used.contains(ip))
}

/// The cluster name: `--name` (checked), else DIR's name when it is a usable
/// one, else `talos`.
fn cluster_name(args: &InitRequest) -> anyhow::Result<String> {
    let usable = |n: &str| is_dns_label(n) && n.len() + LONGEST_SUFFIX <= 63;
    if let Some(n) = &args.name {
        if !usable(n) {
            bail!(
                "--name {n:?} must be a lowercase DNS label (a-z, 0-9 and '-') of at most {} \
                 characters, so that hostnames such as {n}-gpu-01 are valid",
                63 - LONGEST_SUFFIX
            );
        }
        return Ok(n.clone());
    }
    let from_dir = std::path::absolute(&args.dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| usable(n));
    Ok(from_dir.unwrap_or_else(|| DEFAULT_NAME.to_owned()))
}

impl Scaffold {
    /// The settings with their defaults applied, and their addresses checked for
    /// clashes.
    pub(super) fn from_request(args: &InitRequest) -> anyhow::Result<Scaffold> {
        let name = cluster_name(args)?;
        let given: Vec<Ipv4Addr> = args
            .controlplanes
            .iter()
            .chain(&args.workers)
            .chain(args.gpus.iter().map(|g| &g.ip))
            .copied()
            .collect();
        let network = network_of(
            args.gateway
                .or(args.vip)
                .or(given.first().copied())
                .unwrap_or(DEFAULT_NETWORK),
        );
        let gateway = args
            .gateway
            .unwrap_or(Ipv4Addr::from(u32::from(network) + 1));
        let mut used: BTreeSet<Ipv4Addr> = BTreeSet::from([gateway]);
        used.extend(args.vip);
        for ip in &given {
            if !used.insert(*ip) {
                bail!("the address {ip} is given twice (a node's address must be its own)");
            }
        }
        let mut mappings = BTreeSet::new();
        for g in &args.gpus {
            if !mappings.insert(&g.mapping) {
                bail!(
                    "the PCI mapping {:?} is given to two GPU workers: a device can be passed \
                     to one VM only, so give each --gpu its own mapping",
                    g.mapping
                );
            }
        }
        let mut controlplanes = args.controlplanes.clone();
        if controlplanes.is_empty() {
            let ip = free_address(network, DEFAULT_CONTROLPLANE_HOST, &used)
                .ok_or_else(|| anyhow!("no free address left in {network}/24"))?;
            used.insert(ip);
            controlplanes.push(ip);
        }
        let vip = match args.vip {
            Some(vip) => vip,
            None => {
                let below = controlplanes[0].octets()[3].saturating_sub(1);
                free_address(network_of(controlplanes[0]), below, &used)
                    .ok_or_else(|| anyhow!("no free address left for the VIP: give --vip"))?
            }
        };
        let mut roles: Vec<(Ipv4Addr, Kind)> = controlplanes
            .iter()
            .map(|ip| (*ip, Kind::ControlPlane))
            .collect();
        roles.extend(args.workers.iter().map(|ip| (*ip, Kind::Worker)));
        roles.extend(
            args.gpus
                .iter()
                .map(|g| (g.ip, Kind::Gpu(g.mapping.clone()))),
        );
        Ok(Scaffold {
            nodes: nodes(&name, roles),
            name,
            vip,
            gateway,
            endpoint: args.proxmox_endpoint.clone(),
            gitlab: args.gitlab,
            vlan: args.vlan,
            data_disks: args.data_disks.clone(),
        })
    }

    /// The PCI mappings of the GPU nodes, in node order (one each).
    pub(super) fn mappings(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.kind {
                Kind::Gpu(m) => Some(m.as_str()),
                Kind::ControlPlane | Kind::Worker => None,
            })
            .collect()
    }

    /// Refuse addresses outside the gateway's /24, as `validate` would
    /// (T018): the nodes and the VIP share one network.
    pub(super) fn check_network(&self) -> anyhow::Result<()> {
        let net = network_of(self.gateway);
        let outside: Vec<String> = std::iter::once(self.vip)
            .chain(self.nodes.iter().map(|n| n.ip))
            .filter(|ip| network_of(*ip) != net)
            .map(|ip| ip.to_string())
            .collect();
        if !outside.is_empty() {
            bail!(
                "{} outside the gateway's network {net}/{PREFIX_LENGTH}: the VIP and the nodes \
                 share the gateway's network (give --gateway on theirs)",
                outside.join(", ") + if outside.len() == 1 { " is" } else { " are" }
            );
        }
        Ok(())
    }
}

/// The nodes in order, each named by its role's count so far, with its vm_id.
fn nodes(cluster: &str, roles: Vec<(Ipv4Addr, Kind)>) -> Vec<Node> {
    let ids = vm_ids(&roles.iter().map(|(ip, _)| *ip).collect::<Vec<_>>());
    let mut counts = [0usize; 3];
    roles
        .into_iter()
        .zip(ids)
        .map(|((ip, kind), vm_id)| {
            let slot = match kind {
                Kind::ControlPlane => 0,
                Kind::Worker => 1,
                Kind::Gpu(_) => 2,
            };
            counts[slot] += 1;
            Node {
                hostname: hostname(cluster, &kind, counts[slot]),
                ip,
                kind,
                vm_id,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::init::request::parse_gpu;
    use std::path::PathBuf;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn hostnames_are_the_cluster_role_and_a_two_digit_count() {
        assert_eq!(hostname("lab", &Kind::ControlPlane, 1), "lab-cp-01");
        assert_eq!(hostname("lab", &Kind::Worker, 12), "lab-wk-12");
        assert_eq!(hostname("lab", &Kind::Gpu("gpu".into()), 2), "lab-gpu-02");
        let roles = vec![
            (ip("10.0.0.121"), Kind::ControlPlane),
            (ip("10.0.0.131"), Kind::Worker),
            (ip("10.0.0.122"), Kind::ControlPlane),
            (ip("10.0.0.141"), Kind::Gpu("gpu".into())),
        ];
        let names: Vec<String> = nodes("lab", roles)
            .into_iter()
            .map(|n| n.hostname)
            .collect();
        assert_eq!(names, ["lab-cp-01", "lab-wk-01", "lab-cp-02", "lab-gpu-01"]);
    }

    #[test]
    fn vm_ids_default_to_the_last_octet_and_are_explicit_only_when_needed() {
        let ips = [
            ip("192.168.1.121"),
            ip("192.168.1.21"),
            ip("192.168.2.121"),
            ip("192.168.3.21"),
        ];
        assert_eq!(vm_ids(&ips), [None, Some(1021), Some(1121), Some(1022)]);
    }

    #[test]
    fn defaults_follow_the_reference_network() {
        let args = InitRequest {
            dir: PathBuf::from("/tmp/Not A Label"),
            name: None,
            vip: None,
            gateway: None,
            controlplanes: vec![],
            workers: vec![],
            gpus: vec![],
            proxmox_endpoint: None,
            gitlab: false,
            vlan: None,
            data_disks: vec![],
        };
        let s = Scaffold::from_request(&args).unwrap();
        assert_eq!(s.name, "talos");
        assert_eq!(s.gateway, ip("192.168.1.1"));
        assert_eq!(s.vip, ip("192.168.1.120"));
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.nodes[0].ip, ip("192.168.1.121"));
        assert_eq!(s.nodes[0].hostname, "talos-cp-01");
        let shared = InitRequest {
            gpus: vec![
                parse_gpu("192.168.1.5=gpu").unwrap(),
                parse_gpu("192.168.1.6=gpu").unwrap(),
            ],
            ..args
        };
        let e = Scaffold::from_request(&shared).unwrap_err().to_string();
        assert!(e.contains("\"gpu\" is given to two GPU workers"), "{e}");
    }
}
