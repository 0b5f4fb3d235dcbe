//! talosprov: turns a topology file into a running Talos Linux Kubernetes cluster
//! on Proxmox VE, and keeps it converged (plan, apply, output, destroy).
//!
//! Module map and dependency rules:
//! - pure (no I/O, no clock, no randomness except what is passed in):
//!   `topology` (raw file -> validated model, diagnostics), `patch` (render,
//!   strategic merge), `machine` (secrets, base configs, talosconfig),
//!   `factory` (schematic IDs, image references); `retry` (the notices a
//!   client gives when it sends a request again, shown by whoever runs it);
//! - edges (I/O): `proxmox` (REST client), `talos` (gRPC client), `sim` (the
//!   Talos node simulator, feature `sim`), `state` (backends over the pure
//!   state format);
//! - `ui` is the only module that writes to the terminal; `cli` is the only one
//!   that decides exit codes.
//!
//! The I/O modules depend on the pure ones, never the other way around.

#![warn(missing_docs)]

pub mod apply;
pub mod cli;
pub mod factory;
pub mod health;
pub mod machine;
pub mod patch;
pub mod plan;
pub mod proxmox;
pub mod retry;
#[cfg(feature = "sim")]
pub mod sim;
pub mod state;
pub mod talos;
pub mod topology;
pub mod ui;
