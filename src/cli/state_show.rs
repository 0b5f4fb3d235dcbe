//! `talosprov state show ADDR`: the attributes recorded at one address, as
//! JSON, with sensitive values shown as `(sensitive)`.

use clap::Args;

use super::state_options::{StateOptions, no_state};
use super::{CommandError, Outcome};
use talosprov_state::Address;

/// Arguments of `talosprov state show`.
#[derive(Debug, Args)]
pub struct StateShowArgs {
    /// The address, e.g. `vm/talos-worker-01` (see `talosprov state list`).
    address: Address,

    #[command(flatten)]
    state: StateOptions,
}

/// Print `# ADDR` and the recorded attributes.
///
/// # Errors
/// No state, or nothing recorded at the address.
pub async fn run(args: StateShowArgs) -> Result<Outcome, CommandError> {
    let store = args.state.open()?;
    let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
    let value = loaded.state.show(&args.address).ok_or_else(|| {
        anyhow::anyhow!(
            "no resource at {} in the state (see `talosprov state list`)",
            args.address
        )
    })?;
    let pretty = serde_json::to_string_pretty(&value)?;
    crate::ui::console::print_lines(&[format!("# {}", args.address), pretty])?;
    Ok(Outcome::Success)
}
