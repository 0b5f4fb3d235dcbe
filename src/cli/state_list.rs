//! `talosprov state list`: every address recorded in the state, one a line.

use clap::Args;

use super::state_options::{StateOptions, no_state};
use super::{CommandError, Outcome};

/// Arguments of `talosprov state list`.
#[derive(Debug, Args)]
pub struct StateListArgs {
    #[command(flatten)]
    state: StateOptions,
}

/// Print the addresses, sorted.
///
/// # Errors
/// No state, or the state cannot be read.
pub async fn run(args: StateListArgs) -> Result<Outcome, CommandError> {
    let store = args.state.open()?;
    let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
    let lines: Vec<String> = loaded
        .state
        .addresses()
        .iter()
        .map(ToString::to_string)
        .collect();
    crate::ui::console::print_lines(&lines)?;
    Ok(Outcome::Success)
}
