//! The executor: runs a plan's changes on tokio in dependency order with at
//! most `parallelism` at once, applies each step's records to the state and
//! saves it after every one, emits events for the views, and on interruption
//! starts nothing new, abandons the running waits and saves what is done.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::plan::{Change, Plan};
use crate::state::format::State;
use crate::state::{Address, Backend, StateStore};

use super::event::{Event, EventKind};
use super::record;
use super::steps::{self, Context, Reporter, StepMessage};

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
    async fn record(&mut self, r: record::Record) -> anyhow::Result<()> {
        record::apply(self.state, r);
        self.store
            .save(self.state, self.encrypted)
            .await
            .map_err(|e| anyhow::Error::new(e).context("cannot save the state"))
    }
}

/// Run `plan`'s changes.
///
/// # Errors
/// Only a state save failure (the run stops at once: without a saved state
/// nothing more may change). Step failures are in [`RunOutcome::Failed`].
pub async fn execute<B: Backend>(
    ctx: Arc<Context>,
    plan: &Plan,
    saver: &mut Saver<'_, B>,
    parallelism: usize,
    events: &mpsc::UnboundedSender<Event>,
    mut cancel: watch::Receiver<bool>,
) -> anyhow::Result<RunOutcome> {
    let parallelism = parallelism.max(1);
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
    let mut running: JoinSet<(Address, anyhow::Result<()>)> = JoinSet::new();
    let mut interrupted = *cancel.borrow();
    let emit = |address: &Address, kind: EventKind, since: Option<&Instant>| {
        let _ = events.send(Event {
            address: address.clone(),
            kind,
            elapsed: since.map(Instant::elapsed).unwrap_or_default(),
        });
    };

    loop {
        // Skip what depends on a failure; start what is ready.
        if !interrupted {
            let mut i = 0;
            while i < pending.len() {
                let c = pending[i];
                let deps_failed = c.depends_on.iter().any(|d| blocked.contains(d));
                if deps_failed {
                    blocked.insert(c.address.clone());
                    emit(
                        &c.address,
                        EventKind::Skipped {
                            reason: "a change it depends on failed".into(),
                        },
                        None,
                    );
                    pending.remove(i);
                    continue;
                }
                let ready = c
                    .depends_on
                    .iter()
                    .all(|d| done.contains(d) || !changes.contains_key(d));
                if ready && running.len() < parallelism {
                    pending.remove(i);
                    started.insert(c.address.clone(), Instant::now());
                    emit(&c.address, EventKind::Started { action: c.action }, None);
                    let ctx = ctx.clone();
                    let change = c.clone();
                    let reporter = Reporter::new(c.address.clone(), tx.clone());
                    running.spawn(async move {
                        let result = steps::run(&ctx, &change, &reporter).await;
                        (change.address, result)
                    });
                    continue;
                }
                i += 1;
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some(msg) = rx.recv() => match msg {
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
            },
            Some(joined) = running.join_next() => {
                // Records sent before the step ended are saved before it counts as done.
                while let Ok(msg) = rx.try_recv() {
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
                    }
                }
                match joined {
                    Ok((address, Ok(()))) => {
                        let action = changes[&address].action;
                        emit(&address, EventKind::Finished { action }, started.get(&address));
                        done.insert(address);
                    }
                    Ok((address, Err(e))) => {
                        let message = format!("{e:#}");
                        emit(&address, EventKind::Failed { message: message.clone() }, started.get(&address));
                        blocked.insert(address.clone());
                        failed.push((address, message));
                    }
                    Err(e) if e.is_cancelled() => {}
                    Err(e) => return Err(anyhow::anyhow!("a step panicked: {e}")),
                }
            },
            changed = cancel.changed(), if !interrupted => {
                if changed.is_err() || *cancel.borrow() {
                    interrupted = true;
                    running.abort_all();
                }
            },
        }
    }
    // Records of abandoned steps that arrived before the abort are kept.
    drop(tx);
    while let Some(msg) = rx.recv().await {
        match msg {
            StepMessage::Record(r) | StepMessage::RecordSaved(r, _) => saver.record(r).await?,
            _ => {}
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
