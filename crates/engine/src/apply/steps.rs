//! One async step per planned change: images, pool and mappings, VMs (created
//! and started, updated, replaced, deleted), machine configs (wait for
//! maintenance mode, apply, wait for secure mode), the bootstrap and the
//! kubeconfig. Steps report progress and records through their [`Reporter`];
//! they never touch the state. Proxmox work runs in sections an interruption
//! lets finish.

use anyhow::Context as _;

use talosprov_core::plan::desired::vm_record;
use talosprov_core::plan::{Change, PlannedImage, PlannedVm, Step};
use talosprov_core::topology::Role;
use talosprov_proxmox::{lifecycle, mapping, pool, storage};
use talosprov_state::{Address, CreateIntent};

use super::context::{ConfigChange, Context};
use super::create_step;
use super::gate;
use super::object_steps;
use super::record::Record;
use super::remove_step;
pub use super::reporter::{Interrupted, Outcomes, Reporter, StepEnd, StepMessage};
use super::talos_steps;
use super::upgrade_step;

/// Run the step for one change, with the values the change carries
/// ([`Change::step`]: one arm per kind and action, each with its typed
/// values).
///
/// # Errors
/// The Proxmox, Talos or factory error, with the operator-level context.
pub async fn run(ctx: &Context, change: &Change, r: &Reporter) -> anyhow::Result<()> {
    match change.step() {
        Step::CreateImage { name, image: want } => image(ctx, name, want, r).await,
        Step::DeleteImage { name } => delete_image(ctx, name, r).await,
        Step::CreatePool { name } => r
            .proxmox(create_step::pool(ctx, name, r))
            .await
            .with_context(|| format!("cannot create pool {name}")),
        Step::DeletePool { name } => {
            r.proxmox(async {
                pool::delete_pool(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete pool {name}"))?;
                r.record(Record::PoolGone(name.to_owned()));
                Ok(())
            })
            .await
        }
        Step::WriteMapping {
            name,
            mapping: want,
        } => r
            .proxmox(create_step::pci_mapping(ctx, name, want, r))
            .await
            .with_context(|| format!("cannot create PCI mapping {name}")),
        Step::DeleteMapping { name } => {
            r.proxmox(async {
                mapping::delete_mapping(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete PCI mapping {name}"))?;
                r.record(Record::MappingGone(name.to_owned()));
                Ok(())
            })
            .await
        }
        Step::CreateVm { host, vm } => r.proxmox(create_step::vm(ctx, host, &vm.spec, r)).await,
        Step::UpdateVm { host, vm } => update_vm(ctx, host, vm, r).await,
        Step::ReplaceVm { host, vm, role } => {
            delete_vm(ctx, host, Leaving::Replaced(Some(role)), r).await?;
            r.proxmox(create_step::vm(ctx, host, &vm.spec, r)).await
        }
        Step::DeleteVm { host, role } => delete_vm(ctx, host, Leaving::Removed(role), r).await,
        Step::ApplyConfig { host, config, role } => {
            let change = ConfigChange { config, role };
            if config.kubernetes_roll() {
                upgrade_step::kubernetes(ctx, host, &change, r).await
            } else {
                talos_steps::apply_config(ctx, host, &change, r).await
            }
        }
        Step::Upgrade { host, config, role } => {
            upgrade_step::upgrade(ctx, host, &ConfigChange { config, role }, r).await
        }
        Step::Bootstrap => talos_steps::bootstrap(ctx, r).await,
        Step::Kubeconfig => talos_steps::kubeconfig(ctx, r).await,
        Step::ApplyObject { object, planned } => object_steps::apply(ctx, object, planned, r).await,
        Step::PruneObject { object, planned } => object_steps::prune(ctx, object, planned, r).await,
    }
}

/// Why a VM is deleted, with the node's role from the plan: replaced (the
/// node comes back under a new VM) or removed from the cluster.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    Replaced(Option<Role>),
    Removed(Option<Role>),
}

/// Download one image, once: a volume the storage already lists is
/// recorded as is; a `download` task for its file still running (an
/// interrupted apply started it) is waited for; otherwise the intent is
/// saved, then the `download-url` request sent.
async fn image(ctx: &Context, name: &str, want: &PlannedImage, r: &Reporter) -> anyhow::Result<()> {
    let rec = &want.record;
    let image = storage::Image {
        talos_version: rec.talos_version.clone(),
        schematic: rec.schematic_id.clone(),
    };
    let address = Address::Image(name.to_owned());
    let cannot = || format!("cannot download the Talos image to {}", rec.storage);
    r.proxmox(async {
        let mut found = storage::image_on_storage(&ctx.proxmox, &rec.node, &rec.storage, &image)
            .await
            .with_context(cannot)?;
        if let storage::ImageOnStorage::Downloading(upid) = &found {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::image(&rec.node, &rec.volid),
            })
            .await?;
            r.progress(format!(
                "waiting for the download already running on {} (task {upid})",
                rec.node
            ));
            let op = talosprov_proxmox::Operation::new(format!("download image {}", image.filename()))
                .node(&rec.node);
            if let Err(e) = talosprov_proxmox::task::wait(&ctx.proxmox, &op, upid).await {
                r.warn(format!("the running download did not complete: {e}; downloading again"));
            }
            found = storage::image_on_storage(&ctx.proxmox, &rec.node, &rec.storage, &image)
                .await
                .with_context(cannot)?;
        }
        match found {
            storage::ImageOnStorage::Present => {
                r.progress(format!("already in {} on {}", rec.storage, rec.node));
            }
            storage::ImageOnStorage::Downloading(upid) => {
                anyhow::bail!(
                    "{}: another download of {} is still running on {} (task {upid}); run apply again once it ends",
                    cannot(),
                    image.filename(),
                    rec.node
                );
            }
            storage::ImageOnStorage::Missing => {
                if let Some(Some(schematic)) = ctx.schematics.get(&rec.schematic_id) {
                    r.progress("registering the schematic with the Image Factory");
                    ctx.factory
                        .register(schematic)
                        .await
                        .context("cannot register the schematic with the Image Factory")?;
                }
                r.record_saved(Record::Intent {
                    address: address.clone(),
                    intent: CreateIntent::image(&rec.node, &rec.volid),
                })
                .await?;
                r.progress(format!("downloading to {} on {}", rec.storage, rec.node));
                let d = storage::Download {
                    node: rec.node.clone(),
                    storage: rec.storage.clone(),
                    image: image.clone(),
                };
                let done = storage::download(&ctx.proxmox, &d, &want.factory_url)
                    .await
                    .with_context(cannot)?;
                for w in done.warnings {
                    r.warn(w);
                }
            }
        }
        r.record(Record::Image {
            name: name.to_owned(),
            image: rec.clone(),
        });
        Ok(())
    })
    .await
}

