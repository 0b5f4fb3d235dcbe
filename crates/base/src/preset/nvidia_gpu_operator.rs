//! `nvidia-gpu-operator`: the NVIDIA GPU Operator as Talos's "NVIDIA GPU"
//! guide runs it, in `gpu-operator`: the driver and the container toolkit
//! come from the schematic's system extensions, so the operator installs
//! neither and finds the driver under `/usr/local`. Its pods mount host
//! paths and run privileged, which Talos's default Pod Security admission
//! (baseline) refuses elsewhere, so its namespace is labelled privileged.
//! It runs the device plugin: apply's final gate waits for `nvidia.com/gpu`
//! on the GPU nodes.

use serde_json::{Value, json};

use super::spec::{ClusterFacts, Phase, Spec};

pub(super) const SPEC: Spec = Spec {
    name: "nvidia-gpu-operator",
    phase: Phase::Cluster,
    namespace: "gpu-operator",
    namespace_labels: &[("pod-security.kubernetes.io/enforce", "privileged")],
    carries_cni: false,
    runs_device_plugin: true,
    values,
};

fn values(_facts: &ClusterFacts) -> Value {
    json!({
        "driver": {"enabled": false},
        "toolkit": {"enabled": false},
        "hostPaths": {"driverInstallDir": "/usr/local"}
    })
}
