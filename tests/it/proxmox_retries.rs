//! Connection-level failures against fakepve, which resets the connection
//! (TCP RST) instead of answering: a read (GET, a task's status) is sent
//! again like a transient HTTP error, and each retry is told to the task's
//! watcher; a write whose answer was lost is not sent again blindly.

use std::sync::{Arc, Mutex};

use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::json;
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::{pool, storage, vm};
use talosprov_retry::{Notice, Watcher};

/// A watcher that keeps every notice.
fn keeper() -> (Watcher, Arc<Mutex<Vec<Notice>>>) {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let sink = kept.clone();
    let watcher: Watcher = Arc::new(move |n: &Notice| sink.lock().expect("lock").push(n.clone()));
    (watcher, kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_on_a_get_is_retried_and_each_retry_is_told() {
    let fake = FakePve::start(FakeOptions::default()).await;
    fake.cmd(
        json!({"cmd": "reset_connections", "method": "GET", "suffix": "/version", "times": 2}),
    )
    .await;
    let client = fake.client();
    let (watcher, kept) = keeper();
    let version = talosprov_retry::watched(watcher, storage::check_version(&client))
        .await
        .expect("the read succeeds once the connection holds");
    assert_eq!(version.text, "9.0.10");
    assert_eq!(fake.count("GET", "/version").await, 3, "sent three times");
    let kept = kept.lock().expect("lock");
    assert_eq!(kept.len(), 2, "one notice per retry: {kept:?}");
    assert_eq!(kept[0].what, "Proxmox: read the Proxmox VE version");
    assert_eq!(kept[0].attempt, 2);
    assert_eq!(kept[1].attempt, 3);
    assert!(
        kept[0].cause.to_lowercase().contains("connection reset"),
        "{:?}",
        kept[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_while_polling_a_task_is_retried_and_the_task_awaited_to_its_end() {
    let fake = FakePve::start(FakeOptions::default()).await;
    fake.cmd(
        json!({"cmd": "add_vm", "vmid": 150, "name": "talos-worker-09", "node": "pve1",
                    "config": {"cores": 2, "memory": 4096}}),
    )
    .await;
    fake.cmd(json!({"cmd": "reset_connections", "method": "GET", "suffix": "/status", "times": 1}))
        .await;
    let client = fake.client();
    let (watcher, kept) = keeper();
    talosprov_retry::watched(watcher, vm::start(&client, "pve1", 150))
        .await
        .expect("started");
    let status = fake.get("/nodes/pve1/qemu/150/status/current").await;
    assert_eq!(status["status"], "running");
    let kept = kept.lock().expect("lock");
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0]
            .what
            .starts_with("Proxmox: start VM (node pve1, vmid 150)"),
        "{:?}",
        kept[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_a_write_is_not_sent_again_blindly() {
    let fake = FakePve::start(FakeOptions::default()).await;
    fake.cmd(json!({"cmd": "reset_connections", "method": "POST", "suffix": "/pools", "times": 1}))
        .await;
    let client = fake.client();
    let e = pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect_err("the answer was lost");
    assert!(
        matches!(
            e,
            ProxmoxError::Transport {
                retry_safe: false,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!e.is_transient());
    assert_eq!(fake.count("POST", "/pools").await, 1, "sent once");
}
