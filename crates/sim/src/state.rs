//! The simulated nodes' state machine (maintenance → install/reboot → secure mode) and
//! the per-cluster etcd state shared by the nodes of one simulator process.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::NodeConfig;
use talosprov_base::role::Role;

/// Where a simulated node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Booted without a config: maintenance-mode API.
    Maintenance,
    /// Configured and booted: mutual-TLS API.
    Secure,
    /// Rebooting, installing, or refusing connections until the instant passes.
    Down {
        /// When the node comes back.
        until: Instant,
        /// True for a reboot (services restart, staged upgrades apply, etcd rejoins);
        /// false for a network outage (the node comes back as it was).
        rebooting: bool,
    },
    /// Powered off after a Reset without reboot, until `SimNode::power_on`.
    Halted,
}

/// Fault switches a test (or the example's flags) can set on a node.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    /// After each boot, CRI and etcd stay unready this long (Bootstrap answers
    /// FailedPrecondition "bootstrap is not available yet").
    pub slow_boot: Duration,
    /// The next ApplyConfiguration fails with this status.
    pub fail_next_apply: Option<(tonic::Code, String)>,
    /// The n-th ApplyConfiguration from now that is not a dry run (1: the next
    /// one) fails with this status; dry runs pass and do not count.
    pub fail_apply_at: Option<(u32, tonic::Code, String)>,
    /// When the node joins etcd it immediately loses its membership.
    pub lose_etcd_on_join: bool,
    /// The next upgrade fails with this installer message (LifecycleService: exit
    /// code 1 in the progress stream; legacy Upgrade: an Internal status) and the
    /// node stays on its version.
    pub fail_next_upgrade: Option<String>,
    /// The next Reset fails with this message (an Internal status, as
    /// machined answers when its reset sequence cannot start) and the node
    /// is left as it was.
    pub fail_next_reset: Option<String>,
    /// Each chunk of an EtcdSnapshot stream from this node waits this long
    /// before it is sent (a slow disk or link), so a test can stop a client
    /// mid-stream.
    pub snapshot_chunk_delay: Duration,
}

/// One RPC any node of the simulator served, in the order they were answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRpc {
    /// The node that served it.
    pub node: IpAddr,
    /// RPC name, e.g. `ImageService/Pull`.
    pub rpc: String,
    /// The status code of the answer (`Ok` for success).
    pub code: tonic::Code,
}

/// An upgrade a node accepted, with what etcd looked like at that moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeRecord {
    /// The node that accepted it.
    pub node: IpAddr,
    /// The installer image.
    pub image: String,
    /// Whether the node is a control plane.
    pub control_plane: bool,
    /// Whether, when the upgrade was accepted, etcd of the node's cluster had been
    /// bootstrapped and every member was up in secure mode and in the cluster.
    pub etcd_healthy: bool,
}

/// A reboot a node started (Reboot, a reboot-mode apply, an install, an upgrade),
/// with what etcd looked like as it went down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootRecord {
    /// The node that rebooted.
    pub node: IpAddr,
    /// Whether the node is a control plane (by the config it ran).
    pub control_plane: bool,
    /// Whether, just before the node went down, etcd of its cluster had been
    /// bootstrapped and every member was up in secure mode and in the cluster.
    pub etcd_healthy: bool,
}

/// One RPC the node served, with the code it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedRpc {
    /// RPC name, e.g. `ApplyConfiguration`.
    pub rpc: String,
    /// The status code of the answer (`Ok` for success).
    pub code: tonic::Code,
}

