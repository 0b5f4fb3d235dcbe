//! What plan, apply, destroy and import share: loading the topology (its
//! diagnostics given to the frontend), the secrets (generated once, with the
//! OS RNG and the clock), the rendered configs, the talosconfig, the clients,
//! refresh, and the saved plan file (0600, sealed when the state is
//! encrypted).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use anyhow::Context as _;
use sha2::Digest as _;

use super::store::state_env;
use super::{CommandError, Ui};
use crate::apply::refresh::{RefreshInput, refresh};
use talosprov_addon::manifests::RenderedAddon;
use talosprov_backend::encrypt::{self, StateKeys};
use talosprov_base::schematic::Schematic;
use talosprov_base::sensitive::Sensitive;
use talosprov_base::talosconfig::Talosconfig;
use talosprov_factory::client::FactoryClient;
use talosprov_machine::kubeconfig::{AdminKubeconfig, KubeconfigInput};
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::{parse_secrets_yaml, secrets_yaml};
use talosprov_machine::talosconfig::{TalosconfigInput, generate};
use talosprov_plan::desired::RenderedConfig;
use talosprov_plan::observed::Observed;
use talosprov_plan::saved::{InputDigests, SavedPlan};
use talosprov_statefile::format::State;
use talosprov_statefile::rotation::CaRotation;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_topology as topology;
use talosprov_topology::model::{SchematicSpec, Topology};

/// Load and validate the topology; its diagnostics go to the frontend.
///
/// # Errors
/// [`CommandError::Reported`] when it has errors (already shown); a failure
/// when the file cannot be read.
pub fn load_topology(file: &Path, ui: &Ui) -> Result<Topology, CommandError> {
    reported(
        talosprov_files::load_topology(file).map_err(anyhow::Error::new)?,
        ui,
    )
}

/// [`load_topology`] with the pools' members `recorded` kept where they
/// are (the state's allocation).
///
/// # Errors
/// As [`load_topology`]; an edit that would move a recorded member is
/// `O005 pool-member-moved`.
pub fn load_topology_with(
    file: &Path,
    recorded: std::collections::BTreeMap<String, Vec<talosprov_statefile::format::RecordedMember>>,
    ui: &Ui,
) -> Result<Topology, CommandError> {
    reported(
        talosprov_files::load_topology_with(file, recorded).map_err(anyhow::Error::new)?,
        ui,
    )
}

/// [`load_topology_with`], with new pool members placed by each host's free
/// memory and datastore space (see [`host_capacity`]).
///
/// # Errors
/// As [`load_topology_with`]; no host with room for a new member is
/// `O006 pool-no-capacity`.
pub fn load_topology_placed(
    file: &Path,
    recorded: std::collections::BTreeMap<String, Vec<talosprov_statefile::format::RecordedMember>>,
    capacity: std::collections::BTreeMap<String, topology::pools::HostCapacity>,
    ui: &Ui,
) -> Result<Topology, CommandError> {
    reported(
        talosprov_files::load_topology_placed(file, recorded, capacity)
            .map_err(anyhow::Error::new)?,
        ui,
    )
}

/// What each host the pools spread over has free: its memory
/// (`/nodes/<node>/status`) and the space on `proxmox.datastore` (its
/// `status` on that host). A host whose figures cannot be read is left out:
/// its members are then placed as offline.
///
/// # Errors
/// A Proxmox client that cannot be made.
pub async fn host_capacity(
    topology: &Topology,
) -> anyhow::Result<std::collections::BTreeMap<String, topology::pools::HostCapacity>> {
    let client = proxmox_client_again(topology)?;
    let hosts: std::collections::BTreeSet<&str> = topology
        .pools
        .iter()
        .flat_map(|p| p.hosts.iter().map(String::as_str))
        .chain(topology.nodes.iter().map(|n| n.proxmox_node.as_str()))
        .collect();
    let mut out = std::collections::BTreeMap::new();
    for host in hosts {
        let memory = match talosprov_proxmox::observe::free_memory(&client, host).await {
            Ok(bytes) => bytes >> 20,
            Err(e) => {
                tracing::debug!(error = %e, host, "free memory not read");
                continue;
            }
        };
        let disk =
            talosprov_proxmox::storage::storage_status(&client, host, &topology.proxmox.datastore)
                .await
                .ok()
                .and_then(|s| s.avail)
                .map(|b| b >> 30);
        out.insert(
            host.to_owned(),
            topology::pools::HostCapacity {
                memory_mib: memory,
                disk_gib: disk,
            },
        );
    }
    Ok(out)
}

