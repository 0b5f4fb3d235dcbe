//! Day two through plan and apply against fakepve, the factory stand-in and the
//! Talos simulator: a Talos version change rolls through the nodes in place
//! (control planes first, behind the etcd gate), recorded node by node.
#![cfg(feature = "sim")]

mod support;

use std::time::Duration;

use support::lab::{Lab, stdout};

fn at_version(version: &'static str) -> impl Fn(String) -> String {
    move |t| {
        t.replace(
            "talos_version: v1.13.8",
            &format!("talos_version: {version}"),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn talos_version_change_upgrades_nodes_in_place_control_planes_first() {
    let lab = Lab::start_at("2.1", Duration::from_millis(100), "v1.13.7").await;
    lab.write_topology(at_version("v1.13.7"));
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let vms_before = lab.vms().await;
    let state = lab.state();
    assert_eq!(
        state.resources.configs["talos-worker-01"].talos_version,
        "v1.13.7"
    );

    lab.write_topology(at_version("v1.13.8"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    let cp = text
        .find("~ config/talos-controlplane-01")
        .unwrap_or_else(|| panic!("control plane upgrade planned:\n{text}"));
    let worker = text
        .find("~ config/talos-worker-01")
        .expect("worker upgrade");
    assert!(cp < worker, "control planes come first:\n{text}");
    assert_eq!(
        text.matches("~ upgrade talos v1.13.7 -> v1.13.8 (reboot)")
            .count(),
        3,
        "{text}"
    );
    assert!(!text.contains("vm/"), "no VM changes:\n{text}");
    assert!(!text.contains("image/"), "no new disk image:\n{text}");

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the upgrade apply failed");
    let snapshot = lab
        .dir
        .path()
        .join("etcd-talos-controlplane-01-before-talos-v1.13.8.snapshot");
    let meta = std::fs::metadata(&snapshot).expect("etcd snapshot next to the state");
    assert!(meta.len() > 0);

    let sim = lab.sim.as_ref().expect("sim");
    let log = sim.upgrade_log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log[0].control_plane && log[0].etcd_healthy, "{log:?}");
    assert!(log.iter().skip(1).all(|u| !u.control_plane), "{log:?}");
    assert!(log.iter().all(|u| u.image.ends_with(":v1.13.8")), "{log:?}");
    for ip in &lab.ips {
        let node = sim.node(ip.parse().expect("ip")).expect("node");
        assert_eq!(node.talos_tag(), "v1.13.8");
    }
    let vms_after = lab.vms().await;
    let ids = |v: &[serde_json::Value]| {
        let mut ids: Vec<_> = v.iter().map(|v| v["vmid"].clone()).collect();
        ids.sort_by_key(|i| i.as_u64());
        ids
    };
    assert_eq!(ids(&vms_before), ids(&vms_after), "no VM was re-created");
    let state = lab.state();
    for c in state.resources.configs.values() {
        assert_eq!(c.talos_version, "v1.13.8");
        assert!(c.installer_image.ends_with(":v1.13.8"));
    }

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

fn vmids(vms: &[serde_json::Value]) -> Vec<u64> {
    let mut ids: Vec<u64> = vms.iter().filter_map(|v| v["vmid"].as_u64()).collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_stopped_by_a_failed_upgrade_records_the_upgraded_nodes_and_continues() {
    let lab = Lab::start_ha("2.2", Duration::from_millis(100), "v1.13.7").await;
    lab.write_topology(at_version("v1.13.7"));
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let vms_before = vmids(&lab.vms().await);
    assert_eq!(vms_before.len(), 5);

    lab.write_topology(at_version("v1.13.8"));
    let sim = lab.sim.as_ref().expect("sim");
    let worker_02: std::net::IpAddr = lab.ips[4].parse().expect("ip");
    sim.node(worker_02)
        .expect("node")
        .fail_next_upgrade("installer failed: disk full");
    let out = lab
        .run(&["apply", "-auto-approve", "--skip-etcd-snapshot"])
        .await;
    assert!(!out.status.success(), "the failed upgrade fails the apply");

    // Control planes one at a time, each accepted with etcd healthy, then the workers.
    let log = sim.upgrade_log();
    let order: Vec<std::net::IpAddr> = log.iter().map(|u| u.node).collect();
    let ip = |i: usize| -> std::net::IpAddr { lab.ips[i].parse().expect("ip") };
    assert_eq!(order, vec![ip(0), ip(1), ip(2), ip(3)], "{log:?}");
    assert!(log[..3].iter().all(|u| u.control_plane && u.etcd_healthy));
    let state = lab.state();
    let version = |h: &str| state.resources.configs[h].talos_version.clone();
    for h in [
        "talos-cp-01",
        "talos-cp-02",
        "talos-cp-03",
        "talos-worker-01",
    ] {
        assert_eq!(version(h), "v1.13.8", "{h} is recorded as upgraded");
    }
    assert_eq!(version("talos-worker-02"), "v1.13.7");

    // The next apply plans the one node left, and upgrades it.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    let text = stdout(&out);
    assert_eq!(
        text.matches("~ upgrade talos v1.13.7 -> v1.13.8 (reboot)")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("~ config/talos-worker-02"), "{text}");
    let out = lab
        .run(&["apply", "-auto-approve", "--skip-etcd-snapshot"])
        .await;
    assert!(
        out.status.success(),
        "the second apply continues the rollout"
    );
    assert_eq!(sim.upgrade_log().len(), 5);
    for ip in &lab.ips {
        let node = sim.node(ip.parse().expect("ip")).expect("node");
        assert_eq!(node.talos_tag(), "v1.13.8");
    }
    assert_eq!(vmids(&lab.vms().await), vms_before, "no VM was re-created");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