#[derive(Debug)]
pub(crate) struct NodeState {
    pub phase: Phase,
    /// The config the node runs (machined's active `MachineConfig`).
    pub config: Option<NodeConfig>,
    /// The config on the STATE partition, which the next boot loads: ahead of
    /// `config` after a staged apply (Talos's `PersistentID` config).
    pub persisted: Option<NodeConfig>,
    /// When the node last booted, in seconds since the Unix epoch (SystemStat).
    pub boot_time: u64,
    pub installed: bool,
    pub tag: String,
    pub installed_image: Option<String>,
    pub staged_image: Option<String>,
    pub upgrades: Vec<String>,
    pub etcd_data: bool,
    pub etcd_lost: bool,
    /// The etcd snapshot uploaded with EtcdRecover for a Bootstrap with `recover_etcd`
    /// (Talos's `/var/lib/etcd.snapshot`); a later upload replaces it.
    pub etcd_upload: Option<Arc<Vec<u8>>>,
    pub services_ready_at: Instant,
    pub faults: Faults,
    pub served: Vec<ServedRpc>,
    /// How many times the node went down to reboot.
    pub reboots: u32,
    /// When its kubelet registered the Kubernetes `Node` (first served by the API),
    /// in seconds since the Unix epoch: the Node's `creationTimestamp`. A reset clears it.
    pub registered_at: Option<u64>,
}

/// One simulated node.
#[derive(Debug)]
pub(crate) struct Node {
    pub ip: IpAddr,
    /// The hostname the node's platform gives it: on Proxmox's nocloud, the VM name
    /// from the cloud-init user-data. `None` when the simulator was not told.
    pub platform_hostname: Option<String>,
    state: Mutex<NodeState>,
    /// Bumped whenever the node must stop serving and look at its phase again.
    pub generation: watch::Sender<u64>,
}

impl Node {
    pub fn new(ip: IpAddr, tag: String, platform_hostname: Option<String>) -> Node {
        Node {
            ip,
            platform_hostname,
            state: Mutex::new(NodeState {
                phase: Phase::Maintenance,
                config: None,
                persisted: None,
                boot_time: unix_now(),
                installed: false,
                tag,
                installed_image: None,
                staged_image: None,
                upgrades: Vec::new(),
                etcd_data: false,
                etcd_lost: false,
                etcd_upload: None,
                services_ready_at: Instant::now(),
                faults: Faults::default(),
                served: Vec::new(),
                reboots: 0,
                registered_at: None,
            }),
            generation: watch::channel(0).0,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the node's server loop so it re-reads the phase.
    pub fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// The hostname Talos would use, in Talos's order of precedence: one set in the
    /// machine config, else the platform's (the Proxmox VM name, which nocloud reads
    /// from the cloud-init user-data and which outranks `HostnameConfig auto: stable`),
    /// else a stable name from the IP, standing in for `auto: stable`.
    pub fn hostname(&self, state: &NodeState) -> String {
        state
            .config
            .as_ref()
            .and_then(|c| c.hostname.clone())
            .or_else(|| self.platform_hostname.clone())
            .unwrap_or_else(|| format!("talos-{}", self.ip.to_string().replace(['.', ':'], "-")))
    }

    /// Starts a reboot: unreachable for `delay` (plus the slow-boot fault), then back in
    /// the mode the persisted config implies.
    pub fn reboot(&self, state: &mut NodeState, delay: Duration) {
        state.reboots += 1;
        state.phase = Phase::Down {
            until: Instant::now() + delay,
            rebooting: true,
        };
    }
}

/// An etcd member of a simulated cluster.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub id: u64,
    pub hostname: String,
    pub ip: IpAddr,
}

/// etcd of one simulated cluster (keyed by `cluster.id`).
#[derive(Debug, Default)]
pub(crate) struct Cluster {
    pub bootstrapped: bool,
    pub members: Vec<Member>,
    next_id: u64,
    /// Whether its Kubernetes API was started (at bootstrap).
    pub api_started: bool,
    /// Its Kubernetes objects: the bootstrapping control plane's inline manifests (or
    /// a recovered snapshot's objects), then whatever clients write through the API.
    /// This is what etcd holds, and what its snapshots carry.
    pub store: super::kube_store::Store,
    /// The task serving its Kubernetes API, aborted (its listener closed) when etcd
    /// is gone.
    pub api_task: Option<tokio::task::JoinHandle<()>>,
    /// Bumped each time etcd is gone: an API that was starting for an earlier etcd
    /// stops instead of serving.
    pub epoch: u64,
    /// Extra bytes of padding each snapshot carries (`SimNode::pad_etcd_snapshot`).
    pub snapshot_padding: u64,
}

impl Cluster {
    pub fn join(&mut self, ip: IpAddr, hostname: String) -> u64 {
        if let Some(m) = self.members.iter().find(|m| m.ip == ip) {
            return m.id;
        }
        self.next_id += 1;
        // etcd member IDs are random 64-bit values; a fixed odd multiplier keeps them
        // distinct and deterministic.
        let id = self.next_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.members.push(Member { id, hostname, ip });
        id
    }

