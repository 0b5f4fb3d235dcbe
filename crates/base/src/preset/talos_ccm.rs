//! `talos-ccm`: the Talos cloud controller manager, in `kube-system`, with
//! the chart's own defaults (they are Talos's).

use serde_json::{Value, json};

use super::spec::{ClusterFacts, Phase, Spec};

pub(super) const SPEC: Spec = Spec {
    name: "talos-ccm",
    phase: Phase::Cluster,
    namespace: "kube-system",
    namespace_labels: &[],
    carries_cni: false,
    runs_device_plugin: false,
    values,
};

fn values(_facts: &ClusterFacts) -> Value {
    json!({})
}
