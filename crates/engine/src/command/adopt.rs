//! `talosprov adopt`: take over a running cluster that OpenTofu (the
//! siderolabs/talos and bpg/proxmox providers) made, from its state, by
//! writing the topology, the patch tree and talosprov's state, and changing
//! nothing in Proxmox, in Talos or in the source state (read only: an http
//! source is fetched with one GET, never locked or written).
//!
//! Where the source state holds a node's running config, that is what
//! talosprov compares with; where it holds only the input and patches, or
//! only the config's hash (the provider's write-only input), the config is
//! read from the node over the Talos API with the adopted secrets, and
//! checked against the hash.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use sha2::Digest as _;

use super::store::{StateSettings, locked, state_env};
use super::{CommandError, Ui};
use talosprov_adopt as adopt;
use talosprov_adopt::proxmox::proxmox_side;
use talosprov_adopt::secrets::machine_secrets;
use talosprov_adopt::talos::{AppliedConfig, NodeConfig, talos_side};
use talosprov_adopt::tfstate::TfState;
use talosprov_adopt::topology::{NodeSource, Settings};
use talosprov_backend::StateBackend;
use talosprov_backend::backend::Backend as _;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::{parse_secrets_yaml, secrets_yaml};
use talosprov_statefile::config::{self, StateSection};
use talosprov_statefile::format::{Output, State};
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;

/// Where the cluster is adopted from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdoptFrom {
    /// A local OpenTofu or Terraform state file.
    TfState(PathBuf),
    /// The state behind `TF_HTTP_ADDRESS` (and `TF_HTTP_USERNAME`,
    /// `TF_HTTP_PASSWORD`), as GitLab keeps it.
    TfStateHttp,
    /// A cluster made with talosctl: its secrets bundle (talosctl's
    /// `secrets.yaml`) and its nodes' IP addresses, read over the Talos API.
    Talos {
        /// The bundle.
        secrets: PathBuf,
        /// The nodes, as the Talos API reaches them.
        nodes: Vec<String>,
    },
}

/// `adopt`'s arguments, as parsed.
#[derive(Debug, Clone)]
pub struct AdoptRequest {
    /// The source.
    pub from: AdoptFrom,
    /// The folder `cluster.yaml` and `patches/` are written to.
    pub out: PathBuf,
    /// The target state: `out/cluster.yaml`'s, or `--state`,
    /// `--backend-config`.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// The values the source does not hold.
    pub settings: Settings,
    /// `--secrets FILE`: the bundle as talosctl writes it, for a state
    /// whose `talos_machine_secrets` is ephemeral or absent.
    pub secrets_file: Option<PathBuf>,
    /// `--secrets-address`: which `talos_machine_secrets` instance, when
    /// the state has several.
    pub secrets_address: Option<String>,
    /// `--dry-run`: write nothing.
    pub dry_run: bool,
    /// `--merge`: add to a target state that has records (and to a folder
    /// that has files) only what it lacks, refusing any conflict.
    pub merge: bool,
    /// How long each node may take to answer when its config is read.
    pub probe: Duration,
    /// The command line that ran adopt (`talosprov adopt …`, each word
    /// quoted for a shell), for saying how to run it again.
    pub command: String,
}

/// What `adopt` did (or, with `--dry-run`, would do).
#[derive(Debug, Clone)]
pub struct AdoptOutcome {
    /// The files written, each with its text when it holds no secret
    /// (every one does not: the patches and topology never hold secrets).
    pub files: Vec<(PathBuf, String)>,
    /// What was adopted, one line per record.
    pub adopted: Vec<String>,
    /// What could not be expressed or was left out.
    pub report: Vec<String>,
    /// Where the state went.
    pub state_location: String,
    /// Nothing was written.
    pub dry_run: bool,
}

