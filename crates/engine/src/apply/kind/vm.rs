//! The VM step (`vm/<host>`): a VM created (or adopted half-made) and
//! started, changed in place (restarted through Proxmox behind the health
//! gate when a value needs it), replaced at another vmid or host, or
//! deleted after its node leaves the cluster.

use anyhow::Context as _;

use talosprov_base::role::Role;
use talosprov_plan::change::VmOp;
use talosprov_plan::desired::vm_record;
use talosprov_plan::planned::PlannedVm;
use talosprov_proxmox::{ha, lifecycle};

use crate::apply::context::Context;
use crate::apply::create_step;
use crate::apply::gate;
use crate::apply::record::Record;
use crate::apply::remove_step;
use crate::apply::reporter::Reporter;
use crate::apply::talos_steps;

/// Create, update, replace or delete `host`'s VM.
///
/// # Errors
/// The Proxmox or Talos error, naming the VM.
pub(in crate::apply) async fn run(
    ctx: &Context,
    host: &str,
    op: &VmOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        VmOp::Create { vm, .. } => r.proxmox(create_step::vm(ctx, host, &vm.spec, r)).await,
        VmOp::Update { vm, .. } => update_vm(ctx, host, vm, r).await,
        VmOp::Replace { vm, role } => {
            delete_vm(ctx, host, Leaving::Replaced(Some(*role)), r).await?;
            r.proxmox(create_step::vm(ctx, host, &vm.spec, r)).await
        }
        VmOp::Delete { role } => delete_vm(ctx, host, Leaving::Removed(*role), r).await,
    }
}

/// Why a VM is deleted, with the node's role from the plan: replaced (the
/// node comes back under a new VM) or removed from the cluster.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    Replaced(Option<Role>),
    Removed(Option<Role>),
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
        networks: Some(want.spec.networks.clone()),
        disks: Some(want.spec.disks.clone()),
        agent: Some(want.spec.agent),
    };
    // The data disks talosprov made that left the topology: the plan showed
    // each as deleted, and apply ran only because -allow-data-loss named
    // this VM. A disk it did not make is never in the record.
    let dropped: Vec<String> = ctx
        .recorded_vms
        .get(host)
        .map(|v| {
            v.disks
                .keys()
                .filter(|k| !w.disks.contains_key(*k))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    r.progress("updating the VM config");
    let outcome = r
        .proxmox(async {
            for key in &dropped {
                r.progress(format!("deleting data disk {key} and its volume"));
                lifecycle::detach_disk(&ctx.proxmox, &w.node, w.vmid, key)
                    .await
                    .with_context(|| format!("cannot delete {key} of VM {} ({host})", w.vmid))?;
            }
            let outcome = lifecycle::update_vm(&ctx.proxmox, &w.node, w.vmid, &update)
                .await
                .with_context(|| format!("cannot update VM {} ({host})", w.vmid))?;
            let had_ha = ctx.recorded_vms.get(host).is_some_and(|v| v.ha.is_some());
            let mut record = create_step::vm_record(w.vmid, &w.node, &outcome.config);
            if had_ha || w.ha.is_some() {
                r.progress("setting the VM's HA resource");
                record.ha = ha::set_resource(&ctx.proxmox, w.vmid, w.ha.as_ref())
                    .await
                    .with_context(|| format!("cannot set VM {}'s HA resource ({host})", w.vmid))?;
            }
            // Recorded before the restart: the config holds the values now, and a
            // run stopped before the restart leaves them pending, which the next
            // plan reads back from Proxmox and finishes with a restart.
            r.record(Record::Vm {
                host: host.to_owned(),
                vm: record,
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
