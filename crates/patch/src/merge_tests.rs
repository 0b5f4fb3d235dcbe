//! One test per strategic-merge rule (siderolabs/talos `merge.Merge`, the
//! custom `Merge` methods and `$patch: delete`), each a config, the patches
//! applied in order, and the expected config.

use crate::apply::{apply_patches, apply_patches_traced};
use crate::document::{DocumentId, MachineConfig};
use crate::load::load_patch;

/// Apply `patches` to `config` and return the result as YAML text.
fn patched(config: &str, patches: &[&str]) -> Result<String, String> {
    let config = MachineConfig::parse(config).map_err(|e| e.to_string())?;
    let patches: Vec<_> = patches
        .iter()
        .enumerate()
        .map(|(i, p)| load_patch(format!("patch-{}.yaml", i + 1), p).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let out = apply_patches(&config, &patches).map_err(|e| format!("{e}: {}", e.cause))?;
    Ok(out.to_yaml().unwrap())
}

fn normal(yaml: &str) -> String {
    MachineConfig::parse(yaml).unwrap().to_yaml().unwrap()
}

/// A rule test: `config`, then `patches` in order, gives `expected` (compared
/// as YAML text, so key order counts).
macro_rules! rule {
    ($name:ident, $config:expr, [$($patch:expr),+ $(,)?], $expected:expr $(,)?) => {
        #[test]
        fn $name() {
            let got = patched($config, &[$($patch),+]).unwrap();
            assert_eq!(got, normal($expected));
        }
    };
}

rule!(
    maps_merge_recursively,
    "machine:\n  kubelet:\n    image: k:1\n",
    [
        "machine:\n  kubelet:\n    defaultRuntimeSeccompProfileEnabled: true\n  install:\n    disk: /dev/vda\n"
    ],
    "machine:\n  kubelet:\n    image: k:1\n    defaultRuntimeSeccompProfileEnabled: true\n  install:\n    disk: /dev/vda\n",
);

rule!(
    lists_append,
    "machine:\n  certSANs: [a]\n  kernel:\n    modules: [{name: x}]\n",
    ["machine:\n  certSANs: [a, b]\n  kernel:\n    modules: [{name: y}]\n"],
    "machine:\n  certSANs: [a, a, b]\n  kernel:\n    modules: [{name: x}, {name: y}]\n",
);

rule!(
    scalars_replace,
    "machine:\n  install:\n    disk: /dev/sda\n",
    ["machine:\n  install:\n    disk: /dev/nvme0n1\n"],
    "machine:\n  install:\n    disk: /dev/nvme0n1\n",
);

rule!(
    zero_values_do_not_replace,
    "machine:\n  install:\n    disk: /dev/sda\n  features:\n    kubePrism:\n      port: 7445\n",
    ["machine:\n  install:\n    disk: \"\"\n  features:\n    kubePrism:\n      port: 0\n"],
    "machine:\n  install:\n    disk: /dev/sda\n  features:\n    kubePrism:\n      port: 7445\n",
);

rule!(
    false_replaces_true,
    "machine:\n  install:\n    wipe: true\n",
    ["machine:\n  install:\n    wipe: false\n"],
    "machine:\n  install:\n    wipe: false\n",
);

rule!(
    null_in_a_patch_changes_nothing,
    "machine:\n  network:\n    hostname: a\n",
    ["machine:\n  network:\n    hostname:\n"],
    "machine:\n  network:\n    hostname: a\n",
);

rule!(
    interfaces_merge_by_interface_name,
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n      - interface: eth1\n        dhcp: true\n",
    [
        "machine:\n  network:\n    interfaces:\n      - interface: eth1\n        dhcp: false\n        mtu: 9000\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n      - interface: eth1\n        dhcp: false\n        mtu: 9000\n",
);

rule!(
    interfaces_merge_by_identical_device_selector,
    "machine:\n  network:\n    interfaces:\n      - deviceSelector: {physical: true}\n        dhcp: false\n",
    [
        "machine:\n  network:\n    interfaces:\n      - deviceSelector: {physical: true}\n        mtu: 1400\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - deviceSelector: {physical: true}\n        dhcp: false\n        mtu: 1400\n",
);

rule!(
    interfaces_with_a_different_device_selector_append,
    "machine:\n  network:\n    interfaces:\n      - deviceSelector: {driver: virtio_net}\n        dhcp: true\n",
    [
        "machine:\n  network:\n    interfaces:\n      - deviceSelector: {driver: virtio_net, physical: true}\n        dhcp: false\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - deviceSelector: {driver: virtio_net}\n        dhcp: true\n      - deviceSelector: {driver: virtio_net, physical: true}\n        dhcp: false\n",
);

rule!(
    vlans_merge_by_vlan_id,
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vlans:\n          - vlanId: 10\n            addresses: [10.0.10.2/24]\n",
    [
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vlans:\n          - vlanId: 10\n            addresses: [10.0.10.3/24]\n          - vlanId: 20\n            dhcp: true\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vlans:\n          - vlanId: 10\n            addresses: [10.0.10.2/24, 10.0.10.3/24]\n          - vlanId: 20\n            dhcp: true\n",
);

rule!(
    pod_and_service_subnets_are_replaced,
    "cluster:\n  network:\n    podSubnets: [10.244.0.0/16]\n    serviceSubnets: [10.96.0.0/12]\n",
    [
        "cluster:\n  network:\n    podSubnets: [10.0.0.0/16]\n    serviceSubnets: [10.1.0.0/16, fd00::/108]\n"
    ],
    "cluster:\n  network:\n    podSubnets: [10.0.0.0/16]\n    serviceSubnets: [10.1.0.0/16, fd00::/108]\n",
);

rule!(
    the_1_14_subnets_and_configurations_are_replaced_and_args_merge_per_key,
    "machine: {}\n---\napiVersion: v1alpha1\nkind: KubeNetworkConfig\npodSubnets: [10.244.0.0/16]\nserviceSubnets: [10.96.0.0/12]\n---\napiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n  kind: Policy\n  rules: [{level: Metadata}]\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  a: '1'\n  b: [x]\n",
    [
        "apiVersion: v1alpha1\nkind: KubeNetworkConfig\npodSubnets: [10.0.0.0/16]\n---\napiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n  rules: [{level: None}]\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  b: [y]\n  c: '3'\n"
    ],
    "machine: {}\n---\napiVersion: v1alpha1\nkind: KubeNetworkConfig\npodSubnets: [10.0.0.0/16]\nserviceSubnets: [10.96.0.0/12]\n---\napiVersion: v1alpha1\nkind: KubeAuditPolicyConfig\nconfiguration:\n  rules: [{level: None}]\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  a: '1'\n  b: [y]\n  c: '3'\n",
);

rule!(
    audit_policy_is_replaced_whole,
    "cluster:\n  apiServer:\n    auditPolicy:\n      apiVersion: audit.k8s.io/v1\n      kind: Policy\n      rules: [{level: Metadata}]\n",
    ["cluster:\n  apiServer:\n    auditPolicy:\n      rules: [{level: None}]\n"],
    "cluster:\n  apiServer:\n    auditPolicy:\n      rules: [{level: None}]\n",
);

rule!(
    admission_control_merges_by_name,
    "cluster:\n  apiServer:\n    admissionControl:\n      - name: PodSecurity\n        configuration:\n          defaults: {enforce: baseline}\n          exemptions: {namespaces: [kube-system]}\n",
    [
        "cluster:\n  apiServer:\n    admissionControl:\n      - name: PodSecurity\n        configuration:\n          defaults: {enforce: restricted}\n          exemptions: {namespaces: [rook-ceph]}\n"
    ],
    "cluster:\n  apiServer:\n    admissionControl:\n      - name: PodSecurity\n        configuration:\n          defaults: {enforce: restricted}\n          exemptions: {namespaces: [kube-system, rook-ceph]}\n",
);

rule!(
    each_extra_args_key_is_replaced_whole,
    "machine:\n  kubelet:\n    extraArgs:\n      feature-gates: [A=true, B=true]\n      node-labels: x=y\ncluster:\n  apiServer:\n    extraArgs:\n      oidc-issuer-url: https://a\n",
    [
        "machine:\n  kubelet:\n    extraArgs:\n      feature-gates: [C=true]\n      rotate-server-certificates: true\ncluster:\n  apiServer:\n    extraArgs:\n      oidc-issuer-url: \"\"\n"
    ],
    "machine:\n  kubelet:\n    extraArgs:\n      feature-gates: [C=true]\n      node-labels: x=y\n      rotate-server-certificates: true\ncluster:\n  apiServer:\n    extraArgs:\n      oidc-issuer-url: \"\"\n",
);

rule!(
    unstructured_maps_merge_and_their_lists_append,
    "machine:\n  kubelet:\n    extraConfig:\n      serverTLSBootstrap: true\n      tlsCipherSuites: [A]\n",
    ["machine:\n  kubelet:\n    extraConfig:\n      maxPods: 250\n      tlsCipherSuites: [B]\n"],
    "machine:\n  kubelet:\n    extraConfig:\n      serverTLSBootstrap: true\n      tlsCipherSuites: [A, B]\n      maxPods: 250\n",
);

rule!(
    control_plane_endpoint_merges_by_url_component,
    "cluster:\n  controlPlane:\n    endpoint: https://127.0.0.1:6443/\n",
    ["cluster:\n  controlPlane:\n    endpoint: https://192.168.1.120:6443\n"],
    "cluster:\n  controlPlane:\n    endpoint: https://192.168.1.120:6443/\n",
);

rule!(
    extension_service_config_files_merge_by_mount_path,
    "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nut\nconfigFiles:\n  - content: a\n    mountPath: /etc/a\nenvironment: [X=1]\n",
    [
        "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nut\nconfigFiles:\n  - content: b\n    mountPath: /etc/a\n  - content: c\n    mountPath: /etc/c\nenvironment: [Y=2]\n"
    ],
    "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: nut\nconfigFiles:\n  - content: b\n    mountPath: /etc/a\n  - content: c\n    mountPath: /etc/c\nenvironment: [X=1, Y=2]\n",
);

rule!(
    image_verification_rules_are_replaced_by_image,
    "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - image: docker.io/*\n    skip: true\n    keyless: {issuer: a}\n",
    [
        "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - image: docker.io/*\n    deny: true\n  - image: ghcr.io/*\n    skip: true\n"
    ],
    "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - image: docker.io/*\n    deny: true\n  - image: ghcr.io/*\n    skip: true\n",
);

rule!(
    network_rule_ingress_and_ports_are_replaced,
    "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: kubelet\nportSelector:\n  ports: [10250]\n  protocol: tcp\ningress:\n  - subnet: 10.0.0.0/8\n",
    [
        "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: kubelet\nportSelector:\n  ports: [10250, 10255]\ningress:\n  - subnet: 192.168.0.0/16\n"
    ],
    "apiVersion: v1alpha1\nkind: NetworkRuleConfig\nname: kubelet\nportSelector:\n  ports: [10250, 10255]\n  protocol: tcp\ningress:\n  - subnet: 192.168.0.0/16\n",
);

rule!(
    patch_delete_removes_a_map_key,
    "machine:\n  nodeLabels:\n    a: \"1\"\n    b: \"2\"\n",
    ["machine:\n  nodeLabels:\n    a:\n      $patch: delete\n"],
    "machine:\n  nodeLabels:\n    b: \"2\"\n",
);

rule!(
    patch_delete_removes_a_list_item_by_its_first_key,
    "cluster:\n  apiServer:\n    admissionControl:\n      - name: PodSecurity\n        configuration: {}\n      - name: Other\n",
    [
        "cluster:\n  apiServer:\n    admissionControl:\n      - name: PodSecurity\n        $patch: delete\n"
    ],
    "cluster:\n  apiServer:\n    admissionControl:\n      - name: Other\n",
);

rule!(
    patch_delete_removes_a_whole_document,
    "machine: {}\n---\napiVersion: v1alpha1\nkind: SideroLinkConfig\napiUrl: https://a\n",
    ["apiVersion: v1alpha1\nkind: SideroLinkConfig\n$patch: delete\n"],
    "machine: {}\n",
);

rule!(
    patch_delete_runs_before_the_rest_of_its_document,
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: true\n      - interface: eth1\n",
    [
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        $patch: delete\n      - interface: eth0\n        dummy: true\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - interface: eth1\n      - interface: eth0\n        dummy: true\n",
);

rule!(
    multi_document_patches_merge_by_kind_and_name,
    "machine: {}\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: a\nenvironment: [A=1]\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: b\nenvironment: [B=1]\n",
    [
        "apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: b\nenvironment: [B=2]\n---\nmachine:\n  install:\n    disk: /dev/vda\n"
    ],
    "machine:\n  install:\n    disk: /dev/vda\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: a\nenvironment: [A=1]\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: b\nenvironment: [B=1, B=2]\n",
);

rule!(
    unmatched_patch_documents_are_appended,
    "machine: {}\n",
    ["apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n"],
    "machine: {}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
);

rule!(
    a_later_patch_wins,
    "machine:\n  network:\n    hostname: base\n",
    [
        "machine:\n  network:\n    hostname: first\n",
        "machine:\n  network:\n    hostname: second\n",
    ],
    "machine:\n  network:\n    hostname: second\n",
);

rule!(
    keyed_list_entries_in_one_patch_collapse_into_one,
    "machine:\n  network: {}\n",
    [
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.0.0.2/24]\n      - interface: eth0\n        addresses: [10.0.0.3/24]\n"
    ],
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.0.0.2/24, 10.0.0.3/24]\n",
);

rule!(
    json6902_and_strategic_patches_mix_in_order,
    "machine:\n  network:\n    hostname: a\n",
    [
        "[{\"op\": \"replace\", \"path\": \"/machine/network/hostname\", \"value\": \"b\"}]",
        "machine:\n  network:\n    nameservers: [1.1.1.1]\n",
    ],
    "machine:\n  network:\n    hostname: b\n    nameservers: [1.1.1.1]\n",
);

rule!(
    inline_manifest_contents_lose_leading_blank_lines,
    "cluster: {}\n",
    [
        "cluster:\n  inlineManifests:\n    - name: a\n      contents: |\n\n        ---\n        kind: X\n"
    ],
    "cluster:\n  inlineManifests:\n    - name: a\n      contents: |\n        ---\n        kind: X\n",
);

#[test]
fn a_vip_only_patch_keeps_the_interface_addresses_and_routes() {
    let base = "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          physical: true\n        dhcp: false\n        addresses: [192.168.1.121/24]\n        routes:\n          - network: 0.0.0.0/0\n            gateway: 192.168.1.1\n";
    let vip = "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          physical: true\n        vip:\n          ip: 192.168.1.120\n";
    let got = patched(base, &[vip]).unwrap();
    assert_eq!(
        got,
        normal(
            "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          physical: true\n        dhcp: false\n        addresses: [192.168.1.121/24]\n        routes:\n          - network: 0.0.0.0/0\n            gateway: 192.168.1.1\n        vip:\n          ip: 192.168.1.120\n"
        )
    );
    // The same by interface name.
    let by_name = |body: &str| {
        format!("machine:\n  network:\n    interfaces:\n      - interface: eth0\n{body}")
    };
    let got = patched(
        &by_name("        addresses: [10.0.0.2/24]\n        routes: [{network: 0.0.0.0/0, gateway: 10.0.0.1}]\n"),
        &[&by_name("        vip: {ip: 10.0.0.10}\n")],
    )
    .unwrap();
    assert_eq!(
        got,
        normal(&by_name(
            "        addresses: [10.0.0.2/24]\n        routes: [{network: 0.0.0.0/0, gateway: 10.0.0.1}]\n        vip: {ip: 10.0.0.10}\n"
        ))
    );
}

#[test]
fn patch_delete_of_a_missing_parent_fails_naming_the_path() {
    let err = patched(
        "machine: {}\n",
        &["machine:\n  network:\n    hostname:\n      $patch: delete\n"],
    )
    .unwrap_err();
    assert_eq!(
        err,
        "cannot apply patch patch-1.yaml: patch delete: path 'machine.network.hostname' in document '/v1alpha1': lookup failed"
    );
}

#[test]
fn a_shape_mismatch_fails_naming_the_field() {
    let err = patched(
        "machine:\n  certSANs: [a]\n",
        &["machine:\n  certSANs: a\n"],
    )
    .unwrap_err();
    insta::assert_snapshot!(err, @"cannot apply patch patch-1.yaml: merge type mismatch at 'machine.certSANs' in document /v1alpha1: the config has a list, the patch a string");
}

#[test]
fn provenance_names_the_patch_that_last_set_a_value() {
    let config = MachineConfig::parse(
        "machine:\n  install:\n    disk: /dev/sda\n  network:\n    hostname: base\n",
    )
    .unwrap();
    let patches = [
        load_patch(
            "common/10-disk.yaml",
            "machine:\n  install:\n    disk: /dev/vda\n",
        )
        .unwrap(),
        load_patch(
            "nodes/a/20-host.yaml",
            "machine:\n  network:\n    hostname: a\n",
        )
        .unwrap(),
        load_patch(
            "nodes/a/30-disk.yaml",
            "machine:\n  install:\n    disk: /dev/vdb\n",
        )
        .unwrap(),
    ];
    let (_, provenance) = apply_patches_traced(&config, &patches).unwrap();
    let v1 = DocumentId::v1alpha1();
    assert_eq!(
        provenance.source_of(&v1, "machine.install.disk"),
        Some("nodes/a/30-disk.yaml")
    );
    assert_eq!(
        provenance.source_of(&v1, "machine.network.hostname"),
        Some("nodes/a/20-host.yaml")
    );
    assert_eq!(
        provenance.source_of(&v1, "machine"),
        Some("nodes/a/30-disk.yaml")
    );
    assert_eq!(provenance.source_of(&v1, "cluster"), None);
}

#[test]
fn a_shape_mismatch_inside_a_list_element_names_the_list() {
    let err = patched(
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.0.0.2/24]\n",
        &["machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: 10.0.0.3/24\n"],
    )
    .unwrap_err();
    assert!(
        err.contains("'machine.network.interfaces[].addresses'"),
        "{err}"
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const BASE: &str = "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vlans: [{vlanId: 1}]\n  nodeLabels: {a: b}\ncluster:\n  apiServer:\n    admissionControl: [{name: P}]\n---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: x\nconfigFiles: [{mountPath: /a}]\n";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the patch text, loading and applying it returns a value or
        /// an error, never a panic.
        #[test]
        fn arbitrary_patch_text_never_panics(
            text in "(machine:|cluster:|network:|interfaces:|vlans:|- interface: eth0|- vlanId: 1|- name: P|\\$patch: delete|apiVersion: v1alpha1|kind: ExtensionServiceConfig|name: x|configFiles:|- mountPath: /a|nodeLabels:|a: b|\\[\\]|\\{\\}|---|\n|  |- |: |[a-z0-9]{1,3}){0,40}",
        ) {
            let base = MachineConfig::parse(BASE).unwrap();
            if let Ok(patch) = load_patch("fuzz.yaml", &text) {
                let _ = apply_patches(&base, &[patch]);
            }
        }

        /// The same over well-formed YAML trees built from the keys the
        /// special rules look at.
        #[test]
        fn arbitrary_patch_trees_never_panic(tree in patch_tree()) {
            let base = MachineConfig::parse(BASE).unwrap();
            let text = serde_yaml_ng::to_string(&tree).unwrap();
            if let Ok(patch) = load_patch("fuzz.yaml", &text) {
                let _ = apply_patches(&base, &[patch]);
            }
        }
    }

    fn patch_tree() -> impl Strategy<Value = serde_yaml_ng::Value> {
        use serde_yaml_ng::Value;
        let key = prop::sample::select(vec![
            "machine",
            "cluster",
            "network",
            "interfaces",
            "interface",
            "vlans",
            "vlanId",
            "deviceSelector",
            "physical",
            "nodeLabels",
            "apiServer",
            "admissionControl",
            "name",
            "extraArgs",
            "podSubnets",
            "auditPolicy",
            "controlPlane",
            "endpoint",
            "$patch",
            "apiVersion",
            "kind",
            "configFiles",
            "mountPath",
            "a",
        ]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..3).prop_map(|n| Value::Number(n.into())),
            prop::sample::select(vec![
                "",
                "delete",
                "eth0",
                "v1alpha1",
                "ExtensionServiceConfig",
                "x",
                "https://h/p"
            ])
            .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(5, 48, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Sequence),
                prop::collection::vec((key.clone(), inner), 0..4).prop_map(|kv| {
                    Value::Mapping(
                        kv.into_iter()
                            .map(|(k, v)| (Value::String(k.into()), v))
                            .collect(),
                    )
                }),
            ]
        })
    }
}

