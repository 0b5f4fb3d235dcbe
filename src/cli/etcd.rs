//! `talosprov etcd snapshot`: save an encrypted etcd snapshot (see the
//! engine's `command::etcd`), and say where it went.

use clap::{Args, Subcommand};

use super::frontend::Console;
use super::state_options::StateOptions;
use super::{CommandError, Outcome};
use talosprov_engine::command::etcd::{SnapshotRequest, snapshot};

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
}

/// Arguments of `talosprov etcd snapshot`.
#[derive(Debug, Args)]
pub struct EtcdSnapshotArgs {
    /// Where to write: a folder, or s3://bucket/prefix (endpoint, region and
    /// credentials from AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY). Default: the topology's backup.destination,
    /// else etcd-snapshots/ beside the state.
    #[arg(long, value_name = "DEST")]
    pub to: Option<String>,

    /// Encrypt to this age recipient (age1…) instead of the state's keys or
    /// the cluster's own key; repeatable. Restore then needs --identity.
    #[arg(long = "recipient", value_name = "AGE_RECIPIENT")]
    pub recipients: Vec<String>,

    #[command(flatten)]
    pub state: StateOptions,
}

/// Run an `etcd` subcommand.
///
/// # Errors
/// Whatever the engine fails with.
pub async fn run(args: EtcdArgs) -> Result<Outcome, CommandError> {
    match args.command {
        EtcdCommand::Snapshot(a) => run_snapshot(a).await,
    }
}

async fn run_snapshot(args: EtcdSnapshotArgs) -> Result<Outcome, CommandError> {
    let request = SnapshotRequest {
        state: args.state.settings(),
        to: args.to,
        recipients: args.recipients,
    };
    let taken = snapshot(&request, &Console::ui()).await?;
    let m = &taken.manifest;
    crate::ui::print_line(&format!(
        "Saved etcd snapshot {} from {} to {} ({} bytes, revision {}, encrypted with {}).",
        taken.name.archive(),
        m.node,
        taken.location,
        m.plaintext_bytes,
        m.revision,
        m.key
    ));
    for old in &taken.pruned {
        crate::ui::print_line(&format!("Deleted {} (retention).", old.archive()));
    }
    Ok(Outcome::Success)
}
