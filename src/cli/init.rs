//! `talosprov init DIR`: a new cluster folder that `validate` accepts, made from
//! a few flags: the topology (commented, section by section), the reference
//! patch tree with each GPU node's folder named after its generated hostname, a
//! `.gitignore` for what talosprov writes beside the topology, and optionally
//! the GitLab pipeline. Nothing is ever overwritten: when any of the files
//! exists, nothing is written at all.

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_topology::syntax::Vmid;
use talosprov_topology::syntax::is_dns_label;

/// The Talos release the scaffold pins, as the reference cluster does.
const TALOS_VERSION: &str = "v1.13.8";
/// The Kubernetes release the scaffold pins, as the reference cluster does.
const KUBERNETES_VERSION: &str = "v1.36.2";
/// The nodes' network prefix, as in the reference cluster.
const PREFIX_LENGTH: u8 = 24;
/// The network used when no flag names an address (the reference cluster's).
const DEFAULT_NETWORK: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 0);
/// Where the first default control plane goes in the network (the reference's).
const DEFAULT_CONTROLPLANE_HOST: u8 = 121;
/// The cluster name when neither `--name` nor the folder's name is a usable one.
const DEFAULT_NAME: &str = "talos";
/// The longest role suffix a hostname gets (`-gpu-01`): the cluster name must
/// leave room for it within a DNS label's 63 characters.
const LONGEST_SUFFIX: usize = "-gpu-01".len();

/// The reference patch tree (the repository's `patches/`), embedded so the
/// scaffold's copy is byte for byte the reference: (path under `patches/`, text).
const SHARED_PATCHES: [(&str, &str); 4] = [
    (
        "common/40-kubelet.yaml",
        include_str!("../../patches/common/40-kubelet.yaml"),
    ),
    (
        "controlplane/10-network-vip.yaml.tftpl",
        include_str!("../../patches/controlplane/10-network-vip.yaml.tftpl"),
    ),
    (
        "controlplane/20-cluster-cni-proxy.yaml",
        include_str!("../../patches/controlplane/20-cluster-cni-proxy.yaml"),
    ),
    (
        "controlplane/30-extra-manifests.yaml",
        include_str!("../../patches/controlplane/30-extra-manifests.yaml"),
    ),
];

/// The reference GPU node's patch (loads the NVIDIA modules): the scaffold
/// writes it under `nodes/<hostname>/` for each GPU node.
const NVIDIA_MODULES_PATCH: (&str, &str) = (
    "30-nvidia-modules.yaml",
    include_str!("../../patches/nodes/talos-gpu-01/30-nvidia-modules.yaml"),
);

/// The GitLab pipeline of `examples/gitlab-ci`, which already runs on
/// `cluster.yaml` and `patches/` at the repository root, as the scaffold lays
/// them out.
const GITLAB_CI: &str = include_str!("../../examples/gitlab-ci/.gitlab-ci.yml");

/// Arguments of `talosprov init` (its help text is on `Command::Init`).
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write the cluster into; created when missing.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The cluster name, a DNS label; hostnames are derived from it
    /// (default: DIR's name when it is one, else `talos`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The control planes' shared address that fronts the Kubernetes API
    /// (default: the free address just below the first control plane).
    #[arg(long, value_name = "IP")]
    pub vip: Option<Ipv4Addr>,

    /// The nodes' default route, also their nameserver (default: `.1` of the
    /// nodes' /24).
    #[arg(long, value_name = "IP")]
    pub gateway: Option<Ipv4Addr>,

    /// A control plane's address; repeat for more (default: one, at `.121`
    /// of the network, or the nearest free address).
    #[arg(long = "controlplane", value_name = "IP")]
    pub controlplanes: Vec<Ipv4Addr>,

    /// A worker's address; repeat for more.
    #[arg(long = "worker", value_name = "IP")]
    pub workers: Vec<Ipv4Addr>,

    /// A GPU worker at IP with the PCI device of the Proxmox resource mapping
    /// MAPPING passed through; repeat for more.
    #[arg(long = "gpu", value_name = "IP=MAPPING", value_parser = parse_gpu)]
    pub gpus: Vec<GpuWorker>,

    /// The Proxmox VE API URL, such as https://pve.example:8006 (default:
    /// none in the file, and every command, validate included, then needs
    /// PROXMOX_VE_ENDPOINT).
    #[arg(long, value_name = "URL")]
    pub proxmox_endpoint: Option<String>,

    /// Also write `.gitlab-ci.yml`: validate and plan on merge requests,
    /// apply the saved plan by hand, state kept by GitLab.
    #[arg(long)]
    pub gitlab: bool,

    /// The VLAN tag (1 to 4094) of every VM's NIC: the bridge tags its
    /// traffic (written as `proxmox.networks`).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u16).range(1..=4094))]
    pub vlan: Option<u16>,

    /// A data disk of SIZE GiB on every worker (every node when there is no
    /// worker), mounted at MOUNT (`/var/mnt/<name>`) as a Talos user volume,
    /// or left raw without one; repeat for more. Example: `--data-disk
    /// 200:/var/mnt/longhorn`.
    #[arg(long = "data-disk", value_name = "SIZE[:MOUNT]", value_parser = parse_data_disk)]
    pub data_disks: Vec<DataDiskArg>,
}

