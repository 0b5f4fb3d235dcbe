//! One async step per planned change: images, pool and mappings, VMs (created
//! and started, updated, replaced, deleted), machine configs (wait for
//! maintenance mode, apply, wait for secure mode), the bootstrap and the
//! kubeconfig. Steps report progress and records; they never touch the state.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::mpsc::UnboundedSender;

use crate::factory::{FactoryClient, Schematic};
use crate::plan::{Action, Change, Desired};
use crate::proxmox::{self, lifecycle, mapping, pool, storage, vm};
use crate::state::format;
use crate::state::{Address, Sensitive};
use crate::talos::{self, ApplyMode, ApplyOptions, Backoff, ClientCredentials, TalosClient};
use crate::topology::Role;

use super::record::Record;

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
    /// A probe of a node that may be down (destroy's reset, a re-run's check).
    pub probe: Duration,
    /// Seconds Proxmox gives a VM to shut down before stopping it.
    pub shutdown_secs: u64,
    /// Retry pacing.
    pub backoff: Backoff,
}

impl Default for Waits {
    fn default() -> Self {
        Waits {
            maintenance: Duration::from_secs(600),
            secure: Duration::from_secs(900),
            bootstrap: Duration::from_secs(600),
            kubeconfig: Duration::from_secs(300),
            probe: Duration::from_secs(5),
            shutdown_secs: 120,
            // Probe every 2 s at most: a node's reboot ends sooner than the
            // Talos client's 5 s cap would notice.
            backoff: Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(2),
            },
        }
    }
}

/// What every step shares: clients, the desired resources and what was
/// recorded when the run started.
#[derive(Debug)]
pub struct Context {
    /// The Proxmox client.
    pub proxmox: proxmox::Client,
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
    /// Recorded configs when the run started.
    pub recorded_configs: BTreeMap<String, format::NodeConfig>,
    /// Recorded images when the run started (for `--purge-images`).
    pub recorded_images: BTreeMap<String, format::Image>,
    /// Hostnames recorded as control planes (their reset is graceful).
    pub controlplanes: Vec<String>,
    /// The offline admin kubeconfig, used when the Talos API cannot give one.
    pub offline_kubeconfig: Sensitive,
    /// The current time as RFC 3339, for the bootstrap record.
    pub started_at: String,
    /// Deadlines.
    pub waits: Waits,
}

/// What a step sends while it runs.
#[derive(Debug)]
pub enum StepMessage {
    /// Now doing this.
    Progress(Address, String),
    /// Record this in the state (saved at once).
    Record(Record),
    /// Tell the operator.
    Warning(Address, String),
}

/// A step's channel to the executor.
#[derive(Debug, Clone)]
pub struct Reporter {
    address: Address,
    tx: UnboundedSender<StepMessage>,
}

impl Reporter {
    /// A reporter for the step at `address`.
    pub fn new(address: Address, tx: UnboundedSender<StepMessage>) -> Self {
        Reporter { address, tx }
    }

    fn progress(&self, what: impl Into<String>) {
        let _ = self
            .tx
            .send(StepMessage::Progress(self.address.clone(), what.into()));
    }

    fn record(&self, r: Record) {
        let _ = self.tx.send(StepMessage::Record(r));
    }

    fn warn(&self, message: impl Into<String>) {
        let _ = self
            .tx
            .send(StepMessage::Warning(self.address.clone(), message.into()));
    }
}

