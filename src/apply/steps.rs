//! One async step per planned change: images, pool and mappings, VMs (created
//! and started, updated, replaced, deleted), machine configs (wait for
//! maintenance mode, apply, wait for secure mode), the bootstrap and the
//! kubeconfig. Steps report progress and records through their [`Reporter`];
//! they never touch the state. Proxmox work runs in sections an interruption
//! lets finish.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;

use crate::factory::{FactoryClient, Schematic};
use crate::plan::{Action, Change, Desired};
use crate::proxmox::{self, lifecycle, mapping, pool, storage, vm};
use crate::state::format;
use crate::state::{Address, Sensitive};
use crate::talos::{Backoff, ClientCredentials};

use super::record::Record;
use super::remove_step;
pub use super::reporter::{Interrupted, Outcomes, Reporter, StepEnd, StepMessage};
use super::talos_steps;
use super::upgrade::RolloutOptions;
use super::upgrade_step;

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
            probe: Duration::from_secs(5),
            shutdown_secs: 120,
            // Probe every 2 s at most: a node's reboot ends sooner than the
            // Talos client's 5 s cap would notice.
            backoff: Backoff {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(2),
            },
            interrupt_grace: Duration::from_secs(60),
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
    /// Recorded machine configs (the YAML each node was given) when the run
    /// started, by hostname. Sensitive: they hold the cluster's secrets.
    pub recorded_machineconfigs: BTreeMap<String, Sensitive>,
    /// The control planes of a planned Kubernetes version change, in rollout
    /// order (see [`upgrade_step::kubernetes_control_planes`]): the first one's
    /// step gives every one of them the new control-plane component images
    /// before any kubelet changes. Empty when no such change is planned.
    pub kubernetes_control_planes: Vec<String>,
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
    /// Apply a changed machine config to running nodes in staged mode (taken
    /// at their next reboot) instead of the least disruptive mode (`--staged`).
    pub staged_configs: bool,
    /// How Talos upgrades run: the etcd snapshot policy, health and reboot
    /// deadlines.
    pub rollout: RolloutOptions,
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
            r.proxmox(async {
                pool::ensure_pool(&ctx.proxmox, name, None)
                    .await
                    .with_context(|| format!("cannot create pool {name}"))?;
                r.record(Record::Pool(name.clone()));
                Ok(())
            })
            .await
        }
        (Address::Pool(name), Action::Delete) => {
            r.proxmox(async {
                pool::delete_pool(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete pool {name}"))?;
                r.record(Record::PoolGone(name.clone()));
                Ok(())
            })
            .await
        }
        (Address::PciMapping(name), Action::Create | Action::Update) => {
            pci_mapping(ctx, name, r).await
        }
        (Address::PciMapping(name), Action::Delete) => {
            r.proxmox(async {
                mapping::delete_mapping(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete PCI mapping {name}"))?;
                r.record(Record::MappingGone(name.clone()));
                Ok(())
            })
            .await
        }
        (Address::Vm(host), Action::Create) => create_vm(ctx, host, r).await,
        (Address::Vm(host), Action::Update) => update_vm(ctx, host, r).await,
        (Address::Vm(host), Action::Replace) => {
            delete_vm(ctx, host, r).await?;
            create_vm(ctx, host, r).await
        }
        (Address::Vm(host), Action::Delete) => delete_vm(ctx, host, r).await,
        (Address::Config(host), Action::ApplyConfig)
            if upgrade_step::is_kubernetes_roll(ctx, change) =>
        {
            upgrade_step::kubernetes(ctx, host, r).await
        }
        (Address::Config(host), Action::ApplyConfig) => {
            talos_steps::apply_config(ctx, host, r).await
        }
        (Address::Config(host), Action::Upgrade) => upgrade_step::upgrade(ctx, host, r).await,
        (Address::Bootstrap, Action::Bootstrap) => talos_steps::bootstrap(ctx, r).await,
        (Address::Kubeconfig, Action::Create) => talos_steps::kubeconfig(ctx, r).await,
        (address, action) => anyhow::bail!(
            "{address}: {} is not something apply can do yet",
            action.as_str()
        ),
    }
}

pub(super) fn credentials(ctx: &Context) -> anyhow::Result<&ClientCredentials> {
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
    r.proxmox(async {
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
    })
    .await
}

async fn delete_image(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    r.proxmox(async {
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
    })
    .await
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
    r.proxmox(async {
        mapping::ensure_mapping(&ctx.proxmox, &spec)
            .await
            .with_context(|| format!("cannot create PCI mapping {name}"))?;
        r.record(Record::Mapping {
            name: name.to_owned(),
            mapping: want.clone(),
        });
        Ok(())
    })
    .await
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
    r.proxmox(async {
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
    })
    .await
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
    let outcome = r
        .proxmox(async {
            let outcome = lifecycle::update_vm(&ctx.proxmox, &w.node, w.vmid, &update)
                .await
                .with_context(|| format!("cannot update VM {} ({host})", w.vmid))?;
            // Recorded before the restart: the config holds the values now, and a
            // run stopped before the restart leaves them pending, which the next
            // plan reads back from Proxmox and finishes with a restart.
            r.record(Record::Vm {
                host: host.to_owned(),
                vm: w.clone(),
                fresh: false,
            });
            Ok(outcome)
        })
        .await?;
    if outcome.needs_reboot() {
        r.progress(format!(
            "restarting through Proxmox to apply {}",
            outcome.pending.join(", ")
        ));
        upgrade_step::gated_restart(ctx, host, r, async {
            r.proxmox(async {
                lifecycle::reboot(&ctx.proxmox, &w.node, w.vmid)
                    .await
                    .with_context(|| format!("cannot restart VM {} ({host})", w.vmid))
            })
            .await
        })
        .await?;
    } else if outcome.stopped {
        r.progress(format!(
            "the VM is stopped: it takes {} at its next start",
            outcome.pending.join(", ")
        ));
    }
    Ok(())
}

async fn delete_vm(ctx: &Context, host: &str, r: &Reporter) -> anyhow::Result<()> {
    let Some(rec) = ctx.recorded_vms.get(host) else {
        r.record(Record::VmGone(host.to_owned()));
        return Ok(());
    };
    if !ctx.desired.vms.contains_key(host) {
        remove_step::remove(ctx, host, r).await?;
    } else {
        // Replaced: the node is the same cluster member under a new VM.
        talos_steps::reset_node(ctx, host, r).await;
    }
    r.progress(format!("shutting down and deleting VM {}", rec.vmid));
    r.proxmox(async {
        lifecycle::destroy_vm(&ctx.proxmox, &rec.node, rec.vmid, ctx.waits.shutdown_secs)
            .await
            .with_context(|| format!("cannot delete VM {} ({host})", rec.vmid))?;
        r.record(Record::VmGone(host.to_owned()));
        Ok(())
    })
    .await
}
