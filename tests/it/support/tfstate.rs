//! An OpenTofu state of a three-node cluster as the bpg/proxmox and
//! siderolabs/talos providers record it, each node with N config patches,
//! made without any running cluster (the state holds each node's running
//! config, so adopting it asks no node): for `adopt`'s tests and its
//! benchmark (`examples/bench_adopt.rs` includes this file).

use serde_json::{Value, json};
use talosprov_base::role::Role;
use talosprov_machine::config::{base_config, machine_config_yaml};
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::rotation::AcceptedCas;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::load_patch;

/// The flags `adopt` needs beside the state for these clusters: the Proxmox
/// endpoint and host the state does not name (nothing is asked of them).
pub const ADOPT_SETTINGS: [&str; 4] = [
    "--proxmox-endpoint",
    "https://127.0.0.1:8006",
    "--proxmox-node",
    "pve1",
];

/// `talosctl gen config`'s config for `role` of `cluster` at `endpoint`, as
/// the talos provider's data source makes it: its default installer and disk.
pub fn provider_input(
    secrets: &SecretsBundle,
    role: Role,
    cluster: &str,
    endpoint: &str,
) -> MachineConfig {
    let none = AcceptedCas::default();
    let input = base_config(&BaseConfigInput {
        cluster_name: cluster.into(),
        endpoint: endpoint.into(),
        kubernetes_version: Some("1.36.2".into()),
        talos_version: "v1.13.8".parse().expect("version"),
        role,
        secrets,
        install_disk: Some("/dev/sda".into()),
        install_image: Some("ghcr.io/siderolabs/installer:v1.13.8".into()),
        additional_sans: Vec::new(),
        hostname_config: true,
        accepted_cas: &none,
    })
    .expect("base config");
    MachineConfig {
        documents: input.documents,
    }
}

/// The nodes of the state: `(hostname, IP, role)`.
pub const NODES: [(&str, &str, Role); 3] = [
    ("talos-cp-01", "10.20.0.121", Role::Controlplane),
    ("talos-wk-01", "10.20.0.122", Role::Worker),
    ("talos-wk-02", "10.20.0.123", Role::Worker),
];

/// The `n`-th config patch: one node label.
fn label_patch(n: usize) -> String {
    format!("machine:\n  nodeLabels:\n    bench.example/label-{n}: \"v{n}\"\n")
}

/// `talosctl gen config`'s config for `role`, as the talos provider's data
/// source makes it, and the same with `patches` applied (what the node runs).
fn configs(secrets: &SecretsBundle, role: Role, patches: usize) -> (String, String) {
    let input = provider_input(secrets, role, "bench", "https://10.20.0.120:6443");
    // One patch with every label merges as the N patches do, in linear time.
    let all: String = std::iter::once("machine:\n  nodeLabels:\n".to_owned())
        .chain((0..patches).map(|n| format!("    bench.example/label-{n}: \"v{n}\"\n")))
        .collect();
    let patch = load_patch("all", &all).expect("patch");
    let running = apply_patches(&input, &[patch]).expect("applies");
    (
        machine_config_yaml(&input.documents),
        machine_config_yaml(&running.documents),
    )
}

fn resource(kind: &str, name: &str, provider: &str, instances: Vec<Value>) -> Value {
    json!({
        "mode": if kind == "talos_machine_configuration" { "data" } else { "managed" },
        "type": kind, "name": name,
        "provider": format!("provider[\"registry.opentofu.org/{provider}\"]"),
        "instances": instances,
    })
}

/// A bpg VM's state attributes for `host` at `ip` (vmid: the last octet).
fn vm(host: &str, ip: &str) -> Value {
    let vmid: u64 = ip.rsplit('.').next().expect("octet").parse().expect("vmid");
    json!({"index_key": host, "schema_version": 0, "attributes": {
        "vm_id": vmid, "node_name": "pve1", "name": host, "tags": ["talos"],
        "machine": "q35", "bios": "ovmf",
        "cpu": [{"cores": 2, "type": "host"}], "memory": [{"dedicated": 4096}],
        "disk": [{"interface": "scsi0", "datastore_id": "local-lvm", "size": 20,
                  "file_id": "local:import/talos.qcow2"}],
        "efi_disk": [{"datastore_id": "local-lvm", "type": "4m"}],
        "network_device": [{"bridge": "vmbr0", "model": "virtio",
                            "mac_address": format!("BC:24:11:00:00:{vmid:02X}")}],
        "agent": [{"enabled": true}],
        "initialization": [{"ip_config": [{"ipv4": [{"address": format!("{ip}/24"),
                                                      "gateway": "10.20.0.1"}]}]}],
    }})
}

/// The state, each node with `patches` config patches (a node label each).
pub fn provider_state(secrets_yaml: &str, patches: usize) -> Value {
    let secrets = parse_secrets_yaml(secrets_yaml).expect("bundle");
    let machine_secrets: Value = serde_json::to_value(
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(secrets_yaml).expect("YAML"),
    )
    .expect("JSON");
    let list: Vec<String> = (0..patches).map(label_patch).collect();
    let mut data = Vec::new();
    let mut applies = Vec::new();
    let mut vms = Vec::new();
    for (host, ip, role) in NODES {
        let (input, running) = configs(&secrets, role, patches);
        data.push(
            json!({"index_key": host, "schema_version": 0, "attributes": {
                "cluster_name": "bench", "cluster_endpoint": "https://10.20.0.120:6443",
                "machine_type": role.as_str(), "talos_version": "v1.13",
                "kubernetes_version": "1.36.2", "machine_configuration": input,
            }}),
        );
        applies.push(
            json!({"index_key": host, "schema_version": 1, "attributes": {
                "node": ip, "endpoint": ip, "apply_mode": "auto", "config_patches": list,
                "machine_configuration_input": input, "machine_configuration": running,
            }}),
        );
        vms.push(vm(host, ip));
    }
    json!({
        "version": 4, "terraform_version": "1.10.6", "serial": 1,
        "lineage": "3f1d2c4b-5a6e-4f70-8a9b-0c1d2e3f4a5b", "outputs": {},
        "resources": [
            resource("talos_machine_secrets", "this", "siderolabs/talos", vec![json!({
                "schema_version": 1, "attributes": {"machine_secrets": machine_secrets}})]),
            resource("talos_machine_configuration", "node", "siderolabs/talos", data),
            resource("proxmox_virtual_environment_download_file", "talos", "bpg/proxmox", vec![json!({
                "schema_version": 0, "attributes": {"node_name": "pve1", "datastore_id": "local",
                "content_type": "import", "file_name": "talos.qcow2",
                "url": "https://factory.talos.dev/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.13.8/nocloud-amd64.qcow2"}})]),
            resource("proxmox_virtual_environment_vm", "node", "bpg/proxmox", vms),
            resource("talos_machine_configuration_apply", "node", "siderolabs/talos", applies),
            resource("talos_machine_bootstrap", "this", "siderolabs/talos", vec![json!({
                "schema_version": 0, "attributes": {"node": NODES[0].1}})]),
        ],
    })
}
