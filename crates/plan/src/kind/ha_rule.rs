//! The HA rules that keep a `proxmox.spread` group's VMs on different hosts
//! (`ha_rule/<entry>`): PVE 9's `/cluster/ha/rules`, a `resource-affinity`
//! rule with `affinity=negative` over the group's VMs (pve-ha-manager
//! `PVE::HA::Rules::ResourceAffinity`).

use talosprov_statefile::address::Address;
use talosprov_statefile::format;

use crate::change::{Action, Change, FieldChange, HaRuleOp};
use crate::field::HaRuleField;
use crate::model::{Drift, DriftKind, field};
use crate::ownership::{self, ADOPTED, conflict, leftover};

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `ha_rule/<entry>` kind.
#[derive(Debug, Clone, Copy)]
pub struct HaRule;

impl ResourceKind for HaRule {
    type Op = HaRuleOp;

    fn action(op: &HaRuleOp) -> Action {
        match op {
            HaRuleOp::Create(_) => Action::Create,
            HaRuleOp::Update(_) => Action::Update,
            HaRuleOp::Delete => Action::Delete,
        }
    }

    /// With the VMs: a rule names HA resources, so it is made after its VMs
    /// (see `order`), and it lets go of a VM before the VM is deleted.
    fn phase(op: &HaRuleOp) -> Phase {
        match op {
            HaRuleOp::Create(_) | HaRuleOp::Update(_) | HaRuleOp::Delete => Phase::Vms,
        }
    }

    fn plan(p: &mut Planning<'_>) {
        plan_rules(p);
    }

    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>) {
        let recorded = d.state.resources.ha_rules.keys();
        changes.extend(
            recorded.map(|n| Change::ha_rule(n.clone(), HaRuleOp::Delete, "cluster destroyed")),
        );
        ownership::leftover_deletes(d.state, |a| matches!(a, Address::HaRule(_)), changes);
    }
}

