//! What the rendered machine configs say that add-ons depend on: the
//! cluster's CNI and kube-proxy (from the first control plane: Talos takes
//! `cluster.*` from control-plane configs), and per node the kernel modules
//! and the kubelet's arguments.

use serde_yaml_ng::Value;

use crate::machine::node::NodeConfig;
use crate::patch::MachineConfig;
use crate::topology::Role;

/// Talos's CNI when `cluster.network.cni.name` is not set (v1alpha1
/// `CNIConfig`: "flannel" by default).
pub const DEFAULT_CNI: &str = "flannel";

pub use crate::preset::ClusterFacts;

impl ClusterFacts {
    /// The facts of `configs`, read from the first control plane's config;
    /// `None` without a control plane or when its config cannot be read.
    pub fn of(configs: &[NodeConfig]) -> Option<ClusterFacts> {
        let cp = configs.iter().find(|c| c.role == Role::Controlplane)?;
        let doc = v1alpha1(cp)?;
        let cluster = doc.get("cluster");
        let cni = cluster
            .and_then(|c| c.get("network"))
            .and_then(|n| n.get("cni"))
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_CNI)
            .to_owned();
        let kube_proxy_disabled = cluster
            .and_then(|c| c.get("proxy"))
            .and_then(|p| p.get("disabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Some(ClusterFacts {
            cni,
            kube_proxy_disabled,
            kubernetes_version: cp.kubernetes_version.trim_start_matches('v').to_owned(),
        })
    }
}

/// One node's settings add-on checks look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// `machine.kernel.modules[].name`, in order.
    pub kernel_modules: Vec<String>,
    /// `machine.kubelet.extraArgs.cloud-provider`, when set (a list's values
    /// joined by `,`).
    pub cloud_provider: Option<String>,
}

impl NodeFacts {
    /// The facts of one node's config (empty when it cannot be read).
    pub fn of(config: &NodeConfig) -> NodeFacts {
        let Some(doc) = v1alpha1(config) else {
            return NodeFacts::default();
        };
        let machine = doc.get("machine");
        let kernel_modules = machine
            .and_then(|m| m.get("kernel"))
            .and_then(|k| k.get("modules"))
            .and_then(Value::as_sequence)
            .map(|mods| {
                mods.iter()
                    .filter_map(|m| m.get("name").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let cloud_provider = machine
            .and_then(|m| m.get("kubelet"))
            .and_then(|k| k.get("extraArgs"))
            .and_then(|a| a.get("cloud-provider"))
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Sequence(items) => Some(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::Mapping(_)
                | Value::Tagged(_) => None,
            });
        NodeFacts {
            kernel_modules,
            cloud_provider,
        }
    }
}

/// The v1alpha1 document of a node's config (the one with `machine` or
/// `cluster`).
fn v1alpha1(config: &NodeConfig) -> Option<Value> {
    let parsed = MachineConfig::parse(config.yaml.expose()).ok()?;
    parsed
        .documents
        .into_iter()
        .find(|d| d.get("machine").is_some() || d.get("cluster").is_some())
}
