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
    crate::ui::print_line(&format!("talosprov {}", env!("CARGO_PKG_VERSION")));
    Ok(Outcome::Success)
}
