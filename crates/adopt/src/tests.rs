//! Fixture states written from the providers' documented schemas, with a
//! bundle made for the test.

use serde_json::{Value, json};

use super::secrets::{SecretsError, machine_secrets};
use super::tfstate::{Mode, TfState, TfStateError};
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;

fn bundle() -> SecretsBundle {
    use rand::SeedableRng as _;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
    SecretsBundle::generate_for_checks(&mut rng, time::OffsetDateTime::UNIX_EPOCH)
        .expect("a bundle")
}

/// talosctl's layout as the talos provider's `machine_secrets` object.
fn provider_layout(b: &SecretsBundle) -> Value {
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&secrets_yaml(b)).expect("YAML");
    let mut v: Value = serde_json::to_value(yaml).expect("JSON");
    fn rename(v: &mut Value) {
        if let Value::Object(m) = v {
            let old = std::mem::take(m);
            for (k, mut inner) in old {
                rename(&mut inner);
                let k = match k.as_str() {
                    "crt" => "cert".to_owned(),
                    "bootstraptoken" => "bootstrap_token".to_owned(),
                    "secretboxencryptionsecret" => "secretbox_encryption_secret".to_owned(),
                    "aescbcencryptionsecret" => "aescbc_encryption_secret".to_owned(),
                    "k8saggregator" => "k8s_aggregator".to_owned(),
                    "k8sserviceaccount" => "k8s_serviceaccount".to_owned(),
                    _ => k,
                };
                m.insert(k, inner);
            }
        }
    }
    rename(&mut v);
    // The provider stores the unused cipher as null.
    v["secrets"]["aescbc_encryption_secret"] = Value::Null;
    v
}

fn state(resources: Value) -> Vec<u8> {
    serde_json::to_vec_pretty(&json!({
        "version": 4,
        "terraform_version": "1.10.6",
        "serial": 42,
        "lineage": "0b3c9b8e-1d2f-4a9b-8c7d-6e5f4a3b2c1d",
        "outputs": {},
        "resources": resources,
        "check_results": null
    }))
    .expect("JSON")
}

fn secrets_resource(module: Option<&str>, key: Option<Value>, b: &SecretsBundle) -> Value {
    let mut r = json!({
        "mode": "managed",
        "type": "talos_machine_secrets",
        "name": "this",
        "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
        "instances": [{
            "schema_version": 1,
            "attributes": {
                "id": "machine_secrets",
                "talos_version": "v1.13",
                "machine_secrets": provider_layout(b),
                "client_configuration": {"ca_certificate": "", "client_certificate": "", "client_key": ""}
            },
            "sensitive_attributes": []
        }]
    });
    if let Some(m) = module {
        r["module"] = json!(m);
    }
    if let Some(k) = key {
        r["instances"][0]["index_key"] = k;
    }
    r
}

#[test]
fn the_bundle_of_a_state_is_the_providers_bundle() {
    let b = bundle();
    let bytes = state(json!([
        {"mode": "data", "type": "talos_machine_configuration", "name": "cp",
         "module": "module.cluster[\"lab\"]",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [{"schema_version": 0, "attributes": {"cluster_name": "lab"}}]},
        secrets_resource(Some("module.cluster[\"lab\"]"), None, &b),
        {"mode": "managed", "type": "proxmox_virtual_environment_vm", "name": "node",
         "module": "module.cluster[\"lab\"]",
         "provider": "provider[\"registry.opentofu.org/bpg/proxmox\"]",
         "instances": [
            {"index_key": "cp-01", "schema_version": 0, "attributes": {"vm_id": 121}},
            {"index_key": "w-01", "schema_version": 0, "attributes": {"vm_id": 122}}
         ]},
        {"mode": "managed", "type": "proxmox_vm", "name": "legacy",
         "provider": "provider[\"registry.terraform.io/telmate/proxmox\"]",
         "instances": [{"index_key": 0, "schema_version": 0, "attributes": {}}]}
    ]));
    let s = TfState::parse(&bytes, "terraform.tfstate").expect("parsed");
    assert_eq!(s.serial, 42);
    let addresses: Vec<&str> = s.instances.iter().map(|i| i.address.as_str()).collect();
    assert_eq!(
        addresses,
        [
            "module.cluster[\"lab\"].data.talos_machine_configuration.cp",
            "module.cluster[\"lab\"].talos_machine_secrets.this",
            "module.cluster[\"lab\"].proxmox_virtual_environment_vm.node[\"cp-01\"]",
            "module.cluster[\"lab\"].proxmox_virtual_environment_vm.node[\"w-01\"]",
            "proxmox_vm.legacy[0]",
        ]
    );
    assert_eq!(s.instances[0].mode, Mode::Data);
    assert_eq!(s.instances[2].provider_name(), "bpg/proxmox");
    assert_eq!(s.instances[3].attribute("vm_id"), Some(&json!(122)));
    assert_eq!(s.data("talos_machine_configuration").count(), 1);

    let got = machine_secrets(&s, None).expect("the bundle");
    assert_eq!(
        got.address,
        "module.cluster[\"lab\"].talos_machine_secrets.this"
    );
    assert_eq!(got.bundle.certs.os.crt, b.certs.os.crt);
    assert_eq!(got.bundle.certs.k8s.crt, b.certs.k8s.crt);
    assert_eq!(
        got.bundle.certs.etcd.key.expose(),
        b.certs.etcd.key.expose()
    );
    assert_eq!(got.bundle.cluster.id, b.cluster.id);
    assert_eq!(
        got.bundle.bootstrap_token.expose(),
        b.bootstrap_token.expose()
    );
    assert_eq!(
        secrets_yaml(&got.bundle),
        secrets_yaml(&b),
        "the whole bundle"
    );
}

