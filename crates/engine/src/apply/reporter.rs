//! A step's channel to the executor: progress, records, warnings and retries
//! go out; the run's stop request and how the other steps ended come in. Its
//! Proxmox sections are what an interruption lets finish, and a wait that
//! needs another change is given up as soon as that change fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use talosprov_statefile::address::Address;

use super::record::Record;

/// What a step sends while it runs.
#[derive(Debug)]
pub enum StepMessage {
    /// Now doing this.
    Progress(Address, String),
    /// Record this in the state (saved at once).
    Record(Record),
    /// Record this in the state and say so once it is saved: the step waits
    /// for it before acting on what it records (a create intent). The sender
    /// is dropped unanswered when the save fails.
    RecordSaved(Record, tokio::sync::oneshot::Sender<()>),
    /// Tell the operator.
    Warning(Address, String),
    /// A client sends one of the step's requests again.
    Retrying(Address, talosprov_retry::Notice),
    /// The run is stopping and the step left its last Proxmox section: it
    /// holds nothing half-done, and may be stopped.
    SafePoint(Address),
}

/// How a step ended, as the steps that wait on it see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// Finished; its result is in the state.
    Done,
    /// Failed with this message.
    Failed(String),
    /// Did not run: a change it depends on failed.
    Skipped(String),
}

/// How every step of the run ended so far, by address.
pub type Outcomes = BTreeMap<Address, StepEnd>;

/// The error of a step that stopped because the run was interrupted (before
/// new Proxmox work, or at a safe point): not a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted before anything more was changed")]
pub struct Interrupted;

/// A step's channel to the executor: progress, records and warnings go out;
/// the run's stop request and the outcome of the other steps come in.
#[derive(Debug, Clone)]
pub struct Reporter {
    address: Address,
    tx: UnboundedSender<StepMessage>,
    stopping: watch::Receiver<bool>,
    outcomes: watch::Receiver<Outcomes>,
    sections: Arc<AtomicUsize>,
    slot: Arc<Slot>,
}

/// A step's place among the `-parallelism` slots of a run: held while the
/// step sends requests, given back while it only waits (see
/// [`Reporter::waiting`]), so `-parallelism` bounds the requests in flight,
/// not the nodes being waited on.
#[derive(Debug, Default)]
struct Slot {
    /// The run's slots; `None` for a step run on its own (no bound).
    slots: Option<Arc<Semaphore>>,
    /// The slot this step holds now.
    held: std::sync::Mutex<Option<OwnedSemaphorePermit>>,
}

impl Reporter {
    /// A reporter for the step at `address` that no one interrupts and no
    /// outcome reaches (a step run on its own).
    pub fn new(address: Address, tx: UnboundedSender<StepMessage>) -> Self {
        Reporter::for_run(
            address,
            tx,
            watch::channel(false).1,
            watch::channel(Outcomes::new()).1,
        )
    }

    /// This reporter holding `permit`, one of the run's `slots`, which
    /// [`Reporter::waiting`] gives back while the step waits.
    pub fn holding(mut self, slots: Arc<Semaphore>, permit: OwnedSemaphorePermit) -> Self {
        self.slot = Arc::new(Slot {
            slots: Some(slots),
            held: std::sync::Mutex::new(Some(permit)),
        });
        self
    }

    /// Run `wait`, a wait on a node or a task that sends nothing but probes,
    /// without holding the step's slot: another step takes it meanwhile, and
    /// this one queues for a slot again before going on.
    pub async fn waiting<T>(&self, wait: impl std::future::Future<Output = T>) -> T {
        let had = self
            .slot
            .held
            .lock()
            .expect("slot poisoned")
            .take()
            .is_some();
        let out = wait.await;
        if let (true, Some(slots)) = (had, &self.slot.slots)
            && let Ok(permit) = slots.clone().acquire_owned().await
        {
            *self.slot.held.lock().expect("slot poisoned") = Some(permit);
        }
        out
    }

    /// Whether the step holds one of the run's slots now (always `false` for
    /// a step run on its own).
    pub fn holds_slot(&self) -> bool {
        self.slot.held.lock().expect("slot poisoned").is_some()
    }

