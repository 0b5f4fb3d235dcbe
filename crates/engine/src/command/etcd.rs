//! The etcd commands.
//!
//! `etcd snapshot`: an etcd snapshot streamed from a healthy control plane
//! (Talos's `EtcdSnapshot`), age-encrypted as it streams, into `--to`, the
//! `backup:` destination or the local default folder, with its manifest; then
//! the `backup:` section's retention. Reads the state without locking it and
//! never writes it.
//!
//! `etcd restore`: a cluster whose etcd is gone on every control plane brought
//! back from a snapshot, as Talos documents disaster recovery: the snapshot
//! checked first, then an apply of the control planes whose bootstrap uploads
//! it (`EtcdRecover`) and bootstraps with `recover_etcd`.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};

use talosprov_backup::destination::Destination;
use talosprov_backup::manifest::Manifest;
use talosprov_backup::name::ArchiveName;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_plan::kind::resource::EtcdRecovery;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::EtcdRestore;
use talosprov_statefile::format::State;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_topology::model::Topology;

use super::apply::{Applied, ApplySettings, Resume};
use super::store::{StateSettings, Store, locked, no_state};
use super::{CommandError, Ui};
use crate::backups::{self, Archiver, Live, Recovery, Taken};

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

/// Take a snapshot (see the module's docs). A revision that cannot be read
/// and a retention that cannot finish are warnings; the snapshot is saved.
/// The first Ctrl-C or SIGTERM stops it: the upload is aborted (no archive,
/// no partial file, no multipart upload is left), the warning says what it
/// was doing and the command that takes one again; a second signal exits at
/// once.
///
/// # Errors
/// No healthy control plane, a destination or key that cannot be used, the
/// stream or the upload failing (nothing is left in the destination);
/// [`CommandError::Interrupted`].
pub async fn snapshot(request: &SnapshotRequest, ui: &Ui) -> Result<Taken, CommandError> {
    let mut words = vec!["etcd", "snapshot"];
    if let Some(to) = &request.to {
        words.extend(["--to", to]);
    }
    for r in &request.recipients {
        words.extend(["--recipient", r]);
    }
    let again = super::store::command_line(&request.state, &words);
    let (result, _) = super::store::interruptible(
        ui,
        async |mut cancel| {
            let stopped = async |cancel: &mut tokio::sync::watch::Receiver<bool>| {
                let _ = cancel.wait_for(|c| *c).await;
            };
            let prepared = tokio::select! {
                p = prepare_snapshot(request, ui) => p?,
                () = stopped(&mut cancel) => {
                    ui.warn(&format!(
                        "{} received while connecting to the control planes: stopped before \
                         the snapshot began; nothing was written; run `{again}` to take one",
                        ui.interrupted_by()
                    ));
                    return Err(CommandError::Interrupted);
                }
            };
            let (archiver, client, node, version, live) = prepared;
            let source = backups::Source {
                client: &client,
                node: &node,
                talos_version: &version,
            };
            let taken = archiver
                .take_until(&source, &live, "etcd snapshot", stopped(&mut cancel))
                .await?;
            let Some(taken) = taken else {
                ui.warn(&format!(
                    "{} received while streaming the etcd snapshot from {node} to {}: stopped; \
                     the partial archive was removed and nothing was saved; run `{again}` to \
                     take one",
                    ui.interrupted_by(),
                    archiver.location()
                ));
                return Err(CommandError::Interrupted);
            };
            if let Some(e) = &taken.prune_error {
                ui.warn(&format!(
                    "the snapshot is saved, but retention could not finish: {e}"
                ));
            }
            Ok(taken)
        },
        |signal| {
            ui.warn(&format!(
                "{signal} received again: exiting at once; a partial archive in a folder is \
                 removed, one in S3 is left to the bucket's lifecycle rule"
            ));
        },
    )
    .await;
    result
}

/// What a snapshot needs before it streams: the archiver, a healthy
/// control plane (connected, with its hostname and Talos version), and
/// what the Kubernetes API says of the cluster.
async fn prepare_snapshot(
    request: &SnapshotRequest,
    ui: &Ui,
) -> Result<(Archiver, TalosClient, String, String, Live), CommandError> {
    let Loaded {
        topology,
        state,
        secrets,
    } = load(&request.state, ui).await?;
    let beside = request.state.snapshot_folder();
    let (location, retention) = backups::target(request.to.as_deref(), &topology, &beside)?;
    let keys = backups::seal_keys(&request.recipients, super::prepare::state_keys()?, &secrets)?;
    let archiver = Archiver::new(location, retention, keys, &topology, &state, &secrets)?;
    let credentials =
        super::health::credentials(&topology, &state).context("cannot connect to the nodes")?;
    let (client, node, version) = healthy_member(&topology, &state, &credentials).await?;
    let live = archiver.live().await.unwrap_or_else(|why| {
        ui.warn(&format!(
            "the etcd revision is not known ({why}): the snapshot is named r0"
        ));
        Live::default()
    });
    Ok((archiver, client, node, version, live))
}

