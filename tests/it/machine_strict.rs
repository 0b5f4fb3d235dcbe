//! Machine configs are decoded as strictly as Talos decodes them (unknown keys and kinds,
//! values of the wrong type, per config contract), every failing patch is reported, each
//! problem points at the patch line that wrote it, and no patch can take a node's link over
//! without the node's address. Configs Talos accepts (every golden config here) still pass.

use crate::support::cli::{run_clean, stderr};
use crate::support::fixtures::{SECRETS, SECRETS_FILE, repo};
use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};
use talosprov_base::diagnostics::{Code, Diagnostic, Severity};
use talosprov_base::role::Role;
use talosprov_base::version::{Contract, contract_for};
use talosprov_machine::config::base_config;
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::decode::decode_config;
use talosprov_machine::node::{NodeConfig, node_configs};
use talosprov_machine::secrets_file::parse_secrets_yaml;

/// A cluster of one control plane (10.0.0.101) and one worker (10.0.0.102) on Talos
/// `talos`, with the given patch files, written into `dir`; returns the topology file.
fn cluster(dir: &Path, talos: &str, patches: &[(&str, &str)]) -> PathBuf {
    let file = dir.join("cluster.yaml");
    let topology = format!(
        "cluster:\n  name: lab\n  talos_version: {talos}\n  gateway: 10.0.0.1\n  vip: 10.0.0.10\n\
         proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\n\
         nodes:\n  - {{hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}}\n  \
         - {{hostname: worker-01, ip: 10.0.0.102, role: worker, cores: 2, memory: 2048}}\n"
    );
    std::fs::write(&file, topology).unwrap();
    for (path, text) in patches {
        let path = dir.join("patches").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    file
}

fn configs(file: &Path) -> Result<Vec<NodeConfig>, Vec<Diagnostic>> {
    let loaded = talosprov_files::load_topology(file).unwrap();
    let t = loaded.topology.expect("valid topology");
    let patches = talosprov_files::load_patches(&t).unwrap();
    node_configs(&t, &parse_secrets_yaml(SECRETS).unwrap(), &patches, &[])
}

fn errors(file: &Path) -> Vec<Diagnostic> {
    configs(file).expect_err("the configs are refused")
}

/// `code` diagnostics, as `file:line node field: message` (file relative to `dir`).
fn found(diagnostics: &[Diagnostic], code: Code, dir: &Path) -> Vec<String> {
    diagnostics
        .iter()
        .filter(|d| d.code == code)
        .map(|d| {
            let file = d
                .file
                .strip_prefix(dir)
                .unwrap_or(&d.file)
                .display()
                .to_string();
            let line = d.pos.map_or(0, |p| p.line);
            let node = d.node.as_deref().unwrap_or("-");
            let field = d.field.as_deref().unwrap_or("-");
            format!("{file}:{line} {node} {field}: {}", d.message)
        })
        .collect()
}

#[test]
fn generated_configs_decode_strictly_for_every_contract_and_role() {
    let secrets = parse_secrets_yaml(SECRETS).unwrap();
    for talos in ["v1.12.6", "v1.13.9"] {
        for role in [Role::Controlplane, Role::Worker] {
            let input = BaseConfigInput {
                cluster_name: "lab".into(),
                endpoint: "https://10.0.0.10:6443".into(),
                kubernetes_version: None,
                talos_version: talos.parse().unwrap(),
                role,
                secrets: &secrets,
                install_disk: Some("/dev/sda".into()),
                install_image: None,
                additional_sans: vec!["10.0.0.10".into()],
                hostname_config: true,
                accepted_cas: &talosprov_machine::rotation::NO_ACCEPTED_CAS,
            };
            let config = base_config(&input).unwrap();
            let contract = contract_for(&input.talos_version).contract;
            assert_eq!(
                decode_config(&config.documents, contract),
                vec![],
                "{talos} {role}"
            );
        }
    }
}

/// The machine configs among the snapshot files: the body after insta's header, when its
/// first document is a v1alpha1 document.
fn golden_configs() -> Vec<(PathBuf, Vec<Value>)> {
    let root = repo();
    let mut out = Vec::new();
    for dir in ["tests/it/snapshots", "crates/patch/src/snapshots"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let Some(body) = text.splitn(3, "---\n").nth(2) else {
                continue;
            };
            let docs: Result<Vec<Value>, _> = serde_yaml_ng::Deserializer::from_str(body)
                .map(serde::Deserialize::deserialize)
                .collect();
            let Ok(docs) = docs else { continue };
            if docs.first().and_then(|d| d.get("machine")).is_some() {
                out.push((path, docs.into_iter().filter(|d| !d.is_null()).collect()));
            }
        }
    }
    out
}

