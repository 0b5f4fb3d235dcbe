//! `talosprov force-unlock ID`: release a lock left by a run that was killed
//! or cancelled (a GitLab job stopped with SIGTERM), as OpenTofu's
//! `force-unlock` does. The ID is the one the lock error and the run printed.

use clap::Args;

use super::frontend::Console;
use super::state_options::StateOptions;
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::force_unlock;

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

/// Release the lock, after asking unless `-force`.
///
/// # Errors
/// No terminal to ask on without `-force`; the engine's: a "no", a lock ID
/// that is not the holder's, a backend failure.
pub async fn run(args: ForceUnlockArgs) -> Result<Outcome, CommandError> {
    if !args.force && !crate::ui::console::stdin_is_terminal() {
        return Err(anyhow::anyhow!(
            "force-unlock needs confirmation and there is no terminal to ask on: add -force"
        )
        .into());
    }
    let location = force_unlock(
        &args.state.settings(),
        &args.lock_id,
        args.force,
        &Console::ui(),
    )
    .await?;
    crate::ui::out::print_line(&format!(
        "Released lock {} on the state in {location}.",
        args.lock_id
    ));
    Ok(Outcome::Success)
}
