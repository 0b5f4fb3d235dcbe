use super::*;

const CP: Scope = Scope { workers: false };
const ALL: Scope = Scope { workers: true };

fn docs(text: &str) -> Vec<Value> {
    talosprov_patch::document::parse_documents(text).expect("yaml")
}

fn kinds(m: &Migration) -> Vec<String> {
    docs(&m.text)
        .iter()
        .map(|d| {
            let kind = d.get("kind").and_then(Value::as_str).unwrap_or("v1alpha1");
            match d.get("name").and_then(Value::as_str) {
                Some(name) => format!("{kind}/{name}"),
                None => kind.to_owned(),
            }
        })
        .collect()
}

#[test]
fn fields_move_to_their_documents_and_the_emptied_sections_go() {
    let m = migrate_to_v1_14(
        "p.yaml",
        "# head\n\nmachine:\n  kubelet:\n    image: k:v1\n    extraConfig: {maxPods: 250}\n    nodeIP:\n      validSubnets: [10.0.0.0/8]\n  time:\n    disabled: true\n  install:\n    disk: /dev/vda\n    wipe: true\n  certSANs: [a]\ncluster:\n  coreDNS:\n    disabled: true\n  inlineManifests:\n    - {name: x, contents: \"kind: A\"}\n",
        CP,
    )
    .expect("migrates");
    assert!(m.text.starts_with("# head\n\n"), "{}", m.text);
    assert_eq!(
        kinds(&m),
        [
            "v1alpha1",
            "KubeletConfig",
            "KubeNodeConfig",
            "TimeSyncConfig",
            "UnattendedInstallConfig",
            "KubeCoreDNSConfig",
            "KubeInlineManifestConfig/x"
        ]
    );
    let d = docs(&m.text);
    // What has no document stays in v1alpha1; the emptied sections are gone.
    assert_eq!(d[0]["machine"]["certSANs"][0], "a");
    assert!(d[0].get("cluster").is_none());
    assert!(d[0]["machine"].get("kubelet").is_none());
    assert_eq!(d[1]["config"]["maxPods"], 250);
    assert_eq!(d[2]["nodeIP"]["validSubnets"][0], "10.0.0.0/8");
    assert_eq!(d[3]["enabled"], false);
    assert_eq!(
        d[4]["provisioning"]["diskSelector"]["match"],
        "disk.dev_path == \"/dev/vda\""
    );
    assert_eq!(d[4]["provisioning"]["wipe"], true);
    assert_eq!(d[5]["enabled"], false);
    assert_eq!(d[6]["manifest"], "kind: A");
    assert!(m.left.is_empty(), "{:?}", m.left);
}