/// What `etcd restore` was asked.
#[derive(Debug, Clone)]
pub struct RestoreRequest {
    /// Where the state and topology are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// `--from`: `latest`, a folder or `s3://` destination (its newest
    /// archive of this cluster), or one archive's path or URL.
    pub from: String,
    /// `--identity FILE`: the age identity for an archive sealed to
    /// recipients.
    pub identity: Option<PathBuf>,
    /// `--skip-hash-check`: Talos's `recover_skip_hash_check`.
    pub skip_hash_check: bool,
    /// `-auto-approve`.
    pub auto_approve: bool,
    /// `-parallelism`.
    pub parallelism: usize,
    /// `--force`: restore over a healthy etcd, resetting every control plane
    /// first (after its own approval).
    pub force: bool,
}

/// The archive `from` names, in its opened destination: `latest` is the
/// newest of this cluster in the `backup:` destination (else the default
/// folder beside the state); an archive's path or URL (or its manifest's)
/// is that archive; any other folder or `s3://` URL is a destination, whose
/// newest archive of this cluster is taken.
///
/// # Errors
/// A destination that is not one or cannot be listed; no archive of this
/// cluster in it.
async fn source(
    from: &str,
    topology: &Topology,
    beside: &Path,
) -> anyhow::Result<(Destination, ArchiveName)> {
    let access = backups::s3_access(Some(topology));
    let trimmed = from.trim().trim_end_matches('/');
    let (location, named) = if trimmed == "latest" {
        (backups::target(None, topology, beside)?.0, None)
    } else {
        let (parent, last) = trimmed.rsplit_once('/').unwrap_or((".", trimmed));
        // An archive's or a manifest's name, not a bare stem (a folder may
        // be named like one) nor an s3:// bucket.
        let named = ArchiveName::parse(last).filter(|n| last != n.stem() && parent != "s3:/");
        match named {
            Some(name) => {
                let parent = if parent.is_empty() { "/" } else { parent };
                (
                    talosprov_backup::destination::parse_location(parent, Path::new(""))?,
                    Some(name),
                )
            }
            None => (
                talosprov_backup::destination::parse_location(trimmed, Path::new(""))?,
                None,
            ),
        }
    };
    let destination = Destination::open(location, &access, false)?;
    if let Some(name) = named {
        return Ok((destination, name));
    }
    let cluster = &topology.cluster.name;
    let newest = destination.list(cluster).await?.newest().cloned();
    let name = newest.ok_or_else(|| talosprov_backup::error::BackupError::NoArchive {
        cluster: cluster.clone(),
        location: destination.location().to_string(),
    })?;
    Ok((destination, name))
}

/// Refuse a snapshot of another cluster: its manifest's lineage or etcd CA
/// differs from the state's.
///
/// # Errors
/// The refusal, naming both values.
fn same_cluster(manifest: &Manifest, name: &ArchiveName, loaded: &Loaded) -> anyhow::Result<()> {
    if manifest.lineage != loaded.state.lineage {
        return Err(anyhow!(
            "the snapshot {} is of another cluster ({}): its lineage is {}, the state's is {}; \
             nothing was changed",
            name.archive(),
            manifest.cluster,
            manifest.lineage,
            loaded.state.lineage
        ));
    }
    let ca = backups::etcd_ca_sha256(&loaded.secrets);
    if manifest.etcd_ca_sha256 != ca {
        return Err(anyhow!(
            "the snapshot {} was taken under another etcd CA (SHA-256 {}; the cluster's is {}): \
             it is of another cluster, or of this one before its secrets were replaced; nothing \
             was changed",
            name.archive(),
            manifest.etcd_ca_sha256,
            ca
        ));
    }
    Ok(())
}

