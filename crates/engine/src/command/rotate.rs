//! `rotate-ca --os | --kubernetes`: a CA rotation the way `talosctl rotate-ca` does it
//! (Talos `pkg/rotate/pki/{talos,kubernetes}`, talos#8440), in the three stages of
//! [`talosprov_machine::rotation`]. Each stage is an apply of every node's
//! `config/<hostname>` (the configs render the stage's CAs while the state records the
//! rotation), then a check that every node answers with the client config the stage leads
//! to, then one save of the state that records the next stage with the client configs and
//! secrets that go with it. A run that stops anywhere is resumed by running the command
//! again: nodes already at the recorded stage show no change.

use std::num::NonZeroUsize;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

use talosprov_backend::store::StoreError;
use talosprov_base::sensitive::Sensitive;
use talosprov_base::talosconfig::Talosconfig;
use talosprov_machine::rotation::{self, RotationPlan, kubeconfig_trusting};
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::Output;
use talosprov_statefile::format::State;
use talosprov_statefile::rotation::{Authority, CaRotation, Stage};
use talosprov_topology::model::Topology;

use super::apply::{Applied, ApplySettings, apply_locked, interrupt_grace, ready_wait};
use super::planning::{PlanRequest, make_plan};
use super::prepare as cluster;
use super::store::{StateSettings, Store, locked};
use crate::apply::session::{Question, Shown};
use crate::command::{CommandError, Ui, approve};

/// How long the check after a stage waits for every node to answer with the next client
/// config: apid and the API server reload their certificates a moment after the config.
pub const STAGE_CHECK_WAIT: Duration = Duration::from_secs(60);

/// `rotate-ca`'s flags, as parsed.
#[derive(Debug, Clone)]
pub struct RotateRequest {
    /// Where the topology and the state are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// `--os` or `--kubernetes`.
    pub authority: Authority,
    /// `-auto-approve`.
    pub auto_approve: bool,
    /// `-parallelism`: nodes re-configured at once.
    pub parallelism: usize,
}

/// How a rotation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The CA rotated.
    pub authority: Authority,
    /// The stages this run applied, in order (fewer than three when it resumed).
    pub stages: Vec<Stage>,
}

/// Run `rotate-ca`: lock the state, show the stages, ask, then apply, check and record
/// each stage in turn.
///
/// # Errors
/// No state or no secrets; a rotation of the other CA in progress; changes pending that
/// `apply` must make first; a refused question; a failed stage or check (the state keeps
/// the stage, and running the command again resumes it); [`CommandError::Interrupted`].
pub async fn rotate_ca(request: &RotateRequest, ui: &Ui) -> Result<Rotated, CommandError> {
    if request.parallelism == 0 {
        return Err(anyhow::anyhow!("-parallelism must be at least 1").into());
    }
    let settings = ApplySettings {
        topology: cluster::load_topology(&request.state.file, ui)?,
        saved: None,
        targets: Vec::new(),
        staged: false,
        offline: false,
        refresh_only: false,
        approved: true,
        parallelism: request.parallelism,
        max_parallel_upgrades: NonZeroUsize::MIN,
        snapshots: None,
        snapshot_folder: request.state.snapshot_folder(),
        interrupt_grace: interrupt_grace()?,
        ready_wait: ready_wait()?,
        own_targets: true,
        allow_data_loss: Vec::new(),
        etcd: talosprov_plan::kind::resource::EtcdRecovery::Refuse,
        recovery: None,
        restore: None,
        resume: super::apply::Resume::same(super::store::command_line(
            &request.state,
            &["rotate-ca", &format!("--{}", request.authority.flag())],
        )),
    };
    let store = request.state.open(ui)?;
    locked(
        &store,
        request.lock_timeout,
        "rotate-ca",
        ui,
        async |cancel| rotate_locked(request, settings, &store, ui, cancel).await,
    )
    .await
}

/// The state as loaded, with whether it was encrypted.
async fn load(store: &Store) -> Result<(State, bool), CommandError> {
    let loaded = store
        .load()
        .await
        .map_err(anyhow::Error::new)?
        .ok_or_else(|| anyhow::anyhow!("no state yet: there is no cluster to rotate a CA of"))?;
    Ok((loaded.state, loaded.encrypted))
}

