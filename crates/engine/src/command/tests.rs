//! The commands' workflows with a recording frontend and a local state in a
//! temporary folder: what they say, what they ask, and what the state holds
//! after a "yes", a "no", no terminal, a held lock and signals.

use std::sync::Mutex;

use tokio::sync::mpsc;

use super::store::{StateSettings, acquire, locked};
use super::*;
use talosprov_backend::backend::Backend as _;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;

/// How long any test may take before it fails as hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// A frontend that records what it is told and answers every question with
/// `answer`; signals come from the test through `signals`.
struct Recorder {
    lines: Mutex<Vec<String>>,
    asked: Mutex<Vec<Question>>,
    answer: Answer,
    signals: Mutex<Option<mpsc::UnboundedReceiver<&'static str>>>,
}

impl Recorder {
    fn new(answer: Answer) -> (Arc<Recorder>, mpsc::UnboundedSender<&'static str>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let r = Arc::new(Recorder {
            lines: Mutex::default(),
            asked: Mutex::default(),
            answer,
            signals: Mutex::new(Some(rx)),
        });
        (r, tx)
    }

    fn said(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }
}

impl Frontend for Recorder {
    fn warn(&self, text: &str) {
        self.push(format!("warn: {text}"));
    }
    fn note(&self, text: &str) {
        self.push(format!("note: {text}"));
    }
    fn diagnostics(&self, found: &[Diagnostic]) {
        self.push(format!("diagnostics: {}", found.len()));
    }
    fn retry(&self, notice: &Notice) {
        self.push(format!("retry: {}", notice.what));
    }
    fn show(&self, _shown: Shown<'_>) -> anyhow::Result<()> {
        self.push("show".to_owned());
        Ok(())
    }
    fn ask<'a>(&'a self, question: &'a Question) -> Pending<'a, anyhow::Result<Answer>> {
        self.asked.lock().unwrap().push(question.clone());
        let answer = self.answer;
        Box::pin(async move { Ok(answer) })
    }
    fn updates(&self) -> mpsc::UnboundedSender<Update> {
        mpsc::unbounded_channel().0
    }
    fn updates_done(&self) -> Pending<'_, ()> {
        Box::pin(async {})
    }
    fn gate(&self, event: &GateEvent) {
        self.push(format!("gate: {event:?}"));
    }
    fn gate_outcome(&self, outcome: &GateOutcome, _wait: Duration) {
        self.push(format!("gate passed: {}", outcome.passed()));
    }
    fn interrupts(&self) -> Option<Interrupts> {
        self.signals.lock().unwrap().take().map(Interrupts::new)
    }
    fn interrupted_by(&self) -> &'static str {
        "SIGTERM"
    }
}

/// A topology path in a new temporary folder (the file itself need not
/// exist: the state is then local, next to it).
fn settings(dir: &tempfile::TempDir) -> StateSettings {
    StateSettings {
        file: dir.path().join("cluster.yaml"),
        state: None,
        backend_config: Vec::new(),
    }
}

/// A state with one pool and one PCI mapping recorded, saved.
async fn seeded(settings: &StateSettings, ui: &Ui) -> State {
    let store = settings.open(ui).unwrap();
    let mut state = State::new(uuid::Uuid::new_v4());
    use talosprov_statefile::format::{PciMapping, Pool};
    state
        .resources
        .pools
        .insert("talos".to_owned(), Pool { comment: None });
    state.resources.pci_mappings.insert(
        "gpu".to_owned(),
        PciMapping {
            description: None,
            map: Vec::new(),
        },
    );
    store.save(&mut state, false).await.unwrap();
    state
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f).await.expect("hung")
}

#[tokio::test]
async fn state_rm_asks_with_the_addresses_and_a_no_removes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, _signals) = Recorder::new(Answer::No);
    let ui: Ui = rec.clone();
    let before = seeded(&s, &ui).await;
    let pool: Address = "pool/talos".parse().unwrap();
    let err = within(state::remove(
        &s,
        Duration::ZERO,
        std::slice::from_ref(&pool),
        false,
        &ui,
    ))
    .await
    .unwrap_err();
    let CommandError::Failed(e) = err else {
        panic!("{err:?}")
    };
    assert_eq!(e.to_string(), "state rm cancelled: nothing was removed");
    assert_eq!(
        *rec.asked.lock().unwrap(),
        [Question::Forget(vec![pool.clone()])]
    );
    let after = state::read(&s, &ui).await.unwrap();
    assert_eq!(after.serial, before.serial, "nothing saved");
    assert!(after.addresses().contains(&pool));
}

