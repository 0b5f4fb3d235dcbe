//! What every step of an apply reads: the [`Context`] (the desired state,
//! what the state recorded when the run started, the clients and the waits),
//! and the typed values a change carries for its step.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;

use talosprov_base::schematic::Schematic;
use talosprov_base::sensitive::Sensitive;
use talosprov_factory::client::FactoryClient;
use talosprov_plan::desired::Desired;
use talosprov_plan::planned::PlannedConfig;
use talosprov_proxmox as proxmox;
use talosprov_retry::Backoff;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{self, State};
use talosprov_statefile::intent::CreateIntent;
use talosprov_talos::credentials::ClientCredentials;

use crate::apply::upgrade::rolling::RolloutOptions;

/// Deadlines of the waits, and their backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    /// A new VM reaching maintenance mode.
    pub maintenance: Duration,
    /// A node coming up in secure mode after its config (install and reboot).
    pub secure: Duration,
    /// etcd ready and bootstrapped.
    pub bootstrap: Duration,
    /// The kubeconfig through the Talos API.
    pub kubeconfig: Duration,
    /// An add-on's object: the Kubernetes API answering and accepting it,
    /// its kind served (a CRD's), and a workload rolled out
    /// (`TALOSPROV_ROLLOUT_WAIT`).
    pub rollout: Duration,
    /// A probe of a node that may be down (destroy's reset, a re-run's check).
    pub probe: Duration,
    /// Seconds Proxmox gives a VM to shut down before stopping it.
    pub shutdown_secs: u64,
    /// Retry pacing.
    pub backoff: Backoff,
    /// After an interruption, the longest the run waits for the steps with
    /// Proxmox work in flight to finish it (each task to its end, so the
    /// state records what Proxmox confirmed).
    pub interrupt_grace: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            maintenance: Duration::from_secs(600),
            secure: Duration::from_secs(900),
            bootstrap: Duration::from_secs(600),
            kubeconfig: Duration::from_secs(300),
            rollout: Duration::from_secs(600),
            probe: Duration::from_secs(5),
            shutdown_secs: 120,
            // Probe every quarter second at most: a node that came up, or its
            // etcd, is seen within 0.25 s (these waits are the critical path of
            // an apply: a config, the reboot, etcd, the bootstrap), and a probe
            // is one connection to the node.
            backoff: Backoff {
                initial: Duration::from_millis(100),
                max: Duration::from_millis(250),
            },
            interrupt_grace: Duration::from_secs(60),
        }
    }
}

/// What every step shares: clients, the desired resources and what was
/// recorded when the run started. What a step sends comes from its change's
/// typed values ([`Change::vm`], [`Change::config`], ...); `desired` gives
/// only the machine config bytes (which hold secrets, so the plan carries
/// their digest) and the cluster's node list for the health gates.
#[derive(Debug)]
pub struct Context {
    /// The Proxmox client.
    pub proxmox: proxmox::client::Client,
    /// The Image Factory client (schematics are registered before a download).
    pub factory: FactoryClient,
    /// What the topology asks for.
    pub desired: Desired,
    /// Schematic contents by ID, for registration; `None` for IDs given as is.
    pub schematics: BTreeMap<String, Option<Schematic>>,
    /// Talos API client credentials (from the talosconfig); `None` when the
    /// state has none (a destroy then deletes VMs without a reset).
    pub credentials: Option<ClientCredentials>,
    /// Node addresses by hostname (topology), for the Talos API.
    pub ips: BTreeMap<String, IpAddr>,
    /// Recorded VMs when the run started (for deletes and replaces).
    pub recorded_vms: BTreeMap<String, format::Vm>,
    /// What else the state owned when the run started (recorded pools and
    /// mappings, create intents): an object found in Proxmox is adopted only
    /// when it is named there.
    pub owned: Owned,
    /// Recorded configs when the run started.
    pub recorded_configs: BTreeMap<String, format::NodeConfig>,
    /// Recorded machine configs (the YAML each node was given) when the run
    /// started, by hostname. Sensitive: they hold the cluster's secrets.
    pub recorded_machineconfigs: BTreeMap<String, Sensitive>,
    /// Recorded images when the run started (for `--purge-images`).
    pub recorded_images: BTreeMap<String, format::Image>,
    /// The offline admin kubeconfig, used when the Talos API cannot give one.
    pub offline_kubeconfig: Sensitive,
    /// A talosconfig issued for this run from the OS CA in the secrets: what the
    /// `talosconfig` step records, and the credentials used when the state's certificate
    /// has expired or is about to. `None` when the state has no secrets bundle.
    pub fresh_talosconfig: Option<Sensitive>,
    /// The admin kubeconfig the add-ons' objects are applied with: the
    /// state's when the run started, then the one the kubeconfig step
    /// fetched.
    pub kubeconfig: std::sync::Mutex<Option<Sensitive>>,
    /// The Kubernetes client, made from `kubeconfig` on first use.
    pub kube: tokio::sync::OnceCell<talosprov_kube::client::KubeClient>,
    /// The current time as RFC 3339, for the bootstrap record.
    pub started_at: String,
    /// Deadlines.
    pub waits: Waits,
    /// How Talos upgrades run: the etcd snapshot policy, health and reboot
    /// deadlines.
    pub rollout: RolloutOptions,
    /// The snapshot the bootstrap step recovers etcd from (`etcd restore`):
    /// it uploads it (`EtcdRecover`) and bootstraps with `recover_etcd`.
    pub recovery: Option<std::sync::Arc<crate::backups::Recovery>>,
}

