//! `apply [PLANFILE]`: the settings resolved once, the state locked, the
//! engine's session (plan anew, check a saved plan, ask, record, execute),
//! then the final Kubernetes gate, shown as a step of the apply.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, watch};

use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_plan::desired::Desired;
use talosprov_plan::kind::resource::EtcdRecovery;
use talosprov_plan::model::Plan;
use talosprov_plan::saved::SavedPlan;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::EtcdRestore;
use talosprov_statefile::format::State;
use talosprov_topology::model::Topology;

use super::gate::{cni, kubernetes_gate};
use super::planning::{PlanRequest, make_plan};
use super::prepare as cluster;
use super::store::{StateSettings, Store, locked};
use crate::apply::context::{Context, Owned, Waits};
use crate::apply::event::Update;
use crate::apply::executor::RunOutcome;
use crate::apply::session::{self, Edges, Planned, Report};
use crate::apply::session::{Question, Shown};
use crate::apply::upgrade::rolling::RolloutOptions;
use crate::apply::upgrade::snapshot::SnapshotPolicy;
use crate::backups::Recovery;
use crate::command::{CommandError, Ui, approve, duration_var, guard};
use crate::health;
use crate::health::gate::GateOutcome;

/// The variable that bounds the wait for Proxmox work in flight after an
/// interruption, in seconds (or a duration such as `20s`).
pub const INTERRUPT_GRACE_VAR: &str = "TALOSPROV_INTERRUPT_GRACE";

/// The variable that bounds each wait of an add-on's object (the API
/// answering, its kind served, its rollout), in seconds or as a duration.
pub const ROLLOUT_WAIT_VAR: &str = "TALOSPROV_ROLLOUT_WAIT";

/// The variable that bounds apply's wait for the Kubernetes nodes, in seconds
/// (or a duration such as `5m`).
pub const READY_WAIT_VAR: &str = "TALOSPROV_READY_WAIT";

/// How long apply's final gate waits for the Kubernetes nodes to be Ready
/// (and the GPUs allocatable) unless [`READY_WAIT_VAR`] says otherwise: the
/// CNI's pods start after the nodes register.
pub const KUBERNETES_READY_WAIT: Duration = Duration::from_secs(600);

/// The bound of the wait for Proxmox work in flight after an interruption:
/// [`INTERRUPT_GRACE_VAR`], else 60 s.
///
/// # Errors
/// A value that is neither seconds nor a duration.
pub fn interrupt_grace() -> anyhow::Result<Duration> {
    duration_var(INTERRUPT_GRACE_VAR, Waits::default().interrupt_grace)
}

/// The bound of each wait of an add-on's object: [`ROLLOUT_WAIT_VAR`], else
/// 10 min.
///
/// # Errors
/// A value that is neither seconds nor a duration.
pub fn rollout_wait() -> anyhow::Result<Duration> {
    duration_var(ROLLOUT_WAIT_VAR, Waits::default().rollout)
}

/// The bound of apply's wait for the Kubernetes nodes: [`READY_WAIT_VAR`],
/// else [`KUBERNETES_READY_WAIT`].
///
/// # Errors
/// A value that is neither seconds nor a duration.
pub fn ready_wait() -> anyhow::Result<Duration> {
    duration_var(READY_WAIT_VAR, KUBERNETES_READY_WAIT)
}

