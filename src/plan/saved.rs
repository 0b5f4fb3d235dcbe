//! A saved plan (`plan -out FILE`, pure): the plan and, when it was made before
//! any state existed, the secrets bundle its configs were rendered with, so
//! that `apply FILE` uses exactly those. It holds secrets: the CLI writes it
//! with mode 0600, sealed like the state when state encryption is on.

use serde::{Deserialize, Serialize};

use crate::state::Sensitive;

use super::{Plan, PlanFormatError};

/// The saved plan file's content (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedPlan {
    /// The plan (lineage and serial inside say which state it was made from).
    pub plan: Plan,
    /// The secrets bundle (talosctl `secrets.yaml` text) generated for this
    /// plan when there was no state; `None` when the state holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Sensitive>,
    /// The `-target` addresses the plan was made with (apply plans with the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

impl SavedPlan {
    /// JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Read the JSON bytes, refusing a newer plan format.
    ///
    /// # Errors
    /// [`PlanFormatError`].
    pub fn from_json(bytes: &[u8]) -> Result<SavedPlan, PlanFormatError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| PlanFormatError::Syntax(e.to_string()))?;
        let plan = value
            .get("plan")
            .ok_or_else(|| PlanFormatError::Syntax("no plan".into()))?;
        Plan::from_json(plan.to_string().as_bytes())?;
        serde_json::from_value(value).map_err(|e| PlanFormatError::Syntax(e.to_string()))
    }
}

/// Why a saved plan cannot be applied to the state as it is now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StalePlan {
    /// The state belongs to another cluster.
    #[error(
        "the saved plan was made for state lineage {planned}, but the state has lineage {current}"
    )]
    Lineage {
        /// The plan's lineage.
        planned: String,
        /// The state's lineage.
        current: String,
    },
    /// The state was written since the plan was made.
    #[error(
        "the saved plan is stale: it was made from state serial {planned}, and the state is now \
         at serial {current}; run `talosprov plan` again"
    )]
    Serial {
        /// The plan's serial (`none` when made before any state).
        planned: String,
        /// The state's serial (`none` when there is none).
        current: String,
    },
}

/// Check that `plan` was made from the state identified by `current`
/// (lineage and serial; `None` when there is no state), as OpenTofu's local
/// backend does before applying a saved plan.
///
/// # Errors
/// [`StalePlan`].
pub fn check_fresh(plan: &Plan, current: Option<(uuid::Uuid, u64)>) -> Result<(), StalePlan> {
    let text = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |s| s.to_string());
    match (plan.lineage.zip(plan.serial), current) {
        (None, None) => Ok(()),
        (Some((pl, ps)), Some((cl, cs))) => {
            if pl != cl {
                Err(StalePlan::Lineage {
                    planned: pl.to_string(),
                    current: cl.to_string(),
                })
            } else if ps != cs {
                Err(StalePlan::Serial {
                    planned: ps.to_string(),
                    current: cs.to_string(),
                })
            } else {
                Ok(())
            }
        }
        (p, c) => Err(StalePlan::Serial {
            planned: text(p.map(|x| x.1)),
            current: text(c.map(|x| x.1)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PLAN_FORMAT_VERSION;

    fn plan(at: Option<(uuid::Uuid, u64)>) -> Plan {
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            lineage: at.map(|a| a.0),
            serial: at.map(|a| a.1),
            refreshed: false,
            destroy: false,
            changes: vec![],
            drift: vec![],
            warnings: vec![],
            conflicts: Vec::new(),
        }
    }

    #[test]
    fn plan_from_an_older_serial_is_stale() {
        let l = uuid::Uuid::from_u128(1);
        assert!(check_fresh(&plan(Some((l, 3))), Some((l, 3))).is_ok());
        let e = check_fresh(&plan(Some((l, 3))), Some((l, 5))).unwrap_err();
        assert!(e.to_string().contains("serial 3"), "{e}");
        assert!(check_fresh(&plan(None), Some((l, 1))).is_err());
        assert!(check_fresh(&plan(None), None).is_ok());
        let other = uuid::Uuid::from_u128(2);
        assert!(matches!(
            check_fresh(&plan(Some((l, 3))), Some((other, 3))),
            Err(StalePlan::Lineage { .. })
        ));
    }

    #[test]
    fn saved_plan_round_trips_without_showing_secrets_in_debug() {
        let s = SavedPlan {
            plan: plan(None),
            secrets: Some(Sensitive::new("cluster: secret")),
            targets: vec!["vm/cp-01".into()],
        };
        assert_eq!(SavedPlan::from_json(&s.to_json()).expect("reads"), s);
        assert!(!format!("{s:?}").contains("cluster: secret"));
    }
}