async fn rotate_locked(
    request: &RotateRequest,
    mut settings: ApplySettings,
    store: &Store,
    ui: &Ui,
    cancel: watch::Receiver<bool>,
) -> Result<Rotated, CommandError> {
    let authority = request.authority;
    let (state, _) = load(store).await?;
    let bundle = ready_to_rotate(&state, authority)?;
    let resuming = state.ca_rotation.is_some();
    if !resuming {
        refuse_pending_changes(&settings, &state, ui).await?;
    }
    let topology = &settings.topology;
    let overview = RotationPlan {
        authority,
        cluster: topology.cluster.name.clone(),
        from: state
            .ca_rotation
            .as_ref()
            .map_or(Stage::Accept, |r| r.stage),
        resuming,
        nodes: topology.nodes.iter().map(|n| n.hostname.clone()).collect(),
    };
    ui.show(Shown::Rotation(&overview))?;
    approve(
        ui,
        request.auto_approve,
        &Question::RotateCa(authority),
        "-auto-approve",
        "cancelled: nothing was changed",
        cancel.clone(),
    )
    .await?;
    if !resuming {
        start(store, authority, &bundle).await?;
    }
    settings.targets = topology
        .nodes
        .iter()
        .map(|n| Address::Config(n.hostname.clone()))
        .collect();
    let mut stages = Vec::new();
    loop {
        let (state, _) = load(store).await?;
        let Some(rotation) = state.ca_rotation.clone() else {
            break;
        };
        ui.note(&format!(
            "Stage {} of 3: {}",
            rotation.stage.number(),
            rotation.stage.describe(authority)
        ));
        match apply_locked(&settings, store, ui, cancel.clone()).await? {
            Applied::Done { .. } | Applied::Refreshed { .. } => {}
        }
        if *cancel.borrow() {
            return Err(CommandError::Interrupted);
        }
        advance(&settings.topology, store, ui, cancel.clone()).await?;
        stages.push(rotation.stage);
    }
    Ok(Rotated { authority, stages })
}

/// The state's secrets, when a rotation of `authority` can run: the cluster was applied
/// (secrets and a talosconfig; a kubeconfig for the Kubernetes CA), and no rotation of the
/// other CA is in progress.
///
/// # Errors
/// Naming what is missing, or the rotation to finish first.
fn ready_to_rotate(state: &State, authority: Authority) -> Result<SecretsBundle, CommandError> {
    if let Some(r) = &state.ca_rotation
        && r.authority != authority
    {
        return Err(anyhow::anyhow!(
            "a rotation of the {} is in progress (stage {} of 3): finish it first with \
             `talosprov rotate-ca --{}`",
            r.authority.title(),
            r.stage.number(),
            r.authority.flag()
        )
        .into());
    }
    let bundle = cluster::state_secrets(state)?.ok_or_else(|| {
        anyhow::anyhow!("the state has no secrets bundle: apply the cluster first")
    })?;
    if state.outputs.talosconfig.is_none() || state.resources.configs.is_empty() {
        return Err(anyhow::anyhow!(
            "no node is configured yet: apply the cluster first, then rotate its CAs"
        )
        .into());
    }
    if authority == Authority::Kubernetes && state.outputs.kubeconfig.is_none() {
        return Err(anyhow::anyhow!(
            "the state has no kubeconfig: the cluster is not bootstrapped yet, so there is no \
             Kubernetes CA in use to rotate"
        )
        .into());
    }
    Ok(bundle)
}

/// A new rotation starts from a converged cluster: the stages apply configs and nothing
/// else, so anything else a plan shows must be applied (and seen) first.
///
/// # Errors
/// The plan's changes, shown, and named in the error.
async fn refuse_pending_changes(
    settings: &ApplySettings,
    state: &State,
    ui: &Ui,
) -> Result<(), CommandError> {
    let request = PlanRequest {
        offline: false,
        targets: &[],
        staged: false,
        warn_targets: false,
        etcd: talosprov_plan::kind::resource::EtcdRecovery::Refuse,
    };
    let planned = make_plan(&settings.topology, Some(state), None, &request, ui).await?;
    if planned.plan.is_empty() {
        return Ok(());
    }
    ui.show(Shown::Plan(&planned.plan))?;
    Err(anyhow::anyhow!(
        "the cluster has {} change(s) to apply first: run `talosprov apply`, then rotate-ca",
        planned.plan.changes.len()
    )
    .into())
}