/// What the executor needs, for apply and destroy. With `secrets`, a talosconfig is issued
/// for the run: the `talosconfig` step records it, and it is the one connected with when the
/// state's certificate has expired (see [`cluster::connection_credentials`]).
///
/// # Errors
/// A stored talosconfig that does not parse, an OS CA that cannot sign, missing Proxmox settings, an
/// Image Factory URL that is not one, a malformed [`ROLLOUT_WAIT_VAR`].
pub fn context(
    topology: &Topology,
    state: &State,
    secrets: Option<&SecretsBundle>,
    desired: Desired,
    offline_kubeconfig: Sensitive,
    interrupt_grace: Duration,
    ui: &Ui,
) -> anyhow::Result<Context> {
    let fresh_talosconfig: Option<Sensitive> = secrets
        .map(|s| cluster::new_talosconfig(topology, s).map(|t| Sensitive::new(t.to_yaml())))
        .transpose()?;
    let credentials = cluster::connection_credentials(
        state
            .outputs
            .talosconfig
            .as_ref()
            .map(|t| t.value.expose().as_str()),
        fresh_talosconfig.as_ref().map(|t| t.expose().as_str()),
        time::OffsetDateTime::now_utc(),
    )?;
    // An expired kubeconfig is not connected with: the one signed offline is.
    let kubeconfig = state.outputs.kubeconfig.as_ref().map(|k| {
        let now = time::OffsetDateTime::now_utc();
        if cluster::kubeconfig_usable(k.value.expose(), now)
            || offline_kubeconfig.expose().is_empty()
        {
            k.value.clone()
        } else {
            offline_kubeconfig.clone()
        }
    });
    let started_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    Ok(Context {
        proxmox: cluster::proxmox_client(topology, ui)?,
        factory: cluster::factory_client(topology)?,
        desired,
        schematics: cluster::schematics(topology),
        credentials,
        ips: cluster::node_ips(topology),
        recorded_vms: state.resources.vms.clone(),
        owned: Owned::of(state),
        recorded_configs: state.resources.configs.clone(),
        recorded_machineconfigs: state
            .outputs
            .machineconfigs
            .iter()
            .map(|(host, o)| (host.clone(), o.value.clone()))
            .collect(),
        recorded_images: state.resources.images.clone(),
        offline_kubeconfig,
        fresh_talosconfig,
        kubeconfig: std::sync::Mutex::new(kubeconfig),
        kube: tokio::sync::OnceCell::new(),
        started_at,
        waits: Waits {
            interrupt_grace,
            rollout: rollout_wait()?,
            ..Waits::default()
        },
        rollout: RolloutOptions {
            backoff: Waits::default().backoff,
            ..RolloutOptions::new(SnapshotPolicy::Skip)
        },
        recovery: None,
    })
}

/// The command's result for how a plan's changes ended: an interruption
/// warns that the finished steps are saved and that `again` (the command
/// line that resumes the run) continues it, and is
/// [`CommandError::Interrupted`]; failures are listed.
///
/// # Errors
/// As above.
pub(crate) fn run_result(outcome: RunOutcome, again: &str, ui: &Ui) -> Result<(), CommandError> {
    match outcome {
        RunOutcome::Done => Ok(()),
        RunOutcome::Interrupted => {
            ui.warn(&format!(
                "interrupted: the finished steps are saved in the state; run `{again}` to continue"
            ));
            Err(CommandError::Interrupted)
        }
        RunOutcome::Failed(failures) => Err(anyhow::anyhow!(
            "{} change(s) failed; the finished steps are saved, and `{again}` continues from \
             them:\n  {}",
            failures.len(),
            failures
                .iter()
                .map(|(a, m)| format!("{a}: {m}"))
                .collect::<Vec<_>>()
                .join("\n  ")
        )
        .into()),
    }
}

/// The commands that take up an apply where a signal stopped it, each with
/// the flags that find the topology and the state.
#[derive(Debug, Clone)]
pub(super) struct Resume {
    /// Stopped while planning (nothing changed): the command as it was
    /// given (`talosprov apply plan.tfplan`, `talosprov rotate-ca --os`).
    pub(super) planning: String,
    /// Stopped while changing: the command that continues from the saved
    /// steps (a saved plan is stale by then: `talosprov apply`).
    pub(super) running: String,
    /// For `etcd restore`, once etcd is recovered (the state no longer
    /// records the restore): what makes the rest, `talosprov apply`.
    pub(super) recovered: String,
}

impl Resume {
    /// The same command for every case.
    pub(super) fn same(command: String) -> Resume {
        Resume {
            planning: command.clone(),
            running: command.clone(),
            recovered: command,
        }
    }
}

