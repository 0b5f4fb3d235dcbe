//! The machine-readable view of `apply -json` and `destroy -json`: one JSON
//! object per line on stdout, as `tofu apply -json` prints them. It renders the
//! same events as the human view (the executor's [`Update`]s, the final gate's
//! events), and the plan, the closing summary, warnings and errors become
//! objects too, so that stdout holds nothing but JSON lines.
//!
//! Every object has `format_version` ([`FORMAT_VERSION`]), `type`, `@level`
//! (`info`, `warn` or `error`), `@message` (the human view's line) and
//! `@timestamp` (RFC 3339, UTC, microseconds); the other keys depend on the
//! type (README.md, "Machine-readable output").

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use talosprov_engine::apply::event::{EventKind, Update};
use talosprov_engine::health::gate::{GateEvent, GateOutcome};
use talosprov_plan::model::{Plan, Summary};

use super::lines::{Tally, count, gate_text, line, run_line};

/// The version of the JSON lines' format. The minor part grows when a type or
/// a key is added; the major part when one is removed or changes meaning.
pub const FORMAT_VERSION: &str = "1.0";

static ON: AtomicBool = AtomicBool::new(false);

/// Switch the whole process to the JSON view (`-json`): warnings, errors and
/// the closing lines become JSON objects on stdout.
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether `-json` was given.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A level of [`emit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Progress and results.
    Info,
    /// A warning: the run goes on.
    Warn,
    /// A failure.
    Error,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// RFC 3339 in UTC with microseconds, as OpenTofu's `@timestamp`.
fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.microsecond()
    )
}

/// The object of one event: the common keys, then `fields`.
pub fn object(kind: &str, level: Level, message: &str, fields: Map<String, Value>) -> Value {
    let mut o = Map::new();
    o.insert("format_version".into(), FORMAT_VERSION.into());
    o.insert("type".into(), kind.into());
    o.insert("@level".into(), level.as_str().into());
    o.insert("@message".into(), message.into());
    o.insert("@timestamp".into(), timestamp().into());
    o.extend(fields);
    Value::Object(o)
}

/// Print one object as a line on stdout (a closed stdout is ignored: the run
/// goes on and its exit code still says how it ended).
pub fn emit(kind: &str, level: Level, message: &str, fields: Map<String, Value>) {
    write_line(
        &mut std::io::stdout().lock(),
        &object(kind, level, message, fields),
    );
}

fn write_line(out: &mut impl Write, v: &Value) {
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
            Map::new()
        }
    }
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// The first line: which talosprov, and the format's version.
pub fn version(command: &str) {
    emit(
        "version",
        Level::Info,
        &format!("talosprov {}", env!("CARGO_PKG_VERSION")),
        fields(json!({"talosprov": env!("CARGO_PKG_VERSION"), "command": command})),
    );
}

/// A CA rotation's stages (`rotate-ca`), as one `rotation` object.
pub fn rotation(r: &talosprov_machine::rotation::RotationPlan) {
    let stages: Vec<Value> = talosprov_statefile::rotation::Stage::ALL
        .iter()
        .map(|s| json!({"stage": s.number(), "step": s.describe(r.authority), "done": *s < r.from}))
        .collect();
    emit(
        "rotation",
        Level::Info,
        &format!("rotation of the {}", r.authority.title()),
        fields(json!({
            "authority": r.authority.flag(),
            "cluster": r.cluster,
            "resuming": r.resuming,
            "stages": stages,
            "nodes": r.nodes,
        })),
    );
}

/// The plan: one `planned_change` per change, `warning` diagnostics for its
/// warnings and conflicts, then its `change_summary` (`operation` `plan`).
pub fn plan(p: &Plan) {
    for c in &p.changes {
        emit(
            "planned_change",
            Level::Info,
            &format!("{}: plan to {}", c.address(), c.action().as_str()),
            fields(json!({
                "address": c.address().to_string(),
                "action": c.action().as_str(),
                "reason": c.reason,
            })),
        );
    }
    for w in &p.warnings {
        let text = match &w.address {
            Some(a) => format!("{a}: {}", w.message),
            None => w.message.clone(),
        };
        diagnostic(Level::Warn, &text, None);
    }
    for c in &p.conflicts {
        diagnostic(Level::Warn, &c.to_string(), None);
    }
    summary(
        "plan",
        &p.summary(),
        &format!("Plan: {}", counts(&p.summary())),
    );
}

fn counts(s: &Summary) -> String {
    format!(
        "{} to add, {} to change, {} to destroy.",
        s.add, s.change, s.destroy
    )
}

/// The closing counts: `operation` is `plan`, `apply` or `destroy`.
pub fn summary(operation: &str, s: &Summary, message: &str) {
    emit(
        "change_summary",
        Level::Info,
        message,
        fields(json!({
            "operation": operation,
            "changes": {
                "add": s.add,
                "change": s.change,
                "remove": s.destroy,
                "apply_config": s.apply_config,
                "upgrade": s.upgrade,
                "bootstrap": s.bootstrap,
            },
        })),
    );
}

/// A warning or an error: `diagnostic.severity`, `summary` and, for an error's
/// causes, `detail` (one cause per line).
pub fn diagnostic(level: Level, summary: &str, detail: Option<&str>) {
    let severity = if level == Level::Error {
        "error"
    } else {
        "warning"
    };
    let mut d = json!({"severity": severity, "summary": summary});
    if let Some(detail) = detail.filter(|d| !d.is_empty()) {
        d["detail"] = detail.into();
    }
    emit(
        "diagnostic",
        level,
        summary,
        fields(json!({ "diagnostic": d })),
    );
}

/// Free text a command prints (a line the human view writes on stdout or
/// stderr), as a `log` object; blank text prints nothing.
pub fn log(text: &str) {
    let text = text.trim();
    if !text.is_empty() {
        emit("log", Level::Info, text, Map::new());
    }
}

/// One executor update as an object (see the README for the types).
pub fn update_object(u: &Update) -> Value {
    match u {
        Update::Step(e) => {
            let address = e.address.to_string();
            let elapsed = secs(e.elapsed);
            let (kind, level, extra) = match &e.kind {
                EventKind::Started { action } => (
                    "apply_start",
                    Level::Info,
                    json!({"action": action.as_str()}),
                ),
                EventKind::Progress { what } => {
                    ("apply_progress", Level::Info, json!({"what": what}))
                }
                EventKind::Finished { action } => (
                    "apply_complete",
                    Level::Info,
                    json!({"action": action.as_str()}),
                ),
                EventKind::Failed { message } => {
                    ("apply_errored", Level::Error, json!({"error": message}))
                }
                EventKind::Skipped { reason } => {
                    ("apply_skipped", Level::Warn, json!({"reason": reason}))
                }
                EventKind::Warning { message } => {
                    ("apply_warning", Level::Warn, json!({"warning": message}))
                }
                EventKind::Retrying { notice } => (
                    "apply_retry",
                    Level::Warn,
                    json!({
                        "what": notice.what,
                        "cause": notice.cause,
                        "attempt": notice.attempt,
                        "delay_seconds": secs(notice.delay),
                    }),
                ),
            };
            let mut f = fields(extra);
            f.insert("address".into(), address.into());
            f.insert("elapsed_seconds".into(), elapsed.into());
            object(kind, level, &line(e), f)
        }
        Update::Interrupted { finishing, grace } => object(
            "interrupted",
            Level::Warn,
            &run_line(u).unwrap_or_default(),
            fields(json!({
                "finishing": finishing.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "grace_seconds": secs(*grace),
            })),
        ),
        Update::Abandoned { steps, grace } => object(
            "abandoned",
            Level::Error,
            &run_line(u).unwrap_or_default(),
            fields(json!({
                "steps": steps.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "grace_seconds": secs(*grace),
            })),
        ),
    }
}

/// The JSON view of a run: a line per update until the executor drops its
/// sender, counted as the human view counts them.
pub async fn show(mut rx: UnboundedReceiver<Update>) -> Tally {
    let mut tally = Tally::default();
    while let Some(u) = rx.recv().await {
        if let Update::Step(e) = &u {
            count(&mut tally, e);
        }
        write_line(&mut std::io::stdout().lock(), &update_object(&u));
    }
    tally
}

/// The final gate's event: `gate_start` (nodes, GPU nodes, wait) or
/// `gate_waiting` (what is missing).
pub fn gate_event(event: &GateEvent) {
    let (kind, extra) = match event {
        GateEvent::Started {
            nodes,
            gpu_nodes,
            wait,
        } => (
            "gate_start",
            json!({"nodes": nodes, "gpu_nodes": gpu_nodes, "wait_seconds": wait.as_secs()}),
        ),
        GateEvent::Waiting { missing, elapsed } => (
            "gate_waiting",
            json!({"missing": missing, "elapsed_seconds": secs(*elapsed)}),
        ),
    };
    emit(kind, Level::Info, &gate_text(event), fields(extra));
}

/// The final gate's outcome: `gate_complete`, or `gate_errored` with what is
/// still missing.
pub fn gate_outcome(outcome: &GateOutcome, message: &str) {
    let (kind, level) = if outcome.passed() {
        ("gate_complete", Level::Info)
    } else {
        ("gate_errored", Level::Error)
    };
    emit(
        kind,
        level,
        message,
        fields(json!({
            "missing": outcome.missing(),
            "elapsed_seconds": secs(outcome.elapsed),
        })),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_engine::apply::event::Event;
    use talosprov_plan::change::Action;
    use talosprov_statefile::address::Address;

    #[test]
    fn every_object_carries_the_common_keys() {
        let o = object("log", Level::Info, "hello", Map::new());
        assert_eq!(o["format_version"], FORMAT_VERSION);
        assert_eq!(o["type"], "log");
        assert_eq!(o["@level"], "info");
        assert_eq!(o["@message"], "hello");
        let ts = o["@timestamp"].as_str().unwrap();
        assert!(
            time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).is_ok(),
            "{ts}"
        );
        assert!(ts.ends_with('Z') && ts.len() == 27, "{ts}");
    }

    #[test]
    fn step_events_name_their_address_and_a_failure_its_error() {
        let e = |kind| {
            update_object(&Update::Step(Event {
                address: Address::Vm("wk-1".into()),
                kind,
                elapsed: Duration::from_millis(2500),
            }))
        };
        let started = e(EventKind::Started {
            action: Action::Create,
        });
        assert_eq!(started["type"], "apply_start");
        assert_eq!(started["address"], "vm/wk-1");
        assert_eq!(started["action"], "create");
        assert_eq!(started["@message"], "vm/wk-1: Creating...");
        let failed = e(EventKind::Failed {
            message: "no route to host".into(),
        });
        assert_eq!(failed["type"], "apply_errored");
        assert_eq!(failed["@level"], "error");
        assert_eq!(failed["error"], "no route to host");
        assert_eq!(failed["elapsed_seconds"], 2.5);
    }
}
