//! The apply progress view: one line per resource with its elapsed time. On a
//! terminal, a live multi-line view (indicatif); otherwise (CI, a pipe) plain
//! timestamped lines on stderr. Both render the executor's events.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::apply::{Event, EventKind};
use crate::plan::Action;
use crate::state::Address;

/// What the view counted, for the closing line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Steps finished.
    pub finished: usize,
    /// Steps failed.
    pub failed: usize,
    /// Steps skipped.
    pub skipped: usize,
}

fn verb(action: Action) -> (&'static str, &'static str) {
    match action {
        Action::Create => ("Creating...", "Creation complete"),
        Action::Update => ("Modifying...", "Modifications complete"),
        Action::Replace => ("Replacing...", "Replacement complete"),
        Action::Delete => ("Destroying...", "Destruction complete"),
        Action::ApplyConfig => ("Applying config...", "Config applied"),
        Action::Upgrade => ("Upgrading...", "Upgrade complete"),
        Action::Bootstrap => ("Bootstrapping...", "Bootstrap complete"),
    }
}

/// One event as a plain line (without the timestamp).
pub fn line(e: &Event) -> String {
    let secs = e.elapsed.as_secs();
    match &e.kind {
        EventKind::Started { action } => format!("{}: {}", e.address, verb(*action).0),
        EventKind::Progress { what } => format!("{}: {what} [{secs}s elapsed]", e.address),
        EventKind::Finished { action } => {
            format!("{}: {} after {secs}s", e.address, verb(*action).1)
        }
        EventKind::Failed { message } => format!("{}: failed after {secs}s: {message}", e.address),
        EventKind::Skipped { reason } => format!("{}: skipped ({reason})", e.address),
        EventKind::Warning { message } => format!("{}: warning: {message}", e.address),
    }
}

fn count(tally: &mut Tally, e: &Event) {
    match e.kind {
        EventKind::Finished { .. } => tally.finished += 1,
        EventKind::Failed { .. } => tally.failed += 1,
        EventKind::Skipped { .. } => tally.skipped += 1,
        _ => {}
    }
}

/// Show events until the executor drops its sender. `live` picks the
/// terminal view; pass [`stderr_is_terminal`] normally.
pub async fn show(mut rx: UnboundedReceiver<Event>, live: bool) -> Tally {
    let mut tally = Tally::default();
    if !live {
        while let Some(e) = rx.recv().await {
            count(&mut tally, &e);
            let now = time::OffsetDateTime::now_utc();
            let stamp = format!("{:02}:{:02}:{:02}", now.hour(), now.minute(), now.second());
            let _ = writeln!(std::io::stderr().lock(), "{stamp} {}", line(&e));
        }
        return tally;
    }
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
    while let Some(e) = rx.recv().await {
        count(&mut tally, &e);
        let bar = bars.entry(e.address.clone()).or_insert_with(|| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_style(style.clone());
            b.set_prefix(e.address.to_string());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        match &e.kind {
            EventKind::Started { action } => bar.set_message(verb(*action).0),
            EventKind::Progress { what } => bar.set_message(what.clone()),
            EventKind::Warning { message } => {
                let _ = multi.println(format!("Warning: {}: {message}", e.address));
            }
            EventKind::Finished { .. } | EventKind::Failed { .. } | EventKind::Skipped { .. } => {
                bar.set_style(done_style.clone());
                let text = line(&e);
                let rest = text
                    .strip_prefix(&format!("{}: ", e.address))
                    .unwrap_or(&text)
                    .to_owned();
                bar.finish_with_message(rest);
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
    }
}
