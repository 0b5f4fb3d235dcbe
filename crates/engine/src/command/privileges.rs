//! The token's privileges, checked before anything is changed: what the plan's
//! Proxmox changes need (`talosprov_proxmox::access::Needs`), read against
//! the credentials' effective privileges on each ACL path
//! (`GET /access/permissions?path=`). `plan` and `apply` run it on every online
//! plan with Proxmox changes; a missing privilege fails the plan, naming it,
//! its path and the `pveum` line that grants it.

use talosprov_plan::change::{ImageOp, Op, PoolOp, VmOp};
use talosprov_plan::model::Plan;
use talosprov_proxmox::access::{self, Needs};
use talosprov_statefile::format::State;
use talosprov_topology::model::Topology;

/// What the plan's changes need from Proxmox, on PVE `pve_major`. Pure.
pub fn needs(plan: &Plan, topology: &Topology, state: Option<&State>, pve_major: u32) -> Needs {
    let px = &topology.proxmox;
    let mut n = Needs {
        pve_major,
        pool: px.pool.clone(),
        ..Needs::default()
    };
    for change in &plan.changes {
        match change.op() {
            Op::Image {
                op: ImageOp::Create(image),
                ..
            } => {
                n.downloads
                    .push((image.record.node.clone(), image.record.storage.clone()));
                n.image_storage = Some(image.record.storage.clone());
            }
            Op::Image {
                op: ImageOp::Delete,
                ..
            } => n.image_storage = Some(px.image_storage.clone()),
            Op::Pool {
                op: PoolOp::Create, ..
            } => n.create_pool = true,
            Op::Pool {
                op: PoolOp::Delete, ..
            } => {}
            Op::PciMapping { name, .. } => n.mappings_managed.push(name.clone()),
            Op::Vm {
                op: VmOp::Create { vm, .. } | VmOp::Update { vm, .. } | VmOp::Replace { vm, .. },
                ..
            } => {
                let spec = &vm.spec;
                n.vms.push(spec.vmid);
                n.image_storage = Some(px.image_storage.clone());
                n.datastores.push(spec.datastore.clone());
                n.datastores
                    .extend(spec.disks.iter().map(|d| d.datastore.clone()));
                n.nics.extend(
                    spec.networks
                        .iter()
                        .map(|nic| (nic.bridge.clone(), nic.tag)),
                );
                n.mappings_used
                    .extend(spec.hostpci.iter().map(|d| d.mapping.clone()));
                let recorded_ha =
                    recorded_vm(state, change.address()).is_some_and(|v| v.ha.is_some());
                n.ha |= spec.ha.is_some() || recorded_ha;
                if let Op::Vm {
                    op: VmOp::Replace { .. },
                    ..
                } = change.op()
                    && let Some(old) = recorded_vmid(state, change.address())
                {
                    n.vms.push(old);
                }
            }
            Op::Vm {
                op: VmOp::Delete { .. },
                ..
            } => n.vms.extend(recorded_vmid(state, change.address())),
            Op::HaRule { .. } => n.ha = true,
            Op::Config { .. }
            | Op::Bootstrap
            | Op::Kubeconfig { .. }
            | Op::Talosconfig
            | Op::Object { .. } => {}
        }
    }
    n
}

/// Whether the plan changes anything in Proxmox.
pub(crate) fn changes_proxmox(plan: &Plan) -> bool {
    plan.changes.iter().any(|c| match c.op() {
        Op::Image { .. }
        | Op::Pool { .. }
        | Op::PciMapping { .. }
        | Op::Vm { .. }
        | Op::HaRule { .. } => true,
        Op::Config { .. }
        | Op::Bootstrap
        | Op::Kubeconfig { .. }
        | Op::Talosconfig
        | Op::Object { .. } => false,
    })
}

/// The vmid the state records for a `vm/<host>` address.
fn recorded_vmid(
    state: Option<&State>,
    address: &talosprov_statefile::address::Address,
) -> Option<u32> {
    recorded_vm(state, address).map(|v| v.vmid)
}

/// The state's record of the VM at `address`, when it is a VM's.
fn recorded_vm<'s>(
    state: Option<&'s State>,
    address: &talosprov_statefile::address::Address,
) -> Option<&'s talosprov_statefile::format::Vm> {
    let talosprov_statefile::address::Address::Vm(host) = address else {
        return None;
    };
    state?.resources.vms.get(host)
}

/// Check the credentials against what `plan` needs; nothing is changed.
///
/// # Errors
/// The missing privileges, each with its path and `pveum` line; request errors.
pub async fn check(
    client: &talosprov_proxmox::client::Client,
    plan: &Plan,
    topology: &Topology,
    state: Option<&State>,
) -> anyhow::Result<()> {
    if !changes_proxmox(plan) {
        return Ok(());
    }
    let version = talosprov_proxmox::storage::check_version(client).await?;
    let needs = needs(plan, topology, state, version.major_minor.0);
    access::preflight(client, &needs).await?;
    Ok(())
}
