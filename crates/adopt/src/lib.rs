//! Reading the sources `talosprov adopt` takes a running cluster from: an
//! OpenTofu or Terraform state (format version 4) written by the
//! siderolabs/talos and bpg/proxmox providers ([`tfstate`]), and the secrets
//! bundle held in it ([`secrets`]), what its Talos resources say
//! ([`talos`]) and its bpg/proxmox ones ([`proxmox`]), and each node's patches factored into a patch tree
//! ([`patches`]). Pure: the bytes come from the caller, and
//! nothing here reads a file or the network.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod build;
pub mod diff;
pub mod merge;
pub mod patches;
pub mod proxmox;
pub mod secrets;
pub mod talos;
pub mod tfstate;
pub mod topology;

#[cfg(test)]
mod build_tests;
#[cfg(test)]
mod tests;
