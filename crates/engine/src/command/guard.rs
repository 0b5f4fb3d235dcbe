//! The checks before a run generates secrets or first configures nodes with
//! them, so that a cluster's secrets are never replaced by accident: a state
//! that records applied resources but lost its secrets is refused, and so are
//! nodes that already answer in secure mode for another CA (an existing
//! cluster whose state is missing).

use std::net::IpAddr;
use std::time::Duration;

use super::CommandError;
use super::prepare::state_secrets_opt;
use talosprov_backend::StateBackend;
use talosprov_backend::backend::Backend;
use talosprov_backend::store::StateStore;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_statefile::format::State;
use talosprov_talos::probe::{NodeAnswer, probe_node};
use talosprov_topology::model::Topology;

/// How long each node may take to answer the probe: a node that does not
/// answer by then is not an existing cluster.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(3);

/// Refuse a state that records applied resources but has no secrets: new
/// secrets would re-configure the cluster with a new CA. The way out is
/// `talosprov secrets import` (or restoring the state).
///
/// # Errors
/// That refusal, naming the state, what it records and the commands to run.
pub fn refuse_lost_secrets(
    topology: &Topology,
    state: Option<&State>,
    store: &StateStore<StateBackend>,
) -> Result<(), CommandError> {
    let Some(state) = state.filter(|s| s.secrets.is_none() && s.has_applied()) else {
        return Ok(());
    };
    let mut recorded: Vec<String> = state.addresses().iter().map(ToString::to_string).collect();
    if state.outputs.talosconfig.is_some() {
        recorded.push("talosconfig".to_owned());
    }
    let shown = if recorded.len() > 4 {
        format!(
            "{}, … ({} in all)",
            recorded[..4].join(", "),
            recorded.len()
        )
    } else {
        recorded.join(", ")
    };
    Err(anyhow::anyhow!(
        "the state {} has no secrets bundle, but it records a cluster talosprov applied ({shown}): \
         new secrets would re-configure its nodes with a new CA, so talosprov generates none. \
         Import the cluster's secrets with `talosprov secrets import secrets.yaml -f {}` (a \
         bundle saved with `talosprov secrets export`, or made from a control plane's machine \
         config with `talosctl gen secrets --from-controlplane-config controlplane.yaml`){}",
        store.backend().describe(),
        topology.file.display(),
        restore_clause(store)
    )
    .into())
}

/// Before a state that has applied nothing gets its first configs: ask each
/// node of the topology, briefly, what answers at its Talos API. Nodes in
/// secure mode whose certificate was not issued by the OS CA of the secrets
/// the run would use (the state's, else the saved plan's; none when new ones
/// would be generated) belong to an existing cluster, and the run is refused
/// before anything is written.
///
/// # Errors
/// The refusal, naming each such node, and how to import its secrets or
/// restore the state.
pub async fn refuse_existing_cluster(
    topology: &Topology,
    state: Option<&State>,
    saved_secrets: Option<&Sensitive>,
    store: &StateStore<StateBackend>,
) -> Result<(), CommandError> {
    if state.is_some_and(State::has_applied) {
        return Ok(());
    }
    let ours = match state_secrets_opt(state)? {
        Some(bundle) => Some(bundle),
        None => saved_secrets
            .map(|s| parse_secrets_yaml(s.expose()))
            .transpose()
            .map_err(anyhow::Error::new)?,
    };
    let ca = ours.as_ref().map(|b| b.certs.os.crt.as_str());
    let answers = futures::future::join_all(topology.nodes.iter().map(|n| {
        let ip = IpAddr::V4(n.ip);
        async move { (n, probe_node(ip, ca, PROBE_DEADLINE).await) }
    }))
    .await;
    let foreign: Vec<String> = answers
        .into_iter()
        .filter(|(_, a)| {
            matches!(
                a,
                NodeAnswer::Secure {
                    issued_by_ours: false
                }
            )
        })
        .map(|(n, _)| format!("{} ({})", n.hostname, n.ip))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    let location = store.backend().describe();
    let message = if ours.is_some() {
        format!(
            "these nodes belong to an existing cluster whose secrets are not those in the state \
             {location}: {} answer in secure mode with a certificate its OS CA did not issue. \
             Nothing was changed. Start a new state with that cluster's secrets (`--state \
             NEW.tfstate`, then `talosprov secrets import secrets.yaml`){}",
            foreign.join(", "),
            restore_clause(store)
        )
    } else {
        let missing = if state.is_some() {
            format!("the state {location} has no secrets")
        } else {
            format!("there is no state in {location}")
        };
        format!(
            "these nodes belong to an existing cluster: {} answer in secure mode, with \
             certificates from their cluster's CA, and {missing}. Nothing was changed. Import the cluster's secrets with `talosprov secrets import \
             secrets.yaml -f {}` (`talosctl gen secrets --from-controlplane-config \
             controlplane.yaml` makes the bundle from a control plane's machine config){}",
            foreign.join(", "),
            topology.file.display(),
            restore_clause(store)
        )
    };
    Err(anyhow::anyhow!(message).into())
}

/// `; or, if the state was lost, <how to restore it>` for the backend, or
/// nothing.
fn restore_clause(store: &StateStore<StateBackend>) -> String {
    store
        .backend()
        .restore_hint()
        .map(|h| format!("; or, if the state was lost, {h}"))
        .unwrap_or_default()
}
