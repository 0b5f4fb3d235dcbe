//! `talosprov secrets import FILE`: seed a new state with an existing cluster's secrets
//! bundle (talosctl's secrets.yaml), so talosprov builds configs with the same CAs and tokens.
//! A state that already has secrets is refused: a lineage's secrets never change. A state
//! that lost its secrets takes them back, if they are its cluster's (its talosconfig trusts
//! the bundle's OS CA).

use clap::Args;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::{LockOptions, StateOptions};
use talosprov_engine::command::CommandError;
use talosprov_engine::command::secrets::{SecretsImported, import};

/// Arguments of `talosprov secrets import`.
#[derive(Debug, Args)]
pub struct SecretsImportArgs {
    /// The bundle, in talosctl's secrets.yaml format (`talosctl gen secrets`).
    #[arg(value_name = "FILE")]
    pub bundle: PathBuf,

    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,
}

/// Import the bundle and say where it went.
///
/// # Errors
/// The engine's: an unreadable or invalid bundle, a state that already has
/// secrets or trusts another OS CA, a held lock, the save.
pub async fn run(args: SecretsImportArgs) -> Result<Outcome, CommandError> {
    let SecretsImported {
        location,
        lineage,
        serial,
    } = import(
        &args.state.settings(),
        args.lock.lock_timeout,
        &args.bundle,
        &Console::ui(),
    )
    .await?;
    crate::ui::out::print_line(&format!(
        "Imported the secrets bundle {} into the state {location} (lineage {lineage}, serial {serial}).",
        args.bundle.display()
    ));
    Ok(Outcome::Success)
}