/// A `--data-disk SIZE[:MOUNT]` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDiskArg {
    /// Size, GiB.
    pub size_gib: u32,
    /// Where Talos mounts it, `/var/mnt/<name>`; `None` leaves it raw.
    pub mount: Option<String>,
}

/// Parse `SIZE[:MOUNT]`: a size in GiB, and a mount that names a Talos user
/// volume (the same check as `validate`).
fn parse_data_disk(s: &str) -> Result<DataDiskArg, String> {
    let (size, mount) = match s.split_once(':') {
        Some((size, mount)) => (size, Some(mount)),
        None => (s, None),
    };
    let size_gib = size
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("expected a size in GiB (1 or more), found {size:?}"))?;
    if let Some(m) = mount {
        talosprov_topology::validate_devices::volume_of(m)
            .map_err(|why| format!("mount {m:?} {why}"))?;
    }
    Ok(DataDiskArg {
        size_gib,
        mount: mount.map(str::to_owned),
    })
}

/// A `--gpu IP=MAPPING` flag: the worker's address and the name of the PCI
/// resource mapping its GPU is passed through from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWorker {
    /// The worker's address.
    pub ip: Ipv4Addr,
    /// The PCI mapping's name, as `pci_mappings` and `hostpci[].mapping` spell it.
    pub mapping: String,
}

/// Parse `IP=MAPPING`, where MAPPING is a Proxmox mapping ID.
fn parse_gpu(s: &str) -> Result<GpuWorker, String> {
    let (ip, mapping) = s
        .split_once('=')
        .ok_or_else(|| format!("expected IP=MAPPING, such as 192.168.1.123=gpu, found {s:?}"))?;
    let ip = ip
        .parse()
        .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
    let valid = mapping.len() <= 64
        && mapping.starts_with(|c: char| c.is_ascii_alphabetic())
        && mapping
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!(
            "mapping {mapping:?} must be a Proxmox mapping ID: a letter, then letters, digits, '-' and '_'"
        ));
    }
    Ok(GpuWorker {
        ip,
        mapping: mapping.to_owned(),
    })
}

/// A node's role in the scaffold, which decides its hostname, size and schematic.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
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
struct Node {
    hostname: String,
    ip: Ipv4Addr,
    kind: Kind,
    /// Set when the default (the IP's last octet) cannot be used.
    vm_id: Option<u32>,
}

