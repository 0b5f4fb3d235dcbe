//! `cluster.yaml` as `init` writes it: every section with a comment saying
//! what it is for, the versions those of talosprov's reference cluster.

use std::fmt::Write as _;
use std::path::Path;

use super::scaffold::{Kind, PREFIX_LENGTH, Scaffold};
use talosprov_base::version::{REFERENCE_TALOS_VERSION, reference_kubernetes_version};

/// `cluster.yaml`: every section with a comment saying what it is for.
pub(super) fn topology(s: &Scaffold, dir: &Path) -> String {
    let mut y = String::new();
    header(&mut y, s, dir);
    cluster_section(&mut y, s);
    proxmox_section(&mut y, s);
    schematics_section(&mut y, s);
    nodes_section(&mut y, s);
    addons_section(&mut y, s);
    y
}

/// The schema line for editors, and what the file is.
fn header(y: &mut String, s: &Scaffold, dir: &Path) {
    let count = |k: fn(&Kind) -> bool, one: &str, many: &str| match s
        .nodes
        .iter()
        .filter(|n| k(&n.kind))
        .count()
    {
        0 => None,
        1 => Some(format!("1 {one}")),
        n => Some(format!("{n} {many}")),
    };
    let roles: Vec<String> = [
        count(
            |k| *k == Kind::ControlPlane,
            "control plane",
            "control planes",
        ),
        count(|k| *k == Kind::Worker, "worker", "workers"),
        count(|k| matches!(k, Kind::Gpu(_)), "GPU worker", "GPU workers"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let roles = match roles.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    let file = dir.join("cluster.yaml");
    let _ = write!(
        y,
        "# yaml-language-server: $schema=cluster.schema.json
# The cluster {name}: {roles}, on one Proxmox host, the
# control planes behind a VIP. Check it offline with:
#   talosprov validate -f {file}
# then `talosprov plan` and `talosprov apply`. Editors that use the YAML language
# server check this file against cluster.schema.json (first line), written
# here by `talosprov init`; `talosprov schema > cluster.schema.json` renews it.
#
# Credentials never go in this file: talosprov reads the Proxmox API token from
# PROXMOX_VE_API_TOKEN (USER@REALM!TOKENID=SECRET) in the environment.
",
        name = s.name,
        file = file.display(),
    );
}

/// `cluster:`: name, versions and the network every node shares.
fn cluster_section(y: &mut String, s: &Scaffold) {
    let _ = write!(
        y,
        "
# The Kubernetes cluster. Hostnames are <name>-cp-NN, -wk-NN and -gpu-NN. The
# control planes share the VIP, a free address on the nodes' network that fronts
# the Kubernetes API (https://VIP:6443). Every node routes through the gateway,
# which is also its nameserver. Talos installs to the VM's system disk.
cluster:
  name: {name}
  talos_version: {talos}
  kubernetes_version: v{kubernetes}
  vip: {vip}
  gateway: {gw}
  prefix_length: {PREFIX_LENGTH}
  nameservers: [{gw}]
  install_disk: /dev/sda
",
        name = s.name,
        vip = s.vip,
        gw = s.gateway,
        talos = REFERENCE_TALOS_VERSION,
        kubernetes = reference_kubernetes_version(),
    );
}

/// `proxmox:` and `image_factory:`: where the VMs and their images go.
fn proxmox_section(y: &mut String, s: &Scaffold) {
    let endpoint = match &s.endpoint {
        // A JSON string is a YAML double-quoted scalar.
        Some(url) => format!("  endpoint: {}\n", serde_json::Value::from(url.as_str())),
        None => "  # endpoint: https://pve.example:8006   (unset: PROXMOX_VE_ENDPOINT gives it)\n"
            .to_owned(),
    };
    let _ = write!(
        y,
        "
# The Proxmox VE host the VMs run on: its API, node name, the storage for the
# VMs' disks (datastore) and for the downloaded Talos images (image_storage, with
# the `import` content type), the bridge the VMs' NIC joins and the pool that
# groups them. For a self-signed certificate, add ca_file or fingerprint.
proxmox:
{endpoint}  node: pve
  datastore: local-lvm
  image_storage: local
  bridge: vmbr0
  pool: {name}
{networks}
# Where the Talos images come from: each schematic below is registered there.
image_factory:
  url: https://factory.talos.dev
",
        name = s.name,
        networks = match s.vlan {
            Some(tag) => format!(
                "  # Every VM's NIC, on the bridge above, tagged by it with VLAN {tag}.\n  \
                 networks:\n    - {{ vlan: {tag} }}\n"
            ),
            None => String::new(),
        },
    );
}

/// `schematics:` and, with GPU nodes, `pci_mappings:` with placeholders.
fn schematics_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# The Talos system extensions of each image. Nodes use default_schematic unless
# they name another.
schematics:
  base:
    extensions:
      - siderolabs/qemu-guest-agent
",
    );
    let mappings = s.mappings();
    if !mappings.is_empty() {
        y.push_str(
            "  # The GPU nodes: the NVIDIA open kernel modules and container toolkit.
  nvidia:
    extensions:
      - siderolabs/nvidia-container-toolkit-production
      - siderolabs/nvidia-open-gpu-kernel-modules-production
      - siderolabs/qemu-guest-agent
",
        );
    }
    y.push_str("\ndefault_schematic: base\n");
    if mappings.is_empty() {
        return;
    }
    y.push_str(
        "
# The Proxmox resource mappings of the GPUs passed through (Datacenter > Resource
# Mappings). The values below are PLACEHOLDERS: fill them in from the Proxmox
# host, with `lspci -nn` for path and id, `lspci -nnv` (Subsystem) for
# subsystem_id, and /sys/bus/pci/devices/<path>/iommu_group for iommu_group.
pci_mappings:
",
    );
    for m in mappings {
        let _ = write!(
            y,
            "  {m}:
    path: \"0000:00:00\"
    id: \"10de:0000\"
    iommu_group: 0
    subsystem_id: \"0000:0000\"
    comment: GPU (fill in its path, id, subsystem_id and iommu_group)
"
        );
    }
}

