//! `talosprov apply -refresh-only`: record in the state what refresh observed
//! (VMs changed or deleted by hand, Talos versions, nodes reset to maintenance
//! mode) after a "yes", changing nothing in Proxmox or on the nodes.

use tokio::sync::watch;

use super::CommandError;
use super::Outcome;
use super::cluster::approve;
use super::planning::Planned;
use crate::apply::refresh_only::observed_records;
use crate::state::format::State;
use crate::state::{StateBackend, StateStore};

/// Show the drift of `planned`, ask, and save the state with the observed
/// values (one save, one serial).
///
/// # Errors
/// A refusal to confirm, or the state save.
pub(super) async fn run(
    planned: &Planned,
    store: &StateStore<StateBackend>,
    state: &mut State,
    encrypted: bool,
    auto_approve: bool,
    cancel: watch::Receiver<bool>,
) -> Result<Outcome, CommandError> {
    let drift = crate::ui::plan::refresh_only(&planned.plan);
    crate::ui::write_stdout(&crate::ui::plan::render(&drift))?;
    let records = observed_records(state, &planned.observed);
    if records.is_empty() {
        crate::ui::write_stdout("\nThe state matches what was observed: nothing to record.\n")?;
        return Ok(Outcome::Success);
    }
    approve(
        auto_approve,
        "Would you like to update the state to reflect these detected changes?\n  \
         talosprov will write these changes to the state without changing any real resources.",
        "-auto-approve",
        cancel,
    )
    .await?;
    let count = records.len();
    for r in records {
        crate::apply::record::apply(state, r);
    }
    store.save(state, encrypted).await?;
    crate::ui::write_stdout(&format!(
        "\nApply complete! Recorded {count} observed change(s) in the state; nothing else was changed.\n"
    ))?;
    Ok(Outcome::Success)
}
