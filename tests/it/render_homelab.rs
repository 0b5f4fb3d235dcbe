//! The final machine configs of the homelab example, through `node_configs` with the fixture
//! secrets bundle: snapshots with secrets redacted, and the facts each node must carry.

use crate::support::fixtures::{SECRETS, repo};
use std::path::Path;
use talosprov_base::role::Role;
use talosprov_machine::node::{NodeConfig, node_configs};
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_topology as topology;
use talosprov_topology::model::Environment;

fn homelab() -> Vec<NodeConfig> {
    // Relative to the crate root, so snapshots and messages carry no machine-specific path.
    let file = Path::new("examples/homelab/cluster.yaml");
    let text = std::fs::read_to_string(repo().join(file)).expect("homelab topology");
    let mut loaded = topology::parse(&text, file, &Environment::default());
    let mut t = loaded.topology.take().expect("homelab is valid");
    t.patches_dir = repo().join("patches");
    let patches = talosprov_files::load_patches(&t).expect("patch tree");
    let secrets = parse_secrets_yaml(SECRETS).expect("fixture bundle");
    node_configs(&t, &secrets, &patches, &[]).expect("homelab renders")
}

fn node<'a>(configs: &'a [NodeConfig], hostname: &str) -> &'a NodeConfig {
    configs
        .iter()
        .find(|c| c.hostname == hostname)
        .expect("node")
}

const NVIDIA_MODULES: [&str; 4] = [
    "- name: nvidia\n",
    "- name: nvidia_uvm\n",
    "- name: nvidia_drm\n",
    "- name: nvidia_modeset\n",
];

#[test]
fn homelab_configs_match_their_snapshots_with_secrets_redacted() {
    let configs = homelab();
    assert_eq!(configs.len(), 3);
    for c in &configs {
        assert!(c.warnings.is_empty(), "{}: {:?}", c.hostname, c.warnings);
        insta::assert_snapshot!(c.hostname.clone(), c.redacted_yaml);
    }
}

#[test]
fn gpu_node_has_the_nvidia_modules_and_the_nvidia_installer() {
    let configs = homelab();
    let gpu = node(&configs, "talos-gpu-01");
    for m in NVIDIA_MODULES {
        assert!(gpu.redacted_yaml.contains(m), "missing {m}");
    }
    // siderolabs/nvidia-container-toolkit-production, nvidia-open-gpu-kernel-modules-production,
    // qemu-guest-agent, in that order: computed from the schematic as the factory hashes it.
    let nvidia = talosprov_base::schematic::Schematic {
        extensions: vec![
            "siderolabs/nvidia-container-toolkit-production".into(),
            "siderolabs/nvidia-open-gpu-kernel-modules-production".into(),
            "siderolabs/qemu-guest-agent".into(),
        ],
        kernel_args: vec![],
    }
    .id();
    let image = format!("factory.talos.dev/nocloud-installer/{nvidia}:v1.13.8");
    assert_eq!(gpu.installer_image, image);
    assert_eq!(gpu.schematic_id, nvidia.as_str());
    assert!(gpu.redacted_yaml.contains(&format!("image: {image}\n")));
}

#[test]
fn worker_has_neither_nvidia_modules_nor_the_nvidia_installer() {
    let configs = homelab();
    let worker = node(&configs, "talos-worker-01");
    let gpu = node(&configs, "talos-gpu-01");
    for m in NVIDIA_MODULES {
        assert!(!worker.redacted_yaml.contains(m), "unexpected {m}");
    }
    assert!(!worker.redacted_yaml.contains(&gpu.schematic_id));
    // The base schematic: qemu-guest-agent only.
    assert_eq!(
        worker.installer_image,
        "factory.talos.dev/nocloud-installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.13.8"
    );
}

#[test]
fn control_plane_has_the_vip_cni_none_no_proxy_and_both_manifests() {
    let configs = homelab();
    let cp = node(&configs, "talos-controlplane-01");
    assert_eq!(cp.role, Role::Controlplane);
    let y = &cp.redacted_yaml;
    for expected in [
        "            vip:\n                ip: 192.168.1.120\n",
        "              - 192.168.1.121/24\n",
        "            - deviceSelector:\n                physical: true\n              dhcp: false\n",
        "        cni:\n            name: none\n",
        "    proxy:\n        image: registry.k8s.io/kube-proxy:v1.36.2\n        disabled: true\n",
        "kubelet-serving-cert-approver/v0.11.0/deploy/standalone-install.yaml",
        "metrics-server/releases/download/v0.9.0/components.yaml",
        "rotate-server-certificates: \"true\"",
    ] {
        assert!(y.contains(expected), "missing {expected:?} in:\n{y}");
    }
    // The VIP in both certSANs lists.
    assert!(
        y.contains("\n    certSANs:\n        - 192.168.1.120\n"),
        "{y}"
    );
    assert!(y.contains("    apiServer:\n        image: registry.k8s.io/kube-apiserver:v1.36.2\n        certSANs:\n            - 192.168.1.120\n"), "{y}");
}

#[test]
fn secrets_reach_the_applied_config_but_not_the_redacted_one() {
    let configs = homelab();
    let secrets = parse_secrets_yaml(SECRETS).expect("fixture");
    let token = secrets.trustd_token.expose().as_str();
    for c in &configs {
        assert!(c.yaml.expose().contains(token), "{}", c.hostname);
        assert!(!c.redacted_yaml.contains(token), "{}", c.hostname);
        assert!(format!("{c:?}").contains("yaml: (sensitive)"));
        assert!(!format!("{c:?}").contains(token));
        let digest = sha2_hex(c.yaml.expose());
        assert_eq!(c.sha256, digest);
        assert_eq!(c.talos_version, "v1.13.8");
        assert_eq!(c.kubernetes_version, "v1.36.2");
    }
}

fn sha2_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}
