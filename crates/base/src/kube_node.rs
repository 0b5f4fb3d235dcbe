//! One Kubernetes node as talosprov reads it (`kubectl get nodes`'s columns and
//! what the checks match on): a plain value the Kubernetes client makes and the
//! health checks and views read, so that they need not know the client.

use std::net::IpAddr;

/// One Kubernetes node, as `kubectl get nodes` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeNode {
    /// `metadata.name`.
    pub name: String,
    /// The first `InternalIP` address, which is how a node is matched to the
    /// topology's.
    pub internal_ip: Option<IpAddr>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// The `Ready` condition's message when not ready.
    pub reason: String,
    /// Whether it has the `node-role.kubernetes.io/control-plane` label.
    pub control_plane: bool,
    /// `status.nodeInfo.kubeletVersion`, such as `v1.36.2`.
    pub kubelet_version: String,
    /// `status.allocatable["nvidia.com/gpu"]`, 0 when absent.
    pub gpus: u64,
}
