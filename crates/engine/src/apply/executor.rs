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

use talosprov_core::plan::{Change, Plan};
use talosprov_state::format::State;
use talosprov_state::{Address, Backend, StateStore};

use super::context::Context;
use super::event::{Event, EventKind, Update};
use super::record;
use super::steps::{self, Interrupted, Outcomes, Reporter, StepEnd, StepMessage};

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
    let slots = Arc::new(Semaphore::new(parallelism.max(1)));
    let grace = provider.interrupt_grace();
    let changes: BTreeMap<Address, &Change> = plan
        .changes
        .iter()
        .map(|c| (c.address.clone(), c))
        .collect();
    let mut pending: Vec<&Change> = plan.changes.iter().collect();
    let mut done: BTreeSet<Address> = BTreeSet::new();
    let mut failed: Vec<(Address, String)> = Vec::new();
    let mut blocked: BTreeSet<Address> = BTreeSet::new();
    let mut started: BTreeMap<Address, Instant> = BTreeMap::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<StepMessage>();
    let (stopping, stopping_rx) = watch::channel(false);
    let (outcomes, outcomes_rx) = watch::channel(Outcomes::new());
    let mut tasks: JoinSet<(Address, anyhow::Result<()>)> = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, Running> = HashMap::new();
    let mut interrupted = *cancel.borrow();
    let mut grace_ends: Option<tokio::time::Instant> = None;
    // A slot the loop acquired while changes waited for one, for the next.
    let mut spare: Option<tokio::sync::OwnedSemaphorePermit> = None;
    let emit = |address: &Address, kind: EventKind, since: Option<&Instant>| {
        let _ = events.send(Update::Step(Event {
            address: address.clone(),
            kind,
            elapsed: since.map(Instant::elapsed).unwrap_or_default(),
        }));
    };
    let ended = |address: &Address, end: StepEnd| {
        outcomes.send_modify(|o| {
            o.insert(address.clone(), end);
        });
    };
    if interrupted {
        stopping.send_replace(true);
    }

    loop {
        // Skip what depends on a failure; start what is ready while a slot is free.
        let mut ready_without_slot = false;
        if !interrupted {
            let mut i = 0;
            while i < pending.len() {
                let c = pending[i];
                let deps_failed = c.depends_on.iter().any(|d| blocked.contains(d));
                if deps_failed {
                    blocked.insert(c.address.clone());
                    let reason = "a change it depends on failed".to_owned();
                    emit(
                        &c.address,
                        EventKind::Skipped {
                            reason: reason.clone(),
                        },
                        None,
                    );
                    ended(&c.address, StepEnd::Skipped(reason));
                    pending.remove(i);
                    continue;
                }
                let ready = c
                    .depends_on
                    .iter()
                    .all(|d| done.contains(d) || !changes.contains_key(d));
                let slot = if ready {
                    spare
                        .take()
                        .or_else(|| slots.clone().try_acquire_owned().ok())
                } else {
                    None
                };
                ready_without_slot |= ready && slot.is_none();
                if let Some(permit) = slot {
                    pending.remove(i);
                    started.insert(c.address.clone(), Instant::now());
                    emit(&c.address, EventKind::Started { action: c.action }, None);
                    let provider = provider.clone();
                    let change = c.clone();
                    let reporter = Reporter::for_run(
                        c.address.clone(),
                        tx.clone(),
                        stopping_rx.clone(),
                        outcomes_rx.clone(),
                    )
                    .holding(slots.clone(), permit);
                    let step_reporter = reporter.clone();
                    let abort = tasks.spawn(async move {
                        let retries = step_reporter.clone();
                        let watcher: talosprov_retry::Watcher =
                            Arc::new(move |n: &talosprov_retry::Notice| retries.retrying(n));
                        let result = talosprov_retry::watched(
                            watcher,
                            provider.apply(&change, &step_reporter),
                        )
                        .await;
                        (change.address, result)
                    });
                    running.insert(
                        abort.id(),
                        Running {
                            address: c.address.clone(),
                            abort,
                            reporter,
                        },
                    );
                    continue;
                }
                i += 1;
            }
        }
        if running.is_empty() {
            break;
        }
        let grace_over = async {
            match grace_ends {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some(msg) = rx.recv() => {
                handle(msg, saver, &emit, &started, &running).await?;
            }
            // A slot came free (a step finished or went waiting): the loop
            // starts the next ready change with it. Slots go first come, first
            // served, between new changes and steps coming back from a wait.
            Ok(permit) = slots.clone().acquire_owned(), if ready_without_slot && !interrupted => {
                spare = Some(permit);
            }
            Some(joined) = tasks.join_next_with_id() => {
                // Records sent before the step ended are saved before it counts as done.
                while let Ok(msg) = rx.try_recv() {
                    handle(msg, saver, &emit, &started, &running).await?;
                }
                match joined {
                    Ok((id, (address, Ok(())))) => {
                        running.remove(&id);
                        let action = changes[&address].action;
                        emit(&address, EventKind::Finished { action }, started.get(&address));
                        ended(&address, StepEnd::Done);
                        done.insert(address);
                    }
                    Ok((id, (address, Err(e)))) if interrupted && is_interrupted(&e) => {
                        running.remove(&id);
                        emit(&address, EventKind::Skipped { reason: "interrupted".into() }, started.get(&address));
                    }
                    Ok((id, (address, Err(e)))) => {
                        running.remove(&id);
                        let message = format!("{e:#}");
                        emit(&address, EventKind::Failed { message: message.clone() }, started.get(&address));
                        ended(&address, StepEnd::Failed(message.clone()));
                        blocked.insert(address.clone());
                        failed.push((address, message));
                    }
                    Err(e) if e.is_cancelled() => {
                        if let Some(step) = running.remove(&e.id()) {
                            emit(
                                &step.address,
                                EventKind::Skipped { reason: "interrupted".into() },
                                started.get(&step.address),
                            );
                        }
                    }
                    Err(e) => return Err(anyhow::anyhow!("a step panicked: {e}")),
                }
            },
            changed = cancel.changed(), if !interrupted => {
                if changed.is_err() || *cancel.borrow() {
                    interrupted = true;
                    stopping.send_replace(true);
                    // Read after `stopping` is set: a step entering a section
                    // now either counts here or sees `stopping` and does not start.
                    let mut finishing = Vec::new();
                    for step in running.values() {
                        if step.reporter.sections_open() > 0 {
                            finishing.push(step.address.clone());
                        } else {
                            step.abort.abort();
                        }
                    }
                    finishing.sort();
                    let _ = events.send(Update::Interrupted { finishing, grace });
                    grace_ends = Some(tokio::time::Instant::now() + grace);
                }
            },
            () = grace_over => {
                let mut steps: Vec<Address> = running.values().map(|s| s.address.clone()).collect();
                steps.sort();
                for step in running.values() {
                    step.abort.abort();
                }
                let _ = events.send(Update::Abandoned { steps, grace });
                grace_ends = None;
            },
        }
    }
    // Records of stopped steps that arrived before they ended are kept.
    drop(tx);
    while let Some(msg) = rx.recv().await {
        if let StepMessage::Record(r) | StepMessage::RecordSaved(r, _) = msg {
            saver.record(r).await?;
        }
    }
    if interrupted {
        for c in pending {
            emit(
                &c.address,
                EventKind::Skipped {
                    reason: "interrupted".into(),
                },
                None,
            );
        }
        return Ok(RunOutcome::Interrupted);
    }
    if failed.is_empty() {
        Ok(RunOutcome::Done)
    } else {
        Ok(RunOutcome::Failed(failed))
    }
}

/// Act on one message of a step: save a record, show progress, a warning or
/// a retry; stop a step that reached a safe point after an interruption.
async fn handle<B: Backend>(
    msg: StepMessage,
    saver: &mut Saver<'_, B>,
    emit: &impl Fn(&Address, EventKind, Option<&Instant>),
    started: &BTreeMap<Address, Instant>,
    running: &HashMap<tokio::task::Id, Running>,
) -> anyhow::Result<()> {
    match msg {
        StepMessage::Record(r) => saver.record(r).await?,
        StepMessage::RecordSaved(r, done) => {
            saver.record(r).await?;
            let _ = done.send(());
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
            // Its Proxmox work is done and recorded; whatever it does next
            // (a wait, a Talos call) can be left.
            for step in running.values().filter(|s| s.address == a) {
                if step.reporter.sections_open() == 0 {
                    step.abort.abort();
                }
            }
        }
    }
    Ok(())
}
