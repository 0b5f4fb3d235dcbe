//! `talosprov force-unlock ID`: release a lock left by a run that was killed
//! or cancelled (a GitLab job stopped with SIGTERM), as OpenTofu's
//! `force-unlock` does. The ID is the one the lock error and the run printed.

use clap::Args;

use super::state_options::StateOptions;
use super::{CommandError, Outcome};
use talosprov_state::Backend;

/// Arguments of `talosprov force-unlock`.
#[derive(Debug, Args)]
pub struct ForceUnlockArgs {
    /// The lock ID to release.
    lock_id: String,

    /// Do not ask for confirmation (for a CI cleanup job).
    #[arg(long = "force")]
    force: bool,

    #[command(flatten)]
    state: StateOptions,
}

/// Release the lock, unless its holder still runs (on this host, or holding
/// the local lock file's OS lock): releasing it would let two runs change the
/// cluster at once.
///
/// # Errors
/// No terminal and no `-force`, a lock ID that does not match the lock, a
/// holder still running, or a backend failure.
pub async fn run(args: ForceUnlockArgs) -> Result<Outcome, CommandError> {
    if !args.force && !crate::ui::console::stdin_is_terminal() {
        return Err(anyhow::anyhow!(
            "force-unlock needs confirmation and there is no terminal to ask on: add -force"
        )
        .into());
    }
    let store = args.state.open()?;
    if !args.force {
        let question = format!(
            "Do you really want to force-unlock the state in {}?\n  talosprov will remove lock {}; \
             a run still holding it would then race with the next one.",
            store.backend().describe(),
            args.lock_id
        );
        if !crate::ui::console::confirm(&question)? {
            return Err(anyhow::anyhow!("force-unlock cancelled: the lock is kept").into());
        }
    }
    store.unlock(&args.lock_id).await?;
    crate::ui::print_line(&format!(
        "Released lock {} on the state in {}.",
        args.lock_id,
        store.backend().describe()
    ));
    Ok(Outcome::Success)
}