/// Give what loading said to the frontend, and the topology unless it has
/// errors.
fn reported(loaded: topology::Loaded, ui: &Ui) -> Result<Topology, CommandError> {
    if !loaded.diagnostics.is_empty() {
        ui.diagnostics(&loaded.diagnostics);
    }
    match loaded.topology {
        Some(t) if !talosprov_base::diagnostics::has_errors(&loaded.diagnostics) => Ok(t),
        _ => Err(CommandError::Reported),
    }
}

/// The state's secrets bundle, if it has one.
///
/// # Errors
/// When the stored bundle does not parse.
pub fn state_secrets(state: &State) -> anyhow::Result<Option<SecretsBundle>> {
    state
        .secrets
        .as_ref()
        .map(|s| parse_secrets_yaml(s.expose()).context("the state's secrets bundle is invalid"))
        .transpose()
}

/// The secrets of `state`, if there is a state and it has them.
///
/// # Errors
/// When the stored bundle does not parse.
pub fn state_secrets_opt(state: Option<&State>) -> anyhow::Result<Option<SecretsBundle>> {
    match state {
        Some(s) => state_secrets(s),
        None => Ok(None),
    }
}

/// A new secrets bundle from the OS RNG and the current time, and its text.
///
/// # Errors
/// When a certificate cannot be made.
pub fn generate_secrets() -> anyhow::Result<(SecretsBundle, Sensitive)> {
    let bundle = SecretsBundle::generate(&mut rand::rngs::OsRng, time::OffsetDateTime::now_utc())
        .context("cannot generate the cluster secrets")?;
    let text = Sensitive::new(secrets_yaml(&bundle));
    Ok((bundle, text))
}

/// Each node's final machine config, as planning takes it (with the stage's CAs
/// while `rotation` is in progress), and the digests
/// of the files they were made from (the topology file and each node's patch
/// files), which a saved plan records.
///
/// # Errors
/// [`CommandError::Reported`] after giving the template, patch and config
/// diagnostics to the frontend; a failure when the topology file cannot be
/// read again.
pub fn render_configs(
    topology: &Topology,
    secrets: &SecretsBundle,
    rotation: Option<&CaRotation>,
    addons: &[RenderedAddon],
    ui: &Ui,
) -> Result<(Vec<RenderedConfig>, InputDigests), CommandError> {
    let report = |d: &[talosprov_base::diagnostics::Diagnostic]| {
        ui.diagnostics(d);
        CommandError::Reported
    };
    let patches = match talosprov_files::load_patches(topology) {
        Ok(p) => p,
        Err(diagnostics) => return Err(report(&diagnostics)),
    };
    let inline = talosprov_addon::manifests::inline_manifests(topology, addons);
    // A CA rotation in progress renders the stage's CAs.
    let (secrets, accepted) = talosprov_machine::rotation::effective(secrets, rotation);
    let configs = talosprov_machine::node::node_configs_with(
        topology, &secrets, &accepted, &patches, &inline,
    )
    .map_err(|d| report(&d))?;
    let mut addon_problems = talosprov_addon::checks::check(topology, &configs);
    let facts = talosprov_addon::facts::cluster_facts(&configs);
    addon_problems.extend(talosprov_addon::manifests::object_checks(
        topology,
        addons,
        facts.as_ref(),
    ));
    if talosprov_base::diagnostics::has_errors(&addon_problems) {
        return Err(report(&addon_problems));
    }
    let topology_bytes =
        talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, &topology.file)
            .with_context(|| format!("cannot read {}", topology.file.display()))?
            .into_bytes();
    let topology_path = topology.file.display().to_string();
    let mut files: BTreeMap<String, String> = patches
        .file_digests()
        .into_iter()
        .map(|(path, digest)| (path.display().to_string(), digest))
        .collect();
    files.insert(
        topology_path.clone(),
        hex::encode(sha2::Sha256::digest(&topology_bytes)),
    );
    let inputs = InputDigests {
        topology: topology_path,
        files,
        nodes: patches
            .node_patches()
            .iter()
            .map(|(host, list)| {
                let paths = list.iter().map(|f| f.path.display().to_string()).collect();
                (host.clone(), paths)
            })
            .collect(),
    };
    let configs = configs
        .into_iter()
        .map(|c| RenderedConfig {
            hostname: c.hostname,
            schematic_id: c.schematic_id,
            installer_image: c.installer_image,
            talos_version: c.talos_version,
            sha256: c.sha256,
            yaml: c.yaml,
        })
        .collect();
    Ok((configs, inputs))
}

