//! One async step per planned change, by kind (`kind::<kind>::run`, each
//! taking its kind's op with the values it sends): images, pool and
//! mappings, VMs (created and started, updated, replaced, deleted), machine
//! configs (wait for maintenance mode, apply, wait for secure mode), the
//! bootstrap, the kubeconfig, the talosconfig and the add-ons' objects. Steps report
//! progress and records through their [`Reporter`]; they never touch the
//! state. Proxmox work runs in sections an interruption lets finish.

use talosprov_plan::change::{Change, Op};

use super::context::Context;
use super::kind;
use crate::apply::reporter::Reporter;

/// Run the step for one change: its kind's step, with the resource's name
/// and the kind's op ([`Change::op`]).
///
/// # Errors
/// The Proxmox, Talos, factory or Kubernetes error, with the
/// operator-level context.
pub async fn run(ctx: &Context, change: &Change, r: &Reporter) -> anyhow::Result<()> {
    match change.op() {
        Op::Image { name, op } => kind::image::run(ctx, name, op, r).await,
        Op::Pool { name, op } => kind::pool::run(ctx, name, op, r).await,
        Op::PciMapping { name, op } => kind::mapping::run(ctx, name, op, r).await,
        Op::Vm { host, op } => kind::vm::run(ctx, host, op, r).await,
        Op::HaRule { entry, op } => kind::ha_rule::run(ctx, entry, op, r).await,
        Op::Config { host, op } => kind::config::run(ctx, host, op, r).await,
        Op::Bootstrap => kind::bootstrap::run(ctx, r).await,
        Op::Kubeconfig { .. } => kind::kubeconfig::run(ctx, r).await,
        Op::Talosconfig => kind::talosconfig::run(ctx, r).await,
        Op::Object { object, op } => kind::object::run(ctx, object, op, r).await,
    }
}
