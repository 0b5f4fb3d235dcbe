//! `talosprov plan`: show what apply would change, without changing anything.

use std::path::{Path, PathBuf};

use clap::Args;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::plan::{PlanRequest, plan};
use talosprov_engine::command::store::command_line;
use talosprov_statefile::address::Address;

/// Arguments of `talosprov plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,

    /// Save the plan to FILE (mode 0600; it holds secrets, and is encrypted like
    /// the state when state encryption is on). `talosprov apply FILE` then
    /// makes exactly these changes, unless the state has moved on.
    #[arg(long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Also write GitLab's merge-request report to FILE,
    /// `{"create":N,"update":N,"delete":N}`, for `artifacts:reports:terraform`.
    #[arg(long = "report-gitlab", value_name = "FILE")]
    pub report_gitlab: Option<PathBuf>,

    /// Exit 0 when there are no changes, 2 when there are (or conflicts wait
    /// for an import), 1 on error.
    #[arg(long = "detailed-exitcode")]
    pub detailed_exitcode: bool,

    /// Print the plan as JSON (format_version 3; its keys are described
    /// under "Plan JSON" in talosprov's README.md).
    #[arg(long)]
    pub json: bool,

    /// Read back Proxmox and the Talos nodes first (`-refresh=false`: plan from
    /// the state alone, with no network at all).
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub refresh: bool,

    /// Same as `-refresh=false`: no network at all.
    #[arg(long)]
    pub offline: bool,

    /// Plan only this resource and what it depends on (repeatable), e.g.
    /// `vm/talos-worker-01`.
    #[arg(long = "target", value_name = "ADDR")]
    pub target: Vec<Address>,

    /// Show only what changed outside talosprov (drift), with no changes to
    /// undo it; `apply -refresh-only` records it in the state.
    #[arg(long = "refresh-only", conflicts_with_all = ["offline", "out"])]
    pub refresh_only: bool,

    /// Plan machine config changes on running nodes in staged mode, as `apply
    /// --staged` does: each node takes its new config at its next reboot. A
    /// plan saved with it is applied that way.
    #[arg(long)]
    pub staged: bool,

    /// Where etcd is gone on every control plane (no VM, maintenance mode,
    /// or an etcd that waits for a bootstrap), plan a new, empty etcd:
    /// the cluster's Kubernetes objects are lost. Without it the plan is
    /// broken, and names `talosprov etcd restore`, which recovers them from a
    /// snapshot. A plan saved with it is applied with it.
    #[arg(long = "allow-new-etcd")]
    pub allow_new_etcd: bool,

    /// How many changes apply runs at once (accepted here for symmetry with apply).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,
}

/// Run `plan`.
///
/// # Errors
/// The engine's: topology diagnostics, a held lock, refusals, refresh errors,
/// a report or plan file that cannot be written, an interruption.
pub async fn run(args: PlanArgs) -> Result<Outcome, CommandError> {
    let request = PlanRequest {
        state: args.state.settings(),
        lock_timeout: args.lock.lock_timeout,
        out: args.out.clone(),
        report_gitlab: args.report_gitlab.clone(),
        offline: args.offline || !args.refresh,
        targets: args.target.clone(),
        refresh_only: args.refresh_only,
        staged: args.staged,
        allow_new_etcd: args.allow_new_etcd,
    };
    let planned = plan(&request, &Console::for_plan(args.json)).await?;
    if let Some(out) = &args.out
        && !args.json
    {
        crate::ui::out::write_stdout(&format!(
            "\nSaved the plan to: {}\n\nTo perform exactly these actions, run:\n    {}\n",
            out.display(),
            apply_command(&args.state, out)
        ))?;
    }
    if args.detailed_exitcode && !planned.plan.broken.is_empty() {
        // Never "no changes": the cluster needs a choice only its user can make.
        return Err(CommandError::Failed(anyhow::anyhow!(
            "the cluster is broken (see Broken above): with -detailed-exitcode that is an \
             error, not \"no changes\""
        )));
    }
    if args.detailed_exitcode && !planned.plan.unknown.is_empty() {
        // OpenTofu's -detailed-exitcode: 1 is an error, never "no changes".
        return Err(CommandError::Failed(anyhow::anyhow!(
            "the state of {} could not be read (see Unknown above): with -detailed-exitcode \
             that is an error, not \"no changes\"",
            planned
                .plan
                .unknown
                .iter()
                .map(|u| u
                    .address
                    .as_ref()
                    .map_or("the Kubernetes API".to_owned(), ToString::to_string))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if args.detailed_exitcode && !planned.plan.unfinished.is_empty() {
        // The cluster is between two stages of an operation: not converged.
        return Err(CommandError::Failed(anyhow::anyhow!(
            "an operation is unfinished (see Unfinished above): with -detailed-exitcode that is \
             an error, not \"no changes\""
        )));
    }
    if args.detailed_exitcode && planned.pending {
        Ok(Outcome::Changes)
    } else {
        Ok(Outcome::Success)
    }
}

/// The command that applies the plan saved to `out`: `talosprov apply`, with
/// the flags this plan was given to find the topology and the state, so that
/// it runs from the same folder.
fn apply_command(state: &StateOptions, out: &Path) -> String {
    command_line(&state.settings(), &["apply", &out.display().to_string()])
}