    pub fn leave(&mut self, ip: IpAddr) {
        self.members.retain(|m| m.ip != ip);
    }

    /// etcd is gone (no member holds its data): not bootstrapped, no members, an empty
    /// store, the Kubernetes API stopped. Snapshot padding is a simulator setting and
    /// stays.
    pub fn forget_etcd(&mut self) {
        self.bootstrapped = false;
        self.members.clear();
        self.api_started = false;
        self.store = super::kube_store::Store::new();
        self.epoch += 1;
        if let Some(task) = self.api_task.take() {
            task.abort();
        }
    }
}

/// Everything the nodes of one simulator share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub options: SimOptions,
    pub nodes: Vec<Arc<Node>>,
    clusters: Mutex<HashMap<String, Cluster>>,
    /// Bumped when any node's config changes (workers wait for a control plane's CA).
    pub changed: watch::Sender<u64>,
    /// Set to true to stop every node.
    pub shutdown: watch::Sender<bool>,
    /// Every RPC served by any node, in order.
    log: Mutex<Vec<LoggedRpc>>,
    /// Every upgrade accepted by any node, in order.
    upgrade_log: Mutex<Vec<UpgradeRecord>>,
    /// Every reboot a node started, in order.
    reboot_log: Mutex<Vec<RebootRecord>>,
}

impl Shared {
    pub fn new(options: SimOptions, nodes: Vec<Arc<Node>>) -> Shared {
        Shared {
            options,
            nodes,
            clusters: Mutex::new(HashMap::new()),
            changed: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            log: Mutex::new(Vec::new()),
            upgrade_log: Mutex::new(Vec::new()),
            reboot_log: Mutex::new(Vec::new()),
        }
    }

    /// Abort the tasks that serve beside the nodes: every cluster's Kubernetes API.
    pub fn abort_tasks(&self) {
        for cluster in self.clusters().values_mut() {
            if let Some(task) = cluster.api_task.take() {
                task.abort();
            }
        }
    }

    /// Appends to the simulator-wide RPC log.
    pub fn log_rpc(&self, entry: LoggedRpc) {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }

    /// The simulator-wide RPC log.
    pub fn rpc_log(&self) -> Vec<LoggedRpc> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Appends to the upgrade log.
    pub fn log_upgrade(&self, record: UpgradeRecord) {
        self.upgrade_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }

    /// The upgrade log.
    pub fn upgrade_log(&self) -> Vec<UpgradeRecord> {
        self.upgrade_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Appends to the reboot log.
    pub fn log_reboot(&self, record: RebootRecord) {
        self.reboot_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record);
    }

