//! The executor: runs a plan's changes on tokio in dependency order through a
//! [`Provider`], with at most `parallelism` steps holding a slot at once (a
//! step gives its slot back while it only waits on a node or a task, so the
//! bound is on the requests in flight, not on the nodes waited on), applies
//! each step's records to the state and
//! saves it after every one, emits events for the views, and tells every step
//! how the others ended (so a wait that needs a failed change stops). On
//! interruption it starts nothing new, stops the steps that hold nothing
//! half-done at once, lets the ones with Proxmox work in flight finish it
//! within the grace, and saves what is done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};

use talosprov_backend::backend::Backend;
use talosprov_backend::store::StateStore;
use talosprov_plan::change::Change;
use talosprov_plan::model::Plan;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;

use super::context::Context;
use super::event::{Event, EventKind, Update};
use super::record;
use crate::apply::reporter::{Interrupted, Outcomes, Reporter, StepEnd, StepMessage};
use crate::apply::steps;

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;

/// What the executor makes changes with: the real provider sends requests to
/// Proxmox and Talos ([`Context`], through `steps::run`); tests drive the
/// executor with scripted fakes.
pub trait Provider: Send + Sync + 'static {
    /// Make `change`, reporting progress and what to record through `r`
    /// (records are saved in the state as they arrive, before the step
    /// counts as done). Wrap waits that send nothing in
    /// [`Reporter::waiting`], and Proxmox work an interruption must let
    /// finish in a Proxmox section.
    ///
    /// # Errors
    /// Why the change failed; [`Interrupted`] when it stopped because the run
    /// was interrupted.
    fn apply(
        &self,
        change: &Change,
        r: &Reporter,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// How long an interrupted run lets steps with Proxmox work in flight
    /// finish it before abandoning them.
    fn interrupt_grace(&self) -> Duration;
}

impl Provider for Context {
    fn apply(
        &self,
        change: &Change,
        r: &Reporter,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        steps::run(self, change, r)
    }

    fn interrupt_grace(&self) -> Duration {
        self.waits.interrupt_grace
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every change was made.
    Done,
    /// Some changes failed (address and message); the others that could run did.
    Failed(Vec<(Address, String)>),
    /// Interrupted (Ctrl-C or SIGTERM): what finished is saved.
    Interrupted,
}

/// The state and where to save it.
pub struct Saver<'a, B> {
    /// The store (its lock is held by the caller for the whole run).
    pub store: &'a StateStore<B>,
    /// Whether to save encrypted.
    pub encrypted: bool,
    /// The state, updated as steps record.
    pub state: &'a mut State,
}

impl<B: Backend> Saver<'_, B> {
    /// Apply `r` to the state and save it.
    pub(crate) async fn record(&mut self, r: record::Record) -> anyhow::Result<()> {
        record::apply(self.state, r);
        self.save().await
    }

    /// Save the state as it is.
    pub(crate) async fn save(&mut self) -> anyhow::Result<()> {
        self.store
            .save(self.state, self.encrypted)
            .await
            .map_err(|e| anyhow::Error::new(e).context("cannot save the state"))
    }
}

/// The plan's changes, deepest first and in plan order among equals. A
/// change's depth is 0 when it waits for nothing in the plan, else one more
/// than the deepest change it waits for (the plan is in dependency order, so
/// one pass finds it).
fn deepest_first(plan: &Plan) -> Vec<&Change> {
    let mut depth: HashMap<&Address, usize> = HashMap::new();
    for c in &plan.changes {
        let d = c
            .depends_on
            .iter()
            .filter_map(|a| depth.get(a).map(|d| d + 1))
            .max()
            .unwrap_or(0);
        depth.insert(c.address(), d);
    }
    let mut out: Vec<&Change> = plan.changes.iter().collect();
    out.sort_by_key(|c| std::cmp::Reverse(depth[c.address()]));
    out
}

/// A step running now.
struct Running {
    address: Address,
    abort: AbortHandle,
    reporter: Reporter,
}

