//! Making a plan at the edge, for `plan` and `apply`: secrets (the state's, a
//! saved plan's, or new ones), rendered configs, refresh, then the pure
//! planning, `-target` and the refusals (a disk shrink).

use anyhow::Context as _;

use super::CommandError;
use super::addons;
use super::cluster;
use crate::machine::parse_secrets_yaml;
use crate::plan::{self, PlanInput, SavedPlan};
use crate::state::Address;
use crate::state::format::State;
use crate::topology::Topology;

pub use crate::apply::session::Planned;

/// Make the plan.
///
/// `saved`: the saved plan being applied, whose secrets are used when the
/// state has none (new ones are generated when neither has any), and whose
/// Helm renderings are used when their inputs are unchanged. `staged`: config
/// changes on running nodes are sent in staged mode (`--staged`).
///
/// # Errors
/// Rendering diagnostics (printed), Proxmox errors during refresh, and the
/// plan's refusals.
pub async fn make_plan(
    topology: &Topology,
    state: Option<&State>,
    saved: Option<&SavedPlan>,
    offline: bool,
    targets: &[Address],
    staged: bool,
) -> Result<Planned, CommandError> {
    if state.is_some_and(|s| s.secrets.is_none() && s.has_applied()) {
        // Callers refuse this first, naming the state; never generate here.
        return Err(anyhow::anyhow!(
            "the state has no secrets bundle but records applied resources: import the \
             cluster's secrets with `talosprov secrets import`"
        )
        .into());
    }
    // Secrets made for this plan (no state has any yet): the configs, and so
    // their digests, are known only once apply keeps the secrets.
    let recorded = cluster::state_secrets_opt(state)?;
    let fresh_secrets = recorded.is_none();
    let secrets = saved.and_then(|s| s.secrets.as_ref());
    let (bundle, generated) = match (recorded, secrets) {
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
    let known = addons::Known {
        recorded: state.map(|s| &s.renderings),
        saved: saved.map(|s| &s.renderings),
    };
    let rendered = addons::render(topology, &bundle, known).await?;
    let (configs, inputs) = cluster::render_configs(topology, &bundle, &rendered.addons)?;
    let observed = cluster::observe(topology, state, &configs, offline).await?;
    let shared = cluster::storage_shared(&observed, state);
    let desired = plan::desired(topology, &configs, shared).map_err(|errors| {
        anyhow::anyhow!(
            "{}",
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })?;
    let mut p = plan::plan(PlanInput {
        desired: &desired,
        state,
        observed: &observed,
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
    plan::target(&mut p, targets, &desired);
    if staged {
        plan::stage_config_changes(&mut p);
    }
    if fresh_secrets {
        plan::digests_known_after_apply(&mut p);
    }
    Ok(Planned {
        plan: p,
        desired,
        secrets: bundle,
        generated,
        observed,
        inputs,
        renderings: rendered.renderings,
    })
}
