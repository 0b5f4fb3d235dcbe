//! The apply progress view: one line per resource with its elapsed time. On a
//! terminal, a live multi-line view (indicatif); otherwise (CI, a pipe) plain
//! timestamped lines on stderr. Both render the executor's events, its retry
//! lines, and what an interruption does.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc::UnboundedReceiver;

use talosprov_engine::apply::event::{EventKind, Update};
use talosprov_statefile::address::Address;

use super::cell;
use super::lines::verb;
use crate::ui::lines::{
    STILL_EVERY, Tally, count, gate_outcome_text, gate_text, line, run_line, still_line,
};

/// Print a retry made outside an apply's steps (a plan's refresh) as one
/// line on stderr: `Retrying Proxmox: … in 0.25 s (attempt 2): …`.
pub fn retry_line(notice: &talosprov_retry::Notice) {
    let text = notice.to_string();
    let mut chars = text.chars();
    let text = chars.next().map_or_else(String::new, |c| {
        c.to_uppercase().chain(chars).collect::<String>()
    });
    super::out::write_stderr(&format!("{}\n", cell::text(&text)));
}

/// A step the plain view has seen start and not end.
struct Running {
    started: tokio::time::Instant,
    what: String,
    shown: tokio::time::Instant,
}

/// Write `text` after the time of day, its control characters escaped.
fn stamped(out: &mut impl Write, text: &str) {
    let now = time::OffsetDateTime::now_utc();
    let stamp = format!("{:02}:{:02}:{:02}", now.hour(), now.minute(), now.second());
    let _ = writeln!(out, "{stamp} {}", cell::text(text));
}

/// Print the final gate's event on stderr, timestamped as the plain view's lines.
pub fn gate_line(event: &talosprov_engine::health::gate::GateEvent) {
    stamped(&mut std::io::stderr().lock(), &gate_text(event));
}

/// Print the final gate's outcome on stderr: the nodes Ready and how long it took,
/// or what is still missing at the deadline.
pub fn gate_outcome(outcome: &talosprov_engine::health::gate::GateOutcome, wait: Duration) {
    stamped(
        &mut std::io::stderr().lock(),
        &gate_outcome_text(outcome, wait),
    );
}

/// The plain view (CI, a pipe): a timestamped line per event, and every
/// `every` a `still …` line for each step that showed nothing new since.
pub async fn plain(
    mut rx: UnboundedReceiver<Update>,
    out: &mut (impl Write + Send),
    every: Duration,
) -> Tally {
    let mut tally = Tally::default();
    let mut running: BTreeMap<Address, Running> = BTreeMap::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            u = rx.recv() => {
                let Some(u) = u else { break };
                let e = match u {
                    Update::Step(e) => e,
                    run @ Update::Interrupted { .. } | run @ Update::Abandoned { .. } => {
                        if let Some(text) = run_line(&run) {
                            stamped(out, &text);
                        }
                        continue;
                    }
                };
                count(&mut tally, &e);
                let now = tokio::time::Instant::now();
                match &e.kind {
                    EventKind::Started { action } => {
                        running.insert(e.address.clone(), Running {
                            started: now.checked_sub(e.elapsed).unwrap_or(now),
                            what: verb(*action).0.to_owned(),
                            shown: now,
                        });
                    }
                    EventKind::Progress { what } => {
                        if let Some(r) = running.get_mut(&e.address) {
                            r.what.clone_from(what);
                            r.shown = now;
                        }
                    }
                    EventKind::Finished { .. } | EventKind::Failed { .. } | EventKind::Skipped { .. } => {
                        running.remove(&e.address);
                    }
                    EventKind::Warning { .. } | EventKind::Retrying { .. } => {}
                }
                stamped(out, &line(&e));
            }
            _ = tick.tick() => {
                let now = tokio::time::Instant::now();
                for (address, r) in &mut running {
                    if now.duration_since(r.shown) >= every {
                        stamped(out, &still_line(address, &r.what, now.duration_since(r.started)));
                        r.shown = now;
                    }
                }
            }
        }
    }
    tally
}

