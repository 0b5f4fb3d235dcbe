//! `talosprov apply [PLANFILE]`: make the changes of a new plan (after a "yes")
//! or of a saved one, in dependency order, saving the state after every step,
//! then wait for the cluster (the engine's [`apply`]); this file parses and
//! words the outcome.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::apply::{Applied, ApplyRequest, apply};
use talosprov_engine::health::gate::GateOutcome;
use talosprov_plan::model::Plan;
use talosprov_statefile::address::Address;

/// Arguments of `talosprov apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,

    /// A plan saved with `talosprov plan -out FILE`: applied without asking,
    /// refused when the state has changed since.
    #[arg(value_name = "PLANFILE")]
    pub planfile: Option<PathBuf>,

    /// Apply without asking for "yes".
    #[arg(long = "auto-approve")]
    pub auto_approve: bool,

    /// At most N changes at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,

    /// Apply only this resource and what it depends on (repeatable).
    #[arg(long = "target", value_name = "ADDR")]
    pub target: Vec<Address>,

    /// Workers upgraded at once in a Talos rollout (control planes always go
    /// one at a time, first).
    #[arg(long = "max-parallel-upgrades", value_name = "N", default_value_t = NonZeroUsize::MIN)]
    pub max_parallel_upgrades: NonZeroUsize,

    /// Do not save an etcd snapshot before each control-plane upgrade or
    /// removal. Without this flag the snapshot is archived as `etcd
    /// snapshot` archives it: age-encrypted, with its manifest, in the
    /// topology's backup.destination, else in etcd-snapshots/ beside the
    /// local state file (the topology's folder for a remote state). A
    /// snapshot that fails stops the rollout or removal.
    #[arg(long = "skip-etcd-snapshot")]
    pub skip_etcd_snapshot: bool,

    /// Stage machine config changes on running nodes: each node takes its
    /// new config at its next reboot. Without it, a change is applied at once
    /// when Talos can, and with a reboot when it must (the node is asked with
    /// a dry run).
    #[arg(long)]
    pub staged: bool,

    /// Record in the state what changed outside talosprov (drift), changing
    /// nothing in Proxmox or on the nodes.
    #[arg(long = "refresh-only", conflicts_with = "planfile")]
    pub refresh_only: bool,

    /// Read back Proxmox and the Talos nodes before planning
    /// (`-refresh=false`: plan from the state alone, as `plan -refresh=false`
    /// does; a plan saved that way is applied that way).
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub refresh: bool,

    /// Let the plan delete this VM's data disks that left the topology's
    /// `disks`, with their volumes and the data on them (repeatable), e.g.
    /// `-allow-data-loss=vm/talos-worker-01`. Without it, such a plan is
    /// refused before anything is changed.
    #[arg(long = "allow-data-loss", value_name = "ADDR")]
    pub allow_data_loss: Vec<Address>,

    /// Where etcd is gone on every control plane (no VM, maintenance mode,
    /// or an etcd that waits for a bootstrap), bootstrap a new, empty etcd:
    /// the cluster's Kubernetes objects are lost. Without it such a plan is
    /// broken, and names `talosprov etcd restore`, which recovers them from a
    /// snapshot.
    #[arg(long = "allow-new-etcd")]
    pub allow_new_etcd: bool,

    /// Print the run as JSON lines on stdout (format_version 1.0: the plan,
    /// each step's events, the final gate, warnings, errors and the summary;
    /// see "Machine-readable output" in talosprov's README.md). Needs
    /// -auto-approve or a saved plan: there is no terminal to ask on.
    #[arg(long)]
    pub json: bool,
}

impl ApplyArgs {
    /// The engine's request for these flags.
    fn request(&self) -> ApplyRequest {
        ApplyRequest {
            state: self.state.settings(),
            lock_timeout: self.lock.lock_timeout,
            planfile: self.planfile.clone(),
            auto_approve: self.auto_approve,
            parallelism: self.parallelism,
            targets: self.target.clone(),
            max_parallel_upgrades: self.max_parallel_upgrades,
            skip_etcd_snapshot: self.skip_etcd_snapshot,
            staged: self.staged,
            refresh_only: self.refresh_only,
            refresh: self.refresh,
            allow_data_loss: self.allow_data_loss.clone(),
            allow_new_etcd: self.allow_new_etcd,
        }
    }
}

