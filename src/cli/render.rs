//! `talosprov render NODE...`: print (or write) the final machine config of nodes, exactly as
//! apply sends it, with secret values shown as `(sensitive)` unless asked. The secrets come
//! from `--secrets`, else the state, else a throwaway bundle made now (with a warning).

use anyhow::Context as _;
use clap::Args;
use std::path::PathBuf;

use super::frontend::Console;
use super::state_options::StateOptions;
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::render::{RenderRequest, render};
use talosprov_machine::node::NodeConfig;

/// Arguments of `talosprov render` (its help text is on `Command::Render`).
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The nodes to render, by hostname; without any, every node.
    #[arg(value_name = "NODE")]
    pub nodes: Vec<String>,

    /// Write one file per node, `DIR/<hostname>.yaml` (mode 0600, written atomically),
    /// instead of printing. The files hold the exact config apply sends, secrets included.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,

    /// Print secret values (keys, tokens) instead of `(sensitive)`.
    #[arg(long)]
    pub show_sensitive: bool,

    /// The cluster's secrets bundle in talosctl's secrets.yaml format; by default the one in
    /// the state, else a throwaway bundle generated now.
    #[arg(long, value_name = "FILE")]
    pub secrets: Option<PathBuf>,

    #[command(flatten)]
    pub state: StateOptions,
}

/// Run `render`.
///
/// # Errors
/// The engine's: topology, patch and add-on problems (already shown), an
/// unknown node, unusable secrets; a file that cannot be written; stdout
/// closed.
pub async fn run(args: RenderArgs) -> Result<Outcome, CommandError> {
    let request = RenderRequest {
        nodes: args.nodes.clone(),
        secrets: args.secrets.clone(),
        state: args.state.settings(),
    };
    let configs = render(&request, &Console::ui()).await?;
    let ordered: Vec<&NodeConfig> = configs.iter().collect();
    match &args.out_dir {
        Some(dir) => write_files(dir, &ordered)?,
        None => print(&ordered, args.show_sensitive)?,
    }
    Ok(Outcome::Success)
}

fn print(configs: &[&NodeConfig], show_sensitive: bool) -> anyhow::Result<()> {
    let text = |c: &NodeConfig| {
        if show_sensitive {
            c.yaml.expose().clone()
        } else {
            c.redacted_yaml.clone()
        }
    };
    let out = match configs {
        [one] => text(one),
        many => many
            .iter()
            .map(|c| format!("# {} ({}, {})\n{}", c.hostname, c.role, c.ip, text(c)))
            .collect::<Vec<_>>()
            .join("---\n"),
    };
    crate::ui::out::write_stdout(&out)?;
    Ok(())
}

fn write_files(dir: &std::path::Path, configs: &[&NodeConfig]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    for c in configs {
        let path = dir.join(format!("{}.yaml", c.hostname));
        talosprov_files::write_private(&path, c.yaml.expose().as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        crate::ui::out::print_line(&format!(
            "wrote {} (mode 0600, sha256 {})",
            path.display(),
            c.sha256
        ));
    }
    Ok(())
}