/// Show events until the executor drops its sender. `live` picks the
/// terminal view; pass [`stderr_is_terminal`] normally.
pub async fn show(rx: UnboundedReceiver<Update>, live: bool) -> Tally {
    if !live {
        return plain(rx, &mut std::io::stderr(), STILL_EVERY).await;
    }
    let mut rx = rx;
    let mut tally = Tally::default();
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    // Bold addresses only where colour is wanted (a terminal, no NO_COLOR).
    let prefix = if crate::ui::diagnostics::stderr_colour() {
        "{prefix:.bold}"
    } else {
        "{prefix}"
    };
    let style =
        ProgressStyle::with_template(&format!("{{spinner}} {prefix} {{wide_msg}} [{{elapsed}}]"))
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let done_style = ProgressStyle::with_template(&format!("  {prefix} {{wide_msg}}"))
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let mut bars: BTreeMap<Address, ProgressBar> = BTreeMap::new();
    while let Some(u) = rx.recv().await {
        let e = match u {
            Update::Step(e) => e,
            run @ Update::Interrupted { .. } | run @ Update::Abandoned { .. } => {
                if let Some(text) = run_line(&run) {
                    let _ = multi.println(cell::text(&text));
                }
                continue;
            }
        };
        count(&mut tally, &e);
        let bar = bars.entry(e.address.clone()).or_insert_with(|| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_style(style.clone());
            b.set_prefix(cell::cell_of(&e.address));
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        match &e.kind {
            EventKind::Started { action } => bar.set_message(verb(*action).0),
            EventKind::Progress { what } => bar.set_message(cell::line(what).into_owned()),
            EventKind::Warning { message } => {
                let text = format!("Warning: {}: {message}", e.address);
                let _ = multi.println(cell::text(&text));
            }
            EventKind::Retrying { .. } => {
                let _ = multi.println(cell::text(&line(&e)));
            }
            EventKind::Finished { .. } | EventKind::Failed { .. } | EventKind::Skipped { .. } => {
                bar.set_style(done_style.clone());
                let text = line(&e);
                let rest = text
                    .strip_prefix(&format!("{}: ", e.address))
                    .unwrap_or(&text)
                    .to_owned();
                bar.finish_with_message(cell::line(&rest).into_owned());
            }
        }
    }
    tally
}

/// Whether stderr (where progress goes) is a terminal.
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_engine::apply::event::Event;
    use talosprov_plan::change::Action;

    #[test]
    fn the_gate_says_what_it_waits_for_and_what_is_still_missing() {
        use talosprov_engine::health::gate::GateEvent;
        let started = GateEvent::Started {
            nodes: 3,
            gpu_nodes: vec!["gpu-1".to_owned()],
            wait: Duration::from_secs(600),
        };
        assert_eq!(
            gate_text(&started),
            "kubernetes: waiting for the 3 Kubernetes nodes to be Ready, and nvidia.com/gpu \
             allocatable on gpu-1 (up to 600 s)"
        );
        let one = GateEvent::Started {
            nodes: 1,
            gpu_nodes: Vec::new(),
            wait: Duration::from_secs(20),
        };
        assert_eq!(
            gate_text(&one),
            "kubernetes: waiting for the Kubernetes node to be Ready (up to 20 s)"
        );
        let waiting = GateEvent::Waiting {
            missing: vec![
                "gpu-1 (10.0.0.3): no nvidia.com/gpu allocatable".to_owned(),
                "wk-1 (10.0.0.2): NotReady: KubeletNotReady".to_owned(),
            ],
            elapsed: Duration::from_millis(30_400),
        };
        assert_eq!(
            gate_text(&waiting),
            "kubernetes: still waiting: gpu-1 (10.0.0.3): no nvidia.com/gpu allocatable; \
             wk-1 (10.0.0.2): NotReady: KubeletNotReady [30s elapsed]"
        );
    }

    #[test]
    fn plain_lines_name_the_resource_and_elapsed_time() {
        let e = Event {
            address: Address::Config("cp-01".into()),
            kind: EventKind::Progress {
                what: "waiting for secure mode".into(),
            },
            elapsed: Duration::from_secs(42),
        };
        assert_eq!(
            line(&e),
            "config/cp-01: waiting for secure mode [42s elapsed]"
        );
        let f = Event {
            kind: EventKind::Finished {
                action: Action::ApplyConfig,
            },
            ..e
        };
        assert_eq!(line(&f), "config/cp-01: Config applied after 42s");
        assert_eq!(
            still_line(&f.address, "Applying config...", Duration::from_secs(30)),
            "config/cp-01: still applying config... [30s elapsed]"
        );
    }

    /// A `Write` the test reads while the view runs.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
        }
    }

    #[tokio::test]
    async fn plain_view_says_a_quiet_step_is_still_running_until_it_ends() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let out = Shared::default();
        let mut sink = out.clone();
        let view =
            tokio::spawn(async move { plain(rx, &mut sink, Duration::from_millis(20)).await });
        let address = Address::Config("w-01".into());
        let send = |kind: EventKind| {
            tx.send(Update::Step(Event {
                address: address.clone(),
                kind,
                elapsed: Duration::ZERO,
            }))
            .expect("send");
        };
        send(EventKind::Started {
            action: Action::ApplyConfig,
        });
        send(EventKind::Progress {
            what: "Waiting for maintenance mode".into(),
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !out
            .text()
            .contains("config/w-01: still waiting for maintenance mode [")
        {
            assert!(tokio::time::Instant::now() < deadline, "{}", out.text());
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        send(EventKind::Finished {
            action: Action::ApplyConfig,
        });
        drop(tx);
        let tally = view.await.expect("view");
        assert_eq!(tally.finished, 1);
        let text = out.text();
        let done = text.find("Config applied").expect("finished line");
        assert!(
            !text[done..].contains("still"),
            "nothing is still running once it ended:\n{text}"
        );
    }
}