#[test]
fn every_golden_config_decodes_strictly() {
    let golden = golden_configs();
    assert!(golden.len() >= 4, "{golden:?}");
    for (path, docs) in golden {
        assert_eq!(
            decode_config(&docs, Contract::V1_13),
            vec![],
            "{}",
            path.display()
        );
    }
}

#[test]
fn every_reference_node_config_passes_every_check() {
    // The reference cluster on both contracts: its VIP template keeps each address.
    for talos in ["v1.12.6", "v1.13.8"] {
        let dir = tempfile::tempdir().unwrap();
        let root = repo().join("patches");
        let reference = [
            "common/40-kubelet.yaml",
            "controlplane/10-network-vip.yaml.tftpl",
            "controlplane/20-cluster-cni-proxy.yaml",
            "controlplane/30-extra-manifests.yaml",
        ]
        .map(|p| (p, std::fs::read_to_string(root.join(p)).unwrap()));
        let patches: Vec<(&str, &str)> = reference.iter().map(|(p, t)| (*p, t.as_str())).collect();
        let file = cluster(dir.path(), talos, &patches);
        let configs = configs(&file).unwrap_or_else(|d| panic!("{talos}: {d:#?}"));
        for c in configs {
            assert_eq!(c.warnings, vec![], "{talos} {}", c.hostname);
        }
    }
}

#[test]
fn unknown_keys_and_kinds_name_the_patch_line_node_and_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[
            (
                "common/10-labels.yaml",
                "machine:\n  nodeLabels:\n    rack: r1\n  foo: bar\n",
            ),
            (
                "controlplane/10-vip.yaml",
                "machine:\n  network:\n    vip:\n      ip: 10.0.0.10\n",
            ),
            (
                "nodes/worker-01/10-link.yaml",
                "machine:\n  install:\n    wipe: false\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtuu: 9000\n",
            ),
        ],
    );
    let d = errors(&file);
    assert_eq!(
        found(&d, Code::UnknownConfigKey, dir.path()),
        [
            "patches/common/10-labels.yaml:4 cp-01 machine.foo: Talos refuses this config: unknown key `foo` in `machine` (Talos: unknown keys found during decoding) (also on 1 other node)",
            "patches/controlplane/10-vip.yaml:3 cp-01 machine.network.vip: Talos refuses this config: unknown key `vip` in `machine.network` (Talos: unknown keys found during decoding); did you mean `machine.network.interfaces[].vip`?",
            "patches/nodes/worker-01/10-link.yaml:8 worker-01 LinkConfig.mtuu: Talos refuses this config: unknown key `mtuu` in the LinkConfig eth0 document (Talos: unknown keys found during decoding); did you mean `mtu`?",
        ]
    );
}

#[test]
fn values_of_the_wrong_type_are_refused_and_not_checked_further() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[(
            "common/10-bad.yaml",
            "machine:\n  kubelet:\n    extraArgs: [a, b]\n  network:\n    interfaces: {}\n  install:\n    disk: 42\n  features:\n    hostDNS:\n      enabled: \"true\"\n      forwardKubeDNSToHost: true\n",
        )],
    );
    let d = errors(&file);
    let wrong = found(&d, Code::ConfigWrongType, dir.path());
    assert_eq!(wrong.len(), 3, "{wrong:#?}");
    assert!(
        wrong[0].contains(
            "`machine.kubelet.extraArgs` must be a mapping of strings or string lists, not a list"
        ),
        "{}",
        wrong[0]
    );
    assert!(
        wrong[1].contains("`machine.network.interfaces` must be a list of mappings, not a mapping"),
        "{}",
        wrong[1]
    );
    assert!(
        wrong[2].contains(
            "`machine.features.hostDNS.enabled` must be true or false, not the string \"true\""
        ),
        "{}",
        wrong[2]
    );
    // Go reads 42 into the string field as "42", which is no install disk.
    let rejected = found(&d, Code::ConfigRejected, dir.path());
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    assert!(
        rejected[0].contains("install disk \"42\" is not a device path"),
        "{}",
        rejected[0]
    );
    // hostDNS.enabled did not decode, so Talos's hostDNS check on it is not run.
    assert!(
        !d.iter()
            .any(|d| d.message.contains("requires hostDNS.enabled")),
        "{d:#?}"
    );
}