/// Run the step for one change.
///
/// # Errors
/// The Proxmox, Talos or factory error, with the operator-level context.
pub async fn run(ctx: &Context, change: &Change, r: &Reporter) -> anyhow::Result<()> {
    match (&change.address, change.action) {
        (Address::Image(name), Action::Create) => image(ctx, name, r).await,
        (Address::Image(name), Action::Delete) => delete_image(ctx, name, r).await,
        (Address::Pool(name), Action::Create) => {
            pool::ensure_pool(&ctx.proxmox, name, None)
                .await
                .with_context(|| format!("cannot create pool {name}"))?;
            r.record(Record::Pool(name.clone()));
            Ok(())
        }
        (Address::Pool(name), Action::Delete) => {
            pool::delete_pool(&ctx.proxmox, name)
                .await
                .with_context(|| format!("cannot delete pool {name}"))?;
            r.record(Record::PoolGone(name.clone()));
            Ok(())
        }
        (Address::PciMapping(name), Action::Create | Action::Update) => {
            pci_mapping(ctx, name, r).await
        }
        (Address::PciMapping(name), Action::Delete) => {
            mapping::delete_mapping(&ctx.proxmox, name)
                .await
                .with_context(|| format!("cannot delete PCI mapping {name}"))?;
            r.record(Record::MappingGone(name.clone()));
            Ok(())
        }
        (Address::Vm(host), Action::Create) => create_vm(ctx, host, r).await,
        (Address::Vm(host), Action::Update) => update_vm(ctx, host, r).await,
        (Address::Vm(host), Action::Replace) => {
            delete_vm(ctx, host, r).await?;
            create_vm(ctx, host, r).await
        }
        (Address::Vm(host), Action::Delete) => delete_vm(ctx, host, r).await,
        (Address::Config(host), Action::ApplyConfig) => apply_config(ctx, host, r).await,
        (Address::Bootstrap, Action::Bootstrap) => bootstrap(ctx, r).await,
        (Address::Kubeconfig, Action::Create) => kubeconfig(ctx, r).await,
        (address, action) => anyhow::bail!(
            "{address}: {} is not something apply can do yet",
            action.as_str()
        ),
    }
}

fn credentials(ctx: &Context) -> anyhow::Result<&ClientCredentials> {
    ctx.credentials
        .as_ref()
        .context("no talosconfig: the Talos API cannot be reached")
}

async fn image(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    let want = ctx
        .desired
        .images
        .get(name)
        .with_context(|| format!("image/{name} is not in the topology"))?;
    let rec = &want.record;
    if let Some(Some(schematic)) = ctx.schematics.get(&rec.schematic_id) {
        r.progress("registering the schematic with the Image Factory");
        ctx.factory
            .register(schematic)
            .await
            .context("cannot register the schematic with the Image Factory")?;
    }
    r.progress(format!("downloading to {} on {}", rec.storage, rec.node));
    let image = storage::Image {
        talos_version: rec.talos_version.clone(),
        schematic: rec.schematic_id.clone(),
    };
    let outcome = storage::ensure_images(
        &ctx.proxmox,
        &rec.storage,
        &ctx.desired.factory_url,
        &[(rec.node.clone(), image)],
    )
    .await
    .with_context(|| format!("cannot download the Talos image to {}", rec.storage))?;
    for w in outcome.warnings {
        r.warn(w);
    }
    r.record(Record::Image {
        name: name.to_owned(),
        image: rec.clone(),
    });
    Ok(())
}

async fn delete_image(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    if let Some(rec) = ctx.recorded_images.get(name) {
        let image = storage::Image {
            talos_version: rec.talos_version.clone(),
            schematic: rec.schematic_id.clone(),
        };
        storage::delete_image(&ctx.proxmox, &rec.node, &rec.storage, &image)
            .await
            .with_context(|| format!("cannot delete {}", rec.volid))?;
    }
    r.record(Record::ImageGone(name.to_owned()));
    Ok(())
}

async fn pci_mapping(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    let want = ctx
        .desired
        .pci_mappings
        .get(name)
        .with_context(|| format!("pci_mapping/{name} is not in the topology"))?;
    let spec = mapping::PciMappingSpec {
        id: name.to_owned(),
        description: want.description.clone(),
        entries: want
            .map
            .iter()
            .map(|e| mapping::PciMapEntry {
                node: e.node.clone(),
                path: e.path.clone(),
                id: e.id.clone(),
                iommu_group: e.iommu_group,
                subsystem_id: e.subsystem_id.clone(),
            })
            .collect(),
    };
    mapping::ensure_mapping(&ctx.proxmox, &spec)
        .await
        .with_context(|| format!("cannot create PCI mapping {name}"))?;
    r.record(Record::Mapping {
        name: name.to_owned(),
        mapping: want.clone(),
    });
    Ok(())
}