/// Run `apply`.
///
/// # Errors
/// `-json` without `-auto-approve` or a saved plan; the engine's errors
/// (topology diagnostics, a held lock, a stale saved plan, refused changes,
/// failed steps, an interruption); conflicts left untouched; a cluster not
/// Ready at the end of the final gate.
pub async fn run(args: ApplyArgs) -> Result<Outcome, CommandError> {
    if args.json {
        crate::ui::json::enable();
        crate::ui::json::version("apply");
    }
    if args.json && !args.auto_approve && args.planfile.is_none() {
        return Err(anyhow::anyhow!(
            "-json cannot ask for approval: add -auto-approve, or apply a plan saved with \
             `talosprov plan -out FILE`"
        )
        .into());
    }
    report(apply(&args.request(), &Console::ui()).await?)?;
    Ok(Outcome::Success)
}

/// Say how an apply ended (also `etcd restore`'s, which is one): what was
/// recorded or applied, the node table after the final gate.
///
/// # Errors
/// Conflicts left untouched; a cluster not Ready at the end of the final
/// gate; stdout closed.
pub(super) fn report(outcome: Applied) -> Result<(), CommandError> {
    match outcome {
        Applied::Refreshed { recorded: 0 } => {
            crate::ui::out::write_stdout(
                "\nThe state matches what was observed: nothing to record.\n",
            )?;
        }
        Applied::Refreshed { recorded } => crate::ui::out::write_stdout(&format!(
            "\nApply complete! Recorded {recorded} observed change(s) in the state; nothing else was changed.\n"
        ))?,
        Applied::Done {
            plan,
            gate,
            ready_wait,
            targeted,
        } => {
            let summary = if plan.is_empty() {
                "Apply complete! Resources: 0 added, 0 changed, 0 destroyed.".to_owned()
            } else {
                crate::ui::plan::apply_summary_line(&plan.summary())
            };
            if let Some(e) = conflicts_error(&plan) {
                if !plan.is_empty() {
                    applied(&plan, &summary)?;
                    warn_targeted(targeted);
                }
                return Err(e);
            }
            if let Some(outcome) = &gate {
                not_ready(outcome, &summary, ready_wait)?;
            }
            applied(&plan, &summary)?;
            warn_targeted(targeted);
        }
    }
    Ok(())
}

/// After the final gate: the node table, as `kubectl get nodes` shows it;
/// then, when a check still failed at the deadline, the error saying what was
/// applied (`summary`'s counts) and which nodes are not ready, and why.
///
/// # Errors
/// That error; stdout closed.
fn not_ready(
    outcome: &GateOutcome,
    summary: &str,
    ready_wait: std::time::Duration,
) -> Result<(), CommandError> {
    if !outcome.nodes.is_empty() && !crate::ui::json::enabled() {
        crate::ui::out::write_stdout(&format!(
            "\nKubernetes nodes:\n{}",
            crate::ui::lines::node_table(&outcome.nodes)
        ))?;
    }
    if outcome.passed() {
        return Ok(());
    }
    let applied = summary
        .strip_prefix("Apply complete! ")
        .unwrap_or(summary)
        .trim_end_matches('.');
    Err(anyhow::anyhow!(
        "the changes are applied ({applied}), but the cluster is not Ready after {} s:\n  {}",
        ready_wait.as_secs(),
        outcome.missing().join("\n  ")
    )
    .into())
}

/// The error an apply ends with when its plan has conflicts: the objects
/// talosprov does not own were left untouched, with what depends on them.
fn conflicts_error(plan: &Plan) -> Option<CommandError> {
    if plan.conflicts.is_empty() {
        return None;
    }
    let lines: Vec<String> = plan.conflicts.iter().map(|c| format!("  {c}")).collect();
    Some(
        anyhow::anyhow!(
            "{} in Proxmox that talosprov does not own {} left untouched, with the changes \
             that depend on {}:\n{}",
            match lines.len() {
                1 => "1 object".to_owned(),
                n => format!("{n} objects"),
            },
            if lines.len() == 1 { "was" } else { "were" },
            if lines.len() == 1 { "it" } else { "them" },
            lines.join("\n")
        )
        .into(),
    )
}

/// The closing line of an apply: `summary` on stdout, or in the JSON view
/// the `change_summary` object.
fn applied(plan: &Plan, summary: &str) -> Result<(), CommandError> {
    if crate::ui::json::enabled() {
        crate::ui::json::summary("apply", &plan.summary(), summary);
        return Ok(());
    }
    crate::ui::out::write_stdout(&format!("\n{summary}\n"))?;
    Ok(())
}

/// After an apply made with `-target` (given, or kept in the saved plan),
/// OpenTofu's reminder: the changes applied may be incomplete.
fn warn_targeted(targeted: bool) {
    if targeted {
        crate::ui::out::warn(
            "Applied changes may be incomplete: the plan was made with -target, so some \
             changes the topology asks for may have been left out. Run `talosprov plan` to \
             check that no other changes are pending.",
        );
    }
}
