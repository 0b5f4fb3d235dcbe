//! Reading the sources `talosprov adopt` takes a running cluster from: an
//! OpenTofu or Terraform state (format version 4) written by the
//! siderolabs/talos and bpg/proxmox providers ([`tfstate`]), and the secrets
//! bundle held in it ([`secrets`]), what its Talos resources say
//! ([`talos`]) and its bpg/proxmox ones ([`proxmox`]), and each node's patches factored into a patch tree
//! ([`patches`]). Pure: the bytes come from the caller, and
//! nothing here reads a file or the network.

pub mod build;
pub mod diff;
pub mod merge;
pub mod patches;
pub mod proxmox;
pub mod secrets;
pub mod talos;
pub mod tfstate;
pub mod topology;

pub use build::{Adopted, Source, adopt};
pub use merge::merge_state;
pub use patches::{NodePatches, PatchTree, factor};
pub use proxmox::{ProxmoxSide, StateImage, StateMapping, StateVm, proxmox_side};
pub use secrets::{SecretsError, StateSecrets, machine_secrets};
pub use talos::{AppliedConfig, ClusterFacts, NodeConfig, TalosSide, talos_side};
pub use tfstate::{Instance, Mode, TfState, TfStateError};
pub use topology::{AdoptError, NodeSource, Settings};

#[cfg(test)]
mod build_tests;
#[cfg(test)]
mod tests;