/// Delete an image: the recorded one, or the one an interrupted apply was
/// downloading (waiting first for its task if it still runs).
async fn delete_image(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    let address = Address::Image(name.to_owned());
    r.proxmox(async {
        let target = match ctx.recorded_images.get(name) {
            Some(rec) => Some((rec.node.clone(), rec.volid.clone())),
            None => ctx
                .owned
                .intent(&address)
                .and_then(|i| Some((i.node.clone()?, i.id.clone()))),
        };
        if let Some((node, volid)) = target {
            let file = volid.rsplit('/').next().unwrap_or(&volid).to_owned();
            if let Some(upid) = storage::running_download(&ctx.proxmox, &node, &file).await? {
                r.progress(format!(
                    "waiting for the download still running on {node} (task {upid})"
                ));
                let op =
                    talosprov_proxmox::Operation::new(format!("download image {file}")).node(&node);
                // Its outcome does not matter: the volume is deleted either way.
                let _ = talosprov_proxmox::task::wait(&ctx.proxmox, &op, &upid).await;
            }
            storage::delete_volume(&ctx.proxmox, &node, &volid)
                .await
                .with_context(|| format!("cannot delete {volid}"))?;
        }
        r.record(Record::ImageGone(name.to_owned()));
        Ok(())
    })
    .await
}

async fn update_vm(
    ctx: &Context,
    host: &str,
    want: &PlannedVm,
    r: &Reporter,
) -> anyhow::Result<()> {
    let w = &vm_record(&want.spec);
    let update = lifecycle::VmUpdate {
        name: Some(w.name.clone()),
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
                vm: create_step::vm_record(w.vmid, &w.node, &outcome.config),
                fresh: false,
            });
            Ok(outcome)
        })
        .await?;
    if want.restart && outcome.needs_reboot() {
        r.progress(format!(
            "restarting through Proxmox to apply {}",
            outcome.pending.join(", ")
        ));
        gate::gated_restart(ctx, host, r, async {
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
    } else if outcome.needs_reboot() {
        // The plan did not restart it: Proxmox keeps the values for the
        // VM's next start, and the next plan shows the restart.
        r.warn(format!(
            "Proxmox keeps {} pending: the plan did not restart the VM, so it takes them at its \
             next start (the next plan restarts it)",
            outcome.pending.join(", ")
        ));
    } else if want.restart {
        r.progress("nothing is pending in Proxmox any more: no restart needed");
    }
    Ok(())
}

async fn delete_vm(ctx: &Context, host: &str, why: Leaving, r: &Reporter) -> anyhow::Result<()> {
    // Only the VM talosprov made: another guest at its vmid is left alone.
    let Some((vmid, node, name)) = create_step::made_vm(ctx, host) else {
        r.record(Record::VmGone(host.to_owned()));
        return Ok(());
    };
    if !create_step::still_there(ctx, (vmid, &node, &name), r).await? {
        r.record(Record::VmGone(host.to_owned()));
        return Ok(());
    }
    match why {
        // Left half-made by an interrupted apply: never configured.
        _ if !ctx.recorded_vms.contains_key(host) => {}
        Leaving::Removed(role) => remove_step::remove(ctx, host, role, r).await?,
        // Replaced: the node is the same cluster member under a new VM.
        Leaving::Replaced(role) => talos_steps::reset_node(ctx, host, role, r).await,
    }
    r.progress(format!("shutting down and deleting VM {vmid}"));
    r.proxmox(async {
        lifecycle::destroy_vm(&ctx.proxmox, &node, vmid, ctx.waits.shutdown_secs)
            .await
            .with_context(|| format!("cannot delete VM {vmid} ({host})"))?;
        r.record(Record::VmGone(host.to_owned()));
        Ok(())
    })
    .await
}
