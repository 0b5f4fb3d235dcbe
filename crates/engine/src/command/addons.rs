//! The add-ons' objects at the edge, for `plan`, `apply` and `render`:
//! `manifests` from the disk, `url` files downloaded and checked, `helm`
//! charts rendered with `helm template` unless a rendering of the same inputs
//! is already recorded (in the state, or in the saved plan being applied).

use std::collections::BTreeMap;

use super::{CommandError, Ui};
use talosprov_addon::manifests::RenderedAddon;
use talosprov_addon::{helm, manifests};
use talosprov_base::diagnostics::{Code, Diagnostic};
use talosprov_base::load::Budget;
use talosprov_base::preset::spec::ClusterFacts;
use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_plan::model::AddonValues;
use talosprov_statefile::format::Rendering;
use talosprov_topology::model::{Addon, AddonSource, Topology};

/// Renderings already made: the state's, and a saved plan's. One whose
/// digest is the digest of the inputs now is used as it is, so a plan does
/// not render anew (charts such as Cilium's generate certificates at every
/// render), and applying a saved plan needs no `helm`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Known<'a> {
    /// The state's renderings.
    pub recorded: Option<&'a BTreeMap<String, Rendering>>,
    /// The saved plan's renderings.
    pub saved: Option<&'a BTreeMap<String, Rendering>>,
}

impl Known<'_> {
    /// The recorded or saved rendering of `name` made from `digest`.
    fn get(&self, name: &str, digest: &str) -> Option<&Rendering> {
        [self.recorded, self.saved]
            .into_iter()
            .flatten()
            .filter_map(|m| m.get(name))
            .find(|r| r.digest == digest)
    }
}

/// What rendering the add-ons gave.
#[derive(Debug, Default)]
pub struct Rendered {
    /// The objects of every add-on this build renders, in the topology's order.
    pub addons: Vec<RenderedAddon>,
    /// Every Helm add-on's rendering, by name: what the state records.
    pub renderings: BTreeMap<String, Rendering>,
    /// Every Helm add-on's effective values, redacted, for the plan.
    pub values: Vec<AddonValues>,
}

/// Render every add-on of `topology` this build renders. `secrets` renders
/// the first control plane's config, whose CNI and kube-proxy settings the
/// presets' values depend on. Says which add-ons are validated only.
///
/// # Errors
/// Every problem at once, given to the frontend ([`CommandError::Reported`]): a manifest
/// that cannot be read or is not an object, a download that fails or does
/// not match its digest (`A004`), no `helm` program (`A011`), a chart that
/// does not render.
pub async fn render(
    topology: &Topology,
    secrets: &SecretsBundle,
    known: Known<'_>,
    ui: &Ui,
) -> Result<Rendered, CommandError> {
    let limits = super::source_limits()?;
    let (mut addons, mut problems) = talosprov_files::render_addons(topology);
    let (downloaded, more) = downloads(topology, limits).await?;
    addons.extend(downloaded);
    problems.extend(more);
    let mut renderings = BTreeMap::new();
    let mut values = Vec::new();
    let charts: Vec<&Addon> = topology
        .addons
        .values()
        .filter(|a| matches!(a.source, AddonSource::Helm { .. }))
        .collect();
    if !charts.is_empty() {
        let facts = preset_facts(topology, secrets);
        for addon in charts {
            match chart(topology, addon, facts.as_ref(), known, limits).await {
                Ok(Some(Chart {
                    rendering,
                    text,
                    shown,
                })) => {
                    values.push(shown);
                    let label = format!("helm template {}", addon.name);
                    let (r, p) =
                        manifests::render_text(topology, addon, &label, &text, Budget::HELM_OUTPUT);
                    addons.extend(r);
                    problems.extend(p);
                    renderings.insert(addon.name.clone(), rendering);
                }
                Ok(None) => {}
                Err(d) => problems.push(d),
            }
        }
    }
    addons.sort_by_key(|r| topology.addons.get_index_of(&r.name));
    if talosprov_base::diagnostics::has_errors(&problems) {
        ui.diagnostics(&problems);
        return Err(CommandError::Reported);
    }
    Ok(Rendered {
        addons,
        renderings,
        values,
    })
}

/// The `url` add-ons' objects, downloaded all at once.
async fn downloads(
    topology: &Topology,
    limits: talosprov_sources::limits::SourceLimits,
) -> Result<(Vec<RenderedAddon>, Vec<Diagnostic>), CommandError> {
    let list: Vec<(&Addon, &str, &str)> = topology
        .addons
        .values()
        .filter_map(|a| match &a.source {
            AddonSource::Url { url, sha256 } => Some((a, url.as_str(), sha256.as_str())),
            AddonSource::Helm { .. } | AddonSource::Manifests(_) => None,
        })
        .collect();
    let mut rendered = Vec::new();
    let mut problems = Vec::new();
    if list.is_empty() {
        return Ok((rendered, problems));
    }
    let fetcher = talosprov_sources::fetch::Fetcher::new(limits)?;
    let fetched = futures::future::join_all(
        list.iter()
            .map(|(_, url, sha256)| fetcher.manifest(url, sha256)),
    )
    .await;
    for ((addon, url, _), result) in list.iter().zip(fetched) {
        match result {
            Ok(text) => {
                let (r, p) = manifests::render_text(topology, addon, url, &text, Budget::DOWNLOAD);
                rendered.extend(r);
                problems.extend(p);
            }
            Err(e) => {
                let code = match e {
                    talosprov_sources::fetch::FetchError::Mismatch { .. } => Code::AddonChecksum,
                    talosprov_sources::fetch::FetchError::Client(_)
                    | talosprov_sources::fetch::FetchError::Transport { .. }
                    | talosprov_sources::fetch::FetchError::Status { .. }
                    | talosprov_sources::fetch::FetchError::TooSlow { .. }
                    | talosprov_sources::fetch::FetchError::Deadline { .. } => {
                        Code::AddonSourceFailed
                    }
                    talosprov_sources::fetch::FetchError::TooLarge { .. }
                    | talosprov_sources::fetch::FetchError::NotUtf8 { .. } => {
                        Code::InvalidAddonManifest
                    }
                };
                let msg = format!("add-on `{}`: {e}", addon.name);
                problems.push(manifests::at(topology, addon, code, msg));
            }
        }
    }
    Ok((rendered, problems))
}