/// The cluster the flags describe, defaults applied.
#[derive(Debug, Clone)]
struct Scaffold {
    name: String,
    vip: Ipv4Addr,
    gateway: Ipv4Addr,
    nodes: Vec<Node>,
    endpoint: Option<String>,
    gitlab: bool,
    vlan: Option<u16>,
    data_disks: Vec<DataDiskArg>,
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
fn cluster_name(args: &InitArgs) -> anyhow::Result<String> {
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
    /// The flags with their defaults applied, and their addresses checked for
    /// clashes.
    fn from_args(args: &InitArgs) -> anyhow::Result<Scaffold> {
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
    fn mappings(&self) -> Vec<&str> {
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
    fn check_network(&self) -> anyhow::Result<()> {
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

/// The files of the scaffold, as (path relative to DIR, content), in the
/// order they are written and listed.
fn files(s: &Scaffold, dir: &Path) -> Vec<(PathBuf, String)> {
    let mut schema = serde_json::to_string_pretty(&talosprov_topology::schema::cluster_schema())
        .unwrap_or_default();
    schema.push('\n');
    let mut out = vec![
        (PathBuf::from("cluster.yaml"), topology(s, dir)),
        (PathBuf::from("cluster.schema.json"), schema),
        (PathBuf::from(".gitignore"), GITIGNORE.to_owned()),
    ];
    for (path, text) in SHARED_PATCHES {
        out.push((Path::new("patches").join(path), text.to_owned()));
    }
    for n in s.nodes.iter().filter(|n| matches!(n.kind, Kind::Gpu(_))) {
        let path = Path::new("patches/nodes")
            .join(&n.hostname)
            .join(NVIDIA_MODULES_PATCH.0);
        out.push((path, NVIDIA_MODULES_PATCH.1.to_owned()));
    }
    if s.gitlab {
        out.push((PathBuf::from(".gitlab-ci.yml"), gitlab_ci(&s.name)));
    }
    out
}

/// The example pipeline for this cluster: its own GitLab-managed state name
/// and apply resource group (so several clusters can share a GitLab
/// instance, or a project with `STATE_NAME` changed), the image of this
/// talosprov's release, and a header saying what to set.
fn gitlab_ci(cluster: &str) -> String {
    let header = format!(
        "# The pipeline of the cluster {cluster}, as written by `talosprov init --gitlab`
# (talosprov's examples/gitlab-ci; its README explains each job). The jobs
# run the published image of TALOSPROV_VERSION below, the release that wrote
# this file; set the CI/CD variables listed next.
#
"
    );
    let pipeline: String = GITLAB_CI
        .lines()
        .map(|line| {
            if line.starts_with("  TALOSPROV_VERSION: ") {
                format!("  TALOSPROV_VERSION: \"{}\"\n", env!("CARGO_PKG_VERSION"))
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    header
        + &pipeline
            .replace("STATE_NAME: cluster\n", &format!("STATE_NAME: {cluster}\n"))
            .replace(
                "resource_group: talosprov-cluster\n",
                &format!("resource_group: talosprov-{cluster}\n"),
            )
}

/// What talosprov and its users write beside the topology that must not be
/// committed: the state and its backup, lock and temporary files, saved plans
/// (they hold the cluster's secrets), the outputs, and etcd snapshots.
const GITIGNORE: &str = "\
# Written by talosprov beside cluster.yaml; none of it belongs in Git.

# The local state (it holds the cluster's CA keys), the copy kept before each
# run that changes it, its lock file, and atomic-write temporaries.
talosprov.tfstate
*.tfstate
*.tfstate.backup
.*.tfstate.lock.info
*.lock.info
.talosprov-*.tmp

# Saved plans (`talosprov plan -out ...`): they hold the cluster's secrets.
*.plan
plan.cache
# The pipeline's merge-request report, logs and lock IDs.
plan.json
plan.log
apply.log
lock.env

# Outputs: credentials and rendered machine configs (secrets included).
kubeconfig
*.kubeconfig
talosconfig
*.talosconfig
secrets.yaml
rendered/

# The etcd snapshots `talosprov etcd snapshot` and apply (before a control
# plane's upgrade or removal) save beside the state when the topology has no
# backup: section: encrypted, but they hold every Kubernetes secret.
etcd-snapshots/
";

/// Write `files` under `dir`, refusing (before writing anything) when any
/// of them exists.
fn write_all(dir: &Path, files: &[(PathBuf, String)]) -> anyhow::Result<()> {
    let existing: Vec<String> = files
        .iter()
        .map(|(p, _)| dir.join(p))
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| format!("  {}", p.display()))
        .collect();
    if !existing.is_empty() {
        bail!(
            "{} already exist{}, so nothing was written (talosprov init never overwrites):\n{}",
            if existing.len() == 1 {
                "this file"
            } else {
                "these files"
            },
            if existing.len() == 1 { "s" } else { "" },
            existing.join("\n")
        );
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Run `init`: work out the cluster, refuse if any file exists, write them,
/// and print what was written and what to run next.
///
/// # Errors
/// Flags that contradict each other, an existing file (nothing is written
/// then), or a file that cannot be written.
pub fn run(args: InitArgs) -> Result<Outcome, CommandError> {
    let scaffold = Scaffold::from_args(&args)?;
    scaffold.check_network()?;
    let files = files(&scaffold, &args.dir);
    write_all(&args.dir, &files)?;
    let mut text = String::new();
    for (path, _) in &files {
        let _ = writeln!(text, "Wrote {}", args.dir.join(path).display());
    }
    let topology = args.dir.join("cluster.yaml");
    let f = topology.display();
    // validate needs the Proxmox endpoint (the file leaves proxmox.endpoint
    // out unless --proxmox-endpoint) and helm (the add-ons are Helm charts).
    let _ = write!(
        text,
        "\nNext steps:\n\
         \x20 1. Review {f}{fill}.\n\
         \x20 2. Install helm, on PATH or named by TALOSPROV_HELM=/path/to/helm: the add-ons are\n\
         \x20    rendered with `helm template`, and without it validate fails with A011.\n\
         \x20 3. {endpoint}export PROXMOX_VE_API_TOKEN='USER@REALM!TOKENID=SECRET'   # plan and apply need it\n\
         \x20 4. talosprov validate -f {f}\n\
         \x20 5. talosprov plan -f {f} -out {dir}/cluster.plan\n\
         \x20 6. talosprov apply -f {f} {dir}/cluster.plan\n\
         \x20 7. talosprov output kubeconfig -f {f} --out-file ~/.kube/{name}\n",
        fill = if scaffold.mappings().is_empty() {
            ""
        } else {
            ": fill in the PCI mappings' placeholders"
        },
        endpoint = if scaffold.endpoint.is_none() {
            "export PROXMOX_VE_ENDPOINT=https://HOST:8006   # validate needs it: cluster.yaml \
             leaves proxmox.endpoint out\n\x20    "
        } else {
            ""
        },
        dir = args.dir.display(),
        name = scaffold.name,
    );
    crate::ui::out::write_stdout(&text).context("cannot print the files written")?;
    Ok(Outcome::Success)
}

/// `cluster.yaml`: every section with a comment saying what it is for.
fn topology(s: &Scaffold, dir: &Path) -> String {
    let mut y = String::new();
    header(&mut y, s, dir);
    cluster_section(&mut y, s);
    proxmox_section(&mut y, s);
    schematics_section(&mut y, s);
    nodes_section(&mut y, s);
    addons_section(&mut y, s);
    y
}

/// The schema line for editors, and what the file is.
fn header(y: &mut String, s: &Scaffold, dir: &Path) {
    let count = |k: fn(&Kind) -> bool, one: &str, many: &str| match s
        .nodes
        .iter()
        .filter(|n| k(&n.kind))
        .count()
    {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let roles: Vec<String> = [
        count(
            |k| *k == Kind::ControlPlane,
            "control plane",
            "control planes",
        ),
        count(|k| *k == Kind::Worker, "worker", "workers"),
        count(|k| matches!(k, Kind::Gpu(_)), "GPU worker", "GPU workers"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let roles = match roles.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    let file = dir.join("cluster.yaml");
    let _ = write!(
        y,
        "# yaml-language-server: $schema=cluster.schema.json
# The cluster {name}: {roles}, on one Proxmox host, the
# control planes behind a VIP. Check it offline with:
#   talosprov validate -f {file}
# then `talosprov plan` and `talosprov apply`. Editors that use the YAML language
# server check this file against cluster.schema.json (first line), written
# here by `talosprov init`; `talosprov schema > cluster.schema.json` renews it.
#
# Credentials never go in this file: talosprov reads the Proxmox API token from
# PROXMOX_VE_API_TOKEN (USER@REALM!TOKENID=SECRET) in the environment.
",
        name = s.name,
        file = file.display(),
    );
}

/// `cluster:`: name, versions and the network every node shares.
fn cluster_section(y: &mut String, s: &Scaffold) {
    let _ = write!(
        y,
        "
# The Kubernetes cluster. Hostnames are <name>-cp-NN, -wk-NN and -gpu-NN. The
# control planes share the VIP, a free address on the nodes' network that fronts
# the Kubernetes API (https://VIP:6443). Every node routes through the gateway,
# which is also its nameserver. Talos installs to the VM's system disk.
cluster:
  name: {name}
  talos_version: {TALOS_VERSION}
  kubernetes_version: {KUBERNETES_VERSION}
  vip: {vip}
  gateway: {gw}
  prefix_length: {PREFIX_LENGTH}
  nameservers: [{gw}]
  install_disk: /dev/sda
",
        name = s.name,
        vip = s.vip,
        gw = s.gateway,
    );
}

/// `proxmox:` and `image_factory:`: where the VMs and their images go.
fn proxmox_section(y: &mut String, s: &Scaffold) {
    let endpoint = match &s.endpoint {
        // A JSON string is a YAML double-quoted scalar.
        Some(url) => format!("  endpoint: {}\n", serde_json::Value::from(url.as_str())),
        None => "  # endpoint: https://pve.example:8006   (unset: PROXMOX_VE_ENDPOINT gives it)\n"
            .to_owned(),
    };
    let _ = write!(
        y,
        "
# The Proxmox VE host the VMs run on: its API, node name, the storage for the
# VMs' disks (datastore) and for the downloaded Talos images (image_storage, with
# the `import` content type), the bridge the VMs' NIC joins and the pool that
# groups them. For a self-signed certificate, add ca_file or fingerprint.
proxmox:
{endpoint}  node: pve
  datastore: local-lvm
  image_storage: local
  bridge: vmbr0
  pool: {name}
{networks}
# Where the Talos images come from: each schematic below is registered there.
image_factory:
  url: https://factory.talos.dev
",
        name = s.name,
        networks = match s.vlan {
            Some(tag) => format!(
                "  # Every VM's NIC, on the bridge above, tagged by it with VLAN {tag}.\n  \
                 networks:\n    - {{ vlan: {tag} }}\n"
            ),
            None => String::new(),
        },
    );
}

/// `schematics:` and, with GPU nodes, `pci_mappings:` with placeholders.
fn schematics_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# The Talos system extensions of each image. Nodes use default_schematic unless
# they name another.
schematics:
  base:
    extensions:
      - siderolabs/qemu-guest-agent
",
    );
    let mappings = s.mappings();
    if !mappings.is_empty() {
        y.push_str(
            "  # The GPU nodes: the NVIDIA open kernel modules and container toolkit.
  nvidia:
    extensions:
      - siderolabs/nvidia-container-toolkit-production
      - siderolabs/nvidia-open-gpu-kernel-modules-production
      - siderolabs/qemu-guest-agent
",
        );
    }
    y.push_str("\ndefault_schematic: base\n");
    if mappings.is_empty() {
        return;
    }
    y.push_str(
        "
# The Proxmox resource mappings of the GPUs passed through (Datacenter > Resource
# Mappings). The values below are PLACEHOLDERS: fill them in from the Proxmox
# host, with `lspci -nn` for path and id, `lspci -nnv` (Subsystem) for
# subsystem_id, and /sys/bus/pci/devices/<path>/iommu_group for iommu_group.
pci_mappings:
",
    );
    for m in mappings {
        let _ = write!(
            y,
            "  {m}:
    path: \"0000:00:00\"
    id: \"10de:0000\"
    iommu_group: 0
    subsystem_id: \"0000:0000\"
    comment: GPU (fill in its path, id, subsystem_id and iommu_group)
"
        );
    }
}

/// `nodes:` and `patches_dir:`.
fn nodes_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# The VMs. memory is in MiB, disk_size in GiB. vm_id defaults to the IP's last
# octet; it is written out only where that cannot be used (below 100, or taken).
nodes:
",
    );
    for n in &s.nodes {
        let (role, cores, memory, disk) = match n.kind {
            Kind::ControlPlane => ("controlplane", 2, 4096, 50),
            Kind::Worker => ("worker", 4, 8192, 100),
            Kind::Gpu(_) => ("worker", 4, 12288, 100),
        };
        let _ = writeln!(y, "  - hostname: {}\n    ip: {}", n.hostname, n.ip);
        match n.vm_id {
            Some(id) => {
                let _ = writeln!(y, "    vm_id: {id}");
            }
            None => {
                let _ = writeln!(y, "    # vm_id: {} (the IP's last octet)", n.ip.octets()[3]);
            }
        }
        let _ = writeln!(
            y,
            "    role: {role}\n    cores: {cores}\n    memory: {memory}\n    disk_size: {disk}"
        );
        let has_worker = s.nodes.iter().any(|n| n.kind != Kind::ControlPlane);
        if !s.data_disks.is_empty() && (n.kind != Kind::ControlPlane || !has_worker) {
            y.push_str("    disks:\n");
            for d in &s.data_disks {
                let _ = match &d.mount {
                    Some(m) => writeln!(y, "      - {{ size: {}, mount: {m} }}", d.size_gib),
                    None => writeln!(y, "      - {{ size: {} }}", d.size_gib),
                };
            }
        }
        if let Kind::Gpu(m) = &n.kind {
            let _ = write!(
                y,
                "    schematic: nvidia
    hostpci:
      - device: hostpci0
        mapping: {m}
        pcie: true
        rombar: true
        xvga: false
"
            );
        }
    }
    y.push_str(
        "
# The machine config patches, merged in order: patches/common/, then
# patches/<role>/, then patches/nodes/<hostname>/ (see the README).
patches_dir: patches
",
    );
}

/// `addons:`: Cilium always, the GPU operator with GPU nodes.
fn addons_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# Kubernetes add-ons, rendered with `helm template` (helm on PATH, or
# TALOSPROV_HELM; `validate` says when it is missing). They are on, not left
# commented out, because the patches turn the built-in CNI and kube-proxy off:
# without Cilium no node ever becomes Ready. As a bootstrap add-on Cilium is in
# every control plane's inline manifests, so the nodes are Ready at bootstrap.
addons:
  cilium:
    preset: cilium
    helm:
      repo: https://helm.cilium.io/
      chart: cilium
      version: 1.19.6
      values:
        operator:
          replicas: 1
",
    );
    if !s.mappings().is_empty() {
        y.push_str(
            "  # The NVIDIA GPU operator, for the GPU nodes (their schematic carries the
  # NVIDIA extensions and their patch loads the NVIDIA modules).
  gpu-operator:
    preset: nvidia-gpu-operator
    helm:
      repo: https://helm.ngc.nvidia.com/nvidia
      chart: gpu-operator
      version: v26.3.3
    depends_on: [cilium]
",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let args = InitArgs {
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
        let s = Scaffold::from_args(&args).unwrap();
        assert_eq!(s.name, "talos");
        assert_eq!(s.gateway, ip("192.168.1.1"));
        assert_eq!(s.vip, ip("192.168.1.120"));
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.nodes[0].ip, ip("192.168.1.121"));
        assert_eq!(s.nodes[0].hostname, "talos-cp-01");
        let shared = InitArgs {
            gpus: vec![
                parse_gpu("192.168.1.5=gpu").unwrap(),
                parse_gpu("192.168.1.6=gpu").unwrap(),
            ],
            ..args
        };
        let e = Scaffold::from_args(&shared).unwrap_err().to_string();
        assert!(e.contains("\"gpu\" is given to two GPU workers"), "{e}");
    }

    #[test]
    fn the_pipeline_keeps_its_state_and_applies_under_the_cluster_name() {
        let ci = gitlab_ci("lab");
        assert!(ci.contains("\n  STATE_NAME: lab\n"), "{ci}");
        assert!(ci.contains("\n  resource_group: talosprov-lab\n"), "{ci}");
        assert!(!ci.contains("talosprov-cluster"));
    }

    #[test]
    fn the_pipeline_runs_the_published_image_and_builds_nothing() {
        let ci = gitlab_ci("lab");
        let version = format!("\n  TALOSPROV_VERSION: \"{}\"\n", env!("CARGO_PKG_VERSION"));
        assert!(ci.contains(&version), "{ci}");
        assert!(
            ci.contains(
                "\n  image: registry.gitlab.com/talosprov/talosprov:${TALOSPROV_VERSION}\n"
            ),
            "{ci}"
        );
        assert!(!ci.contains("cargo"), "{ci}");
        assert!(!ci.contains("TALOSPROV_REPO"), "{ci}");
    }

    #[test]
    fn gpu_flags_name_an_address_and_a_mapping() {
        assert_eq!(
            parse_gpu("10.0.0.5=gpu-a").unwrap(),
            GpuWorker {
                ip: ip("10.0.0.5"),
                mapping: "gpu-a".into()
            }
        );
        assert!(parse_gpu("10.0.0.5").is_err());
        assert!(parse_gpu("10.0.0.5=a b").is_err());
        assert!(parse_gpu("host=gpu").is_err());
    }
}
