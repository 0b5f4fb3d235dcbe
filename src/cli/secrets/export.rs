//! `talosprov secrets export [-o FILE]`: the state's secrets bundle in talosctl's
//! secrets.yaml format, for talosctl or a backup. Written with mode 0600; printed only to a
//! pipe or file, never to a terminal unless `--force`.

use anyhow::{Context as _, anyhow};
use clap::Args;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use crate::cli::frontend::Console;
use crate::cli::state_options::StateOptions;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::secrets::export;

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

/// Write or print the bundle.
///
/// # Errors
/// A terminal on stdout without `-o` or `--force`; an existing file without
/// `--force`; the engine's: no state, no bundle in it.
pub async fn run(args: SecretsExportArgs) -> Result<Outcome, CommandError> {
    if args.output.is_none() && !args.force && std::io::stdout().is_terminal() {
        return Err(anyhow!(
            "refusing to print the secrets bundle on a terminal: use -o FILE, a pipe, or --force"
        )
        .into());
    }
    let secrets = export(&args.state.settings(), &Console::ui()).await?;
    match &args.output {
        Some(path) => {
            if path.exists() && !args.force {
                return Err(anyhow!(
                    "{} already exists (use --force to overwrite it)",
                    path.display()
                )
                .into());
            }
            talosprov_files::write_private(path, secrets.expose().as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            crate::ui::out::print_line(&format!(
                "Wrote the secrets bundle to {} (mode 0600).",
                path.display()
            ));
        }
        None => crate::ui::console::print_raw(secrets.expose())?,
    }
    Ok(Outcome::Success)
}