/// `apply`'s flags, as parsed.
#[derive(Debug, Clone)]
pub struct ApplyRequest {
    /// Where the topology and the state are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// A plan saved with `plan -out FILE`, applied exactly.
    pub planfile: Option<PathBuf>,
    /// `-auto-approve`.
    pub auto_approve: bool,
    /// `-parallelism`: changes at once.
    pub parallelism: usize,
    /// `-target`s.
    pub targets: Vec<Address>,
    /// `--max-parallel-upgrades`: workers upgraded at once.
    pub max_parallel_upgrades: NonZeroUsize,
    /// `--skip-etcd-snapshot`.
    pub skip_etcd_snapshot: bool,
    /// `--staged`.
    pub staged: bool,
    /// `-refresh-only`.
    pub refresh_only: bool,
    /// `-refresh` (false: plan from the state alone).
    pub refresh: bool,
    /// `-allow-data-loss=ADDR`s: the VMs whose data disks the plan may
    /// delete with their volumes (a disk that left the topology's `disks`).
    pub allow_data_loss: Vec<Address>,
    /// `-allow-new-etcd`: where etcd is gone on every control plane,
    /// bootstrap a new, empty one (the Kubernetes objects are lost).
    pub allow_new_etcd: bool,
}

impl ApplyRequest {
    /// The commands that resume this apply: as given while it plans; then
    /// `talosprov apply` with its `-target`s (a saved plan is stale once a
    /// step is saved).
    fn resume(&self) -> Resume {
        let targets: Vec<String> = self
            .targets
            .iter()
            .flat_map(|t| ["-target".to_owned(), t.to_string()])
            .collect();
        let mut words: Vec<&str> = vec!["apply"];
        words.extend(targets.iter().map(String::as_str));
        let running = super::store::command_line(&self.state, &words);
        let planning = match &self.planfile {
            Some(file) => {
                let file = file.display().to_string();
                super::store::command_line(&self.state, &["apply", &file])
            }
            None => running.clone(),
        };
        Resume {
            planning,
            recovered: running.clone(),
            running,
        }
    }
}

/// `apply`'s settings, resolved once from the request, the saved plan, the
/// environment and the defaults, before any lock is taken (the way ripgrep
/// turns its `LowArgs` into `HiArgs`): every check across flags happens here,
/// so a wrong combination costs no lock and no request.
#[derive(Debug)]
pub(super) struct ApplySettings {
    /// The validated topology.
    pub(super) topology: Topology,
    /// The saved plan to apply exactly, if one was given.
    pub(super) saved: Option<SavedPlan>,
    /// `-target`s, or the saved plan's.
    pub(super) targets: Vec<Address>,
    /// Stage config changes (the flag, or how the saved plan was made).
    pub(super) staged: bool,
    /// Plan from the state alone: `-refresh=false`, or a plan saved that way.
    pub(super) offline: bool,
    /// `-refresh-only`.
    pub(super) refresh_only: bool,
    /// Apply without asking: `-auto-approve`, or a saved plan.
    pub(super) approved: bool,
    /// Changes at once (`-parallelism`, at least 1).
    pub(super) parallelism: usize,
    /// Workers upgraded at once.
    pub(super) max_parallel_upgrades: NonZeroUsize,
    /// Take etcd snapshots before touching a control plane (`None`:
    /// `--skip-etcd-snapshot`), with the default folder in this one when
    /// the topology has no `backup:` section.
    pub(super) snapshots: Option<PathBuf>,
    /// The local state's folder, else the topology's: where the default
    /// snapshot folder is.
    pub(super) snapshot_folder: PathBuf,
    /// The bound of the wait for Proxmox work after an interruption.
    pub(super) interrupt_grace: Duration,
    /// The bound of the final wait for the Kubernetes nodes.
    pub(super) ready_wait: Duration,
    /// `targets` are the command's own, not the user's `-target`s: no
    /// targeting warning.
    pub(super) own_targets: bool,
    /// The VMs whose data disks the plan may delete (`-allow-data-loss`).
    pub(super) allow_data_loss: Vec<Address>,
    /// What to plan when etcd is gone on every control plane.
    pub(super) etcd: EtcdRecovery,
    /// The snapshot the bootstrap recovers etcd from (`etcd restore`).
    pub(super) recovery: Option<Arc<Recovery>>,
    /// The restore this apply is part of (`etcd restore`), recorded in the
    /// state before the first change; the recovering bootstrap clears it.
    pub(super) restore: Option<EtcdRestore>,
    /// The commands that resume the run where a signal stops it.
    pub(super) resume: Resume,
}

