//! The words of the run's views, without any output: each event of the
//! executor and of the final gate as the line a person reads. The progress
//! view prints them; the JSON view carries them as `@message`. They hold
//! the values exactly: the progress view escapes them as it prints (see
//! [`super::cell`]); the node table escapes and pads its cells itself.

use std::time::Duration;

use talosprov_engine::apply::event::{Event, EventKind, Update};
use talosprov_plan::change::Action;
use talosprov_statefile::address::Address;

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

/// What a step of `action` is doing, and what it did once done.
pub fn verb(action: Action) -> (&'static str, &'static str) {
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
        EventKind::Retrying { notice } => format!("{}: {notice}", e.address),
    }
}

/// The line for an event about the whole run (an interruption).
pub fn run_line(u: &Update) -> Option<String> {
    match u {
        Update::Step(_) => None,
        Update::Interrupted { finishing, grace } if finishing.is_empty() => Some(format!(
            "Interrupt received: no Proxmox task in flight, stopping now (a second one exits at \
             once; the bound for tasks in flight is {} s)",
            grace.as_secs()
        )),
        Update::Interrupted { finishing, grace } => Some(format!(
            "Interrupt received: finishing {} step(s) in flight (at most {} s); send it again to \
             exit at once",
            finishing.len(),
            grace.as_secs()
        )),
        Update::Abandoned { steps, grace } => Some(format!(
            "Gave up waiting after {} s: {} left with a Proxmox task still running; the next \
             apply reads back what it did",
            grace.as_secs(),
            steps
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Count a step event into `tally`.
pub fn count(tally: &mut Tally, e: &Event) {
    match e.kind {
        EventKind::Finished { .. } => tally.finished += 1,
        EventKind::Failed { .. } => tally.failed += 1,
        EventKind::Skipped { .. } => tally.skipped += 1,
        EventKind::Started { .. }
        | EventKind::Progress { .. }
        | EventKind::Warning { .. }
        | EventKind::Retrying { .. } => {}
    }
}

/// How often the plain view shows a step that reported nothing new as still
/// running (10 s, as OpenTofu's `Still creating... [10s elapsed]`).
pub const STILL_EVERY: Duration = Duration::from_secs(10);

/// The plain view's line for a step still at `what` after `elapsed`.
pub fn still_line(address: &Address, what: &str, elapsed: Duration) -> String {
    let mut chars = what.chars();
    let what = chars.next().map_or_else(String::new, |c| {
        c.to_lowercase().chain(chars).collect::<String>()
    });
    format!("{address}: still {what} [{}s elapsed]", elapsed.as_secs())
}

/// The final gate's event as a line (without the timestamp): what it waits for
/// when it starts, then `still waiting: … [Ns elapsed]` naming each node that is
/// not there yet.
pub fn gate_text(event: &talosprov_engine::health::gate::GateEvent) -> String {
    use talosprov_engine::health::gate::GateEvent;
    match event {
        GateEvent::Started {
            nodes,
            gpu_nodes,
            wait,
        } => {
            let what = if *nodes == 1 {
                "the Kubernetes node to be Ready".to_owned()
            } else {
                format!("the {nodes} Kubernetes nodes to be Ready")
            };
            let gpus = if gpu_nodes.is_empty() {
                String::new()
            } else {
                format!(
                    ", and nvidia.com/gpu allocatable on {}",
                    gpu_nodes.join(", ")
                )
            };
            format!(
                "kubernetes: waiting for {what}{gpus} (up to {} s)",
                wait.as_secs()
            )
        }
        GateEvent::Waiting { missing, elapsed } => format!(
            "kubernetes: still waiting: {} [{}s elapsed]",
            missing.join("; "),
            elapsed.as_secs()
        ),
    }
}

/// The final gate's outcome as a line (without the timestamp): the checks
/// passed and how long it took, or what is still missing at the deadline.
pub fn gate_outcome_text(
    outcome: &talosprov_engine::health::gate::GateOutcome,
    wait: Duration,
) -> String {
    if outcome.passed() {
        let passed: Vec<&str> = outcome
            .checks
            .iter()
            .map(|c| c.reason.lines().next().unwrap_or_default())
            .collect();
        format!(
            "kubernetes: {} [{}s]",
            passed.join("; "),
            outcome.elapsed.as_secs()
        )
    } else {
        format!(
            "kubernetes: not ready after {} s: {}",
            wait.as_secs(),
            outcome.missing().join("; ")
        )
    }
}

/// The cluster's nodes as `kubectl get nodes` shows them: NAME, STATUS, ROLES,
/// VERSION, INTERNAL-IP, and GPU when any node has one.
pub fn node_table(nodes: &[talosprov_base::kube_node::KubeNode]) -> String {
    let gpus = nodes.iter().any(|n| n.gpus > 0);
    let mut rows = vec![
        vec!["NAME", "STATUS", "ROLES", "VERSION", "INTERNAL-IP"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    ];
    if gpus {
        rows[0].push("GPU".to_owned());
    }
    for n in nodes {
        let mut row = vec![
            n.name.clone(),
            if n.ready { "Ready" } else { "NotReady" }.to_owned(),
            if n.control_plane {
                "control-plane"
            } else {
                "<none>"
            }
            .to_owned(),
            n.kubelet_version.clone(),
            n.internal_ip
                .map_or_else(|| "<none>".to_owned(), |ip| ip.to_string()),
        ];
        if gpus {
            row.push(n.gpus.to_string());
        }
        rows.push(row);
    }
    super::cell::table(&rows, "", "   ")
}