#[test]
fn ten_thousand_keyed_interfaces_merge_in_linear_time_in_order() {
    let list = |mtu: u32| -> String {
        let mut t = String::from("machine:\n  network:\n    interfaces:\n");
        for i in 0..10_000 {
            t.push_str(&format!("      - interface: eth{i}\n        mtu: {mtu}\n"));
        }
        t
    };
    let config = MachineConfig::parse(&list(1500)).unwrap();
    let patches = [
        load_patch("a.yaml", &list(9000)).unwrap(),
        load_patch("b.yaml", "machine:\n  network:\n    interfaces:\n      - interface: new\n      - interface: eth42\n        dhcp: true\n").unwrap(),
    ];
    let out = apply_patches(&config, &patches).unwrap();
    let items = out.documents[0]["machine"]["network"]["interfaces"]
        .as_sequence()
        .unwrap();
    assert_eq!(items.len(), 10_001);
    assert_eq!(items[0]["interface"], "eth0");
    assert_eq!(items[9_999]["mtu"], 9000);
    assert_eq!(items[42]["dhcp"], true);
    assert_eq!(items[10_000]["interface"], "new");
}

rule!(
    an_interface_merged_by_name_is_then_found_by_the_selector_it_gained,
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n",
    [
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        deviceSelector: {busPath: \"0*\"}\n      - deviceSelector: {busPath: \"0*\"}\n        mtu: 9000\n",
    ],
    "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        deviceSelector: {busPath: \"0*\"}\n        mtu: 9000\n",
);

rule!(
    a_replaced_element_keeps_its_place_and_duplicates_collapse_into_the_first,
    "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - {image: a, keyless: {issuer: x}}\n  - {image: b}\n",
    [
        "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - {image: b, skip: true}\n  - {image: c}\n  - {image: c, skip: true}\n  - {image: a}\n",
    ],
    "apiVersion: v1alpha1\nkind: ImageVerificationConfig\nrules:\n  - {image: a}\n  - {image: b, skip: true}\n  - {image: c, skip: true}\n",
);
