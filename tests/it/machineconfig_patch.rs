//! `talosprov machineconfig patch`: strategic-merge and JSON 6902 patches (in
//! JSON and YAML) applied to a config file, the refusal of JSON patches on a
//! multi-document config, and the output file.

use crate::support::cli::talosprov;
use predicates::str::contains;
use std::path::{Path, PathBuf};

const CONFIG: &str = "\
version: v1alpha1
machine:
  type: controlplane
  network:
    hostname: talos-cp-01
    interfaces:
      - interface: eth0
        addresses: [192.168.1.121/24]
        routes:
          - network: 0.0.0.0/0
            gateway: 192.168.1.1
cluster:
  clusterName: homelab
  network:
    podSubnets: [10.244.0.0/16]
  inlineManifests:
    - name: hello
      contents: |-
        apiVersion: v1
        kind: Namespace
";

const HOSTNAME_CONFIG: &str = "---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n";

struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Self {
        Dir(tempfile::tempdir().unwrap())
    }
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn patch(config: &Path, patches: &[&str]) -> assert_cmd::assert::Assert {
    let mut cmd = talosprov();
    cmd.arg("machineconfig").arg("patch").arg(config);
    for p in patches {
        cmd.arg("--patch").arg(p);
    }
    cmd.assert()
}

/// The stdout of a run that must have succeeded (UTF-8 checked).
fn patched(a: assert_cmd::assert::Assert) -> String {
    String::from_utf8(a.success().get_output().stdout.clone()).unwrap()
}

#[test]
fn strategic_patch_file_merges_into_the_config() {
    let dir = Dir::new();
    let config = dir.file("controlplane.yaml", CONFIG);
    let vip = dir.file(
        "vip.yaml",
        "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          ip: 192.168.1.120\ncluster:\n  network:\n    podSubnets: [10.42.0.0/16]\n",
    );
    let out = patched(patch(&config, &[vip.to_str().unwrap()]));
    insta::assert_snapshot!(out);
}

#[test]
fn at_file_and_inline_patches_apply_in_order() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", CONFIG);
    let first = dir.file("first.yaml", "machine:\n  network:\n    hostname: first\n");
    let at = format!("@{}", first.display());
    let out = patched(patch(
        &config,
        &[
            &at,
            "{\"machine\": {\"network\": {\"hostname\": \"second\"}}}",
        ],
    ));
    assert!(out.contains("hostname: second"), "{out}");
}

#[test]
fn json6902_patch_in_json_applies() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", CONFIG);
    let ops = dir.file(
        "ops.json",
        r#"[{"op": "replace", "path": "/machine/network/hostname", "value": "renamed"},
            {"op": "add", "path": "/machine/network/interfaces/0/mtu", "value": 9000}]"#,
    );
    let out = patched(patch(&config, &[ops.to_str().unwrap()]));
    assert!(out.contains("hostname: renamed"), "{out}");
    assert!(out.contains("mtu: 9000"), "{out}");
}

#[test]
fn json6902_patch_in_yaml_applies() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", CONFIG);
    let ops = dir.file(
        "ops.yaml",
        "- op: remove\n  path: /cluster/inlineManifests\n- op: add\n  path: /machine/certSANs\n  value: [talos.example.com]\n",
    );
    let out = patched(patch(&config, &[ops.to_str().unwrap()]));
    assert!(!out.contains("inlineManifests"), "{out}");
    assert!(
        out.contains("certSANs:\n        - talos.example.com"),
        "{out}"
    );
}

#[test]
fn json6902_patch_on_a_multi_document_config_is_refused() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", &format!("{CONFIG}{HOSTNAME_CONFIG}"));
    let ops = dir.file(
        "ops.json",
        r#"[{"op": "add", "path": "/machine/x", "value": 1}]"#,
    );
    patch(&config, &[ops.to_str().unwrap()])
        .failure()
        .code(1)
        .stderr(contains(
            "JSON6902 patches are not supported for multi-document machine configuration",
        ))
        .stderr(contains("ops.json"));
}

#[test]
fn strategic_patch_on_a_multi_document_config_merges_by_kind() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", &format!("{CONFIG}{HOSTNAME_CONFIG}"));
    let hostname = dir.file(
        "h.yaml",
        "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: \"off\"\nhostname: cp-01\n",
    );
    let out = patched(patch(&config, &[hostname.to_str().unwrap()]));
    assert!(
        out.ends_with(
            "---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\nhostname: cp-01\n"
        ),
        "{out}"
    );
}

#[test]
fn a_failed_delete_names_the_patch_and_path() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", "version: v1alpha1\nmachine: {}\n");
    let del = dir.file(
        "del.yaml",
        "machine:\n  network:\n    hostname:\n      $patch: delete\n",
    );
    patch(&config, &[del.to_str().unwrap()])
        .failure()
        .stderr(contains("del.yaml"))
        .stderr(contains("machine.network.hostname"));
}

#[test]
fn output_file_is_written_private() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", CONFIG);
    let out = dir.0.path().join("out/patched.yaml");
    talosprov()
        .args(["machineconfig", "patch"])
        .arg(&config)
        .args([
            "-p",
            "{\"machine\": {\"network\": {\"hostname\": \"x\"}}}",
            "-o",
        ])
        .arg(&out)
        .assert()
        .success()
        .stdout("");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("hostname: x"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn a_patch_that_is_neither_kind_is_reported() {
    let dir = Dir::new();
    let config = dir.file("c.yaml", CONFIG);
    let bad = dir.file("bad.yaml", "foo: bar\n");
    patch(&config, &[bad.to_str().unwrap()])
        .failure()
        .stderr(contains("cannot load patch"))
        .stderr(contains("missing kind"));
}

#[test]
fn patch_help_is_written_for_users() {
    let out = talosprov()
        .args(["machineconfig", "patch", "--help"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    insta::assert_snapshot!(String::from_utf8(out).unwrap());
}
