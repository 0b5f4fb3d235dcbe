//! `talosprov secrets export [-o FILE]`: the state's secrets bundle in talosctl's
//! secrets.yaml format, for talosctl or a backup. Written with mode 0600; printed only to a
//! pipe or file, never to a terminal unless `--force`.

use anyhow::{Context as _, anyhow};
use clap::Args;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use super::state_options::{StateOptions, no_state};
use super::{CommandError, Outcome};
use talosprov_state::Backend as _;

/// Arguments of `talosprov secrets export`.
#[derive(Debug, Args)]
pub struct SecretsExportArgs {
    /// Write the bundle to this file (mode 0600, written atomically) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Overwrite the output file if it exists; with no file, print even to a terminal.
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub state: StateOptions,
}

/// Read the bundle from the state (no lock: nothing is written to the state) and write it.
///
/// # Errors
/// No state, or no secrets in it; an existing output file without `--force`; stdout is a
/// terminal without `--force`; a failed write.
pub async fn run(args: SecretsExportArgs) -> Result<Outcome, CommandError> {
    if args.output.is_none() && !args.force && std::io::stdout().is_terminal() {
        return Err(anyhow!(
            "refusing to print the secrets bundle on a terminal: use -o FILE, a pipe, or --force"
        )
        .into());
    }
    let store = args.state.open()?;
    let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
    let secrets = loaded.state.secrets.ok_or_else(|| {
        anyhow!(
            "the state {} has no secrets bundle yet: `talosprov apply` creates one, \
             `talosprov secrets import FILE` brings an existing cluster's",
            store.backend().describe()
        )
    })?;
    match &args.output {
        Some(path) => {
            if path.exists() && !args.force {
                return Err(anyhow!(
                    "{} already exists (use --force to overwrite it)",
                    path.display()
                )
                .into());
            }
            talosprov_state::local::write_private_file(path, secrets.expose().as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::ui::print_line(&format!(
                "Wrote the secrets bundle to {} (mode 0600).",
                path.display()
            ));
        }
        None => crate::ui::console::print_raw(secrets.expose())?,
    }
    Ok(Outcome::Success)
}
