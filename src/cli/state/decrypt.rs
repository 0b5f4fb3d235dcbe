//! `talosprov state decrypt`: store the state in clear again (the keys are
//! needed to read it). An explicit switch, like `state encrypt`.

use clap::Args;

use super::encrypt::switch;
use crate::cli::error::Outcome;
use crate::cli::state_options::{LockOptions, StateOptions};
use talosprov_engine::command::CommandError;

/// Arguments of `talosprov state decrypt`.
#[derive(Debug, Args)]
pub struct StateDecryptArgs {
    #[command(flatten)]
    state: StateOptions,

    #[command(flatten)]
    lock: LockOptions,
}

/// Decrypt the state.
///
/// # Errors
/// See [`switch`].
pub async fn run(args: StateDecryptArgs) -> Result<Outcome, CommandError> {
    switch(&args.state, &args.lock, false).await
}