/// Read the source state's bytes, and say where it is.
async fn read_source(from: &AdoptFrom, dir: &Path) -> anyhow::Result<(Vec<u8>, String)> {
    match from {
        AdoptFrom::TfState(path) => {
            let bytes = talosprov_backend::bounded::read_file(
                path,
                "state",
                talosprov_backend::bounded::MAX_STATE_BYTES,
            )
            .with_context(|| format!("cannot read the state {}", path.display()))?;
            Ok((bytes, path.display().to_string()))
        }
        AdoptFrom::Talos { .. } => Err(anyhow!("not a state source")),
        AdoptFrom::TfStateHttp => {
            let section = StateSection {
                backend: Some("http".into()),
                ..StateSection::default()
            };
            let resolved = config::resolve(&section, &state_env(), &[], dir, None)
                .context("--from-tfstate http reads TF_HTTP_ADDRESS (and TF_HTTP_USERNAME, TF_HTTP_PASSWORD)")?;
            let backend = StateBackend::open(resolved)?;
            let place = backend.describe();
            let bytes = backend
                .get()
                .await
                .with_context(|| format!("cannot read the state {place}"))?
                .ok_or_else(|| anyhow!("{place} holds no state"))?;
            Ok((bytes, place))
        }
    }
}

/// The config `node` runs, read over the Talos API.
async fn running_config(
    node: &str,
    creds: &ClientCredentials,
    probe: Duration,
) -> anyhow::Result<String> {
    let ip: std::net::IpAddr = node
        .parse()
        .with_context(|| format!("node {node:?} is not an IP address"))?;
    let read = async {
        let c = TalosClient::connect_secure(ip, creds).await?;
        c.running_config().await
    };
    let config = tokio::time::timeout(probe, read)
        .await
        .map_err(|_| anyhow!("node {node} did not answer within {probe:?}"))?
        .with_context(|| format!("cannot read the machine config of node {node}"))?
        .ok_or_else(|| anyhow!("node {node} does not say which machine config it runs"))?;
    Ok(String::from_utf8_lossy(config.expose()).into_owned())
}

/// Each node as the source gives it, its running config read from the node
/// where the state does not hold it.
async fn node_sources(
    applied: &[AppliedConfig],
    secrets: &SecretsBundle,
    probe: Duration,
    ui: &Ui,
) -> anyhow::Result<Vec<NodeSource>> {
    let mut creds = None;
    let names: Vec<String> = applied.iter().map(|a| a.node.clone()).collect();
    let mut out = Vec::new();
    for a in applied {
        let running = match &a.config {
            NodeConfig::Rendered(text) => text.expose().clone(),
            NodeConfig::Input(_) | NodeConfig::Hash(_) | NodeConfig::Unknown => {
                ui.note(&format!(
                    "{}: the state does not hold the config node {} runs; reading it from the node",
                    a.address, a.node
                ));
                if creds.is_none() {
                    creds = Some(super::adopt_talos::credentials(secrets, &names)?);
                }
                let creds = creds.as_ref().ok_or_else(|| anyhow!("no credentials"))?;
                let text = running_config(&a.node, creds, probe)
                    .await
                    .with_context(|| format!("{}: adopt needs the node's config", a.address))?;
                if let Some(hash) = &a.config_hash {
                    let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
                    if sha != *hash {
                        ui.warn(&format!(
                            "{}: node {} runs a config whose SHA-256 is not the state's \
                             machine_configuration_hash: it changed since OpenTofu applied it; \
                             adopt takes what runs",
                            a.address, a.node
                        ));
                    }
                }
                text
            }
        };
        out.push(NodeSource {
            source: a.address.clone(),
            node: a.node.clone(),
            running: Sensitive::new(running),
            input: a.input.clone(),
            patches: a.config_patches.clone(),
        });
    }
    Ok(out)
}

