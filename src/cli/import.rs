//! `talosprov import ADDRESS ID`: take over an object that already exists in
//! Proxmox, as OpenTofu's import does. The address must be one the topology
//! declares, at the ID it declares; the object is read from Proxmox and
//! recorded as it is, under the state lock. The next plan shows what apply
//! changes on it to match the topology.

use clap::Args;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::import::{ImportRequest, Imported, import};
use talosprov_statefile::address::Address;

/// Arguments of `talosprov import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The address the topology declares for it: vm/HOSTNAME, pool/NAME or
    /// pci_mapping/NAME.
    #[arg(value_name = "ADDRESS")]
    pub address: Address,

    /// Its ID in Proxmox: the vmid for a VM, the name for a pool or a PCI
    /// mapping.
    #[arg(value_name = "ID")]
    pub id: String,

    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for the state lock.
    #[command(flatten)]
    pub lock: LockOptions,
}

/// Run `import`.
///
/// # Errors
/// The engine's: topology diagnostics; an address the topology does not
/// declare, or declares at another ID; an address already in the state;
/// nothing at the ID in Proxmox; a held lock; Proxmox and state errors.
pub async fn run(args: ImportArgs) -> Result<Outcome, CommandError> {
    let request = ImportRequest {
        address: args.address,
        id: args.id,
        state: args.state.settings(),
        lock_timeout: args.lock.lock_timeout,
    };
    let Imported {
        address,
        description,
    } = import(&request, &Console::ui()).await?;
    crate::ui::out::write_stdout(&format!(
        "{address}: imported {description}\n\nImport successful! {address} is now in the state and \
         managed by talosprov: `talosprov plan` shows what apply changes on it to match the \
         topology, and `talosprov destroy` deletes it.\n"
    ))?;
    Ok(Outcome::Success)
}
