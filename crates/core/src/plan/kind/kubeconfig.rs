//! The admin kubeconfig (`kubeconfig`), fetched through the Talos API
//! (`Kubeconfig`) after the bootstrap, and kept in the state's outputs.

use crate::plan::change::{Action, Change};

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `kubeconfig` kind (one per cluster).
#[derive(Debug, Clone, Copy)]
pub struct Kubeconfig;

impl ResourceKind for Kubeconfig {
    type Op = ();

    fn action((): &()) -> Action {
        Action::Create
    }

    fn phase((): &()) -> Phase {
        Phase::Kubeconfig
    }

    /// Fetched when the state has none, or again after a bootstrap this
    /// plan makes (read after [`super::Bootstrap`] is planned).
    fn plan(p: &mut Planning<'_>) {
        if p.desired.bootstrap_node.is_some()
            && (p.state.outputs.kubeconfig.is_none() || p.planned(Action::Bootstrap))
        {
            p.changes.push(Change::kubeconfig(
                "admin kubeconfig, fetched through the Talos API after bootstrap",
            ));
        }
    }

    /// The kubeconfig is forgotten with the state's outputs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}