/// Node addresses by hostname.
pub fn node_ips(topology: &Topology) -> BTreeMap<String, IpAddr> {
    topology
        .nodes
        .iter()
        .map(|n| (n.hostname.clone(), IpAddr::V4(n.ip)))
        .collect()
}

/// Schematic contents by ID, for registration with the factory.
pub fn schematics(topology: &Topology) -> BTreeMap<String, Option<Schematic>> {
    let mut out = BTreeMap::new();
    let mut specs: Vec<Option<&SchematicSpec>> = topology.schematics.values().map(Some).collect();
    specs.push(None);
    for spec in specs {
        let id = talosprov_plan::desired::schematic_id(spec);
        let schematic = match spec {
            Some(SchematicSpec::Id(_)) => None,
            Some(SchematicSpec::Customization {
                extensions,
                kernel_args,
            }) => Some(Schematic {
                extensions: extensions.clone(),
                kernel_args: kernel_args.clone(),
            }),
            None => Some(Schematic::default()),
        };
        out.insert(id, schematic);
    }
    out
}

/// A new talosconfig: an admin client certificate from the OS CA, endpoints
/// the control planes, nodes every node.
///
/// # Errors
/// When the OS CA cannot sign.
pub fn new_talosconfig(
    topology: &Topology,
    secrets: &SecretsBundle,
) -> anyhow::Result<Talosconfig> {
    let input = TalosconfigInput {
        context: topology.cluster.name.clone(),
        endpoints: topology.controlplanes().map(|n| n.ip.to_string()).collect(),
        nodes: topology.nodes.iter().map(|n| n.ip.to_string()).collect(),
        secrets,
        now: time::OffsetDateTime::now_utc(),
        lifetime: talosprov_machine::talosconfig::ADMIN_CERTIFICATE_VALIDITY,
    };
    generate(&input, &mut rand::rngs::OsRng).context("cannot issue the talosconfig")
}

/// How long before the state's talosconfig certificate expires talosprov stops connecting
/// with it and uses one issued for the run instead: 1 hour, longer than any one command.
pub const CONNECT_MARGIN: time::Duration = time::Duration::hours(1);

/// The Talos API credentials a command connects with: the state's talosconfig's
/// (`stored`), unless its client certificate expires within [`CONNECT_MARGIN`] of `now`,
/// has expired or cannot be read; then those of `fresh`, a talosconfig issued for the run
/// from the OS CA (see [`new_talosconfig`]), so that talosprov never locks itself out of a
/// cluster whose CAs it holds. `None` when the state has no talosconfig.
///
/// # Errors
/// A talosconfig that is not one.
pub fn connection_credentials(
    stored: Option<&str>,
    fresh: Option<&str>,
    now: time::OffsetDateTime,
) -> anyhow::Result<Option<ClientCredentials>> {
    let Some(stored) = stored else {
        return Ok(None);
    };
    let usable = talosprov_machine::expiry::talosconfig_not_after(stored)
        .is_some_and(|t| t - now > CONNECT_MARGIN);
    match fresh {
        Some(fresh) if !usable => credentials_from_talosconfig(fresh).map(Some),
        Some(_) | None => credentials_from_talosconfig(stored).map(Some),
    }
}

/// Whether the state's kubeconfig (`stored`) can still be connected with: its client
/// certificate is valid for more than [`CONNECT_MARGIN`] after `now`. When it cannot, the
/// commands use the admin kubeconfig signed offline by the Kubernetes CA
/// ([`offline_kubeconfig`]) instead.
pub fn kubeconfig_usable(stored: &str, now: time::OffsetDateTime) -> bool {
    talosprov_machine::expiry::kubeconfig_not_after(stored)
        .is_some_and(|t| t - now > CONNECT_MARGIN)
}

