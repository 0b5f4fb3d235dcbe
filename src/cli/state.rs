//! `talosprov state ...`: inspect and edit the recorded state, as OpenTofu's
//! `state` commands do (list, show, rm), and switch encryption at rest.

use clap::{Args, Subcommand};

use super::{state_decrypt, state_encrypt, state_list, state_rm, state_show};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;

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
    List(state_list::StateListArgs),
    /// Show what the state records at one address (sensitive values hidden).
    Show(state_show::StateShowArgs),
    /// Forget resources without touching them (asks for confirmation).
    Rm(state_rm::StateRmArgs),
    /// Encrypt the state at rest with age (TALOSPROV_STATE_PASSPHRASE or age keys).
    Encrypt(state_encrypt::StateEncryptArgs),
    /// Store the state in clear again.
    Decrypt(state_decrypt::StateDecryptArgs),
}

/// Run a `state` subcommand.
///
/// # Errors
/// The subcommand's error.
pub async fn run(args: StateArgs) -> Result<Outcome, CommandError> {
    match args.command {
        StateCommand::List(a) => state_list::run(a).await,
        StateCommand::Show(a) => state_show::run(a).await,
        StateCommand::Rm(a) => state_rm::run(a).await,
        StateCommand::Encrypt(a) => state_encrypt::run(a).await,
        StateCommand::Decrypt(a) => state_decrypt::run(a).await,
    }
}
