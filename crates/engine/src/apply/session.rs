//! The apply workflow with the state lock held, from loading the state to the
//! last saved step, in the order OpenTofu's `apply` follows:
//! 1. load the state (or start one with a new lineage);
//! 2. refuse a saved plan made from another state (lineage, serial);
//! 3. plan anew under the lock;
//! 4. `-refresh-only`: show the drift, ask, record it in one save, and stop;
//! 5. refuse a saved plan that differs from the new one, naming the first
//!    difference, or show the new plan;
//! 6. ask for approval when anything would change: nothing is written before
//!    it, not even new secrets;
//! 7. record the secrets, the staged configs a reboot took and the
//!    talosconfig ([`super::workflow`]);
//! 8. run the changes ([`super::execute`]), saving after every step.
//!
//! What the engine does not own is behind [`Edges`]: rendering and refresh,
//! the views, the question on the terminal and the real provider. The
//! workflow's tests drive it with scripted edges and an in-memory backend.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use talosprov_backend::backend::Backend;
use talosprov_backend::store::StateStore;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_plan::desired::Desired;
use talosprov_plan::model::Plan;
use talosprov_plan::observed::Observed;
use talosprov_plan::order::chain_upgrades;
use talosprov_plan::saved::{InputDigests, SavedPlan};
use talosprov_plan::saved::{check_fresh, check_same};
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{Rendering, State};

use super::event::Update;
use super::executor::{Provider, RunOutcome, Saver, execute};
use super::record;
use super::refresh_only::observed_records;
use super::workflow;

/// A plan and what it was made from.
#[derive(Debug)]
pub struct Planned {
    /// The plan, in dependency order, as shown to the user.
    pub plan: Plan,
    /// The desired resources it leads to.
    pub desired: Desired,
    /// The secrets its configs were rendered with.
    pub secrets: SecretsBundle,
    /// The secrets text when they were generated for this plan (no state yet).
    pub generated: Option<Sensitive>,
    /// What refresh saw (`Observed::default()` offline).
    pub observed: Observed,
    /// The digests of the files the plan was made from.
    pub inputs: InputDigests,
    /// Every Helm add-on's rendering the plan used, by add-on name: what the
    /// state records before the first change.
    pub renderings: BTreeMap<String, Rendering>,
    /// The pools' members as allocated for this plan, by pool: what the
    /// state records before the first change.
    pub pools: BTreeMap<String, Vec<talosprov_statefile::format::RecordedMember>>,
    /// The clock and certificate renewal window the plan was made with (a saved plan
    /// keeps them).
    pub renewal: talosprov_plan::renewal::Renewal,
}

/// What a command asks before it changes something. The frontend words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    /// Make the plan's changes.
    Apply,
    /// Record the observed drift in the state, changing nothing else.
    RecordDrift,
    /// Destroy every resource the destroy plan shows.
    Destroy,
    /// `state rm`: forget these resources, which keep running.
    Forget(Vec<Address>),
    /// `force-unlock`: remove lock `id` on the state in `location`.
    ForceUnlock {
        /// The lock's ID.
        id: String,
        /// The state's location, as the backend describes it.
        location: String,
    },
    /// `rotate-ca`: run the rotation shown (a new one, or the rest of one
    /// in progress).
    RotateCa(talosprov_statefile::rotation::Authority),
    /// `etcd restore --force`: reset these control planes (hostname and
    /// address), whose etcd is healthy, before restoring over it.
    ResetControlPlanes(Vec<(String, String)>),
}

