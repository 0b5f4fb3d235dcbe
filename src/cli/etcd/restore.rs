//! `talosprov etcd restore`: recover a cluster whose etcd is gone from a
//! snapshot (see the engine's `command::etcd`), and what to run next.

use clap::Args;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::{LockOptions, StateOptions};
use talosprov_engine::command::CommandError;
use talosprov_engine::command::apply::Applied;
use talosprov_engine::command::etcd::{RestoreRequest, restore};

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

/// Run `etcd restore` and say what it did.
///
/// # Errors
/// Whatever the engine fails with.
pub(super) async fn run(args: EtcdRestoreArgs) -> Result<Outcome, CommandError> {
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
    crate::cli::apply::report(applied)?;
    crate::ui::out::print_line(
        "etcd is restored. Workers were left alone (they rejoin); run `talosprov plan` for \
         anything else the topology asks for.",
    );
    Ok(Outcome::Success)
}
