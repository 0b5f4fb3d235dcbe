//! The admin kubeconfig (`kubeconfig`), fetched through the Talos API
//! (`Kubeconfig`) after the bootstrap, and kept in the state's outputs; fetched
//! again when its client certificate expires within the renewal window
//! ([`crate::plan::renewal`]), or has expired.

use crate::change::{Action, Change, KubeconfigOp};
use talosprov_machine::expiry::kubeconfig_not_after;

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `kubeconfig` kind (one per cluster).
#[derive(Debug, Clone, Copy)]
pub struct Kubeconfig;

impl ResourceKind for Kubeconfig {
    type Op = KubeconfigOp;

    fn action(op: &KubeconfigOp) -> Action {
        match op {
            KubeconfigOp::Fetch => Action::Create,
            KubeconfigOp::Renew => Action::Update,
        }
    }

    fn phase(_: &KubeconfigOp) -> Phase {
        Phase::Kubeconfig
    }

    /// Fetched when the state has none, or again after a bootstrap this
    /// plan makes (read after [`super::Bootstrap`] is planned); else renewed
    /// when its client certificate is due.
    fn plan(p: &mut Planning<'_>) {
        if p.desired.bootstrap_node.is_none() {
            return;
        }
        let stored = p.state.outputs.kubeconfig.as_ref();
        if stored.is_none() || p.planned(Action::Bootstrap) {
            p.changes.push(Change::kubeconfig(
                KubeconfigOp::Fetch,
                "admin kubeconfig, fetched through the Talos API after bootstrap",
            ));
            return;
        }
        let not_after = stored.and_then(|k| kubeconfig_not_after(k.value.expose()));
        if let Some(not_after) = not_after.filter(|t| p.renewal.due(*t)) {
            p.changes.push(Change::kubeconfig(
                KubeconfigOp::Renew,
                p.renewal.reason(not_after),
            ));
        }
    }

    /// The kubeconfig is forgotten with the state's outputs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}