impl ApplySettings {
    /// Resolve and check `request`.
    ///
    /// # Errors
    /// Topology diagnostics, an unreadable or sealed saved plan, and any
    /// combination the flags cannot mean together: a saved plan with
    /// `-target`, `--staged` with a plan saved without it, `-refresh-only`
    /// with `-refresh=false`, `-parallelism 0`, a malformed
    /// `TALOSPROV_INTERRUPT_GRACE`, `TALOSPROV_ROLLOUT_WAIT` or
    /// `TALOSPROV_READY_WAIT`.
    fn resolve(request: &ApplyRequest, ui: &Ui) -> Result<ApplySettings, CommandError> {
        let fail = |msg: &str| -> CommandError { anyhow::anyhow!("{msg}").into() };
        if request.planfile.is_some() && !request.targets.is_empty() {
            return Err(fail(
                "a saved plan keeps the targets it was made with: drop -target, or make a new plan",
            ));
        }
        if request.refresh_only && !request.refresh {
            return Err(fail(
                "-refresh-only reads the cluster back: it cannot be used with -refresh=false",
            ));
        }
        if request.parallelism == 0 {
            return Err(fail("-parallelism must be at least 1"));
        }
        let interrupt_grace = interrupt_grace()?;
        let ready_wait = ready_wait()?;
        rollout_wait()?;
        let topology = cluster::load_topology(&request.state.file, ui)?;
        let saved = request
            .planfile
            .as_deref()
            .map(cluster::read_saved_plan)
            .transpose()?;
        if request.staged && saved.as_ref().is_some_and(|s| !s.staged) {
            return Err(fail(
                "the saved plan was made without --staged, and is applied as it was made: make it \
                 with `talosprov plan --staged -out FILE`, or drop --staged",
            ));
        }
        let targets: Vec<Address> = match &saved {
            Some(s) => s
                .targets
                .iter()
                .map(|t| t.parse())
                .collect::<Result<_, _>>()
                .context("the saved plan names an invalid target")?,
            None => request.targets.clone(),
        };
        let snapshot_folder = request.state.snapshot_folder();
        let snapshots = (!request.skip_etcd_snapshot).then(|| snapshot_folder.clone());
        let resume = request.resume();
        Ok(ApplySettings {
            offline: !request.refresh || saved.as_ref().is_some_and(|s| !s.plan.refreshed),
            staged: saved.as_ref().map_or(request.staged, |s| s.staged),
            approved: request.auto_approve || saved.is_some(),
            targets,
            refresh_only: request.refresh_only,
            parallelism: request.parallelism,
            max_parallel_upgrades: request.max_parallel_upgrades,
            snapshots,
            snapshot_folder,
            interrupt_grace,
            ready_wait,
            own_targets: false,
            allow_data_loss: request.allow_data_loss.clone(),
            etcd: if request.allow_new_etcd || saved.as_ref().is_some_and(|s| s.allow_new_etcd) {
                EtcdRecovery::NewEtcd
            } else {
                EtcdRecovery::Refuse
            },
            recovery: None,
            restore: None,
            resume,
            topology,
            saved,
        })
    }
}

/// How an apply ended, for the view to word.
#[derive(Debug)]
pub enum Applied {
    /// `-refresh-only`: `recorded` observed changes were saved (0: the state
    /// already matched, nothing was saved).
    Refreshed {
        /// The records saved.
        recorded: usize,
    },
    /// The plan ran (or had nothing to do): every change it showed is made.
    Done {
        /// The plan that was applied.
        plan: Box<Plan>,
        /// The final Kubernetes gate's outcome, when it ran: not for a plan
        /// with nothing to do, a targeted plan, conflicts, or a cluster
        /// without a CNI. The view says it failed (the changes are applied,
        /// but the cluster is not Ready).
        gate: Option<GateOutcome>,
        /// How long the gate could wait.
        ready_wait: Duration,
        /// The plan was made with `-target`: the view reminds that it may be
        /// incomplete.
        targeted: bool,
    },
}

