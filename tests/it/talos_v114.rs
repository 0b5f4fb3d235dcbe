//! Talos 1.14 in the cluster workflow: a topology at v1.14 renders the v1.14 documents, a
//! patch that still sets a v1alpha1 field beside the document that replaces it is refused as
//! Talos refuses it (on the patch's line), `patches migrate --to v1.14` moves the fields (a
//! diff, written only with `--write`) and the migrated tree renders the same settings as
//! the legacy one did, read back from each config's own layout by this file's reader. Then
//! the lab at v1.14.0 (`talos_v114_lab`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};
use serde_yaml_ng::Value;

use crate::support::cli::{stderr, stdout, talosprov};
use crate::support::fixtures::{SECRETS_FILE, copy_tree, fixture};

/// The fixture tree (`tests/fixtures/v114`) in a temporary folder.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(&fixture("v114"), dir.path());
    dir
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    talosprov()
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PROXMOX_VE_ENDPOINT")
        .args(args)
        .output()
        .expect("run talosprov")
}

/// `patches migrate --to v1.14` on the tree in `dir`, writing with `write`.
fn migrate(dir: &Path, write: bool) -> std::process::Output {
    let mut args = vec!["patches", "migrate", "--to", "v1.14", "-f", "cluster.yaml"];
    if write {
        args.push("--write");
    }
    run(dir, &args)
}

/// Every patch file of the tree, by path, with its text.
fn files(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    for folder in ["common", "controlplane", "worker"] {
        let Ok(entries) = std::fs::read_dir(dir.join("patches").join(folder)) else {
            continue;
        };
        for e in entries.flatten() {
            let text = std::fs::read_to_string(e.path()).expect("patch");
            out.insert(e.path(), text);
        }
    }
    out
}