async fn create_vm(ctx: &Context, host: &str, r: &Reporter) -> anyhow::Result<()> {
    let want = ctx
        .desired
        .vms
        .get(host)
        .with_context(|| format!("vm/{host} is not in the topology"))?;
    r.progress(format!(
        "creating VM {} on {}",
        want.spec.vmid, want.spec.node
    ));
    let outcome = vm::ensure_vm(&ctx.proxmox, &want.spec)
        .await
        .with_context(|| format!("cannot create VM {} for {host}", want.spec.vmid))?;
    let fresh = match outcome {
        vm::VmOutcome::Created { warnings } => {
            for w in warnings {
                r.warn(w);
            }
            true
        }
        vm::VmOutcome::Present => {
            // Left by a run that stopped before recording it: make sure it runs.
            vm::start(&ctx.proxmox, &want.spec.node, want.spec.vmid)
                .await
                .with_context(|| format!("cannot start VM {}", want.spec.vmid))?;
            !ctx.recorded_vms.contains_key(host)
        }
    };
    r.record(Record::Vm {
        host: host.to_owned(),
        vm: want.record.clone(),
        fresh,
    });
    Ok(())
}

async fn update_vm(ctx: &Context, host: &str, r: &Reporter) -> anyhow::Result<()> {
    let want = ctx
        .desired
        .vms
        .get(host)
        .with_context(|| format!("vm/{host} is not in the topology"))?;
    let w = &want.record;
    let update = lifecycle::VmUpdate {
        cores: Some(w.cores),
        memory_mib: Some(w.memory_mib),
        hostpci: Some(want.spec.hostpci.clone()),
        tags: Some(w.tags.clone()),
        disk_gib: Some(w.disk_gib),
    };
    r.progress("updating the VM config");
    let outcome = lifecycle::update_vm(&ctx.proxmox, &w.node, w.vmid, &update)
        .await
        .with_context(|| format!("cannot update VM {} ({host})", w.vmid))?;
    if outcome.needs_reboot() {
        r.progress(format!(
            "restarting through Proxmox to apply {}",
            outcome.pending.join(", ")
        ));
        lifecycle::reboot(&ctx.proxmox, &w.node, w.vmid)
            .await
            .with_context(|| format!("cannot restart VM {} ({host})", w.vmid))?;
    }
    r.record(Record::Vm {
        host: host.to_owned(),
        vm: w.clone(),
        fresh: false,
    });
    Ok(())
}

/// Reset a node through the Talos API if it answers (graceful for control
/// planes, so it leaves etcd); a node that does not answer is left as is.
async fn reset_node(ctx: &Context, host: &str, r: &Reporter) {
    let Some(credentials) = &ctx.credentials else {
        r.warn("no talosconfig in the state: not reset through the Talos API");
        return;
    };
    let Some(ip) = ctx.ips.get(host).copied() else {
        r.warn("no address known for this node: not reset through the Talos API");
        return;
    };
    let connect = tokio::time::timeout(ctx.waits.probe, async {
        let c = TalosClient::connect_secure(ip, credentials).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, talos::TalosError>(c)
    })
    .await;
    let Ok(Ok(client)) = connect else {
        r.warn("the Talos API does not answer: the VM is deleted without a reset");
        return;
    };
    let graceful = ctx.controlplanes.iter().any(|h| h == host);
    r.progress(if graceful {
        "resetting Talos (graceful: leaving etcd)"
    } else {
        "resetting Talos"
    });
    let options = talos::ResetOptions {
        graceful,
        reboot: false,
        system_partitions: Vec::new(),
    };
    if let Err(e) = client.reset(&options).await {
        r.warn(format!("Talos reset failed ({e}); deleting the VM anyway"));
    }
}