/// What the state said talosprov owned when the run started: the recorded
/// pools, PCI mappings and HA rules and the create intents (recorded VMs are in
/// `Context::recorded_vms`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owned {
    /// Recorded pool names.
    pub pools: BTreeSet<String>,
    /// Recorded PCI mapping names.
    pub pci_mappings: BTreeSet<String>,
    /// Recorded HA rules: the Proxmox rule ID of each spread entry.
    pub ha_rules: BTreeMap<String, String>,
    /// Create intents, keyed by address text.
    pub intents: BTreeMap<String, CreateIntent>,
}

impl Owned {
    /// What `state` owns.
    pub fn of(state: &State) -> Self {
        let r = &state.resources;
        Owned {
            pools: r.pools.keys().cloned().collect(),
            pci_mappings: r.pci_mappings.keys().cloned().collect(),
            ha_rules: r
                .ha_rules
                .iter()
                .map(|(entry, rule)| (entry.clone(), rule.rule.clone()))
                .collect(),
            intents: r.creating.clone(),
        }
    }

    /// The intent at `address` when the run started.
    pub fn intent(&self, address: &Address) -> Option<&CreateIntent> {
        self.intents.get(&address.to_string())
    }
}

/// A config change as its steps take it (`apply::kind::config`, from a
/// [`ConfigOp`](talosprov_plan::ConfigOp)): the config the plan
/// carries and the node's role.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConfigChange<'a> {
    /// The config and how it is sent.
    pub config: &'a PlannedConfig,
    /// The node's role.
    pub role: talosprov_base::role::Role,
}

/// The machine config bytes to send for a config change: the desired
/// rendering, refused unless its digest is the one the plan carries.
///
/// # Errors
/// When the node has no rendered config, or one with another digest.
pub(super) fn planned_config<'a>(
    ctx: &'a Context,
    host: &str,
    change: &ConfigChange<'a>,
) -> anyhow::Result<(
    &'a PlannedConfig,
    &'a talosprov_base::sensitive::Sensitive<String>,
)> {
    let want = change.config;
    let desired = ctx
        .desired
        .configs
        .get(host)
        .with_context(|| format!("config/{host} is not in the topology"))?;
    if desired.record.config_sha256 != want.config_sha256 {
        anyhow::bail!(
            "config/{host}: the machine config rendered now (sha256 {}) is not the one the plan \
             shows (sha256 {}); run `talosprov plan` again",
            desired.record.config_sha256,
            want.config_sha256
        );
    }
    Ok((want, &desired.yaml))
}

/// The talosconfig's client credentials, to reach the Talos API.
///
/// # Errors
/// When there is no talosconfig yet.
pub(crate) fn credentials(ctx: &Context) -> anyhow::Result<&ClientCredentials> {
    ctx.credentials
        .as_ref()
        .context("no talosconfig: the Talos API cannot be reached")
}
