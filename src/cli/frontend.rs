//! The engine's [`Frontend`] on the console: warnings, diagnostics and
//! progress on stderr (or JSON lines with `-json`), plans on stdout, the
//! questions on the terminal, and Ctrl-C and SIGTERM delivered to the run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use talosprov_base::diagnostics::Diagnostic;
use talosprov_engine::apply::event::Update;
use talosprov_engine::apply::session::{Question, Shown};
use talosprov_engine::command::{Answer, Frontend, Interrupts, Pending, Ui};
use talosprov_engine::health::gate::{GateEvent, GateOutcome};
use talosprov_plan::view::PlanView;
use talosprov_retry::Notice;

use super::signals::{Signal, Signals, received};

/// The console frontend.
#[derive(Debug, Default)]
pub struct Console {
    /// `plan -json`: a plan is shown as one JSON document on stdout.
    plan_json: bool,
    /// The progress view, once the changes start.
    view: Mutex<Option<JoinHandle<crate::ui::lines::Tally>>>,
}

impl Console {
    /// The frontend every command but `plan -json` uses.
    pub fn ui() -> Ui {
        Arc::new(Console::default())
    }

    /// `plan`'s frontend: with `json`, the plan is one JSON document on
    /// stdout.
    pub fn for_plan(json: bool) -> Ui {
        Arc::new(Console {
            plan_json: json,
            ..Console::default()
        })
    }
}

/// The words of `question`, as the terminal asks it.
fn wording(question: &Question) -> String {
    match question {
        Question::Apply => "Do you want to perform these actions?\n  talosprov will perform the \
                            actions described above."
            .to_owned(),
        Question::RecordDrift => "Would you like to update the state to reflect these detected \
                                  changes?\n  talosprov will write these changes to the state \
                                  without changing any real resources."
            .to_owned(),
        Question::Destroy => "Do you really want to destroy all resources?\n  talosprov will \
                              destroy all the resources described above. There is no undo."
            .to_owned(),
        Question::Forget(addresses) => {
            let list: Vec<String> = addresses.iter().map(|a| format!("  {a}")).collect();
            format!(
                "talosprov will forget these resources; they keep running, untouched:\n{}\n\nDo \
                 you want to remove them from the state?",
                list.join("\n")
            )
        }
        Question::RotateCa(authority) => format!(
            "Do you want to rotate the {}?\n  talosprov will run the stages described above.",
            authority.title()
        ),
        Question::ResetControlPlanes(nodes) => {
            let list: Vec<String> = nodes
                .iter()
                .map(|(host, ip)| format!("  {host} ({ip})"))
                .collect();
            format!(
                "etcd is running and healthy. talosprov will reset these control planes (their \
                 etcd data and machine config wiped; they come back in maintenance mode), then \
                 show the restore's plan:\n{}\n\nDo you really want to replace the cluster's \
                 Kubernetes objects with the snapshot's? There is no undo.",
                list.join("\n")
            )
        }
        Question::ForceUnlock { id, location } => format!(
            "Do you really want to force-unlock the state in {location}?\n  talosprov will remove \
             lock {id}; a run still holding it would then race with the next one."
        ),
    }
}

impl Frontend for Console {
    fn warn(&self, text: &str) {
        crate::ui::out::warn(text);
    }

    fn note(&self, text: &str) {
        crate::ui::out::note(text);
    }

    fn diagnostics(&self, found: &[Diagnostic]) {
        crate::ui::diagnostics::print_all(found);
    }

    fn retry(&self, notice: &Notice) {
        crate::ui::progress::retry_line(notice);
    }

    fn show(&self, shown: Shown<'_>) -> anyhow::Result<()> {
        let drift;
        let plan = match shown {
            Shown::Rotation(r) => {
                if crate::ui::json::enabled() {
                    crate::ui::json::rotation(r);
                } else {
                    crate::ui::out::write_stdout(&(r.render() + "\n"))?;
                }
                return Ok(());
            }
            Shown::Plan(p) => p,
            Shown::Drift(p) => {
                drift = p.drift_only();
                &drift
            }
        };
        if self.plan_json {
            crate::ui::out::write_stdout(&(PlanView::of(plan).to_json() + "\n"))?;
        } else if crate::ui::json::enabled() {
            crate::ui::json::plan(plan);
        } else {
            crate::ui::out::write_stdout(&crate::ui::plan::render(plan))?;
        }
        Ok(())
    }

    fn ask<'a>(&'a self, question: &'a Question) -> Pending<'a, anyhow::Result<Answer>> {
        Box::pin(async move {
            if !crate::ui::console::stdin_is_terminal() {
                return Ok(Answer::NoTerminal);
            }
            let text = wording(question);
            // On a blocking thread, so that a signal still reaches the run.
            let yes =
                tokio::task::spawn_blocking(move || crate::ui::console::confirm(&text)).await??;
            Ok(if yes { Answer::Yes } else { Answer::No })
        })
    }

    fn updates(&self) -> mpsc::UnboundedSender<Update> {
        let (tx, rx) = mpsc::unbounded_channel();
        let view = tokio::spawn(crate::ui::view::show(rx));
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = Some(view);
        tx
    }

    fn updates_done(&self) -> Pending<'_, ()> {
        let view = self.view.lock().unwrap_or_else(|e| e.into_inner()).take();
        Box::pin(async move {
            if let Some(view) = view {
                let _ = view.await;
            }
        })
    }

    fn gate(&self, event: &GateEvent) {
        crate::ui::view::gate_event(event);
    }

    fn gate_outcome(&self, outcome: &GateOutcome, wait: Duration) {
        crate::ui::view::gate_outcome(outcome, wait);
    }

    fn interrupts(&self) -> Option<Interrupts> {
        let mut signals = Signals::install()?;
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let signal = signals.recv().await;
                if tx.send(signal.name()).is_err() {
                    break;
                }
            }
        });
        Some(Interrupts::new(rx))
    }

    fn interrupted_by(&self) -> &'static str {
        received().map_or("Interrupt", Signal::name)
    }
}
