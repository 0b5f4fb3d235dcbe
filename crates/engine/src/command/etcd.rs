//! `etcd snapshot`: an etcd snapshot streamed from a healthy control plane
//! (Talos's `EtcdSnapshot`), age-encrypted as it streams, into `--to`, the
//! `backup:` destination or the local default folder, with its manifest; then
//! the `backup:` section's retention. Reads the state without locking it and
//! never writes it.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, anyhow};

use talosprov_core::machine::secrets::SecretsBundle;
use talosprov_core::state::State;
use talosprov_core::topology::Topology;
use talosprov_talos::{ClientCredentials, TalosClient};

use super::store::{StateSettings, no_state};
use super::{CommandError, Ui};
use crate::backups::{self, Archiver, Taken};

/// What `etcd snapshot` was asked.
#[derive(Debug, Clone)]
pub struct SnapshotRequest {
    /// Where the state and topology are.
    pub state: StateSettings,
    /// `--to DEST`: a folder or `s3://bucket/prefix`.
    pub to: Option<String>,
    /// `--recipient age1…`, repeatable: seal to these instead of the state's
    /// keys or the cluster's own key.
    pub recipients: Vec<String>,
}

/// How long the etcd revision may take to read from the Kubernetes API.
const REVISION_WAIT: Duration = Duration::from_secs(10);

/// The topology, the state and its secrets, for the etcd commands.
pub(crate) struct Loaded {
    pub topology: Topology,
    pub state: State,
    pub secrets: SecretsBundle,
}

/// Load a valid topology and a state with secrets.
///
/// # Errors
/// A topology with errors ([`CommandError::Reported`]), no state, no secrets.
pub(crate) async fn load(settings: &StateSettings, ui: &Ui) -> Result<Loaded, CommandError> {
    let loaded = talosprov_files::load_topology(&settings.file)?;
    let Some(topology) = loaded.topology else {
        ui.diagnostics(&loaded.diagnostics);
        return Err(CommandError::Reported);
    };
    let store = settings.open(ui)?;
    let state = store.load().await?.ok_or_else(|| no_state(&store))?.state;
    let secrets = super::prepare::state_secrets(&state)?
        .ok_or_else(|| anyhow!("the state has no secrets bundle: run `talosprov apply` first"))?;
    Ok(Loaded {
        topology,
        state,
        secrets,
    })
}

/// The first control plane of the topology whose etcd is running and
/// healthy, connected, with its hostname and Talos version.
///
/// # Errors
/// None is: each control plane's reason is named.
pub(crate) async fn healthy_member(
    topology: &Topology,
    state: &State,
    credentials: &ClientCredentials,
) -> anyhow::Result<(TalosClient, String, String)> {
    let mut why = Vec::new();
    for node in topology.controlplanes() {
        let client = match TalosClient::connect_secure(IpAddr::V4(node.ip), credentials).await {
            Ok(c) => c,
            Err(e) => {
                why.push(format!("{}: {e}", node.hostname));
                continue;
            }
        };
        match client.service_list().await {
            Ok(services) => {
                let etcd = services.iter().find(|s| s.id == "etcd");
                match etcd {
                    Some(s) if s.state == "Running" && s.healthy == Some(true) => {
                        let version = state
                            .resources
                            .configs
                            .get(&node.hostname)
                            .map(|c| c.talos_version.clone())
                            .unwrap_or_else(|| topology.cluster.talos_version.to_string());
                        return Ok((client, node.hostname.clone(), version));
                    }
                    Some(s) => why.push(format!(
                        "{}: etcd is {} ({})",
                        node.hostname, s.state, s.last_message
                    )),
                    None => why.push(format!("{}: no etcd service", node.hostname)),
                }
            }
            Err(e) => why.push(format!("{}: {e}", node.hostname)),
        }
    }
    Err(anyhow!(
        "no control plane has a healthy etcd: {}",
        why.join("; ")
    ))
}

/// etcd's revision as the Kubernetes API reports it, or `None` (with the
/// reason) when the state has no kubeconfig or the API does not answer soon.
pub(crate) async fn revision(state: &State) -> Result<u64, String> {
    let kubeconfig = state
        .outputs
        .kubeconfig
        .as_ref()
        .ok_or("the state has no kubeconfig")?;
    let read = async {
        let client = talosprov_kube::KubeClient::from_kubeconfig(kubeconfig.value.expose())
            .await
            .map_err(|e| e.to_string())?;
        client.revision().await.map_err(|e| e.to_string())
    };
    tokio::time::timeout(REVISION_WAIT, read)
        .await
        .map_err(|_| {
            format!(
                "the Kubernetes API did not answer in {}s",
                REVISION_WAIT.as_secs()
            )
        })?
}

/// Take a snapshot (see the module's docs). A revision that cannot be read
/// and a retention that cannot finish are warnings; the snapshot is saved.
///
/// # Errors
/// No healthy control plane, a destination or key that cannot be used, the
/// stream or the upload failing (nothing is left in the destination).
pub async fn snapshot(request: &SnapshotRequest, ui: &Ui) -> Result<Taken, CommandError> {
    let Loaded {
        topology,
        state,
        secrets,
    } = load(&request.state, ui).await?;
    let beside = request.state.snapshot_folder();
    let (location, retained) = backups::target(request.to.as_deref(), &topology, &beside)?;
    let keys = backups::seal_keys(&request.recipients, super::prepare::state_keys()?, &secrets)?;
    let archiver = Archiver::new(location, retained, keys, &topology, &state, &secrets)?;
    let credentials =
        super::health::credentials(&topology, &state).context("cannot connect to the nodes")?;
    let (client, node, version) = healthy_member(&topology, &state, &credentials).await?;
    let revision = revision(&state).await.unwrap_or_else(|why| {
        ui.warn(&format!(
            "the etcd revision is not known ({why}): the snapshot is named r0"
        ));
        0
    });
    let taken = archiver
        .take(&client, &node, &version, revision, "etcd snapshot")
        .await?;
    if let Some(e) = &taken.prune_error {
        ui.warn(&format!(
            "the snapshot is saved, but retention could not finish: {e}"
        ));
    }
    Ok(taken)
}
