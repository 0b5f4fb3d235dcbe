//! `talosprov etcd`: an encrypted snapshot of etcd, and the recovery of a
//! cluster from one; one file per subcommand.

use clap::{Args, Subcommand};

use crate::cli::error::Outcome;
use restore::EtcdRestoreArgs;
use snapshot::EtcdSnapshotArgs;
use talosprov_engine::command::CommandError;

mod restore;
mod snapshot;

/// Arguments of `talosprov etcd`.
#[derive(Debug, Args)]
pub struct EtcdArgs {
    /// The `etcd` subcommand to run.
    #[command(subcommand)]
    pub command: EtcdCommand,
}

/// The `etcd` subcommands.
#[derive(Debug, Subcommand)]
pub enum EtcdCommand {
    /// Stream a snapshot from a healthy control plane, encrypted, with its manifest.
    ///
    /// The archive is named etcd-<UTC time>-<cluster>-r<revision>.snapshot.age
    /// and its manifest .json (cluster, lineage, time, revision, SHA-256 of
    /// the snapshot, Talos and Kubernetes versions). The snapshot never
    /// touches the disk or the network unencrypted. Reads the state without
    /// locking it.
    ///
    /// Example: talosprov etcd snapshot -f cluster.yaml --to s3://backups/lab
    Snapshot(EtcdSnapshotArgs),
    /// Recover a cluster whose etcd is gone on every control plane from a snapshot.
    ///
    /// As Talos documents disaster recovery: the snapshot is checked first
    /// (its manifest's lineage and etcd CA against the state's, the key, the
    /// SHA-256 of the whole snapshot), then a plan to approve: the missing
    /// control-plane VMs created again, their machine configs applied, and
    /// the bootstrap of the first control plane made from the snapshot
    /// (EtcdRecover, then Bootstrap with recover_etcd); the other control
    /// planes join it. Workers are not touched: they rejoin. Then it waits for
    /// the Kubernetes API and the nodes. A cluster whose etcd is healthy is
    /// refused.
    ///
    /// Example: talosprov etcd restore -f cluster.yaml --from latest
    Restore(EtcdRestoreArgs),
}

/// Run an `etcd` subcommand.
///
/// # Errors
/// Whatever the engine fails with.
pub async fn run(args: EtcdArgs) -> Result<Outcome, CommandError> {
    match args.command {
        EtcdCommand::Snapshot(a) => snapshot::run(a).await,
        EtcdCommand::Restore(a) => restore::run(a).await,
    }
}
