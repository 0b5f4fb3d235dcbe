//! Interrupting an apply end to end (the real binary, signals sent with
//! `kill`): the first SIGTERM or Ctrl-C lets the Proxmox tasks in flight end
//! within a printed bound, saves what they did, releases the lock and exits
//! 143 or 130; a second signal exits at once; the bound is kept; a re-run
//! converges to a clean plan.

use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::lab::Lab;
use crate::support::running::Running;
use serde_json::json;

fn lock_file(lab: &Lab) -> std::path::PathBuf {
    lab.dir.path().join(".talosprov.tfstate.lock.info")
}

/// Wait until fakepve got `n` VM creates: they are then in flight.
async fn creates_sent(lab: &Lab, n: usize) {
    lab.pve
        .wait_for_requests("POST", "/nodes/pve1/qemu", n, 60)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_proxmox_tasks_in_flight_finish_saves_them_unlocks_and_exits_143() {
    let lab = Lab::start("9.1", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    // Each VM create takes 3 s in Proxmox: the signal comes while they run.
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmcreate", "secs": 3}))
        .await;
    let mut apply = Running::start(&lab, &["apply", "-auto-approve"]);
    creates_sent(&lab, 3).await;
    apply.signal("TERM");
    let status = apply.exit(90).await;
    let err = apply.stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains(
            "Interrupt received: finishing 3 step(s) in flight (at most 60 s); send it again to exit at once"
        ),
        "{err}"
    );
    for vm in ["talos-controlplane-01", "talos-worker-01", "talos-gpu-01"] {
        assert!(
            err.contains(&format!("vm/{vm}: Creation complete")),
            "{vm} finished its create:\n{err}"
        );
        assert!(
            err.contains(&format!("config/{vm}: skipped (interrupted)")),
            "nothing new started after the signal:\n{err}"
        );
    }
    assert!(
        err.contains("interrupted: the finished steps are saved"),
        "{err}"
    );
    // What Proxmox confirmed is in the state; nothing was left half-made.
    let state = lab.state();
    assert_eq!(state.resources.vms.len(), 3, "the VMs created are recorded");
    assert!(state.resources.configs.is_empty());
    assert!(!lock_file(&lab).exists(), "the lock is released");
    let vms = lab.vms().await;
    assert!(vms.iter().all(|v| v["status"] == "running"), "{vms:?}");

    // A re-run continues from the state and converges.
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmcreate", "secs": 0}))
        .await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the apply after the interruption");
    assert_eq!(
        lab.pve.count("POST", "/nodes/pve1/qemu").await,
        3,
        "one create per VM"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once_and_still_releases_the_lock() {
    let lab = Lab::start("9.2", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    // Creates that outlast the test: only a second signal can end the run soon.
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmcreate", "secs": 600}))
        .await;
    let mut apply = Running::start(&lab, &["apply", "-auto-approve"]);
    creates_sent(&lab, 3).await;
    apply.signal("INT");
    apply
        .wait_for("Interrupt received: finishing 3 step(s) in flight", 30)
        .await;
    apply.signal("INT");
    // Well below the 60 s the first signal would wait for the creates.
    let status = apply.exit(30).await;
    let err = apply.stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("SIGINT received again: exiting at once"),
        "{err}"
    );
    assert!(!lock_file(&lab).exists(), "the lock is released");
    // Every step saved before the signals is there (images, pool, mapping).
    let state = lab.state();
    assert!(
        state.resources.pools.contains_key("TALOS"),
        "{:?}",
        state.resources.pools.keys()
    );
    assert!(state.resources.vms.is_empty(), "the creates never ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bound_on_proxmox_tasks_in_flight_is_kept() {
    let mut lab = Lab::start("9.3", Duration::from_millis(200)).await;
    lab.env
        .push(("TALOSPROV_INTERRUPT_GRACE".into(), "1".into()));
    lab.import_secrets().await;
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmcreate", "secs": 600}))
        .await;
    let mut apply = Running::start(&lab, &["apply", "-auto-approve"]);
    creates_sent(&lab, 3).await;
    apply.signal("TERM");
    let status = apply.exit(30).await;
    let err = apply.stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("Interrupt received: finishing 3 step(s) in flight (at most 1 s)"),
        "{err}"
    );
    assert!(
        err.contains(
            "Gave up waiting after 1 s: vm/talos-controlplane-01, vm/talos-gpu-01, vm/talos-worker-01 left with a Proxmox task still running"
        ),
        "{err}"
    );
    assert!(!lock_file(&lab).exists(), "the lock is released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_waits_stops_at_once_and_exits_130() {
    // Long install reboots keep the config steps waiting for secure mode: a
    // pure wait, nothing half-done in Proxmox.
    let lab = Lab::start("9.4", Duration::from_secs(30)).await;
    lab.import_secrets().await;
    let mut apply = Running::start(&lab, &["apply", "-auto-approve"]);
    apply
        .wait_for("config/talos-controlplane-01: waiting for secure mode", 60)
        .await;
    apply.signal("INT");
    let status = apply.exit(30).await;
    let err = apply.stderr();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("Interrupt received: no Proxmox task in flight, stopping now"),
        "{err}"
    );
    assert!(!lock_file(&lab).exists(), "the lock is released");
    let state = lab.state();
    assert_eq!(state.resources.vms.len(), 3);
    assert!(
        state.resources.configs.values().all(|c| !c.secure_mode),
        "the configs sent are recorded, not yet up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_destroy_finishes_the_deletes_in_flight_and_records_them() {
    let lab = Lab::start("9.9", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    // Each VM delete takes 3 s in Proxmox: the signal comes while they run.
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmdestroy", "secs": 3}))
        .await;
    let mut destroy = Running::start(&lab, &["destroy", "-auto-approve"]);
    lab.pve
        .wait_for_requests("DELETE", "/qemu/123", 1, 60)
        .await;
    lab.pve
        .wait_for_requests("DELETE", "/qemu/121", 1, 60)
        .await;
    lab.pve
        .wait_for_requests("DELETE", "/qemu/122", 1, 60)
        .await;
    destroy.signal("TERM");
    let status = destroy.exit(90).await;
    let err = destroy.stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("Interrupt received: finishing 3 step(s) in flight (at most 60 s)"),
        "{err}"
    );
    let again = format!(
        "run `talosprov destroy -f {}` to continue",
        lab.topology().display()
    );
    assert!(err.contains(&again), "{err}");
    assert!(lab.vms().await.is_empty(), "the deletes ran to their end");
    let state = lab.state();
    assert!(state.resources.vms.is_empty(), "and are recorded");
    assert!(!lock_file(&lab).exists(), "the lock is released");
    // The rest (pool, mapping) goes with the next destroy.
    lab.pve
        .cmd(json!({"cmd": "slow_task", "type": "qmdestroy", "secs": 0}))
        .await;
    assert!(
        lab.run(&["destroy", "-auto-approve"])
            .await
            .status
            .success()
    );
    assert!(lab.state().resources.pools.is_empty());
}

/// SIGTERM while `plan` (and `apply`, before its first change) is still
/// making its plan, here waiting on Proxmox: it stops at once, says what it
/// interrupted, changes nothing, releases the lock and exits 143.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_plan_is_made_says_what_it_stopped_and_exits_143() {
    let lab = Lab::start("9.10", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    for (command, args) in [
        ("plan", &["plan"][..]),
        ("apply", &["apply", "-auto-approve"][..]),
    ] {
        // Proxmox answers nothing from now on: the refresh waits on it.
        lab.pve.hold_after(0).await;
        let mut run = Running::start(&lab, args);
        crate::support::wait::until(
            "a request held by fakepve",
            Duration::from_secs(60),
            async || !lab.pve.held().await.is_empty(),
        )
        .await;
        let sent = std::time::Instant::now();
        run.signal("TERM");
        let status = run.exit(30).await;
        let took = sent.elapsed();
        let err = run.stderr();
        assert_eq!(status.code(), Some(143), "{command}: {err}");
        assert!(
            err.contains(&format!(
                "SIGTERM received while making the plan: stopped before any change; nothing was \
                 changed and no plan was saved; run `talosprov {command} -f {}` to start over",
                lab.topology().display()
            )),
            "{command}: {err}"
        );
        eprintln!("{command}: exited {took:?} after SIGTERM");
        assert!(!lock_file(&lab).exists(), "{command}: the lock is released");
        lab.pve.release_held(false).await;
        assert!(
            lab.state().resources.vms.is_empty(),
            "{command}: nothing was made"
        );
    }
}