/// Record a new rotation at [`Stage::Accept`], with a new CA, before any node hears of it:
/// an interruption after this point resumes with the same CA.
///
/// # Errors
/// The CA cannot be made, or the state cannot be saved.
async fn start(
    store: &Store,
    authority: Authority,
    bundle: &SecretsBundle,
) -> Result<(), CommandError> {
    let now = time::OffsetDateTime::now_utc();
    let new = rotation::new_ca(authority, &mut rand::rngs::OsRng, now)
        .context("cannot make the new CA")?;
    let mut current = bundle.clone();
    let old_crt = rotation::ca_of(&mut current, authority).crt.clone();
    let (mut state, encrypted) = load(store).await?;
    state.ca_rotation = Some(CaRotation {
        authority,
        stage: Stage::Accept,
        new_crt: new.crt,
        new_key: Sensitive::new(new.key.expose().clone()),
        old_crt,
        started_at: now
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
    });
    save(store, &mut state, encrypted).await
}

async fn save(store: &Store, state: &mut State, encrypted: bool) -> Result<(), CommandError> {
    store.save(state, encrypted).await.map_err(|e: StoreError| {
        anyhow::Error::new(e)
            .context("cannot save the state")
            .into()
    })
}

/// After a stage was applied: check every node with the client config the stage leads
/// to, then record the next stage (or the end) with that config, in one save.
///
/// # Errors
/// A node that does not answer within [`STAGE_CHECK_WAIT`] (nothing is recorded: the
/// next run checks again), or a state that cannot be saved.
async fn advance(
    topology: &Topology,
    store: &Store,
    ui: &Ui,
    cancel: watch::Receiver<bool>,
) -> Result<(), CommandError> {
    let (mut state, encrypted) = load(store).await?;
    let Some(r) = state.ca_rotation.clone() else {
        return Ok(());
    };
    let bundle = cluster::state_secrets(&state)?
        .ok_or_else(|| anyhow::anyhow!("the state lost its secrets bundle"))?;
    // The secrets with the new CA in place (the state's own from the swap on).
    let mut with_new = bundle.clone();
    *rotation::ca_of(&mut with_new, r.authority) = r.new_ca();
    let new_only = r.new_crt.clone();
    let next = ClientConfigs::after(topology, &state, &r, &with_new)?;
    let check = match r.stage {
        // The new client certificate, trusting both: proves the new CA is accepted.
        Stage::Accept => next.clone(),
        // The same certificate, trusting the new CA only: proves every node serves from it.
        Stage::Swap | Stage::Drop => next.trusting_only(&new_only)?,
    };
    check
        .wait_until_accepted(topology, r.authority, ui, cancel)
        .await?;
    next.record(&mut state);
    match r.stage {
        Stage::Accept => {
            state.ca_rotation = Some(CaRotation {
                stage: Stage::Swap,
                ..r
            })
        }
        Stage::Swap => {
            state.secrets = Some(Sensitive::new(secrets_yaml(&with_new)));
            state.ca_rotation = Some(CaRotation {
                stage: Stage::Drop,
                ..r
            });
        }
        Stage::Drop => state.ca_rotation = None,
    }
    save(store, &mut state, encrypted).await
}

/// The state's client configs after a stage: the talosconfig and the kubeconfig.
#[derive(Debug, Clone)]
struct ClientConfigs {
    /// The talosconfig's text.
    talosconfig: Sensitive,
    /// The kubeconfig's text, when the state has one.
    kubeconfig: Option<Sensitive>,
}

impl ClientConfigs {
    /// What a stage of `r` leads to. The rotated CA's client config gets a client
    /// certificate from the new CA after [`Stage::Accept`] and trusts both CAs until
    /// [`Stage::Drop`], then the new one only; the other client config is kept.
    fn after(
        topology: &Topology,
        state: &State,
        r: &CaRotation,
        with_new: &SecretsBundle,
    ) -> anyhow::Result<ClientConfigs> {
        let trusted = match r.stage {
            Stage::Accept | Stage::Swap => r.trusted(),
            Stage::Drop => r.new_crt.clone(),
        };
        let mut out = ClientConfigs {
            talosconfig: state
                .outputs
                .talosconfig
                .as_ref()
                .map(|o| o.value.clone())
                .ok_or_else(|| anyhow::anyhow!("the state has no talosconfig"))?,
            kubeconfig: state.outputs.kubeconfig.as_ref().map(|o| o.value.clone()),
        };
        match r.authority {
            Authority::Os => {
                let mut tc = cluster::new_talosconfig(topology, with_new)?;
                tc.ca = trusted;
                out.talosconfig = Sensitive::new(tc.to_yaml());
            }
            Authority::Kubernetes => {
                let issued = cluster::offline_kubeconfig(topology, with_new)?;
                let text = kubeconfig_trusting(issued.expose(), &trusted)
                    .ok_or_else(|| anyhow::anyhow!("the issued kubeconfig cannot be read"))?;
                out.kubeconfig = Some(Sensitive::new(text));
            }
        }
        Ok(out)
    }