/// Run `apply`: resolve, lock, plan (or check the saved plan), ask, record,
/// execute, then wait for the cluster in the final gate.
///
/// # Errors
/// Topology diagnostics, a held lock (naming its holder), a stale saved plan,
/// refused changes, failed steps (listed); [`CommandError::Interrupted`] on a
/// signal.
pub async fn apply(request: &ApplyRequest, ui: &Ui) -> Result<Applied, CommandError> {
    let settings = ApplySettings::resolve(request, ui)?;
    let store = request.state.open(ui)?;
    locked(&store, request.lock_timeout, "apply", ui, async |cancel| {
        apply_locked(&settings, &store, ui, cancel).await
    })
    .await
}

/// `apply` with the state locked: the engine's session does the work with
/// [`Engine`] as its edges, then the final gate runs.
pub(super) async fn apply_locked(
    settings: &ApplySettings,
    store: &Store,
    ui: &Ui,
    cancel: watch::Receiver<bool>,
) -> Result<Applied, CommandError> {
    let session = session::Settings {
        saved: settings.saved.clone(),
        refresh_only: settings.refresh_only,
        parallelism: settings.parallelism,
        max_parallel_upgrades: settings.max_parallel_upgrades,
        restore: settings.restore.clone(),
    };
    let mut edges = Engine {
        settings,
        store,
        ui,
        cancel: cancel.clone(),
        viewing: false,
    };
    let report = session::apply(&session, store, &mut edges, cancel.clone()).await;
    if edges.viewing {
        ui.updates_done().await;
    }
    let targeted = !settings.targets.is_empty();
    let done = |plan: Plan, gate: Option<GateOutcome>| Applied::Done {
        plan: Box::new(plan),
        gate,
        ready_wait: settings.ready_wait,
        targeted,
    };
    match report? {
        Report::Refreshed { recorded } => Ok(Applied::Refreshed { recorded }),
        Report::Unchanged(plan) => Ok(done(plan, None)),
        Report::Ran(plan, outcome) => {
            run_result(outcome, &again(settings, store).await, ui)?;
            // The final gate is a step of the apply: the view's
            // `Apply complete!` comes after it.
            // A restore targets the control planes, and still waits for
            // the Kubernetes API and every node.
            let gate = if (targeted && settings.recovery.is_none()) || !plan.conflicts.is_empty() {
                None
            } else {
                final_gate(settings, store, ui, cancel).await?
            };
            Ok(done(plan, gate))
        }
    }
}

/// The command that continues a run stopped while changing: a restore's own
/// until its bootstrap recovered etcd (the state then no longer records
/// it), then the one that makes the rest.
async fn again(settings: &ApplySettings, store: &Store) -> String {
    if settings.restore.is_none() {
        return settings.resume.running.clone();
    }
    let unfinished = match store.load().await {
        Ok(Some(l)) => l.state.etcd_restore.is_some(),
        Ok(None) | Err(_) => true,
    };
    if unfinished {
        settings.resume.running.clone()
    } else {
        settings.resume.recovered.clone()
    }
}

/// Apply's final gate, when the cluster has a CNI (its own or an add-on's):
/// every node registered and Ready, GPUs allocatable where a GPU add-on is
/// declared, waiting up to `settings.ready_wait` and telling the frontend
/// what it waits for (every [`health::PROGRESS_EVERY`] while something is
/// missing), then how it ended. A signal stops the wait: every change is
/// made by then, and the warning says so.
///
/// # Errors
/// The state cannot be read back; [`CommandError::Interrupted`].
async fn final_gate(
    settings: &ApplySettings,
    store: &Store,
    ui: &Ui,
    mut cancel: watch::Receiver<bool>,
) -> Result<Option<GateOutcome>, CommandError> {
    let Some(loaded) = store.load().await? else {
        return Ok(None);
    };
    let topology = &settings.topology;
    let cni = cni(topology, &loaded.state);
    let Some(gate) = kubernetes_gate(topology, &loaded.state, cni.as_ref(), settings.ready_wait)
    else {
        return Ok(None);
    };
    let outcome = tokio::select! {
        outcome = health::gate::wait_for_kubernetes(&gate, |event| ui.gate(&event)) => outcome,
        _ = cancel.wait_for(|c| *c) => {
            ui.warn(&format!(
                "{} received while waiting for the Kubernetes nodes to be Ready: every change \
                 is applied and saved; `talosprov health` checks the cluster again",
                ui.interrupted_by()
            ));
            return Err(CommandError::Interrupted);
        }
    };
    ui.gate_outcome(&outcome, settings.ready_wait);
    Ok(Some(outcome))
}

