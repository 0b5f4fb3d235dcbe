//! `talosprov validate`: every check that needs no network, on the topology file,
//! the patch tree and each node's final machine config, with all problems
//! reported together. Each stage returns diagnostics and the next appends its own.

use clap::Args;
use std::path::PathBuf;

use super::{CommandError, Outcome};
use crate::ui::summary::ValidateReport;
use talosprov_core::diagnostics;
use talosprov_engine::command::validate::check;

/// Arguments of `talosprov validate` (its help text is on `Command::Validate`).
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The topology file; patches are read from its `patches_dir`
    /// (default: the `patches` folder beside it).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = "cluster.yaml"
    )]
    pub file: PathBuf,

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
pub fn run(args: ValidateArgs) -> Result<Outcome, CommandError> {
    let v = check(&args.file)?;
    let report = ValidateReport {
        file: &args.file,
        topology: v.topology.as_ref(),
        patches: &v.patches,
        ignored: &v.ignored,
        diagnostics: &v.diagnostics,
    };
    let failed = diagnostics::has_errors(&v.diagnostics) || v.topology.is_none();
    if args.json {
        crate::ui::write_stdout(&(crate::ui::summary::json(&report) + "\n"))?;
    } else {
        crate::ui::write_stderr(&crate::ui::diagnostics::render_all(
            &v.diagnostics,
            crate::ui::diagnostics::stderr_colour(),
        ));
        if !failed {
            crate::ui::write_stdout(&crate::ui::summary::summary_text(&report))?;
        }
    }
    if failed {
        Err(CommandError::Reported)
    } else {
        Ok(Outcome::Success)
    }
}
