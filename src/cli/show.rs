//! `talosprov show [-json] PLANFILE`: print a plan saved with `plan -out`, in
//! the human view or as the plan JSON, opening it with the state keys when
//! state encryption sealed it. Secrets stay redacted in both.

use std::path::PathBuf;

use clap::Args;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::prepare::read_saved_plan;
use talosprov_plan::view::PlanView;

/// Arguments of `talosprov show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A plan saved with `talosprov plan -out FILE`.
    #[arg(value_name = "PLANFILE")]
    pub planfile: PathBuf,

    /// Print the plan as JSON (the `plan -json` format, format_version 3).
    #[arg(long)]
    pub json: bool,
}

/// Run `show`.
///
/// # Errors
/// A plan file that cannot be read, is sealed and no state key is set
/// (`TALOSPROV_STATE_PASSPHRASE` or `TALOSPROV_STATE_AGE_IDENTITY_FILE`), or was
/// written by a newer talosprov.
pub async fn run(args: ShowArgs) -> Result<Outcome, CommandError> {
    let saved = read_saved_plan(&args.planfile)?;
    if args.json {
        crate::ui::out::write_stdout(&(PlanView::of(&saved.plan).to_json() + "\n"))?;
    } else {
        crate::ui::out::write_stdout(&crate::ui::plan::render(&saved.plan))?;
        if !saved.targets.is_empty() {
            crate::ui::out::write_stdout(&format!(
                "\nThe plan was made with -target {}.\n",
                saved.targets.join(" -target ")
            ))?;
        }
    }
    Ok(Outcome::Success)
}
