//! `talosprov version`: the binary's version and the Talos config contracts it
//! generates machine configs for.

use clap::Args;

use super::{CommandError, Outcome};

/// Arguments of `talosprov version` (none).
#[derive(Debug, Args)]
pub struct VersionArgs {}

/// Print the version.
///
/// # Errors
/// Only when stdout is closed.
pub fn run(_args: VersionArgs) -> Result<Outcome, CommandError> {
    use crate::machine::version::Contract;
    crate::ui::print_line(&format!("talosprov {}", env!("CARGO_PKG_VERSION")));
    crate::ui::print_line(&format!(
        "machine config contracts: {}, {} (default {}); other Talos releases get the nearest one, with a warning",
        Contract::V1_12,
        Contract::V1_13,
        Contract::DEFAULT
    ));
    Ok(Outcome::Success)
}