    /// The same client certificates, trusting `pem` only.
    fn trusting_only(&self, pem: &str) -> anyhow::Result<ClientConfigs> {
        let mut tc = Talosconfig::parse(self.talosconfig.expose())
            .context("the talosconfig cannot be read")?;
        let mut out = self.clone();
        if let Some(k) = &self.kubeconfig {
            out.kubeconfig = kubeconfig_trusting(k.expose(), pem).map(Sensitive::new);
        }
        tc.ca = pem.to_owned();
        out.talosconfig = Sensitive::new(tc.to_yaml());
        Ok(out)
    }

    /// Keep them in the state's outputs.
    fn record(&self, state: &mut State) {
        state.outputs.talosconfig = Some(Output::sensitive(self.talosconfig.expose().clone()));
        if let Some(k) = &self.kubeconfig {
            state.outputs.kubeconfig = Some(Output::sensitive(k.expose().clone()));
        }
    }

    /// Wait until every node answers the Talos API with the talosconfig and, for the
    /// Kubernetes CA, the API server lists every node Ready with the kubeconfig: at most
    /// [`STAGE_CHECK_WAIT`], saying what it waits for.
    ///
    /// # Errors
    /// The last refusal, naming the node or the API server, once the wait is over.
    async fn wait_until_accepted(
        &self,
        topology: &Topology,
        authority: Authority,
        ui: &Ui,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<(), CommandError> {
        let what = match authority {
            Authority::Os => "every node to accept the new talosconfig",
            Authority::Kubernetes => "the Kubernetes API to accept the new kubeconfig",
        };
        ui.note(&format!(
            "Waiting for {what} (up to {} s)...",
            STAGE_CHECK_WAIT.as_secs()
        ));
        let deadline = tokio::time::Instant::now() + STAGE_CHECK_WAIT;
        loop {
            let failure = match authority {
                Authority::Os => self.talos_failure(topology).await,
                Authority::Kubernetes => self.kube_failure(topology).await,
            };
            let Some(failure) = failure else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(anyhow::anyhow!(
                    "{failure}; nothing more was recorded: run rotate-ca again to check again \
                     and continue"
                )
                .into());
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = cancel.wait_for(|c| *c) => return Err(CommandError::Interrupted),
            }
        }
    }

    /// The first node that does not answer a Version call with the talosconfig.
    async fn talos_failure(&self, topology: &Topology) -> Option<String> {
        let credentials = match cluster::credentials_from_talosconfig(self.talosconfig.expose()) {
            Ok(c) => c,
            Err(e) => return Some(format!("{e:#}")),
        };
        for node in &topology.nodes {
            let answer = async {
                let client = talosprov_talos::client::TalosClient::connect_secure(
                    node.ip.into(),
                    &credentials,
                )
                .await?;
                client.version().await
            };
            if let Err(e) = answer.await {
                return Some(format!(
                    "{} does not accept the new talosconfig yet: {e}",
                    node.hostname
                ));
            }
        }
        None
    }

    /// Why the API server does not list every node Ready with the kubeconfig, if it does not.
    async fn kube_failure(&self, topology: &Topology) -> Option<String> {
        let Some(kubeconfig) = &self.kubeconfig else {
            return Some("the state has no kubeconfig".to_owned());
        };
        let client =
            match talosprov_kube::client::KubeClient::from_kubeconfig(kubeconfig.expose()).await {
                Ok(c) => c,
                Err(e) => return Some(e.to_string()),
            };
        let nodes = match client.nodes().await {
            Ok(n) => n,
            Err(e) => {
                return Some(format!(
                    "the Kubernetes API does not accept the new kubeconfig yet: {e}"
                ));
            }
        };
        let missing: Vec<&str> = topology
            .nodes
            .iter()
            .filter(|n| !nodes.iter().any(|k| k.name == n.hostname && k.ready))
            .map(|n| n.hostname.as_str())
            .collect();
        (!missing.is_empty()).then(|| format!("nodes not Ready yet: {}", missing.join(", ")))
    }
}