/// Read, check and open the snapshot `request.from` names: its manifest,
/// the cluster it is of, its key, and its checksum (the whole archive is
/// decrypted once, to nowhere, before anything is changed).
///
/// # Errors
/// Each refusal, before anything is changed.
async fn checked_recovery(
    request: &RestoreRequest,
    loaded: &Loaded,
    ui: &Ui,
) -> anyhow::Result<Recovery> {
    let beside = request.state.snapshot_folder();
    let (destination, name) = source(&request.from, &loaded.topology, &beside).await?;
    let manifest = destination.read_manifest(&name).await?;
    same_cluster(&manifest, &name, loaded)?;
    let keys = backups::open_keys(
        manifest.key,
        request.identity.as_deref(),
        super::prepare::state_keys()?,
        &loaded.secrets,
    )?;
    ui.note(&format!(
        "Checking the etcd snapshot {} in {} (revision {}, taken {} from {}, {} bytes)",
        name.archive(),
        destination.location(),
        manifest.revision,
        manifest.time,
        manifest.node,
        manifest.plaintext_bytes
    ));
    talosprov_backup::archive::verify(&destination, &name, &manifest, &keys).await?;
    Ok(Recovery {
        destination,
        name,
        manifest,
        keys,
        skip_hash_check: request.skip_hash_check,
    })
}

/// `etcd restore`: check the snapshot, refuse a cluster whose etcd is
/// healthy, then apply the control planes alone (their VMs created again
/// where missing, their configs applied) with a bootstrap that uploads the
/// snapshot and recovers etcd from it; the plan is shown and must be
/// approved. Workers are left alone: they rejoin. The final gate waits for
/// the Kubernetes API and the nodes.
///
/// The state records the restore before its first change (the control
/// planes' resets with `--force`, else the apply's first step) until the
/// bootstrap that recovers etcd: a run stopped in between is resumed by the
/// same command, which the warning gives with the exact snapshot. It first
/// waits for the control planes the stopped run was installing, then plans
/// as the first run did; one that had recovered etcd before it was stopped
/// is finished.
///
/// # Errors
/// A snapshot that cannot be used (another cluster's, a failed checksum, a
/// key that does not open it), a healthy etcd (with how to take it down
/// first), and whatever the apply fails with.
pub async fn restore(request: &RestoreRequest, ui: &Ui) -> Result<Applied, CommandError> {
    if request.parallelism == 0 {
        return Err(anyhow!("-parallelism must be at least 1").into());
    }
    // Checking changes nothing: a signal stops it at once.
    let (checked, _) = super::store::interruptible(
        ui,
        async |mut cancel| {
            tokio::select! {
                c = check_restore(request, ui) => c,
                _ = cancel.wait_for(|c| *c) => {
                    ui.warn(&format!(
                        "{} received while checking the snapshot and the control planes: \
                         nothing was changed; run `{}` to start over",
                        ui.interrupted_by(),
                        restore_command(request)
                    ));
                    Err(CommandError::Interrupted)
                }
            }
        },
        |_| {},
    )
    .await;
    let c = checked?;
    let settings = restore_settings(request, c.topology, c.recovery, &c.mark, c.recovered);
    let store = request.state.open(ui)?;
    locked(
        &store,
        request.lock_timeout,
        "etcd restore",
        ui,
        async |cancel| {
            record_secure(&store, &c.installed).await?;
            if c.recovered {
                record_restore(&store, None).await?;
            } else if c.healthy {
                let resets = Resets {
                    settings: &settings,
                    credentials: &c.credentials,
                    store: &store,
                    mark: &c.mark,
                };
                reset_control_planes(&resets, ui, cancel.clone()).await?;
            }
            super::apply::apply_locked(&settings, &store, ui, cancel).await
        },
    )
    .await
}

/// `etcd restore` as it was given, with the flags that find the topology
/// and the state.
fn restore_command(request: &RestoreRequest) -> String {
    let identity = request.identity.as_ref().map(|p| p.display().to_string());
    let mut words = vec!["etcd", "restore", "--from", request.from.as_str()];
    if let Some(identity) = &identity {
        words.extend(["--identity", identity]);
    }
    if request.skip_hash_check {
        words.push("--skip-hash-check");
    }
    if request.force {
        words.push("--force");
    }
    super::store::command_line(&request.state, &words)
}

/// What a restore found before it changes anything.
struct Checked {
    topology: Topology,
    recovery: Recovery,
    credentials: ClientCredentials,
    /// The restore as the state records it from its first change.
    mark: EtcdRestore,
    /// Control planes seen up in secure mode since a stopped restore.
    installed: Vec<String>,
    /// etcd runs and is healthy (to reset with `--force`).
    healthy: bool,
    /// A stopped restore had recovered etcd: what is left is to finish.
    recovered: bool,
}