#[test]
fn schema_version_0_holds_talosctls_yaml() {
    let b = bundle();
    let mut r = secrets_resource(None, Some(json!(0)), &b);
    r["instances"][0]["schema_version"] = json!(0);
    r["instances"][0]["attributes"]["machine_secrets"] = json!(secrets_yaml(&b));
    let s = TfState::parse(&state(json!([r])), "old.tfstate").expect("parsed");
    let got = machine_secrets(&s, None).expect("the bundle");
    assert_eq!(got.address, "talos_machine_secrets.this[0]");
    assert_eq!(secrets_yaml(&got.bundle), secrets_yaml(&b));
}

#[test]
fn several_bundles_need_an_address_and_a_wrong_one_is_named() {
    let (a, b) = (bundle(), bundle());
    let s = TfState::parse(
        &state(json!([
            secrets_resource(Some("module.c[\"a\"]"), None, &a),
            secrets_resource(Some("module.c[\"b\"]"), None, &b),
        ])),
        "s.tfstate",
    )
    .expect("parsed");
    let err = machine_secrets(&s, None).expect_err("ambiguous");
    assert!(matches!(err, SecretsError::Ambiguous { .. }), "{err}");
    assert!(
        err.to_string().contains(
            "2 talos_machine_secrets instances (module.c[\"a\"].talos_machine_secrets.this, \
             module.c[\"b\"].talos_machine_secrets.this)"
        ),
        "{err}"
    );
    let got =
        machine_secrets(&s, Some("module.c[\"b\"].talos_machine_secrets.this")).expect("chosen");
    assert_eq!(got.bundle.certs.os.crt, b.certs.os.crt);
    let err = machine_secrets(&s, Some("talos_machine_secrets.this")).expect_err("absent");
    assert!(matches!(err, SecretsError::NotFound { .. }), "{err}");
}

#[test]
fn a_bundle_missing_fields_names_each_with_the_states_keys_and_no_value() {
    let b = bundle();
    let mut r = secrets_resource(None, None, &b);
    let ms = &mut r["instances"][0]["attributes"]["machine_secrets"];
    ms["certs"]["k8s_aggregator"]
        .as_object_mut()
        .expect("object")
        .remove("key");
    ms["secrets"]["bootstrap_token"] = Value::Null;
    let s = TfState::parse(&state(json!([r])), "s.tfstate").expect("parsed");
    let err = machine_secrets(&s, None).expect_err("invalid").to_string();
    assert!(
        err.contains("talos_machine_secrets.this.machine_secrets is not a usable bundle"),
        "{err}"
    );
    assert!(
        err.contains("machine_secrets.secrets.bootstrap_token is required"),
        "{err}"
    );
    assert!(
        err.contains("machine_secrets.certs.k8s_aggregator"),
        "{err}"
    );
    assert!(!err.contains(b.cluster.secret.expose()), "no secret: {err}");
    assert!(!err.contains("BEGIN"), "no PEM: {err}");
}

#[test]
fn a_state_without_secrets_is_refused_saying_what_to_give() {
    let s = TfState::parse(&state(json!([])), "s.tfstate").expect("parsed");
    let err = machine_secrets(&s, None).expect_err("missing").to_string();
    assert!(
        err.starts_with("s.tfstate: the state holds no talos_machine_secrets"),
        "{err}"
    );
    assert!(err.contains("--secrets secrets.yaml"), "{err}");
}