/// Talos client credentials from a talosconfig's text (its current context).
///
/// # Errors
/// When the text is not a talosconfig.
pub fn credentials_from_talosconfig(text: &str) -> anyhow::Result<ClientCredentials> {
    let tc = Talosconfig::parse(text).context("cannot read the stored talosconfig")?;
    Ok(ClientCredentials::from_talosconfig(&tc))
}

/// The admin kubeconfig signed offline by the cluster's Kubernetes CA.
///
/// # Errors
/// When the CA cannot sign.
pub fn offline_kubeconfig(
    topology: &Topology,
    secrets: &SecretsBundle,
) -> anyhow::Result<Sensitive> {
    let input = KubeconfigInput {
        cluster_name: topology.cluster.name.clone(),
        endpoint: topology.cluster.endpoint.clone(),
        secrets,
        now: time::OffsetDateTime::now_utc(),
        lifetime: talosprov_machine::kubeconfig::DEFAULT_CERTIFICATE_LIFETIME,
    };
    let k = AdminKubeconfig::generate(&input, &mut rand::rngs::OsRng)
        .context("cannot sign the offline kubeconfig")?;
    Ok(Sensitive::new(k.yaml))
}

/// The Proxmox client for the topology (endpoint, CA or fingerprint from the
/// file; token and fallbacks from the environment). A setting that turns
/// TLS checks off is warned about.
///
/// # Errors
/// Missing endpoint or credentials, a bad fingerprint.
pub fn proxmox_client(
    topology: &Topology,
    ui: &Ui,
) -> anyhow::Result<talosprov_proxmox::client::Client> {
    let settings = proxmox_settings(topology)?;
    if let Some(w) = settings.warning() {
        ui.warn(w);
    }
    Ok(talosprov_proxmox::client::Client::new(settings)?)
}

/// [`proxmox_client`] for a second client in the same command, which does not
/// repeat the warning.
///
/// # Errors
/// As [`proxmox_client`].
pub fn proxmox_client_again(
    topology: &Topology,
) -> anyhow::Result<talosprov_proxmox::client::Client> {
    Ok(talosprov_proxmox::client::Client::new(proxmox_settings(
        topology,
    )?)?)
}

fn proxmox_settings(topology: &Topology) -> anyhow::Result<talosprov_proxmox::settings::Settings> {
    let p = &topology.proxmox;
    let endpoint = (!p.endpoint.is_empty()).then_some(p.endpoint.as_str());
    Ok(talosprov_proxmox::settings::Settings::from_env(
        endpoint,
        p.ca_file.as_deref(),
        p.fingerprint.as_deref(),
        p.insecure,
    )?)
}

/// The Image Factory client.
///
/// # Errors
/// A URL that does not parse.
pub fn factory_client(topology: &Topology) -> anyhow::Result<FactoryClient> {
    let url = url::Url::parse(&topology.image_factory_url).with_context(|| {
        format!(
            "image_factory.url {} is not a URL",
            topology.image_factory_url
        )
    })?;
    Ok(FactoryClient::new(url)?)
}

/// The context of a failed refresh: for a refused TLS certificate or an
/// unusable CA file the error itself says what to set, so only that; for
/// anything else, that `-refresh=false` plans without reading back.
fn refresh_context(e: anyhow::Error, what: &str) -> anyhow::Error {
    let tls = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<talosprov_proxmox::error::ProxmoxError>(),
            Some(
                talosprov_proxmox::error::ProxmoxError::Tls { .. }
                    | talosprov_proxmox::error::ProxmoxError::CaFile { .. }
            )
        )
    });
    if tls {
        e.context(what.to_owned())
    } else {
        e.context(format!(
            "{what} (use -refresh=false to plan from the state alone)"
        ))
    }
}

