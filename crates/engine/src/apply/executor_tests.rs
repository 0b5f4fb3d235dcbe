//! The executor on its own, driven by a scripted fake provider and an
//! in-memory state backend: no Proxmox, no Talos, no network. The fake
//! asserts the conversation (which change is made, in which order) and every
//! test runs under a timeout, so a missing or extra call fails it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use super::*;
use crate::apply::memory::{Memory, SharedMemory};
use talosprov_plan::change::{Action, Change};

/// How long any test may take before it fails as hung.
const DEADLINE: Duration = Duration::from_secs(10);

/// What a scripted step does, in order.
#[derive(Clone)]
enum Act {
    /// Record the pool named after the step.
    Record,
    /// Record these pools one after the other, with no pause between.
    RecordAll(Vec<&'static str>),
    /// Block while holding its slot, until the gate gives a permit.
    Busy(Arc<Semaphore>),
    /// Block in a wait (its slot given back), until the gate gives a permit.
    Wait(Arc<Semaphore>),
    /// Block inside a Proxmox section until the gate gives a permit, then record.
    ProxmoxTask(Arc<Semaphore>),
    /// Fail with this message.
    Fail(&'static str),
    /// Check that the last saved state holds these pools (what the changes
    /// this one depends on recorded).
    SeesSaved(Vec<&'static str>),
}

/// A provider that plays a script per change, logs the conversation and
/// counts how many steps are busy (holding a slot) and waiting at once.
struct Fake {
    script: BTreeMap<String, Vec<Act>>,
    log: Mutex<Vec<String>>,
    busy: AtomicUsize,
    most_busy: AtomicUsize,
    waiting: AtomicUsize,
    most_waiting: AtomicUsize,
    backend: Arc<Memory>,
}

impl Fake {
    fn new(script: &[(&str, Vec<Act>)], backend: Arc<Memory>) -> Arc<Fake> {
        Arc::new(Fake {
            script: script
                .iter()
                .map(|(a, acts)| ((*a).to_owned(), acts.clone()))
                .collect(),
            log: Mutex::new(Vec::new()),
            busy: AtomicUsize::new(0),
            most_busy: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            most_waiting: AtomicUsize::new(0),
            backend,
        })
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    fn note(&self, line: String) {
        self.log.lock().expect("log").push(line);
    }
}

fn enter(now: &AtomicUsize, most: &AtomicUsize) {
    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(n, Ordering::SeqCst);
}

impl Provider for Fake {
    async fn apply(&self, change: &Change, r: &Reporter) -> anyhow::Result<()> {
        let name = match &change.address() {
            Address::Pool(n) => n.clone(),
            other @ Address::Image(_)
            | other @ Address::PciMapping(_)
            | other @ Address::HaRule(_)
            | other @ Address::Vm(_)
            | other @ Address::Config(_)
            | other @ Address::Bootstrap
            | other @ Address::Kubeconfig
            | other @ Address::Talosconfig
            | other @ Address::Object(_) => panic!("unexpected change {other}"),
        };
        let acts = self
            .script
            .get(&name)
            .unwrap_or_else(|| panic!("the script has no step for pool/{name}"))
            .clone();
        self.note(format!("start {name}"));
        for act in acts {
            match act {
                Act::Record => r.record(record::Record::Pool(name.clone())),
                Act::RecordAll(pools) => {
                    for p in pools {
                        r.record(record::Record::Pool(p.to_owned()));
                    }
                }
                Act::Busy(gate) => {
                    assert!(r.holds_slot(), "{name} works without a slot");
                    enter(&self.busy, &self.most_busy);
                    let permit = gate.acquire().await.expect("gate");
                    permit.forget();
                    self.busy.fetch_sub(1, Ordering::SeqCst);
                }
                Act::Wait(gate) => {
                    r.waiting(async {
                        enter(&self.waiting, &self.most_waiting);
                        gate.acquire().await.expect("gate").forget();
                        self.waiting.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await;
                    assert!(r.holds_slot(), "{name} goes on without its slot back");
                }
                Act::ProxmoxTask(gate) => {
                    r.proxmox(async {
                        gate.acquire().await.expect("gate").forget();
                        r.record(record::Record::Pool(name.clone()));
                        Ok(())
                    })
                    .await?;
                }
                Act::Fail(message) => {
                    self.note(format!("fail {name}"));
                    anyhow::bail!("{message}");
                }
                Act::SeesSaved(pools) => {
                    let saved = self.backend.pools();
                    for p in pools {
                        assert!(
                            saved.iter().any(|s| s == p),
                            "{name} started before {p}'s record was saved: {saved:?}"
                        );
                    }
                }
            }
        }
        self.note(format!("end {name}"));
        Ok(())
    }

    fn interrupt_grace(&self) -> Duration {
        Duration::from_secs(5)
    }
}

/// A plan creating pools `name` with their dependencies.
fn plan(changes: &[(&str, &[&str])]) -> Plan {
    Plan::of_changes(
        changes
            .iter()
            .map(|(name, deps)| {
                let mut c = talosprov_plan::example::change(
                    Address::Pool((*name).to_owned()),
                    Action::Create,
                    "",
                )
                .expect("a change of that kind");
                c.depends_on = deps
                    .iter()
                    .map(|d| Address::Pool((*d).to_owned()))
                    .collect();
                c
            })
            .collect(),
    )
}

/// What a run gave: its outcome and the step events, as `kind address`.
struct Ran {
    outcome: anyhow::Result<RunOutcome>,
    events: Vec<String>,
}

/// Run `plan` with `fake` over `backend`, under the deadline; `cancel` may
/// interrupt it.
async fn run(
    fake: Arc<Fake>,
    plan: &Plan,
    backend: Arc<Memory>,
    parallelism: usize,
    cancel: watch::Receiver<bool>,
) -> Ran {
    let store = StateStore::new(SharedMemory(backend), None);
    let mut state = State::new(uuid::Uuid::from_u128(7));
    let mut saver = Saver {
        store: &store,
        encrypted: false,
        state: &mut state,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let outcome = tokio::time::timeout(
        DEADLINE,
        execute(fake, plan, &mut saver, parallelism, &tx, cancel),
    )
    .await
    .expect("the run ended within the deadline");
    drop(tx);
    let mut events = Vec::new();
    while let Some(u) = rx.recv().await {
        if let Update::Step(e) = u {
            let kind = match e.kind {
                EventKind::Started { .. } => "started",
                EventKind::Finished { .. } => "finished",
                EventKind::Failed { .. } => "failed",
                EventKind::Skipped { .. } => "skipped",
                EventKind::Progress { .. }
                | EventKind::Warning { .. }
                | EventKind::Retrying { .. } => continue,
            };
            events.push(format!("{kind} {}", e.address));
        }
    }
    Ran { outcome, events }
}

fn never_cancelled() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    std::mem::forget(tx);
    rx
}

fn gate() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(0))
}

#[tokio::test]
async fn changes_run_in_dependency_order_and_each_sees_the_records_before_it_saved() {
    let backend = Arc::new(Memory::default());
    let fake = Fake::new(
        &[
            ("c", vec![Act::SeesSaved(vec!["a", "b"]), Act::Record]),
            ("b", vec![Act::SeesSaved(vec!["a"]), Act::Record]),
            ("a", vec![Act::Record]),
        ],
        backend.clone(),
    );
    let p = plan(&[("a", &[]), ("b", &["a"]), ("c", &["b"])]);
    let ran = run(fake.clone(), &p, backend.clone(), 10, never_cancelled()).await;
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Done);
    assert_eq!(
        fake.log(),
        ["start a", "end a", "start b", "end b", "start c", "end c"]
    );
    // One save per record, each holding what finished before it.
    let saved: Vec<Vec<String>> = backend
        .states()
        .iter()
        .map(|s| s.resources.pools.keys().cloned().collect())
        .collect();
    assert_eq!(saved, [vec!["a"], vec!["a", "b"], vec!["a", "b", "c"]]);
}

#[tokio::test]
async fn records_that_arrive_together_are_saved_once() {
    let backend = Arc::new(Memory::default());
    let fake = Fake::new(
        &[("a", vec![Act::RecordAll(vec!["x", "y", "z"]), Act::Record])],
        backend.clone(),
    );
    let p = plan(&[("a", &[])]);
    let ran = run(fake, &p, backend.clone(), 10, never_cancelled()).await;
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Done);
    let saved: Vec<Vec<String>> = backend
        .states()
        .iter()
        .map(|s| s.resources.pools.keys().cloned().collect())
        .collect();
    assert_eq!(
        saved,
        [vec!["a", "x", "y", "z"]],
        "one save for four records"
    );
}

#[tokio::test]
async fn a_ready_change_deeper_in_the_chain_starts_first() {
    let backend = Arc::new(Memory::default());
    let fake = Fake::new(
        &[
            ("a", vec![Act::Record]),
            ("b", vec![Act::Record]),
            ("c", vec![Act::Record]),
        ],
        backend.clone(),
    );
    // One slot: once a is done, c (which waits for a) goes before b, as a
    // node's config goes before another node's VM.
    let p = plan(&[("a", &[]), ("b", &[]), ("c", &["a"])]);
    let ran = run(fake.clone(), &p, backend, 1, never_cancelled()).await;
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Done);
    assert_eq!(
        fake.log(),
        ["start a", "end a", "start c", "end c", "start b", "end b"]
    );
}

#[tokio::test]
async fn at_most_parallelism_steps_work_at_once() {
    let backend = Arc::new(Memory::default());
    let g = gate();
    let names = ["a", "b", "c", "d", "e"];
    let script: Vec<(&str, Vec<Act>)> = names
        .iter()
        .map(|n| (*n, vec![Act::Busy(g.clone()), Act::Record]))
        .collect();
    let fake = Fake::new(&script, backend.clone());
    let p = plan(&names.map(|n| (n, &[][..])));
    let released = {
        let (g, fake) = (g.clone(), fake.clone());
        async move {
            // Let each busy step go once two are busy at once, one by one.
            for _ in 0..names.len() {
                while fake.busy.load(Ordering::SeqCst) < 2
                    && fake.log().iter().filter(|l| l.starts_with("end")).count() < 3
                {
                    tokio::task::yield_now().await;
                }
                g.add_permits(1);
                tokio::task::yield_now().await;
            }
        }
    };
    let (ran, ()) = tokio::join!(
        run(fake.clone(), &p, backend.clone(), 2, never_cancelled()),
        released
    );
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Done);
    assert_eq!(fake.most_busy.load(Ordering::SeqCst), 2);
    assert_eq!(backend.pools(), names);
}

