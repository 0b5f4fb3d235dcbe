//! `import ADDRESS ID`: take over an object that already exists in Proxmox,
//! as OpenTofu's import does. The address must be one the topology declares,
//! at the ID it declares; the object is read from Proxmox and recorded as it
//! is, under the state lock. The next plan shows what apply changes on it to
//! match the topology.

use std::time::Duration;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;

use super::prepare as cluster;
use super::store::{StateSettings, with_lock};
use super::{CommandError, Ui};
use crate::apply::import;

/// `import`'s arguments, as parsed.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    /// The address the topology declares for the object.
    pub address: Address,
    /// Its ID in Proxmox: the vmid for a VM, the name for a pool or a mapping.
    pub id: String,
    /// Where the topology and the state are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
}

/// What was imported.
#[derive(Debug, Clone)]
pub struct Imported {
    /// Its address in the state.
    pub address: Address,
    /// What was read, in a few words (`VM 121 "talos-cp-01" on pve1`).
    pub description: String,
}

/// Run `import`.
///
/// # Errors
/// Topology diagnostics; an address the topology does not declare, or
/// declares at another ID; an address already in the state; nothing at the
/// ID in Proxmox; a held lock; Proxmox and state errors.
pub async fn import(request: &ImportRequest, ui: &Ui) -> Result<Imported, CommandError> {
    let topology = cluster::load_topology(&request.state.file, ui)?;
    let target = import::target(&topology, &request.address, &request.id)?;
    let client = cluster::proxmox_client(&topology, ui)?;
    let store = request.state.open(ui)?;
    let description = with_lock(&store, request.lock_timeout, "import", ui, async || {
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
        Ok(description)
    })
    .await?;
    Ok(Imported {
        address: target.address(),
        description,
    })
}
