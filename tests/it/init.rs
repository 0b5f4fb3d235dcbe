//! `talosprov init DIR`: the scaffold it writes is a cluster `validate` accepts,
//! for several flag combinations; it never overwrites a file; `--gitlab` adds
//! the pipeline; and the `.gitignore` covers what talosprov writes beside the
//! topology.

use std::path::Path;

use crate::support::cli::{stderr, stdout, talosprov};
use crate::support::fixtures::{HELM_STAND_IN, SECRETS_FILE};

/// Runs `talosprov args` in `dir` with the helm stand-in (the scaffold's
/// add-ons are Helm charts) and a Proxmox endpoint from the environment (the
/// scaffold leaves it out unless `--proxmox-endpoint`).
fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    talosprov()
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env("TALOSPROV_HELM", HELM_STAND_IN)
        .env("PROXMOX_VE_ENDPOINT", "https://127.0.0.1:8006")
        .env_remove("TF_HTTP_ADDRESS")
        .args(args)
        .output()
        .expect("run talosprov")
}

fn assert_ok(out: &std::process::Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}\nstdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
}

/// Every file under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).expect("under base");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `init` then `validate` on the result: both exit 0.
fn init_and_validate(flags: &[&str]) -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut args = vec!["init", "lab"];
    args.extend_from_slice(flags);
    let out = run(tmp.path(), &args);
    assert_ok(&out, &format!("init {flags:?}"));
    let out = run(tmp.path(), &["validate", "-f", "lab/cluster.yaml"]);
    assert_ok(&out, &format!("validate after init {flags:?}"));
    let topology = std::fs::read_to_string(tmp.path().join("lab/cluster.yaml")).expect("read");
    (tmp, topology)
}

#[test]
fn init_with_defaults_is_valid_with_one_control_plane() {
    let (tmp, topology) = init_and_validate(&[]);
    assert!(topology.starts_with("# yaml-language-server: $schema=cluster.schema.json\n"));
    assert!(topology.contains("  - hostname: lab-cp-01\n    ip: 192.168.1.121\n"));
    assert_eq!(topology.matches("  - hostname: ").count(), 1);
    assert!(topology.contains("  vip: 192.168.1.120\n"));
    assert!(topology.contains("  cilium:\n"));
    assert!(!topology.contains("gpu-operator"));
    assert_eq!(
        tree(&tmp.path().join("lab")),
        [
            ".gitignore",
            "cluster.schema.json",
            "cluster.yaml",
            "patches/common/40-kubelet.yaml",
            "patches/controlplane/10-network-vip.yaml.tftpl",
            "patches/controlplane/20-cluster-cni-proxy.yaml",
            "patches/controlplane/30-extra-manifests.yaml",
        ]
    );
    // The schema its first line names is there, and is `talosprov schema`'s.
    let schema = talosprov().arg("schema").output().expect("run talosprov");
    assert_eq!(
        std::fs::read(tmp.path().join("lab/cluster.schema.json")).expect("schema"),
        schema.stdout
    );
}

/// The lines of `cluster:` that pin a version, as a topology spells them.
fn version_pins(topology: &str) -> Vec<&str> {
    topology
        .lines()
        .filter(|l| l.starts_with("  talos_version: ") || l.starts_with("  kubernetes_version: "))
        .collect()
}

#[test]
fn init_pins_the_versions_of_the_reference_cluster() {
    let (_tmp, topology) = init_and_validate(&[]);
    let reference = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/homelab/cluster.yaml"),
    )
    .expect("read the reference cluster");
    let pins = version_pins(&topology);
    assert_eq!(pins.len(), 2, "{topology}");
    assert_eq!(pins, version_pins(&reference));
    let expected = [
        format!(
            "  talos_version: {}",
            talosprov_base::version::REFERENCE_TALOS_VERSION
        ),
        format!(
            "  kubernetes_version: v{}",
            talosprov_base::version::reference_kubernetes_version()
        ),
    ];
    assert_eq!(pins, expected);
}