/// Load, wait for the control planes a stopped restore was installing,
/// check the snapshot and whether etcd is healthy.
///
/// # Errors
/// A snapshot that cannot be used; a healthy etcd without `--force`.
async fn check_restore(request: &RestoreRequest, ui: &Ui) -> Result<Checked, CommandError> {
    let loaded = load(&request.state, ui).await?;
    let unfinished = loaded.state.etcd_restore.clone();
    let mut installed = Vec::new();
    if let Some(u) = &unfinished {
        ui.note(&format!(
            "An etcd restore from {} (begun {}) is unfinished: this run continues it",
            u.from, u.started
        ));
        if !u.resetting {
            installed = wait_installing(&loaded, ui).await;
        }
    }
    let recovery = checked_recovery(request, &loaded, ui).await?;
    let credentials = super::health::credentials(&loaded.topology, &loaded.state)
        .context("cannot connect to the nodes")?;
    let healthy = healthy_member(&loaded.topology, &loaded.state, &credentials)
        .await
        .ok()
        .map(|(_, node, _)| node);
    let resetting = request.force || unfinished.as_ref().is_some_and(|u| u.resetting);
    let location = recovery.destination.location().to_string();
    let mark = EtcdRestore {
        from: format!(
            "{}/{}",
            location.trim_end_matches('/'),
            recovery.name.archive()
        ),
        started: unfinished
            .as_ref()
            .map_or_else(super::now_rfc3339, |u| u.started.clone()),
        identity: request.identity.as_ref().map(|p| p.display().to_string()),
        skip_hash_check: request.skip_hash_check,
        resetting: false,
    };
    let recovered = match healthy.as_ref() {
        Some(node) if !resetting && unfinished.is_some() => {
            ui.note(&format!(
                "etcd is running and healthy on {node}: the restore recovered it before it was \
                 stopped; finishing"
            ));
            true
        }
        Some(node) if !resetting => return Err(refuse_healthy(node, &loaded.topology).into()),
        _ => false,
    };
    Ok(Checked {
        topology: loaded.topology,
        recovery,
        credentials,
        mark,
        installed,
        healthy: healthy.is_some(),
        recovered,
    })
}

/// The refusal of a restore over a healthy etcd, naming the ways to go on.
fn refuse_healthy(node: &str, topology: &Topology) -> anyhow::Error {
    let ips: Vec<String> = topology.controlplanes().map(|n| n.ip.to_string()).collect();
    anyhow!(
        "etcd is running and healthy on {node}: a restore replaces the cluster's Kubernetes \
         objects with the snapshot's, so it runs only where etcd is gone; nothing was changed. \
         To restore anyway, add --force (every control plane is reset first, after its own \
         approval), or take etcd down yourself (`talosctl reset --graceful=false --reboot -n {}`) \
         and run this again",
        ips.join(",")
    )
}

/// The apply a restore runs: the control planes and the bootstrap,
/// recovering from `recovery` (none once etcd was `recovered`: the apply then
/// makes what is left of the control planes), recording `mark` before its
/// first change, and resumed by the command `mark` gives.
fn restore_settings(
    request: &RestoreRequest,
    topology: Topology,
    recovery: Recovery,
    mark: &EtcdRestore,
    recovered: bool,
) -> ApplySettings {
    let targets: Vec<Address> = topology
        .controlplanes()
        .flat_map(|n| {
            [
                Address::Vm(n.hostname.clone()),
                Address::Config(n.hostname.clone()),
            ]
        })
        .chain([Address::Bootstrap])
        .collect();
    let words = mark.command_words();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let again = super::store::command_line(&request.state, &words);
    ApplySettings {
        topology,
        saved: None,
        targets,
        staged: false,
        offline: false,
        refresh_only: false,
        approved: request.auto_approve,
        parallelism: request.parallelism,
        max_parallel_upgrades: NonZeroUsize::MIN,
        snapshots: None,
        snapshot_folder: request.state.snapshot_folder(),
        interrupt_grace: super::apply::interrupt_grace().unwrap_or(Duration::from_secs(60)),
        ready_wait: super::apply::ready_wait().unwrap_or(super::apply::KUBERNETES_READY_WAIT),
        own_targets: true,
        allow_data_loss: Vec::new(),
        etcd: if recovered {
            EtcdRecovery::Refuse
        } else {
            EtcdRecovery::Restore
        },
        recovery: (!recovered).then(|| Arc::new(recovery)),
        restore: (!recovered).then(|| mark.clone()),
        resume: Resume {
            planning: again.clone(),
            running: again,
            recovered: super::store::command_line(&request.state, &["apply"]),
        },
    }
}

