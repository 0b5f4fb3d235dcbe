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
