//! `talosprov machineconfig`: work on machine config files directly, as
//! `talosctl machineconfig` does. `patch` applies strategic-merge and JSON 6902
//! patches to an existing config, to debug patches against it; `gen` prints the
//! base config `talosctl gen config` would make.

use clap::{Args, Subcommand};

use crate::cli::error::Outcome;
use generate::GenArgs;
use patch::PatchArgs;
use talosprov_engine::command::CommandError;

mod generate;
mod patch;

/// Arguments of `talosprov machineconfig`.
#[derive(Debug, Args)]
pub struct MachineconfigArgs {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: MachineconfigCommand,
}

/// The `machineconfig` subcommands.
#[derive(Debug, Subcommand)]
pub enum MachineconfigCommand {
    /// Apply patches to a machine config file and print the result, like
    /// `talosctl machineconfig patch`.
    ///
    /// Patches are strategic-merge patches (config documents, with
    /// `$patch: delete`) or RFC 6902 JSON patches written in JSON or YAML. They
    /// apply in the order given; a later patch wins. JSON patches are refused on
    /// a multi-document config, as Talos does.
    Patch(PatchArgs),
    /// Print the base machine config `talosctl gen config` would make for these inputs.
    Gen(GenArgs),
}

/// Run `talosprov machineconfig ...`.
///
/// # Errors
/// Unreadable files, invalid config or patches, a patch that fails to apply.
pub fn run(args: MachineconfigArgs) -> Result<Outcome, CommandError> {
    match args.command {
        MachineconfigCommand::Patch(args) => patch::run(args),
        MachineconfigCommand::Gen(args) => generate::run(args),
    }
}
