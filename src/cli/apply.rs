//! `talosprov apply [PLANFILE]`: make the changes of a new plan (after a "yes")
//! or of a saved one, in dependency order, saving the state after every step.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use tokio::sync::watch;

use super::cluster;
use super::planning::make_plan;
use super::secrets_guard;
use super::state_options::{LockOptions, StateOptions};
use super::{CommandError, Outcome};
use talosprov_core::machine::SecretsBundle;
use talosprov_core::plan::{Desired, Plan, SavedPlan};
use talosprov_core::topology::Topology;
use talosprov_engine::apply::session::{self, Edges, Planned, Question, Report, Shown};
use talosprov_engine::apply::upgrade::{RolloutOptions, SnapshotPolicy};
use talosprov_engine::apply::{self, Context, RunOutcome, Saver, Update, Waits};
use talosprov_state::format::State;
use talosprov_state::{Address, Sensitive, StateBackend, StateStore};

/// Arguments of `talosprov apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Topology file and state location.
    #[command(flatten)]
    pub state: StateOptions,

    /// How long to wait for a state lock another run holds.
    #[command(flatten)]
    pub lock: LockOptions,

    /// A plan saved with `talosprov plan -out FILE`: applied without asking,
    /// refused when the state has changed since.
    #[arg(value_name = "PLANFILE")]
    pub planfile: Option<PathBuf>,

    /// Apply without asking for "yes".
    #[arg(long = "auto-approve")]
    pub auto_approve: bool,

    /// At most N changes at once.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub parallelism: usize,

    /// Apply only this resource and what it depends on (repeatable).
    #[arg(long = "target", value_name = "ADDR")]
    pub target: Vec<Address>,

    /// Workers upgraded at once in a Talos rollout (control planes always go
    /// one at a time, first).
    #[arg(long = "max-parallel-upgrades", value_name = "N", default_value_t = NonZeroUsize::MIN)]
    pub max_parallel_upgrades: NonZeroUsize,

    /// Do not save an etcd snapshot before each control-plane upgrade or
    /// removal. Without this flag the snapshot is written to
    /// `etcd-<node>-before-<action>.snapshot` next to the state file (the
    /// topology's folder for a remote state), mode 0600: it holds every
    /// Kubernetes secret.
    #[arg(long = "skip-etcd-snapshot")]
    pub skip_etcd_snapshot: bool,

    /// Stage machine config changes on running nodes: each node takes its
    /// new config at its next reboot. Without it, a change is applied at once
    /// when Talos can, and with a reboot when it must (the node is asked with
    /// a dry run).
    #[arg(long)]
    pub staged: bool,

    /// Record in the state what changed outside talosprov (drift), changing
    /// nothing in Proxmox or on the nodes.
    #[arg(long = "refresh-only", conflicts_with = "planfile")]
    pub refresh_only: bool,

    /// Read back Proxmox and the Talos nodes before planning
    /// (`-refresh=false`: plan from the state alone, as `plan -refresh=false`
    /// does; a plan saved that way is applied that way).
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub refresh: bool,

    /// Print the run as JSON lines on stdout (format_version 1.0: the plan,
    /// each step's events, the final gate, warnings, errors and the summary;
    /// see "Machine-readable output" in talosprov's README.md). Needs
    /// -auto-approve or a saved plan: there is no terminal to ask on.
    #[arg(long)]
    pub json: bool,
}

/// Where etcd snapshots go: the local state file's folder, else the
/// topology's.
fn snapshot_policy(args: &ApplyArgs) -> SnapshotPolicy {
    if args.skip_etcd_snapshot {
        return SnapshotPolicy::Skip;
    }
    let next_to = args.state.state.as_deref().unwrap_or(&args.state.file);
    SnapshotPolicy::SaveIn(talosprov_core::paths::folder_of(next_to).to_path_buf())
}

/// The variable that bounds the wait for Proxmox work in flight after an
/// interruption, in seconds (or a duration such as `20s`).
pub const INTERRUPT_GRACE_VAR: &str = "TALOSPROV_INTERRUPT_GRACE";

/// The bound of the wait for Proxmox work in flight after an interruption:
/// [`INTERRUPT_GRACE_VAR`], else 60 s.
///
/// # Errors
/// A value that is neither seconds nor a duration.
pub(super) fn interrupt_grace() -> anyhow::Result<std::time::Duration> {
    duration_var(INTERRUPT_GRACE_VAR, Waits::default().interrupt_grace)
}

