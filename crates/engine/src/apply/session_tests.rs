//! The apply workflow on its own: scripted edges, a fake provider and an
//! in-memory backend. Each test asserts the conversation with the edges in
//! order and what was saved, under a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;

use super::*;
use crate::apply::memory::{Memory, SharedMemory};
use crate::apply::reporter::Reporter;
use talosprov_plan::change::{Action, Change};
use talosprov_statefile::address::Address;

/// How long any test may take before it fails as hung.
const DEADLINE: Duration = Duration::from_secs(10);

/// The conversation, shared by the edges and the provider.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, line: impl Into<String>) {
    log.lock().expect("log").push(line.into());
}

/// A provider that records each pool it is asked to create.
struct Fake {
    log: Log,
}

impl Provider for Fake {
    async fn apply(&self, change: &Change, r: &Reporter) -> anyhow::Result<()> {
        note(&self.log, format!("apply {}", change.address()));
        if let Address::Pool(name) = &change.address() {
            r.record(record::Record::Pool(name.clone()));
        }
        Ok(())
    }

    fn interrupt_grace(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// Edges that hand out one planned result and answer the question as told.
struct Scripted {
    planned: Option<Planned>,
    yes: bool,
    log: Log,
}

impl Edges for Scripted {
    type Provider = Fake;
    type Error = anyhow::Error;

    async fn plan(&mut self, state: Option<&State>) -> anyhow::Result<Planned> {
        note(
            &self.log,
            format!("plan from {}", state.map_or("no state", |_| "the state")),
        );
        Ok(self.planned.take().expect("plan asked once"))
    }

    fn show(&mut self, shown: Shown<'_>) -> anyhow::Result<()> {
        let (what, plan) = match shown {
            Shown::Plan(p) => ("plan", p),
            Shown::Drift(p) => ("drift", p),
            Shown::Rotation(_) => unreachable!("apply shows no rotation"),
        };
        note(&self.log, format!("show {what} of {}", plan.changes.len()));
        Ok(())
    }

    async fn approve(&mut self, question: Question) -> anyhow::Result<()> {
        note(&self.log, format!("ask {question:?}"));
        if self.yes {
            Ok(())
        } else {
            anyhow::bail!("apply cancelled")
        }
    }

    fn talosconfig(&mut self, _: &SecretsBundle) -> anyhow::Result<Sensitive> {
        note(&self.log, "talosconfig");
        Ok(Sensitive::new("talosconfig text".to_owned()))
    }

    fn provider(&mut self, state: &State, _: Desired, _: &SecretsBundle) -> anyhow::Result<Fake> {
        note(
            &self.log,
            format!(
                "provider (secrets saved: {}, talosconfig saved: {})",
                state.secrets.is_some(),
                state.outputs.talosconfig.is_some()
            ),
        );
        Ok(Fake {
            log: self.log.clone(),
        })
    }

    fn events(&mut self) -> mpsc::UnboundedSender<Update> {
        note(&self.log, "events");
        mpsc::unbounded_channel().0
    }
}

/// A plan creating the pools `names`.
fn plan_of(names: &[&str]) -> Plan {
    Plan::of_changes(
        names
            .iter()
            .map(|n| {
                talosprov_plan::example::change(Address::Pool((*n).to_owned()), Action::Create, "")
                    .expect("a change of that kind")
            })
            .collect(),
    )
}

fn bundle() -> SecretsBundle {
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
    SecretsBundle::generate_for_checks(&mut rng, time::OffsetDateTime::UNIX_EPOCH)
        .expect("a bundle")
}

fn planned(plan: Plan) -> Planned {
    Planned {
        plan,
        desired: Desired::default(),
        secrets: bundle(),
        generated: Some(Sensitive::new("generated secrets".to_owned())),
        observed: Observed::default(),
        inputs: InputDigests::default(),
        renderings: BTreeMap::new(),
        pools: BTreeMap::new(),
        renewal: talosprov_plan::renewal::Renewal::at(time::OffsetDateTime::UNIX_EPOCH),
    }
}

fn never_cancelled() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    std::mem::forget(tx);
    rx
}

fn settings(saved: Option<SavedPlan>, refresh_only: bool) -> Settings {
    Settings {
        saved,
        refresh_only,
        parallelism: 10,
        max_parallel_upgrades: NonZeroUsize::MIN,
        restore: None,
    }
}

/// Run the workflow over `backend`; the conversation and the result.
async fn run(
    settings: &Settings,
    backend: Arc<Memory>,
    planned: Option<Planned>,
    yes: bool,
) -> (Vec<String>, anyhow::Result<Report>) {
    let store = StateStore::new(SharedMemory(backend), None);
    let log = Log::default();
    let mut edges = Scripted {
        planned,
        yes,
        log: log.clone(),
    };
    let result = tokio::time::timeout(
        DEADLINE,
        apply(settings, &store, &mut edges, never_cancelled()),
    )
    .await
    .expect("the workflow ended within the deadline");
    let lines = log.lock().expect("log").clone();
    (lines, result)
}

/// A backend holding one saved state with `lineage`.
async fn with_state(lineage: u128) -> Arc<Memory> {
    let backend = Arc::new(Memory::default());
    let store = StateStore::new(SharedMemory(backend.clone()), None);
    let mut state = State::new(uuid::Uuid::from_u128(lineage));
    state.secrets = Some(Sensitive::new("recorded secrets".to_owned()));
    store.save(&mut state, false).await.expect("saved");
    backend
}

#[tokio::test]
async fn a_first_apply_saves_secrets_then_talosconfig_before_the_first_change() {
    let backend = Arc::new(Memory::default());
    let (log, result) = run(
        &settings(None, false),
        backend.clone(),
        Some(planned(plan_of(&["a", "b"]))),
        true,
    )
    .await;
    assert!(matches!(result, Ok(Report::Ran(_, RunOutcome::Done))));
    assert_eq!(
        log,
        [
            "plan from no state",
            "show plan of 2",
            "ask Apply",
            "talosconfig",
            "provider (secrets saved: true, talosconfig saved: true)",
            "events",
            "apply pool/a",
            "apply pool/b",
        ]
    );
    let states = backend.states();
    assert_eq!(
        states[0].secrets.as_ref().map(|s| s.expose().as_str()),
        Some("generated secrets"),
        "the first save holds the secrets"
    );
    assert!(states[0].outputs.talosconfig.is_none());
    assert!(states[1].outputs.talosconfig.is_some());
    assert!(
        states[1].resources.pools.is_empty(),
        "no change before the talosconfig"
    );
    assert_eq!(backend.pools(), ["a", "b"]);
}

#[tokio::test]
async fn a_refusal_writes_nothing_not_even_new_secrets() {
    let backend = Arc::new(Memory::default());
    let (log, result) = run(
        &settings(None, false),
        backend.clone(),
        Some(planned(plan_of(&["a"]))),
        false,
    )
    .await;
    assert!(result.is_err());
    assert_eq!(log, ["plan from no state", "show plan of 1", "ask Apply"]);
    assert!(backend.states().is_empty());
}

#[tokio::test]
async fn a_saved_plan_from_another_state_is_refused_before_planning() {
    let backend = with_state(1).await;
    let mut stale = plan_of(&["a"]);
    stale.lineage = Some(uuid::Uuid::from_u128(2));
    stale.serial = Some(1);
    let saved = SavedPlan::of(stale, InputDigests::default());
    let (log, result) = run(&settings(Some(saved), false), backend.clone(), None, true).await;
    let message = format!("{:#}", result.expect_err("refused"));
    assert!(message.contains("lineage"), "{message}");
    assert!(log.is_empty(), "{log:?}");
    assert_eq!(backend.states().len(), 1, "nothing saved");
}

#[tokio::test]
async fn a_saved_plan_that_differs_from_the_new_one_changes_nothing() {
    let backend = Arc::new(Memory::default());
    let saved = SavedPlan {
        secrets: Some(Sensitive::new("saved secrets".to_owned())),
        ..SavedPlan::of(plan_of(&["a"]), InputDigests::default())
    };
    let (log, result) = run(
        &settings(Some(saved), false),
        backend.clone(),
        Some(planned(plan_of(&["b"]))),
        true,
    )
    .await;
    let message = format!("{:#}", result.expect_err("refused"));
    assert!(message.contains("nothing was changed"), "{message}");
    assert!(message.contains("pool/"), "names the difference: {message}");
    assert_eq!(log, ["plan from no state"], "neither shown nor asked");
    assert!(backend.states().is_empty());
}

#[tokio::test]
async fn a_saved_plan_that_holds_is_applied_without_being_shown_again() {
    let backend = Arc::new(Memory::default());
    let saved = SavedPlan {
        secrets: Some(Sensitive::new("saved secrets".to_owned())),
        ..SavedPlan::of(plan_of(&["a"]), InputDigests::default())
    };
    let mut now = planned(plan_of(&["a"]));
    now.generated = None;
    let (log, result) = run(
        &settings(Some(saved), false),
        backend.clone(),
        Some(now),
        true,
    )
    .await;
    assert!(matches!(result, Ok(Report::Ran(_, RunOutcome::Done))));
    assert_eq!(log[..2], ["plan from no state", "ask Apply"]);
    assert_eq!(
        backend.states()[0]
            .secrets
            .as_ref()
            .map(|s| s.expose().as_str()),
        Some("saved secrets"),
        "the saved plan's secrets are the ones its configs were rendered with"
    );
}

#[tokio::test]
async fn refresh_only_needs_a_state_and_asks_nothing_when_nothing_drifted() {
    let backend = Arc::new(Memory::default());
    let (log, result) = run(&settings(None, true), backend.clone(), None, true).await;
    let message = format!("{:#}", result.expect_err("refused"));
    assert!(message.contains("nothing to refresh"), "{message}");
    assert!(log.is_empty());

    let backend = with_state(1).await;
    let (log, result) = run(
        &settings(None, true),
        backend.clone(),
        Some(planned(plan_of(&[]))),
        true,
    )
    .await;
    assert!(matches!(result, Ok(Report::Refreshed { recorded: 0 })));
    assert_eq!(log, ["plan from the state", "show drift of 0"]);
    assert_eq!(backend.states().len(), 1, "nothing saved");
}

#[tokio::test]
async fn an_empty_plan_without_a_state_starts_no_state() {
    let backend = Arc::new(Memory::default());
    let (log, result) = run(
        &settings(None, false),
        backend.clone(),
        Some(planned(plan_of(&[]))),
        true,
    )
    .await;
    assert!(matches!(result, Ok(Report::Unchanged(_))));
    assert_eq!(log, ["plan from no state", "show plan of 0"]);
    assert!(backend.states().is_empty());
}

#[tokio::test]
async fn helm_renderings_are_saved_before_the_first_change_and_only_when_new() {
    let rendering = Rendering {
        digest: "d1".repeat(32),
        manifests: Sensitive::new("kind: DaemonSet\n".to_owned()),
    };
    let backend = with_state(1).await;
    let mut p = planned(plan_of(&["a"]));
    p.renderings = BTreeMap::from([("cilium".to_owned(), rendering.clone())]);
    let (_, result) = run(&settings(None, false), backend.clone(), Some(p), true).await;
    assert!(matches!(result, Ok(Report::Ran(_, RunOutcome::Done))));
    let states = backend.states();
    assert_eq!(states[1].renderings["cilium"], rendering, "saved first");
    assert!(states[1].resources.pools.is_empty(), "before any change");

    // The same renderings again: nothing more is saved for them.
    let saves = states.len();
    let mut p = planned(plan_of(&[]));
    p.renderings = BTreeMap::from([("cilium".to_owned(), rendering)]);
    let (_, result) = run(&settings(None, false), backend.clone(), Some(p), true).await;
    assert!(matches!(result, Ok(Report::Unchanged(_))));
    assert_eq!(backend.states().len(), saves);
}
