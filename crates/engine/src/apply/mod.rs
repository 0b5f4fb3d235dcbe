//! Apply: refresh (reading Proxmox and Talos for the plan), the executor that
//! runs a plan's changes in dependency order with bounded parallelism, saves the
//! state after every step and emits events for the views; and the day-two
//! operations on a running cluster: rolling Talos and Kubernetes upgrades and
//! node removal.

pub(crate) mod context;
mod create_step;
pub mod event;
pub mod executor;
mod gate;
pub mod import;
mod kind;
#[cfg(test)]
mod memory;
pub mod record;
pub mod refresh;
pub mod refresh_kube;
pub mod refresh_only;
pub mod remove;
mod remove_step;
pub mod reporter;
pub mod session;
pub mod steps;
mod talos_steps;
pub mod upgrade;
mod upgrade_step;
pub mod workflow;