/// `nodes:` and `patches_dir:`.
fn nodes_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# The VMs. memory is in MiB, disk_size in GiB. vm_id defaults to the IP's last
# octet; it is written out only where that cannot be used (below 100, or taken).
nodes:
",
    );
    for n in &s.nodes {
        let (role, cores, memory, disk) = match n.kind {
            Kind::ControlPlane => ("controlplane", 2, 4096, 50),
            Kind::Worker => ("worker", 4, 8192, 100),
            Kind::Gpu(_) => ("worker", 4, 12288, 100),
        };
        let _ = writeln!(y, "  - hostname: {}\n    ip: {}", n.hostname, n.ip);
        match n.vm_id {
            Some(id) => {
                let _ = writeln!(y, "    vm_id: {id}");
            }
            None => {
                let _ = writeln!(y, "    # vm_id: {} (the IP's last octet)", n.ip.octets()[3]);
            }
        }
        let _ = writeln!(
            y,
            "    role: {role}\n    cores: {cores}\n    memory: {memory}\n    disk_size: {disk}"
        );
        let has_worker = s.nodes.iter().any(|n| n.kind != Kind::ControlPlane);
        if !s.data_disks.is_empty() && (n.kind != Kind::ControlPlane || !has_worker) {
            y.push_str("    disks:\n");
            for d in &s.data_disks {
                let _ = match &d.mount {
                    Some(m) => writeln!(y, "      - {{ size: {}, mount: {m} }}", d.size_gib),
                    None => writeln!(y, "      - {{ size: {} }}", d.size_gib),
                };
            }
        }
        if let Kind::Gpu(m) = &n.kind {
            let _ = write!(
                y,
                "    schematic: nvidia
    hostpci:
      - device: hostpci0
        mapping: {m}
        pcie: true
        rombar: true
        xvga: false
"
            );
        }
    }
    y.push_str(
        "
# The machine config patches, merged in order: patches/common/, then
# patches/<role>/, then patches/nodes/<hostname>/ (see the README).
patches_dir: patches
",
    );
}

/// `addons:`: Cilium always, the GPU operator with GPU nodes.
fn addons_section(y: &mut String, s: &Scaffold) {
    y.push_str(
        "
# Kubernetes add-ons, rendered with `helm template` (helm on PATH, or
# TALOSPROV_HELM; `validate` says when it is missing). They are on, not left
# commented out, because the patches turn the built-in CNI and kube-proxy off:
# without Cilium no node ever becomes Ready. As a bootstrap add-on Cilium is in
# every control plane's inline manifests, so the nodes are Ready at bootstrap.
addons:
  cilium:
    preset: cilium
    helm:
      repo: https://helm.cilium.io/
      chart: cilium
      version: 1.19.6
      values:
        operator:
          replicas: 1
",
    );
    if !s.mappings().is_empty() {
        y.push_str(
            "  # The NVIDIA GPU operator, for the GPU nodes (their schematic carries the
  # NVIDIA extensions and their patch loads the NVIDIA modules).
  gpu-operator:
    preset: nvidia-gpu-operator
    helm:
      repo: https://helm.ngc.nvidia.com/nvidia
      chart: gpu-operator
      version: v26.3.3
    depends_on: [cilium]
",
        );
    }
}