#[tokio::test]
async fn waiting_gives_the_slot_back_so_every_node_is_waited_on_at_once() {
    let backend = Arc::new(Memory::default());
    let g = gate();
    let names = ["a", "b", "c", "d"];
    let script: Vec<(&str, Vec<Act>)> = names
        .iter()
        .map(|n| (*n, vec![Act::Wait(g.clone()), Act::Record]))
        .collect();
    let fake = Fake::new(&script, backend.clone());
    let p = plan(&names.map(|n| (n, &[][..])));
    let released = {
        let (g, fake) = (g.clone(), fake.clone());
        async move {
            // With one slot, all four reach their wait before any ends it.
            while fake.waiting.load(Ordering::SeqCst) < names.len() {
                tokio::task::yield_now().await;
            }
            g.add_permits(names.len());
        }
    };
    let (ran, ()) = tokio::join!(
        run(fake.clone(), &p, backend.clone(), 1, never_cancelled()),
        released
    );
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Done);
    assert_eq!(fake.most_waiting.load(Ordering::SeqCst), names.len());
}

#[tokio::test]
async fn a_failure_skips_what_depends_on_it_and_the_rest_goes_on() {
    let backend = Arc::new(Memory::default());
    let fake = Fake::new(
        &[
            ("a", vec![Act::Fail("Proxmox said no")]),
            ("b", vec![Act::Record]),
            ("c", vec![Act::Record]),
            ("independent", vec![Act::Record]),
        ],
        backend.clone(),
    );
    let p = plan(&[
        ("a", &[]),
        ("b", &["a"]),
        ("c", &["b"]),
        ("independent", &[]),
    ]);
    let ran = run(fake.clone(), &p, backend.clone(), 1, never_cancelled()).await;
    assert_eq!(
        ran.outcome.expect("run"),
        RunOutcome::Failed(vec![(Address::Pool("a".into()), "Proxmox said no".into())])
    );
    assert!(
        !fake
            .log()
            .iter()
            .any(|l| l.ends_with(" b") || l.ends_with(" c"))
    );
    for skipped in ["skipped pool/b", "skipped pool/c"] {
        assert!(ran.events.iter().any(|e| e == skipped), "{:?}", ran.events);
    }
    assert_eq!(backend.pools(), ["independent"]);
}

