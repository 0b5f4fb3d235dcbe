//! `talosprov state list`: every address recorded in the state, one a line.

use clap::Args;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::StateOptions;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::list;

/// Arguments of `talosprov state list`.
#[derive(Debug, Args)]
pub struct StateListArgs {
    #[command(flatten)]
    state: StateOptions,
}

/// Print every address in the state, one a line.
///
/// # Errors
/// No state, or one that cannot be read; stdout closed.
pub async fn run(args: StateListArgs) -> Result<Outcome, CommandError> {
    let addresses = list(&args.state.settings(), &Console::ui()).await?;
    let lines: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    crate::ui::console::print_lines(&lines)?;
    Ok(Outcome::Success)
}
