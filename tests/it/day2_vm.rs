//! VM settings that Proxmox keeps pending on a running VM, end to end against
//! fakepve and the Talos simulator: a memory change restarts the VM through
//! Proxmox, a hand edit is drift (pending or running) that apply repairs, and a
//! change an interrupted apply left pending is finished by the next apply.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::lab::Lab;
use talosprov_proxmox::{lifecycle, pending};
use talosprov_statefile::format;

const PENDING_NOTE: &str = "(pending in Proxmox: taken at the VM's next start)";
const RESTART_NOTE: &str = "(the VM restarts through Proxmox for the change to apply)";

/// A lab applied once, and the worker's VM record.
async fn applied_lab(net: &str) -> (Lab, format::Vm) {
    let lab = Lab::start(net, Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let worker = lab.state().resources.vms["talos-worker-01"].clone();
    assert_eq!(worker.memory_mib, 8192);
    (lab, worker)
}

/// `PUT .../config memory=<mib>` as an operator would (the VM runs: Proxmox
/// keeps it pending).
async fn set_memory_by_hand(lab: &Lab, vm: &format::Vm, mib: u64) {
    let set = BTreeMap::from([("memory".to_owned(), mib.to_string())]);
    let put = lifecycle::config_request(&vm.node, vm.vmid, &set, &[], None);
    lab.pve
        .client()
        .send(&put)
        .await
        .expect("PUT config by hand");
}

async fn pending_of(lab: &Lab, vm: &format::Vm) -> pending::VmPending {
    pending::vm_pending(&lab.pve.client(), &vm.node, vm.vmid)
        .await
        .expect("GET pending")
}

/// Requests to the VM's restart (`status/reboot`, or `status/shutdown` and
/// `status/start`) from request number `since` on.
async fn restarts_since(lab: &Lab, vm: &format::Vm, since: usize) -> Vec<String> {
    let prefix = format!("/qemu/{}/status/", vm.vmid);
    lab.pve
        .requests()
        .await
        .into_iter()
        .skip(since)
        .filter(|(method, path, _)| {
            method == "POST"
                && path.contains(&prefix)
                && ["reboot", "shutdown", "start"]
                    .iter()
                    .any(|a| path.ends_with(a))
        })
        .map(|(_, path, _)| path)
        .collect()
}

/// The VM runs with `mib` and nothing differs from what is pending.
async fn assert_runs_with(lab: &Lab, vm: &format::Vm, mib: u64) {
    let p = pending_of(lab, vm).await;
    assert!(p.keys.is_empty(), "still pending: {:?}", p.keys);
    assert_eq!(p.current.memory_mib, Some(mib));
    let config = lab
        .pve
        .get(&format!("/nodes/{}/qemu/{}/config", vm.node, vm.vmid))
        .await;
    assert_eq!(
        config["memory"].to_string().trim_matches('"'),
        mib.to_string()
    );
}

async fn assert_plan_is_clean(lab: &Lab) {
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_change_in_the_topology_restarts_the_vm_through_proxmox() {
    let (lab, worker) = applied_lab("3.1").await;
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 12288"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("~ memory_mib = 8192 -> 12288\n"), "{text}");
    assert!(text.contains(RESTART_NOTE), "{text}");
    assert!(!text.contains("has changed"), "no drift:\n{text}");

    let since = lab.pve.request_total().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let restarts = restarts_since(&lab, &worker, since).await;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert!(restarts[0].ends_with("/status/reboot"), "{restarts:?}");
    assert_runs_with(&lab, &worker, 12288).await;
    assert_eq!(
        lab.state().resources.vms["talos-worker-01"].memory_mib,
        12288
    );
    assert_plan_is_clean(&lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_set_by_hand_and_pending_is_drift_set_back_without_a_restart() {
    let (lab, worker) = applied_lab("3.2").await;
    set_memory_by_hand(&lab, &worker, 6144).await;
    let p = pending_of(&lab, &worker).await;
    assert!(p.keys.contains("memory"), "the running VM keeps it pending");

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("# vm/talos-worker-01 has changed"), "{text}");
    assert!(
        text.contains(&format!("~ memory_mib = 8192 -> 6144 {PENDING_NOTE}")),
        "{text}"
    );
    assert!(text.contains("~ vm/talos-worker-01"), "{text}");
    assert!(text.contains("~ memory_mib = 6144 -> 8192\n"), "{text}");
    assert!(
        text.contains("already runs with the wanted value"),
        "{text}"
    );
    assert!(!text.contains(RESTART_NOTE), "{text}");

    let since = lab.pve.request_total().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let restarts = restarts_since(&lab, &worker, since).await;
    assert!(restarts.is_empty(), "no restart: {restarts:?}");
    assert_runs_with(&lab, &worker, 8192).await;
    assert_eq!(
        pending_of(&lab, &worker).await.next_start.memory_mib,
        Some(8192)
    );
    assert_plan_is_clean(&lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_set_by_hand_and_restarted_is_set_back_with_a_restart() {
    let (lab, worker) = applied_lab("3.3").await;
    set_memory_by_hand(&lab, &worker, 6144).await;
    lifecycle::reboot(&lab.pve.client(), &worker.node, worker.vmid)
        .await
        .expect("restart by hand");
    assert_runs_with(&lab, &worker, 6144).await;

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("# vm/talos-worker-01 has changed"), "{text}");
    assert!(text.contains("~ memory_mib = 8192 -> 6144\n"), "{text}");
    assert!(!text.contains(PENDING_NOTE), "{text}");
    assert!(text.contains("~ memory_mib = 6144 -> 8192\n"), "{text}");
    assert!(text.contains(RESTART_NOTE), "{text}");

    let since = lab.pve.request_total().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let restarts = restarts_since(&lab, &worker, since).await;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_runs_with(&lab, &worker, 8192).await;
    assert_plan_is_clean(&lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_left_pending_by_an_interrupted_apply_is_restarted_by_the_next_apply() {
    let (lab, worker) = applied_lab("3.4").await;
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 12288"));
    // The restart fails once: the apply stops after the config update.
    lab.pve
        .cmd(serde_json::json!({
            "cmd": "fail", "method": "POST",
            "suffix": format!("/qemu/{}/status/reboot", worker.vmid),
            "status": 403, "message": "Permission check failed (VM.PowerMgmt)", "times": 1
        }))
        .await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(!out.status.success(), "the failed restart fails the apply");
    assert_eq!(
        lab.state().resources.vms["talos-worker-01"].memory_mib,
        12288,
        "the config update is recorded"
    );
    let p = pending_of(&lab, &worker).await;
    assert_eq!(
        (p.current.memory_mib, p.next_start.memory_mib),
        (Some(8192), Some(12288)),
        "left pending"
    );

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2), "the pending change is not lost");
    let text = stdout(&out);
    assert!(!text.contains("has changed"), "no drift:\n{text}");
    assert!(
        text.contains("memory_mib set but pending in Proxmox"),
        "{text}"
    );
    assert!(
        text.contains(&format!("~ memory_mib = 8192 -> 12288 {PENDING_NOTE}")),
        "{text}"
    );
    assert!(text.contains(RESTART_NOTE), "{text}");

    let since = lab.pve.request_total().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let restarts = restarts_since(&lab, &worker, since).await;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    let writes = lab
        .pve
        .requests()
        .await
        .into_iter()
        .skip(since)
        .filter(|(method, path, _)| method == "PUT" && path.ends_with("/config"))
        .count();
    assert_eq!(writes, 0, "nothing left to set, only the restart");
    assert_runs_with(&lab, &worker, 12288).await;
    assert_plan_is_clean(&lab).await;
}
