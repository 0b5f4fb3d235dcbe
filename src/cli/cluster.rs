//! What plan, apply and destroy share at the edge: loading the topology (its
//! diagnostics printed), the secrets (generated once, with the OS RNG and the
//! clock), the rendered configs, the talosconfig, the clients, refresh, the
//! saved plan file (0600, sealed when the state is encrypted) and the lock
//! held across a run that stops cleanly on Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use anyhow::Context as _;
use tokio::sync::watch;

use super::CommandError;
use super::state_options::{LockOptions, StateOptions, acquire, state_env};
use sha2::Digest as _;
use talosprov_core::addon::RenderedAddon;
use talosprov_core::machine::{
    AdminKubeconfig, KubeconfigInput, SecretsBundle, Talosconfig, TalosconfigInput,
    parse_secrets_yaml, secrets_yaml,
};
use talosprov_core::plan::{InputDigests, Observed, RenderedConfig, SavedPlan};
use talosprov_core::topology::{self, SchematicSpec, Topology};
use talosprov_engine::apply::refresh::{RefreshInput, refresh};
use talosprov_factory::{FactoryClient, Schematic};
use talosprov_state::encrypt::{self, StateKeys};
use talosprov_state::format::State;
use talosprov_state::{Sensitive, StateBackend, StateStore};
use talosprov_talos::ClientCredentials;

/// Load and validate the topology; print its diagnostics on stderr.
///
/// # Errors
/// [`CommandError::Reported`] when it has errors (already printed); a failure
/// when the file cannot be read.
pub fn load_topology(file: &Path) -> Result<Topology, CommandError> {
    reported(talosprov_files::load_topology(file).map_err(anyhow::Error::new)?)
}

/// [`load_topology`] with the pools' members `recorded` kept where they
/// are (the state's allocation).
///
/// # Errors
/// As [`load_topology`]; an edit that would move a recorded member is
/// `O005 pool-member-moved`.
pub fn load_topology_with(
    file: &Path,
    recorded: std::collections::BTreeMap<String, Vec<topology::pools::RecordedMember>>,
) -> Result<Topology, CommandError> {
    reported(talosprov_files::load_topology_with(file, recorded).map_err(anyhow::Error::new)?)
}