#[test]
fn what_has_no_document_or_cannot_move_safely_stays_with_the_reason() {
    let m = migrate_to_v1_14(
        "p.yaml.tftpl",
        "machine:\n  install:\n    disk: ${disk}\n    extraKernelArgs: [a=b]\n  network:\n    interfaces:\n      - interface: eth1\n        dhcp: true\n      - interface: eth0\n        bond: {mode: 802.3ad}\n    nameservers: ${nameservers}\n  kubelet:\n    extraMounts: []\n",
        CP,
    )
    .expect("migrates");
    let left: Vec<(&str, &str)> = m
        .left
        .iter()
        .map(|l| (l.field.as_str(), l.reason.as_str()))
        .collect();
    let reason = |field: &str| {
        left.iter()
            .filter(|(f, _)| *f == field)
            .map(|(_, r)| *r)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    assert!(reason("machine.install.disk").contains("template expression"));
    assert!(reason("machine.install.extraKernelArgs").contains("nothing replaces it"));
    assert!(reason("machine.network.nameservers").contains("jsonencode"));
    let interfaces = reason("machine.network.interfaces");
    assert!(
        interfaces.contains("other than the node's (eth0"),
        "{interfaces}"
    );
    assert!(interfaces.contains("with `bond`"), "{interfaces}");
    assert!(reason("machine.kubelet.extraMounts").contains("nothing replaces it"));
    // Nothing moved, nothing changed.
    assert!(m.moved.is_empty());
    assert_eq!(m.text.lines().next(), Some("machine:"));
}

#[test]
fn control_plane_documents_are_not_made_in_a_file_workers_use() {
    let text = "cluster:\n  proxy:\n    disabled: true\n  network:\n    cni:\n      name: none\n  extraManifests: [https://e/x.yaml]\nmachine:\n  sysctls: {a: \"1\"}\n";
    let m = migrate_to_v1_14("p.yaml", text, ALL).expect("migrates");
    // External manifests are no control-plane-only document: workers ignore them.
    assert_eq!(
        kinds(&m),
        ["v1alpha1", "SysctlConfig", "KubeExternalManifestConfig/x"]
    );
    let fields: Vec<&str> = m.left.iter().map(|l| l.field.as_str()).collect();
    assert_eq!(fields, ["cluster.proxy.disabled", "cluster.network.cni"]);
    assert!(m.left[0].reason.contains("only on control planes"));
    // On control planes alone, all of it moves.
    let m = migrate_to_v1_14("p.yaml", text, CP).expect("migrates");
    assert_eq!(
        kinds(&m),
        [
            "SysctlConfig",
            "KubeProxyConfig",
            "KubeFlannelCNIConfig",
            "KubeExternalManifestConfig/x"
        ]
    );
}

#[test]
fn a_custom_cni_becomes_external_manifests_without_flannel() {
    let m = migrate_to_v1_14(
        "p.yaml",
        "cluster:\n  network:\n    podSubnets: [10.244.0.0/16]\n    cni:\n      name: custom\n      urls: [https://a/cni.yaml, https://b/cni.yaml]\n  extraManifests: [https://c/v1/components.yaml, https://d/v2/components.yaml?x=1]\n",
        CP,
    )
    .expect("migrates");
    assert_eq!(
        kinds(&m),
        [
            "KubeNetworkConfig",
            "KubeFlannelCNIConfig",
            "KubeExternalManifestConfig/custom-cni",
            "KubeExternalManifestConfig/custom-cni-1",
            "KubeExternalManifestConfig/components",
            "KubeExternalManifestConfig/components-2"
        ]
    );
    let d = docs(&m.text);
    assert_eq!(d[1]["$patch"], "delete");
    assert_eq!(d[2]["url"], "https://a/cni.yaml");
    assert_eq!(d[5]["url"], "https://d/v2/components.yaml?x=1");
}

#[test]
fn kube_prism_off_deletes_its_document_and_on_is_the_default() {
    let off = migrate_to_v1_14(
        "p.yaml",
        "machine:\n  features:\n    kubePrism:\n      enabled: false\n",
        ALL,
    )
    .unwrap();
    assert_eq!(kinds(&off), ["KubePrismConfig"]);
    assert_eq!(docs(&off.text)[0]["$patch"], "delete");
    let on = migrate_to_v1_14(
        "p.yaml",
        "machine:\n  features:\n    kubePrism:\n      enabled: true\n      port: 7445\n",
        ALL,
    )
    .unwrap();
    assert_eq!(kinds(&on), ["KubePrismConfig"]);
    assert_eq!(docs(&on.text)[0]["port"], 7445);
}

#[test]
fn files_that_are_not_strategic_yaml_are_left_whole() {
    assert_eq!(
        migrate_to_v1_14("p.yaml", "- op: add\n  path: /machine/x\n  value: 1\n", CP),
        Err(Unmigratable::Json6902)
    );
    assert_eq!(
        migrate_to_v1_14(
            "p.yaml.tftpl",
            "machine:\n%{ for x in y }\n  a: 1\n%{ endfor }\n",
            CP
        ),
        Err(Unmigratable::NotYaml { line: 2 })
    );
    // A template with no v1alpha1 section has nothing to move.
    let text = "apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n%{ for a in n }    - address: ${a}\n%{ endfor }\n";
    let m = migrate_to_v1_14("p.yaml.tftpl", text, CP).unwrap();
    assert_eq!(m.text, text);
    assert!(m.moved.is_empty() && m.left.is_empty());
}

#[test]
fn a_templated_address_list_becomes_a_loop_that_renders_to_the_same_addresses() {
    let m = migrate_to_v1_14(
        "p.yaml.tftpl",
        "machine:\n  network:\n    nameservers: ${jsonencode(nameservers)}\n",
        CP,
    )
    .unwrap();
    assert_eq!(
        m.text,
        "apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n%{ for address in nameservers }    - address: ${address}\n%{ endfor }\n"
    );
    let vars = talosprov_patch::render::TemplateVars {
        hostname: "cp-01".into(),
        node_ip: "10.0.0.101".into(),
        role: "controlplane".into(),
        vip: None,
        gateway: "10.0.0.1".into(),
        nameservers: vec!["10.0.0.1".into(), "10.0.0.2".into()],
        prefix_length: 24,
        cluster_name: "lab".into(),
        talos_version: "v1.14.0".into(),
        kubernetes_version: "v1.37.0".into(),
        node: serde_json::Value::Null,
        pool: None,
        index: None,
    };
    let d = talosprov_patch::render::render_patch(
        std::path::Path::new("p.yaml.tftpl"),
        talosprov_patch::discover::PatchKind::Templatefile,
        &m.text,
        &vars,
    )
    .expect("renders");
    assert_eq!(d[0]["nameservers"][0]["address"], "10.0.0.1");
    assert_eq!(d[0]["nameservers"][1]["address"], "10.0.0.2");
}

#[test]
fn manifest_names_are_dns_labels_from_the_file_name() {
    assert_eq!(
        manifest_name("https://github.com/x/releases/download/v0.9.0/components.yaml"),
        "components"
    );
    assert_eq!(
        manifest_name("https://e/My_Deploy.File.yml#frag"),
        "my-deploy-file"
    );
    assert_eq!(manifest_name("https://e/"), "e");
    assert_eq!(manifest_name(""), "manifest");
    assert_eq!(
        manifest_name(&format!("https://e/{}.yaml", "a".repeat(80))).len(),
        63
    );
}
