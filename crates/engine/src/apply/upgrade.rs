//! Rolling Talos upgrades to `<factory host>/nocloud-installer/<schematic>:<version>`:
//! control planes one at a time and first, each between two etcd health gates and
//! after an etcd snapshot; then workers, `max_parallel` at a time. Progress goes to a
//! callback per node, so the engine can record each upgraded node in the state.

pub mod events;
pub mod kubernetes;
pub mod rolling;
pub mod snapshot;
