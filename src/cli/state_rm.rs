//! `talosprov state rm ADDR...`: forget resources without touching them, as
//! OpenTofu's `state rm` does. Asks for confirmation unless `-auto-approve`.

use anyhow::{Context, bail};
use clap::Args;

use super::state_options::{LockOptions, StateOptions, no_state, with_lock};
use super::{CommandError, Outcome};
use talosprov_state::Address;

/// Arguments of `talosprov state rm`.
#[derive(Debug, Args)]
pub struct StateRmArgs {
    /// The addresses to forget, e.g. `vm/talos-worker-01`.
    #[arg(required = true)]
    addresses: Vec<Address>,

    /// Do not ask for confirmation.
    #[arg(long = "auto-approve")]
    auto_approve: bool,

    #[command(flatten)]
    state: StateOptions,

    #[command(flatten)]
    lock: LockOptions,
}

/// Remove the addresses from the state and save it (serial + 1).
///
/// # Errors
/// No terminal and no `-auto-approve`, an address not in the state, a lock
/// conflict, or a failed save.
pub async fn run(args: StateRmArgs) -> Result<Outcome, CommandError> {
    if !args.auto_approve && !crate::ui::console::stdin_is_terminal() {
        return Err(anyhow::anyhow!(
            "state rm needs confirmation and there is no terminal to ask on: add -auto-approve"
        )
        .into());
    }
    let store = args.state.open()?;
    let removed = with_lock(&store, &args.lock, "state rm", async |store| {
        let loaded = store.load().await?.ok_or_else(|| no_state(store))?;
        let mut state = loaded.state;
        let missing: Vec<String> = args
            .addresses
            .iter()
            .filter(|a| state.show(a).is_none())
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            bail!("not in the state: {} (see `talosprov state list`)", missing.join(", "));
        }
        if !args.auto_approve {
            let list: Vec<String> = args.addresses.iter().map(|a| format!("  {a}")).collect();
            let question = format!(
                "talosprov will forget these resources; they keep running, untouched:\n{}\n\nDo you want to remove them from the state?",
                list.join("\n")
            );
            // On a blocking thread, so that Ctrl-C still reaches `with_lock`.
            let yes = tokio::task::spawn_blocking(move || crate::ui::console::confirm(&question))
                .await??;
            if !yes {
                bail!("state rm cancelled: nothing was removed");
            }
        }
        for a in &args.addresses {
            state.remove(a);
        }
        store
            .save(&mut state, loaded.encrypted)
            .await
            .context("cannot save the state")?;
        Ok(args.addresses.len())
    })
    .await?;
    let mut lines: Vec<String> = args
        .addresses
        .iter()
        .map(|a| format!("Removed {a}"))
        .collect();
    lines.push(format!(
        "Successfully removed {removed} resource instance(s)."
    ));
    crate::ui::console::print_lines(&lines)?;
    Ok(Outcome::Success)
}
