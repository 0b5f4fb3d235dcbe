//! `talosprov destroy`: show the destroy plan, confirm, reset the Talos nodes
//! that answer (gracefully for control planes), then shut down and delete the
//! VMs, the pool and the PCI mappings. Images stay unless `--purge-images`.

use clap::Args;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::destroy::{DestroyRequest, Destroyed, destroy};

/// Arguments of `talosprov destroy`.
#[derive(Debug, Args)]
pub struct DestroyArgs {
    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,

    /// Destroy without asking for "yes".
    #[arg(long = "auto-approve")]
    pub auto_approve: bool,

    /// Delete the downloaded Talos images too.
    #[arg(long = "purge-images")]
    pub purge_images: bool,

    /// At most N deletions at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,

    /// Print the run as JSON lines on stdout, as `apply -json` does
    /// (format_version 1.0; see "Machine-readable output" in talosprov's
    /// README.md). Needs -auto-approve.
    #[arg(long)]
    pub json: bool,
}

/// Run `destroy`.
///
/// # Errors
/// `-json` without `-auto-approve`; the engine's: a held lock, no
/// confirmation, failed deletions, an interruption.
pub async fn run(args: DestroyArgs) -> Result<Outcome, CommandError> {
    if args.json {
        crate::ui::json::enable();
        crate::ui::json::version("destroy");
    }
    if args.json && !args.auto_approve {
        return Err(anyhow::anyhow!("-json cannot ask for confirmation: add -auto-approve").into());
    }
    let request = DestroyRequest {
        state: args.state.settings(),
        lock_timeout: args.lock.lock_timeout,
        auto_approve: args.auto_approve,
        purge_images: args.purge_images,
        parallelism: args.parallelism,
    };
    match destroy(&request, &Console::ui()).await? {
        Destroyed::NoState => crate::ui::out::write_stdout("No state: nothing to destroy.\n")?,
        Destroyed::Done(plan) if plan.is_empty() => {}
        Destroyed::Done(plan) => {
            let summary = format!(
                "Destroy complete! Resources: {} destroyed.",
                plan.summary().destroy
            );
            if crate::ui::json::enabled() {
                crate::ui::json::summary("destroy", &plan.summary(), &summary);
            } else {
                crate::ui::out::write_stdout(&format!("\n{summary}\n"))?;
            }
        }
    }
    Ok(Outcome::Success)
}
