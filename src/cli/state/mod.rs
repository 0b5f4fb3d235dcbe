//! `talosprov state ...`: inspect and edit the recorded state, as OpenTofu's
//! `state` commands do (list, show, rm), and switch encryption at rest; one
//! file per subcommand.

use clap::{Args, Subcommand};

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;

mod decrypt;
mod encrypt;
mod list;
mod rm;
mod show;

/// Arguments of `talosprov state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

/// The `state` subcommands.
#[derive(Debug, Subcommand)]
enum StateCommand {
    /// List the addresses recorded in the state.
    List(list::StateListArgs),
    /// Show what the state records at one address (sensitive values hidden).
    Show(show::StateShowArgs),
    /// Forget resources without touching them (asks for confirmation).
    Rm(rm::StateRmArgs),
    /// Encrypt the state at rest with age (TALOSPROV_STATE_PASSPHRASE or age keys).
    Encrypt(encrypt::StateEncryptArgs),
    /// Store the state in clear again.
    Decrypt(decrypt::StateDecryptArgs),
}

/// Run a `state` subcommand.
///
/// # Errors
/// The subcommand's error.
pub async fn run(args: StateArgs) -> Result<Outcome, CommandError> {
    match args.command {
        StateCommand::List(a) => list::run(a).await,
        StateCommand::Show(a) => show::run(a).await,
        StateCommand::Rm(a) => rm::run(a).await,
        StateCommand::Encrypt(a) => encrypt::run(a).await,
        StateCommand::Decrypt(a) => decrypt::run(a).await,
    }
}
