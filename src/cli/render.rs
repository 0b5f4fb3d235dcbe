//! `talosprov render NODE...`: print (or write) the final machine config of nodes, exactly as
//! apply sends it, with secret values shown as `(sensitive)` unless asked. The secrets come
//! from `--secrets`, else the state, else a throwaway bundle made now (with a warning).

use anyhow::{Context as _, bail};
use clap::Args;
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::state_options::StateOptions;
use super::{CommandError, Outcome};
use talosprov_core::diagnostics;
use talosprov_core::machine::{NodeConfig, SecretsBundle, node, node_configs, parse_secrets_yaml};
use talosprov_core::topology::{self, Topology};
use talosprov_state::Backend as _;
use talosprov_state::format::Rendering;

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

/// Print the diagnostics, and stop with exit 1 when one is an error.
fn report(found: &[topology::Diagnostic]) -> Result<(), CommandError> {
    crate::ui::write_stderr(&crate::ui::diagnostics::render_all(
        found,
        crate::ui::diagnostics::stderr_colour(),
    ));
    if diagnostics::has_errors(found) {
        Err(CommandError::Reported)
    } else {
        Ok(())
    }
}

/// The hostnames asked for, checked against the topology; every node when none is given.
fn select(t: &Topology, asked: &[String]) -> anyhow::Result<Vec<String>> {
    if asked.is_empty() {
        return Ok(t.nodes.iter().map(|n| n.hostname.clone()).collect());
    }
    let mut out: Vec<String> = Vec::new();
    for name in asked {
        if t.node(name).is_none() {
            let close = talosprov_core::diagnostics::did_you_mean(
                name,
                t.nodes.iter().map(|n| n.hostname.as_str()),
            );
            bail!(
                "there is no node {name:?} in {}{close} (nodes: {})",
                t.file.display(),
                t.nodes
                    .iter()
                    .map(|n| n.hostname.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !out.contains(name) {
            out.push(name.clone());
        }
    }
    Ok(out)
}

/// The secrets bundle: `--secrets`, else the state's, else a throwaway one (with a warning);
/// and the state's Helm renderings when the state was read (so that `render` shows the
/// manifests apply applied, not a new rendering).
async fn secrets(
    args: &RenderArgs,
) -> anyhow::Result<(SecretsBundle, BTreeMap<String, Rendering>)> {
    if let Some(path) = &args.secrets {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the secrets bundle {}", path.display()))?;
        let bundle = parse_secrets_yaml(&text)
            .with_context(|| format!("cannot use the secrets bundle {}", path.display()))?;
        return Ok((bundle, BTreeMap::new()));
    }
    let store = args.state.open()?;
    let location = store.backend().describe();
    let loaded = store
        .load()
        .await
        .with_context(|| format!("cannot read the secrets bundle from the state {location}"))?;
    let (secrets, renderings) = loaded.map_or((None, BTreeMap::new()), |l| {
        (l.state.secrets, l.state.renderings)
    });
    if let Some(text) = secrets {
        let bundle = parse_secrets_yaml(text.expose())
            .with_context(|| format!("the secrets bundle in the state {location} is invalid"))?;
        return Ok((bundle, renderings));
    }
    crate::ui::warn(&format!(
        "no --secrets FILE and no secrets bundle in the state {location}: rendering with a \
         throwaway bundle generated now, so keys, tokens and certificates are not the cluster's \
         and change on every run"
    ));
    let bundle = SecretsBundle::generate(&mut rand::rngs::OsRng, time::OffsetDateTime::now_utc())?;
    Ok((bundle, renderings))
}

/// Render the nodes' configs and print them, or write them to `--out-dir`.
///
/// # Errors
/// Diagnostics (printed, exit 1) for the topology, the patches or a config Talos would
/// refuse; an unknown node; an unreadable secrets bundle or state; a failed write.
pub async fn run(args: RenderArgs) -> Result<Outcome, CommandError> {
    let loaded = talosprov_files::load_topology(&args.state.file)?;
    report(&loaded.diagnostics)?;
    let Some(full) = loaded.topology else {
        return Err(CommandError::Reported);
    };
    let set = match talosprov_files::load_patches(&full) {
        Ok(set) => set,
        Err(d) => {
            report(&d)?;
            return Err(CommandError::Reported);
        }
    };
    report(set.warnings())?;
    let selected = select(&full, &args.nodes)?;
    // Only the nodes asked for: another node's broken patch does not stop this one.
    let mut t = full.clone();
    t.nodes.retain(|n| selected.contains(&n.hostname));
    let (bundle, recorded) = secrets(&args).await?;
    // The add-ons are the whole cluster's: every control plane carries them.
    let known = super::addons::Known {
        recorded: Some(&recorded),
        saved: None,
    };
    let rendered = super::addons::render(&full, &bundle, known).await?;
    let inline = talosprov_core::addon::inline_manifests(&full, &rendered.addons);
    let configs = match node_configs(&t, &bundle, &set, &inline) {
        Ok(c) => c,
        Err(d) => {
            report(&d)?;
            return Err(CommandError::Reported);
        }
    };
    report(&node::warnings(&configs))?;
    let ordered: Vec<&NodeConfig> = selected
        .iter()
        .filter_map(|h| configs.iter().find(|c| &c.hostname == h))
        .collect();
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
    crate::ui::write_stdout(&out)?;
    Ok(())
}

fn write_files(dir: &std::path::Path, configs: &[&NodeConfig]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    for c in configs {
        let path = dir.join(format!("{}.yaml", c.hostname));
        talosprov_state::local::write_private_file(&path, c.yaml.expose().as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        crate::ui::print_line(&format!(
            "wrote {} (mode 0600, sha256 {})",
            path.display(),
            c.sha256
        ));
    }
    Ok(())
}
