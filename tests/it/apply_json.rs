//! `apply -json` and `destroy -json` in the lab: stdout holds nothing but JSON
//! objects, one per line, each with the format's version, its type, level,
//! message and RFC 3339 timestamp; the plan, every step's start and end, the
//! final gate and the closing summary are there in order; a failed step
//! carries its error, and the run's error is the last line.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;
use serde_json::Value;

/// Every stdout line as a JSON object, checked for the common keys.
fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
            assert_eq!(v["format_version"], "1.0", "{l}");
            for key in ["type", "@level", "@message", "@timestamp"] {
                assert!(v[key].is_string(), "no {key}: {l}");
            }
            let ts = v["@timestamp"].as_str().expect("timestamp");
            time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339)
                .unwrap_or_else(|e| panic!("{e}: {ts}"));
            assert!(
                ["info", "warn", "error"].contains(&v["@level"].as_str().expect("level")),
                "{l}"
            );
            v
        })
        .collect()
}

fn of_type<'a>(all: &'a [Value], kind: &str) -> Vec<&'a Value> {
    all.iter().filter(|v| v["type"] == kind).collect()
}

fn position(all: &[Value], kind: &str, address: &str) -> usize {
    all.iter()
        .position(|v| v["type"] == kind && v["address"] == address)
        .unwrap_or_else(|| panic!("no {kind} for {address}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_and_destroy_print_their_events_as_json_lines() {
    let lab = Lab::start("18.4", Duration::from_millis(100)).await;
    lab.import_secrets().await;

    let out = lab.run(&["apply", "-json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let all = lines(&stdout(&out));
    let last = all.last().expect("lines");
    assert_eq!(last["type"], "diagnostic", "{last}");
    assert_eq!(last["@level"], "error");
    assert!(
        last["diagnostic"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("-auto-approve")),
        "{last}"
    );

    let out = lab.run(&["apply", "-json", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("Creating..."),
        "the human view is not drawn as well:\n{}",
        stderr(&out)
    );
    let all = lines(&stdout(&out));
    assert_eq!(all[0]["type"], "version");
    let planned = of_type(&all, "planned_change");
    assert!(planned.len() >= 10, "{planned:?}");
    for p in &planned {
        let address = p["address"].as_str().expect("address");
        assert!(p["action"].is_string() && p["reason"].is_string(), "{p}");
        let start = position(&all, "apply_start", address);
        let done = position(&all, "apply_complete", address);
        assert!(start < done, "{address}: start after its end");
        assert_eq!(all[start]["action"], p["action"]);
    }
    let vm = position(&all, "apply_complete", "vm/talos-worker-01");
    assert!(all[vm]["elapsed_seconds"].is_number());
    let progress = of_type(&all, "apply_progress");
    assert!(
        progress
            .iter()
            .any(|p| p["address"] == "config/talos-worker-01" && p["what"].is_string()),
        "{progress:?}"
    );
    let gate = position_of(&all, "gate_start");
    assert!(all[gate]["nodes"] == 3, "{}", all[gate]);
    assert!(position_of(&all, "gate_complete") > gate);
    let summary = all.last().expect("lines");
    assert_eq!(summary["type"], "change_summary", "{summary}");
    assert_eq!(summary["operation"], "apply");
    assert_eq!(
        summary["changes"]["add"],
        planned.iter().filter(|p| p["action"] == "create").count()
    );
    assert!(
        summary["@message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Apply complete!")),
        "{summary}"
    );

    let out = lab.run(&["destroy", "-json", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let all = lines(&stdout(&out));
    assert_eq!(all[0]["type"], "version");
    assert_eq!(all[0]["command"], "destroy");
    for host in ["talos-controlplane-01", "talos-worker-01", "talos-gpu-01"] {
        let address = format!("vm/{host}");
        let done = position(&all, "apply_complete", &address);
        assert_eq!(all[done]["action"], "delete");
    }
    let summary = all.last().expect("lines");
    assert_eq!(summary["type"], "change_summary");
    assert_eq!(summary["operation"], "destroy");
    assert_eq!(summary["changes"]["remove"], 5);
}

fn position_of(all: &[Value], kind: &str) -> usize {
    all.iter()
        .position(|v| v["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_carries_its_error_and_the_run_ends_with_a_diagnostic() {
    let lab = Lab::start("18.5", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.pve
        .cmd(serde_json::json!({
            "cmd": "fail", "method": "POST", "suffix": "/nodes/pve1/qemu",
            "status": 403, "message": "Permission check failed (/vms/122, VM.Allocate)"
        }))
        .await;
    let out = lab.run(&["apply", "-json", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    let all = lines(&stdout(&out));
    let failed = of_type(&all, "apply_errored");
    assert!(!failed.is_empty(), "{all:?}");
    for f in &failed {
        assert_eq!(f["@level"], "error");
        assert!(
            f["error"]
                .as_str()
                .is_some_and(|e| e.contains("VM.Allocate")),
            "{f}"
        );
    }
    assert!(
        !of_type(&all, "apply_skipped").is_empty(),
        "dependents skipped"
    );
    let last = all.last().expect("lines");
    assert_eq!(last["type"], "diagnostic", "{last}");
    assert_eq!(last["diagnostic"]["severity"], "error");
    assert!(
        of_type(&all, "change_summary").len() == 1,
        "only the plan's summary"
    );
}