#[test]
fn the_cluster_contract_decides_which_fields_exist() {
    let patches = [
        (
            "controlplane/10-flannel.yaml",
            "cluster:\n  network:\n    cni:\n      name: flannel\n      flannel:\n        kubeNetworkPoliciesEnabled: true\n",
        ),
        (
            "common/20-args.yaml",
            "machine:\n  kubelet:\n    extraArgs:\n      feature-gates: [A=true, B=true]\n",
        ),
        (
            "worker/30-kubespan.yaml",
            "apiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    assert!(configs(&cluster(dir.path(), "v1.13.8", &patches)).is_ok());

    let dir = tempfile::tempdir().unwrap();
    let d = errors(&cluster(dir.path(), "v1.12.6", &patches));
    let unknown = found(&d, Code::UnknownConfigKey, dir.path());
    assert_eq!(unknown.len(), 2, "{unknown:#?}");
    assert!(unknown[0].starts_with("patches/controlplane/10-flannel.yaml:6 cp-01 cluster.network.cni.flannel.kubeNetworkPoliciesEnabled:"), "{}", unknown[0]);
    assert!(unknown[0].ends_with("`kubeNetworkPoliciesEnabled` is in the v1.13 contract, and this cluster's Talos version uses v1.12"), "{}", unknown[0]);
    assert!(
        unknown[1].contains("`KubeSpanConfig` documents are in the v1.13 contract"),
        "{}",
        unknown[1]
    );
    let wrong = found(&d, Code::ConfigWrongType, dir.path());
    assert_eq!(wrong.len(), 1, "{wrong:#?}");
    assert!(
        wrong[0].contains("`machine.kubelet.extraArgs.feature-gates` must be a string, not a list"),
        "{}",
        wrong[0]
    );
}

#[test]
fn every_failing_patch_of_a_node_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[
            (
                "worker/10-hostname.yaml",
                "- op: replace\n  path: /machine/network/hostname\n  value: w\n",
            ),
            (
                "worker/20-labels.yaml",
                "[{\"op\": \"add\", \"path\": \"/machine/nodeLabels\", \"value\": {}}]\n",
            ),
            ("worker/30-install.yaml", "machine:\n  install: /dev/vda\n"),
            ("worker/40-typo.yaml", "machine:\n  kubelett: {}\n"),
        ],
    );
    let d = errors(&file);
    let conflicts = found(&d, Code::PatchConflict, dir.path());
    let files: Vec<&str> = conflicts
        .iter()
        .map(|c| c.split(':').next().unwrap())
        .collect();
    assert_eq!(
        files,
        [
            "patches/worker/10-hostname.yaml",
            "patches/worker/20-labels.yaml",
            "patches/worker/30-install.yaml"
        ],
        "{conflicts:#?}"
    );
    // The patches that did apply are still decoded.
    let unknown = found(&d, Code::UnknownConfigKey, dir.path());
    assert_eq!(unknown.len(), 1, "{unknown:#?}");
    assert!(
        unknown[0].starts_with("patches/worker/40-typo.yaml:2 worker-01 machine.kubelett:"),
        "{}",
        unknown[0]
    );
}

#[test]
fn a_problem_in_a_later_list_item_points_at_the_patch_that_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let entry = "machine:\n  network:\n    interfaces:\n      # the node's link\n      - interface: eth0\n        addresses: [${node_ip}/24]\n        routes:\n          - network: 0.0.0.0/0\n            gateway: ${gateway}\n        vip:\n          ipp: ${vip}\n";
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[
            (
                "controlplane/10-dummy.yaml",
                "machine:\n  network:\n    interfaces:\n      - interface: dummy0\n        dummy: true\n",
            ),
            ("controlplane/20-vip.yaml.tftpl", entry),
        ],
    );
    let d = errors(&file);
    assert_eq!(
        found(&d, Code::UnknownConfigKey, dir.path()),
        [
            "patches/controlplane/20-vip.yaml.tftpl:11 cp-01 machine.network.interfaces[1].vip.ipp: Talos refuses this config: unknown key `ipp` in `machine.network.interfaces[1].vip` (Talos: unknown keys found during decoding); did you mean `machine.network.interfaces[].vip.ip`?"
        ]
    );
}

