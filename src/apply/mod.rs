//! Applying changes to a running cluster: rolling Talos and Kubernetes upgrades and node removal.
pub mod remove;
pub mod upgrade;
