//! `talosprov health`: the `talosctl health` checks that apply to the cluster, with
//! the node list from the topology and the talosconfig from the state (read only).
//! Prints each check by name; exits 1 naming the failing checks.

use std::time::Duration;

use anyhow::anyhow;
use clap::Args;

use super::frontend::Console;
use super::state_options::StateOptions;
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::health::prepare;

/// Arguments of `talosprov health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Keep checking until every check passes or this long has passed, in
    /// seconds or as a duration such as `5m` or `1h30m` (0: check once).
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = talosprov_base::duration::parse)]
    wait: Duration,

    #[command(flatten)]
    state: StateOptions,
}

/// Run the checks and print them.
///
/// # Errors
/// A topology with errors, no state or no talosconfig in it, or a failing check.
pub async fn run(args: HealthArgs) -> Result<Outcome, CommandError> {
    let run = prepare(&args.state.settings(), &Console::ui()).await?;
    let count = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    crate::ui::out::print_line(&format!(
        "Checking cluster {} ({}, {}, Talos {}):",
        run.cluster,
        count(run.control_planes, "control plane"),
        count(run.workers, "worker"),
        run.talos_version
    ));
    let report = run.check(args.wait).await;
    crate::ui::console::print_lines(&report.render())?;
    let failing = report.failing().count();
    if failing > 0 {
        let waited = if args.wait.is_zero() {
            String::new()
        } else {
            format!(" after waiting {}", talosprov_retry::seconds(args.wait))
        };
        return Err(anyhow!(
            "the cluster is not healthy{waited}: {failing} of {} checks failed: {}",
            report.checks.len(),
            report.failing_names()
        )
        .into());
    }
    crate::ui::out::print_line("The cluster is healthy.");
    Ok(Outcome::Success)
}
