//! `talosprov machineconfig`: work with Talos machine configs outside a topology.

use clap::{Args, Subcommand};

use super::machineconfig_gen::{self, GenArgs};
use super::{CommandError, Outcome};

/// Arguments of `talosprov machineconfig`.
#[derive(Debug, Args)]
pub struct MachineconfigArgs {
    /// The `machineconfig` subcommand to run.
    #[command(subcommand)]
    pub command: MachineconfigCommand,
}

/// The `machineconfig` subcommands.
#[derive(Debug, Subcommand)]
pub enum MachineconfigCommand {
    /// Print the base machine config `talosctl gen config` would make for these inputs.
    Gen(GenArgs),
}

/// Run a `machineconfig` subcommand.
///
/// # Errors
/// Whatever the subcommand fails with.
pub fn run(args: MachineconfigArgs) -> Result<Outcome, CommandError> {
    match args.command {
        MachineconfigCommand::Gen(a) => machineconfig_gen::run(a),
    }
}
