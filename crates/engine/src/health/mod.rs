//! Cluster health: the checks `talosctl health` makes that apply to a talosprov
//! cluster (etcd, apid, versions, services; talos.md §9.5). `probe` asks the nodes
//! through the Talos client; `judge` turns the answers into a report (pure).
//! Apply uses the same checks as the gates of upgrades and removals.

mod cluster;
mod gate;
mod judge;
mod kubernetes;
mod probe;
mod report;

pub use cluster::{ClusterNode, Cni};
pub use gate::{
    GateEvent, GateOutcome, KUBE_REQUEST_TIMEOUT, KubernetesGate, PROGRESS_EVERY, missing,
    wait_for_kubernetes,
};
pub use judge::{
    Expectations, NodeAnswers, is_member, judge, judge_etcd, judge_etcd_after_removal, judge_node,
};
pub use kubernetes::judge_kubernetes;
pub use probe::{
    HealthError, observe, run_checks, wait_etcd_healthy, wait_etcd_settled, wait_healthy,
    wait_node_healthy,
};
pub use report::{Check, CheckName, CheckStatus, HealthReport};

pub use talosprov_core::topology::Role;
pub use talosprov_kube::KubeNode;
