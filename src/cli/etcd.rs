//! `talosprov etcd snapshot`: save an encrypted etcd snapshot (see the
//! engine's `command::etcd`), and say where it went.

use clap::{Args, Subcommand};

use std::path::PathBuf;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::apply::Applied;
use talosprov_engine::command::etcd::{RestoreRequest, SnapshotRequest, restore, snapshot};

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

/// Arguments of `talosprov etcd restore`.
#[derive(Debug, Args)]
pub struct EtcdRestoreArgs {
    /// The snapshot: `latest` (the newest of this cluster in the topology's
    /// backup.destination, else etcd-snapshots/ beside the state), an
    /// archive's path or s3:// URL (etcd-….snapshot.age), or a folder or
    /// s3://bucket/prefix whose newest archive of this cluster is taken.
    #[arg(long, value_name = "SNAPSHOT")]
    pub from: String,

    /// The age identity file that opens a snapshot sealed to recipients
    /// (as `age -d -i` takes; default: the state's
    /// TALOSPROV_STATE_AGE_IDENTITY_FILE). A snapshot sealed with a
    /// passphrase is opened with TALOSPROV_STATE_PASSPHRASE, one sealed with
    /// the cluster's own key with the state's secrets.
    #[arg(long, value_name = "FILE")]
    pub identity: Option<PathBuf>,

    /// Recover without checking the snapshot's hash (Talos's
    /// recover_skip_hash_check): for a database file copied from an etcd
    /// data directory, which has none.
    #[arg(long = "skip-hash-check")]
    pub skip_hash_check: bool,

    /// Skip the interactive approval of the plan (and, with --force, of the
    /// resets).
    #[arg(long = "auto-approve")]
    pub auto_approve: bool,

    /// Restore over a healthy etcd: every control plane is reset first
    /// (etcd data and machine config wiped, back in maintenance mode), after
    /// its own approval, then the restore runs as for a lost cluster.
    #[arg(long)]
    pub force: bool,

    /// How many changes run at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,

    #[command(flatten)]
    pub lock: LockOptions,

    #[command(flatten)]
    pub state: StateOptions,
}

/// Arguments of `talosprov etcd snapshot`.
#[derive(Debug, Args)]
pub struct EtcdSnapshotArgs {
    /// Where to write: a folder (relative to the current folder), or
    /// s3://bucket/prefix (endpoint, region and credentials from
    /// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN). Default: the topology's
    /// backup.destination, else etcd-snapshots/ beside the local state file
    /// (the topology's folder for a remote state). Retention runs only in
    /// those two.
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
        EtcdCommand::Restore(a) => run_restore(a).await,
    }
}

async fn run_restore(args: EtcdRestoreArgs) -> Result<Outcome, CommandError> {
    let request = RestoreRequest {
        state: args.state.settings(),
        lock_timeout: args.lock.lock_timeout,
        from: args.from,
        identity: args.identity,
        skip_hash_check: args.skip_hash_check,
        auto_approve: args.auto_approve,
        parallelism: args.parallelism,
        force: args.force,
    };
    let applied = restore(&request, &Console::ui()).await?;
    // The restore's targets are its own (the control planes): no -target warning.
    let applied = match applied {
        Applied::Done {
            plan,
            gate,
            ready_wait,
            targeted: _,
        } => Applied::Done {
            plan,
            gate,
            ready_wait,
            targeted: false,
        },
        other @ Applied::Refreshed { .. } => other,
    };
    super::apply::report(applied)?;
    crate::ui::out::print_line(
        "etcd is restored. Workers were left alone (they rejoin); run `talosprov plan` for \
         anything else the topology asks for.",
    );
    Ok(Outcome::Success)
}

async fn run_snapshot(args: EtcdSnapshotArgs) -> Result<Outcome, CommandError> {
    let request = SnapshotRequest {
        state: args.state.settings(),
        to: args.to,
        recipients: args.recipients,
    };
    let taken = snapshot(&request, &Console::ui()).await?;
    let m = &taken.manifest;
    crate::ui::out::print_line(&format!(
        "Saved etcd snapshot {} from {} to {} ({} bytes, revision {}, encrypted with {}).",
        taken.name.archive(),
        m.node,
        taken.location,
        m.plaintext_bytes,
        m.revision,
        m.key
    ));
    for old in &taken.pruned {
        crate::ui::out::print_line(&format!("Deleted {} (retention).", old.archive()));
    }
    for left in &taken.abandoned {
        crate::ui::out::print_line(&format!(
            "Deleted {left} (left by an interrupted snapshot)."
        ));
    }
    Ok(Outcome::Success)
}
