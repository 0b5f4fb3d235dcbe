//! `talosprov machineconfig gen` and `talosprov secrets gen` as a user runs them.

use crate::support::cli::talosprov;
use crate::support::fixtures::SECRETS_FILE;
use serde_yaml_ng::Value;

fn gen_config(extra: &[&str]) -> assert_cmd::assert::Assert {
    talosprov()
        .args([
            "machineconfig",
            "gen",
            "--cluster-name",
            "homelab",
            "--endpoint",
            "https://192.168.1.120:6443",
        ])
        .args(["--secrets", SECRETS_FILE])
        .args(extra)
        .assert()
}

fn documents(stdout: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(stdout).unwrap();
    text.split("\n---\n")
        .map(|d| serde_yaml_ng::from_str(d).unwrap())
        .collect()
}

#[test]
fn machineconfig_gen_prints_the_base_config_without_install_fields_not_given() {
    let out = gen_config(&[
        "--type",
        "worker",
        "--talos-version",
        "v1.13.0",
        "--kubernetes-version",
        "v1.28.0",
    ])
    .success();
    let docs = documents(&out.get_output().stdout);
    assert_eq!(docs.len(), 2);
    let install = &docs[0]["machine"]["install"];
    assert!(install.get("disk").is_none() && install.get("image").is_none());
    assert_eq!(
        docs[0]["machine"]["kubelet"]["image"],
        "ghcr.io/siderolabs/kubelet:v1.28.0"
    );
    assert_eq!(docs[1]["kind"], "HostnameConfig");
}

#[test]
fn machineconfig_gen_output_writes_the_same_config_to_a_private_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controlplane.yaml");
    let to_file = gen_config(&["--type", "controlplane", "-o", path.to_str().unwrap()]).success();
    assert!(
        to_file.get_output().stdout.is_empty(),
        "nothing on stdout with -o"
    );
    let printed = gen_config(&["--type", "controlplane"]).success();
    assert_eq!(std::fs::read(&path).unwrap(), printed.get_output().stdout);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

#[test]
fn machineconfig_gen_writes_install_disk_and_image_when_given() {
    let out = gen_config(&[
        "--type",
        "controlplane",
        "--install-disk",
        "/dev/vda",
        "--install-image",
        "factory.talos.dev/nocloud-installer/abc:v1.13.9",
    ])
    .success();
    let docs = documents(&out.get_output().stdout);
    assert_eq!(docs[0]["machine"]["install"]["disk"], "/dev/vda");
    assert_eq!(
        docs[0]["machine"]["install"]["image"],
        "factory.talos.dev/nocloud-installer/abc:v1.13.9"
    );
    assert_eq!(
        docs[0]["cluster"]["apiServer"]["image"],
        "registry.k8s.io/kube-apiserver:v1.36.3"
    );
}

#[test]
fn machineconfig_gen_warns_about_versions_outside_the_contracts() {
    let out = gen_config(&[
        "--type",
        "worker",
        "--talos-version",
        "v1.15.0",
        "--kubernetes-version",
        "1.38.0",
    ])
    .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr);
    assert!(
        stderr.contains("Warning: Talos v1.15.0 is newer"),
        "{stderr}"
    );
}

#[test]
fn machineconfig_gen_writes_the_v1_14_documents_for_talos_1_14() {
    let out = gen_config(&[
        "--type",
        "worker",
        "--talos-version",
        "v1.14.1",
        "--install-disk",
        "/dev/sda",
    ])
    .success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr);
    assert!(!stderr.contains("Warning"), "{stderr}");
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    assert!(docs[0]["machine"].get("install").is_none(), "{text}");
    assert!(docs[0]["machine"].get("kubelet").is_none(), "{text}");
    let kubelet = docs
        .iter()
        .find(|d| d["kind"] == "KubeletConfig")
        .expect("a KubeletConfig document");
    assert_eq!(kubelet["image"], "ghcr.io/siderolabs/kubelet:v1.37.0");
    let install = docs
        .iter()
        .find(|d| d["kind"] == "UnattendedInstallConfig")
        .expect("an UnattendedInstallConfig document");
    assert_eq!(
        install["provisioning"]["diskSelector"]["match"],
        "disk.dev_path == \"/dev/sda\""
    );
}

#[test]
fn machineconfig_gen_refuses_a_missing_secrets_file() {
    talosprov()
        .args([
            "machineconfig",
            "gen",
            "--type",
            "worker",
            "--cluster-name",
            "c",
            "--endpoint",
            "https://c:6443",
        ])
        .args(["--secrets", "/nonexistent/secrets.yaml"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains(
            "cannot read the secrets bundle /nonexistent/secrets.yaml",
        ));
}

#[cfg(unix)]
#[test]
fn secrets_gen_writes_a_private_file_and_does_not_overwrite_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets.yaml");
    talosprov()
        .args(["secrets", "gen", "-o"])
        .arg(&path)
        .assert()
        .success();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(talosprov_machine::secrets_file::parse_secrets_yaml(&text).is_ok());
    talosprov()
        .args(["secrets", "gen", "-o"])
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("already exists"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}
