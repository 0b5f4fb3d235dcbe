//! The etcd bootstrap (`bootstrap`): Talos `Bootstrap` on the first
//! control plane, once per cluster; and again, by explicit choice only, when
//! etcd is gone on every control plane ([`EtcdRecovery`]).

use crate::change::{Action, Change};
use crate::model::PlanWarning;
use talosprov_base::role::Role;
use talosprov_statefile::address::Address;

use super::resource::{Destroying, EtcdRecovery, Phase, Planning, ResourceKind};

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

    /// Planned until the state records it done; then again only when etcd
    /// is gone on every control plane, as [`EtcdRecovery`] says.
    fn plan(p: &mut Planning<'_>) {
        let done = p.state.resources.bootstrap.as_ref().is_some_and(|b| b.done);
        let Some(node) = p.desired.bootstrap_node.clone() else {
            return;
        };
        if !done {
            p.changes.push(Change::bootstrap(format!(
                "etcd bootstrap on the first control plane, {node}"
            )));
            return;
        }
        let Some(lost) = etcd_lost(p) else {
            return;
        };
        match p.etcd {
            EtcdRecovery::Refuse => {
                let recover = match &p.state.etcd_restore {
                    Some(r) => format!(
                        "Finish the restore from {} with `talosprov {}`",
                        r.from,
                        r.command_words().join(" ")
                    ),
                    None => "Recover them with `talosprov etcd restore --from latest` (or \
                             --from SNAPSHOT)"
                        .to_owned(),
                };
                p.broken.push(PlanWarning {
                    address: Some(Address::Bootstrap),
                    message: format!(
                        "etcd is gone on every control plane ({lost}): the cluster's Kubernetes \
                         objects are only in its backups. {recover}, or bootstrap a new, empty \
                         etcd with `talosprov apply -allow-new-etcd`, which loses them"
                    ),
                });
            }
            EtcdRecovery::NewEtcd => p.changes.push(Change::bootstrap(format!(
                "etcd is gone on every control plane ({lost}): a new, empty etcd on {node} \
                 (-allow-new-etcd); the Kubernetes objects are lost"
            ))),
            EtcdRecovery::Restore => p.changes.push(Change::bootstrap(format!(
                "etcd is gone on every control plane ({lost}): recover it on {node} from the \
                 snapshot (EtcdRecover, then Bootstrap with recover_etcd)"
            ))),
        }
    }

    /// etcd goes with the control planes' VMs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}

/// Why etcd is gone on every control plane (`cp-1: no VM, cp-2: maintenance
/// mode`), or `None` when one may still hold it, one was not read, or the
/// cluster was not read at all.
fn etcd_lost(p: &Planning<'_>) -> Option<String> {
    if !p.observed.refreshed {
        return None;
    }
    let mut why = Vec::new();
    for (host, config) in &p.desired.configs {
        if config.role != Role::Controlplane {
            continue;
        }
        let vm_gone = p
            .desired
            .vms
            .get(host)
            .is_some_and(|vm| !p.observed.vms.contains_key(&vm.record.vmid));
        // A node without a VM answers nothing: it is not merely unreachable.
        let reason = if vm_gone {
            "no VM"
        } else if p.observed.unreachable.contains_key(host) {
            return None;
        } else if p.observed.in_maintenance.contains(host) {
            "maintenance mode"
        } else if p.observed.etcd_waiting.contains(host) {
            "etcd waits for a bootstrap"
        } else {
            return None;
        };
        why.push(format!("{host}: {reason}"));
    }
    (!why.is_empty()).then(|| why.join(", "))
}
