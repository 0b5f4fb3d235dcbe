//! What apply's final gate and `health` wait for on the Kubernetes side, from
//! the topology and the state: the cluster's CNI, the nodes, and the GPU
//! nodes when a GPU add-on is declared.

use std::net::IpAddr;
use std::time::Duration;

use talosprov_statefile::format::State;
use talosprov_topology::model::Topology;

use crate::health;
use crate::health::cluster::{ClusterNode, Cni};

/// The cluster's CNI, from the first control plane's machine config in the
/// state.
pub fn cni(topology: &Topology, state: &State) -> Option<Cni> {
    topology
        .controlplanes()
        .chain(topology.nodes.iter())
        .find_map(|n| state.outputs.machineconfigs.get(&n.hostname))
        .and_then(|c| Cni::from_machine_config(c.value.expose()))
}

/// What apply's final gate and `health` wait for on the Kubernetes side, when
/// the checks apply: the cluster has a CNI (Talos's own, or an add-on that
/// carries one: a preset that installs a CNI, a `manifests` add-on with a
/// DaemonSet mounting `/etc/cni/net.d`). Every node must be registered and
/// Ready; with a GPU add-on (a preset that runs a device plugin, or a device
/// plugin among the `manifests` add-ons), every node with an NVIDIA device
/// must have `nvidia.com/gpu` allocatable. `None` when the checks do not
/// apply. [`health::wait_for_kubernetes`] does the asking.
pub fn kubernetes_gate(
    topology: &Topology,
    state: &State,
    cni: Option<&Cni>,
    wait: Duration,
) -> Option<health::gate::KubernetesGate> {
    let (addons, _) = talosprov_files::render_addons(topology);
    let objects = || addons.iter().flat_map(|a| &a.objects);
    let presets = || topology.addons.values().filter_map(|a| a.preset);
    let cni_addon = presets().any(|p| p.carries_cni()) || objects().any(|o| o.carries_cni());
    if matches!(cni, Some(Cni::None)) && !cni_addon {
        return None;
    }
    let gpu_addon =
        presets().any(|p| p.runs_device_plugin()) || objects().any(|o| o.carries_device_plugin());
    let gpu_nodes: Vec<IpAddr> = topology
        .nodes
        .iter()
        .filter(|n| gpu_addon && talosprov_addon::checks::has_nvidia_device(topology, n))
        .map(|n| IpAddr::V4(n.ip))
        .collect();
    Some(health::gate::KubernetesGate {
        kubeconfig: state
            .outputs
            .kubeconfig
            .as_ref()
            .map(|k| k.value.expose().to_owned()),
        nodes: cluster_nodes(topology),
        gpu_nodes,
        wait,
    })
}

/// The nodes to check, in topology order.
pub fn cluster_nodes(topology: &Topology) -> Vec<ClusterNode> {
    topology
        .nodes
        .iter()
        .map(|n| ClusterNode {
            hostname: n.hostname.clone(),
            ip: IpAddr::V4(n.ip),
            role: n.role,
        })
        .collect()
}
