//! `talosprov validate` on every topology under tests/fixtures/invalid: the full
//! diagnostic output is snapshot-tested, each fixture reports the code it is
//! named after, and every diagnostic code has a fixture.

use crate::support::cli::{stderr, stdout, talosprov};
use crate::support::fixtures::fixture;
use std::path::PathBuf;
use talosprov_base::diagnostics::Code;

fn fixtures_dir() -> PathBuf {
    fixture("invalid")
}

fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures folder")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter_map(|n| n.strip_suffix(".yaml").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Run `validate -f <name>.yaml` from the fixtures folder, with no colour, no
/// Proxmox endpoint in the environment, and `TALOSPROV_HELM` set.
fn validate(name: &str) -> (i32, String, String) {
    // Helm add-ons find a `helm` program, except in the fixture about its absence.
    let helm = if name == "helm-not-found" {
        "/nonexistent/helm"
    } else {
        "/bin/sh"
    };
    let out = talosprov()
        .current_dir(fixtures_dir())
        .env_remove("PROXMOX_VE_ENDPOINT")
        .env("TALOSPROV_HELM", helm)
        .env("NO_COLOR", "1")
        .args(["validate", "-f", &format!("{name}.yaml")])
        .output()
        .expect("run talosprov");
    (out.status.code().unwrap_or(-1), stderr(&out), stdout(&out))
}

#[test]
fn every_invalid_fixture_output_matches_its_snapshot() {
    for name in fixtures() {
        let (code, stderr, stdout) = validate(&name);
        let text = format!("exit: {code}\n--- stderr\n{stderr}--- stdout\n{stdout}");
        insta::assert_snapshot!(name.clone(), text);
    }
}

#[test]
fn each_fixture_reports_the_code_it_is_named_after() {
    for name in fixtures().into_iter().filter(|n| n != "many-faults") {
        let code = Code::ALL
            .iter()
            .find(|c| c.name() == name)
            .unwrap_or_else(|| panic!("fixture {name}.yaml is not named after a diagnostic code"));
        let (status, stderr, _) = validate(&name);
        let tag = format!("[{} {}]", code.code(), code.name());
        assert!(
            stderr.contains(&tag),
            "{name}: expected {tag} in:\n{stderr}"
        );
        let is_warning = stderr.contains(&format!("warning{tag}"));
        assert_eq!(status, if is_warning { 0 } else { 1 }, "{name}:\n{stderr}");
    }
}

#[test]
fn every_diagnostic_code_has_a_fixture() {
    let names = fixtures();
    // Codes `validate` never gives, since it runs no add-on source (it is offline): each
    // has its own test with the command that gives it.
    // - addon-source-failed: `tests/it/sources_deadline.rs`, with `render`;
    // - pool-no-capacity (the hosts' free memory is read by a plan):
    //   `tests/it/pools_lab.rs`, with `plan`.
    let not_from_validate = ["addon-source-failed", "pool-no-capacity"];
    let missing: Vec<&str> = Code::ALL
        .iter()
        .map(|c| c.name())
        .filter(|n| !not_from_validate.contains(n))
        .filter(|n| !names.iter().any(|f| f == n))
        .collect();
    assert!(missing.is_empty(), "codes without a fixture: {missing:?}");
}

#[test]
fn several_faults_are_all_reported_in_one_run() {
    let (status, stderr, stdout) = validate("many-faults");
    assert_eq!(status, 1);
    assert!(stdout.is_empty());
    for tag in [
        "T016 invalid-hostname",
        "T031 invalid-version",
        "T029 invalid-extension",
        "T014 vip-is-node-ip",
        "T032 memory-below-minimum",
        "T011 duplicate-hostname",
        "T012 duplicate-ip",
        "T020 duplicate-vmid",
        "T010 invalid-role",
        "T002 unknown-key",
        "T028 unknown-schematic",
        "T023 invalid-hostpci-device",
        "T015 unknown-pci-mapping",
    ] {
        assert!(stderr.contains(tag), "missing {tag} in:\n{stderr}");
    }
    assert!(stderr.contains("15 errors, 0 warnings"), "{stderr}");
}

