//! The add-on checks that need the rendered machine configs: a CNI add-on on
//! a cluster that already has a CNI, GPU nodes that lack what the GPU
//! operator preset needs, kubelets without the external cloud provider the
//! Talos CCM needs.

use crate::facts::NodeFacts;
use talosprov_base::diagnostics::{Code, Diagnostic};
use talosprov_base::preset::Preset;
use talosprov_base::preset::spec::ClusterFacts;
use talosprov_machine::node::NodeConfig;
use talosprov_topology::model::{Addon, Node, SchematicSpec, Topology};

/// The PCI vendor ID of NVIDIA (PCI-SIG: `10de`).
pub const NVIDIA_VENDOR: &str = "10de";

/// The kernel modules Talos's NVIDIA guide loads on a GPU node
/// (`machine.kernel.modules`).
pub const NVIDIA_MODULES: [&str; 4] = ["nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"];

/// The system extensions a GPU node's schematic needs, each a choice of
/// names: the kernel modules (open or proprietary, LTS or production branch)
/// and the container toolkit (Talos extensions repository, `nvidia-gpu/`).
pub const NVIDIA_EXTENSIONS: [(&str, &[&str]); 2] = [
    (
        "the NVIDIA kernel modules",
        &[
            "siderolabs/nvidia-open-gpu-kernel-modules-production",
            "siderolabs/nvidia-open-gpu-kernel-modules-lts",
            "siderolabs/nonfree-kmod-nvidia-production",
            "siderolabs/nonfree-kmod-nvidia-lts",
        ],
    ),
    (
        "the NVIDIA container toolkit",
        &[
            "siderolabs/nvidia-container-toolkit-production",
            "siderolabs/nvidia-container-toolkit-lts",
        ],
    ),
];

/// Every add-on problem `configs` (the nodes' rendered configs, in node
/// order) show for `topology`'s add-ons: errors `A005` (a CNI add-on on a
/// cluster with a CNI) and `A006` (a GPU node that lacks an extension or a
/// module), warnings `A007` (the GPU operator without an NVIDIA node) and
/// `A008` (a kubelet without `cloud-provider: external` for the Talos CCM).
/// Each names the topology file, the add-on's line, and the node.
pub fn check(topology: &Topology, configs: &[NodeConfig]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let facts = crate::facts::cluster_facts(configs);
    for addon in topology.addons.values() {
        match addon.preset {
            Some(Preset::Cilium) => {
                if let Some(f) = facts.as_ref().filter(|f| f.cni != "none") {
                    out.push(cni_conflict(
                        topology,
                        addon,
                        f,
                        "the cilium preset installs a CNI",
                    ));
                }
            }
            Some(Preset::NvidiaGpuOperator) => gpu_nodes(topology, configs, addon, &mut out),
            Some(Preset::TalosCcm) => {
                for (node, config) in topology.nodes.iter().zip(configs) {
                    if NodeFacts::of(config).cloud_provider.as_deref() != Some("external") {
                        let how = if documents(topology) {
                            "a KubeletConfig document with `extraArgs: {cloud-provider: \
                             external}`"
                        } else {
                            "`machine.kubelet.extraArgs.cloud-provider: external`"
                        };
                        let msg = format!(
                            "add-on `{}` installs the Talos cloud controller manager, and node {} \
                             has no kubelet argument `cloud-provider: external`: its kubelet \
                             will not wait for the CCM to initialise it (add {how} in a patch)",
                            addon.name, node.hostname
                        );
                        out.push(
                            at(topology, addon, Code::ExternalCloudProvider, msg, true)
                                .on_node(Some(&node.hostname)),
                        );
                    }
                }
            }
            None => {}
        }
    }
    out
}

/// Whether the cluster's configs are in Talos 1.14's documents (its `talos_version` is 1.14 or
/// later), so that a hint names the document rather than the deprecated v1alpha1 field.
fn documents(topology: &Topology) -> bool {
    topology
        .cluster
        .talos_version
        .to_string()
        .parse::<talosprov_base::version::TalosVersion>()
        .is_ok_and(|v| {
            talosprov_base::version::contract_for(&v).contract
                >= talosprov_base::version::Contract::V1_14
        })
}

