//! `talosprov state rm ADDR...`: forget resources without touching them, as
//! OpenTofu's `state rm` does. Asks for confirmation unless `-auto-approve`.

use clap::Args;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::{LockOptions, StateOptions};
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::remove;
use talosprov_statefile::address::Address;

/// Arguments of `talosprov state rm`.
#[derive(Debug, Args)]
pub struct StateRmArgs {
    /// The addresses to forget, e.g. `vm/talos-worker-01`.
    #[arg(required = true)]
    addresses: Vec<Address>,

    /// Do not ask for confirmation.
    #[arg(long = "auto-approve")]
    auto_approve: bool,

    #[command(flatten)]
    state: StateOptions,

    #[command(flatten)]
    lock: LockOptions,
}

/// Remove the addresses from the state, after asking unless `-auto-approve`.
///
/// # Errors
/// No terminal to ask on without `-auto-approve`; the engine's: no state, an
/// address not in it, a "no", a held lock, the save.
pub async fn run(args: StateRmArgs) -> Result<Outcome, CommandError> {
    if !args.auto_approve && !crate::ui::console::stdin_is_terminal() {
        return Err(anyhow::anyhow!(
            "state rm needs confirmation and there is no terminal to ask on: add -auto-approve"
        )
        .into());
    }
    let removed = remove(
        &args.state.settings(),
        args.lock.lock_timeout,
        &args.addresses,
        args.auto_approve,
        &Console::ui(),
    )
    .await?;
    let mut lines: Vec<String> = args
        .addresses
        .iter()
        .map(|a| format!("Removed {a}"))
        .collect();
    lines.push(format!(
        "Successfully removed {removed} resource instance(s)."
    ));
    crate::ui::console::print_lines(&lines)?;
    Ok(Outcome::Success)
}
