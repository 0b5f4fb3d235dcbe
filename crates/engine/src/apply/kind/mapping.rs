//! The PCI mapping step (`pci_mapping/<name>`): the cluster-wide mapping
//! written with the entries the plan showed, or deleted.

use anyhow::Context as _;

use talosprov_plan::change::MappingOp;
use talosprov_proxmox::mapping;

use crate::apply::context::Context;
use crate::apply::create_step;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Create, update or delete the mapping `name`.
///
/// # Errors
/// The Proxmox error, naming the mapping.
pub(in crate::apply) async fn run(
    ctx: &Context,
    name: &str,
    op: &MappingOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        MappingOp::Create(want) | MappingOp::Update(want) => r
            .proxmox(create_step::pci_mapping(ctx, name, want, r))
            .await
            .with_context(|| format!("cannot create PCI mapping {name}")),
        MappingOp::Delete => {
            r.proxmox(async {
                mapping::delete_mapping(&ctx.proxmox, name)
                    .await
                    .with_context(|| format!("cannot delete PCI mapping {name}"))?;
                r.record(Record::MappingGone(name.to_owned()));
                Ok(())
            })
            .await
        }
    }
}