/// Save `mark` as the state's unfinished restore (`None`: none is).
///
/// # Errors
/// The state cannot be loaded or saved.
async fn record_restore(store: &Store, mark: Option<EtcdRestore>) -> Result<(), CommandError> {
    edit_state(store, "the restore", |state| {
        let changed = state.etcd_restore != mark;
        state.etcd_restore = mark;
        changed
    })
    .await
}

/// Load the state, let `edit` change it (it says whether it did), and save
/// it when it did; `what` names what was recorded, for the error.
///
/// # Errors
/// The state cannot be loaded or saved.
async fn edit_state(
    store: &Store,
    what: &str,
    edit: impl FnOnce(&mut State) -> bool,
) -> Result<(), CommandError> {
    let loaded = store.load().await?.ok_or_else(|| no_state(store))?;
    let (mut state, encrypted) = (loaded.state, loaded.encrypted);
    if !edit(&mut state) {
        return Ok(());
    }
    store
        .save(&mut state, encrypted)
        .await
        .with_context(|| format!("cannot record {what} in the state"))?;
    Ok(())
}

/// How long a resumed restore waits for a control plane the stopped run was
/// installing.
const INSTALL_WAIT: Duration = Duration::from_secs(600);

/// Before a resumed restore plans: wait (up to [`INSTALL_WAIT`], saying for
/// whom) until each control plane the state records as given its config but
/// not yet up in secure mode is up in secure mode, so that the plan sees it
/// as it is, not as unreachable mid-install. Returns those that came up in
/// secure mode with the cluster's certificate: what the stopped run's wait
/// would have recorded. One that keeps answering in maintenance mode past
/// Talos's grace did not keep its config (the plan applies it again); one
/// still silent at the deadline is left to the plan, which says what it
/// makes of it.
async fn wait_installing(loaded: &Loaded, ui: &Ui) -> Vec<String> {
    let ca = loaded.secrets.certs.os.crt.clone();
    let mut up = Vec::new();
    for node in loaded.topology.controlplanes() {
        let installing = loaded
            .state
            .resources
            .configs
            .get(&node.hostname)
            .is_some_and(|c| !c.secure_mode);
        if !installing {
            continue;
        }
        let ip = IpAddr::V4(node.ip);
        ui.note(&format!(
            "Waiting up to {} s for {} ({ip}) in secure mode: the stopped restore gave it its \
             machine config, and it was installing",
            INSTALL_WAIT.as_secs(),
            node.hostname
        ));
        match settled(ip, &ca).await {
            Some(talosprov_talos::probe::NodeAnswer::Secure {
                issued_by_ours: true,
            }) => up.push(node.hostname.clone()),
            Some(_) => {}
            None => ui.warn(&format!(
                "{} ({ip}) is not up in secure mode after {} s",
                node.hostname,
                INSTALL_WAIT.as_secs()
            )),
        }
    }
    up
}

/// What the node at `ip` answers once it settles within [`INSTALL_WAIT`]:
/// secure mode, or maintenance mode past Talos's grace; `None` while it
/// stays silent.
async fn settled(ip: IpAddr, ca: &str) -> Option<talosprov_talos::probe::NodeAnswer> {
    use talosprov_talos::probe::NodeAnswer;
    let started = tokio::time::Instant::now();
    let mut maintenance_since = None;
    let backoff = talosprov_retry::Backoff::default();
    for attempt in 0u32.. {
        let now = tokio::time::Instant::now();
        match talosprov_talos::probe::probe_node(ip, Some(ca), Duration::from_secs(3)).await {
            secure @ NodeAnswer::Secure { .. } => return Some(secure),
            NodeAnswer::Maintenance => {
                let since = *maintenance_since.get_or_insert(now);
                if now.duration_since(since) > talosprov_talos::wait::MAINTENANCE_GRACE {
                    return Some(NodeAnswer::Maintenance);
                }
            }
            NodeAnswer::Silent => maintenance_since = None,
        }
        if now.duration_since(started) >= INSTALL_WAIT {
            break;
        }
        tokio::time::sleep(backoff.delay(attempt)).await;
    }
    None
}