/// `A005` for `addon` on a cluster whose CNI is `facts.cni`.
pub fn cni_conflict(
    topology: &Topology,
    addon: &Addon,
    facts: &ClusterFacts,
    why: &str,
) -> Diagnostic {
    let how = if documents(topology) {
        "delete the KubeFlannelCNIConfig document (`$patch: delete`)"
    } else {
        "set `cluster.network.cni.name: none`"
    };
    let msg = format!(
        "add-on `{}` carries a CNI ({why}), and the cluster's CNI is `{}`: {how} in a \
         control-plane patch, or drop the add-on",
        addon.name, facts.cni
    );
    at(topology, addon, Code::AddonCniConflict, msg, false)
}

/// `A006` for every NVIDIA node that lacks an extension or a module, or `A007`
/// when no node has an NVIDIA device.
fn gpu_nodes(
    topology: &Topology,
    configs: &[NodeConfig],
    addon: &Addon,
    out: &mut Vec<Diagnostic>,
) {
    let mut any = false;
    for (node, config) in topology.nodes.iter().zip(configs) {
        if !has_nvidia_device(topology, node) {
            continue;
        }
        any = true;
        let mut lacks = Vec::new();
        match node
            .schematic
            .as_ref()
            .and_then(|s| topology.schematics.get(s))
        {
            Some(SchematicSpec::Id(_)) => {} // Its extensions are the factory's to know.
            Some(SchematicSpec::Customization { extensions, .. }) => {
                for (what, names) in NVIDIA_EXTENSIONS {
                    if !names.iter().any(|n| extensions.iter().any(|e| e == n)) {
                        lacks.push(format!("{what} extension ({})", names[0]));
                    }
                }
            }
            None => {
                for (what, names) in NVIDIA_EXTENSIONS {
                    lacks.push(format!("{what} extension ({})", names[0]));
                }
            }
        }
        let modules = NodeFacts::of(config).kernel_modules;
        let missing: Vec<&str> = NVIDIA_MODULES
            .into_iter()
            .filter(|m| !modules.iter().any(|have| have == m))
            .collect();
        if !missing.is_empty() {
            let place = if documents(topology) {
                "as KernelModuleConfig documents"
            } else {
                "in machine.kernel.modules"
            };
            lacks.push(format!(
                "the kernel module(s) {} {place}",
                missing.join(", ")
            ));
        }
        if !lacks.is_empty() {
            let schematic = node
                .schematic
                .as_deref()
                .map_or_else(|| "no schematic".to_owned(), |s| format!("schematic `{s}`"));
            let msg = format!(
                "node {} has an NVIDIA device for add-on `{}` ({}), and lacks {}",
                node.hostname,
                addon.name,
                schematic,
                lacks.join("; ")
            );
            out.push(
                at(topology, addon, Code::GpuNodeIncomplete, msg, false)
                    .on_node(Some(&node.hostname)),
            );
        }
    }
    if !any {
        let msg = format!(
            "add-on `{}` installs the NVIDIA GPU operator, and no node passes an NVIDIA device \
             through (a `hostpci` mapping whose id starts with {NVIDIA_VENDOR}:)",
            addon.name
        );
        out.push(at(topology, addon, Code::NoGpuNode, msg, true));
    }
}

/// Whether `node` has a passed-through PCI device whose vendor is NVIDIA.
pub fn has_nvidia_device(topology: &Topology, node: &Node) -> bool {
    node.hostpci.iter().any(|h| {
        topology.pci_mappings.get(&h.mapping).is_some_and(|m| {
            m.id.to_ascii_lowercase()
                .starts_with(&format!("{NVIDIA_VENDOR}:"))
        })
    })
}

fn at(topology: &Topology, addon: &Addon, code: Code, msg: String, warning: bool) -> Diagnostic {
    let d = if warning {
        Diagnostic::warning(code, &topology.file, msg)
    } else {
        Diagnostic::error(code, &topology.file, msg)
    };
    d.at(addon.pos).field(format!("addons.{}", addon.name))
}
