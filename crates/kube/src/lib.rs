//! The Kubernetes side of talosprov, through kube-rs: a client made from the admin
//! kubeconfig talosprov keeps in its state (client certificate from the cluster's
//! Kubernetes CA), and the cluster's nodes as `kubectl get nodes` shows them;
//! [`objects`]: any object by `apiVersion` and `kind`, through discovery, with
//! server-side apply (field manager [`FIELD_MANAGER`]), and rollout checks.

#![warn(missing_docs)]

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

pub mod client;
pub mod objects;
use crate::client::{KubeClient, KubeError};
use talosprov_base::kube_node::KubeNode;

/// The extended resource a GPU device plugin advertises (NVIDIA's device plugin and
/// the GPU operator's).
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

impl KubeClient {
    /// Every node, in the API's order.
    ///
    /// # Errors
    /// [`KubeError::Api`] when the API does not answer or refuses.
    pub async fn nodes(&self) -> Result<Vec<KubeNode>, KubeError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| KubeError::Api(e.to_string()))?;
        Ok(list.items.iter().map(node).collect())
    }

    /// The API server's version, `/version`'s `gitVersion` (`v1.36.2`), as
    /// `kubectl version` shows it for the server.
    ///
    /// # Errors
    /// [`KubeError::Api`] when the API does not answer or refuses.
    pub async fn server_version(&self) -> Result<String, KubeError> {
        let info = self
            .client
            .apiserver_version()
            .await
            .map_err(|e| KubeError::Api(e.to_string()))?;
        Ok(info.git_version)
    }

    /// The etcd revision the API server reports: a list's
    /// `metadata.resourceVersion` (one Namespace asked for), which
    /// kube-apiserver sets to etcd's store revision.
    ///
    /// # Errors
    /// [`KubeError::Api`] when the API does not answer, refuses, or reports a
    /// resourceVersion that is not a number.
    pub async fn revision(&self) -> Result<u64, KubeError> {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let list = api
            .list(&ListParams::default().limit(1))
            .await
            .map_err(|e| KubeError::Api(e.to_string()))?;
        let version = list.metadata.resource_version.unwrap_or_default();
        version.parse().map_err(|_| {
            KubeError::Api(format!(
                "the list's resourceVersion {version:?} is not a revision"
            ))
        })
    }
}

fn node(n: &Node) -> KubeNode {
    let status = n.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    KubeNode {
        name: n.metadata.name.clone().unwrap_or_default(),
        internal_ip: status
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .and_then(|a| a.address.parse().ok()),
        ready: ready.is_some_and(|c| c.status == "True"),
        reason: ready.and_then(|c| c.message.clone()).unwrap_or_default(),
        control_plane: n
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("node-role.kubernetes.io/control-plane")),
        kubelet_version: status
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.clone())
            .unwrap_or_default(),
        gpus: status
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(NVIDIA_GPU))
            .and_then(|q| q.0.parse().ok())
            .unwrap_or(0),
    }
}
