//! Events the executor emits as it works (OpenTofu's hooks): the progress view
//! renders them; they carry addresses and plain text, never a secret.

use std::time::Duration;

use crate::plan::Action;
use crate::state::Address;

/// One thing that happened during an apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The resource.
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
        /// The warning.
        message: String,
    },
}
