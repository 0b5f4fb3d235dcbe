//! `cilium`: Cilium as Talos's "Deploying Cilium CNI" guide installs it
//! (<https://docs.siderolabs.com/kubernetes-guides/cni/deploying-cilium>,
//! written for Cilium 1.18), at bootstrap, in `kube-system`.

use serde_json::{Value, json};

use super::spec::{ClusterFacts, Phase, Spec};

/// KubePrism's port on every Talos node: the load-balanced API server
/// endpoint at `localhost:7445` (Talos "KubePrism", on by default since
/// v1.6).
pub const KUBEPRISM_PORT: u16 = 7445;

pub(super) const SPEC: Spec = Spec {
    name: "cilium",
    phase: Phase::Bootstrap,
    namespace: "kube-system",
    namespace_labels: &[],
    carries_cni: true,
    runs_device_plugin: false,
    values,
};

/// IPAM from Kubernetes, Talos's own cgroup v2 mount, the capability lists
/// without `SYS_MODULE` (Talos refuses module loading by workloads), and
/// kube-proxy replacement through KubePrism when the cluster has no
/// kube-proxy.
fn values(facts: &ClusterFacts) -> Value {
    let mut v = json!({
        "ipam": {"mode": "kubernetes"},
        "kubeProxyReplacement": facts.kube_proxy_disabled,
        "securityContext": {"capabilities": {
            "ciliumAgent": [
                "CHOWN", "KILL", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "SYS_ADMIN",
                "SYS_RESOURCE", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"
            ],
            "cleanCiliumState": ["NET_ADMIN", "SYS_ADMIN", "SYS_RESOURCE"]
        }},
        "cgroup": {"autoMount": {"enabled": false}, "hostRoot": "/sys/fs/cgroup"}
    });
    if facts.kube_proxy_disabled {
        v["k8sServiceHost"] = json!("localhost");
        v["k8sServicePort"] = json!(KUBEPRISM_PORT);
    }
    v
}
