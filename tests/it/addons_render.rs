//! Bootstrap add-ons in the machine configs: `render` of the lab shows its CNI
//! and device-plugin add-ons in every control plane's `cluster.inlineManifests`
//! (and in no worker's), rendered from its minijinja template, and a change to the
//! manifest changes the control planes' configs only.

use crate::support::cli::{stderr, stdout, talosprov};
use crate::support::fixtures::{SECRETS_FILE, copy_tree, repo};
use serde::Deserialize as _;
use std::path::Path;

/// A copy of the lab topology, its patches and its add-ons in a folder of
/// its own.
fn lab_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = std::fs::read_to_string(repo().join("examples/lab/cluster.yaml"))
        .expect("lab topology")
        .replace("ca_file: .run/ca.pem", "insecure: true")
        .replace("../../patches", "patches");
    std::fs::write(dir.path().join("cluster.yaml"), text).expect("write topology");
    copy_tree(&repo().join("patches"), &dir.path().join("patches"));
    copy_tree(
        &repo().join("examples/lab/addons"),
        &dir.path().join("addons"),
    );
    dir
}

/// `talosprov render` of `node` in `dir`: its config text.
fn render(dir: &Path, node: &str) -> String {
    let out = talosprov()
        .current_dir(dir)
        .env("PROXMOX_VE_ENDPOINT", "https://127.0.0.110:8006")
        .args([
            "render",
            "-f",
            "cluster.yaml",
            "--secrets",
            SECRETS_FILE,
            node,
        ])
        .output()
        .expect("run talosprov");
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

/// The v1alpha1 document's `cluster.inlineManifests` of a rendered config.
fn inline_manifests(config: &str) -> Vec<(String, String)> {
    serde_yaml_ng::Deserializer::from_str(config)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("yaml"))
        .find(|d| d.get("machine").is_some())
        .and_then(|d| d["cluster"]["inlineManifests"].as_sequence().cloned())
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_owned(),
                m["contents"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn control_planes_carry_the_bootstrap_addon_and_workers_do_not() {
    let dir = lab_copy();
    let cp = inline_manifests(&render(dir.path(), "talos-controlplane-01"));
    let names: Vec<&str> = cp.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["lab-cni", "nvidia-device-plugin"]);
    let (_, contents) = &cp[0];
    let objects: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(contents)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("object"))
        .collect();
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(kinds, ["ServiceAccount", "DaemonSet"]);
    let ds = &objects[1];
    assert_eq!(ds["metadata"]["namespace"], "kube-system");
    assert_eq!(
        ds["metadata"]["labels"]["app.kubernetes.io/part-of"], "lab",
        "templated"
    );
    assert_eq!(
        ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"],
        "/etc/cni/net.d"
    );
    for worker in ["talos-worker-01", "talos-gpu-01"] {
        assert!(
            inline_manifests(&render(dir.path(), worker)).is_empty(),
            "{worker}"
        );
    }
}

#[test]
fn a_changed_manifest_changes_the_control_plane_configs_only() {
    let dir = lab_copy();
    let before: Vec<String> = ["talos-controlplane-01", "talos-worker-01"]
        .iter()
        .map(|n| render(dir.path(), n))
        .collect();
    let file = dir.path().join("addons/lab-cni.yaml.j2");
    let text = std::fs::read_to_string(&file).expect("manifest");
    std::fs::write(&file, text.replace("pause:3.10", "pause:3.11")).expect("write");
    let after: Vec<String> = ["talos-controlplane-01", "talos-worker-01"]
        .iter()
        .map(|n| render(dir.path(), n))
        .collect();
    assert_ne!(before[0], after[0]);
    assert!(after[0].contains("pause:3.11"));
    assert_eq!(before[1], after[1]);
}

#[test]
fn plan_lists_every_object_of_every_addon_as_a_server_side_apply() {
    let dir = lab_copy();
    let path = dir.path().join("cluster.yaml");
    let text = std::fs::read_to_string(&path).expect("topology");
    std::fs::write(
        &path,
        format!("{text}  later:\n    manifests: [addons/lab-cni.yaml.j2]\n    namespace: later\n"),
    )
    .expect("write");
    let out = talosprov()
        .current_dir(dir.path())
        .env("PROXMOX_VE_ENDPOINT", "https://127.0.0.110:8006")
        .env("NO_COLOR", "1")
        .args(["plan", "-refresh=false", "-f", "cluster.yaml"])
        .output()
        .expect("run talosprov");
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        !err.lines().any(|l| l.contains("add-on")),
        "no add-on is left out:\n{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Every object of every add-on, the `phase: cluster` one's namespace
    // first; the bootstrap ones too (taken over after Talos applied them).
    for address in [
        "addon/later/Namespace/later",
        "addon/later/DaemonSet.apps/later/lab-cni",
        "addon/lab-cni/DaemonSet.apps/kube-system/lab-cni",
        "addon/nvidia-device-plugin/DaemonSet.apps/kube-system/nvidia-device-plugin-daemonset",
    ] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("+ {address}"))),
            "{address} in:\n{text}"
        );
    }
    let at = |a: &str| text.find(a).unwrap_or_else(|| panic!("{a} in:\n{text}"));
    assert!(at("addon/later/Namespace/later") < at("addon/later/DaemonSet.apps/later/lab-cni"));
}

/// A loopback HTTP server that answers every request with `body`; its URL.
fn serve(body: &'static str) -> String {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/deploy/standalone-install.yaml",
        listener.local_addr().expect("addr")
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

const APPROVER: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: approver\n---\n\
    apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: approver\nspec: {replicas: 1}\n";

/// The lab copy with a `url` add-on of `phase: bootstrap` pinned to `sha256`.
fn with_download(url: &str, sha256: &str) -> tempfile::TempDir {
    let dir = lab_copy();
    let path = dir.path().join("cluster.yaml");
    let text = std::fs::read_to_string(&path).expect("topology");
    std::fs::write(
        &path,
        format!(
            "{text}  approver:\n    url: {url}\n    sha256: {sha256}\n    namespace: approver\n    phase: bootstrap\n"
        ),
    )
    .expect("write");
    dir
}

#[test]
fn a_downloaded_bootstrap_addon_is_checked_and_goes_inline() {
    use sha2::Digest as _;
    let url = serve(APPROVER);
    let sha = hex::encode(sha2::Sha256::digest(APPROVER.as_bytes()));
    let dir = with_download(&url, &sha);
    let cp = inline_manifests(&render(dir.path(), "talos-controlplane-01"));
    let names: Vec<&str> = cp.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["lab-cni", "nvidia-device-plugin", "approver"]);
    let contents = &cp[2].1;
    assert!(
        contents.starts_with("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: approver\n"),
        "{contents}"
    );
    assert!(
        contents.contains("kind: Deployment\nmetadata:\n  name: approver\n  namespace: approver\n"),
        "{contents}"
    );

    let wrong = "f".repeat(64);
    let dir = with_download(&url, &wrong);
    let out = talosprov()
        .current_dir(dir.path())
        .env("PROXMOX_VE_ENDPOINT", "https://127.0.0.110:8006")
        .env("NO_COLOR", "1")
        .args([
            "render",
            "-f",
            "cluster.yaml",
            "--secrets",
            SECRETS_FILE,
            "talos-controlplane-01",
        ])
        .output()
        .expect("run talosprov");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("error[A004 addon-checksum]: add-on `approver`:"),
        "{err}"
    );
    assert!(
        err.contains(&format!("has SHA-256 {sha}, and the topology pins {wrong}")),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "nothing rendered");
}