async fn delete_vm(ctx: &Context, host: &str, r: &Reporter) -> anyhow::Result<()> {
    let Some(rec) = ctx.recorded_vms.get(host) else {
        r.record(Record::VmGone(host.to_owned()));
        return Ok(());
    };
    reset_node(ctx, host, r).await;
    r.progress(format!("shutting down and deleting VM {}", rec.vmid));
    lifecycle::destroy_vm(&ctx.proxmox, &rec.node, rec.vmid, ctx.waits.shutdown_secs)
        .await
        .with_context(|| format!("cannot delete VM {} ({host})", rec.vmid))?;
    r.record(Record::VmGone(host.to_owned()));
    Ok(())
}

/// A secure-mode client if the node answers Version with mutual TLS within
/// the probe time.
async fn probe_secure(
    ip: IpAddr,
    host: &str,
    credentials: &ClientCredentials,
    probe: Duration,
) -> Result<TalosClient, String> {
    let answer = tokio::time::timeout(probe, async {
        let c = TalosClient::connect_secure(ip, credentials).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, talos::TalosError>(c)
    })
    .await;
    match answer {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", probe.as_secs())),
    }
}

/// A maintenance-mode client if the node answers Version without a client
/// certificate within the probe time.
async fn probe_maintenance(ip: IpAddr, host: &str, probe: Duration) -> Result<TalosClient, String> {
    let answer = tokio::time::timeout(probe, async {
        let c = TalosClient::connect_maintenance(ip).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, talos::TalosError>(c)
    })
    .await;
    match answer {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", probe.as_secs())),
    }
}

/// Where a node stands: configured (secure mode) or waiting for a config.
enum NodeMode {
    Secure(TalosClient),
    Maintenance(TalosClient),
}