/// `vm:101,vm:102`, as Proxmox lists a rule's resources.
fn resources(r: &format::HaRule) -> String {
    r.vmids
        .iter()
        .map(|v| format!("vm:{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn rule_fields(before: Option<&format::HaRule>, after: &format::HaRule) -> Vec<FieldChange> {
    let mut fields = Vec::new();
    let b = before.map(resources);
    let a = resources(after);
    if b.as_deref() != Some(a.as_str()) {
        fields.push(field(HaRuleField::Resources, b, Some(a)));
    }
    let bc = before.and_then(|r| r.comment.clone());
    if before.is_none_or(|r| r.comment != after.comment) {
        fields.push(field(HaRuleField::Comment, bc, after.comment.clone()));
    }
    let groups = |r: &format::HaRule| {
        (!r.groups.is_empty()).then(|| {
            r.groups
                .iter()
                .map(|(vmid, nodes)| format!("{vmid}={nodes}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    };
    let (bg, ag) = (before.and_then(groups), groups(after));
    if bg != ag {
        fields.push(field(HaRuleField::Groups, bg, ag));
    }
    fields
}

/// Whether two rules say the same: VMs (in any order) and comment.
fn same_rule(a: &format::HaRule, b: &format::HaRule) -> bool {
    let sorted = |r: &format::HaRule| {
        let mut v = r.vmids.clone();
        v.sort_unstable();
        v
    };
    let groups = |r: &format::HaRule| {
        r.groups
            .iter()
            .map(|(v, n)| {
                let mut nodes: Vec<&str> = n.split(',').map(str::trim).collect();
                nodes.sort_unstable();
                (*v, nodes.join(","))
            })
            .collect::<Vec<_>>()
    };
    a.rule == b.rule && sorted(a) == sorted(b) && a.comment == b.comment && groups(a) == groups(b)
}

/// The spread rules: created (after their VMs), adopted, updated to the
/// topology's VMs (from what Proxmox holds when it was read, with drift),
/// created again when deleted outside talosprov, deleted when the entry
/// leaves `proxmox.spread`; a rule talosprov does not own at the ID is a
/// conflict, and a Proxmox VE without HA rules refuses the plan.
fn plan_rules(p: &mut Planning<'_>) {
    let (d, state, obs) = (p.desired, p.state, p.observed);
    let (changes, mut found) = p.changes_and_found();
    let found = &mut found;
    let rec = &state.resources;
    let seen = obs.ha_rules.as_ref();
    for (entry, desired) in &d.ha_rules {
        // PVE 8 (seen, or recorded when Proxmox was not read): HA groups.
        let recorded_groups = rec
            .ha_rules
            .get(entry)
            .is_some_and(|r| !r.groups.is_empty());
        let pve8 = obs.no_ha_rules || (!obs.refreshed && recorded_groups);
        let want = &if pve8 {
            desired.with_groups()
        } else {
            desired.record.clone()
        };
        let form = if pve8 {
            "PVE 8 HA groups"
        } else {
            "PVE 9 HA rule"
        };
        let address = Address::HaRule(entry.clone());
        let there = seen.map(|m| m.get(&want.rule));
        let Some(have) = rec.ha_rules.get(entry) else {
            match (there.flatten(), state.intent(&address)) {
                (Some(r), None) => {
                    let text = format!("HA rule {} ({})", r.rule, resources(r));
                    found
                        .conflicts
                        .push(conflict(&address, &want.rule, text, false));
                }
                (Some(r), Some(_)) => {
                    let c = Change::ha_rule(entry.clone(), HaRuleOp::Create(want.clone()), ADOPTED);
                    changes.push(c.with_fields(rule_fields(Some(r), want)));
                }
                (None, _) => {
                    let c = Change::ha_rule(
                        entry.clone(),
                        HaRuleOp::Create(want.clone()),
                        format!("keeps the {entry} VMs on different Proxmox hosts ({form})"),
                    );
                    changes.push(c.with_fields(rule_fields(None, want)));
                }
            }
            continue;
        };
        let current = match there {
            Some(None) => {
                found.drift.push(Drift {
                    address: address.clone(),
                    kind: DriftKind::Deleted,
                    diff: None,
                    fields: Vec::new(),
                });
                let c = Change::ha_rule(
                    entry.clone(),
                    HaRuleOp::Create(want.clone()),
                    "deleted outside talosprov: created again",
                );
                changes.push(c.with_fields(rule_fields(None, want)));
                continue;
            }
            Some(Some(seen)) => {
                if !same_rule(have, seen) {
                    found.drift.push(Drift {
                        address: address.clone(),
                        kind: DriftKind::Changed,
                        diff: None,
                        fields: rule_fields(Some(have), seen),
                    });
                }
                seen
            }
            None => have,
        };
        if !same_rule(current, want) {
            let op = if current.rule == want.rule {
                HaRuleOp::Update(want.clone())
            } else {
                HaRuleOp::Create(want.clone())
            };
            let c = Change::ha_rule(entry.clone(), op, "the group's VMs changed");
            changes.push(c.with_fields(rule_fields(Some(current), want)));
        }
    }
    for entry in rec.ha_rules.keys() {
        if !d.ha_rules.contains_key(entry) {
            changes.push(Change::ha_rule(
                entry.clone(),
                HaRuleOp::Delete,
                "no longer in proxmox.spread (or fewer than two VMs left to keep apart)",
            ));
        }
    }
    for (address, intent) in state.intents() {
        if let Address::HaRule(entry) = &address
            && !rec.ha_rules.contains_key(entry)
            && !d.ha_rules.contains_key(entry)
        {
            let exists = seen.map(|m| m.contains_key(&intent.id));
            changes.push(Change::ha_rule(
                entry.clone(),
                HaRuleOp::Delete,
                leftover(exists),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(vmids: &[u32]) -> format::HaRule {
        format::HaRule {
            rule: "talosprov-lab-controlplane".into(),
            vmids: vmids.to_vec(),
            comment: Some("c".into()),
            groups: std::collections::BTreeMap::new(),
        }
    }

    #[test]
    fn rules_compare_by_their_vms_in_any_order() {
        assert!(same_rule(&rule(&[101, 102]), &rule(&[102, 101])));
        assert!(!same_rule(&rule(&[101, 102]), &rule(&[101, 103])));
        let mut grouped = rule(&[101, 102]);
        grouped.groups.insert(101, "pve1:2,pve2:1".into());
        let mut reordered = grouped.clone();
        reordered.groups.insert(101, "pve2:1,pve1:2".into());
        assert!(same_rule(&grouped, &reordered));
        assert!(!same_rule(&grouped, &rule(&[101, 102])));
        let fields = rule_fields(Some(&rule(&[101, 102])), &rule(&[101, 103]));
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].after.as_deref(), Some("vm:101,vm:103"));
        assert_eq!(rule_fields(None, &rule(&[1, 2])).len(), 2);
    }
}
