//! `talosprov destroy`: show the destroy plan, confirm, reset the Talos nodes
//! that answer (gracefully for control planes), then shut down and delete the
//! VMs, the pool and the PCI mappings. Images stay unless `--purge-images`.

use clap::Args;

use super::apply::{context, interrupt_grace, run_plan};
use super::cluster;
use super::cluster::approve;
use super::state_options::{LockOptions, StateOptions};
use super::{CommandError, Outcome};
use talosprov_core::plan::{Desired, Observed, destroy_plan};
use talosprov_state::Sensitive;

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
/// A held lock, no confirmation, failed deletions; Ctrl-C.
pub async fn run(args: DestroyArgs) -> Result<Outcome, CommandError> {
    if args.json {
        crate::ui::json::enable();
        crate::ui::json::version("destroy");
    }
    if args.parallelism == 0 {
        return Err(anyhow::anyhow!("-parallelism must be at least 1").into());
    }
    if args.json && !args.auto_approve {
        return Err(anyhow::anyhow!("-json cannot ask for confirmation: add -auto-approve").into());
    }
    let interrupt_grace = interrupt_grace()?;
    let topology = cluster::load_topology(&args.state.file)?;
    cluster::locked(&args.state, &args.lock, "destroy", async |store, cancel| {
        let Some(loaded) = store.load().await? else {
            crate::ui::write_stdout("No state: nothing to destroy.\n")?;
            return Ok(Outcome::Success);
        };
        let (mut state, encrypted) = (loaded.state, loaded.encrypted);
        let plan = destroy_plan(Some(&state), &Observed::default(), args.purge_images);
        if crate::ui::json::enabled() {
            crate::ui::json::plan(&plan);
        } else {
            crate::ui::write_stdout(&crate::ui::plan::render(&plan))?;
        }
        if plan.is_empty() {
            return Ok(Outcome::Success);
        }
        approve(
            args.auto_approve,
            "Do you really want to destroy all resources?\n  talosprov will destroy all the resources described above. There is no undo.",
            "-auto-approve",
            cancel.clone(),
        )
        .await?;
        let ctx = context(
            &topology,
            &state,
            Desired::default(),
            Sensitive::default(),
            interrupt_grace,
        )?;
        run_plan(ctx, &plan, store, encrypted, &mut state, args.parallelism, cancel).await?;
        let summary = format!(
            "Destroy complete! Resources: {} destroyed.",
            plan.summary().destroy
        );
        if crate::ui::json::enabled() {
            crate::ui::json::summary("destroy", &plan.summary(), &summary);
        } else {
            crate::ui::write_stdout(&format!("\n{summary}\n"))?;
        }
        Ok(Outcome::Success)
    })
    .await
}
