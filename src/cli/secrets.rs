//! `talosprov secrets`: the cluster secrets bundle in talosctl's secrets.yaml format.

use clap::{Args, Subcommand};

use super::secrets_gen::{self, SecretsGenArgs};
use super::{CommandError, Outcome};

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
}

/// Run a `secrets` subcommand.
///
/// # Errors
/// Whatever the subcommand fails with.
pub fn run(args: SecretsArgs) -> Result<Outcome, CommandError> {
    match args.command {
        SecretsCommand::Gen(a) => secrets_gen::run(a),
    }
}
