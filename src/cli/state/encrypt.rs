//! `talosprov state encrypt`: switch the stored state to an age envelope, with
//! the keys from TALOSPROV_STATE_PASSPHRASE or the age key files. Encryption
//! never changes as a side effect of another command.

use clap::Args;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::{LockOptions, StateOptions};
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::{Switched, set_encryption};

/// Arguments of `talosprov state encrypt`.
#[derive(Debug, Args)]
pub struct StateEncryptArgs {
    #[command(flatten)]
    state: StateOptions,

    #[command(flatten)]
    lock: LockOptions,
}

/// Store the state encrypted (`encrypted`) or in clear, and say what was
/// done.
///
/// # Errors
/// The engine's: no state key, no state, a held lock, the save.
pub async fn switch(
    options: &StateOptions,
    lock: &LockOptions,
    encrypted: bool,
) -> Result<Outcome, CommandError> {
    let Switched { location, serial } = set_encryption(
        &options.settings(),
        lock.lock_timeout,
        encrypted,
        &Console::ui(),
    )
    .await?;
    let line = match (serial, encrypted) {
        (None, true) => format!("The state in {location} is already encrypted."),
        (None, false) => format!("The state in {location} is already in clear."),
        (Some(serial), true) => format!("Encrypted the state in {location} (serial {serial})."),
        (Some(serial), false) => format!("Decrypted the state in {location} (serial {serial})."),
    };
    crate::ui::out::print_line(&line);
    Ok(Outcome::Success)
}

/// Encrypt the state.
///
/// # Errors
/// See [`switch`].
pub async fn run(args: StateEncryptArgs) -> Result<Outcome, CommandError> {
    switch(&args.state, &args.lock, true).await
}