/// What adopt takes from its source.
struct Gathered {
    /// Where the source is, for messages.
    place: String,
    facts: talosprov_adopt::talos::ClusterFacts,
    nodes: Vec<NodeSource>,
    proxmox: talosprov_adopt::proxmox::ProxmoxSide,
    secrets: SecretsBundle,
    secrets_text: String,
    bootstrapped: bool,
    kubeconfig: Option<Sensitive<String>>,
}

/// Read the source: a state (its Talos and bpg resources, and the nodes
/// whose config it does not hold), or the nodes and Proxmox.
async fn gather(request: &AdoptRequest, out_dir: &Path, ui: &Ui) -> anyhow::Result<Gathered> {
    if let AdoptFrom::Talos { secrets, nodes } = &request.from {
        let (bundle, text) = read_bundle(secrets)?;
        let creds = super::adopt_talos::credentials(&bundle, nodes)?;
        let read = super::adopt_talos::read_nodes(nodes, &creds, request.probe).await?;
        let proxmox = super::adopt_talos::read_proxmox(&request.settings, &read.nodes, ui).await?;
        return Ok(Gathered {
            place: format!("the nodes {}", nodes.join(", ")),
            facts: read.facts,
            nodes: read.nodes,
            proxmox,
            secrets: bundle,
            secrets_text: text,
            bootstrapped: read.bootstrapped,
            kubeconfig: None,
        });
    }
    let (bytes, place) = read_source(&request.from, out_dir).await?;
    let tf = TfState::parse(&bytes, &place)?;
    drop(bytes);
    let (secrets, secrets_text) = bundle(request, &tf)?;
    let talos = talos_side(&tf);
    if talos.applied.is_empty() {
        return Err(anyhow!(
            "{place}: no talos_machine_configuration_apply instance: adopt takes the nodes from \
             the talos provider's resources"
        ));
    }
    let nodes = node_sources(&talos.applied, &secrets, request.probe, ui).await?;
    Ok(Gathered {
        place,
        facts: talos.facts,
        nodes,
        proxmox: proxmox_side(&tf),
        secrets,
        secrets_text,
        bootstrapped: talos.bootstrapped,
        kubeconfig: talos.kubeconfig,
    })
}

/// A secrets bundle file, as talosctl writes it, and its text.
fn read_bundle(path: &Path) -> anyhow::Result<(SecretsBundle, String)> {
    let text = talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, path)
        .with_context(|| format!("cannot read the secrets bundle {}", path.display()))?;
    let b = parse_secrets_yaml(&text)
        .with_context(|| format!("{} is not a valid secrets bundle", path.display()))?;
    let text = secrets_yaml(&b);
    Ok((b, text))
}

/// The secrets bundle: `--secrets FILE`, else the state's.
fn bundle(request: &AdoptRequest, state: &TfState) -> anyhow::Result<(SecretsBundle, String)> {
    if let Some(path) = &request.secrets_file {
        return read_bundle(path);
    }
    let s = machine_secrets(state, request.secrets_address.as_deref())?;
    Ok((s.bundle, s.yaml.expose().clone()))
}

