//! The resource pool (`pool/<name>`), which the cluster's VMs join:
//! Proxmox's `/pools`.

use talosprov_statefile::address::Address;
use talosprov_statefile::format;

use crate::change::{Action, Change, PoolOp};
use crate::model::{Drift, DriftKind};
use crate::ownership::{self, ADOPTED, conflict, leftover};

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `pool/<name>` kind.
#[derive(Debug, Clone, Copy)]
pub struct Pool;

impl ResourceKind for Pool {
    type Op = PoolOp;

    fn action(op: &PoolOp) -> Action {
        match op {
            PoolOp::Create => Action::Create,
            PoolOp::Delete => Action::Delete,
        }
    }

    fn phase(op: &PoolOp) -> Phase {
        match op {
            PoolOp::Create => Phase::Provision,
            PoolOp::Delete => Phase::ProvisionDeletes,
        }
    }

    fn plan(p: &mut Planning<'_>) {
        plan_pool(p);
    }

    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>) {
        let recorded = d.state.resources.pools.keys();
        changes
            .extend(recorded.map(|n| Change::pool(n.clone(), PoolOp::Delete, "cluster destroyed")));
        ownership::leftover_deletes(d.state, |a| matches!(a, Address::Pool(_)), changes);
    }
}

fn pool_text(name: &str, pool: &format::Pool) -> String {
    match pool.comment.as_deref().filter(|c| !c.is_empty()) {
        Some(c) => format!("pool {name} (comment {c:?})"),
        None => format!("pool {name}"),
    }
}

/// The pool: created, adopted, re-created when deleted outside talosprov,
/// deleted when no longer wanted; a pool talosprov does not own is a
/// conflict. Its comment is not managed (the topology has none).
fn plan_pool(p: &mut Planning<'_>) {
    let (d, state, obs) = (p.desired, p.state, p.observed);
    let (changes, mut found) = p.changes_and_found();
    let found = &mut found;
    let rec = &state.resources;
    let seen = obs.pools.as_ref();
    if let Some(name) = &d.pool {
        let address = Address::Pool(name.clone());
        let there = seen.map(|p| p.get(name));
        if rec.pools.contains_key(name) {
            if let Some(None) = there {
                found.drift.push(Drift {
                    address: address.clone(),
                    kind: DriftKind::Deleted,
                    diff: None,
                    fields: Vec::new(),
                });
                changes.push(Change::pool(
                    name.clone(),
                    PoolOp::Create,
                    "deleted outside talosprov: created again",
                ));
            }
        } else {
            match (there.flatten(), state.intent(&address)) {
                (Some(p), None) => {
                    found
                        .conflicts
                        .push(conflict(&address, name, pool_text(name, p), false))
                }
                (Some(_), Some(_)) => {
                    changes.push(Change::pool(name.clone(), PoolOp::Create, ADOPTED))
                }
                (None, _) => changes.push(Change::pool(
                    name.clone(),
                    PoolOp::Create,
                    "resource pool for the cluster's VMs",
                )),
            }
        }
    }
    for name in rec.pools.keys() {
        if d.pool.as_ref() != Some(name) {
            changes.push(Change::pool(
                name.clone(),
                PoolOp::Delete,
                "no longer in the topology",
            ));
        }
    }
    for (address, _) in state.intents() {
        if let Address::Pool(name) = &address
            && !rec.pools.contains_key(name)
            && d.pool.as_ref() != Some(name)
        {
            let exists = seen.map(|p| p.contains_key(name));
            changes.push(Change::pool(name.clone(), PoolOp::Delete, leftover(exists)));
        }
    }
}
