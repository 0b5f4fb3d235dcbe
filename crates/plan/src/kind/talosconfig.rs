//! The talosconfig (`talosconfig`): talosctl's client config kept in the state's outputs,
//! with an admin client certificate from the OS CA. talosprov makes it before its first
//! change; a plan renews it when its certificate expires within the renewal window
//! ([`crate::plan::renewal`]), or has expired.

use crate::change::{Action, Change};
use talosprov_machine::expiry::talosconfig_not_after;

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `talosconfig` kind (one per cluster).
#[derive(Debug, Clone, Copy)]
pub struct Talosconfig;

impl ResourceKind for Talosconfig {
    type Op = ();

    fn action((): &()) -> Action {
        Action::Update
    }

    /// First: it is issued locally, and the Talos API calls after it may use it.
    fn phase((): &()) -> Phase {
        Phase::Credentials
    }

    /// Renewed when the state's talosconfig has a client certificate that is due (see
    /// [`crate::plan::renewal::Renewal::due`]). A talosconfig whose certificate cannot be
    /// read is left alone: the commands that use it say what is wrong with it.
    fn plan(p: &mut Planning<'_>) {
        let Some(stored) = &p.state.outputs.talosconfig else {
            return;
        };
        let Some(not_after) = talosconfig_not_after(stored.value.expose()) else {
            return;
        };
        if p.renewal.due(not_after) {
            p.changes
                .push(Change::talosconfig(p.renewal.reason(not_after)));
        }
    }

    /// The talosconfig is forgotten with the state's outputs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}