#[test]
fn json_output_lists_diagnostics_with_flat_positions() {
    let out = talosprov()
        .current_dir(fixtures_dir())
        .env_remove("PROXMOX_VE_ENDPOINT")
        .args(["validate", "-f", "duplicate-ip.yaml", "--json"])
        .output()
        .expect("run talosprov");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["valid"], false);
    assert_eq!(v["topology"], serde_json::Value::Null);
    // The first error (a warning may come first: these nodes have no schematic).
    let d = v["diagnostics"]
        .as_array()
        .and_then(|l| l.iter().find(|d| d["severity"] == "error"))
        .expect("an error");
    assert_eq!(d["code"], "T012");
    assert_eq!(d["name"], "duplicate-ip");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["file"], "duplicate-ip.yaml");
    assert_eq!(d["line"], 15);
    assert_eq!(d["column"], 5);
    assert_eq!(d["node"], "w-01");
    assert_eq!(d["field"], "nodes[1].ip");
}

#[test]
fn missing_file_is_an_error_naming_the_file() {
    let out = talosprov()
        .current_dir(fixtures_dir())
        .args(["validate", "-f", "does-not-exist.yaml"])
        .output()
        .expect("run talosprov");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read the topology file does-not-exist.yaml"),
        "{stderr}"
    );
}

/// A cluster of `nodes` nodes whose `common/` holds `files` patches of about `size` bytes.
fn patched_cluster(nodes: usize, files: usize, size: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let mut t = String::from(
        "cluster:\n  name: big\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n  \
         prefix_length: 16\n  nameservers: [10.0.0.1]\nproxmox:\n  node: pve1\n  \
         datastore: local-lvm\n  image_storage: local\n  bridge: vmbr0\n  \
         endpoint: https://127.0.0.1:8006\nschematics:\n  base: {}\ndefault_schematic: base\n\
         nodes:\n",
    );
    for i in 0..nodes {
        let role = if i == 0 { "controlplane" } else { "worker" };
        t.push_str(&format!(
            "  - {{hostname: n{i}, ip: 10.0.{}.{}, role: {role}, vm_id: {}, cores: 2, \
             memory: 4096, disk_size: 20}}\n",
            1 + i / 200,
            10 + i % 200,
            1000 + i
        ));
    }
    std::fs::write(dir.path().join("cluster.yaml"), t).expect("write");
    let common = dir.path().join("patches/common");
    std::fs::create_dir_all(&common).expect("mkdir");
    for k in 0..files {
        let pad = "x".repeat(size.saturating_sub(40));
        std::fs::write(
            common.join(format!("{k:03}.yaml")),
            format!("machine:\n  nodeLabels:\n    l{}: \"{pad}\"\n", k % 10),
        )
        .expect("write");
    }
    dir
}

#[test]
fn patch_bytes_over_the_command_budget_are_a_located_error_before_any_render() {
    use talosprov_base::budgets::COMMAND_ENV;
    let dir = patched_cluster(20, 4, 1000);
    let run = |budget: &str| {
        talosprov()
            .current_dir(dir.path())
            .args(["validate", "-f", "cluster.yaml"])
            .env_remove("PROXMOX_VE_ENDPOINT")
            .env(COMMAND_ENV, budget)
            .output()
            .expect("run")
    };
    let out = run("64KiB");
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("T043"), "{text}");
    assert!(
        text.contains("the nodes merge 77.7 KiB of patches in all"),
        "{text}"
    );
    assert!(text.contains("64.0 KiB per command"), "{text}");
    assert!(text.contains(COMMAND_ENV), "says how to raise it: {text}");
    // `render` of one node obeys the budget of the whole command.
    let out = talosprov()
        .current_dir(dir.path())
        .args(["render", "-f", "cluster.yaml", "n1"])
        .env_remove("PROXMOX_VE_ENDPOINT")
        .env(COMMAND_ENV, "64KiB")
        .output()
        .expect("run");
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("64.0 KiB per command"),
        "render of one node: {text}"
    );
    // Raised, the same tree validates.
    let out = run("1MiB");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A value that is not a size is refused by name.
    let out = run("lots");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(COMMAND_ENV), "{}", stderr(&out));
}

