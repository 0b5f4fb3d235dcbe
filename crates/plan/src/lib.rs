//! The plan (pure): desired resources from the topology and rendered configs,
//! compared with the recorded state and the observed cluster, give a list of
//! changes in dependency order. The plan is data: views render it, apply runs it.
//! Modelled on OpenTofu's `internal/plans/plan.go` and `action.go`.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

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
pub mod staged;
pub mod view;