#[tokio::test]
async fn state_rm_removes_after_a_yes_and_not_without_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, _signals) = Recorder::new(Answer::NoTerminal);
    let ui: Ui = rec.clone();
    seeded(&s, &ui).await;
    let pool: Address = "pool/talos".parse().unwrap();
    let err = within(state::remove(
        &s,
        Duration::ZERO,
        std::slice::from_ref(&pool),
        false,
        &ui,
    ))
    .await
    .unwrap_err();
    assert!(format!("{err:?}").contains("add -auto-approve"), "{err:?}");
    let (rec, _signals) = Recorder::new(Answer::Yes);
    let ui: Ui = rec.clone();
    let removed = within(state::remove(
        &s,
        Duration::ZERO,
        std::slice::from_ref(&pool),
        false,
        &ui,
    ))
    .await
    .unwrap();
    assert_eq!(removed, 1);
    let left = state::list(&s, &ui).await.unwrap();
    assert!(!left.contains(&pool), "{left:?}");
    // Approved up front: nothing is asked.
    let (rec, _signals) = Recorder::new(Answer::No);
    let ui: Ui = rec.clone();
    let mapping: Address = "pci_mapping/gpu".parse().unwrap();
    within(state::remove(&s, Duration::ZERO, &[mapping], true, &ui))
        .await
        .unwrap();
    assert!(rec.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_address_not_in_the_state_is_named_and_nothing_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, _signals) = Recorder::new(Answer::Yes);
    let ui: Ui = rec.clone();
    seeded(&s, &ui).await;
    let missing: Address = "vm/nope".parse().unwrap();
    let err = within(state::remove(&s, Duration::ZERO, &[missing], false, &ui))
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("not in the state: vm/nope"),
        "{err:?}"
    );
    assert!(rec.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_held_lock_is_waited_for_said_once_and_then_refused_as_locked() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, _signals) = Recorder::new(Answer::Yes);
    let ui: Ui = rec.clone();
    seeded(&s, &ui).await;
    let holder = s.open(&ui).unwrap();
    let info = acquire(&holder, Duration::ZERO, "apply", &ui)
        .await
        .unwrap();
    let store = s.open(&ui).unwrap();
    let ran = within(locked(
        &store,
        Duration::from_millis(600),
        "plan",
        &ui,
        async |_| Ok(()),
    ))
    .await;
    assert!(matches!(ran, Err(CommandError::Locked(_))), "{ran:?}");
    let waits: Vec<String> = rec
        .said()
        .into_iter()
        .filter(|l| l.starts_with("note: Waiting for the state lock, held by"))
        .collect();
    assert_eq!(waits.len(), 1, "{:?}", rec.said());
    holder.unlock(&info.id).await.unwrap();
    within(locked(
        &store,
        Duration::ZERO,
        "plan",
        &ui,
        async |_| Ok(()),
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn a_first_signal_asks_the_body_to_stop_and_a_second_ends_it_releasing_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, signals) = Recorder::new(Answer::Yes);
    let ui: Ui = rec.clone();
    seeded(&s, &ui).await;
    let store = s.open(&ui).unwrap();
    // A body that sees the first signal and keeps going, as the executor
    // does while Proxmox work is in flight.
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    let run = locked(
        &store,
        Duration::ZERO,
        "apply",
        &ui,
        async |mut cancel| -> Result<(), CommandError> {
            cancel.wait_for(|c| *c).await.unwrap();
            seen_tx.send(()).unwrap();
            std::future::pending().await
        },
    );
    let drive = async {
        signals.send("SIGTERM").unwrap();
        seen_rx.recv().await.unwrap();
        signals.send("SIGTERM").unwrap();
    };
    let (ran, ()) = within(async { tokio::join!(run, drive) }).await;
    assert!(matches!(ran, Err(CommandError::Interrupted)), "{ran:?}");
    assert!(
        rec.said()
            .iter()
            .any(|l| l.starts_with("warn: SIGTERM received again: exiting at once")),
        "{:?}",
        rec.said()
    );
    // The lock was released: the next run takes it at once.
    within(locked(
        &store,
        Duration::ZERO,
        "plan",
        &ui,
        async |_| Ok(()),
    ))
    .await
    .unwrap();
}

