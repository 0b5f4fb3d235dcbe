//! `render NODE...`: each node's final machine config, exactly as apply sends
//! it. The secrets come from `--secrets`, else the state, else a throwaway
//! bundle made now (with a warning); the add-ons are the whole cluster's.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;

use talosprov_backend::backend::Backend as _;
use talosprov_base::diagnostics;
use talosprov_machine::node;
use talosprov_machine::node::{NodeConfig, node_configs_with};
use talosprov_machine::rotation::AcceptedCas;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_statefile::format::Rendering;
use talosprov_topology::model::Topology;

use super::addons::{self, Known};
use super::store::StateSettings;
use super::{CommandError, Ui};

/// `render`'s arguments, as parsed.
#[derive(Debug, Clone)]
pub struct RenderRequest {
    /// The hostnames to render, in the order asked (all nodes when empty).
    pub nodes: Vec<String>,
    /// `--secrets FILE`: a secrets bundle instead of the state's.
    pub secrets: Option<PathBuf>,
    /// Where the topology and the state are.
    pub state: StateSettings,
}

/// Give `found` to the frontend; [`CommandError::Reported`] when any is an
/// error.
fn report(found: &[talosprov_base::diagnostics::Diagnostic], ui: &Ui) -> Result<(), CommandError> {
    if !found.is_empty() {
        ui.diagnostics(found);
    }
    if diagnostics::has_errors(found) {
        Err(CommandError::Reported)
    } else {
        Ok(())
    }
}

/// The hostnames to render: those asked, in order and once each, or every
/// node.
///
/// # Errors
/// A name that is no node, with the closest one that is.
fn select(t: &Topology, asked: &[String]) -> anyhow::Result<Vec<String>> {
    if asked.is_empty() {
        return Ok(t.nodes.iter().map(|n| n.hostname.clone()).collect());
    }
    let mut out: Vec<String> = Vec::new();
    for name in asked {
        if t.node(name).is_none() {
            let close =
                diagnostics::did_you_mean(name, t.nodes.iter().map(|n| n.hostname.as_str()));
            anyhow::bail!(
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

/// The secrets bundle (with the CAs a rotation in progress renders), the CAs
/// accepted beside them, and the Helm renderings the state records.
///
/// # Errors
/// An unreadable or invalid bundle file or state bundle; a state that cannot
/// be read.
async fn secrets(
    request: &RenderRequest,
    ui: &Ui,
) -> anyhow::Result<(SecretsBundle, AcceptedCas, BTreeMap<String, Rendering>)> {
    if let Some(path) = &request.secrets {
        let text = talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, path)
            .with_context(|| format!("cannot read the secrets bundle {}", path.display()))?;
        let bundle = parse_secrets_yaml(&text)
            .with_context(|| format!("cannot use the secrets bundle {}", path.display()))?;
        return Ok((bundle, AcceptedCas::default(), BTreeMap::new()));
    }
    let store = request.state.open(ui)?;
    let location = store.backend().describe();
    let loaded = store
        .load()
        .await
        .with_context(|| format!("cannot read the secrets bundle from the state {location}"))?;
    let (secrets, renderings, rotation) = loaded.map_or((None, BTreeMap::new(), None), |l| {
        (l.state.secrets, l.state.renderings, l.state.ca_rotation)
    });
    if let Some(text) = secrets {
        let bundle = parse_secrets_yaml(text.expose())
            .with_context(|| format!("the secrets bundle in the state {location} is invalid"))?;
        // During a CA rotation, the configs as the stage in progress renders them.
        let (bundle, accepted) = talosprov_machine::rotation::effective(&bundle, rotation.as_ref());
        return Ok((bundle, accepted, renderings));
    }
    ui.warn(&format!(
        "no --secrets FILE and no secrets bundle in the state {location}: rendering with a \
         throwaway bundle generated now, so keys, tokens and certificates are not the cluster's \
         and change on every run"
    ));
    let bundle = SecretsBundle::generate(&mut rand::rngs::OsRng, time::OffsetDateTime::now_utc())?;
    Ok((bundle, AcceptedCas::default(), renderings))
}

/// The final machine config of each node asked for, in the order asked.
/// Warnings go to the frontend.
///
/// # Errors
/// Topology, patch and add-on problems ([`CommandError::Reported`]), an
/// unknown node, unusable secrets.
pub async fn render(request: &RenderRequest, ui: &Ui) -> Result<Vec<NodeConfig>, CommandError> {
    let loaded = talosprov_files::load_topology(&request.state.file)?;
    report(&loaded.diagnostics, ui)?;
    let Some(full) = loaded.topology else {
        return Err(CommandError::Reported);
    };
    let set = match talosprov_files::load_patches(&full) {
        Ok(set) => set,
        Err(d) => {
            report(&d, ui)?;
            return Err(CommandError::Reported);
        }
    };
    report(set.warnings(), ui)?;
    let selected = select(&full, &request.nodes)?;
    // Only the nodes asked for: another node's broken patch does not stop this one.
    let mut t = full.clone();
    t.nodes.retain(|n| selected.contains(&n.hostname));
    let (bundle, accepted, recorded) = secrets(request, ui).await?;
    // The add-ons are the whole cluster's: every control plane carries them.
    let known = Known {
        recorded: Some(&recorded),
        saved: None,
    };
    let rendered = addons::render(&full, &bundle, known, ui).await?;
    let inline = talosprov_addon::manifests::inline_manifests(&full, &rendered.addons);
    let configs = match node_configs_with(&t, &bundle, &accepted, &set, &inline) {
        Ok(c) => c,
        Err(d) => {
            report(&d, ui)?;
            return Err(CommandError::Reported);
        }
    };
    report(&node::warnings(&configs), ui)?;
    let mut by_host: BTreeMap<String, NodeConfig> = configs
        .into_iter()
        .map(|c| (c.hostname.clone(), c))
        .collect();
    Ok(selected.iter().filter_map(|h| by_host.remove(h)).collect())
}
