//! `talosprov etcd snapshot`: save an encrypted etcd snapshot (see the
//! engine's `command::etcd`), and say where it went.

use clap::Args;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::StateOptions;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::etcd::{SnapshotRequest, snapshot};

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

/// Run `etcd snapshot` and say where the archive went and what retention
/// deleted.
///
/// # Errors
/// Whatever the engine fails with.
pub(super) async fn run(args: EtcdSnapshotArgs) -> Result<Outcome, CommandError> {
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
