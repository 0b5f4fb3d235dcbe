//! Cluster health: the checks `talosctl health` makes that apply to a talosprov
//! cluster (etcd, apid, versions, services; talos.md §9.5). `probe` asks the nodes
//! through the Talos client; `judge` turns the answers into a report (pure).
//! Apply uses the same checks as the gates of upgrades and removals.

pub mod cluster;
pub mod gate;
pub mod judge;
mod kubernetes;
pub mod probe;
pub(crate) mod report;
