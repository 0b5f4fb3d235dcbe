//! talosprov: turns a topology file into a running Talos Linux Kubernetes cluster
//! on Proxmox VE, and keeps it converged (plan, apply, output, destroy).
//!
//! This crate is the command line: `cli` parses the flags, resolves the
//! settings, calls the engine and chooses the exit code; `ui` is the only code
//! that writes to the terminal. Everything else lives in the workspace's crates
//! (see README.md, "Architecture"), re-exported here under their module names.

#![warn(missing_docs)]

pub mod cli;
pub mod ui;

pub use talosprov_core::{
    addon, duration, inputs, machine, patch, paths, plan, sensitive, topology, vm,
};
pub use talosprov_engine::{apply, health};
pub use talosprov_factory as factory;
pub use talosprov_files as files;
pub use talosprov_kube as kube;
pub use talosprov_proxmox as proxmox;
pub use talosprov_retry as retry;
pub use talosprov_sources as sources;
pub use talosprov_state as state;
pub use talosprov_talos as talos;
