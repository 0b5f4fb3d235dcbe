//! Apply's final gate in the lab: a GPU node whose device plugin never runs (its
//! DaemonSet selects nodes labelled `nvidia.com/gpu.present=true`, which none is, as
//! when node feature discovery is missing). Apply says what it waits for while it
//! waits, names the node and `nvidia.com/gpu`, lets no library's log line through,
//! and exits 1 with the summary last: what was applied, and that the cluster is not
//! Ready. With the plugin running, `Apply complete!` comes after the gate.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;

/// The lab's device plugin, limited to nodes that carry a label none has.
fn plugin_never_runs(lab: &Lab) {
    let file = lab.dir.path().join("addons/nvidia-device-plugin.yaml");
    let text = std::fs::read_to_string(&file).expect("device plugin manifest");
    let selected = text.replacen(
        "      runtimeClassName: nvidia\n",
        "      runtimeClassName: nvidia\n      nodeSelector:\n        nvidia.com/gpu.present: \"true\"\n",
        1,
    );
    assert_ne!(
        selected, text,
        "the manifest has the pod template's runtimeClassName"
    );
    std::fs::write(&file, selected).expect("write manifest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_that_never_becomes_allocatable_is_named_while_apply_waits_and_fails_it_last() {
    let mut lab = Lab::start("17.1", Duration::from_millis(100)).await;
    plugin_never_runs(&lab);
    lab.import_secrets().await;
    lab.env
        .push(("TALOSPROV_READY_WAIT".to_owned(), "20s".to_owned()));
    let out = lab.run(&["apply", "-auto-approve"]).await;
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");

    // The gate is a step: it starts, says what is missing every 10 s, and ends.
    let start = err
        .find("kubernetes: waiting for the 3 Kubernetes nodes to be Ready, and nvidia.com/gpu allocatable on talos-gpu-01 (up to 20 s)")
        .unwrap_or_else(|| panic!("the gate's first line:\n{err}"));
    let waiting: Vec<&str> = err[start..]
        .lines()
        .filter(|l| l.contains("kubernetes: still waiting: "))
        .collect();
    assert!(!waiting.is_empty(), "{err}");
    for line in &waiting {
        assert!(
            line.contains("talos-gpu-01 (127.17.1.123): no nvidia.com/gpu allocatable")
                && line.contains("s elapsed]"),
            "{line}"
        );
    }
    assert!(
        err.contains("kubernetes: not ready after 20 s: talos-gpu-01 (127.17.1.123): no nvidia.com/gpu allocatable"),
        "{err}"
    );
    // No library's log line reaches the console at the default verbosity.
    assert!(
        !err.lines()
            .any(|l| l.contains("ERROR") || l.contains(" WARN ")),
        "{err}"
    );

    // The summary is last: what was applied, and which node is not Ready and why.
    assert!(!text.contains("Apply complete!"), "{text}");
    assert!(text.contains("\nKubernetes nodes:\n"), "{text}");
    let last = err
        .trim_end()
        .rsplit_once("\nError: ")
        .map(|(_, tail)| tail)
        .unwrap_or_else(|| panic!("an error last:\n{err}"));
    assert!(
        last.starts_with("the changes are applied (Resources: 12 added, 0 changed, 0 destroyed. Talos: 3 configs applied, 1 bootstrap), but the cluster is not Ready after 20 s:\n  talos-gpu-01 (127.17.1.123): no nvidia.com/gpu allocatable"),
        "{last}"
    );
    assert_eq!(last.lines().count(), 2, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_complete_comes_after_the_gate_has_seen_every_node_ready() {
    let lab = Lab::start("17.2", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}\n{err}");
    assert!(
        err.contains(
            "kubernetes: 3 nodes registered and Ready; nvidia.com/gpu allocatable on 1 node ["
        ),
        "{err}"
    );
    let table = text.find("\nKubernetes nodes:\n").expect("node table");
    let complete = text.find("\nApply complete! ").expect("summary");
    assert!(table < complete, "{text}");
    assert!(text.trim_end().ends_with(" 1 bootstrap."), "{text}");
}
