//! The shapes every preset file fills in, and the facts its values are
//! made from. Imports no other file of the module.

use serde::Serialize;
use serde_json::Value;

/// When an add-on is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// In every control plane's `cluster.inlineManifests`, applied by Talos
    /// when it bootstraps (a CNI, so that nodes become Ready), then kept in
    /// step through the Kubernetes API.
    Bootstrap,
    /// Through the Kubernetes API once it answers.
    Cluster,
}

/// The cluster-wide settings add-ons depend on, read from the rendered
/// configs (`ClusterFacts::of`, in `addon`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `cluster.network.cni.name`: `flannel` (the default), `custom` or
    /// `none`.
    pub cni: String,
    /// `cluster.proxy.disabled`: kube-proxy is not deployed.
    pub kube_proxy_disabled: bool,
    /// The Kubernetes version without its `v`, such as `1.36.2`.
    pub kubernetes_version: String,
}

/// What one preset is; each file of this module has one.
pub(super) struct Spec {
    /// The name written in the topology.
    pub(super) name: &'static str,
    /// When the add-on is installed unless its `phase` says otherwise.
    pub(super) phase: Phase,
    /// The namespace unless `namespace` says otherwise.
    pub(super) namespace: &'static str,
    /// The labels its namespace gets before the user's.
    pub(super) namespace_labels: &'static [(&'static str, &'static str)],
    /// It installs the cluster's CNI.
    pub(super) carries_cni: bool,
    /// It runs the NVIDIA device plugin.
    pub(super) runs_device_plugin: bool,
    /// Its chart values for a cluster.
    pub(super) values: fn(&ClusterFacts) -> Value,
}
