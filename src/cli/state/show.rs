//! `talosprov state show ADDR`: the attributes recorded at one address, as
//! JSON, with sensitive values shown as `(sensitive)`.

use clap::Args;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::StateOptions;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::show;
use talosprov_statefile::address::Address;

/// Arguments of `talosprov state show`.
#[derive(Debug, Args)]
pub struct StateShowArgs {
    /// The address, e.g. `vm/talos-worker-01` (see `talosprov state list`).
    address: Address,

    #[command(flatten)]
    state: StateOptions,
}

/// Print the attributes at the address, as JSON.
///
/// # Errors
/// No state, no resource at the address; stdout closed.
pub async fn run(args: StateShowArgs) -> Result<Outcome, CommandError> {
    let value = show(&args.state.settings(), &args.address, &Console::ui()).await?;
    let pretty = serde_json::to_string_pretty(&value)?;
    crate::ui::console::print_lines(&[format!("# {}", args.address), pretty])?;
    Ok(Outcome::Success)
}
