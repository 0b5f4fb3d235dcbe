//! Events the executor emits as it works (OpenTofu's hooks): the progress view
//! renders them; they carry addresses and plain text, never a secret. Besides
//! each step's events, the run's own: interrupted, and steps abandoned.

use std::time::Duration;

use talosprov_plan::change::Action;
use talosprov_statefile::address::Address;

/// One thing that happened during an apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The resource the event is about, e.g. `vm/cp-1`.
    pub address: Address,
    /// What happened.
    pub kind: EventKind,
    /// Time since the resource's step started (zero for `Started`).
    pub elapsed: Duration,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The step began.
    Started {
        /// The change's action.
        action: Action,
    },
    /// The step moved on to another wait or call, e.g. `waiting for maintenance mode`.
    Progress {
        /// What it does now.
        what: String,
    },
    /// The step finished and its result is saved in the state.
    Finished {
        /// The change's action.
        action: Action,
    },
    /// The step failed; dependents do not start.
    Failed {
        /// The error and its causes, one line.
        message: String,
    },
    /// The step will not run: a change it depends on failed, or the run was
    /// interrupted.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Something the operator should know; the step goes on.
    Warning {
        /// What to tell the operator, one line.
        message: String,
    },
    /// A client sends a request of this step again after a transient failure
    /// (one event per retry).
    Retrying {
        /// The retry notice: what, when, which attempt and why.
        notice: talosprov_retry::Notice,
    },
}

/// What the executor tells the views: an event of one resource's step, or one
/// about the whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// An event of one resource's step.
    Step(Event),
    /// The run was interrupted (first Ctrl-C or SIGTERM): nothing new starts,
    /// the steps with Proxmox work in flight get at most `grace` to finish it
    /// and record what Proxmox confirmed, the others stop at once (a wait
    /// leaves nothing half-done).
    Interrupted {
        /// The steps that finish their Proxmox work first.
        finishing: Vec<Address>,
        /// The longest the run waits for them.
        grace: Duration,
    },
    /// The grace after an interruption ran out: these steps were abandoned
    /// with their Proxmox task still running; the next run reads back what
    /// it did.
    Abandoned {
        /// The steps abandoned.
        steps: Vec<Address>,
        /// The grace that ran out.
        grace: Duration,
    },
}
