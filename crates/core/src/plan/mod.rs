//! The plan (pure): desired resources from the topology and rendered configs,
//! compared with the recorded state and the observed cluster, give a list of
//! changes in dependency order. The plan is data: views render it, apply runs it.
//! Modelled on OpenTofu's `internal/plans/plan.go` and `action.go`.

mod address_serde;
pub mod change;
pub mod config_diff;
pub mod desired;
pub mod diff;
#[cfg(any(test, feature = "test-support"))]
pub mod example;
pub mod field;
pub mod gitlab_report;
pub mod kind;
pub mod model;
pub mod observed;
pub mod order;
mod ownership;
pub mod planned;
pub mod removal;
pub mod renewal;
pub mod saved;
mod staged;
pub mod step;

pub use change::{
    Action, Change, ChangeWire, ConfigOp, FieldChange, HaRuleOp, ImageOp, KubeconfigOp, MappingOp,
    ObjectOp, Op, PoolOp, StepError, VmOp,
};
pub use desired::{
    Desired, DesiredConfig, DesiredError, DesiredImage, DesiredVm, RenderedConfig, desired,
};
pub use diff::{KNOWN_AFTER_APPLY, PlanInput, destroy_plan, digests_known_after_apply, plan};
pub use field::{ConfigField, Field, MappingField, VmField};
pub use gitlab_report::GitlabReport;
pub use kind::EtcdRecovery;
pub use kind::object::DesiredObject;
pub use kind::{Phase, ResourceKind, recorded_role, same_mapping};
pub use model::{
    AddonValues, Conflict, Drift, DriftKind, PLAN_FORMAT_VERSION, Plan, PlanError, PlanFormatError,
    PlanWarning, PoolChange, Summary, pool_changes,
};
pub use observed::{Observation, Observed, ObservedObjects, ObservedVm, RunningConfig};
pub use order::{target, unmatched_targets};
pub use planned::{
    ApplyMode, KubernetesChange, PlannedConfig, PlannedImage, PlannedObject, PlannedVm,
};
pub use saved::{InputDigests, PlanMismatch, SavedPlan, StalePlan, check_fresh, check_same};
pub use staged::stage_config_changes;
pub use step::Step;
