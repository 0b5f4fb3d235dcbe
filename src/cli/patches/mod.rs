//! `talosprov patches`: work on the topology's patch tree. `migrate --to v1.14` rewrites
//! the v1alpha1 fields Talos 1.14 deprecates into the documents that replace them, showing
//! each file's diff; only `--write` changes the files.

use clap::{Args, Subcommand};

use crate::cli::error::Outcome;
use migrate::MigrateArgs;
use talosprov_engine::command::CommandError;

mod migrate;

/// Arguments of `talosprov patches`.
#[derive(Debug, Args)]
pub struct PatchesArgs {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: PatchesCommand,
}

/// The `patches` subcommands.
#[derive(Debug, Subcommand)]
pub enum PatchesCommand {
    /// Rewrite the patch tree for a newer Talos config contract, showing the diff.
    ///
    /// For --to v1.14: each v1alpha1 field Talos 1.14 moved into a document of its own
    /// (machine.kubelet to KubeletConfig, cluster.network.cni to the Flannel document,
    /// cluster.proxy to KubeProxyConfig, machine.network.interfaces of the node's link to
    /// LinkConfig and Layer2VIPConfig, ...) is moved there, since Talos 1.14 refuses a field
    /// beside the document that replaces it. What has no equivalent, or cannot be moved
    /// safely, stays and is listed with the reason. The files' leading comments are kept,
    /// comments inside documents are not. Nothing is written without --write.
    ///
    /// Example: talosprov patches migrate --to v1.14 -f cluster.yaml --write
    Migrate(MigrateArgs),
}

/// Run `talosprov patches ...`.
///
/// # Errors
/// The topology's errors (printed, exit 1), unreadable or unwritable files.
pub fn run(args: PatchesArgs) -> Result<Outcome, CommandError> {
    match args.command {
        PatchesCommand::Migrate(args) => migrate::run(args),
    }
}
