//! `talosprov import ADDRESS ID`: take over an object that already exists in
//! Proxmox, as OpenTofu's import does. The address must be one the topology
//! declares, at the ID it declares; the object is read from Proxmox and
//! recorded as it is, under the state lock. The next plan shows what apply
//! changes on it to match the topology.

use clap::Args;

use super::cluster;
use super::state_options::{LockOptions, StateOptions};
use super::{CommandError, Outcome};
use talosprov_engine::apply::import;
use talosprov_state::Address;
use talosprov_state::format::State;

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
/// Topology diagnostics; an address the topology does not declare, or
/// declares at another ID; an address already in the state; nothing at the
/// ID in Proxmox; a held lock; Proxmox and state errors.
pub async fn run(args: ImportArgs) -> Result<Outcome, CommandError> {
    let topology = cluster::load_topology(&args.state.file)?;
    let target = import::target(&topology, &args.address, &args.id)?;
    let client = cluster::proxmox_client(&topology)?;
    let imported = cluster::locked(
        &args.state,
        &args.lock,
        "import",
        async |store, mut cancel| {
            let body = async {
                let loaded = store.load().await?;
                let (mut state, encrypted) = match loaded {
                    Some(l) => (l.state, l.encrypted),
                    None => (State::new(uuid::Uuid::new_v4()), store.has_keys()),
                };
                import::check_state(&state, &target)?;
                let imported = import::read(&client, &target).await?;
                let description = imported.describe();
                imported.record(&mut state);
                store.save(&mut state, encrypted).await?;
                Ok::<_, CommandError>(description)
            };
            tokio::select! {
                r = body => r,
                _ = cancel.wait_for(|c| *c) => Err(CommandError::Interrupted),
            }
        },
    )
    .await?;
    let address = target.address();
    crate::ui::write_stdout(&format!(
        "{address}: imported {imported}\n\nImport successful! {address} is now in the state and \
         managed by talosprov: `talosprov plan` shows what apply changes on it to match the \
         topology, and `talosprov destroy` deletes it.\n"
    ))?;
    Ok(Outcome::Success)
}