#[tokio::test]
async fn approval_says_which_flag_skips_it_and_stops_on_a_signal() {
    let (rec, _signals) = Recorder::new(Answer::NoTerminal);
    let ui: Ui = rec.clone();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let err = approve(
        &ui,
        false,
        &Question::Destroy,
        "-auto-approve",
        "no",
        rx.clone(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:?}").contains("no terminal to confirm on: add -auto-approve"),
        "{err:?}"
    );
    approve(&ui, true, &Question::Destroy, "-auto-approve", "no", rx)
        .await
        .unwrap();
    assert_eq!(*rec.asked.lock().unwrap(), [Question::Destroy]);

    // A question nobody answers gives way to the interruption.
    struct Silent;
    impl Frontend for Silent {
        fn warn(&self, _: &str) {}
        fn note(&self, _: &str) {}
        fn diagnostics(&self, _: &[Diagnostic]) {}
        fn retry(&self, _: &Notice) {}
        fn show(&self, _: Shown<'_>) -> anyhow::Result<()> {
            Ok(())
        }
        fn ask<'a>(&'a self, _: &'a Question) -> Pending<'a, anyhow::Result<Answer>> {
            Box::pin(std::future::pending())
        }
        fn updates(&self) -> mpsc::UnboundedSender<Update> {
            mpsc::unbounded_channel().0
        }
        fn updates_done(&self) -> Pending<'_, ()> {
            Box::pin(async {})
        }
        fn gate(&self, _: &GateEvent) {}
        fn gate_outcome(&self, _: &GateOutcome, _: Duration) {}
        fn interrupts(&self) -> Option<Interrupts> {
            None
        }
        fn interrupted_by(&self) -> &'static str {
            "SIGINT"
        }
    }
    let ui: Ui = Arc::new(Silent);
    let (tx, rx) = tokio::sync::watch::channel(false);
    tx.send(true).unwrap();
    let err = within(approve(
        &ui,
        false,
        &Question::Apply,
        "-auto-approve",
        "no",
        rx,
    ))
    .await
    .unwrap_err();
    assert!(matches!(err, CommandError::Interrupted), "{err:?}");
}

#[tokio::test]
async fn encryption_needs_a_key_and_force_unlock_honours_a_no() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(&dir);
    let (rec, _signals) = Recorder::new(Answer::No);
    let ui: Ui = rec.clone();
    seeded(&s, &ui).await;
    if std::env::var_os(talosprov_backend::encrypt::PASSPHRASE_VAR).is_none() {
        let err = state::set_encryption(&s, Duration::ZERO, true, &ui)
            .await
            .unwrap_err();
        assert!(format!("{err:?}").contains("no state key"), "{err:?}");
    }
    let holder = s.open(&ui).unwrap();
    let info = acquire(&holder, Duration::ZERO, "apply", &ui)
        .await
        .unwrap();
    let err = state::force_unlock(&s, &info.id, false, &ui)
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("the lock is kept"), "{err:?}");
    let asked = rec.asked.lock().unwrap()[0].clone();
    let Question::ForceUnlock { id, location } = &asked else {
        panic!("asked {asked:?}");
    };
    assert_eq!(id, &info.id);
    assert_eq!(location, &holder.backend().describe());
    // Approved, it goes to the backend, which keeps a lock whose holder
    // still runs (this process).
    let err = state::force_unlock(&s, &info.id, true, &ui)
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("still running"), "{err:?}");
    assert_eq!(rec.asked.lock().unwrap().len(), 1, "approved: not asked");
    holder.unlock(&info.id).await.unwrap();
}