/// Observe the cluster, or nothing with `offline`. Proxmox retries made while
/// reading go to the frontend. The Talos API is reached with the state's talosconfig, or
/// one issued from `secrets` when its certificate has expired (see
/// [`connection_credentials`]).
///
/// # Errors
/// Missing or invalid Proxmox settings, and Proxmox errors during the
/// refresh; a TLS refusal says what to set, the others that `-refresh=false`
/// plans without them.
pub async fn observe(
    topology: &Topology,
    state: Option<&State>,
    secrets: &SecretsBundle,
    configs: &[RenderedConfig],
    offline: bool,
    ui: &Ui,
) -> anyhow::Result<Observed> {
    if offline {
        return Ok(Observed::default());
    }
    let client = proxmox_client(topology, ui)
        .map_err(|e| refresh_context(e, "cannot read the cluster back from Proxmox"))?;
    let stored = state.and_then(|s| s.outputs.talosconfig.as_ref());
    let now = time::OffsetDateTime::now_utc();
    let fresh = match stored {
        Some(t) => talosprov_machine::expiry::talosconfig_not_after(t.value.expose())
            .is_none_or(|at| at - now <= CONNECT_MARGIN)
            .then(|| new_talosconfig(topology, secrets).map(|t| t.to_yaml()))
            .transpose()?,
        None => None,
    };
    let credentials = connection_credentials(
        stored.map(|t| t.value.expose().as_str()),
        fresh.as_deref(),
        now,
    )?;
    let ips = node_ips(topology);
    let image_hosts: Vec<String> = topology
        .nodes
        .iter()
        .map(|n| n.proxmox_node.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let input = RefreshInput {
        image_node: &topology.proxmox.node,
        image_storage: &topology.proxmox.image_storage,
        image_hosts: &image_hosts,
        ips: &ips,
        credentials: credentials.as_ref(),
        probe: std::time::Duration::from_secs(5),
        configs: &configs
            .iter()
            .map(|c| (c.hostname.clone(), (c.sha256.clone(), c.yaml.clone())))
            .collect(),
    };
    let watcher = retry_watcher(ui);
    talosprov_retry::watched(watcher, refresh(&client, state, &input))
        .await
        .map_err(|e| refresh_context(e, "cannot refresh"))
}

/// Whether images are on shared storage: as observed, else as the recorded
/// image addresses say (a host suffix means not shared), else shared.
pub fn storage_shared(observed: &Observed, state: Option<&State>) -> bool {
    if let Some(shared) = observed.image_storage_shared {
        return shared;
    }
    !state.is_some_and(|s| {
        s.resources
            .images
            .iter()
            .any(|(name, i)| name.ends_with(&format!("-{}", i.node)))
    })
}

/// The keys that seal the state, which also seal saved plans.
///
/// # Errors
/// A key setting that is wrong.
pub fn state_keys() -> anyhow::Result<Option<StateKeys>> {
    Ok(StateKeys::load(&encrypt::key_source(&state_env())?)?)
}

/// Write a saved plan with mode 0600, sealed when state keys are set.
///
/// # Errors
/// Write and encryption errors.
pub fn write_saved_plan(path: &Path, saved: &SavedPlan) -> anyhow::Result<()> {
    let json = saved.to_json();
    let bytes = match state_keys()? {
        Some(keys) => encrypt::seal_bytes(&json, &keys)?.into_bytes(),
        None => json,
    };
    talosprov_files::write_private(path, &bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Read a saved plan, opening it with the state keys when it is sealed.
///
/// # Errors
/// Read, decryption and format errors.
pub fn read_saved_plan(path: &Path) -> anyhow::Result<SavedPlan> {
    // A saved plan holds what a state holds: the same bound, and the same
    // refusal of anything but a regular file (a FIFO would block).
    let bytes = talosprov_backend::bounded::read_file(
        path,
        "the saved plan",
        talosprov_backend::bounded::MAX_STATE_BYTES,
    )?;
    let json = if bytes.starts_with(b"{") {
        bytes
    } else {
        let keys = state_keys()?.with_context(|| {
            format!(
                "{} is encrypted like the state: set {} (or {} for age identities) to read it",
                path.display(),
                encrypt::PASSPHRASE_VAR,
                encrypt::IDENTITY_FILE_VAR
            )
        })?;
        let text = String::from_utf8(bytes).context("the plan file is not text")?;
        encrypt::open_bytes(&text, &keys)?
    };
    SavedPlan::from_json(&json).with_context(|| format!("cannot read plan {}", path.display()))
}

/// A retry watcher that tells the frontend of every retry.
pub fn retry_watcher(ui: &Ui) -> talosprov_retry::Watcher {
    let ui = ui.clone();
    std::sync::Arc::new(move |n: &talosprov_retry::Notice| ui.retry(n))
}