#[test]
fn init_with_workers_gpus_and_an_endpoint_is_valid() {
    let (tmp, topology) = init_and_validate(&[
        "--name",
        "edge",
        "--vip",
        "10.20.0.100",
        "--gateway",
        "10.20.0.254",
        "--controlplane",
        "10.20.0.101",
        "--controlplane",
        "10.20.0.102",
        "--controlplane",
        "10.20.0.103",
        "--worker",
        "10.20.0.21",
        "--gpu",
        "10.20.0.131=rtx-a",
        "--gpu",
        "10.20.0.132=rtx-b",
        "--proxmox-endpoint",
        "https://pve.example:8006",
    ]);
    for host in [
        "edge-cp-01",
        "edge-cp-02",
        "edge-cp-03",
        "edge-wk-01",
        "edge-gpu-01",
        "edge-gpu-02",
    ] {
        assert!(topology.contains(&format!("hostname: {host}\n")), "{host}");
    }
    // .21 is below Proxmox's first VM ID: the only explicit vm_id.
    assert_eq!(topology.matches("\n    vm_id: ").count(), 1, "{topology}");
    assert!(topology.contains("    ip: 10.20.0.21\n    vm_id: 1021\n"));
    assert!(topology.contains("  endpoint: \"https://pve.example:8006\"\n"));
    assert!(topology.contains("  nameservers: [10.20.0.254]\n"));
    assert!(topology.contains("  rtx-a:\n    path: \"0000:00:00\"\n"));
    assert!(topology.contains("        mapping: rtx-b\n"));
    assert!(topology.contains("  gpu-operator:\n"));
    // The mappings' ids are NVIDIA placeholders: validate says to fill them in,
    // and counts the GPU nodes as NVIDIA ones (no A007).
    let out = run(tmp.path(), &["validate", "-f", "lab/cluster.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("warning[T045 placeholder-pci-mapping]").count(),
        2,
        "{err}"
    );
    assert!(!err.contains("A007"), "{err}");
    assert!(topology.contains("siderolabs/nvidia-open-gpu-kernel-modules-production"));
    let dir = tmp.path().join("lab/patches/nodes");
    let mut nodes: Vec<String> = std::fs::read_dir(&dir)
        .expect("nodes folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["edge-gpu-01", "edge-gpu-02"]);
    let reference = std::fs::read_to_string(
        crate::support::fixtures::repo().join("patches/nodes/talos-gpu-01/30-nvidia-modules.yaml"),
    )
    .expect("reference patch");
    let written = std::fs::read_to_string(dir.join("edge-gpu-02/30-nvidia-modules.yaml"))
        .expect("written patch");
    assert_eq!(written, reference);
}

#[test]
fn init_vlan_and_data_disks_reach_the_validated_topology() {
    let flags = [
        "--worker",
        "192.168.1.131",
        "--gpu",
        "192.168.1.132=gpu",
        "--vlan",
        "20",
        "--data-disk",
        "200:/var/mnt/longhorn",
        "--data-disk",
        "50",
        "--proxmox-endpoint",
        "https://pve.example:8006",
    ];
    let (tmp, _) = init_and_validate(&flags);
    let out = run(
        tmp.path(),
        &["validate", "-f", "lab/cluster.yaml", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let t = &v["topology"];
    assert_eq!(t["proxmox"]["networks"][0]["vlan"], 20);
    for node in t["nodes"].as_array().expect("nodes") {
        assert_eq!(node["networks"][0]["vlan"], 20, "{node}");
        assert_eq!(node["networks"][0]["bridge"], "vmbr0", "{node}");
        let disks = node["disks"].as_array().expect("disks");
        if node["role"] == "controlplane" {
            assert!(disks.is_empty(), "the workers have the data disks: {node}");
        } else {
            assert_eq!(disks.len(), 2, "{node}");
            assert_eq!(disks[0]["size_gib"], 200);
            assert_eq!(disks[0]["volume"], "longhorn");
            assert_eq!(disks[1]["size_gib"], 50);
            assert_eq!(disks[1]["volume"], serde_json::Value::Null);
        }
    }
    // A cluster of one control plane: the disks are on it.
    let (_tmp, topology) = init_and_validate(&["--data-disk", "30:/var/mnt/data"]);
    assert!(
        topology.contains("    disks:\n      - { size: 30, mount: /var/mnt/data }\n"),
        "{topology}"
    );
    for (flag, value, said) in [
        ("--vlan", "4095", "4095 is not in 1..=4094"),
        ("--data-disk", "0", "expected a size in GiB"),
        ("--data-disk", "10:/mnt/x", "is not under /var/mnt/"),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = run(tmp.path(), &["init", "lab", flag, value]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
        assert!(!tmp.path().join("lab").exists(), "nothing written");
    }
}

/// `validate -f lab/cluster.yaml` in `dir` with an environment of only
/// `env` and a PATH without helm: its exit code and all it printed.
fn validate_with_only(dir: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::env::split_paths(&inherited).filter(|d| !d.join("helm").exists()),
    )
    .expect("PATH");
    let mut cmd = talosprov();
    cmd.current_dir(dir)
        .env_clear()
        .env("NO_COLOR", "1")
        .env("PATH", path)
        .args(["validate", "-f", "lab/cluster.yaml"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run talosprov");
    (out.status.code(), stdout(&out) + &stderr(&out))
}

#[test]
fn init_next_steps_name_what_validate_needs_and_validate_needs_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(tmp.path(), &["init", "lab"]);
    assert_ok(&out, "init");
    let steps = stdout(&out);
    let before = &steps[..steps.find("talosprov validate").expect("a validate step")];
    for needed in [
        "Install helm, on PATH or named by TALOSPROV_HELM=",
        "validate fails with A011",
        "export PROXMOX_VE_ENDPOINT=https://HOST:8006   # validate needs it",
    ] {
        assert!(
            before.contains(needed),
            "{needed:?} before validate in:\n{steps}"
        );
    }
    // What the steps say is so: without the endpoint validate names it; with
    // it but without helm, each Helm add-on is A011.
    let endpoint = ("PROXMOX_VE_ENDPOINT", "https://127.0.0.1:8006");
    let (code, said) = validate_with_only(tmp.path(), &[("TALOSPROV_HELM", HELM_STAND_IN)]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("proxmox.endpoint") && said.contains("PROXMOX_VE_ENDPOINT"),
        "{said}"
    );
    let (code, said) = validate_with_only(tmp.path(), &[endpoint]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("A011"), "{said}");
    let (code, said) =
        validate_with_only(tmp.path(), &[endpoint, ("TALOSPROV_HELM", HELM_STAND_IN)]);
    assert_eq!(code, Some(0), "{said}");

    // With --proxmox-endpoint the file has it: only helm is left to get.
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = run(
        tmp.path(),
        &[
            "init",
            "lab",
            "--proxmox-endpoint",
            "https://pve.example:8006",
        ],
    );
    assert_ok(&out, "init --proxmox-endpoint");
    let steps = stdout(&out);
    let before = &steps[..steps.find("talosprov validate").expect("a validate step")];
    assert!(before.contains("TALOSPROV_HELM"), "{steps}");
    assert!(!before.contains("PROXMOX_VE_ENDPOINT"), "{steps}");
    let (code, said) = validate_with_only(tmp.path(), &[("TALOSPROV_HELM", HELM_STAND_IN)]);
    assert_eq!(code, Some(0), "{said}");
}

#[test]
fn init_refuses_an_existing_cluster_yaml_and_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("lab");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("cluster.yaml"), "mine\n").expect("write");
    let out = run(tmp.path(), &["init", "lab", "--gitlab"]);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    assert!(
        stderr(&out).contains("lab/cluster.yaml"),
        "{}",
        stderr(&out)
    );
    assert_eq!(tree(&dir), ["cluster.yaml"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("cluster.yaml")).unwrap(),
        "mine\n"
    );
}

#[test]
fn init_gitlab_writes_a_pipeline_with_the_example_jobs() {
    let (tmp, _) = init_and_validate(&["--gitlab", "--name", "prod"]);
    let text = std::fs::read_to_string(tmp.path().join("lab/.gitlab-ci.yml")).expect("read");
    let ci: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    for job in ["validate", "plan", "apply", "unlock-plan", "unlock-apply"] {
        assert!(ci.get(job).is_some(), "job {job} in:\n{text}");
    }
    // The jobs run the published image of this release; nothing is built.
    assert!(ci.get("build").is_none(), "a build job in:\n{text}");
    assert!(!text.contains("cargo"), "{text}");
    assert_eq!(
        ci["variables"]["TALOSPROV_VERSION"].as_str(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        ci[".talosprov"]["image"].as_str(),
        Some("registry.gitlab.com/talosprov/talosprov:${TALOSPROV_VERSION}")
    );
    assert_eq!(ci["variables"]["STATE_NAME"].as_str(), Some("prod"));
    assert_eq!(
        ci["apply"]["resource_group"].as_str(),
        Some("talosprov-prod")
    );
    let plan = ci["plan"]["script"][1].as_str().expect("plan script");
    assert!(
        plan.contains("-out plan.cache --report-gitlab plan.json"),
        "{plan}"
    );
    assert_eq!(ci["apply"]["rules"][0]["when"].as_str(), Some("manual"));
}

/// Whether a `.gitignore` pattern without a slash (all the scaffold's file
/// patterns) matches the file name `name`: `*` is any run of characters.
fn glob_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (head.len()..=name.len()).any(|i| glob_matches(tail, &name[i..]))
        }
    }
}

fn ignored(gitignore: &str, name: &str) -> bool {
    gitignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|p| glob_matches(p.trim_end_matches('/'), name))
}