#[test]
fn a_vip_entry_without_the_node_address_fails_naming_the_patch_and_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[(
            "controlplane/10-vip.yaml",
            "machine: {network: {interfaces: [{interface: eth0, vip: {ip: 10.0.0.10}}]}}\n",
        )],
    );
    let d = errors(&file);
    assert_eq!(
        found(&d, Code::NodeAddressLost, dir.path()),
        [
            "patches/controlplane/10-vip.yaml:1 cp-01 machine.network.interfaces[0]: this entry configures eth0, the node's link, so Talos takes the link over from cloud-init and drops what cloud-init gave it: the node would lose its address 10.0.0.101/24 and its default route via 10.0.0.1; add `addresses: [10.0.0.101/24]` and `routes: [{network: 0.0.0.0/0, gateway: 10.0.0.1}]` to this entry"
        ]
    );
}

#[test]
fn entries_and_documents_that_take_the_link_over_must_carry_its_address() {
    let lost = |patches: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        let file = cluster(dir.path(), "v1.13.8", patches);
        match configs(&file) {
            Ok(_) => vec![],
            Err(d) => found(&d, Code::NodeAddressLost, dir.path()),
        }
    };
    // A selector matching the VM's virtio link, with the address but no route.
    let selector = "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          driver: virtio*\n        addresses: [${node_ip}/24]\n";
    let found = lost(&[("common/10-mtu.yaml.tftpl", selector)]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].ends_with("(also on 1 other node)"), "{}", found[0]);
    assert!(
        found[0].contains("deviceSelector (driver: virtio*) selects eth0"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("lose its default route via 10.0.0.1"),
        "{}",
        found[0]
    );
    assert!(!found[0].contains("its address"), "{}", found[0]);
    // A LinkConfig for eth0 takes it over; a Layer2VIPConfig on eth0 does not.
    let link = "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 9000\n";
    assert_eq!(lost(&[("worker/10-link.yaml", link)]).len(), 1);
    let vip = "apiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 10.0.0.10\nlink: eth0\n";
    assert_eq!(
        lost(&[("controlplane/10-vip.yaml", vip)]),
        Vec::<String>::new()
    );
    // Another link (a dummy) is not the node's link.
    let dummy =
        "machine:\n  network:\n    interfaces:\n      - interface: dummy0\n        dummy: true\n";
    assert_eq!(
        lost(&[("common/10-dummy.yaml", dummy)]),
        Vec::<String>::new()
    );
}

#[test]
fn an_interface_that_is_not_the_node_link_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[(
            "controlplane/10-vip.yaml",
            "machine:\n  network:\n    interfaces:\n      - interface: ens18\n        vip:\n          ip: 10.0.0.10\n",
        )],
    );
    let configs = configs(&file).expect("a warning only");
    let warnings: Vec<&Diagnostic> = configs.iter().flat_map(|c| &c.warnings).collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let w = warnings[0];
    assert_eq!((w.code, w.severity), (Code::UnknownLink, Severity::Warning));
    assert_eq!(
        w.field.as_deref(),
        Some("machine.network.interfaces[0].interface")
    );
    assert_eq!(w.pos.map(|p| p.line), Some(4));
    assert!(
        w.message
            .starts_with("interface ens18 is not this node's link"),
        "{}",
        w.message
    );
}

/// Run talosprov in `dir` with no credentials, no colour and a state file beside the
/// cluster: its exit code and stderr.
fn run(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = run_clean(dir, args, &[("NO_COLOR", "1")]);
    (out.status.code().unwrap_or(-1), stderr(&out))
}

#[test]
fn validate_render_and_plan_all_refuse_what_talos_would() {
    let dir = tempfile::tempdir().unwrap();
    cluster(
        dir.path(),
        "v1.13.8",
        &[
            (
                "controlplane/10-vip.yaml",
                "machine:\n  network:\n    vip:\n      ip: 10.0.0.10\n",
            ),
            (
                "worker/10-vip.yaml",
                "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        mtu: 9000\n",
            ),
        ],
    );
    let secrets = SECRETS_FILE;
    for args in [
        &["validate", "-f", "cluster.yaml"][..],
        &["render", "-f", "cluster.yaml", "--secrets", secrets],
        &["plan", "-f", "cluster.yaml", "--offline"],
    ] {
        let (code, stderr) = run(dir.path(), args);
        assert_eq!(code, 1, "{args:?}:\n{stderr}");
        assert!(
            stderr.contains("error[M004 unknown-config-key]"),
            "{args:?}:\n{stderr}"
        );
        assert!(
            stderr.contains("--> patches/controlplane/10-vip.yaml:3:5"),
            "{args:?}:\n{stderr}"
        );
        assert!(
            stderr.contains("error[M006 node-address-lost]"),
            "{args:?}:\n{stderr}"
        );
        assert!(
            stderr.contains("lose its address 10.0.0.102/24"),
            "{args:?}:\n{stderr}"
        );
    }
}