/// Wait until the node serves either mode. A node can be in either after a
/// run that stopped mid-step, so both are probed on every attempt.
async fn wait_either(
    ctx: &Context,
    ip: IpAddr,
    host: &str,
    credentials: &ClientCredentials,
    r: &Reporter,
) -> anyhow::Result<NodeMode> {
    let w = &ctx.waits;
    let deadline = tokio::time::Instant::now() + w.maintenance;
    let mut attempt = 0;
    loop {
        let secure = probe_secure(ip, host, credentials, w.probe).await;
        if let Ok(c) = secure {
            return Ok(NodeMode::Secure(c));
        }
        let maintenance = probe_maintenance(ip, host, w.probe).await;
        match maintenance {
            Ok(c) => return Ok(NodeMode::Maintenance(c)),
            Err(last) => {
                let delay = w.backoff.delay(attempt);
                if tokio::time::Instant::now() + delay > deadline {
                    anyhow::bail!(
                        "node {ip} ({host}) reached neither maintenance mode nor secure mode \
                         within {} s; last answer: {last}",
                        w.maintenance.as_secs()
                    );
                }
                if attempt == 0 {
                    r.progress("waiting for maintenance mode");
                }
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

async fn apply_config(ctx: &Context, host: &str, r: &Reporter) -> anyhow::Result<()> {
    let want = ctx
        .desired
        .configs
        .get(host)
        .with_context(|| format!("config/{host} is not in the topology"))?;
    let ip = want.ip;
    let w = &ctx.waits;
    let recorded = ctx.recorded_configs.get(host);
    let credentials = credentials(ctx)?;
    let config_record = |secure_mode: bool| Record::Config {
        host: host.to_owned(),
        config: format::NodeConfig {
            secure_mode,
            ..want.record.clone()
        },
        yaml: Sensitive::new(want.yaml.expose().clone()),
    };
    r.progress("checking the Talos API");
    let client = match wait_either(ctx, ip, host, credentials, r).await? {
        NodeMode::Maintenance(c) => c,
        // A configured node: either its config is the recorded one (a re-run
        // after a stop), or this is a change to apply to the running node.
        NodeMode::Secure(client) => {
            match recorded {
                Some(rec) if rec.config_sha256 == want.record.config_sha256 => {
                    r.record(Record::SecureMode(host.to_owned()));
                }
                Some(_) => {
                    r.progress("applying the machine config (auto mode)");
                    let outcome = client
                        .apply_configuration(
                            want.yaml.expose().as_bytes(),
                            &ApplyOptions::default(),
                        )
                        .await
                        .with_context(|| format!("{host} refused the machine config"))?;
                    for warning in outcome.warnings {
                        r.warn(warning);
                    }
                    if outcome.mode == ApplyMode::Reboot {
                        r.record(config_record(false));
                        r.progress("waiting for the node to reboot into secure mode");
                        talos::wait_secure(ip, Some(host), credentials, w.secure, w.backoff)
                            .await?;
                    }
                    r.record(config_record(true));
                }
                None => {
                    // Sent by a run that stopped before recording it.
                    r.warn("the node is configured already; recording the config as applied");
                    r.record(config_record(true));
                }
            }
            return Ok(());
        }
    };
    r.progress("applying the machine config");
    let outcome = client
        .apply_configuration(want.yaml.expose().as_bytes(), &ApplyOptions::default())
        .await
        .with_context(|| format!("{host} refused the machine config"))?;
    for warning in outcome.warnings {
        r.warn(warning);
    }
    r.record(config_record(false));
    r.progress("waiting for secure mode");
    talos::wait_secure(ip, Some(host), credentials, w.secure, w.backoff).await?;
    r.record(Record::SecureMode(host.to_owned()));
    Ok(())
}

async fn bootstrap(ctx: &Context, r: &Reporter) -> anyhow::Result<()> {
    let host = ctx
        .desired
        .bootstrap_node
        .as_deref()
        .context("the topology has no control plane to bootstrap")?;
    let ip = *ctx
        .ips
        .get(host)
        .with_context(|| format!("no address for {host}"))?;
    let w = &ctx.waits;
    let credentials = credentials(ctx)?;
    let client = talos::wait_secure(ip, Some(host), credentials, w.secure, w.backoff).await?;
    r.progress(format!("waiting for etcd on {host}"));
    talos::wait_etcd_ready(&client, w.bootstrap, w.backoff).await?;
    r.progress(format!("bootstrapping etcd on {host}"));
    talos::bootstrap_when_ready(&client, w.bootstrap, w.backoff).await?;
    r.record(Record::Bootstrap(format::Bootstrap {
        done: true,
        node: host.to_owned(),
        at: ctx.started_at.clone(),
    }));
    Ok(())
}

async fn kubeconfig(ctx: &Context, r: &Reporter) -> anyhow::Result<()> {
    let controlplanes: Vec<(&String, IpAddr)> = ctx
        .desired
        .configs
        .iter()
        .filter(|(_, c)| c.role == Role::Controlplane)
        .map(|(h, c)| (h, c.ip))
        .collect();
    let w = &ctx.waits;
    let credentials = credentials(ctx)?;
    let mut last = None;
    for (host, ip) in controlplanes {
        r.progress(format!("fetching the kubeconfig from {host}"));
        let fetched = async {
            let client =
                talos::wait_secure(ip, Some(host), credentials, w.kubeconfig, w.backoff).await?;
            client.kubeconfig().await
        }
        .await;
        match fetched {
            Ok(k) => {
                let text = String::from_utf8_lossy(k.expose()).into_owned();
                r.record(Record::Kubeconfig(Sensitive::new(text)));
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    r.warn(format!(
        "the Talos API gave no kubeconfig ({}); using one signed offline by the cluster CA",
        last.map_or_else(|| "no control plane".to_owned(), |e| e.to_string())
    ));
    r.record(Record::Kubeconfig(ctx.offline_kubeconfig.clone()));
    Ok(())
}