    /// A reporter for the step at `address` in a run: `stopping` turns true
    /// when the run is interrupted; `outcomes` holds how the other steps ended.
    pub fn for_run(
        address: Address,
        tx: UnboundedSender<StepMessage>,
        stopping: watch::Receiver<bool>,
        outcomes: watch::Receiver<Outcomes>,
    ) -> Self {
        Reporter {
            address,
            tx,
            stopping,
            outcomes,
            sections: Arc::new(AtomicUsize::new(0)),
            slot: Arc::new(Slot::default()),
        }
    }

    /// How many Proxmox sections the step is in now (0: nothing half-done).
    pub fn sections_open(&self) -> usize {
        self.sections.load(Ordering::SeqCst)
    }

    pub(super) fn progress(&self, what: impl Into<String>) {
        let _ = self
            .tx
            .send(StepMessage::Progress(self.address.clone(), what.into()));
    }

    pub(super) fn record(&self, r: Record) {
        let _ = self.tx.send(StepMessage::Record(r));
    }

    /// Record `r` and wait until the state holding it is saved.
    ///
    /// # Errors
    /// When the state could not be saved (the run then stops).
    pub(super) async fn record_saved(&self, r: Record) -> anyhow::Result<()> {
        let (done, saved) = tokio::sync::oneshot::channel();
        self.tx
            .send(StepMessage::RecordSaved(r, done))
            .map_err(|_| anyhow::anyhow!("the state is no longer being saved"))?;
        saved
            .await
            .map_err(|_| anyhow::anyhow!("the state could not be saved: nothing was created"))
    }

    pub(super) fn warn(&self, message: impl Into<String>) {
        let _ = self
            .tx
            .send(StepMessage::Warning(self.address.clone(), message.into()));
    }

    /// Tell the executor of a retry of one of this step's requests.
    pub fn retrying(&self, notice: &talosprov_retry::Notice) {
        let _ = self
            .tx
            .send(StepMessage::Retrying(self.address.clone(), notice.clone()));
    }

    fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Run Proxmox work that must not be cut off: once a request or task is
    /// sent, an interruption lets it run to its end (its UPID stopped), so the
    /// records sent inside `work` say what Proxmox confirmed. Put the records
    /// of what the work did inside it. Nothing new starts once the run is
    /// stopping: [`Interrupted`] then, without running `work`.
    ///
    /// # Errors
    /// [`Interrupted`], or `work`'s error.
    pub(super) async fn proxmox<T>(
        &self,
        work: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        self.sections.fetch_add(1, Ordering::SeqCst);
        if self.stopping() {
            self.leave_section();
            return Err(Interrupted.into());
        }
        let out = work.await;
        self.leave_section();
        out
    }

    fn leave_section(&self) {
        if self.sections.fetch_sub(1, Ordering::SeqCst) == 1 && self.stopping() {
            let _ = self.tx.send(StepMessage::SafePoint(self.address.clone()));
        }
    }

    /// Run `wait`, which can only succeed if at least one of the changes
    /// `needs` succeeds: once every one of them has failed or been skipped,
    /// it is given up at once with an error saying `why` and how they ended.
    /// With `needs` empty, `wait` runs alone.
    ///
    /// # Errors
    /// `wait`'s error, or the one naming the failed changes.
    pub(super) async fn unless_all_fail<T>(
        &self,
        needs: &[Address],
        why: &str,
        wait: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        if needs.is_empty() {
            return wait.await;
        }
        let mut outcomes = self.outcomes.clone();
        let hopeless = async {
            let ended = outcomes
                .wait_for(|o| {
                    needs
                        .iter()
                        .all(|a| matches!(o.get(a), Some(StepEnd::Failed(_) | StepEnd::Skipped(_))))
                })
                .await
                .map(|o| {
                    needs
                        .iter()
                        .map(|a| match o.get(a) {
                            Some(StepEnd::Failed(m)) => format!("{a} failed: {m}"),
                            Some(StepEnd::Skipped(m)) => format!("{a} did not run ({m})"),
                            _ => a.to_string(),
                        })
                        .collect::<Vec<_>>()
                        .join("; ")
                });
            match ended {
                Ok(text) => text,
                // The run is over: nothing more will fail.
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            result = wait => result,
            ended = hopeless => Err(anyhow::anyhow!("{why}: {ended}")),
        }
    }
}