#[test]
fn template_budgets_are_named_in_their_errors_and_raised_by_their_variables() {
    use talosprov_base::budgets::{TEMPLATE_VALUE_ENV, TEMPLATE_WORK_ENV};
    let dir = patched_cluster(2, 0, 0);
    let tpl = dir.path().join("patches/common/10-labels.yaml.j2");
    let run = |vars: &[(&str, &str)]| {
        let mut cmd = talosprov();
        cmd.current_dir(dir.path())
            .args(["validate", "-f", "cluster.yaml"])
            .env_remove("PROXMOX_VE_ENDPOINT");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd.output().expect("run")
    };
    // One value of 5 MiB: over the default 4 MiB, within a value budget of 8 MiB.
    std::fs::write(
        &tpl,
        "machine:\n  nodeLabels:\n    size: \"{{ ('x' * 5242880) | length }}\"\n",
    )
    .expect("write");
    let out = run(&[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("10-labels.yaml.j2:3:"), "located: {text}");
    assert!(
        text.contains("over the 4.0 MiB a template may build"),
        "{text}"
    );
    assert!(
        text.contains(TEMPLATE_VALUE_ENV),
        "says how to raise it: {text}"
    );
    let out = run(&[(TEMPLATE_VALUE_ENV, "8MiB")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Eighty values of 1 MiB built one after the other: 80 MiB of work, over the default
    // 64 MiB, within a work budget of 128 MiB.
    std::fs::write(
        &tpl,
        "{% set ns = namespace(n=0) %}{% for i in range(80) %}\
         {% set ns.n = ns.n + ('y' * 1048576) | length %}{% endfor %}\
         machine:\n  nodeLabels:\n    total: \"{{ ns.n }}\"\n",
    )
    .expect("write");
    let out = run(&[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("10-labels.yaml.j2:1:"), "located: {text}");
    assert!(
        text.contains("more than 64.0 MiB while rendering"),
        "{text}"
    );
    assert!(
        text.contains(TEMPLATE_WORK_ENV),
        "says how to raise it: {text}"
    );
    let out = run(&[(TEMPLATE_WORK_ENV, "128MiB")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A value that is not a size is refused by name.
    let out = run(&[(TEMPLATE_VALUE_ENV, "big")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(TEMPLATE_VALUE_ENV),
        "{}",
        stderr(&out)
    );
}

#[test]
fn patch_bytes_over_the_node_budget_name_the_node_and_the_largest_file() {
    use talosprov_base::budgets::NODE_ENV;
    let dir = patched_cluster(2, 3, 2000);
    for args in [
        &["validate", "-f", "cluster.yaml"][..],
        &["render", "-f", "cluster.yaml", "n1"][..],
    ] {
        let out = talosprov()
            .current_dir(dir.path())
            .args(args)
            .env_remove("PROXMOX_VE_ENDPOINT")
            .env(NODE_ENV, "4KiB")
            .output()
            .expect("run");
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert!(text.contains(" merges 5."), "{args:?}: {text}");
        assert!(
            text.contains("KiB of patches (3 files)"),
            "{args:?}: {text}"
        );
        assert!(text.contains("common/000.yaml"), "{args:?}: {text}");
        assert!(text.contains(NODE_ENV), "{args:?}: {text}");
    }
}

#[test]
fn a_thousand_nodes_sharing_two_hundred_patches_are_within_the_budgets() {
    use talosprov_base::budgets::{DEFAULT_COMMAND_PATCH_BYTES, DEFAULT_NODE_PATCH_BYTES};
    // 1,000 nodes × 200 shared patches of 1 KiB: what the budgets are sized to let through.
    let per_node = 200 * 1024;
    assert!(per_node <= DEFAULT_NODE_PATCH_BYTES);
    assert!(1000 * per_node <= DEFAULT_COMMAND_PATCH_BYTES);
    let dir = patched_cluster(1000, 200, 1024);
    let out = talosprov()
        .current_dir(dir.path())
        .args(["validate", "-f", "cluster.yaml"])
        .env_remove("PROXMOX_VE_ENDPOINT")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{:.2000}", stderr(&out));
}
