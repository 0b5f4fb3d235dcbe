//! talosprov's core: everything that can be decided without talking to a
//! machine. The topology file and its diagnostics (`topology`), the patch tree,
//! its templates and Talos's strategic merge (`patch`), machine configs, secrets
//! and client configs (`machine`), Image Factory schematic IDs (`schematic`), the
//! VMs and images wanted on Proxmox as plain values (`vm`), the desired state and
//! the plan (`plan`), and the versioned state format (`state`). Input files
//! come in through an [`inputs::Inputs`] the caller gives.
//!
//! Dependency rule: no async runtime, no HTTP or gRPC stack (tokio, reqwest,
//! hyper and tonic are refused by `tests/it/architecture.rs`). File contents, the environment,
//! the clock and randomness are passed in by the caller.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod addon;
pub mod adopt;
pub mod backup;
pub mod budgets;
pub mod diagnostics;
pub mod duration;
pub mod inputs;
pub mod kube_node;
pub mod limits;
pub mod load;
pub mod machine;
pub mod patch;
pub mod paths;
pub mod pem;
pub mod plan;
pub mod preset;
pub mod role;
pub mod schematic;
pub mod sensitive;
pub mod state;
pub mod talosconfig;
pub mod topology;
pub mod version;
pub mod vm;
pub mod yaml;
