//! talosprov's engine: the commands' workflows ([`command`]: plan, apply,
//! destroy, import, health, the state and secrets commands, validate and
//! render, each one call taking resolved settings and a frontend), refresh
//! (what exists on Proxmox and on the nodes), the executor that runs a plan's
//! changes in dependency order under `-parallelism`, and the cluster health
//! checks the waits use. It talks to the machines only through the clients
//! (`talosprov-proxmox`, `talosprov-talos`, `talosprov-factory`) and stores
//! the state through `talosprov-backend`; what to do comes from
//! `talosprov_plan`.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod apply;
pub mod backups;
pub mod command;
pub mod health;