#[test]
fn a_patch_over_the_managed_installer_or_disk_is_a_warning_that_says_what_is_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(
        dir.path(),
        "v1.13.8",
        &[(
            "common/10-install.yaml",
            "machine:\n  install:\n    image: ghcr.io/siderolabs/installer:v1.13.8\n    disk: /dev/vda\n",
        )],
    );
    let configs = configs(&file).expect("warnings only");
    let warnings: Vec<Diagnostic> = configs.iter().flat_map(|c| c.warnings.clone()).collect();
    assert_eq!(
        found(&warnings, Code::ManagedValueOverridden, dir.path())
            .iter()
            .map(|w| w.split(": the rendered").next().unwrap())
            .collect::<Vec<_>>(),
        [
            "patches/common/10-install.yaml:3 cp-01 machine.install.image",
            "patches/common/10-install.yaml:4 cp-01 machine.install.disk",
            "patches/common/10-install.yaml:3 worker-01 machine.install.image",
            "patches/common/10-install.yaml:4 worker-01 machine.install.disk",
        ]
    );
    // The warning says the patch's value wins, and the rendered config agrees; the value
    // talosprov manages (and upgrades with) is still the schematic's installer.
    for (config, warning) in configs.iter().zip(warnings.iter().step_by(2)) {
        let yaml = config.yaml.expose();
        assert!(
            yaml.contains("image: ghcr.io/siderolabs/installer:v1.13.8"),
            "{yaml}"
        );
        assert!(yaml.contains("disk: /dev/vda"), "{yaml}");
        assert!(
            warning.message.contains(&format!(
                "the rendered config has machine.install.image: \"ghcr.io/siderolabs/installer:v1.13.8\", \
                 because this patch applies over {}",
                config.installer_image
            )),
            "{}",
            warning.message
        );
        assert!(config.installer_image.contains("/nocloud-installer/"));
    }
}

/// The value at a dotted path of a YAML value.
fn at<'v>(doc: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(doc, |v, k| v.get(k))
}

#[test]
fn the_warning_for_a_talos_older_than_the_contracts_says_what_is_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let file = cluster(dir.path(), "v1.11.3", &[]);
    let configs = configs(&file).expect("a warning only");
    let warning = &configs[0].warnings[0];
    assert_eq!(
        (warning.code, warning.severity),
        (Code::ConfigWarning, Severity::Warning)
    );
    insta::assert_snapshot!(
        format!(
            "{}: {}",
            warning.field.as_deref().unwrap_or("-"),
            warning.message
        ),
        @"cluster.talos_version: Talos v1.11.3 is older than the config contracts talosprov generates (v1.12, v1.13): generating the v1.12 config's v1alpha1 document alone (no HostnameConfig document), which Talos before v1.12 still refuses: its machine.install.grubUseUKICmdline is a v1.12 field (unknown keys found during decoding)"
    );
    // What it says is what every node gets: the v1.12 contract's v1alpha1 document (with its
    // empty `machine.network`), no HostnameConfig, and grubUseUKICmdline set.
    for config in &configs {
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(config.yaml.expose())
            .map(serde::Deserialize::deserialize)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(docs.len(), 1, "{}", config.hostname);
        assert!(!config.yaml.expose().contains("HostnameConfig"));
        assert!(at(&docs[0], "machine.network").is_some());
        assert_eq!(
            at(&docs[0], "machine.install.grubUseUKICmdline"),
            Some(&Value::Bool(true))
        );
        assert_eq!(config.warnings[0].message, warning.message);
    }
    // `machineconfig gen` renders (and says) the same.
    let secrets = parse_secrets_yaml(SECRETS).unwrap();
    let base = base_config(&BaseConfigInput {
        cluster_name: "lab".into(),
        endpoint: "https://10.0.0.10:6443".into(),
        kubernetes_version: None,
        talos_version: "v1.11.3".parse().unwrap(),
        role: Role::Worker,
        secrets: &secrets,
        install_disk: None,
        install_image: None,
        additional_sans: vec![],
        hostname_config: true,
        accepted_cas: &talosprov_machine::rotation::NO_ACCEPTED_CAS,
    })
    .unwrap();
    assert_eq!(base.documents.len(), 1);
    assert_eq!(base.warnings, vec![warning.message.clone()]);
}