/// Run `adopt`.
///
/// # Errors
/// A source that cannot be read or is refused (truncated, version 3,
/// encrypted, without secrets); a node no VM matches; a value neither the
/// source nor the settings hold; a target state that is the source, or
/// already holds a cluster; files that exist in the folder; a held lock.
pub async fn adopt(request: &AdoptRequest, ui: &Ui) -> Result<AdoptOutcome, CommandError> {
    let out_dir = std::path::absolute(&request.out)
        .with_context(|| format!("cannot resolve {}", request.out.display()))?;
    // Reading the source and the nodes changes nothing: a signal stops it
    // at once.
    let store = request.state.open(ui)?;
    let location = store.backend().describe();
    let (prepared, _) = super::store::interruptible(
        ui,
        async |mut cancel| {
            tokio::select! {
                p = prepare(request, &out_dir, &location, ui) => p,
                _ = cancel.wait_for(|c| *c) => {
                    ui.warn(&format!(
                        "{} received while reading the cluster to adopt: nothing was written; \
                         run `{}` to start over",
                        ui.interrupted_by(),
                        request.command
                    ));
                    Err(CommandError::Interrupted)
                }
            }
        },
        |_| {},
    )
    .await;
    let (adopted, mut state) = prepared?;
    let outcome = AdoptOutcome {
        files: adopted.files.clone(),
        adopted: adopted.adopted.clone(),
        report: adopted.report.clone(),
        state_location: location.clone(),
        dry_run: request.dry_run,
    };
    if request.dry_run {
        check_files(&out_dir, &adopted.files, request.merge, false)?;
        return Ok(outcome);
    }
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    locked(&store, request.lock_timeout, "adopt", ui, async |cancel| {
        let mut encrypted = store.has_keys();
        let loaded = store.load().await?;
        // Files adopt wrote before it was stopped, with no state saved yet,
        // are its own: the same command goes on from them.
        let unsaved = loaded.as_ref().is_none_or(|l| holds_nothing(&l.state));
        check_files(&out_dir, &adopted.files, request.merge, unsaved)?;
        if let Some(loaded) = loaded {
            encrypted = loaded.encrypted;
            state = merged(loaded.state, state, request.merge, &location)?;
        }
        write_files(&out_dir, &adopted.files, &cancel, request, ui)?;
        store
            .save(&mut state, encrypted)
            .await
            .context("cannot save the state")?;
        Ok(())
    })
    .await?;
    Ok(outcome)
}

/// Read the source and put the adoption together: the files and the state
/// to write (into `location`, which must not be the source).
async fn prepare(
    request: &AdoptRequest,
    out_dir: &Path,
    location: &str,
    ui: &Ui,
) -> Result<(adopt::build::Adopted, State), CommandError> {
    let g = gather(request, out_dir, ui).await?;
    let adopted = adopt::build::adopt(adopt::build::Source {
        nodes: g.nodes,
        facts: &g.facts,
        proxmox: &g.proxmox,
        settings: &request.settings,
        secrets: &g.secrets,
        secrets_yaml: &g.secrets_text,
        bootstrapped: g.bootstrapped,
        now: super::now_rfc3339(),
        dir: out_dir,
        proxmox_endpoint_env: std::env::var("PROXMOX_VE_ENDPOINT")
            .ok()
            .filter(|s| !s.trim().is_empty()),
        image_storage_shared: false,
    })
    .map_err(|e| anyhow!("cannot adopt from {}:\n{e}", g.place))?;
    if location == g.place {
        return Err(anyhow!(
            "the target state is the source state ({}): adopt never writes the source; \
             give a local target with --backend-config backend=local --state PATH, or \
             another with --backend-config address=...",
            g.place
        )
        .into());
    }
    let mut state = State::new(uuid::Uuid::new_v4());
    state.secrets = Some(Sensitive::new(g.secrets_text.clone()));
    state.resources = adopted.resources.clone();
    let talosconfig = super::prepare::new_talosconfig(&adopted.topology, &g.secrets)?;
    state.outputs.talosconfig = Some(Output::sensitive(talosconfig.to_yaml()));
    let kubeconfig = match &g.kubeconfig {
        Some(k) => k.expose().clone(),
        None => super::prepare::offline_kubeconfig(&adopted.topology, &g.secrets)?
            .expose()
            .clone(),
    };
    state.outputs.kubeconfig = Some(Output::sensitive(kubeconfig));
    for (host, yaml) in &adopted.machineconfigs {
        state
            .outputs
            .machineconfigs
            .insert(host.clone(), Output::sensitive(yaml.expose().clone()));
    }
    Ok((adopted, state))
}

