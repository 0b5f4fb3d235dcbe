//! Fault tests through fakepve's scenarios: a held config lock, a failed task, an
//! offline node (595), a token without Mapping.Use, and a duplicate vmid.

use crate::support::examples;
use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::json;
use std::error::Error as _;
use talosprov_proxmox::access::{self, Needs};
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::lifecycle::{self, VmUpdate};
use talosprov_proxmox::{task, vm};

/// The error and its causes, one per line.
fn chain(e: &ProxmoxError) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!("\ncaused by: {s}"));
        source = s.source();
    }
    out
}

/// A client whose retry deadline outlasts the test's own steps on a busy machine.
fn patient_client(fake: &FakePve) -> talosprov_proxmox::client::Client {
    let mut settings = fake.settings();
    settings.timeouts.retry_deadline = std::time::Duration::from_secs(30);
    talosprov_proxmox::client::Client::new(settings).expect("client")
}

async fn fake_with_vm(vmid: u32, node: &str) -> FakePve {
    let fake = FakePve::start(FakeOptions {
        nodes: vec!["pve2".into()],
        ..FakeOptions::default()
    })
    .await;
    fake.cmd(json!({"cmd": "add_vm", "vmid": vmid, "name": "talos-worker-09", "node": node,
                    "config": {"cores": 2, "memory": 4096, "scsi0": "local-lvm:vm-150-disk-0,size=10G"}}))
        .await;
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_config_lock_is_retried_then_fails_clearly_after_the_deadline() {
    let fake = fake_with_vm(150, "pve1").await;
    fake.cmd(json!({"cmd": "hold_config_lock", "vmid": 150}))
        .await;
    let client = fake.client();
    let want = VmUpdate {
        cores: Some(4),
        ..VmUpdate::default()
    };
    let e = lifecycle::update_vm(&client, "pve1", 150, &want)
        .await
        .expect_err("lock held");
    let text = chain(&e);
    assert!(matches!(e, ProxmoxError::GaveUp { .. }), "{text}");
    assert!(
        text.starts_with("update VM config (node pve1, vmid 150): still failing after"),
        "{text}"
    );
    assert!(text.contains("within the 2 s retry deadline"), "{text}");
    assert!(
        text.contains(
            "HTTP 500: can't lock file '/var/lock/qemu-server/lock-150.conf' - got timeout"
        ),
        "{text}"
    );
    assert!(
        fake.count("PUT", "/qemu/150/config").await >= 3,
        "retried with backoff"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_lock_released_during_retries_lets_the_update_through() {
    let fake = fake_with_vm(150, "pve1").await;
    fake.cmd(json!({"cmd": "hold_config_lock", "vmid": 150}))
        .await;
    let client = patient_client(&fake);
    let update = tokio::spawn(async move {
        let want = VmUpdate {
            cores: Some(4),
            ..VmUpdate::default()
        };
        lifecycle::update_vm(&client, "pve1", 150, &want).await
    });
    fake.wait_for_requests("PUT", "/qemu/150/config", 2, 10)
        .await;
    fake.cmd(json!({"cmd": "release_config_lock", "vmid": 150}))
        .await;
    let outcome = update
        .await
        .expect("join")
        .expect("update after the lock is released");
    assert_eq!(outcome.changed, vec!["cores".to_string()]);
    let cfg = fake.get("/nodes/pve1/qemu/150/config").await;
    assert_eq!(cfg["cores"], "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_task_shows_its_task_error_text() {
    let fake = fake_with_vm(151, "pve1").await;
    let reason =
        "kvm: -device vfio-pci,host=0000:01:00.0: vfio 0000:01:00.0: failed to setup container";
    fake.cmd(json!({"cmd": "vm_set", "vmid": 151, "start_error": reason}))
        .await;
    let e = vm::start(&fake.client(), "pve1", 151)
        .await
        .expect_err("start fails");
    match &e {
        ProxmoxError::TaskFailed {
            upid,
            exitstatus,
            log,
            op,
        } => {
            assert_eq!(exitstatus, reason);
            assert_eq!(
                log.last().map(String::as_str),
                Some(format!("TASK ERROR: {reason}").as_str())
            );
            assert!(
                upid.starts_with("UPID:pve1:") && upid.contains(":qmstart:151:"),
                "{upid}"
            );
            assert_eq!(op.vmid, Some(151));
        }
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.starts_with("start VM (node pve1, vmid 151): task UPID:pve1:"),
        "{text}"
    );
    assert!(text.ends_with(&format!("failed: {reason}")), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offline_node_is_retried_then_reported() {
    let fake = fake_with_vm(152, "pve2").await;
    fake.cmd(json!({"cmd": "set_node_offline", "node": "pve2"}))
        .await;
    let e = vm::start(&fake.client(), "pve2", 152)
        .await
        .expect_err("node offline");
    let text = chain(&e);
    assert!(
        text.starts_with("start VM (node pve2, vmid 152): still failing after"),
        "{text}"
    );
    assert!(text.contains("HTTP 595: No route to host"), "{text}");
    assert!(
        fake.count("POST", "/nodes/pve2/qemu/152/status/start")
            .await
            >= 3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_back_online_during_retries_lets_the_start_through() {
    let fake = fake_with_vm(152, "pve2").await;
    fake.cmd(json!({"cmd": "set_node_offline", "node": "pve2"}))
        .await;
    let client = patient_client(&fake);
    let start = tokio::spawn(async move { vm::start(&client, "pve2", 152).await });
    fake.wait_for_requests("POST", "/nodes/pve2/qemu/152/status/start", 2, 10)
        .await;
    fake.cmd(json!({"cmd": "set_node_offline", "node": "pve2", "offline": false}))
        .await;
    start
        .await
        .expect("join")
        .expect("started once the node is back");
    let status = fake.get("/nodes/pve2/qemu/152/status/current").await;
    assert_eq!(status["status"], "running");
}

const PROV: &str = "talos@pve!prov";
const PROV_SECRET: &str = "0a8c5a3e-1b2d-4c6e-8f00-112233445566";

fn restricted() -> FakeOptions {
    let vm_privs: Vec<String> = access::VM_PRIVILEGES
        .iter()
        .map(|p| p.to_string())
        .collect();
    let grants = vec![
        (
            PROV,
            "/storage/local",
            vec!["Datastore.AllocateTemplate", "Datastore.Audit"],
        ),
        (PROV, "/nodes/pve1", vec!["Sys.AccessNetwork"]),
        (PROV, "/storage/local-lvm", vec!["Datastore.AllocateSpace"]),
        (PROV, "/pool/TALOS", vec!["Pool.Allocate", "Pool.Audit"]),
        (PROV, "/sdn/zones/localnetwork/vmbr0", vec!["SDN.Use"]),
        (
            PROV,
            "/mapping/pci",
            vec!["Mapping.Audit", "Mapping.Modify"],
        ),
    ];
    let mut grants: Vec<(String, String, Vec<String>)> = grants
        .into_iter()
        .map(|(u, p, v)| {
            (
                u.to_string(),
                p.to_string(),
                v.into_iter().map(String::from).collect(),
            )
        })
        .collect();
    grants.push((PROV.into(), "/pool/TALOS".into(), vm_privs));
    FakeOptions {
        tokens: vec![(PROV.into(), PROV_SECRET.into())],
        grants,
        ..FakeOptions::default()
    }
}

fn gpu_needs() -> Needs {
    Needs {
        pve_major: 9,
        downloads: vec![("pve1".into(), "local".into())],
        image_storage: Some("local".into()),
        datastores: vec!["local-lvm".into()],
        vms: vec![121, 122, 123],
        pool: Some("TALOS".into()),
        create_pool: true,
        mappings_used: vec!["gpu".into()],
        mappings_managed: vec!["gpu".into()],
        nics: vec![("vmbr0".into(), None)],
        ha: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_without_mapping_use_fails_the_preflight_before_anything_is_created() {
    let fake = FakePve::start(restricted()).await;
    let client = fake.client_with_token(PROV, PROV_SECRET);
    let e = access::preflight(&client, &gpu_needs())
        .await
        .expect_err("Mapping.Use is missing");
    match &e {
        ProxmoxError::MissingPrivileges { missing: m, .. } => {
            assert_eq!(m.len(), 1, "{m:?}");
            assert_eq!(
                m[0].alternatives,
                vec![vec![(
                    "/mapping/pci/gpu".to_string(),
                    "Mapping.Use".to_string()
                )]]
            );
        }
        other => panic!("{other:?}"),
    }
    insta::assert_snapshot!(e.to_string());
    let writes: Vec<_> = fake
        .requests()
        .await
        .into_iter()
        .filter(|(m, _, _)| m != "GET")
        .collect();
    assert!(
        writes.is_empty(),
        "the preflight changed nothing: {writes:?}"
    );

    // The same token passes once it holds Mapping.Use on the mapping.
    let fake = FakePve::start(FakeOptions {
        grants: {
            let mut g = restricted().grants;
            g.push((
                PROV.into(),
                "/mapping/pci/gpu".into(),
                vec!["Mapping.Use".into()],
            ));
            g
        },
        ..restricted()
    })
    .await;
    access::preflight(&fake.client_with_token(PROV, PROV_SECRET), &gpu_needs())
        .await
        .expect("all privileges held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_a_mapping_the_token_may_not_use_is_refused_naming_privilege_and_path() {
    let fake = FakePve::start(restricted()).await;
    let client = fake.client_with_token(PROV, PROV_SECRET);
    let gpu = examples::nodes().remove(2);
    let e = task::run(&client, &vm::create_request(&gpu))
        .await
        .expect_err("403");
    match &e {
        ProxmoxError::Forbidden {
            path, privilege, ..
        } => {
            assert_eq!(path.as_deref(), Some("/mapping/pci/gpu"));
            assert_eq!(privilege.as_deref(), Some("Mapping.Use"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "create VM (node pve1, vmid 123): permission denied: missing privilege Mapping.Use on /mapping/pci/gpu"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_vmid_is_reported_with_the_node_holding_it() {
    let fake = FakePve::start(FakeOptions {
        nodes: vec!["pve2".into()],
        ..FakeOptions::default()
    })
    .await;
    fake.cmd(json!({"cmd": "add_vm", "vmid": 121, "name": "grafana", "node": "pve2"}))
        .await;
    let client = fake.client();
    talosprov_proxmox::pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    let spec = examples::nodes().remove(0);
    let e = vm::ensure_vm(&client, &spec).await.expect_err("vmid taken");
    insta::assert_snapshot!(e.to_string(), @"vmid 121 is already taken by VM 'grafana' on node pve2");
    // Sent anyway (another client raced us), PVE's refusal names the node too.
    let e = task::run(&client, &vm::create_request(&spec))
        .await
        .expect_err("taken");
    match e {
        ProxmoxError::VmidTaken { vmid, node, .. } => {
            assert_eq!((vmid, node.as_str()), (121, "pve2"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        fake.count("POST", "/nodes/pve1/qemu").await,
        1,
        "only the raced create was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_ending_with_warnings_succeeds_and_reports_them() {
    let fake = fake_with_vm(153, "pve1").await;
    let warn =
        "WARN: iothread is only valid with virtio disk or virtio-scsi-single controller, ignoring";
    fake.cmd(json!({"cmd": "vm_set", "vmid": 153, "start_warnings": [warn]}))
        .await;
    let warnings = vm::start(&fake.client(), "pve1", 153)
        .await
        .expect("warnings are success");
    assert_eq!(warnings, vec![warn.to_string()]);
    let status = fake.get("/nodes/pve1/qemu/153/status/current").await;
    assert_eq!(status["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_whose_answer_was_lost_is_recognised_on_retry() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let factory = crate::support::factory::Factory::start().await;
    let client = fake.client();
    talosprov_proxmox::storage::ensure_images(
        &client,
        "local",
        &factory.url,
        &[("pve1".into(), examples::image(examples::BASE))],
    )
    .await
    .expect("image");
    talosprov_proxmox::pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    fake.cmd(json!({"cmd": "lose_create_answers", "count": 1}))
        .await;
    let spec = examples::nodes().remove(0);
    let outcome = vm::ensure_vm(&client, &spec)
        .await
        .expect("created despite the lost answer");
    assert!(matches!(outcome, vm::VmOutcome::Created { .. }));
    assert_eq!(
        fake.count("POST", "/nodes/pve1/qemu").await,
        2,
        "sent again after the 595"
    );
    let status = fake.get("/nodes/pve1/qemu/121/status/current").await;
    assert_eq!(status["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_started_before_its_pci_mapping_exists_fails_with_the_start_text() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let factory = crate::support::factory::Factory::start().await;
    let client = fake.client();
    talosprov_proxmox::storage::ensure_images(
        &client,
        "local",
        &factory.url,
        &[("pve1".into(), examples::image(examples::NVIDIA))],
    )
    .await
    .expect("image");
    talosprov_proxmox::pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    let gpu = examples::nodes().remove(2);
    let e = vm::ensure_vm(&client, &gpu)
        .await
        .expect_err("no mapping yet");
    match &e {
        ProxmoxError::TaskFailed { exitstatus, .. } => {
            assert_eq!(exitstatus, "PCI device mapping not found for 'gpu'");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("start VM (node pve1, vmid 123): task UPID:pve1:"),
        "{e}"
    );
}