/// The variable that bounds each wait of an add-on's object (the API
/// answering, its kind served, its rollout), in seconds or as a duration.
pub const ROLLOUT_WAIT_VAR: &str = "TALOSPROV_ROLLOUT_WAIT";

/// The bound of each wait of an add-on's object: [`ROLLOUT_WAIT_VAR`], else
/// 10 min.
///
/// # Errors
/// A value that is neither seconds nor a duration.
pub(super) fn rollout_wait() -> anyhow::Result<std::time::Duration> {
    duration_var(ROLLOUT_WAIT_VAR, Waits::default().rollout)
}

/// The duration the variable `name` gives, read as every duration is
/// ([`talosprov_core::duration::parse`]: seconds, or such as `5m`); `default` when it
/// is unset or empty.
///
/// # Errors
/// A value that is neither seconds nor a duration, naming the variable.
fn duration_var(name: &str, default: std::time::Duration) -> anyhow::Result<std::time::Duration> {
    let Some(text) = std::env::var(name).ok().filter(|t| !t.trim().is_empty()) else {
        return Ok(default);
    };
    talosprov_core::duration::parse(&text)
        .map_err(|expected| anyhow::anyhow!("{name}={text:?} is {expected}"))
}

/// What the executor needs, for apply and destroy.
pub(super) fn context(
    topology: &Topology,
    state: &State,
    desired: Desired,
    offline_kubeconfig: Sensitive,
    interrupt_grace: std::time::Duration,
) -> anyhow::Result<Context> {
    let credentials = state
        .outputs
        .talosconfig
        .as_ref()
        .map(|t| cluster::credentials_from_talosconfig(t.value.expose()))
        .transpose()?;
    let started_at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    Ok(Context {
        proxmox: cluster::proxmox_client(topology)?,
        factory: cluster::factory_client(topology)?,
        desired,
        schematics: cluster::schematics(topology),
        credentials,
        ips: cluster::node_ips(topology),
        recorded_vms: state.resources.vms.clone(),
        owned: apply::Owned::of(state),
        recorded_configs: state.resources.configs.clone(),
        recorded_machineconfigs: state
            .outputs
            .machineconfigs
            .iter()
            .map(|(host, o)| (host.clone(), o.value.clone()))
            .collect(),
        recorded_images: state.resources.images.clone(),
        offline_kubeconfig,
        kubeconfig: std::sync::Mutex::new(
            state.outputs.kubeconfig.as_ref().map(|k| k.value.clone()),
        ),
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
    })
}

/// Run the plan's changes with the progress view, and turn the outcome into
/// the command's result (for `destroy`; `apply` runs through the engine's
/// session).
pub(super) async fn run_plan(
    ctx: Context,
    plan: &Plan,
    store: &StateStore<StateBackend>,
    encrypted: bool,
    state: &mut State,
    parallelism: usize,
    cancel: watch::Receiver<bool>,
) -> Result<(), CommandError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let view = tokio::spawn(crate::ui::view::show(rx));
    let mut saver = Saver {
        store,
        encrypted,
        state,
    };
    let outcome = apply::execute(Arc::new(ctx), plan, &mut saver, parallelism, &tx, cancel).await;
    drop(tx);
    let _ = view.await;
    run_result(plan, outcome?)
}

