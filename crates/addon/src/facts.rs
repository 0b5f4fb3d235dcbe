//! What the rendered machine configs say that add-ons depend on: the
//! cluster's CNI and kube-proxy (from the first control plane: Talos takes
//! the cluster-wide settings from control-plane configs), and per node the kernel modules
//! and the kubelet's arguments.

use serde_yaml_ng::Value;

use talosprov_machine::effective;

use talosprov_base::role::Role;
use talosprov_machine::node::NodeConfig;
use talosprov_patch::document::MachineConfig;

/// Talos's CNI when the config names none (v1alpha1 `CNIConfig`: "flannel" by default).
pub const DEFAULT_CNI: &str = effective::DEFAULT_CNI;

use talosprov_base::preset::spec::ClusterFacts;

/// The cluster's facts of `configs`, read from the first control plane's
/// config (in either contract: [`effective`]); `None` without a control plane
/// or when its config cannot be read.
pub fn cluster_facts(configs: &[NodeConfig]) -> Option<ClusterFacts> {
    let cp = configs.iter().find(|c| c.role == Role::Controlplane)?;
    let docs = documents(cp)?;
    Some(ClusterFacts {
        cni: effective::cni_name(&docs),
        kube_proxy_disabled: effective::kube_proxy_disabled(&docs),
        kubernetes_version: cp.kubernetes_version.trim_start_matches('v').to_owned(),
    })
}

/// One node's settings add-on checks look at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// The kernel modules the node loads (`machine.kernel.modules[].name`, then
    /// `KernelModuleConfig` documents), in order.
    pub kernel_modules: Vec<String>,
    /// The kubelet's `cloud-provider` argument (`KubeletConfig.extraArgs`, else
    /// `machine.kubelet.extraArgs`), when set (a list's values joined by `,`).
    pub cloud_provider: Option<String>,
}

impl NodeFacts {
    /// The facts of one node's config (empty when it cannot be read).
    pub fn of(config: &NodeConfig) -> NodeFacts {
        let Some(docs) = documents(config) else {
            return NodeFacts::default();
        };
        NodeFacts {
            kernel_modules: effective::kernel_modules(&docs),
            cloud_provider: effective::kubelet_arg(&docs, "cloud-provider"),
        }
    }
}

/// The documents of a node's config.
fn documents(config: &NodeConfig) -> Option<Vec<Value>> {
    MachineConfig::parse(config.yaml.expose())
        .ok()
        .map(|c| c.documents)
}