#[test]
fn bad_state_files_are_refused_with_their_place() {
    let full = state(json!([secrets_resource(None, None, &bundle())]));
    let cut = &full[..full.len() / 2];
    match TfState::parse(cut, "cut.tfstate") {
        Err(TfStateError::Syntax {
            file,
            line,
            message,
            ..
        }) => {
            assert_eq!(file, "cut.tfstate");
            assert!(line > 1, "{line}");
            assert!(message.contains("truncated"), "{message}");
            assert!(!message.contains("BEGIN"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let v3 = br#"{"version": 3, "terraform_version": "0.11.14", "serial": 3, "modules": []}"#;
    let err = TfState::parse(v3, "old.tfstate").expect_err("v3");
    assert!(matches!(err, TfStateError::Version { .. }));
    assert!(
        err.to_string()
            .contains("state format version 3 is not read"),
        "{err}"
    );
    assert!(err.to_string().contains("before 0.12"), "{err}");
    let encrypted = br#"{"serial": 1, "lineage": "x", "meta": {"key_provider.pbkdf2.main": "e30="}, "encrypted_data": "AAAA", "encryption_version": "v0"}"#;
    let err = TfState::parse(encrypted, "enc.tfstate").expect_err("encrypted");
    assert!(matches!(err, TfStateError::Encrypted { .. }), "{err}");
    assert!(err.to_string().contains("tofu state pull"), "{err}");
    let err = TfState::parse(b"[1, 2]", "a.tfstate").expect_err("not an object");
    assert!(matches!(err, TfStateError::Shape { .. }), "{err}");
    let bad_key = state(json!([{
        "mode": "managed", "type": "t", "name": "n", "provider": "p",
        "instances": [{"index_key": [1], "attributes": {}}]
    }]));
    let err = TfState::parse(&bad_key, "k.tfstate")
        .expect_err("bad key")
        .to_string();
    assert!(err.contains("resources[0].instances[0].index_key"), "{err}");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(
        TfState::parse(deep.as_bytes(), "deep.tfstate").is_err(),
        "bounded"
    );
}

fn apply_instance(key: &str, node: &str, patches: &[&str], schema: u64, attrs: Value) -> Value {
    let mut a = json!({
        "id": format!("machine_configuration_apply_{node}"),
        "node": node,
        "endpoint": node,
        "apply_mode": "auto",
        "config_patches": patches,
    });
    for (k, v) in attrs.as_object().expect("object") {
        a[k] = v.clone();
    }
    json!({"index_key": key, "schema_version": schema, "attributes": a})
}

#[test]
fn the_talos_side_reads_facts_configs_and_bootstrap_in_each_provider_form() {
    let bytes = state(json!([
        {"mode": "data", "type": "talos_machine_configuration", "name": "cp",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [{"schema_version": 0, "attributes": {
            "cluster_name": "lab", "cluster_endpoint": "https://10.0.0.120:6443",
            "machine_type": "controlplane", "talos_version": "v1.13.8",
            "kubernetes_version": "1.36.2"}}]},
        {"mode": "data", "type": "talos_machine_configuration", "name": "worker",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [{"schema_version": 0, "attributes": {
            "cluster_name": "lab2", "cluster_endpoint": "https://10.0.0.120:6443",
            "machine_type": "worker", "talos_version": "v1.13.8"}}]},
        {"mode": "managed", "type": "talos_machine_configuration_apply", "name": "node",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [
            apply_instance("cp-01", "10.0.0.121", &["a: 1\n"], 1, json!({
                "machine_configuration_input": "version: v1alpha1\n",
                "machine_configuration": "version: v1alpha1\na: 1\n",
                "machine_configuration_hash": "ab12"})),
            apply_instance("w-01", "10.0.0.122", &[], 1, json!({
                "machine_configuration_input": null,
                "machine_configuration": null,
                "machine_configuration_hash": "cd34"})),
            apply_instance("w-02", "10.0.0.123", &["b: 2\n"], 0, json!({
                "machine_configuration": "version: v1alpha1\n"})),
            apply_instance("w-03", "10.0.0.124", &[], 1, json!({})),
         ]},
        {"mode": "managed", "type": "talos_machine_bootstrap", "name": "this",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [{"schema_version": 0, "attributes": {"node": "10.0.0.121"}}]},
        {"mode": "managed", "type": "talos_cluster_kubeconfig", "name": "this",
         "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
         "instances": [{"schema_version": 0, "attributes": {"kubeconfig_raw": "apiVersion: v1\n"}}]}
    ]));
    let s = TfState::parse(&bytes, "s.tfstate").expect("parsed");
    let t = super::talos::talos_side(&s);
    assert_eq!(t.facts.name.as_deref(), Some("lab"));
    assert_eq!(t.facts.kubernetes_version.as_deref(), Some("1.36.2"));
    assert_eq!(
        t.facts.conflicts,
        [(
            "cluster_name".to_owned(),
            "data.talos_machine_configuration.worker".to_owned(),
            "lab2".to_owned()
        )]
    );
    assert!(t.bootstrapped);
    assert_eq!(
        t.kubeconfig.as_ref().map(|k| k.expose().as_str()),
        Some("apiVersion: v1\n")
    );
    use super::talos::NodeConfig;
    let configs: Vec<&NodeConfig> = t.applied.iter().map(|a| &a.config).collect();
    assert!(matches!(configs[0], NodeConfig::Rendered(c) if c.expose().contains("a: 1")));
    assert_eq!(
        configs[1],
        &NodeConfig::Hash("cd34".into()),
        "write-only input"
    );
    assert!(matches!(configs[2], NodeConfig::Input(_)), "schema 0");
    assert_eq!(configs[3], &NodeConfig::Unknown);
    assert_eq!(
        t.applied[0].address,
        "talos_machine_configuration_apply.node[\"cp-01\"]"
    );
    assert_eq!(t.applied[0].endpoint, None, "the node itself");
    assert_eq!(t.applied[2].config_patches.len(), 1);
}

fn patches(list: &[&str]) -> Vec<talosprov_base::sensitive::Sensitive<String>> {
    list.iter()
        .map(|p| talosprov_base::sensitive::Sensitive::new((*p).to_owned()))
        .collect()
}

#[test]
fn patches_are_factored_without_changing_any_nodes_order() {
    use super::patches::{NodePatches, factor};
    use talosprov_base::role::Role;
    let node = |h: &str, role, list: &[&str]| NodePatches {
        hostname: h.into(),
        role,
        patches: patches(list),
    };
    let nodes = [
        node(
            "cp-01",
            Role::Controlplane,
            &["common", "cp", "host: cp-01"],
        ),
        node(
            "cp-02",
            Role::Controlplane,
            &["common\n", "cp", "host: cp-02"],
        ),
        node("w-01", Role::Worker, &["common", "w", "host: w-01"]),
        node("w-02", Role::Worker, &["common", "w"]),
        // Shares `w` but not first: it stays the node's own, in its place.
        node("gpu-01", Role::Worker, &["common", "nvidia", "w"]),
    ];
    let tree = factor(&nodes);
    let texts = |l: &[talosprov_base::sensitive::Sensitive<String>]| -> Vec<String> {
        l.iter().map(|p| p.expose().trim().to_owned()).collect()
    };
    assert_eq!(texts(&tree.common), ["common"]);
    assert_eq!(texts(&tree.roles[&Role::Controlplane]), ["cp"]);
    assert!(
        !tree.roles.contains_key(&Role::Worker),
        "gpu-01 starts otherwise"
    );
    assert_eq!(texts(&tree.nodes["cp-01"]), ["host: cp-01"]);
    assert_eq!(texts(&tree.nodes["gpu-01"]), ["nvidia", "w"]);
    for n in &nodes {
        let merged: Vec<String> = tree
            .merged_for(&n.hostname, n.role)
            .iter()
            .map(|p| p.expose().trim().to_owned())
            .collect();
        assert_eq!(merged, texts(&n.patches), "{}", n.hostname);
    }
    // One node: nothing is shared, everything stays its own.
    let lone = factor(&nodes[..1]);
    assert!(lone.common.is_empty() && lone.roles.is_empty());
    assert_eq!(texts(&lone.nodes["cp-01"]), ["common", "cp", "host: cp-01"]);
    // Without gpu-01, the workers share `w`.
    let tree = factor(&nodes[..4]);
    assert_eq!(texts(&tree.roles[&Role::Worker]), ["w"]);
    assert!(!tree.nodes.contains_key("w-02"), "nothing of its own");
}

fn bpg_vm(prefix: &str, key: Value, vmid: u32, name: &str, ip: &str) -> Value {
    json!({
        "mode": "managed", "type": format!("{prefix}vm"), "name": "node",
        "module": "module.talos",
        "provider": "provider[\"registry.opentofu.org/bpg/proxmox\"]",
        "instances": [{"index_key": key, "schema_version": 0, "attributes": {
            "vm_id": vmid, "node_name": "pve1", "name": name, "tags": ["talos"],
            "pool_id": "TALOS",
            "cpu": [{"cores": 4, "type": "host"}],
            "memory": [{"dedicated": 8192, "floating": 0}],
            "disk": [{"interface": "scsi0", "datastore_id": "local-lvm", "size": 100,
                      "file_id": "local:iso/talos-v1.13.8-nocloud-amd64.img"},
                     {"interface": "scsi1", "datastore_id": "local-lvm", "size": 20}],
            "efi_disk": [{"datastore_id": "local-lvm", "type": "4m"}],
            "hostpci": [{"device": "hostpci0", "mapping": "gpu", "pcie": true, "rombar": true}],
            "network_device": [{"bridge": "vmbr0", "vlan_id": 30, "mac_address": "BC:24:11:00:00:01", "mtu": 0},
                               {"bridge": "vmbr1", "vlan_id": 0}],
            "initialization": [{"datastore_id": "local-lvm",
                "ip_config": [{"ipv4": [{"address": format!("{ip}/24"), "gateway": "10.0.0.1"}]}],
                "dns": [{"servers": ["10.0.0.1"]}]}]
        }}]
    })
}

#[test]
fn the_proxmox_side_reads_vms_images_and_mappings_under_both_prefixes() {
    let schematic = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    let bytes = state(json!([
        bpg_vm("proxmox_virtual_environment_", json!("cp-01"), 121, "talos-cp-01", "10.0.0.121"),
        bpg_vm("proxmox_", json!(0), 122, "talos-w-01", "10.0.0.122"),
        {"mode": "managed", "type": "proxmox_download_file", "name": "talos",
         "provider": "provider[\"registry.opentofu.org/bpg/proxmox\"]",
         "instances": [{"schema_version": 0, "attributes": {
            "url": format!("https://factory.talos.dev/image/{schematic}/v1.13.8/nocloud-amd64.raw.gz"),
            "node_name": "pve1", "datastore_id": "local", "file_name": "talos.img"}}]},
        {"mode": "managed", "type": "proxmox_virtual_environment_hardware_mapping_pci", "name": "gpu",
         "provider": "provider[\"registry.opentofu.org/bpg/proxmox\"]",
         "instances": [{"schema_version": 0, "attributes": {
            "name": "gpu", "comment": "RTX",
            "map": [{"node": "pve1", "path": "0000:01:00.0", "id": "10de:2507",
                     "subsystem_id": "10de:2507", "iommu_group": 10}]}}]},
        {"mode": "managed", "type": "proxmox_virtual_environment_file", "name": "snippet",
         "provider": "provider[\"registry.opentofu.org/bpg/proxmox\"]",
         "instances": [{"schema_version": 0, "attributes": {}}]}
    ]));
    let s = TfState::parse(&bytes, "s.tfstate").expect("parsed");
    let px = super::proxmox::proxmox_side(&s);
    assert_eq!(px.vms.len(), 1, "proxmox_vm is another schema");
    let vm = &px.vms[0];
    assert_eq!(
        vm.address,
        "module.talos.proxmox_virtual_environment_vm.node[\"cp-01\"]"
    );
    assert_eq!(
        (vm.vmid, vm.cores, vm.memory_mib),
        (Some(121), Some(4), Some(8192))
    );
    assert_eq!(vm.disks[0].size_gib, Some(100));
    assert_eq!(vm.disks[1].interface, "scsi1");
    assert!(vm.efi_disk);
    assert_eq!(vm.hostpci[0].mapping.as_deref(), Some("gpu"));
    assert_eq!(vm.nics[0].vlan, Some(30));
    assert_eq!(vm.nics[0].mtu, None, "0 is unset");
    assert_eq!(vm.nics[1].vlan, None, "0 is untagged");
    assert_eq!(vm.addresses, ["10.0.0.121/24"]);
    assert_eq!(vm.gateway.as_deref(), Some("10.0.0.1"));
    assert_eq!(vm.nameservers, ["10.0.0.1"]);
    assert_eq!(px.images[0].schematic.as_deref(), Some(schematic));
    assert_eq!(px.images[0].talos_version.as_deref(), Some("v1.13.8"));
    assert_eq!(px.mappings[0].map[0].iommu_group, Some(10));
    let left: Vec<&str> = px.left_out.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        left,
        [
            "module.talos.proxmox_vm.node[0]",
            "proxmox_virtual_environment_file.snippet"
        ]
    );
    // Matched by IP, then by name; nothing for an unknown node.
    assert_eq!(
        px.vm_of("10.0.0.121", None).map(|v| v.vmid),
        Some(Some(121))
    );
    assert_eq!(
        px.vm_of("cp.lan", Some("talos-cp-01")).map(|v| v.vmid),
        Some(Some(121))
    );
    assert!(px.vm_of("10.0.0.99", None).is_none());
}
