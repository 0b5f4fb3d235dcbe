//! The pool step (`pool/<name>`): the resource pool created (or adopted,
//! when an interrupted apply made it) or deleted.

use anyhow::Context as _;

use talosprov_plan::change::PoolOp;
use talosprov_proxmox::pool;

use crate::apply::context::Context;
use crate::apply::create_step;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Create or delete the pool `name`.
///
/// # Errors
/// The Proxmox error, naming the pool.
pub(in crate::apply) async fn run(
    ctx: &Context,
    name: &str,
    op: &PoolOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        PoolOp::Create => r
            .proxmox(create_step::pool(ctx, name, r))
            .await
            .with_context(|| format!("cannot create pool {name}")),
        PoolOp::Delete => {
            r.proxmox(async {
                pool::delete_pool(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete pool {name}"))?;
                r.record(Record::PoolGone(name.to_owned()));
                Ok(())
            })
            .await
        }
    }
}