#[test]
fn init_gitignore_covers_the_state_and_outputs_talosprov_writes() {
    let (tmp, _) = init_and_validate(&["--gitlab"]);
    let dir = tmp.path().join("lab");
    let before = tree(&dir);
    // An offline command that writes the state beside the topology.
    let out = run(
        tmp.path(),
        &["secrets", "import", SECRETS_FILE, "-f", "lab/cluster.yaml"],
    );
    assert_ok(&out, "secrets import");
    let gitignore = std::fs::read_to_string(dir.join(".gitignore")).expect("read");
    let written: Vec<String> = tree(&dir)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    assert!(
        written.contains(&"talosprov.tfstate".to_owned()),
        "{written:?}"
    );
    for f in &written {
        assert!(
            ignored(&gitignore, f),
            "{f} is not ignored by:\n{gitignore}"
        );
    }
    for name in [
        "talosprov.tfstate.backup",
        ".talosprov.tfstate.lock.info",
        ".talosprov-a1b2c3.tmp",
        "lab.plan",
        "plan.cache",
        "plan.json",
        "kubeconfig",
        "talosconfig",
        "secrets.yaml",
        "rendered",
    ] {
        assert!(ignored(&gitignore, name), "{name} is not ignored");
    }
    // The etcd snapshots apply writes next to the state hold every
    // Kubernetes secret, encrypted.
    let folder = talosprov_engine::backups::DEFAULT_FOLDER;
    assert!(ignored(&gitignore, folder), "{folder} is not ignored");
    for kept in [
        "cluster.yaml",
        ".gitlab-ci.yml",
        "patches",
        "cluster.schema.json",
    ] {
        assert!(!ignored(&gitignore, kept), "{kept} must not be ignored");
    }
}

#[test]
fn init_help() {
    let out = talosprov()
        .args(["init", "--help"])
        .output()
        .expect("run talosprov");
    assert!(out.status.success());
    insta::assert_snapshot!("init_help", stdout(&out));
}