#[tokio::test]
async fn an_interruption_starts_nothing_new_stops_waits_and_lets_proxmox_work_finish() {
    let backend = Arc::new(Memory::default());
    let (task, wait) = (gate(), gate());
    let fake = Fake::new(
        &[
            ("task", vec![Act::ProxmoxTask(task.clone())]),
            ("waiter", vec![Act::Wait(wait.clone()), Act::Record]),
            ("later", vec![Act::Record]),
        ],
        backend.clone(),
    );
    let p = plan(&[("task", &[]), ("waiter", &[]), ("later", &["task"])]);
    let (cancel_tx, cancel) = watch::channel(false);
    let interrupt = {
        let fake = fake.clone();
        async move {
            while fake.waiting.load(Ordering::SeqCst) < 1 || fake.log().len() < 2 {
                tokio::task::yield_now().await;
            }
            cancel_tx.send_replace(true);
            // The task sent before the interruption runs to its end.
            task.add_permits(1);
            cancel_tx
        }
    };
    let (ran, _tx) = tokio::join!(
        run(fake.clone(), &p, backend.clone(), 10, cancel),
        interrupt
    );
    assert_eq!(ran.outcome.expect("run"), RunOutcome::Interrupted);
    // The Proxmox work was recorded; the wait was left; nothing new started.
    assert_eq!(backend.pools(), ["task"]);
    assert!(
        !fake.log().iter().any(|l| l.contains("later")),
        "{:?}",
        fake.log()
    );
    assert!(!fake.log().contains(&"end waiter".to_owned()));
    assert!(
        ran.events.contains(&"skipped pool/later".to_owned()),
        "{:?}",
        ran.events
    );
}

