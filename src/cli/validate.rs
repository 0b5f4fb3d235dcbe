//! `talosprov validate`: every check that needs no network, on the topology file,
//! the patch tree and each node's final machine config, with all problems
//! reported together. Each stage returns diagnostics and the next appends its own.
//! With `--online`, then, what only Proxmox and the nodes can answer.

use clap::Args;

use super::frontend::Console;
use super::state_options::StateOptions;
use crate::cli::error::Outcome;
use crate::ui::summary::ValidateReport;
use talosprov_base::diagnostics;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::validate::check;
use talosprov_engine::command::validate_online::{OnlineCheck, check_online};

/// Arguments of `talosprov validate` (its help text is on `Command::Validate`).
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The topology file (patches are read from its `patches_dir`, by
    /// default the `patches` folder beside it) and, for `--online`, the state.
    #[command(flatten)]
    pub state: StateOptions,

    /// Once the offline checks pass, refresh and plan as `plan` does (the
    /// state read without its lock, nothing changed or saved): a bridge a
    /// host lacks, a pool member that fits nowhere, a change talosprov
    /// refuses, and each privilege the Proxmox token lacks for the plan's
    /// changes, with its path and the `pveum` line that grants it.
    #[arg(long, conflicts_with = "json")]
    pub online: bool,

    /// Print the report as one JSON object on stdout (diagnostics, the
    /// validated topology with defaults applied, and each node's patches).
    #[arg(long)]
    pub json: bool,
}

/// Run `validate`: exit 0 when there is no error, 1 otherwise.
///
/// # Errors
/// [`CommandError::Reported`] when any diagnostic is an error (they are
/// already printed); a failure when the file cannot be read or stdout is closed.
pub async fn run(args: ValidateArgs) -> Result<Outcome, CommandError> {
    let file = &args.state.file;
    let v = check(file)?;
    let report = ValidateReport {
        file,
        topology: v.topology.as_ref(),
        patches: &v.patches,
        ignored: &v.ignored,
        diagnostics: &v.diagnostics,
    };
    let failed = diagnostics::has_errors(&v.diagnostics) || v.topology.is_none();
    if args.json {
        crate::ui::out::write_stdout(&(crate::ui::summary::json(&report) + "\n"))?;
    } else {
        crate::ui::out::write_stderr(&crate::ui::diagnostics::render_all(
            &v.diagnostics,
            crate::ui::diagnostics::stderr_colour(),
        ));
        if !failed {
            crate::ui::out::write_stdout(&crate::ui::summary::summary_text(&report))?;
        }
    }
    if failed {
        return Err(CommandError::Reported);
    }
    if args.online {
        let found = check_online(&args.state.settings(), &Console::ui()).await?;
        crate::ui::out::write_stdout(&online_text(&found))?;
    }
    Ok(Outcome::Success)
}

/// `validate --online`'s lines after the summary.
fn online_text(found: &OnlineCheck) -> String {
    let s = &found.summary;
    let privileges = if found.privileges_checked {
        "the API token holds every privilege its Proxmox changes need"
    } else {
        "it changes nothing in Proxmox"
    };
    format!(
        "\nOnline: Proxmox VE {}; the plan can be made ({} to add, {} to change, {} to \
         destroy; {} configs to apply) and {privileges}.\n",
        found.pve_version, s.add, s.change, s.destroy, s.apply_config
    )
}
