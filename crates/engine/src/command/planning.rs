//! Making a plan, for `plan` and `apply`: secrets (the state's, a
//! saved plan's, or new ones), rendered configs, refresh, then the pure
//! planning, `-target` and the refusals (a disk shrink).

use anyhow::Context as _;

use super::prepare as cluster;
use super::{CommandError, Ui, addons};
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_plan as plan;
use talosprov_plan::diff::PlanInput;
use talosprov_plan::kind::resource::EtcdRecovery;
use talosprov_plan::saved::SavedPlan;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;
use talosprov_topology::model::Topology;

use crate::apply::session::Planned;

/// How a plan is made, beside its inputs.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    /// Plan from the state alone (`-refresh=false`).
    pub offline: bool,
    /// `-target`s: only these and what they depend on.
    pub targets: &'a [Address],
    /// Config changes on running nodes are sent in staged mode (`--staged`).
    pub staged: bool,
    /// Warn that targeting is in effect, as OpenTofu does for `-target`; off when
    /// the targets are a command's own (`rotate-ca` targets every node's config).
    pub warn_targets: bool,
    /// What to plan when etcd is gone on every control plane.
    pub etcd: EtcdRecovery,
}

/// Make the plan.
///
/// `saved`: the saved plan being applied, whose secrets are used when the
/// state has none (new ones are generated when neither has any), and whose
/// Helm renderings are used when their inputs are unchanged.
///
/// # Errors
/// Rendering diagnostics (given to the frontend), Proxmox errors during
/// refresh, and the plan's refusals.
pub async fn make_plan(
    topology: &Topology,
    state: Option<&State>,
    saved: Option<&SavedPlan>,
    request: &PlanRequest<'_>,
    ui: &Ui,
) -> Result<Planned, CommandError> {
    let PlanRequest {
        offline,
        targets,
        staged,
        warn_targets,
        etcd,
    } = *request;
    if state.is_some_and(|s| s.secrets.is_none() && s.has_applied()) {
        // Callers refuse this first, naming the state; never generate here.
        return Err(anyhow::anyhow!(
            "the state has no secrets bundle but records applied resources: import the \
             cluster's secrets with `talosprov secrets import`"
        )
        .into());
    }
    let reloaded = placed(topology, state, offline, ui).await?;
    let topology = reloaded.as_ref().unwrap_or(topology);
    // Secrets made for this plan (no state has any yet): the configs, and so
    // their digests, are known only once apply keeps the secrets.
    let (bundle, generated, fresh_secrets) = plan_secrets(state, saved)?;
    let known = addons::Known {
        recorded: state.map(|s| &s.renderings),
        saved: saved.map(|s| &s.renderings),
    };
    let rendered = addons::render(topology, &bundle, known, ui).await?;
    let (configs, inputs) = cluster::render_configs(
        topology,
        &bundle,
        state.and_then(|s| s.ca_rotation.as_ref()),
        &rendered.addons,
        ui,
    )?;
    let mut observed = cluster::observe(topology, state, &bundle, &configs, offline, ui).await?;
    let shared = cluster::storage_shared(&observed, state);
    let mut desired = plan::desired::desired(topology, &configs, shared).map_err(|errors| {
        anyhow::anyhow!(
            "{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })?;
    desired.objects = talosprov_addon::delivery::desired_objects(topology, &rendered.addons);
    if !offline {
        match observe_objects(topology, state, &bundle, &desired).await {
            Ok(o) => observed.kubernetes = o,
            Err(why) => observed.kubernetes_unread = Some(why),
        }
    }
    // A saved plan is made again at its own time, so that it renews what it showed.
    let renewal = match saved.and_then(|s| s.renewal) {
        Some(r) => r,
        None => super::renewal()?,
    };
    let mut p = plan::diff::plan(PlanInput {
        desired: &desired,
        state,
        observed: &observed,
        renewal,
        etcd,
    })
    .map_err(|errors| {
        anyhow::anyhow!(
            "the plan has changes talosprov refuses to make:\n  {}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  ")
        )
    })?;
    p.addons = rendered.values;
    p.pools = plan::model::pool_changes(state, &topology.pools);
    plan::order::target(&mut p, targets, &desired);
    if !offline {
        // Before anything is changed: the token holds what the changes need.
        let client = cluster::proxmox_client_again(topology)?;
        super::privileges::check(&client, &p, topology, state).await?;
    }
    if warn_targets {
        warn_targeting(targets, &desired, state, ui);
    }
    if staged {
        plan::staged::stage_config_changes(&mut p);
    }
    if fresh_secrets {
        plan::diff::digests_known_after_apply(&mut p);
    }
    Ok(Planned {
        plan: p,
        desired,
        secrets: bundle,
        generated,
        observed,
        inputs,
        renderings: rendered.renderings,
        renewal,
        pools: topology
            .pools
            .iter()
            .map(|p| (p.name.clone(), p.members.clone()))
            .collect(),
    })
}

/// The topology read again for its pools, when it has any: the members the
/// state records keep their place, and (online) new ones go where their memory
/// and disk fit, as the hosts report them. `None`: the topology as loaded.
///
/// # Errors
/// A member that moved (`O005`) or fits nowhere (`O006`), reported.
async fn placed(
    topology: &Topology,
    state: Option<&State>,
    offline: bool,
    ui: &Ui,
) -> Result<Option<Topology>, CommandError> {
    if topology.pools.is_empty() {
        return Ok(None);
    }
    let recorded = state.map(|s| s.pools.clone()).unwrap_or_default();
    let capacity = if offline {
        Default::default()
    } else {
        cluster::host_capacity(topology).await?
    };
    if recorded.is_empty() && capacity.is_empty() {
        return Ok(None);
    }
    cluster::load_topology_placed(&topology.file, recorded, capacity, ui).map(Some)
}

/// The secrets a plan renders with: the state's, else the saved plan's, else new ones
/// (given with their text, to record before the first change); and whether the state had
/// none.
///
/// # Errors
/// A bundle that does not parse, or new secrets that cannot be made.
fn plan_secrets(
    state: Option<&State>,
    saved: Option<&SavedPlan>,
) -> anyhow::Result<(
    talosprov_machine::secrets::SecretsBundle,
    Option<talosprov_base::sensitive::Sensitive>,
    bool,
)> {
    let recorded = cluster::state_secrets_opt(state)?;
    let fresh = recorded.is_none();
    let (bundle, generated) = match (recorded, saved.and_then(|s| s.secrets.as_ref())) {
        (Some(b), _) => (b, None),
        (None, Some(text)) => (
            parse_secrets_yaml(text.expose()).context("the saved plan's secrets are invalid")?,
            None,
        ),
        (None, None) => {
            let (b, text) = cluster::generate_secrets()?;
            (b, Some(text))
        }
    };
    Ok((bundle, generated, fresh))
}

/// With `-target`, warn as OpenTofu does that resource targeting is in
/// effect (the plan may be incomplete), and name each target that matches no
/// resource in the topology or the state, with the closest address that does.
fn warn_targeting(
    targets: &[Address],
    desired: &plan::desired::Desired,
    state: Option<&State>,
    ui: &Ui,
) {
    if targets.is_empty() {
        return;
    }
    let named: Vec<String> = targets.iter().map(|t| format!("-target {t}")).collect();
    ui.warn(&format!(
        "Resource targeting is in effect: the plan covers only {} and what {} on, \
         so it may be incomplete and not show every change the topology asks for. -target is \
         for exceptional situations, such as recovering from an error; plan without it to see \
         every pending change.",
        named.join(", "),
        if targets.len() == 1 {
            "it depends"
        } else {
            "they depend"
        },
    ));
    let unmatched = plan::order::unmatched_targets(targets, desired, state);
    if unmatched.is_empty() {
        return;
    }
    let mut known: Vec<String> = desired
        .addresses()
        .iter()
        .map(ToString::to_string)
        .collect();
    known.extend(
        state
            .map(State::addresses)
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string),
    );
    for t in unmatched {
        ui.warn(&format!(
            "-target {t} matches no resource in the topology or the state: nothing is planned \
             for it{}",
            talosprov_base::diagnostics::did_you_mean(
                &t.to_string(),
                known.iter().map(String::as_str)
            )
        ));
    }
}

/// How long refresh waits for the Kubernetes API before planning the
/// add-ons' objects from the state alone.
const KUBE_REFRESH: std::time::Duration = std::time::Duration::from_secs(30);

/// The add-ons' objects as the cluster's Kubernetes API shows them, when
/// there is a cluster (bootstrapped, with a kubeconfig) and objects to show;
/// `None` otherwise (the plan then compares them with the state's
/// inventory).
///
/// # Errors
/// Why the API could not be read: the plan shows the objects as unknown.
async fn observe_objects(
    topology: &Topology,
    state: Option<&State>,
    secrets: &talosprov_machine::secrets::SecretsBundle,
    desired: &plan::desired::Desired,
) -> Result<Option<plan::observed::ObservedObjects>, String> {
    let Some(state) = state else {
        return Ok(None);
    };
    let bootstrapped = state.resources.bootstrap.as_ref().is_some_and(|b| b.done);
    let Some(stored) = state.outputs.kubeconfig.as_ref() else {
        return Ok(None);
    };
    if !bootstrapped || (desired.objects.is_empty() && state.resources.objects.is_empty()) {
        return Ok(None);
    }
    // An expired kubeconfig is not connected with: one signed offline by the Kubernetes CA is.
    let kubeconfig =
        if cluster::kubeconfig_usable(stored.value.expose(), time::OffsetDateTime::now_utc()) {
            stored.value.clone()
        } else {
            cluster::offline_kubeconfig(topology, secrets).unwrap_or_else(|_| stored.value.clone())
        };
    let read = async {
        let client = talosprov_kube::client::KubeClient::from_kubeconfig(kubeconfig.expose())
            .await
            .map_err(|e| e.to_string())?;
        crate::apply::refresh_kube::observe_objects(
            &client,
            &desired.objects,
            &state.resources.objects,
        )
        .await
        .map_err(|e| e.to_string())
    };
    let outcome = tokio::time::timeout(KUBE_REFRESH, read)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", KUBE_REFRESH.as_secs())));
    outcome.map(Some)
}