/// Write `files` into `dir` (each to a temporary name, then renamed, so no
/// file is ever half-written), skipping those already there. A signal
/// before the last stops it: the files this run wrote are removed, and the
/// warning names the command to run again.
///
/// # Errors
/// A file that cannot be written; [`CommandError::Interrupted`].
fn write_files(
    dir: &Path,
    files: &[(PathBuf, String)],
    cancel: &tokio::sync::watch::Receiver<bool>,
    request: &AdoptRequest,
    ui: &Ui,
) -> Result<(), CommandError> {
    let mut written: Vec<PathBuf> = Vec::new();
    for (path, text) in files {
        if *cancel.borrow() {
            for f in written.iter().rev() {
                let _ = std::fs::remove_file(f);
            }
            ui.warn(&format!(
                "{} received while writing the adoption into {}: the {} file(s) this run wrote \
                 were removed and no state was saved; run `{}` to start over",
                ui.interrupted_by(),
                dir.display(),
                written.len(),
                request.command
            ));
            return Err(CommandError::Interrupted);
        }
        let full = dir.join(path);
        if full.exists() {
            continue;
        }
        let folder = talosprov_base::paths::folder_of(&full);
        std::fs::create_dir_all(folder)
            .with_context(|| format!("cannot create the folder of {}", full.display()))?;
        let partial = folder.join(format!(
            ".{}.adopting",
            full.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        std::fs::write(&partial, text)
            .and_then(|()| std::fs::rename(&partial, &full))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&partial);
            })
            .with_context(|| format!("cannot write {}", full.display()))?;
        written.push(full);
    }
    Ok(())
}

/// Whether `state` holds no cluster: no secrets and no records.
fn holds_nothing(s: &State) -> bool {
    s.secrets.is_none()
        && s.resources.vms.is_empty()
        && s.resources.configs.is_empty()
        && s.resources.images.is_empty()
        && s.resources.pools.is_empty()
        && s.resources.pci_mappings.is_empty()
}

/// Refuse files the folder already holds: any without `--merge` (unless
/// `unsaved`: they are the same as adopt writes, and no state was saved, as
/// an adopt stopped while writing leaves them), one with other content with
/// it.
fn check_files(
    dir: &Path,
    files: &[(PathBuf, String)],
    merge: bool,
    unsaved: bool,
) -> anyhow::Result<()> {
    let same = |full: &Path, text: &str| {
        talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, full)
            .ok()
            .as_deref()
            == Some(text)
    };
    let clash: Vec<String> = files
        .iter()
        .filter(|(p, text)| {
            let full = dir.join(p);
            full.exists() && (!(merge || unsaved) || !same(&full, text))
        })
        .map(|(p, _)| dir.join(p).display().to_string())
        .collect();
    if clash.is_empty() {
        return Ok(());
    }
    let why = if merge {
        "with other content than adopt writes (--merge keeps what is there only when it is the same)"
    } else {
        "adopt writes a new topology; give an empty --out folder"
    };
    // The first few, and how many more: the folder may hold thousands.
    let shown = match clash.len() {
        0..=5 => clash.join(", "),
        n => format!("{} and {} more", clash[..5].join(", "), n - 5),
    };
    Err(anyhow!("{} already holds {shown}: {why}", dir.display()))
}

/// The state to save: the adoption alone into an empty state; with
/// `merge`, added to what the state holds.
fn merged(
    existing: State,
    adopted: State,
    merge: bool,
    location: &str,
) -> Result<State, CommandError> {
    let s = &existing;
    if holds_nothing(s) {
        let mut state = adopted;
        state.lineage = existing.lineage;
        state.serial = existing.serial;
        return Ok(state);
    }
    if !merge {
        return Err(anyhow!(
            "the state {location} already describes a cluster (lineage {}): adopt writes a new \
             state; give another with --state PATH, or add only what it lacks with --merge",
            s.lineage
        )
        .into());
    }
    let mut state = existing;
    adopt::merge::merge_state(&mut state, &adopted)
        .map_err(|e| anyhow!("cannot merge into the state {location}:\n{e}"))?;
    Ok(state)
}
