//! talosprov's vocabulary, below every other crate: located diagnostics, the
//! bounds on input and the bounded loader (`limits`, `load`, `budgets`), the
//! input files' trait (`inputs`), go-yaml's output (`yaml`), paths, durations,
//! [`sensitive::Sensitive`], [`role::Role`], Talos versions and their config
//! contracts (`version`), the VMs and images wanted on Proxmox as plain values
//! (`vm`), Image Factory schematic IDs (`schematic`), the add-on presets,
//! backup locations, PEM pairs (`pem`), the talosconfig (`talosconfig`) and a
//! Kubernetes node as read (`kube_node`).
//!
//! Dependency rule: no async runtime, no HTTP or gRPC stack, no I/O: file
//! contents, the environment, the clock and randomness come from the caller.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod backup;
pub mod budgets;
pub mod diagnostics;
pub mod duration;
pub mod inputs;
pub mod kube_node;
pub mod limits;
pub mod load;
pub mod paths;
pub mod pem;
pub mod preset;
pub mod role;
pub mod schematic;
pub mod sensitive;
pub mod talosconfig;
pub mod version;
pub mod vm;
pub mod yaml;