/// The command's result for how a plan's changes ended: an interruption
/// says how to continue, failures are listed.
fn run_result(plan: &Plan, outcome: RunOutcome) -> Result<(), CommandError> {
    match outcome {
        RunOutcome::Done => Ok(()),
        RunOutcome::Interrupted => {
            let again = if plan.destroy { "destroy" } else { "apply" };
            crate::ui::warn(&format!(
                "interrupted: the finished steps are saved in the state; run {again} again to continue"
            ));
            Err(CommandError::Interrupted)
        }
        RunOutcome::Failed(failures) => Err(anyhow::anyhow!(
            "{} change(s) failed; the finished steps are saved, and apply continues from them when run again:\n  {}",
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

/// The error an apply ends with when its plan has conflicts: the objects
/// talosprov does not own were left untouched, with what depends on them.
fn conflicts_error(plan: &Plan) -> Option<CommandError> {
    if plan.conflicts.is_empty() {
        return None;
    }
    let lines: Vec<String> = plan.conflicts.iter().map(|c| format!("  {c}")).collect();
    Some(
        anyhow::anyhow!(
            "{} in Proxmox that talosprov does not own {} left untouched, with the changes \
             that depend on {}:\n{}",
            match lines.len() {
                1 => "1 object".to_owned(),
                n => format!("{n} objects"),
            },
            if lines.len() == 1 { "was" } else { "were" },
            if lines.len() == 1 { "it" } else { "them" },
            lines.join("\n")
        )
        .into(),
    )
}

/// `apply`'s settings, resolved once from the flags, the saved plan, the
/// environment and the defaults, before any lock is taken (the way ripgrep
/// turns its `LowArgs` into `HiArgs`): every check across flags happens here,
/// so a wrong combination costs no lock and no request.
#[derive(Debug)]
struct ApplySettings {
    /// The validated topology.
    topology: Topology,
    /// The saved plan to apply exactly, if one was given.
    saved: Option<SavedPlan>,
    /// `-target`s, or the saved plan's.
    targets: Vec<Address>,
    /// Stage config changes (the flag, or how the saved plan was made).
    staged: bool,
    /// Plan from the state alone: `-refresh=false`, or a plan saved that way.
    offline: bool,
    /// `-refresh-only`.
    refresh_only: bool,
    /// Apply without asking: `-auto-approve`, or a saved plan.
    approved: bool,
    /// Changes at once (`-parallelism`, at least 1).
    parallelism: usize,
    /// Workers upgraded at once.
    max_parallel_upgrades: NonZeroUsize,
    /// Where etcd snapshots go.
    snapshots: SnapshotPolicy,
    /// The bound of the wait for Proxmox work after an interruption.
    interrupt_grace: std::time::Duration,
    /// The bound of the final wait for the Kubernetes nodes.
    ready_wait: std::time::Duration,
}

impl ApplySettings {
    /// Resolve and check `args`.
    ///
    /// # Errors
    /// Topology diagnostics, an unreadable or sealed saved plan, and any
    /// combination the flags cannot mean together: a saved plan with
    /// `-target`, `--staged` with a plan saved without it, `-refresh-only`
    /// with `-refresh=false`, `-parallelism 0`, a malformed
    /// `TALOSPROV_INTERRUPT_GRACE` or `TALOSPROV_READY_WAIT`.
    fn resolve(args: &ApplyArgs) -> Result<ApplySettings, CommandError> {
        let fail = |msg: &str| -> CommandError { anyhow::anyhow!("{msg}").into() };
        if args.planfile.is_some() && !args.target.is_empty() {
            return Err(fail(
                "a saved plan keeps the targets it was made with: drop -target, or make a new plan",
            ));
        }
        if args.refresh_only && !args.refresh {
            return Err(fail(
                "-refresh-only reads the cluster back: it cannot be used with -refresh=false",
            ));
        }
        if args.parallelism == 0 {
            return Err(fail("-parallelism must be at least 1"));
        }
        if args.json && !args.auto_approve && args.planfile.is_none() {
            return Err(fail(
                "-json cannot ask for approval: add -auto-approve, or apply a plan saved with \
                 `talosprov plan -out FILE`",
            ));
        }
        let interrupt_grace = interrupt_grace()?;
        let ready_wait = ready_wait()?;
        rollout_wait()?;
        let topology = cluster::load_topology(&args.state.file)?;
        let saved = args
            .planfile
            .as_deref()
            .map(cluster::read_saved_plan)
            .transpose()?;
        if args.staged && saved.as_ref().is_some_and(|s| !s.staged) {
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
            None => args.target.clone(),
        };
        Ok(ApplySettings {
            offline: !args.refresh || saved.as_ref().is_some_and(|s| !s.plan.refreshed),
            staged: saved.as_ref().map_or(args.staged, |s| s.staged),
            approved: args.auto_approve || saved.is_some(),
            targets,
            refresh_only: args.refresh_only,
            parallelism: args.parallelism,
            max_parallel_upgrades: args.max_parallel_upgrades,
            snapshots: snapshot_policy(args),
            interrupt_grace,
            ready_wait,
            topology,
            saved,
        })
    }
}

/// Run `apply`.
///
/// # Errors
/// Topology diagnostics, a held lock (naming its holder), a stale saved plan,
/// refused changes, failed steps; [`CommandError::Interrupted`] on Ctrl-C.
pub async fn run(args: ApplyArgs) -> Result<Outcome, CommandError> {
    if args.json {
        crate::ui::json::enable();
        crate::ui::json::version("apply");
    }
    let settings = ApplySettings::resolve(&args)?;
    cluster::locked(&args.state, &args.lock, "apply", async |store, cancel| {
        apply_locked(&settings, store, cancel).await
    })
    .await
}

/// `apply` with the state locked: the engine's session does the work, with
/// this command's edges, and the report becomes the command's output.
async fn apply_locked(
    settings: &ApplySettings,
    store: &StateStore<StateBackend>,
    cancel: watch::Receiver<bool>,
) -> Result<Outcome, CommandError> {
    let session = session::Settings {
        saved: settings.saved.clone(),
        refresh_only: settings.refresh_only,
        parallelism: settings.parallelism,
        max_parallel_upgrades: settings.max_parallel_upgrades,
    };
    let mut edges = CliEdges {
        settings,
        store,
        cancel: cancel.clone(),
        view: None,
    };
    let report = session::apply(&session, store, &mut edges, cancel).await;
    if let Some(view) = edges.view.take() {
        let _ = view.await;
    }
    match report? {
        Report::Refreshed { recorded: 0 } => {
            crate::ui::write_stdout("\nThe state matches what was observed: nothing to record.\n")?;
        }
        Report::Refreshed { recorded } => crate::ui::write_stdout(&format!(
            "\nApply complete! Recorded {recorded} observed change(s) in the state; nothing else was changed.\n"
        ))?,
        Report::Unchanged(plan) => {
            if let Some(e) = conflicts_error(&plan) {
                return Err(e);
            }
            applied(
                &plan,
                "Apply complete! Resources: 0 added, 0 changed, 0 destroyed.",
            )?;
            warn_targeted(settings);
        }
        Report::Ran(plan, outcome) => {
            run_result(&plan, outcome)?;
            let summary = crate::ui::plan::apply_summary_line(&plan.summary());
            if let Some(e) = conflicts_error(&plan) {
                applied(&plan, &summary)?;
                warn_targeted(settings);
                return Err(e);
            }
            // The final gate is a step of the apply: `Apply complete!` comes after it.
            if settings.targets.is_empty() {
                kubernetes_ready(settings, store, &summary).await?;
            }
            applied(&plan, &summary)?;
            warn_targeted(settings);
        }
    }
    Ok(Outcome::Success)
}

/// The closing line of an apply: `summary` on stdout, or in the JSON view
/// the `change_summary` object.
fn applied(plan: &Plan, summary: &str) -> Result<(), CommandError> {
    if crate::ui::json::enabled() {
        crate::ui::json::summary("apply", &plan.summary(), summary);
        return Ok(());
    }
    crate::ui::write_stdout(&format!("\n{summary}\n"))?;
    Ok(())
}

/// How long apply's final gate waits for the Kubernetes nodes to be Ready (and the
/// GPUs allocatable) unless [`READY_WAIT_VAR`] says otherwise: the CNI's pods start
/// after the nodes register.
pub const KUBERNETES_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The variable that bounds apply's wait for the Kubernetes nodes, in seconds (or a
/// duration such as `5m`).
pub const READY_WAIT_VAR: &str = "TALOSPROV_READY_WAIT";

/// The bound of apply's wait for the Kubernetes nodes: [`READY_WAIT_VAR`], else
/// [`KUBERNETES_READY_WAIT`].
///
/// # Errors
/// A value that is neither seconds nor a duration.
fn ready_wait() -> anyhow::Result<std::time::Duration> {
    duration_var(READY_WAIT_VAR, KUBERNETES_READY_WAIT)
}

/// Apply's final gate, when the cluster has a CNI (its own or an add-on's): every
/// node registered and Ready, GPUs allocatable where a GPU add-on is declared,
/// waiting up to `settings.ready_wait` and saying on stderr what it waits for
/// (every [`talosprov_engine::health::PROGRESS_EVERY`] while something is missing); then the
/// node table, as `kubectl get nodes` shows it.
///
/// # Errors
/// A check still failing at the deadline: the error says what was applied
/// (`summary`, the `Apply complete!` line's counts) and which nodes are not
/// ready, and why.
async fn kubernetes_ready(
    settings: &ApplySettings,
    store: &StateStore<StateBackend>,
    summary: &str,
) -> Result<(), CommandError> {
    let Some(loaded) = store.load().await? else {
        return Ok(());
    };
    let topology = &settings.topology;
    let cni = super::health::cni(topology, &loaded.state);
    let Some(gate) =
        super::health::kubernetes_gate(topology, &loaded.state, cni.as_ref(), settings.ready_wait)
    else {
        return Ok(());
    };
    let outcome = talosprov_engine::health::wait_for_kubernetes(&gate, |event| {
        crate::ui::view::gate_event(&event);
    })
    .await;
    crate::ui::view::gate_outcome(&outcome, settings.ready_wait);
    if !outcome.nodes.is_empty() && !crate::ui::json::enabled() {
        crate::ui::write_stdout(&format!(
            "\nKubernetes nodes:\n{}",
            super::health::node_table(&outcome.nodes)
        ))?;
    }
    if outcome.passed() {
        return Ok(());
    }
    let applied = summary
        .strip_prefix("Apply complete! ")
        .unwrap_or(summary)
        .trim_end_matches('.');
    Err(anyhow::anyhow!(
        "the changes are applied ({applied}), but the cluster is not Ready after {} s:\n  {}",
        settings.ready_wait.as_secs(),
        outcome.missing().join("\n  ")
    )
    .into())
}

/// After an apply made with `-target` (given, or kept in the saved plan),
/// OpenTofu's reminder: the changes applied may be incomplete.
fn warn_targeted(settings: &ApplySettings) {
    if !settings.targets.is_empty() {
        crate::ui::warn(
            "Applied changes may be incomplete: the plan was made with -target, so some \
             changes the topology asks for may have been left out. Run `talosprov plan` to \
             check that no other changes are pending.",
        );
    }
}

/// What `apply` gives the engine's session: planning against Proxmox and
/// Talos, the views on stdout and stderr, the question on the terminal and
/// the real provider.
struct CliEdges<'a> {
    settings: &'a ApplySettings,
    store: &'a StateStore<StateBackend>,
    cancel: watch::Receiver<bool>,
    /// The progress view, once the changes start.
    view: Option<tokio::task::JoinHandle<crate::ui::progress::Tally>>,
}

impl Edges for CliEdges<'_> {
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
        secrets_guard::refuse_lost_secrets(topology, state, self.store)?;
        secrets_guard::refuse_existing_cluster(topology, state, saved_secrets, self.store).await?;
        let mut interrupt = self.cancel.clone();
        tokio::select! {
            planned = make_plan(
                topology,
                state,
                settings.saved.as_ref(),
                settings.offline,
                &settings.targets,
                settings.staged,
            ) => planned,
            _ = interrupt.wait_for(|c| *c) => {
                super::signals::warn_planning_interrupted("apply");
                Err(CommandError::Interrupted)
            }
        }
    }

    fn show(&mut self, shown: Shown<'_>) -> Result<(), CommandError> {
        if crate::ui::json::enabled() {
            match shown {
                Shown::Plan(plan) => crate::ui::json::plan(plan),
                Shown::Drift(plan) => crate::ui::json::plan(&crate::ui::plan::refresh_only(plan)),
            }
            return Ok(());
        }
        let text = match shown {
            Shown::Plan(plan) => crate::ui::plan::render(plan),
            Shown::Drift(plan) => crate::ui::plan::render(&crate::ui::plan::refresh_only(plan)),
        };
        crate::ui::write_stdout(&text)?;
        Ok(())
    }

    async fn approve(&mut self, question: Question) -> Result<(), CommandError> {
        let (text, hint) = match question {
            Question::Apply => (
                "Do you want to perform these actions?\n  talosprov will perform the actions described above.",
                "-auto-approve (or apply a plan saved with `plan -out FILE`)",
            ),
            Question::RecordDrift => (
                "Would you like to update the state to reflect these detected changes?\n  \
                 talosprov will write these changes to the state without changing any real resources.",
                "-auto-approve",
            ),
        };
        cluster::approve(self.settings.approved, text, hint, self.cancel.clone()).await
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
            desired,
            offline,
            self.settings.interrupt_grace,
        )
        .context("cannot prepare the apply")?;
        ctx.rollout.etcd_snapshot = self.settings.snapshots.clone();
        Ok(ctx)
    }

    fn events(&mut self) -> tokio::sync::mpsc::UnboundedSender<Update> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.view = Some(tokio::spawn(crate::ui::view::show(rx)));
        tx
    }
}