/// Whether a step's error is the run's interruption rather than a failure.
fn is_interrupted(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<Interrupted>().is_some())
}

/// Run `plan`'s changes with `provider`. A change starts once every change it
/// depends on is done and a slot is free (`parallelism` slots); one that
/// depends on a failed change is skipped. `cancel` turning true interrupts
/// the run: nothing new starts; steps outside any Proxmox section stop at
/// once; the others get the provider's interrupt grace to finish their
/// Proxmox work (and record it), then are abandoned.
///
/// # Errors
/// Only a state save failure (the run stops at once: without a saved state
/// nothing more may change). Step failures are in [`RunOutcome::Failed`].
pub async fn execute<P: Provider, B: Backend>(
    provider: Arc<P>,
    plan: &Plan,
    saver: &mut Saver<'_, B>,
    parallelism: usize,
    events: &mpsc::UnboundedSender<Update>,
    mut cancel: watch::Receiver<bool>,
) -> anyhow::Result<RunOutcome> {
    let (tx, mut rx) = mpsc::unbounded_channel::<StepMessage>();
    let mut run = Run::new(provider, plan, parallelism, events, tx);
    if *cancel.borrow() {
        run.interrupted = true;
        run.stopping.send_replace(true);
    }
    loop {
        let ready_without_slot = if run.interrupted {
            false
        } else {
            run.start_ready()
        };
        if run.running.is_empty() {
            break;
        }
        let grace_ends = run.grace_ends;
        let grace_over = async {
            match grace_ends {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let interrupted = run.interrupted;
        tokio::select! {
            biased;
            Some(msg) = rx.recv() => {
                run.handle(msg, &mut rx, saver).await?;
            }
            // A slot came free (a step finished or went waiting): the loop
            // starts the next ready change with it. Slots go first come, first
            // served, between new changes and steps coming back from a wait.
            Ok(permit) = run.slots.clone().acquire_owned(), if ready_without_slot && !interrupted => {
                run.spare = Some(permit);
            }
            Some(joined) = run.tasks.join_next_with_id() => {
                // Records sent before the step ended are saved before it counts as done.
                if let Ok(msg) = rx.try_recv() {
                    run.handle(msg, &mut rx, saver).await?;
                }
                run.step_ended(joined)?;
            },
            changed = cancel.changed(), if !interrupted => {
                if changed.is_err() || *cancel.borrow() {
                    run.interrupt();
                }
            },
            () = grace_over => run.abandon(),
        }
    }
    run.finish(rx, saver).await
}

/// One run of the executor: the changes still to start and how the others
/// went, the steps running, and the channels the steps talk through.
struct Run<'a, P> {
    provider: Arc<P>,
    /// The parallelism bound: a step holds a slot while it sends requests.
    slots: Arc<Semaphore>,
    /// How long an interrupted run lets steps in a Proxmox section finish.
    grace: Duration,
    changes: BTreeMap<Address, &'a Change>,
    /// Changes not started yet, deepest first, then in plan order.
    pending: Vec<&'a Change>,
    done: BTreeSet<Address>,
    failed: Vec<(Address, String)>,
    /// Failed or skipped: what depends on them is skipped.
    blocked: BTreeSet<Address>,
    started: BTreeMap<Address, Instant>,
    /// Where the steps' reporters send their messages.
    tx: mpsc::UnboundedSender<StepMessage>,
    stopping: watch::Sender<bool>,
    stopping_rx: watch::Receiver<bool>,
    outcomes: watch::Sender<Outcomes>,
    outcomes_rx: watch::Receiver<Outcomes>,
    tasks: JoinSet<(Address, anyhow::Result<()>)>,
    running: HashMap<tokio::task::Id, Running>,
    interrupted: bool,
    /// When the interrupt grace runs out, once interrupted.
    grace_ends: Option<tokio::time::Instant>,
    /// A slot the loop acquired while changes waited for one, for the next.
    spare: Option<tokio::sync::OwnedSemaphorePermit>,
    events: &'a mpsc::UnboundedSender<Update>,
}

impl<'a, P: Provider> Run<'a, P> {
    /// A run of `plan` with nothing started yet.
    fn new(
        provider: Arc<P>,
        plan: &'a Plan,
        parallelism: usize,
        events: &'a mpsc::UnboundedSender<Update>,
        tx: mpsc::UnboundedSender<StepMessage>,
    ) -> Self {
        let (stopping, stopping_rx) = watch::channel(false);
        let (outcomes, outcomes_rx) = watch::channel(Outcomes::new());
        Run {
            slots: Arc::new(Semaphore::new(parallelism.max(1))),
            grace: provider.interrupt_grace(),
            provider,
            changes: plan
                .changes
                .iter()
                .map(|c| (c.address().clone(), c))
                .collect(),
            pending: deepest_first(plan),
            done: BTreeSet::new(),
            failed: Vec::new(),
            blocked: BTreeSet::new(),
            started: BTreeMap::new(),
            tx,
            stopping,
            stopping_rx,
            outcomes,
            outcomes_rx,
            tasks: JoinSet::new(),
            running: HashMap::new(),
            interrupted: false,
            grace_ends: None,
            spare: None,
            events,
        }
    }

    /// Send a step event, timed from `since`.
    fn emit(&self, address: &Address, kind: EventKind, since: Option<&Instant>) {
        emit(self.events, address, kind, since);
    }

    /// Tell every step how the change at `address` ended.
    fn ended(&self, address: &Address, end: StepEnd) {
        self.outcomes.send_modify(|o| {
            o.insert(address.clone(), end);
        });
    }

    /// Skip what depends on a failure; start what is ready while a slot is
    /// free, deepest in the dependency chain first (a node's config before
    /// another node's VM), so that each node reaches its waits (a reboot,
    /// etcd) as early as it can. Gives whether a ready change waits for a slot.
    fn start_ready(&mut self) -> bool {
        let mut ready_without_slot = false;
        let mut i = 0;
        while i < self.pending.len() {
            let c = self.pending[i];
            let deps_failed = c.depends_on.iter().any(|d| self.blocked.contains(d));
            if deps_failed {
                self.blocked.insert(c.address().clone());
                let reason = "a change it depends on failed".to_owned();
                self.emit(
                    c.address(),
                    EventKind::Skipped {
                        reason: reason.clone(),
                    },
                    None,
                );
                self.ended(c.address(), StepEnd::Skipped(reason));
                self.pending.remove(i);
                continue;
            }
            let ready = c
                .depends_on
                .iter()
                .all(|d| self.done.contains(d) || !self.changes.contains_key(d));
            let slot = if ready {
                self.spare
                    .take()
                    .or_else(|| self.slots.clone().try_acquire_owned().ok())
            } else {
                None
            };
            ready_without_slot |= ready && slot.is_none();
            if let Some(permit) = slot {
                self.pending.remove(i);
                self.spawn_step(c, permit);
                continue;
            }
            i += 1;
        }
        ready_without_slot
    }

    /// Start the step making `c`, holding `permit` until it gives it back.
    fn spawn_step(&mut self, c: &Change, permit: tokio::sync::OwnedSemaphorePermit) {
        self.started.insert(c.address().clone(), Instant::now());
        self.emit(c.address(), EventKind::Started { action: c.action() }, None);
        let provider = self.provider.clone();
        let change = c.clone();
        let reporter = Reporter::for_run(
            c.address().clone(),
            self.tx.clone(),
            self.stopping_rx.clone(),
            self.outcomes_rx.clone(),
        )
        .holding(self.slots.clone(), permit);
        let step_reporter = reporter.clone();
        let abort = self.tasks.spawn(async move {
            let retries = step_reporter.clone();
            let watcher: talosprov_retry::Watcher =
                Arc::new(move |n: &talosprov_retry::Notice| retries.retrying(n));
            let result =
                talosprov_retry::watched(watcher, provider.apply(&change, &step_reporter)).await;
            (change.address().clone(), result)
        });
        self.running.insert(
            abort.id(),
            Running {
                address: c.address().clone(),
                abort,
                reporter,
            },
        );
    }

    /// Act on `first` and on every message already queued behind it (see
    /// [`handle`]): their records are applied in order and saved once, so
    /// steps that end together cost one save, not one each; a step waiting
    /// for its record to be saved is told after that save.
    async fn handle<B: Backend>(
        &self,
        first: StepMessage,
        rx: &mut mpsc::UnboundedReceiver<StepMessage>,
        saver: &mut Saver<'_, B>,
    ) -> anyhow::Result<()> {
        let emit =
            |a: &Address, kind: EventKind, since: Option<&Instant>| self.emit(a, kind, since);
        let mut batch = Batch::default();
        let mut next = Some(first);
        while let Some(msg) = next {
            handle(
                msg,
                saver.state,
                &mut batch,
                &emit,
                &self.started,
                &self.running,
            );
            next = rx.try_recv().ok();
        }
        batch.save(saver).await
    }

    /// Count a step that ended: done, failed (what depends on it is then
    /// skipped), or stopped by the interruption.
    ///
    /// # Errors
    /// A step that panicked.
    fn step_ended(
        &mut self,
        joined: Result<(tokio::task::Id, (Address, anyhow::Result<()>)), tokio::task::JoinError>,
    ) -> anyhow::Result<()> {
        match joined {
            Ok((id, (address, Ok(())))) => {
                self.running.remove(&id);
                let action = self.changes[&address].action();
                self.emit(
                    &address,
                    EventKind::Finished { action },
                    self.started.get(&address),
                );
                self.ended(&address, StepEnd::Done);
                self.done.insert(address);
            }
            Ok((id, (address, Err(e)))) if self.interrupted && is_interrupted(&e) => {
                self.running.remove(&id);
                self.emit(
                    &address,
                    EventKind::Skipped {
                        reason: "interrupted".into(),
                    },
                    self.started.get(&address),
                );
            }
            Ok((id, (address, Err(e)))) => {
                self.running.remove(&id);
                let message = format!("{e:#}");
                self.emit(
                    &address,
                    EventKind::Failed {
                        message: message.clone(),
                    },
                    self.started.get(&address),
                );
                self.ended(&address, StepEnd::Failed(message.clone()));
                self.blocked.insert(address.clone());
                self.failed.push((address, message));
            }
            Err(e) if e.is_cancelled() => {
                if let Some(step) = self.running.remove(&e.id()) {
                    self.emit(
                        &step.address,
                        EventKind::Skipped {
                            reason: "interrupted".into(),
                        },
                        self.started.get(&step.address),
                    );
                }
            }
            Err(e) => return Err(anyhow::anyhow!("a step panicked: {e}")),
        }
        Ok(())
    }

    /// Interrupt the run: stop the steps outside any Proxmox section at once
    /// and give the others the grace.
    fn interrupt(&mut self) {
        self.interrupted = true;
        self.stopping.send_replace(true);
        // Read after `stopping` is set: a step entering a section
        // now either counts here or sees `stopping` and does not start.
        let mut finishing = Vec::new();
        for step in self.running.values() {
            if step.reporter.sections_open() > 0 {
                finishing.push(step.address.clone());
            } else {
                step.abort.abort();
            }
        }
        finishing.sort();
        let grace = self.grace;
        let _ = self.events.send(Update::Interrupted { finishing, grace });
        self.grace_ends = Some(tokio::time::Instant::now() + grace);
    }

    /// The grace ran out: abandon the steps still running.
    fn abandon(&mut self) {
        let mut steps: Vec<Address> = self.running.values().map(|s| s.address.clone()).collect();
        steps.sort();
        for step in self.running.values() {
            step.abort.abort();
        }
        let _ = self.events.send(Update::Abandoned {
            steps,
            grace: self.grace,
        });
        self.grace_ends = None;
    }

    /// Save the records of stopped steps that arrived before they ended, and
    /// tell how the run ended.
    async fn finish<B: Backend>(
        self,
        mut rx: mpsc::UnboundedReceiver<StepMessage>,
        saver: &mut Saver<'_, B>,
    ) -> anyhow::Result<RunOutcome> {
        let Run {
            tx,
            pending,
            failed,
            interrupted,
            events,
            ..
        } = self;
        drop(tx);
        let mut batch = Batch::default();
        while let Some(msg) = rx.recv().await {
            match msg {
                StepMessage::Record(r) => {
                    record::apply(saver.state, r);
                    batch.dirty = true;
                }
                StepMessage::RecordSaved(r, done) => {
                    record::apply(saver.state, r);
                    batch.dirty = true;
                    batch.acks.push(done);
                }
                StepMessage::Progress(..)
                | StepMessage::Warning(..)
                | StepMessage::Retrying(..)
                | StepMessage::SafePoint(_) => {}
            }
        }
        batch.save(saver).await?;
        if interrupted {
            for c in pending {
                emit(
                    events,
                    c.address(),
                    EventKind::Skipped {
                        reason: "interrupted".into(),
                    },
                    None,
                );
            }
            return Ok(RunOutcome::Interrupted);
        }
        // A change still pending when nothing runs waits on changes that
        // can never finish (a dependency cycle): it did not happen, and the
        // run must not say it did.
        let mut failed = failed;
        for c in pending {
            let message = format!(
                "never started: it waits on {}, which could not finish first",
                c.depends_on
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            emit(
                events,
                c.address(),
                EventKind::Skipped {
                    reason: message.clone(),
                },
                None,
            );
            failed.push((c.address().clone(), message));
        }
        if failed.is_empty() {
            Ok(RunOutcome::Done)
        } else {
            Ok(RunOutcome::Failed(failed))
        }
    }
}

/// Send a step event on `events`, its elapsed time measured from `since`
/// (zero without).
fn emit(
    events: &mpsc::UnboundedSender<Update>,
    address: &Address,
    kind: EventKind,
    since: Option<&Instant>,
) {
    let _ = events.send(Update::Step(Event {
        address: address.clone(),
        kind,
        elapsed: since.map(Instant::elapsed).unwrap_or_default(),
    }));
}

/// Records applied to the state and not saved yet, and the steps waiting
/// for that save.
#[derive(Default)]
struct Batch {
    dirty: bool,
    acks: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Batch {
    /// Save the state if a record changed it, then tell the steps waiting.
    async fn save<B: Backend>(self, saver: &mut Saver<'_, B>) -> anyhow::Result<()> {
        if self.dirty {
            saver.save().await?;
        }
        for done in self.acks {
            let _ = done.send(());
        }
        Ok(())
    }
}

/// Act on one message of a step: apply a record to the state (saved with
/// its [`Batch`]), show progress, a warning or a retry; stop a step that
/// reached a safe point after an interruption.
fn handle(
    msg: StepMessage,
    state: &mut State,
    batch: &mut Batch,
    emit: &impl Fn(&Address, EventKind, Option<&Instant>),
    started: &BTreeMap<Address, Instant>,
    running: &HashMap<tokio::task::Id, Running>,
) {
    match msg {
        StepMessage::Record(r) => {
            record::apply(state, r);
            batch.dirty = true;
        }
        StepMessage::RecordSaved(r, done) => {
            record::apply(state, r);
            batch.dirty = true;
            batch.acks.push(done);
        }
        StepMessage::Progress(a, what) => {
            emit(&a, EventKind::Progress { what }, started.get(&a));
        }
        StepMessage::Warning(a, message) => {
            emit(&a, EventKind::Warning { message }, started.get(&a));
        }
        StepMessage::Retrying(a, notice) => {
            emit(&a, EventKind::Retrying { notice }, started.get(&a));
        }
        StepMessage::SafePoint(a) => {
            // Its Proxmox work is done and recorded (saved with this batch);
            // whatever it does next (a wait, a Talos call) can be left.
            for step in running.values().filter(|s| s.address == a) {
                if step.reporter.sections_open() == 0 {
                    step.abort.abort();
                }
            }
        }
    }
}