#[tokio::test]
async fn a_crash_between_steps_leaves_the_state_with_exactly_the_finished_ones() {
    // The third save fails, as a disk that is gone: the run stops at once,
    // and the stored state holds the two finished steps, nothing of the third.
    let backend = Arc::new(Memory {
        fail_at: Some(3),
        ..Memory::default()
    });
    let fake = Fake::new(
        &[
            ("a", vec![Act::Record]),
            ("b", vec![Act::Record]),
            ("c", vec![Act::Record]),
            ("d", vec![Act::Record]),
        ],
        backend.clone(),
    );
    let p = plan(&[("a", &[]), ("b", &["a"]), ("c", &["b"]), ("d", &["c"])]);
    let ran = run(fake.clone(), &p, backend.clone(), 10, never_cancelled()).await;
    let err = ran.outcome.expect_err("a failed save stops the run");
    assert!(
        format!("{err:#}").contains("cannot save the state"),
        "{err:#}"
    );
    assert_eq!(backend.pools(), ["a", "b"]);
    assert!(
        !fake.log().iter().any(|l| l.contains(" d")),
        "{:?}",
        fake.log()
    );

    // A process killed between two steps: the run is dropped while the
    // second one is busy; what the first recorded is stored, nothing more.
    let backend = Arc::new(Memory::default());
    let g = gate();
    let fake = Fake::new(
        &[
            ("a", vec![Act::Record]),
            ("b", vec![Act::Busy(g.clone()), Act::Record]),
        ],
        backend.clone(),
    );
    let p = plan(&[("a", &[]), ("b", &["a"])]);
    let killed = {
        let fake = fake.clone();
        async move {
            while !fake.log().contains(&"start b".to_owned()) {
                tokio::task::yield_now().await;
            }
        }
    };
    tokio::select! {
        _ = run(fake.clone(), &p, backend.clone(), 10, never_cancelled()) => panic!("b never ends"),
        () = killed => {}
    }
    assert_eq!(backend.pools(), ["a"]);
    assert_eq!(backend.states().len(), 1);
}
