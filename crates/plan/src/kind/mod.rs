//! The resource kinds of a plan, one module each, behind one trait
//! ([`ResourceKind`]): a kind's module holds how its desired value is
//! compared with its record in the state and with what refresh observed
//! (the diff, its drift and conflicts, the create intents an interrupted
//! apply left), where its changes run in the apply ([`Phase`]), and what a
//! destroy deletes of it. Its op (what a change does, with the values apply
//! sends) is its variant of [`super::Op`]; its step is
//! `talosprov-engine`'s `apply::kind::<kind>`.
//!
//! Adding a kind: a variant of [`super::Op`] and of
//! [`crate::state::Address`], a module here implementing [`ResourceKind`],
//! and its step in the engine; the compiler lists every `match` to extend
//! (no wildcard arms in the crates that hold them).

pub mod bootstrap;
pub mod config;
mod dispatch;
pub mod ha_rule;
pub mod image;
pub mod kubeconfig;
pub mod mapping;
pub mod object;
pub mod pool;
pub mod resource;
pub mod talosconfig;
pub mod vm;