/// What the engine's session needs from around it: planning against Proxmox
/// and Talos, the frontend's views and question, and the real provider.
struct Engine<'a> {
    settings: &'a ApplySettings,
    store: &'a Store,
    ui: &'a Ui,
    cancel: watch::Receiver<bool>,
    /// The progress view was started (the changes began).
    viewing: bool,
}

impl Edges for Engine<'_> {
    type Provider = Context;
    type Error = CommandError;

    /// Refuse to configure nodes whose secrets are lost or that belong to
    /// another cluster, then plan. Planning only reads: an interruption
    /// stops it at once.
    async fn plan(&mut self, state: Option<&State>) -> Result<Planned, CommandError> {
        let settings = self.settings;
        let topology = &settings.topology;
        let saved_secrets = settings.saved.as_ref().and_then(|s| s.secrets.as_ref());
        // Before any secrets are generated or first used: even a run planned
        // offline asks the nodes, since it is about to configure them.
        guard::refuse_lost_secrets(topology, state, self.store)?;
        guard::refuse_existing_cluster(topology, state, saved_secrets, self.store).await?;
        let mut interrupt = self.cancel.clone();
        let request = PlanRequest {
            offline: settings.offline,
            targets: &settings.targets,
            staged: settings.staged,
            warn_targets: !settings.own_targets,
            etcd: settings.etcd,
        };
        let planned = tokio::select! {
            planned = make_plan(topology, state, settings.saved.as_ref(), &request, self.ui) => planned?,
            _ = interrupt.wait_for(|c| *c) => {
                super::plan::warn_planning_interrupted(self.ui, &settings.resume.planning);
                return Err(CommandError::Interrupted);
            }
        };
        let mut planned = planned;
        super::plan::backup_warnings(
            &mut planned.plan,
            topology,
            self.store,
            &settings.snapshot_folder,
            !settings.offline,
        )
        .await;
        if settings.recovery.is_some()
            && !planned
                .plan
                .changes
                .iter()
                .any(|c| *c.address() == Address::Bootstrap)
        {
            let unfinished =
                state
                    .and_then(|s| s.etcd_restore.as_ref())
                    .map_or_else(String::new, |r| {
                        format!(
                            ". The restore from {} stays unfinished: run `{}` again once every \
                         control plane answers",
                            r.from, settings.resume.running
                        )
                    });
            return Err(anyhow::anyhow!(
                "etcd is not gone on every control plane as far as talosprov can read (a control \
                 plane that does not answer may still hold it: see `talosprov plan`), so there is \
                 nothing to restore; nothing was changed{unfinished}"
            )
            .into());
        }
        if !settings.refresh_only {
            refuse_broken(&planned.plan)?;
            refuse_data_loss(&planned.plan, &settings.allow_data_loss, self.ui)?;
        }
        Ok(planned)
    }

    fn show(&mut self, shown: Shown<'_>) -> Result<(), CommandError> {
        Ok(self.ui.show(shown)?)
    }

    async fn approve(&mut self, question: Question) -> Result<(), CommandError> {
        let flag = match question {
            Question::Apply => "-auto-approve (or apply a plan saved with `plan -out FILE`)",
            Question::RecordDrift
            | Question::Destroy
            | Question::Forget(_)
            | Question::ForceUnlock { .. }
            | Question::RotateCa(_)
            | Question::ResetControlPlanes(_) => "-auto-approve",
        };
        approve(
            self.ui,
            self.settings.approved,
            &question,
            flag,
            "cancelled: nothing was changed",
            self.cancel.clone(),
        )
        .await
    }

    fn talosconfig(&mut self, secrets: &SecretsBundle) -> anyhow::Result<Sensitive> {
        let t = cluster::new_talosconfig(&self.settings.topology, secrets)?;
        Ok(Sensitive::new(t.to_yaml()))
    }

    fn provider(
        &mut self,
        state: &State,
        desired: Desired,
        secrets: &SecretsBundle,
    ) -> anyhow::Result<Context> {
        let topology = &self.settings.topology;
        let offline = cluster::offline_kubeconfig(topology, secrets)?;
        let mut ctx = context(
            topology,
            state,
            Some(secrets),
            desired,
            offline,
            self.settings.interrupt_grace,
            self.ui,
        )
        .context("cannot prepare the apply")?;
        ctx.rollout.etcd_snapshot = match &self.settings.snapshots {
            None => SnapshotPolicy::Skip,
            Some(beside) => SnapshotPolicy::Archive(Arc::new(crate::backups::for_apply(
                topology,
                state,
                secrets,
                beside,
                cluster::state_keys()?,
            )?)),
        };
        ctx.recovery = self.settings.recovery.clone();
        Ok(ctx)
    }

    fn events(&mut self) -> mpsc::UnboundedSender<Update> {
        self.viewing = true;
        self.ui.updates()
    }
}

