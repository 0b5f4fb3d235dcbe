//! A node's machine config changed outside talosprov, through the Talos API by an
//! independent client (Python's grpcio with stubs generated from talosprov's proto files,
//! `tests/fixtures/talos-client`): the plan shows the drift and the diff from the running
//! config, `plan -refresh-only -detailed-exitcode` reports it, and apply sets it back, with
//! a reboot when the change needs one. A node that runs another cluster's config is left
//! alone, and the plan says so.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_yaml_ng::Value;

use crate::support::cli::stdout;
use crate::support::lab::{Lab, change_lines};

const WORKER: &str = "talos-worker-01";

/// The talosconfig's CA, certificate and key as PEM files in a folder of their own.
pub(crate) fn client_files(lab: &Lab) -> tempfile::TempDir {
    let state = lab.state();
    let tc = talosprov_base::talosconfig::Talosconfig::parse(
        state
            .outputs
            .talosconfig
            .as_ref()
            .expect("a talosconfig")
            .value
            .expose(),
    )
    .expect("talosconfig");
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("ca.pem"), &tc.ca).expect("ca");
    std::fs::write(dir.path().join("crt.pem"), &tc.client.crt).expect("crt");
    // Talos labels its Ed25519 keys `ED25519 PRIVATE KEY`; OpenSSL and BoringSSL read the
    // same PKCS#8 under the standard label.
    let key = talosprov_talos::credentials::relabel_ed25519(tc.client.key.expose());
    std::fs::write(dir.path().join("key.pem"), key).expect("key");
    dir
}

