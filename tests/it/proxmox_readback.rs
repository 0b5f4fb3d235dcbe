//! The read-back for the plan costs a constant number of requests: one cluster-wide
//! listing for 50 unchanged VMs, plus one config read per VM that differs or is asked for.

use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::json;
use talosprov_proxmox::observe::{self, ExpectedVm};

const GIB: u64 = 1024 * 1024 * 1024;

async fn fifty_vms() -> FakePve {
    let fake = FakePve::start(FakeOptions {
        nodes: vec!["pve2".into()],
        ..FakeOptions::default()
    })
    .await;
    // One VM talosprov does not manage: listed, never expected.
    fake.cmd(json!({"cmd": "add_vm", "vmid": 99_999, "name": "grafana"}))
        .await;
    for i in 0..50u32 {
        let vmid = 200 + i;
        fake.cmd(json!({
            "cmd": "add_vm", "vmid": vmid, "name": format!("talos-worker-{i:02}"),
            "node": if i % 2 == 0 { "pve1" } else { "pve2" }, "status": "running", "pool": "TALOS",
            "config": {"cores": 4, "memory": 8192, "tags": "talos;worker", "boot": "order=scsi0",
                       "scsi0": format!("local-lvm:vm-{vmid}-disk-0,size=100G")}
        }))
        .await;
    }
    fake
}

fn expected(i: u32) -> ExpectedVm {
    ExpectedVm {
        vmid: 200 + i,
        node: Some(if i.is_multiple_of(2) { "pve1" } else { "pve2" }.into()),
        name: Some(format!("talos-worker-{i:02}")),
        cores: Some(4),
        memory_mib: Some(8192),
        disk_gib: Some(100),
        tags: Some(talosprov_proxmox::vm_config::tag_set("talos;worker")),
        pool: Some("TALOS".into()),
        want_config: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_back_of_fifty_unchanged_vms_is_one_request() {
    let fake = fifty_vms().await;
    let client = fake.client();
    let want: Vec<ExpectedVm> = (0..50).map(expected).collect();
    let before = fake.request_total().await;
    let seen = observe::observe(&client, &want).await.expect("observe");
    let requests = fake.request_total().await - before;
    println!("read-back of 50 unchanged VMs: {requests} request(s)");
    assert_eq!(requests, 1);
    assert_eq!(client.requests_sent(), 1);
    assert_eq!(seen.all.len(), 51);
    for w in &want {
        let vm = seen.expected[&w.vmid].as_ref().expect("present");
        assert!(
            vm.differences.is_empty(),
            "{}: {:?}",
            w.vmid,
            vm.differences
        );
        assert!(vm.config.is_none());
        assert_eq!(vm.listing.status, "running");
        assert_eq!(vm.listing.maxdisk, Some(100 * GIB));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_vms_that_differ_or_are_asked_for_cost_a_config_read() {
    let fake = fifty_vms().await;
    let client = fake.client();
    let mut want: Vec<ExpectedVm> = (0..50).map(expected).collect();
    want[3].cores = Some(8);
    want[7].want_config = true;
    want.push(ExpectedVm {
        vmid: 300,
        ..ExpectedVm::default()
    });
    let before = fake.request_total().await;
    let seen = observe::observe(&client, &want).await.expect("observe");
    assert_eq!(
        fake.request_total().await - before,
        3,
        "listing + two configs"
    );
    let changed = seen.expected[&203].as_ref().expect("present");
    assert_eq!(changed.differences, vec!["cores"]);
    assert_eq!(changed.config.as_ref().and_then(|c| c.cores), Some(4));
    assert!(
        seen.expected[&207]
            .as_ref()
            .expect("present")
            .config
            .is_some()
    );
    assert_eq!(seen.expected[&300], None, "absent VM");
}
