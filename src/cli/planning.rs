//! Making a plan at the edge, for `plan` and `apply`: secrets (the state's, a
//! saved plan's, or new ones), rendered configs, refresh, then the pure
//! planning, `-target` and the refusals (a disk shrink).

use anyhow::Context as _;

use super::CommandError;
use super::cluster;
use crate::machine::parse_secrets_yaml;
use crate::plan::{self, PlanInput};
use crate::state::format::State;
use crate::state::{Address, Sensitive};
use crate::topology::Topology;

pub use crate::apply::session::Planned;

/// Make the plan.
///
/// `secrets`: the bundle text to use when the state has none (from a saved
/// plan); new ones are generated when neither has any. `staged`: config
/// changes on running nodes are sent in staged mode (`--staged`).
///
/// # Errors
/// Rendering diagnostics (printed), Proxmox errors during refresh, and the
/// plan's refusals.
pub async fn make_plan(
    topology: &Topology,
    state: Option<&State>,
    secrets: Option<&Sensitive>,
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
    let addons = cluster::render_addons(topology).await?;
    let (configs, inputs) = cluster::render_configs(topology, &bundle, &addons)?;
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
    })
}
