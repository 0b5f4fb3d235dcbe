//! The machine config step (`config/<host>`): the config sent with
//! `ApplyConfiguration` (in maintenance mode for a new node), a Kubernetes
//! version rolled in talosctl `upgrade-k8s`'s phases, or Talos upgraded
//! with the installer image.

use talosprov_plan::change::ConfigOp;

use crate::apply::context::{ConfigChange, Context};
use crate::apply::reporter::Reporter;
use crate::apply::talos_steps;
use crate::apply::upgrade_step;

/// Apply, roll or upgrade `host`'s config.
///
/// # Errors
/// The Talos error, naming the node.
pub(in crate::apply) async fn run(
    ctx: &Context,
    host: &str,
    op: &ConfigOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        ConfigOp::ApplyConfig { config, role } => {
            let change = ConfigChange {
                config,
                role: *role,
            };
            if config.kubernetes_roll() {
                upgrade_step::kubernetes(ctx, host, &change, r).await
            } else {
                talos_steps::apply_config(ctx, host, &change, r).await
            }
        }
        ConfigOp::Upgrade { config, role } => {
            let change = ConfigChange {
                config,
                role: *role,
            };
            upgrade_step::upgrade(ctx, host, &change, r).await
        }
    }
}
