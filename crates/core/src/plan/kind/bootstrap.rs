//! The etcd bootstrap (`bootstrap`): Talos `Bootstrap` on the first
//! control plane, once per cluster.

use crate::plan::change::{Action, Change};

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `bootstrap` kind (one per cluster).
#[derive(Debug, Clone, Copy)]
pub struct Bootstrap;

impl ResourceKind for Bootstrap {
    type Op = ();

    fn action((): &()) -> Action {
        Action::Bootstrap
    }

    fn phase((): &()) -> Phase {
        Phase::Bootstrap
    }

    /// Planned until the state records it done.
    fn plan(p: &mut Planning<'_>) {
        let done = p.state.resources.bootstrap.as_ref().is_some_and(|b| b.done);
        if let Some(node) = &p.desired.bootstrap_node
            && !done
        {
            p.changes.push(Change::bootstrap(format!(
                "etcd bootstrap on the first control plane, {node}"
            )));
        }
    }

    /// etcd goes with the control planes' VMs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}