/// Print what loading said, and give the topology unless it has errors.
fn reported(loaded: topology::Loaded) -> Result<Topology, CommandError> {
    crate::ui::diagnostics::print_all(&loaded.diagnostics);
    match loaded.topology {
        Some(t) if !talosprov_core::diagnostics::has_errors(&loaded.diagnostics) => Ok(t),
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

/// Each node's final machine config, as planning takes it, and the digests
/// of the files they were made from (the topology file and each node's patch
/// files), which a saved plan records.
///
/// # Errors
/// [`CommandError::Reported`] after printing the template, patch and config
/// diagnostics; a failure when the topology file cannot be read again.
pub fn render_configs(
    topology: &Topology,
    secrets: &SecretsBundle,
    addons: &[RenderedAddon],
) -> Result<(Vec<RenderedConfig>, InputDigests), CommandError> {
    let patches = match talosprov_files::load_patches(topology) {
        Ok(p) => p,
        Err(diagnostics) => return Err(report(&diagnostics)),
    };
    let inline = talosprov_core::addon::inline_manifests(topology, addons);
    let configs = talosprov_core::machine::node::node_configs(topology, secrets, &patches, &inline)
        .map_err(|d| report(&d))?;
    let mut addon_problems = talosprov_core::addon::check(topology, &configs);
    let facts = talosprov_core::addon::ClusterFacts::of(&configs);
    addon_problems.extend(talosprov_core::addon::object_checks(
        topology,
        addons,
        facts.as_ref(),
    ));
    if talosprov_core::diagnostics::has_errors(&addon_problems) {
        return Err(report(&addon_problems));
    }
    let topology_bytes = std::fs::read(&topology.file)
        .with_context(|| format!("cannot read {}", topology.file.display()))?;
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

fn report(diagnostics: &[topology::Diagnostic]) -> CommandError {
    crate::ui::diagnostics::print_all(diagnostics);
    CommandError::Reported
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
        let id = talosprov_core::plan::desired::schematic_id(spec);
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
    };
    Talosconfig::generate(&input, &mut rand::rngs::OsRng).context("cannot issue the talosconfig")
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
        lifetime: talosprov_core::machine::kubeconfig::DEFAULT_CERTIFICATE_LIFETIME,
    };
    let k = AdminKubeconfig::generate(&input, &mut rand::rngs::OsRng)
        .context("cannot sign the offline kubeconfig")?;
    Ok(Sensitive::new(k.yaml))
}

/// The Proxmox client for the topology (endpoint, CA or fingerprint from the
/// file; token and fallbacks from the environment).
///
/// # Errors
/// Missing endpoint or credentials, a bad fingerprint.
pub fn proxmox_client(topology: &Topology) -> anyhow::Result<talosprov_proxmox::Client> {
    let p = &topology.proxmox;
    let endpoint = (!p.endpoint.is_empty()).then_some(p.endpoint.as_str());
    let settings = talosprov_proxmox::Settings::from_env(
        endpoint,
        p.ca_file.as_deref(),
        p.fingerprint.as_deref(),
        p.insecure,
    )?;
    if let Some(w) = settings.warning() {
        crate::ui::warn(w);
    }
    Ok(talosprov_proxmox::Client::new(settings)?)
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
            c.downcast_ref::<talosprov_proxmox::ProxmoxError>(),
            Some(
                talosprov_proxmox::ProxmoxError::Tls { .. }
                    | talosprov_proxmox::ProxmoxError::CaFile { .. }
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
/// reading are shown as lines on stderr.
///
/// # Errors
/// Missing or invalid Proxmox settings, and Proxmox errors during the
/// refresh; a TLS refusal says what to set, the others that `-refresh=false`
/// plans without them.
pub async fn observe(
    topology: &Topology,
    state: Option<&State>,
    configs: &[RenderedConfig],
    offline: bool,
) -> anyhow::Result<Observed> {
    if offline {
        return Ok(Observed::default());
    }
    let client = proxmox_client(topology)
        .map_err(|e| refresh_context(e, "cannot read the cluster back from Proxmox"))?;
    let credentials = state
        .and_then(|s| s.outputs.talosconfig.as_ref())
        .map(|t| credentials_from_talosconfig(t.value.expose()))
        .transpose()?;
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
    let watcher: talosprov_retry::Watcher =
        std::sync::Arc::new(|n: &talosprov_retry::Notice| crate::ui::progress::retry_line(n));
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
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read plan {}", path.display()))?;
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

/// How long a run stopped by a second signal may take to release its lock.
const UNLOCK_AFTER_SECOND_SIGNAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Open the store, take the lock (waiting for it up to `-lock-timeout`), and
/// run `body` with a receiver that turns true on the first Ctrl-C or SIGTERM.
/// The body decides how to stop (the executor finishes the Proxmox work in
/// flight and saves first). A second signal ends the body at once: what it
/// was doing is dropped (the state holds every record saved so far), and the
/// lock is released within a few seconds. The lock is released on every way
/// out.
///
/// # Errors
/// The lock conflict (naming the holder; [`CommandError::Locked`]), `body`'s
/// error, [`CommandError::Interrupted`] on a second signal, or the unlock
/// failure.
pub async fn locked<T>(
    options: &StateOptions,
    lock: &LockOptions,
    operation: &str,
    body: impl AsyncFnOnce(&StateStore<StateBackend>, watch::Receiver<bool>) -> Result<T, CommandError>,
) -> Result<T, CommandError> {
    let store = options.open()?;
    let info = acquire(&store, lock, operation).await?;
    let (tx, rx) = watch::channel(false);
    let mut signals = super::signals::Signals::install();
    let next_signal = async |signals: &mut Option<super::signals::Signals>| match signals {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    };
    let mut at_once = false;
    let result = {
        let body = body(&store, rx);
        tokio::pin!(body);
        loop {
            tokio::select! {
                result = &mut body => break result,
                signal = next_signal(&mut signals) => {
                    if !*tx.borrow() {
                        let _ = tx.send(true);
                        continue;
                    }
                    crate::ui::warn(&format!(
                        "{} received again: exiting at once. Steps in flight were abandoned; \
                         Proxmox may still be running their tasks, and the next run reads back \
                         what they did",
                        signal.name()
                    ));
                    at_once = true;
                    break Err(CommandError::Interrupted);
                }
            }
        }
    };
    super::state_options::report_kept_backup(&store);
    let unlocked = if at_once {
        match tokio::time::timeout(UNLOCK_AFTER_SECOND_SIGNAL, store.unlock(&info.id)).await {
            Ok(done) => done.map_err(|u| u.to_string()),
            Err(_) => Err(format!(
                "no answer within {} s",
                UNLOCK_AFTER_SECOND_SIGNAL.as_secs()
            )),
        }
    } else {
        store.unlock(&info.id).await.map_err(|u| u.to_string())
    };
    match unlocked {
        Ok(()) => result,
        Err(u) => {
            let hint = format!(
                "cannot release the state lock ({u}); release it with `talosprov force-unlock {}`",
                info.id
            );
            match result {
                Ok(_) => Err(anyhow::anyhow!(hint).into()),
                Err(e) => {
                    crate::ui::warn(&hint);
                    Err(e)
                }
            }
        }
    }
}

/// Ask for "yes" on the terminal, giving up when `cancel` turns true.
///
/// # Errors
/// [`CommandError::Interrupted`]; stdin errors.
pub async fn confirm(
    question: String,
    mut cancel: watch::Receiver<bool>,
) -> Result<bool, CommandError> {
    let ask = tokio::task::spawn_blocking(move || crate::ui::console::confirm(&question));
    tokio::select! {
        answer = ask => Ok(answer.map_err(anyhow::Error::new)??),
        _ = cancel.wait_for(|c| *c) => Err(CommandError::Interrupted),
    }
}

/// Ask for confirmation unless `skip`; with no terminal, refuse and say what
/// to add.
pub(super) async fn approve(
    skip: bool,
    question: &str,
    flag_hint: &str,
    cancel: watch::Receiver<bool>,
) -> Result<(), CommandError> {
    if skip {
        return Ok(());
    }
    if !crate::ui::console::stdin_is_terminal() {
        return Err(anyhow::anyhow!(
            "no terminal to confirm on: add {flag_hint} to run without asking"
        )
        .into());
    }
    if confirm(question.to_owned(), cancel).await? {
        Ok(())
    } else {
        Err(anyhow::anyhow!("cancelled: nothing was changed").into())
    }
}