    /// The reboot log.
    pub fn reboot_log(&self) -> Vec<RebootRecord> {
        self.reboot_log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether etcd of `cluster` is bootstrapped and every member is healthy: its node
    /// (when this simulator serves it) is up in secure mode, its services have started
    /// after the last boot, and it has not lost its membership. Locks the clusters, then each member node in turn.
    pub fn etcd_healthy(&self, cluster: &str) -> bool {
        let members: Vec<IpAddr> = {
            let clusters = self.clusters();
            match clusters.get(cluster) {
                Some(c) if c.bootstrapped && !c.members.is_empty() => {
                    c.members.iter().map(|m| m.ip).collect()
                }
                _ => return false,
            }
        };
        members.iter().all(|ip| {
            self.nodes.iter().find(|n| n.ip == *ip).is_none_or(|n| {
                let state = n.lock();
                state.phase == Phase::Secure
                    && !state.etcd_lost
                    && Instant::now() >= state.services_ready_at
            })
        })
    }

    pub fn clusters(&self) -> MutexGuard<'_, HashMap<String, Cluster>> {
        self.clusters.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn notify_changed(&self) {
        self.changed.send_modify(|g| *g += 1);
    }

    /// Called when a node's Down phase has passed: it boots into secure mode (config
    /// present) or maintenance mode, applies a staged upgrade, and (control plane, cluster
    /// bootstrapped) rejoins etcd.
    pub fn finish_boot(&self, node: &Node) {
        let mut state = node.lock();
        let rebooting = match state.phase {
            Phase::Down { until, rebooting } if until <= Instant::now() => rebooting,
            _ => return,
        };
        if !rebooting {
            state.phase = if state.config.is_some() {
                Phase::Secure
            } else {
                Phase::Maintenance
            };
            drop(state);
            self.notify_changed();
            return;
        }
        if let Some(image) = state.staged_image.take() {
            if let Some(tag) = tag_of_image(&image) {
                state.tag = tag;
            }
            state.installed_image = Some(image);
        }
        // The boot loads the config from the STATE partition: a staged one is taken now.
        state.config = state.persisted.clone();
        state.boot_time = next_boot_time(state.boot_time, unix_now());
        state.services_ready_at = Instant::now() + state.faults.slow_boot;
        state.phase = if state.config.is_some() {
            Phase::Secure
        } else {
            Phase::Maintenance
        };
        let join = match &state.config {
            Some(cfg) if cfg.machine_type == Role::Controlplane && !state.etcd_lost => {
                Some(cluster_key(cfg))
            }
            _ => None,
        };
        let hostname = node.hostname(&state);
        drop(state);
        if let Some(key) = join {
            let mut clusters = self.clusters();
            let cluster = clusters.entry(key.clone()).or_default();
            if cluster.bootstrapped {
                cluster.join(node.ip, hostname);
                drop(clusters);
                self.after_join(node, &key);
            }
        }
        tracing::info!(target: "talos_sim", node = %node.ip, phase = ?node.lock().phase, "booted");
        self.notify_changed();
    }

    /// After a node lost its etcd data (reset, wipe): when no node of cluster `key`
    /// holds etcd data any more, and every member is a node of this simulator, that
    /// etcd is gone ([`Cluster::forget_etcd`]). Locks each node in turn, then the
    /// clusters.
    pub fn forget_etcd_if_gone(&self, key: &str) {
        let held = self.nodes.iter().any(|n| {
            let state = n.lock();
            let cfg = state.config.as_ref().or(state.persisted.as_ref());
            state.etcd_data && cfg.is_some_and(|c| cluster_key(c) == key)
        });
        if held {
            return;
        }
        let mut clusters = self.clusters();
        let Some(cluster) = clusters.get_mut(key) else {
            return;
        };
        let elsewhere = cluster
            .members
            .iter()
            .any(|m| self.nodes.iter().all(|n| n.ip != m.ip));
        if elsewhere || !(cluster.bootstrapped || cluster.api_started) {
            return;
        }
        cluster.forget_etcd();
        drop(clusters);
        tracing::info!(target: "talos_sim", cluster = %key, "etcd is gone: no member holds its data");
    }

    /// Marks the node's etcd as holding data, and applies the lose-on-join fault.
    pub fn after_join(&self, node: &Node, cluster: &str) {
        let mut state = node.lock();
        state.etcd_data = true;
        if state.faults.lose_etcd_on_join {
            state.faults.lose_etcd_on_join = false;
            state.etcd_lost = true;
            drop(state);
            self.clusters()
                .entry(cluster.to_string())
                .or_default()
                .leave(node.ip);
        }
    }

    /// A control plane of `cluster` holding the OS CA key whose certificate and token
    /// match, as trustd on that node would use to sign a worker's apid certificate.
    pub fn trustd_ca_key(&self, cfg: &NodeConfig) -> Option<String> {
        self.nodes.iter().find_map(|n| {
            let state = n.lock();
            let other = state.config.as_ref()?;
            (other.machine_type == Role::Controlplane
                && other.os_ca_crt_pem == cfg.os_ca_crt_pem
                && other.token == cfg.token)
                .then(|| other.os_ca_key_pem.clone())
                .flatten()
        })
    }
}

/// The least time between two boots of a simulated node, in seconds: a real
/// reboot (shutdown, firmware, kernel) takes longer, and a test's instant reboot
/// must still move the boot time the way a real one does.
pub(crate) const MIN_REBOOT_SECONDS: u64 = 30;

/// The wall clock in seconds since the Unix epoch (0 before it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The boot time of a boot starting at `now` after one at `previous` (seconds
/// since the Unix epoch): `now`, but at least [`MIN_REBOOT_SECONDS`] later.
pub(crate) fn next_boot_time(previous: u64, now: u64) -> u64 {
    now.max(previous + MIN_REBOOT_SECONDS)
}

/// The key grouping nodes into one simulated cluster: `cluster.id`, else the name.
pub(crate) fn cluster_key(cfg: &NodeConfig) -> String {
    if cfg.cluster_id.is_empty() {
        cfg.cluster_name.clone()
    } else {
        cfg.cluster_id.clone()
    }
}

/// `ghcr.io/siderolabs/installer:v1.13.9` → `v1.13.9`.
pub(crate) fn tag_of_image(image: &str) -> Option<String> {
    let tail = image.rsplit('/').next()?;
    let tag = tail.split_once(':')?.1;
    let tag = tag.split('@').next()?;
    tag.starts_with('v').then(|| tag.to_string())
}

/// Parses `v1.13.8` into (1, 13); None for anything else.
pub(crate) fn minor_version(tag: &str) -> Option<(u32, u32)> {
    let mut parts = tag.trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.split('-').next()?.parse().ok()?;
    Some((major, minor))
}

/// Settings shared by every node of a simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    /// The Talos release the nodes report (Version) and behave as, e.g. `v1.13.8`.
    /// Before v1.13 the ImageService and LifecycleService are absent and maintenance
    /// mode answers Unimplemented to secure-only RPCs.
    pub talos_version: String,
    /// How long a node is unreachable while it installs and reboots (also on Reboot,
    /// Upgrade, Reset). Zero models a nocloud disk image that goes straight on.
    pub reboot_delay: Duration,
    /// Nodes that have an NVIDIA GPU passed through (the simulator cannot see
    /// Proxmox's `hostpci`): their Kubernetes node has `nvidia.com/gpu: 1` once
    /// the NVIDIA modules are loaded and a device plugin runs.
    pub gpu_nodes: Vec<std::net::IpAddr>,
    /// The hostname each node's platform gives it, as Talos's nocloud platform takes the
    /// Proxmox VM name from the cloud-init user-data (the simulator cannot see Proxmox).
    /// It names the node in etcd, its certificates and its Kubernetes `Node` object,
    /// unless the machine config sets one. A node left out gets `talos-<ip with dashes>`.
    pub hostnames: std::collections::BTreeMap<std::net::IpAddr, String>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            talos_version: "v1.13.8".to_string(),
            reboot_delay: Duration::from_secs(2),
            gpu_nodes: Vec::new(),
            hostnames: std::collections::BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_become_versions() {
        assert_eq!(
            tag_of_image("factory.talos.dev/installer/abc:v1.13.9").as_deref(),
            Some("v1.13.9")
        );
        assert_eq!(tag_of_image("registry:5000/installer"), None);
        assert_eq!(tag_of_image("ghcr.io/siderolabs/installer:latest"), None);
    }

    #[test]
    fn versions_compare_by_minor() {
        assert_eq!(minor_version("v1.13.8"), Some((1, 13)));
        assert_eq!(minor_version("v1.12.0-beta.1"), Some((1, 12)));
        assert_eq!(minor_version("nonsense"), None);
    }

    #[test]
    fn every_boot_moves_the_boot_time_forward_by_a_reboot_at_least() {
        assert_eq!(next_boot_time(1_000, 1_005), 1_000 + MIN_REBOOT_SECONDS);
        assert_eq!(next_boot_time(1_000, 5_000), 5_000);
    }

    #[test]
    fn members_join_once() {
        let mut c = Cluster::default();
        let ip: IpAddr = "127.0.0.5".parse().unwrap();
        let a = c.join(ip, "cp-1".into());
        assert_eq!(c.join(ip, "cp-1".into()), a);
        assert_eq!(c.members.len(), 1);
        c.leave(ip);
        assert!(c.members.is_empty());
    }
}