/// Run the Python client against `ip` with the talosconfig's certificates in `files`.
fn talos_client(files: &Path, ip: &str, args: &[&str]) -> Output {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(crate::support::fakepve::python())
        .arg(repo.join("tests/fixtures/talos-client/talos_client.py"))
        .arg(repo.join("crates/talos/proto"))
        .arg(files.join("ca.pem"))
        .arg(files.join("crt.pem"))
        .arg(files.join("key.pem"))
        .arg(ip)
        .args(args)
        .output()
        .expect("run the Python Talos client (tests/run.sh installs grpcio-tools)");
    assert!(
        out.status.success(),
        "talos_client.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The running config of `ip`, read by the independent client.
pub(crate) fn running_config(files: &Path, ip: &str) -> Vec<u8> {
    talos_client(files, ip, &["get-config"]).stdout
}

/// `config` with `edit` applied to its v1alpha1 document, documents joined again.
fn edited(config: &[u8], edit: impl Fn(&mut serde_yaml_ng::Mapping)) -> String {
    use serde::Deserialize as _;
    let mut docs: Vec<Value> = serde_yaml_ng::Deserializer::from_slice(config)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .collect();
    let v1alpha1 = docs
        .iter_mut()
        .find(|d| d.get("kind").is_none())
        .and_then(Value::as_mapping_mut)
        .expect("a v1alpha1 document");
    edit(v1alpha1);
    docs.iter()
        .map(|d| serde_yaml_ng::to_string(d).expect("YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// `machine.<key>` set to `value` (a mapping), in the v1alpha1 document.
fn set_machine(key: &str, value: &str) -> impl Fn(&mut serde_yaml_ng::Mapping) {
    let key = key.to_owned();
    let value: Value = serde_yaml_ng::from_str(value).expect("value");
    move |doc| {
        let machine = doc
            .get_mut("machine")
            .and_then(Value::as_mapping_mut)
            .expect("machine");
        machine.insert(Value::from(key.as_str()), value.clone());
    }
}

/// Apply `config` to `ip` out of band; the mode the node took (`NO_REBOOT`, `REBOOT`).
pub(crate) fn apply_out_of_band(files: &Path, ip: &str, config: &str) -> String {
    let file = files.join("edited.yaml");
    std::fs::write(&file, config).expect("write");
    let out = talos_client(files, ip, &["apply", file.to_str().expect("utf-8")]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_changed_out_of_band_is_drift_that_apply_sets_back() {
    let lab = Lab::start("19.3", Duration::from_millis(100)).await;
    lab.write_topology(|t| t);
    lab.import_secrets().await;
    lab.apply_text().await;
    let files = client_files(&lab);
    let files = files.path();
    let ip = lab.ips[1].clone();
    let state = lab.state();
    let recorded = state.resources.configs[WORKER].config_sha256.clone();
    // The independent client reads the config talosprov applied, byte for byte.
    let original = running_config(files, &ip);
    assert_eq!(sha256(&original), recorded);

    // A node label added with `talosctl patch mc`'s RPC: applied without a reboot.
    let labelled = edited(
        &original,
        set_machine("nodeLabels", "{oob.example/edited: \"yes\"}"),
    );
    assert_eq!(apply_out_of_band(files, &ip, &labelled), "NO_REBOOT");
    let out = lab
        .run(&["plan", "-refresh-only", "-detailed-exitcode"])
        .await;
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "drift for a scheduled pipeline: {text}"
    );
    assert!(
        text.contains(&format!("# config/{WORKER} has changed")),
        "{text}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("machine config changed outside talosprov (talosctl edit or patch)"),
        "{text}"
    );
    assert!(
        text.contains("--- running"),
        "the diff is from the running config: {text}"
    );
    let removed = text
        .lines()
        .find(|l| l.contains("oob.example/edited"))
        .unwrap_or_else(|| panic!("the label in the diff: {text}"));
    assert!(
        removed.trim_start().starts_with('-'),
        "the label goes: {removed}"
    );
    assert!(text.contains("(applied without a reboot)"), "{text}");
    assert_eq!(
        change_lines(&text),
        [format!("~ config/{WORKER}")],
        "only the node changed: {text}"
    );
    assert!(!text.contains("BEGIN"), "no secret in the diff: {text}");
    lab.apply_text().await;
    assert_eq!(sha256(&running_config(files, &ip)), recorded, "set back");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // An environment variable for every service: Talos reboots for it.
    let with_env = edited(&original, set_machine("env", "{OOB_EDIT: \"1\"}"));
    // The node reboots at once: its answer may not make it out.
    let mode = apply_out_of_band(files, &ip, &with_env);
    assert!(mode == "REBOOT" || mode == "CONNECTION_CLOSED", "{mode}");
    let mut seen = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = lab.run(&["plan", "-detailed-exitcode"]).await.stdout;
        if String::from_utf8_lossy(&seen).contains("(the node reboots)") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    assert!(
        text.contains("machine config changed outside talosprov"),
        "{text}"
    );
    assert!(
        text.contains("(the node reboots)"),
        "planned as a reboot: {text}"
    );
    lab.apply_text().await;
    assert_eq!(sha256(&running_config(files, &ip)), recorded, "set back");

    // Drift and a change of the topology together: the drift shows what apply does to the
    // node as it runs (the label goes, the sysctl comes), the change the topology's edit.
    apply_out_of_band(files, &ip, &labelled);
    std::fs::create_dir_all(lab.dir.path().join("patches/worker")).expect("worker patches");
    std::fs::write(
        lab.dir.path().join("patches/worker/90-sysctl.yaml"),
        "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n",
    )
    .expect("patch");
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    let drift = text
        .split(&format!("# config/{WORKER} has changed"))
        .nth(1)
        .unwrap_or_else(|| panic!("the drift: {text}"));
    let drift = drift.split("\n\n").next().unwrap_or_default();
    assert!(drift.contains("--- running"), "{drift}");
    assert!(
        drift
            .lines()
            .any(|l| l.trim_start().starts_with('-') && l.contains("oob.example/edited")),
        "{drift}"
    );
    assert!(
        drift
            .lines()
            .any(|l| l.trim_start().starts_with('+') && l.contains("vm.max_map_count")),
        "{drift}"
    );
    lab.apply_text().await;
    let now = lab.state().resources.configs[WORKER].config_sha256.clone();
    assert_eq!(
        sha256(&running_config(files, &ip)),
        now,
        "the desired config runs"
    );
    std::fs::remove_file(lab.dir.path().join("patches/worker/90-sysctl.yaml")).expect("rm");
    lab.apply_text().await;

    // Another cluster's config (its cluster.id): drift, a warning, and no change.
    let foreign = edited(&original, |doc| {
        let cluster = doc
            .get_mut("cluster")
            .and_then(Value::as_mapping_mut)
            .expect("cluster");
        cluster.insert(
            "id".into(),
            "c29tZSBvdGhlciBjbHVzdGVyIGlkZW50aXR5IGhlcmU=".into(),
        );
    });
    apply_out_of_band(files, &ip, &foreign);
    let out = lab.run(&["plan"]).await;
    let text = format!("{}{}", stdout(&out), crate::support::cli::stderr(&out));
    assert!(
        text.contains(&format!("# config/{WORKER} has changed")),
        "{text}"
    );
    assert!(
        text.contains("runs a machine config talosprov did not apply"),
        "{text}"
    );
    assert!(
        !change_lines(&text).iter().any(|l| l.contains(WORKER)),
        "not re-configured: {text}"
    );
    // The drift shows the diff from the running config, secrets redacted.
    for line in [
        "--- running",
        "+++ desired",
        "-    id: c29tZSBvdGhlciBjbHVzdGVyIGlkZW50aXR5IGhlcmU=",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    assert!(text.contains("secret: (sensitive)"), "{text}");
}