/// Refuse, before anything is changed, a plan with something broken that
/// only an explicit choice mends (`Plan::broken`: etcd gone on every control
/// plane).
///
/// # Errors
/// The refusal, with each problem and its ways out.
fn refuse_broken(plan: &Plan) -> Result<(), CommandError> {
    if plan.broken.is_empty() {
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "the plan cannot be applied as it is; nothing was changed:\n  {}",
        plan.broken
            .iter()
            .map(|b| match &b.address {
                Some(a) => format!("{a}: {}", b.message),
                None => b.message.clone(),
            })
            .collect::<Vec<_>>()
            .join("\n  ")
    )
    .into())
}

/// Refuse, before anything is changed, a plan that deletes data disks of a
/// VM not named by `-allow-data-loss`; warn of a named VM whose disks the
/// plan keeps.
///
/// # Errors
/// The refusal, naming each VM, its disks and the flag that allows it.
fn refuse_data_loss(plan: &Plan, allowed: &[Address], ui: &Ui) -> Result<(), CommandError> {
    let losses = plan.data_losses();
    let refused: Vec<String> = losses
        .iter()
        .filter(|(address, _)| !allowed.contains(address))
        .map(|(address, disks)| {
            let named: Vec<String> = disks.iter().map(|(k, v)| format!("{k} ({v})")).collect();
            format!(
                "{address}: {} (allow it with -allow-data-loss={address})",
                named.join(", ")
            )
        })
        .collect();
    for address in allowed {
        if !losses.iter().any(|(a, _)| *a == address) {
            ui.warn(&format!(
                "-allow-data-loss={address}: the plan deletes no data disk of {address}"
            ));
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    Err(anyhow::anyhow!(
        "the plan deletes data disks with their volumes and the data on them, which apply \
         does only when told (nothing was changed):\n  {}",
        refused.join("\n  ")
    )
    .into())
}

/// Run `plan`'s changes with the frontend's progress view (for `destroy`);
/// `again` is the command that continues it after a signal.
///
/// # Errors
/// As [`run_result`]; a state that cannot be saved.
pub(crate) async fn run_plan(
    ctx: Context,
    plan: &Plan,
    saver: &mut crate::apply::executor::Saver<'_, talosprov_backend::StateBackend>,
    parallelism: usize,
    again: &str,
    ui: &Ui,
    cancel: watch::Receiver<bool>,
) -> Result<(), CommandError> {
    let tx = ui.updates();
    let outcome =
        crate::apply::executor::execute(Arc::new(ctx), plan, saver, parallelism, &tx, cancel).await;
    drop(tx);
    ui.updates_done().await;
    run_result(outcome?, again, ui)
}
