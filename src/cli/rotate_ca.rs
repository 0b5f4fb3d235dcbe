//! `talosprov rotate-ca --os | --kubernetes`: rotate the Talos API CA or the
//! Kubernetes CA in three stages (accept, swap, drop), each applied to every
//! node without a reboot and checked, the state recording the stage so that a
//! second run resumes an interrupted one.

use clap::Args;

use super::frontend::Console;
use super::state_options::{LockOptions, StateOptions};
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::rotate::{RotateRequest, rotate_ca};
use talosprov_statefile::rotation::Authority;

/// Arguments of `talosprov rotate-ca`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("authority").required(true).args(["os", "kubernetes"])))]
pub struct RotateCaArgs {
    /// Rotate the Talos API (OS) CA: apid's certificates and the talosconfig.
    #[arg(long)]
    pub os: bool,

    /// Rotate the Kubernetes CA: the API server, the kubelets and the kubeconfig.
    #[arg(long)]
    pub kubernetes: bool,

    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,

    /// Rotate without asking for "yes".
    #[arg(long = "auto-approve")]
    pub auto_approve: bool,

    /// At most N nodes re-configured at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,
}

/// Run `rotate-ca`.
///
/// # Errors
/// The engine's: no cluster, pending changes, a rotation of the other CA in
/// progress, no confirmation, a failed stage, an interruption.
pub async fn run(args: RotateCaArgs) -> Result<Outcome, CommandError> {
    let authority = if args.kubernetes {
        Authority::Kubernetes
    } else {
        Authority::Os
    };
    let request = RotateRequest {
        state: args.state.settings(),
        lock_timeout: args.lock.lock_timeout,
        authority,
        auto_approve: args.auto_approve,
        parallelism: args.parallelism,
    };
    let rotated = rotate_ca(&request, &Console::ui()).await?;
    let next = match rotated.authority {
        Authority::Os => {
            "the state's talosconfig now has a certificate from the new CA: write it out again \
             with `talosprov output talosconfig`"
        }
        Authority::Kubernetes => {
            "the state's kubeconfig now has a certificate from the new CA: write it out again \
             with `talosprov output kubeconfig`"
        }
    };
    crate::ui::out::write_stdout(&format!(
        "\nRotation complete! The {} is replaced; {next}.\n",
        rotated.authority.title()
    ))?;
    Ok(Outcome::Success)
}