#[test]
fn a_legacy_field_beside_its_1_14_document_is_refused_on_the_line_that_sets_it() {
    let dir = tree();
    let out = run(dir.path(), &["validate", "-f", "cluster.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    for (message, at) in [
        (
            "kubelet config is already set in v1alpha1 config (.machine.kubelet)",
            "patches/common/10-kubelet.yaml:3:3",
        ),
        (
            ".machine.nodeLabels is already set in v1alpha1 config",
            "patches/common/10-kubelet.yaml:8:3",
        ),
        (
            ".machine.network.nameservers is already set in v1alpha1 config",
            "patches/controlplane/10-network-vip.yaml.tftpl:16:5",
        ),
        (
            "cluster proxy config in v1alpha1 config (.machine.cluster.proxy) can't be used \
             with KubeProxyConfig document",
            "patches/controlplane/20-cni.yaml:5:3",
        ),
        (
            "kube-apiserver config is already set in v1alpha1 config (.cluster.apiServer)",
            "patches/controlplane/30-manifests.yaml:2:3",
        ),
    ] {
        let i = err
            .find(message)
            .unwrap_or_else(|| panic!("{message:?} missing:\n{err}"));
        let located = err[i..].lines().nth(1).unwrap_or_default();
        assert!(located.ends_with(at), "{message}: {located:?}, not {at}");
    }
    // Every refusal says how to fix it; nothing that merges (sysctls, kernel modules,
    // extra manifests) is refused.
    assert_eq!(
        err.matches("`talosprov patches migrate --to v1.14` moves it there")
            .count(),
        err.matches("error[M002").count()
    );
    for merged in ["sysctls", "kernel", "extraManifests"] {
        assert!(!err.contains(&format!("field: machine.{merged}")), "{err}");
    }
}

#[test]
fn migrate_shows_the_diff_and_writes_only_with_write() {
    let dir = tree();
    let before = files(dir.path());
    let out = migrate(dir.path(), false);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(files(dir.path()), before, "written without --write");
    for line in [
        "-  kubelet:",
        "+kind: KubeletConfig",
        "+kind: KubeFlannelCNIConfig",
        "+$patch: delete",
        "+kind: LinkConfig",
        "+name: eth0",
        "+kind: Layer2VIPConfig",
        "+name: ${vip}",
        "+%{ for address in nameservers }    - address: ${address}",
        "+kind: KernelModuleConfig",
        "  moved machine.kubelet.extraArgs -> KubeletConfig.extraArgs",
        "  moved cluster.extraManifests -> KubeExternalManifestConfig × 2",
        "5 files to migrate: run again with --write to write them (10 fields moved, 0 left as \
         they are; 5 patch files read)",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
    }
    // Each file's leading comment stays.
    let out = migrate(dir.path(), true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("5 files written"), "{}", stdout(&out));
    let after = files(dir.path());
    let kubelet = &after[&dir.path().join("patches/common/10-kubelet.yaml")];
    assert!(
        kubelet.starts_with("# Every node: kubelet serving certificates"),
        "{kubelet}"
    );
    // A second run finds nothing, and the tree now validates.
    let again = migrate(dir.path(), false);
    assert!(
        stdout(&again).starts_with("nothing to migrate (0 fields moved"),
        "{}",
        stdout(&again)
    );
    let out = run(dir.path(), &["validate", "-f", "cluster.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("M009"), "{}", stderr(&out));
}

#[test]
fn the_migrated_tree_renders_the_settings_the_legacy_tree_did() {
    // The legacy tree at Talos 1.13 (where its fields are the only way to say it), and the
    // migrated tree at 1.14: each node's settings, read from each layout, are the same.
    let legacy = tree();
    let topology = std::fs::read_to_string(legacy.path().join("cluster.yaml")).unwrap();
    std::fs::write(
        legacy.path().join("cluster.yaml"),
        topology.replace("talos_version: v1.14.0", "talos_version: v1.13.9"),
    )
    .unwrap();
    let migrated = tree();
    let out = migrate(migrated.path(), true);
    assert!(out.status.success(), "{}", stderr(&out));
    for host in ["cp-01", "worker-01"] {
        let old = settings(&render(legacy.path(), host));
        let new = settings(&render(migrated.path(), host));
        assert_eq!(old, new, "{host}");
        // The reader sees what the patches set.
        if host == "cp-01" {
            assert_eq!(old["cni"], "none");
            assert_eq!(old["kube-proxy disabled"], true);
            assert_eq!(old["link"]["vip"], "10.0.0.100");
            assert_eq!(old["nameservers"], json!(["10.0.0.1"]));
            assert_eq!(old["extra manifests"].as_array().map(Vec::len), Some(2));
        } else {
            assert_eq!(
                old["kernel modules"],
                json!([
                    ["br_netfilter", null],
                    ["nvidia", ["NVreg_OpenRmEnableUnsupportedGpus=1"]]
                ])
            );
        }
    }
}

#[test]
fn the_homelab_at_1_14_migrates_validates_and_renders_only_1_14_fields() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = crate::support::fixtures::repo();
    copy_tree(&root.join("patches"), &dir.path().join("patches"));
    let topology = std::fs::read_to_string(root.join("examples/homelab/cluster.yaml"))
        .unwrap()
        .replace("talos_version: v1.13.8", "talos_version: v1.14.0")
        .replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.37.0")
        .replace("patches_dir: ../../patches", "patches_dir: patches");
    std::fs::write(dir.path().join("cluster.yaml"), topology).unwrap();
    let helm = crate::support::fixtures::HELM_STAND_IN;
    let validate = |dir: &Path| {
        talosprov()
            .current_dir(dir)
            .env("TALOSPROV_HELM", helm)
            .env("NO_COLOR", "1")
            .args(["validate", "-f", "cluster.yaml"])
            .output()
            .unwrap()
    };
    assert_eq!(validate(dir.path()).status.code(), Some(1));
    let out = migrate(dir.path(), true);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = validate(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let out = talosprov()
        .current_dir(dir.path())
        .env("TALOSPROV_HELM", helm)
        .args([
            "render",
            "--secrets",
            SECRETS_FILE,
            "--show-sensitive",
            "-f",
            "cluster.yaml",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let docs = talosprov_patch::document::parse_documents(&text).expect("configs");
    // The v1.14 schema has none of the deprecated fields: no config sets one.
    for doc in docs
        .iter()
        .filter(|d| d.get("kind").is_none() && d.is_mapping())
    {
        // `persist: true` is written by `talosctl gen config` itself, and ignored.
        let deprecated: Vec<String> = talosprov_machine::deprecated::in_document(doc)
            .into_iter()
            .map(|(field, _)| field)
            .filter(|f| f != "persist")
            .collect();
        assert!(deprecated.is_empty(), "{deprecated:?}");
        assert!(doc["machine"].get("install").is_none());
    }
    for kind in [
        "KubeInlineManifestConfig",
        "KubeletConfig",
        "LinkConfig",
        "Layer2VIPConfig",
        "KernelModuleConfig",
        "UnattendedInstallConfig",
    ] {
        assert!(
            docs.iter().any(|d| d["kind"] == kind),
            "no {kind} in the rendered configs"
        );
    }
    assert!(!docs.iter().any(|d| d["kind"] == "KubeFlannelCNIConfig"));
}

#[test]
fn add_on_hints_name_the_1_14_documents() {
    let dir = tree();
    assert!(migrate(dir.path(), true).status.success());
    std::fs::remove_file(dir.path().join("patches/controlplane/20-cni.yaml")).unwrap();
    let mut topology = std::fs::read_to_string(dir.path().join("cluster.yaml")).unwrap();
    topology.push_str(
        "addons:\n  cilium:\n    preset: cilium\n    helm:\n      repo: https://helm.cilium.io/\n      chart: cilium\n      version: 1.19.6\n",
    );
    std::fs::write(dir.path().join("cluster.yaml"), topology).unwrap();
    let out = talosprov()
        .current_dir(dir.path())
        .env("TALOSPROV_HELM", crate::support::fixtures::HELM_STAND_IN)
        .env("NO_COLOR", "1")
        .args(["validate", "-f", "cluster.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(
            "the cluster's CNI is `flannel`: delete the KubeFlannelCNIConfig document \
             (`$patch: delete`) in a control-plane patch"
        ),
        "{err}"
    );
    assert!(!err.contains("cluster.network.cni.name"), "{err}");
}

/// One node's rendered config, with the fixture secrets.
fn render(dir: &Path, host: &str) -> Vec<Value> {
    let out = run(
        dir,
        &[
            "render",
            host,
            "--secrets",
            SECRETS_FILE,
            "--show-sensitive",
            "-f",
            "cluster.yaml",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    talosprov_patch::document::parse_documents(&stdout(&out)).expect("config")
}

/// The settings the fixture's patches make, read from either layout: the v1alpha1 fields
/// (Talos 1.13) or the 1.14 documents.
fn settings(docs: &[Value]) -> BTreeMap<&'static str, Json> {
    let legacy = docs
        .iter()
        .find(|d| d.get("kind").is_none())
        .expect("v1alpha1");
    let kind = |k: &str| docs.iter().find(|d| d["kind"] == k);
    let all = |k: &'static str| docs.iter().filter(move |d| d["kind"] == k);
    let json = |v: Option<&Value>| -> Json {
        v.map(|v| serde_json::to_value(v).expect("json"))
            .unwrap_or(Json::Null)
    };
    let pick = |new: Option<&Value>, old: &Value| -> Json {
        match new {
            Some(v) => json(Some(v)),
            None => json(Some(old)),
        }
    };
    let mut s = BTreeMap::new();
    let k = kind("KubeletConfig");
    s.insert(
        "kubelet args",
        pick(
            k.and_then(|d| d.get("extraArgs")),
            &legacy["machine"]["kubelet"]["extraArgs"],
        ),
    );
    let labels = match kind("KubeNodeConfig") {
        Some(d) => &d["labels"],
        None => &legacy["machine"]["nodeLabels"],
    };
    s.insert("pool label", json(labels.get("example.com/pool")));
    s.insert(
        "sysctls",
        pick(
            kind("SysctlConfig").map(|d| &d["params"]),
            &legacy["machine"]["sysctls"],
        ),
    );
    let nameservers: Json = match kind("ResolverConfig").and_then(|d| d.get("nameservers")) {
        Some(list) => Json::Array(
            list.as_sequence()
                .into_iter()
                .flatten()
                .map(|n| json(n.get("address")))
                .collect(),
        ),
        None => json(legacy["machine"]["network"].get("nameservers")),
    };
    s.insert("nameservers", nameservers);
    s.insert("link", link(docs, legacy));
    let mut modules: Vec<Json> = all("KernelModuleConfig")
        .map(|d| json!([json(d.get("name")), json(d.get("parameters"))]))
        .collect();
    if modules.is_empty() {
        modules = legacy["machine"]["kernel"]["modules"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|m| json!([json(m.get("name")), json(m.get("parameters"))]))
            .collect();
    }
    s.insert("kernel modules", Json::Array(modules));
    // The CNI and kube-proxy are the control planes' settings.
    if legacy["machine"]["type"] != "controlplane" {
        return s;
    }
    let cni = if kind("KubeNetworkConfig").is_some() {
        if kind("KubeFlannelCNIConfig").is_some() {
            "flannel"
        } else {
            "none"
        }
        .into()
    } else {
        legacy["cluster"]["network"]["cni"]["name"]
            .as_str()
            .unwrap_or("flannel")
            .into()
    };
    s.insert("cni", Json::String(cni));
    let proxy_off = match kind("KubeProxyConfig") {
        Some(d) => d["enabled"].as_bool() == Some(false),
        None => legacy["cluster"]["proxy"]["disabled"].as_bool() == Some(true),
    };
    s.insert("kube-proxy disabled", Json::Bool(proxy_off));
    s.insert(
        "apiserver args",
        pick(
            kind("KubeAPIServerConfig").and_then(|d| d.get("extraArgs")),
            &legacy["cluster"]["apiServer"]["extraArgs"],
        ),
    );
    let mut manifests: Vec<Json> = all("KubeExternalManifestConfig")
        .map(|d| json(d.get("url")))
        .collect();
    if manifests.is_empty() {
        manifests = legacy["cluster"]["extraManifests"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|u| json(Some(u)))
            .collect();
    }
    s.insert("extra manifests", Json::Array(manifests));
    s
}

/// The node's link settings: addresses, gateways and VIP.
fn link(docs: &[Value], legacy: &Value) -> Json {
    if let Some(l) = docs
        .iter()
        .find(|d| d["kind"] == "LinkConfig" && d["name"] == "eth0")
    {
        let vip = docs
            .iter()
            .find(|d| d["kind"] == "Layer2VIPConfig" && d["link"] == "eth0")
            .and_then(|d| d["name"].as_str());
        let addresses: Vec<&str> = l["addresses"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|a| a["address"].as_str())
            .collect();
        let gateways: Vec<&str> = l["routes"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|r| r["gateway"].as_str())
            .collect();
        return json!({"addresses": addresses, "gateways": gateways, "vip": vip});
    }
    let Some(i) = legacy["machine"]["network"]["interfaces"]
        .as_sequence()
        .and_then(|l| l.first())
    else {
        return Json::Null;
    };
    let addresses: Vec<&str> = i["addresses"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let gateways: Vec<&str> = i["routes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|r| r["gateway"].as_str())
        .collect();
    json!({"addresses": addresses, "gateways": gateways, "vip": i["vip"]["ip"].as_str()})
}

/// The lab at Talos v1.14.0: the simulator's nodes boot 1.14, the lab's patch tree is
/// migrated, and the main job runs end to end on the 1.14 documents (the simulator refuses
/// a legacy field beside its document, as Talos does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lab_runs_end_to_end_at_talos_1_14() {
    use crate::support::lab::Lab;
    let lab = Lab::start_at("20.1", std::time::Duration::from_millis(100), "v1.14.0").await;
    lab.write_topology(|t| {
        t.replace("talos_version: v1.13.8", "talos_version: v1.14.0")
            .replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.37.0")
    });
    lab.import_secrets().await;
    // Unmigrated, the tree is refused before anything is made.
    let out = lab.run(&["plan"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("kubelet config is already set in v1alpha1 config"));
    let out = lab
        .run(&["patches", "migrate", "--to", "v1.14", "--write"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply failed: {}", stderr(&out));
    // Every node runs a 1.14 config: no deprecated field, the add-ons inline as documents.
    let configs: Vec<String> = ["talos-controlplane-01", "talos-worker-01", "talos-gpu-01"]
        .iter()
        .map(|host| {
            stdout(
                &std::process::Command::new(crate::support::cli::BIN)
                    .args(["output", "machineconfig", host, "-raw", "-f"])
                    .arg(lab.topology())
                    .output()
                    .expect("output"),
            )
        })
        .collect();
    for (i, text) in configs.iter().enumerate() {
        let docs = talosprov_patch::document::parse_documents(text).expect("config");
        assert!(docs.iter().any(|d| d["kind"] == "KubeletConfig"), "{i}");
        let legacy = docs
            .iter()
            .find(|d| d.get("kind").is_none())
            .expect("v1alpha1");
        assert!(legacy["machine"].get("kubelet").is_none());
        assert!(legacy["cluster"].get("network").is_none());
    }
    assert!(configs[0].contains("kind: KubeInlineManifestConfig"));
    // kubectl, the independent client: every node Ready (the CNI add-on came inline).
    let kubeconfig = lab.dir.path().join("kubeconfig");
    let path = kubeconfig.to_str().expect("path");
    let out = lab.run(&["output", "kubeconfig", "--out-file", path]).await;
    assert!(out.status.success());
    let nodes = crate::support::kubectl::kubectl(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {.status.nodeInfo.kubeletVersion}\n{end}",
        ],
    );
    assert_eq!(nodes.lines().count(), 3, "{nodes}");
    for line in nodes.lines() {
        assert!(line.contains("=True v1.37.0"), "{nodes}");
    }
    // Converged: a second plan has nothing to do, and health passes.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = lab.run(&["health"]).await;
    assert!(out.status.success(), "{}", stdout(&out));

    // Day two on the 1.14 documents. The Kubernetes CA rotates through
    // KubeAPIServerCAConfig's acceptedCAs: kubectl is refused with the old kubeconfig.
    let out = lab
        .run(&["rotate-ca", "--kubernetes", "-auto-approve"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let refused = crate::support::kubectl::kubectl_output(&kubeconfig, &["get", "nodes"]);
    assert!(!refused.status.success(), "the old kubeconfig still works");
    let out = lab.run(&["output", "kubeconfig", "--out-file", path]).await;
    assert!(out.status.success());
    crate::support::kubectl::kubectl(&kubeconfig, &["get", "nodes"]);
    // A Kubernetes upgrade edits KubeletConfig and the control-plane documents' images.
    lab.write_topology(|t| {
        t.replace("talos_version: v1.13.8", "talos_version: v1.14.0")
            .replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.37.1")
    });
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let versions = crate::support::kubectl::kubectl(
        &kubeconfig,
        &[
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].status.nodeInfo.kubeletVersion}",
        ],
    );
    assert_eq!(versions, "v1.37.1 v1.37.1 v1.37.1");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// A 1.13 cluster moved to 1.14: the patch tree migrated, the rolling upgrade installs 1.14
/// on each node (through the Lifecycle API) and only then applies its 1.14 config, which a
/// 1.13 node would refuse (the simulator, like Talos 1.13, has no such documents).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_13_cluster_upgrades_to_1_14_with_its_migrated_patches() {
    use crate::support::lab::Lab;
    let lab = Lab::start_at("20.2", std::time::Duration::from_millis(100), "v1.13.8").await;
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // A 1.13 node refuses a 1.14 document, as Talos 1.13 would.
    let client = talosprov_talos::client::TalosClient::connect_secure(
        lab.ips[1].parse().expect("ip"),
        &lab.talos_credentials().await,
    )
    .await
    .expect("connect");
    let refused = client
        .apply_configuration(
            b"version: v1alpha1\nmachine: {type: worker}\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k\n",
            &talosprov_talos::types::ApplyOptions {
                dry_run: true,
                ..talosprov_talos::types::ApplyOptions::default()
            },
        )
        .await
        .expect_err("a 1.13 node knows no KubeletConfig");
    assert!(
        refused
            .to_string()
            .contains("not registered: \"KubeletConfig\""),
        "{refused}"
    );
    lab.write_topology(|t| t.replace("talos_version: v1.13.8", "talos_version: v1.14.0"));
    let out = lab
        .run(&["patches", "migrate", "--to", "v1.14", "--write"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let plan = lab.plan_text().await;
    assert_eq!(
        plan.matches("~ upgrade talos v1.13.8 -> v1.14.0 (reboot)")
            .count(),
        3,
        "{plan}"
    );
    // The settings Talos applies only at bootstrap moved, but none of them changed.
    let out = lab.run(&["plan"]).await;
    let shown = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !shown.contains("applied only when the cluster is bootstrapped"),
        "{shown}"
    );
    let before = lab.sim.as_ref().expect("simulator").rpc_log().len();
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // Each node: the Lifecycle API's upgrade, then (and only then) its 1.14 config.
    let log = lab.sim.as_ref().expect("simulator").rpc_log()[before..].to_vec();
    for ip in &lab.ips {
        let ip: std::net::IpAddr = ip.parse().expect("ip");
        let ok = |e: &talosprov_sim::state::LoggedRpc, rpc: &str| {
            e.node == ip && e.rpc == rpc && e.code == tonic::Code::Ok
        };
        let upgrade = log
            .iter()
            .position(|e| ok(e, "LifecycleService/Upgrade"))
            .unwrap_or_else(|| panic!("{ip}: no LifecycleService/Upgrade"));
        assert!(
            !log[..upgrade].iter().any(|e| ok(e, "ApplyConfiguration")),
            "{ip}: a config applied before the upgrade"
        );
        assert!(
            log[upgrade..].iter().any(|e| ok(e, "ApplyConfiguration")),
            "{ip}: no config applied after the upgrade"
        );
    }
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = lab.run(&["health"]).await;
    assert!(out.status.success(), "{}", stdout(&out));
    let config = stdout(
        &lab.run(&["output", "machineconfig", "talos-worker-01", "-raw"])
            .await,
    );
    assert!(config.contains("kind: KubeletConfig"), "{config}");
}
