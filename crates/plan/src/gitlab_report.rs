//! GitLab's merge-request report for a plan (`plan --report-gitlab FILE`):
//! `{"create":N,"update":N,"delete":N}`, counted as GitLab's OpenTofu tooling
//! converts `tofu show -json` (it counts each `create`, `update` and `delete`
//! in every resource's `change.actions`, so a replace is one of each side).

use serde::{Deserialize, Serialize};

use crate::change::Action;
use crate::model::Plan;

/// The report GitLab reads through `artifacts:reports:terraform`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitlabReport {
    /// Creates, bootstraps, and the create half of each replace.
    pub create: usize,
    /// Updates, config applies and Talos upgrades.
    pub update: usize,
    /// Deletes, and the delete half of each replace.
    pub delete: usize,
}

impl GitlabReport {
    /// Count `plan`'s changes: create and bootstrap are OpenTofu `create`s;
    /// update, apply-config and upgrade are `update`s; a replace is OpenTofu's
    /// `["delete","create"]`, so one of each.
    pub fn of(plan: &Plan) -> GitlabReport {
        let mut r = GitlabReport::default();
        for change in &plan.changes {
            match change.action() {
                Action::Create | Action::Bootstrap => r.create += 1,
                Action::Update | Action::ApplyConfig | Action::Upgrade => r.update += 1,
                Action::Delete => r.delete += 1,
                Action::Replace => {
                    r.create += 1;
                    r.delete += 1;
                }
            }
        }
        r
    }

    /// The report as GitLab expects it: one compact JSON object, keys in the
    /// order `create`, `update`, `delete`.
    pub fn to_json(self) -> String {
        format!(
            "{{\"create\":{},\"update\":{},\"delete\":{}}}",
            self.create, self.update, self.delete
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(actions: &[(&str, Action)]) -> Plan {
        Plan::of_changes(
            actions
                .iter()
                .map(|(a, action)| {
                    let address = a.parse().expect("address");
                    crate::example::change(address, *action, "").expect("a change")
                })
                .collect(),
        )
    }

    #[test]
    fn counts_every_action_as_gitlabs_conversion_does() {
        let plan = plan_of(&[
            ("pool/TALOS", Action::Create),
            ("vm/cp-01", Action::Replace),
            ("vm/worker-01", Action::Update),
            ("config/cp-01", Action::ApplyConfig),
            ("config/worker-01", Action::Upgrade),
            ("bootstrap", Action::Bootstrap),
            ("vm/old-01", Action::Delete),
        ]);
        let report = GitlabReport::of(&plan);
        assert_eq!(
            report,
            GitlabReport {
                create: 3,
                update: 3,
                delete: 2
            }
        );
        assert_eq!(report.to_json(), r#"{"create":3,"update":3,"delete":2}"#);
    }

    #[test]
    fn empty_plan_reports_zeros() {
        assert_eq!(
            GitlabReport::of(&plan_of(&[])).to_json(),
            r#"{"create":0,"update":0,"delete":0}"#
        );
    }
}
