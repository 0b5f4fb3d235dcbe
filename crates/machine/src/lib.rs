//! Machine configs (pure): the secrets bundle, base configs per role, the checks Talos makes on
//! a final config (strict decoding against each contract's field set, then validation), the
//! check that a node keeps its address, the talosconfig and the offline admin kubeconfig.
//! Randomness and the clock are parameters; nothing here does I/O.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

pub mod config;
pub mod config_parts;
mod config_v114;
pub mod conflicts;
pub mod decode;
pub mod deprecated;
pub mod devices;
pub mod effective;
pub mod expiry;
pub mod fields;
pub mod immediate;
pub mod inline;
pub mod keys;
pub mod kubeconfig;
pub mod link;
pub mod managed;
pub mod migrate;
pub mod node;
pub mod pki;
pub mod redact;
pub mod rotation;
pub mod secrets;
pub mod secrets_file;
pub mod talosconfig;
pub mod validate;
