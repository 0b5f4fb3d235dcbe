//! `talosprov secrets`: the cluster secrets bundle in talosctl's secrets.yaml format: generate
//! one, import an existing cluster's into a new state, export the state's.

use clap::{Args, Subcommand};

use crate::cli::error::Outcome;
use export::SecretsExportArgs;
use generate::SecretsGenArgs;
use import::SecretsImportArgs;
use talosprov_engine::command::CommandError;

mod export;
mod generate;
mod import;

/// Arguments of `talosprov secrets`.
#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// The `secrets` subcommand to run.
    #[command(subcommand)]
    pub command: SecretsCommand,
}

/// The `secrets` subcommands.
#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Generate a new secrets bundle, as `talosctl gen secrets` does.
    Gen(SecretsGenArgs),
    /// Store an existing cluster's bundle (talosctl's secrets.yaml) in a new state.
    ///
    /// Refused when the state already has secrets: a cluster's secrets are
    /// never replaced. Takes the state lock.
    Import(SecretsImportArgs),
    /// Print the state's bundle in talosctl's secrets.yaml format.
    ///
    /// With -o FILE it is written to FILE instead (mode 0600). It is printed
    /// only to a pipe or a file, not to a terminal, unless --force.
    Export(SecretsExportArgs),
}

/// Run a `secrets` subcommand.
///
/// # Errors
/// Whatever the subcommand fails with.
pub async fn run(args: SecretsArgs) -> Result<Outcome, CommandError> {
    match args.command {
        SecretsCommand::Gen(a) => generate::run(a),
        SecretsCommand::Import(a) => import::run(a).await,
        SecretsCommand::Export(a) => export::run(a).await,
    }
}
