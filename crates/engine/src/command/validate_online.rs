//! `validate --online`: after every offline check passes, what only Proxmox
//! and the nodes can answer. The state is read without its lock (it is never
//! written, as `plan -lock=false` reads it), the cluster is refreshed, and
//! the plan is made: its refusals (a bridge a host lacks, a pool member that
//! fits nowhere, a disk that would shrink) and the token's privileges for
//! the changes it holds are reported as they are by `plan`, and nothing is
//! changed or saved.

use talosprov_plan::model::Summary;

use super::planning::{PlanRequest, make_plan};
use super::prepare as cluster;
use super::store::StateSettings;
use super::{CommandError, Ui, guard};

/// What `validate --online` found, when the plan could be made.
#[derive(Debug, Clone)]
pub struct OnlineCheck {
    /// The Proxmox VE version `/version` reports, e.g. `9.0.10`.
    pub pve_version: String,
    /// The plan's counts (what `plan` would show).
    pub summary: Summary,
    /// The plan changes something in Proxmox, so the token's privileges for
    /// those changes were checked (`/access/permissions`); `false`: nothing
    /// to change there, and the reads refresh made were enough.
    pub privileges_checked: bool,
}

/// Refresh and plan as `plan` does, with the state read unlocked and nothing
/// shown, saved or changed.
///
/// # Errors
/// The plan's own: topology diagnostics (already shown), a state without
/// secrets that records a cluster, another cluster's nodes, refresh errors,
/// the changes talosprov refuses to make, and the privileges the token lacks
/// (each with its path and the `pveum` line that grants it).
pub async fn check_online(settings: &StateSettings, ui: &Ui) -> Result<OnlineCheck, CommandError> {
    let topology = cluster::load_topology(&settings.file, ui)?;
    let store = settings.open(ui)?;
    let loaded = store.load().await?;
    let state = loaded.as_ref().map(|l| &l.state);
    guard::refuse_lost_secrets(&topology, state, &store)?;
    guard::refuse_existing_cluster(&topology, state, None, &store).await?;
    let how = PlanRequest {
        offline: false,
        targets: &[],
        staged: false,
        warn_targets: false,
        etcd: talosprov_plan::kind::resource::EtcdRecovery::Refuse,
    };
    let planned = make_plan(&topology, state, None, &how, ui).await?;
    let client = cluster::proxmox_client_again(&topology)?;
    let version = talosprov_proxmox::storage::check_version(&client).await?;
    Ok(OnlineCheck {
        pve_version: version.text,
        summary: planned.plan.summary(),
        privileges_checked: super::privileges::changes_proxmox(&planned.plan),
    })
}
