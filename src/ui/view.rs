//! The run's view, picked once per process: the JSON lines of `-json`
//! ([`super::json`]) or the progress view ([`super::progress`]: live on a
//! terminal, plain lines otherwise). Commands call these, never one view
//! directly, so both render the same events.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedReceiver;

use talosprov_engine::apply::event::Update;
use talosprov_engine::health::gate::{GateEvent, GateOutcome};

use super::{json, progress};

/// Show the executor's updates until it drops its sender; what was counted.
pub async fn show(rx: UnboundedReceiver<Update>) -> crate::ui::lines::Tally {
    if json::enabled() {
        json::show(rx).await
    } else {
        progress::show(rx, progress::stderr_is_terminal()).await
    }
}

/// Show one event of apply's final gate.
pub fn gate_event(event: &GateEvent) {
    if json::enabled() {
        json::gate_event(event);
    } else {
        progress::gate_line(event);
    }
}

/// Show the final gate's outcome; `wait` is its bound.
pub fn gate_outcome(outcome: &GateOutcome, wait: Duration) {
    if json::enabled() {
        json::gate_outcome(outcome, &super::lines::gate_outcome_text(outcome, wait));
    } else {
        progress::gate_outcome(outcome, wait);
    }
}
