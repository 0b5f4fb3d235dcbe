//! `talosprov state encrypt`: switch the stored state to an age envelope, with
//! the keys from TALOSPROV_STATE_PASSPHRASE or the age key files. Encryption
//! never changes as a side effect of another command.

use anyhow::{Context, anyhow};
use clap::Args;

use super::state_options::{LockOptions, StateOptions, no_state, with_lock};
use super::{CommandError, Outcome};
use talosprov_state::Backend;
use talosprov_state::encrypt::{IDENTITY_FILE_VAR, PASSPHRASE_VAR, RECIPIENTS_FILE_VAR};

/// Arguments of `talosprov state encrypt`.
#[derive(Debug, Args)]
pub struct StateEncryptArgs {
    #[command(flatten)]
    state: StateOptions,

    #[command(flatten)]
    lock: LockOptions,
}

/// Rewrite the state encrypted (`true`) or in clear (`false`), under the lock.
/// Does nothing when it already is.
///
/// # Errors
/// No keys, no state, a wrong key, a lock conflict or a failed save.
pub async fn switch(
    options: &StateOptions,
    lock: &LockOptions,
    encrypted: bool,
) -> Result<Outcome, CommandError> {
    let store = options.open()?;
    if !store.has_keys() {
        return Err(anyhow!(
            "no state key: set {PASSPHRASE_VAR}, or {RECIPIENTS_FILE_VAR} and {IDENTITY_FILE_VAR}"
        )
        .into());
    }
    let operation = if encrypted {
        "state encrypt"
    } else {
        "state decrypt"
    };
    let changed = with_lock(&store, lock, operation, async |store| {
        let loaded = store.load().await?.ok_or_else(|| no_state(store))?;
        if loaded.encrypted == encrypted {
            return Ok(None);
        }
        let mut state = loaded.state;
        store
            .save(&mut state, encrypted)
            .await
            .context("cannot save the state")?;
        Ok(Some(state.serial))
    })
    .await?;
    let where_ = store.backend().describe();
    let line = match (changed, encrypted) {
        (None, true) => format!("The state in {where_} is already encrypted."),
        (None, false) => format!("The state in {where_} is already in clear."),
        (Some(serial), true) => format!("Encrypted the state in {where_} (serial {serial})."),
        (Some(serial), false) => format!("Decrypted the state in {where_} (serial {serial})."),
    };
    crate::ui::print_line(&line);
    Ok(Outcome::Success)
}

/// Encrypt the state.
///
/// # Errors
/// See [`switch`].
pub async fn run(args: StateEncryptArgs) -> Result<Outcome, CommandError> {
    switch(&args.state, &args.lock, true).await
}