/// One Helm add-on's rendering.
struct Chart {
    /// What the state records.
    rendering: Rendering,
    /// The manifests.
    text: String,
    /// The effective values, redacted, for the plan.
    shown: AddonValues,
}

/// One Helm add-on's rendering and text: the known one for the same inputs,
/// else a new `helm template`. `Ok(None)` when the presets' facts are not
/// known (the configs do not render, which rendering them reports).
async fn chart(
    topology: &Topology,
    addon: &Addon,
    facts: Option<&ClusterFacts>,
    known: Known<'_>,
    limits: talosprov_sources::limits::SourceLimits,
) -> Result<Option<Chart>, Diagnostic> {
    let kubernetes = manifests::kubernetes_version(topology);
    let Some(args) = helm::template_args(addon, &kubernetes) else {
        return Ok(None);
    };
    let facts = match (facts, addon.preset) {
        (Some(f), _) => f.clone(),
        (None, Some(_)) => return Ok(None),
        (None, None) => ClusterFacts {
            cni: String::new(),
            kube_proxy_disabled: false,
            kubernetes_version: kubernetes.clone(),
        },
    };
    let files = values_files(topology, addon)?;
    let values = talosprov_addon::values::effective_values(addon, &facts, &files);
    let digest = helm::inputs_digest(&args, &values);
    let shown = |rendered: bool| AddonValues {
        name: addon.name.clone(),
        chart: match &addon.source {
            AddonSource::Helm { chart, version, .. } if !chart.is_empty() => {
                format!("{chart} {version}")
            }
            AddonSource::Helm { repo, version, .. } => format!("{repo} {version}"),
            AddonSource::Manifests(_) | AddonSource::Url { .. } => String::new(),
        },
        rendered,
        values: talosprov_addon::values::redact_values(&values),
    };
    if let Some(r) = known.get(&addon.name, &digest) {
        return Ok(Some(Chart {
            rendering: r.clone(),
            text: r.manifests.expose().clone(),
            shown: shown(false),
        }));
    }
    let fail = |msg: String| manifests::at(topology, addon, Code::HelmNotFound, msg);
    let program = talosprov_sources::helm::find_helm(
        std::env::var(talosprov_sources::helm::HELM_ENV)
            .ok()
            .as_deref(),
        std::env::var("PATH").ok().as_deref(),
    )
    .map_err(|e| fail(format!("add-on `{}` is a Helm chart: {e}", addon.name)))?;
    let yaml = serde_yaml_ng::to_string(&values).unwrap_or_default();
    let text = talosprov_sources::helm::template(&program, &args, &yaml, limits.deadline)
        .await
        .map_err(|e| {
            let code = match e {
                talosprov_sources::helm::HelmError::NotFound { .. } => Code::HelmNotFound,
                talosprov_sources::helm::HelmError::Io { .. }
                | talosprov_sources::helm::HelmError::Failed { .. }
                | talosprov_sources::helm::HelmError::Timeout { .. } => Code::AddonSourceFailed,
                talosprov_sources::helm::HelmError::TooLarge { .. }
                | talosprov_sources::helm::HelmError::NotUtf8 { .. } => Code::InvalidAddonManifest,
            };
            manifests::at(
                topology,
                addon,
                code,
                format!("add-on `{}`: {e}", addon.name),
            )
        })?;
    let rendering = Rendering {
        digest,
        manifests: Sensitive::new(text.clone()),
    };
    Ok(Some(Chart {
        rendering,
        text,
        shown: shown(true),
    }))
}

/// The add-on's `values_files`, read and parsed through the bounded loader
/// ([`helm::values_files`]), in order: the first problem when one is not
/// usable (the same problems `validate` reports, all of them).
fn values_files(topology: &Topology, addon: &Addon) -> Result<Vec<serde_json::Value>, Diagnostic> {
    let (values, problems) = helm::values_files(topology, addon, &talosprov_files::Disk);
    match problems.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(values),
    }
}

/// The facts the presets' values depend on, from the first control plane's
/// config rendered without add-ons (add-ons never change its CNI or
/// kube-proxy); `None` when it does not render.
fn preset_facts(topology: &Topology, secrets: &SecretsBundle) -> Option<ClusterFacts> {
    let patches = talosprov_files::load_patches(topology).ok()?;
    let mut first = topology.clone();
    let cp = topology
        .nodes
        .iter()
        .find(|n| n.role == Role::Controlplane)?;
    first.nodes = vec![cp.clone()];
    let configs = talosprov_machine::node::node_configs(&first, secrets, &patches, &[]).ok()?;
    talosprov_addon::facts::cluster_facts(&configs)
}