/// Record that `hosts` were seen up in secure mode with the cluster's
/// certificate ([`wait_installing`]), as their config step would have.
///
/// # Errors
/// The state cannot be loaded or saved.
async fn record_secure(store: &Store, hosts: &[String]) -> Result<(), CommandError> {
    if hosts.is_empty() {
        return Ok(());
    }
    edit_state(store, "the control planes up in secure mode", |state| {
        for host in hosts {
            if let Some(c) = state.resources.configs.get_mut(host) {
                c.secure_mode = true;
            }
        }
        true
    })
    .await
}

/// How long a reset control plane may take to answer in maintenance mode.
const RESET_WAIT: Duration = Duration::from_secs(600);

/// What [`reset_control_planes`] works with.
struct Resets<'a> {
    settings: &'a ApplySettings,
    credentials: &'a ClientCredentials,
    store: &'a Store,
    /// The restore, recorded (as resetting) before the first reset.
    mark: &'a EtcdRestore,
}

/// `--force` over a healthy etcd: once approved, record the restore as
/// resetting, reset every control plane (not gracefully: etcd is replaced,
/// not left; every partition wiped; a reboot), wait for each in maintenance
/// mode, so that the restore's plan finds etcd gone, and record that the
/// resets are done.
///
/// # Errors
/// Refused or unanswered approval; a reset or wait that fails (the
/// control planes reset so far stay reset, and the state says the restore
/// is unfinished: run the restore again).
async fn reset_control_planes(
    resets: &Resets<'_>,
    ui: &Ui,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<(), CommandError> {
    let settings = resets.settings;
    let nodes: Vec<(String, IpAddr)> = settings
        .topology
        .controlplanes()
        .map(|n| (n.hostname.clone(), IpAddr::V4(n.ip)))
        .collect();
    let question = crate::apply::session::Question::ResetControlPlanes(
        nodes
            .iter()
            .map(|(h, ip)| (h.clone(), ip.to_string()))
            .collect(),
    );
    super::approve(
        ui,
        settings.approved,
        &question,
        "-auto-approve",
        "cancelled: nothing was changed",
        cancel.clone(),
    )
    .await?;
    let resetting = EtcdRestore {
        resetting: true,
        ..resets.mark.clone()
    };
    record_restore(resets.store, Some(resetting)).await?;
    let reset = talosprov_talos::types::ResetOptions {
        graceful: false,
        reboot: true,
        system_partitions: Vec::new(),
    };
    for (host, ip) in &nodes {
        stopped(&cancel, settings, ui, "resetting the control planes")?;
        ui.note(&format!(
            "Resetting {host} ({ip}): its etcd is replaced by the snapshot's"
        ));
        let client = TalosClient::connect_secure(*ip, resets.credentials)
            .await
            .with_context(|| format!("cannot reach {host} to reset it"))?;
        client
            .reset(&reset)
            .await
            .with_context(|| format!("cannot reset {host}"))?;
    }
    for (host, ip) in &nodes {
        stopped(
            &cancel,
            settings,
            ui,
            "waiting for the reset control planes",
        )?;
        ui.note(&format!(
            "Waiting for {host} ({ip}) in maintenance mode (up to {} s)",
            RESET_WAIT.as_secs()
        ));
        let wait = talosprov_talos::wait::wait_maintenance(
            *ip,
            Some(host),
            RESET_WAIT,
            talosprov_retry::Backoff::default(),
        );
        let mut c = cancel.clone();
        tokio::select! {
            waited = wait => {
                waited.with_context(|| {
                    format!("{host} did not come back in maintenance mode after its reset")
                })?;
            }
            _ = c.wait_for(|c| *c) => {
                stopped(&cancel, settings, ui, "waiting for the reset control planes")?;
            }
        }
    }
    record_restore(resets.store, Some(resets.mark.clone())).await
}

/// [`CommandError::Interrupted`], with the warning that says what the
/// restore was `doing` and the command that continues it, once a signal came.
fn stopped(
    cancel: &tokio::sync::watch::Receiver<bool>,
    settings: &ApplySettings,
    ui: &Ui,
    doing: &str,
) -> Result<(), CommandError> {
    if !*cancel.borrow() {
        return Ok(());
    }
    ui.warn(&format!(
        "{} received while {doing}: the state records the restore as unfinished; run `{}` to \
         continue it",
        ui.interrupted_by(),
        settings.resume.running
    ));
    Err(CommandError::Interrupted)
}
