//! A simulated Talos node serving the Talos API on `<ip>:50000`, for tests and for
//! trying talosprov without hardware. It follows the Talos sources: maintenance mode,
//! config validation, install and reboot, staged configs taken at the next boot, secure
//! mode with roles, etcd bootstrap and membership, etcd snapshots of the cluster's
//! Kubernetes objects and recovery from them (EtcdRecover, Bootstrap with
//! `recover_etcd`), kubeconfig, upgrade and reset; plus fault switches for tests,
//! losing a node entirely ([`SimNode::wipe`]) among them. Also the Image Factory stand-in's schematic IDs
//! (`schematic`, served by the `factory-stub` binary).

#![warn(missing_docs)]

mod certs;
mod config;
mod immediate;
mod kube;
pub mod kube_store;
mod machined;
mod peer;
pub mod schematic;
mod server;
mod service;
pub mod state;
mod verify;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::state::{LoggedRpc, Phase, RebootRecord, ServedRpc, SimOptions, UpgradeRecord};

use state::{Node, Shared};
use talosprov_talos::client::TALOS_API_PORT;

/// Errors starting the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Port 50000 on the address could not be bound (address missing, in use, or
    /// needing privileges). On macOS add loopback aliases first
    /// (`sudo ifconfig lo0 alias 127.0.0.121`).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address and port.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

/// A running simulator: one simulated node per address, all sharing etcd state per
/// cluster (`cluster.id`). Dropping it stops every node.
///
/// Certificates: in maintenance mode each boot makes a throwaway self-signed Ed25519
/// identity; in secure mode apid's certificate is issued from `machine.ca`. A worker's
/// config has no CA key, so, as Talos workers ask trustd on a control plane (with
/// `machine.token`), a simulated worker has its certificate signed with the key of a
/// configured control plane of this simulator that has the same OS CA and token, and
/// keeps its API closed until there is one.
pub struct Simulator {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Simulator {
    /// Binds `<ip>:50000` for each address and starts the nodes in maintenance mode.
    ///
    /// Errors: [`SimError::Bind`] naming the first address that could not be bound.
    pub async fn start(ips: &[IpAddr], options: SimOptions) -> Result<Simulator, SimError> {
        let mut listeners = Vec::new();
        for ip in ips {
            let addr = SocketAddr::new(*ip, TALOS_API_PORT);
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| SimError::Bind { addr, source })?;
            listeners.push(listener);
        }
        let nodes: Vec<Arc<Node>> = ips
            .iter()
            .map(|ip| {
                Arc::new(Node::new(
                    *ip,
                    options.talos_version.clone(),
                    options.hostnames.get(ip).cloned(),
                ))
            })
            .collect();
        let shared = Arc::new(Shared::new(options, nodes.clone()));
        let tasks = nodes
            .into_iter()
            .zip(listeners)
            .map(|(node, listener)| {
                tokio::spawn(server::run_node(shared.clone(), node, Some(listener)))
            })
            .collect();
        Ok(Simulator { shared, tasks })
    }

    /// The node at `ip`, if this simulator serves it.
    pub fn node(&self, ip: IpAddr) -> Option<SimNode> {
        self.shared
            .nodes
            .iter()
            .find(|n| n.ip == ip)
            .map(|node| SimNode {
                shared: self.shared.clone(),
                node: node.clone(),
            })
    }

    /// Every RPC any node served so far, in the order they were answered.
    pub fn rpc_log(&self) -> Vec<LoggedRpc> {
        self.shared.rpc_log()
    }

    /// Every upgrade any node accepted so far, in order, each with whether etcd was
    /// healthy at that moment.
    pub fn upgrade_log(&self) -> Vec<UpgradeRecord> {
        self.shared.upgrade_log()
    }

    /// Every reboot a node started through the Talos API so far (Reboot, a
    /// reboot-mode apply, an install, an upgrade; not a Reset), in order, each
    /// with whether etcd was healthy as the node went down.
    pub fn reboot_log(&self) -> Vec<RebootRecord> {
        self.shared.reboot_log()
    }

    /// Stops every node and waits for their servers to close.
    pub async fn shutdown(mut self) {
        self.shared.shutdown.send_replace(true);
        self.shared.abort_tasks();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
        self.shared.abort_tasks();
    }
}

/// A handle on one simulated node: what it is doing, and its fault switches.
#[derive(Clone)]
pub struct SimNode {
    shared: Arc<Shared>,
    node: Arc<Node>,
}

impl SimNode {
    /// The node's address.
    pub fn ip(&self) -> IpAddr {
        self.node.ip
    }

    /// Where the node is in its life.
    pub fn phase(&self) -> Phase {
        self.node.lock().phase
    }

