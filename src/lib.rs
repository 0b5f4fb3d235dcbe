//! talosprov: turns a topology file into a running Talos Linux Kubernetes cluster
//! on Proxmox VE, and keeps it converged (plan, apply, output, destroy).
//!
//! This crate is the command line: `cli` parses the flags, resolves the
//! settings, calls the engine and chooses the exit code; `ui` is the only code
//! that writes to the terminal. Everything else lives in the workspace's crates
//! (see README.md, "Architecture"), named by their own crate names.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod cli;
pub mod ui;