/// What a command shows before it asks or returns.
#[derive(Debug, Clone, Copy)]
pub enum Shown<'a> {
    /// A plan: the one about to be applied, a destroy plan, or `plan`'s.
    Plan(&'a Plan),
    /// `-refresh-only`: only the drift of this plan.
    Drift(&'a Plan),
    /// `rotate-ca`: the stages about to run.
    Rotation(&'a talosprov_machine::rotation::RotationPlan),
}

/// The parts of an apply the engine does not own. The CLI implements them
/// with rendering, refresh against Proxmox and Talos, the terminal and the
/// real [`super::Context`]; tests implement them with scripts.
pub trait Edges {
    /// The executor's provider.
    type Provider: Provider;
    /// The caller's error; the workflow's own errors come in as
    /// [`anyhow::Error`].
    type Error: From<anyhow::Error>;

    /// Make the plan with the lock held. `state`: the loaded state, `None`
    /// before the first apply. Refusals that come before any secret is used
    /// (lost secrets, another cluster's nodes) belong here.
    fn plan(&mut self, state: Option<&State>)
    -> impl Future<Output = Result<Planned, Self::Error>>;

    /// Show the plan or the drift.
    ///
    /// # Errors
    /// The output cannot be written.
    fn show(&mut self, shown: Shown<'_>) -> Result<(), Self::Error>;

    /// Ask `question`; an error (a "no", an interruption) stops the run with
    /// nothing written.
    fn approve(&mut self, question: Question) -> impl Future<Output = Result<(), Self::Error>>;

    /// A new talosconfig for `secrets` (the state has none yet).
    ///
    /// # Errors
    /// The client certificate cannot be issued.
    fn talosconfig(&mut self, secrets: &SecretsBundle) -> anyhow::Result<Sensitive>;

    /// The provider that makes the changes, from the state as saved before
    /// the first change.
    ///
    /// # Errors
    /// A client that cannot be configured.
    fn provider(
        &mut self,
        state: &State,
        desired: Desired,
        secrets: &SecretsBundle,
    ) -> anyhow::Result<Self::Provider>;

    /// Where the executor's events go, asked for once, just before the first
    /// change (a view started earlier would draw over the question).
    fn events(&mut self) -> mpsc::UnboundedSender<Update>;
}

/// The resolved settings the workflow needs.
#[derive(Debug)]
pub struct Settings {
    /// The saved plan to apply exactly, if one was given.
    pub saved: Option<SavedPlan>,
    /// `-refresh-only`.
    pub refresh_only: bool,
    /// Changes at once (at least 1).
    pub parallelism: usize,
    /// Workers upgraded at once in a Talos rollout.
    pub max_parallel_upgrades: NonZeroUsize,
    /// The `etcd restore` this apply is part of: recorded in the state
    /// before the first change, so that a run stopped before etcd is
    /// recovered is known as unfinished (the recovering bootstrap clears it).
    pub restore: Option<talosprov_statefile::format::EtcdRestore>,
}

/// How an apply ended, for the views to word.
#[derive(Debug)]
pub enum Report {
    /// `-refresh-only`: `recorded` observed changes were saved (0: the state
    /// already matched, nothing was saved).
    Refreshed {
        /// The records saved.
        recorded: usize,
    },
    /// The plan had nothing to do (its conflicts may still need saying).
    Unchanged(Plan),
    /// The plan ran: how its changes ended.
    Ran(Plan, RunOutcome),
}

/// Run an apply with the lock on `store` held by the caller.
///
/// # Errors
/// A saved plan made from another state or differing from the new plan
/// ("nothing was changed"), a refused approval, a state that cannot be
/// loaded or saved, and the edges' errors. A step that fails is not an error
/// here: it is in [`Report::Ran`].
pub async fn apply<B: Backend, E: Edges>(
    settings: &Settings,
    store: &StateStore<B>,
    edges: &mut E,
    cancel: watch::Receiver<bool>,
) -> Result<Report, E::Error> {
    let loaded = store.load().await.map_err(anyhow::Error::new)?;
    let had_state = loaded.is_some();
    let (mut state, encrypted) = match loaded {
        Some(l) => (l.state, l.encrypted),
        None => (State::new(uuid::Uuid::new_v4()), store.has_keys()),
    };
    if let Some(s) = &settings.saved {
        check_fresh(&s.plan, had_state.then_some((state.lineage, state.serial)))
            .map_err(anyhow::Error::new)?;
    }
    if settings.refresh_only && !had_state {
        return Err(anyhow::anyhow!("no state yet: nothing to refresh").into());
    }
    let planned = edges.plan(had_state.then_some(&state)).await?;
    let mut saver = Saver {
        store,
        encrypted,
        state: &mut state,
    };
    if settings.refresh_only {
        return record_drift(&planned, &mut saver, edges).await;
    }
    match &settings.saved {
        // Only what the plan showed is applied: the plan made now must be
        // the saved one, value for value, or nothing is done.
        Some(s) => check_same(s, &planned.plan, &planned.inputs).map_err(|e| {
            anyhow::Error::new(*e).context("the saved plan cannot be applied; nothing was changed")
        })?,
        None => edges.show(Shown::Plan(&planned.plan))?,
    }
    if !planned.plan.is_empty() {
        edges.approve(Question::Apply).await?;
    }
    run_approved(settings, planned, saver, had_state, edges, cancel).await
}

/// `-refresh-only`: show the drift, ask, and save the observed values (one
/// save, one serial).
async fn record_drift<B: Backend, E: Edges>(
    planned: &Planned,
    saver: &mut Saver<'_, B>,
    edges: &mut E,
) -> Result<Report, E::Error> {
    edges.show(Shown::Drift(&planned.plan))?;
    let records = observed_records(saver.state, &planned.observed);
    if records.is_empty() {
        return Ok(Report::Refreshed { recorded: 0 });
    }
    edges.approve(Question::RecordDrift).await?;
    let recorded = records.len();
    for r in records {
        record::apply(saver.state, r);
    }
    saver.save().await?;
    Ok(Report::Refreshed { recorded })
}

/// After approval: save what apply records before the first change, then run
/// the changes.
async fn run_approved<B: Backend, E: Edges>(
    settings: &Settings,
    planned: Planned,
    mut saver: Saver<'_, B>,
    had_state: bool,
    edges: &mut E,
    cancel: watch::Receiver<bool>,
) -> Result<Report, E::Error> {
    let mut plan = planned.plan;
    chain_upgrades(&mut plan, &planned.desired, settings.max_parallel_upgrades);
    let secrets = workflow::secrets_to_record(
        planned.generated.as_ref(),
        settings.saved.as_ref().and_then(|s| s.secrets.as_ref()),
        &planned.secrets,
    );
    let mut before =
        workflow::before_changes(saver.state, had_state, &plan, &planned.observed, secrets);
    before.renderings =
        workflow::renderings_to_record(saver.state, had_state, &plan, planned.renderings);
    before.pools = workflow::pools_to_record(saver.state, had_state, &plan, planned.pools);
    before.etcd_restore = settings.restore.clone().filter(|_| !plan.is_empty());
    workflow::save_before_changes(&mut saver, before, || edges.talosconfig(&planned.secrets))
        .await?;
    if plan.is_empty() {
        return Ok(Report::Unchanged(plan));
    }
    let provider = edges.provider(saver.state, planned.desired, &planned.secrets)?;
    let events = edges.events();
    let outcome = execute(
        Arc::new(provider),
        &plan,
        &mut saver,
        settings.parallelism,
        &events,
        cancel,
    )
    .await?;
    Ok(Report::Ran(plan, outcome))
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