    /// The Talos tag the node reports; an upgrade to an installer tagged `vX.Y.Z`
    /// changes it after the reboot.
    pub fn talos_tag(&self) -> String {
        self.node.lock().tag.clone()
    }

    /// The installer image the node last installed or upgraded to.
    pub fn installed_image(&self) -> Option<String> {
        self.node.lock().installed_image.clone()
    }

    /// How many times the node rebooted (install, upgrade, config, Reboot, Reset).
    pub fn reboots(&self) -> u32 {
        self.node.lock().reboots
    }

    /// The machine config the node runs (YAML as applied); `None` in maintenance mode.
    pub fn running_config(&self) -> Option<Vec<u8>> {
        self.node.lock().config.as_ref().map(|c| c.raw.clone())
    }

    /// A machine config applied in staged mode and waiting for the node's next boot
    /// (the STATE partition's config when it differs from the running one).
    pub fn staged_config(&self) -> Option<Vec<u8>> {
        let state = self.node.lock();
        match (&state.persisted, &state.config) {
            (Some(persisted), running) if running.as_ref() != Some(persisted) => {
                Some(persisted.raw.clone())
            }
            _ => None,
        }
    }

    /// When the node last booted, in seconds since the Unix epoch, as SystemStat
    /// reports it.
    pub fn boot_time(&self) -> u64 {
        self.node.lock().boot_time
    }

    /// Every upgrade image the node accepted, in order.
    pub fn upgrades(&self) -> Vec<String> {
        self.node.lock().upgrades.clone()
    }

    /// The hostname the node uses (config, else `talos-<ip>`).
    pub fn hostname(&self) -> String {
        let state = self.node.lock();
        self.node.hostname(&state)
    }

    /// The RPCs the node served so far, in order, with their answer codes.
    pub fn served(&self) -> Vec<ServedRpc> {
        self.node.lock().served.clone()
    }

    /// Fault: after every boot, CRI and etcd stay unready for `delay`; Bootstrap
    /// answers FailedPrecondition "bootstrap is not available yet" meanwhile.
    pub fn set_slow_boot(&self, delay: Duration) {
        self.node.lock().faults.slow_boot = delay;
    }

    /// Fault: the port is closed (connections refused) for `duration`.
    pub fn refuse_connections_for(&self, duration: Duration) {
        {
            let mut state = self.node.lock();
            if state.phase == Phase::Halted {
                return;
            }
            // A node already rebooting stays rebooting, for at least `duration`; an
            // earlier outage is replaced.
            let end = Instant::now() + duration;
            state.phase = match state.phase {
                Phase::Down {
                    until,
                    rebooting: true,
                } => Phase::Down {
                    until: until.max(end),
                    rebooting: true,
                },
                _ => Phase::Down {
                    until: end,
                    rebooting: false,
                },
            };
        }
        self.node.bump();
    }

    /// Fault: the next ApplyConfiguration fails with `code` and `message`.
    pub fn fail_next_apply(&self, code: tonic::Code, message: impl Into<String>) {
        self.node.lock().faults.fail_next_apply = Some((code, message.into()));
    }

    /// Fault: the `n`-th ApplyConfiguration from now that is not a dry run (1: the
    /// next) fails with `code` and `message`, before the node takes the config; dry runs
    /// are answered as usual and not counted.
    pub fn fail_apply_at(&self, n: u32, code: tonic::Code, message: impl Into<String>) {
        self.node.lock().faults.fail_apply_at = Some((n.max(1), code, message.into()));
    }

    /// Fault: the next upgrade fails and the node stays on its version. The 1.13 path
    /// streams the installer `message` and exit code 1 (as Talos does, without a gRPC
    /// error); the legacy Upgrade RPC answers Internal with `message`.
    pub fn fail_next_upgrade(&self, message: impl Into<String>) {
        self.node.lock().faults.fail_next_upgrade = Some(message.into());
    }

    /// Fault: the next Reset fails with an Internal status and `message`; the
    /// node keeps its config, its etcd member and its phase.
    pub fn fail_next_reset(&self, message: impl Into<String>) {
        self.node.lock().faults.fail_next_reset = Some(message.into());
    }

    /// Fault: the node's etcd member is lost (removed from the cluster, etcd Failed).
    /// If it is not a member yet, this happens as soon as it joins.
    pub fn lose_etcd_member(&self) {
        let cfg = self.node.lock().config.clone();
        let key = cfg.as_ref().map(state::cluster_key);
        let was_member = key.as_ref().is_some_and(|k| {
            let mut clusters = self.shared.clusters();
            let cluster = clusters.entry(k.clone()).or_default();
            let member = cluster.members.iter().any(|m| m.ip == self.node.ip);
            cluster.leave(self.node.ip);
            member
        });
        let mut state = self.node.lock();
        if was_member {
            state.etcd_lost = true;
        } else {
            state.faults.lose_etcd_on_join = true;
        }
    }

    /// The node is reinstalled from scratch, as when its VM is deleted and created
    /// again: its running, persisted and staged configs, its installed state and
    /// image, its etcd data and any uploaded recovery snapshot are gone; it drops out
    /// of its cluster's etcd members without leaving gracefully; and it boots into
    /// maintenance mode after the reboot delay (as a Reset with reboot, from any
    /// phase, a halted one included). Its Talos tag, RPC history and fault switches
    /// stay. When no node of its cluster holds etcd data any more, that cluster's
    /// etcd is gone: not bootstrapped, no members, an empty Kubernetes store, and its
    /// Kubernetes API closed (connections refused) until the next bootstrap.
    pub fn wipe(&self) {
        let key = self.cluster_key();
        if let Some(key) = &key
            && let Some(cluster) = self.shared.clusters().get_mut(key)
        {
            cluster.leave(self.node.ip);
        }
        {
            let mut state = self.node.lock();
            state.config = None;
            state.persisted = None;
            state.installed = false;
            state.installed_image = None;
            state.staged_image = None;
            state.etcd_data = false;
            state.etcd_lost = false;
            state.etcd_upload = None;
            state.registered_at = None;
            let delay = self.shared.options.reboot_delay;
            self.node.reboot(&mut state, delay);
        }
        self.node.bump();
        self.shared.notify_changed();
        if let Some(key) = key {
            self.shared.forget_etcd_if_gone(&key);
        }
    }

    /// Fault: each chunk (1 MiB) of an etcd snapshot this node streams waits
    /// `delay` before it is sent, so a snapshot of a padded database
    /// ([`SimNode::pad_etcd_snapshot`]) takes long enough to be stopped midway.
    pub fn slow_etcd_snapshot(&self, delay: Duration) {
        self.node.lock().faults.snapshot_chunk_delay = delay;
    }

    /// Makes every etcd snapshot of the node's cluster (by its running or persisted
    /// config) carry `bytes` extra bytes of padding, inside the hashed part and
    /// ignored when recovering: a large database without as many objects. The
    /// padding is generated chunk by chunk as the snapshot streams. Does nothing on a
    /// node without a config. The setting outlives the cluster's etcd.
    pub fn pad_etcd_snapshot(&self, bytes: u64) {
        if let Some(key) = self.cluster_key() {
            self.shared
                .clusters()
                .entry(key)
                .or_default()
                .snapshot_padding = bytes;
        }
    }

    /// Runs `f` on the Kubernetes objects of the node's cluster (what its etcd holds
    /// and its snapshots carry), e.g. to create or read an object without the API.
    /// `None` when the node has no config or its cluster was never seen.
    pub fn with_kube_store<R>(&self, f: impl FnOnce(&mut kube_store::Store) -> R) -> Option<R> {
        let key = self.cluster_key()?;
        self.shared
            .clusters()
            .get_mut(&key)
            .map(|c| f(&mut c.store))
    }

    /// Whether etcd of the node's cluster is bootstrapped (false without a config).
    pub fn etcd_bootstrapped(&self) -> bool {
        self.cluster_key().is_some_and(|key| {
            self.shared
                .clusters()
                .get(&key)
                .is_some_and(|c| c.bootstrapped)
        })
    }

    /// The size in bytes of the etcd snapshot uploaded to the node with EtcdRecover and
    /// not consumed by a recovering Bootstrap yet; `None` without one.
    pub fn uploaded_etcd_snapshot(&self) -> Option<u64> {
        self.node
            .lock()
            .etcd_upload
            .as_ref()
            .map(|b| b.len() as u64)
    }

    /// The key of the node's cluster, by its running config, else the persisted one.
    fn cluster_key(&self) -> Option<String> {
        let state = self.node.lock();
        state
            .config
            .as_ref()
            .or(state.persisted.as_ref())
            .map(state::cluster_key)
    }

    /// Powers a halted node on (after a Reset without reboot): it boots into
    /// maintenance mode.
    pub fn power_on(&self) {
        {
            let mut state = self.node.lock();
            if state.phase != Phase::Halted {
                return;
            }
            state.phase = Phase::Down {
                until: Instant::now(),
                rebooting: true,
            };
        }
        self.node.bump();
    }

    /// Waits until `condition` holds for the node's phase, or `timeout` passes.
    /// Returns whether it held.
    pub async fn wait_for_phase(
        &self,
        condition: impl Fn(Phase) -> bool,
        timeout: Duration,
    ) -> bool {
        let mut changes = self.node.generation.subscribe();
        let mut booted = self.shared.changed.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            if condition(self.phase()) {
                return true;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = booted.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return condition(self.phase()),
            }
        }
    }
}
