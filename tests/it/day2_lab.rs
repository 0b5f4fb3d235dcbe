//! Day two through plan and apply against fakepve, the factory stand-in and the
//! Talos simulator: a Talos version change rolls through the nodes in place
//! (control planes first, behind the etcd gate), recorded node by node.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;
use talosprov_sim::state::Phase;
use talosprov_talos::client::TalosClient;

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
    assert!(!text.contains("downgrade"), "{text}");

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the upgrade apply failed");
    // The etcd snapshot, encrypted, in the folder beside the state.
    let archived = crate::support::day2_cluster::archived(&lab.dir.path().join("etcd-snapshots"));
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(
        archived[0].1["reason"],
        "before talos v1.13.8 on talos-controlplane-01"
    );
    assert_eq!(archived[0].1["key"], "cluster");
    // Named after etcd's revision, read from the Kubernetes API first.
    let revision = archived[0].1["revision"].as_u64().expect("a revision");
    assert!(revision > 0, "{archived:?}");
    assert!(
        archived[0]
            .0
            .ends_with(&format!("-r{revision}.snapshot.age")),
        "{archived:?}"
    );

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

    // Back to the older version: planned as a downgrade, with a warning.
    lab.write_topology(at_version("v1.13.7"));
    let out = lab.run(&["plan"]).await;
    assert!(out.status.success());
    let text = stdout(&out);
    assert_eq!(
        text.matches(
            " will be downgraded: Talos v1.13.8 -> v1.13.7, a downgrade (installer image "
        )
        .count(),
        3,
        "{text}"
    );
    let err = crate::support::cli::stderr(&out);
    assert!(
        format!("{text}{err}").contains(
            "Talos v1.13.8 -> v1.13.7 goes back a version: Talos migrates the machine config"
        ),
        "{text}{err}"
    );
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
    let disks_before = disks(&lab).await;

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
    assert_eq!(disks(&lab).await, disks_before, "no disk was re-created");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Each VM's `scsi0` and `efidisk0` (volids and sizes), by vmid.
async fn disks(lab: &Lab) -> Vec<(u64, String, String)> {
    let mut out = Vec::new();
    for vm in lab.vms().await {
        let vmid = vm["vmid"].as_u64().expect("vmid");
        let node = vm["node"].as_str().expect("node");
        let config = lab
            .pve
            .get(&format!("/nodes/{node}/qemu/{vmid}/config"))
            .await;
        let disk = |key: &str| config[key].as_str().unwrap_or_default().to_owned();
        assert!(!disk("scsi0").is_empty(), "VM {vmid} has a disk: {config}");
        out.push((vmid, disk("scsi0"), disk("efidisk0")));
    }
    out.sort();
    out
}

fn without_node(hostname: &'static str) -> impl Fn(String) -> String {
    move |t| {
        t.lines()
            .filter(|l| !l.contains(&format!("hostname: {hostname},")))
            .map(|l| format!("{l}\n"))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_control_plane_leaves_etcd_and_the_last_one_is_refused_at_plan_time() {
    let lab = Lab::start_ha("2.3", Duration::from_millis(100), "v1.13.8").await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    assert_eq!(lab.etcd_members(&lab.ips[0]).await, lab.ips[..3]);

    lab.write_topology(without_node("talos-cp-03"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("- vm/talos-cp-03"), "{text}");
    assert!(
        text.contains("Warning: 2 control planes will remain"),
        "an even number of control planes is a warning:\n{text}"
    );
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "removing a control plane failed");
    assert_eq!(
        lab.etcd_members(&lab.ips[0]).await,
        lab.ips[..2],
        "etcd has exactly the control planes left"
    );
    let archived = crate::support::day2_cluster::archived(&lab.dir.path().join("etcd-snapshots"));
    assert!(
        archived
            .iter()
            .any(|(_, m)| m["reason"] == "before removal on talos-cp-03"),
        "an etcd snapshot is saved before the removal: {archived:?}"
    );
    assert_eq!(lab.vms().await.len(), 4);

    // Replacing every control plane of the running cluster by new ones (which
    // could not join an etcd that is gone) is refused before anything changes.
    lab.write_topology(|t| {
        without_node("talos-cp-03")(t)
            .replace("hostname: talos-cp-01,", "hostname: talos-cp-11,")
            .replace("hostname: talos-cp-02,", "hostname: talos-cp-12,")
    });
    let out = lab.run(&["plan"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no control plane would remain"),
        "{}",
        stderr(&out)
    );
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(!out.status.success());
    assert_eq!(lab.vms().await.len(), 4, "nothing was deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_worker_is_created_and_joined_and_nothing_else_changes() {
    let lab = Lab::start_ha("2.4", Duration::from_millis(100), "v1.13.8").await;
    lab.write_topology(without_node("talos-worker-02"));
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let served = |i: usize| {
        sim.node(lab.ips[i].parse().expect("ip"))
            .expect("node")
            .served()
            .len()
    };
    let before: Vec<usize> = (0..4).map(served).collect();
    let state_before = lab.state();

    lab.write_topology(|t| t);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("+ vm/talos-worker-02"), "{text}");
    assert!(
        text.contains("Plan: 1 to add, 0 to change, 0 to destroy."),
        "{text}"
    );
    assert_eq!(
        text.matches("  ~ ").count(),
        1,
        "only the new node's config:\n{text}"
    );
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());

    let node = sim.node(lab.ips[4].parse().expect("ip")).expect("node");
    assert_eq!(node.phase(), Phase::Secure);
    let state = lab.state();
    assert!(state.resources.configs["talos-worker-02"].secure_mode);
    for (i, host) in [
        "talos-cp-01",
        "talos-cp-02",
        "talos-cp-03",
        "talos-worker-01",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            state.resources.configs[*host], state_before.resources.configs[*host],
            "{host} keeps its record"
        );
        let after = sim
            .node(lab.ips[i].parse().expect("ip"))
            .expect("node")
            .served();
        let new_calls: Vec<&str> = after[before[i]..].iter().map(|s| s.rpc.as_str()).collect();
        assert!(
            !new_calls
                .iter()
                .any(|r| matches!(*r, "ApplyConfiguration" | "Reboot" | "Upgrade" | "Reset")),
            "{host} was touched: {new_calls:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_plan_before_secrets_exist_shows_digests_known_after_apply() {
    let lab = Lab::start("2.5", Duration::from_millis(100)).await;
    let out = lab.run(&["plan"]).await;
    assert!(out.status.success());
    let text = stdout(&out);
    assert_eq!(
        text.matches("+ config_sha256 = (known after apply)")
            .count(),
        3,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_talos_applies_at_once_is_planned_and_applied_without_a_reboot() {
    let lab = Lab::start("2.6", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let reboots = |sim: &talosprov_sim::Simulator| -> Vec<u32> {
        lab.ips
            .iter()
            .map(|ip| sim.node(ip.parse().expect("ip")).expect("node").reboots())
            .collect()
    };
    let before = reboots(sim);

    // machine.network (the control plane's): Talos applies it at once.
    lab.write_topology(|t| t.replace("nameservers: [127.0.0.1]", "nameservers: [127.0.0.53]"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert_eq!(
        text.matches("(applied without a reboot)").count(),
        1,
        "the node's dry run says no reboot:\n{text}"
    );
    assert!(text.contains("~ config/talos-controlplane-01"), "{text}");
    assert!(!text.contains("(the node reboots)"), "{text}");
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    assert_eq!(reboots(sim), before, "no node rebooted");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Reset the node at `ip` through the Talos API as an operator would (no
/// graceful leave, no reboot), then power it on: it waits in maintenance mode.
async fn reset_to_maintenance(lab: &Lab, ip: std::net::IpAddr) -> talosprov_sim::SimNode {
    let client = TalosClient::connect_secure(ip, &lab.talos_credentials().await)
        .await
        .expect("connect");
    client
        .reset(&talosprov_talos::types::ResetOptions {
            graceful: false,
            reboot: false,
            system_partitions: Vec::new(),
        })
        .await
        .expect("reset");
    let node = lab.sim.as_ref().expect("sim").node(ip).expect("node");
    assert!(
        node.wait_for_phase(|p| p == Phase::Halted, Duration::from_secs(30))
            .await
    );
    node.power_on();
    assert!(
        node.wait_for_phase(|p| p == Phase::Maintenance, Duration::from_secs(30))
            .await
    );
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_reset_by_hand_is_drift_and_apply_configures_it_again() {
    let lab = Lab::start("2.7", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let worker: std::net::IpAddr = lab.ips[1].parse().expect("ip");
    let node = reset_to_maintenance(&lab, worker).await;

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(
        text.contains("# config/talos-worker-01 has changed"),
        "{text}"
    );
    assert!(
        text.contains("~ mode = secure -> maintenance (reset)"),
        "{text}"
    );
    assert!(text.contains("~ config/talos-worker-01"), "{text}");
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    assert_eq!(node.phase(), Phase::Secure);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Delete `host`'s VM in Proxmox as an operator would, behind talosprov's
/// back; its state record, as it was.
async fn delete_vm_by_hand(lab: &Lab, host: &str) -> talosprov_statefile::format::Vm {
    let vm = lab.state().resources.vms[host].clone();
    talosprov_proxmox::lifecycle::destroy_vm(&lab.pve.client(), &vm.node, vm.vmid, 5)
        .await
        .expect("delete by hand");
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_only_shows_drift_alone_and_apply_records_it_without_changing_anything() {
    let lab = Lab::start("2.8", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    delete_vm_by_hand(&lab, "talos-gpu-01").await;

    // A normal plan shows the drift and the create that repairs it.
    let text = stdout(&lab.run(&["plan"]).await);
    assert!(
        text.contains("# vm/talos-gpu-01 has been deleted"),
        "{text}"
    );
    assert!(text.contains("+ vm/talos-gpu-01"), "{text}");

    // -refresh-only shows the drift alone.
    let out = lab
        .run(&["plan", "-refresh-only", "-detailed-exitcode"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(
        text.contains("# vm/talos-gpu-01 has been deleted"),
        "{text}"
    );
    assert!(!text.contains("+ vm/talos-gpu-01"), "{text}");
    assert!(text.contains("refresh-only"), "{text}");

    let requests_before = lab.pve.request_total().await;
    let serial = lab.state().serial;
    let out = lab.run(&["apply", "-refresh-only", "-auto-approve"]).await;
    assert!(out.status.success());
    let state = lab.state();
    assert!(
        !state.resources.vms.contains_key("talos-gpu-01"),
        "recorded as gone"
    );
    assert_eq!(state.serial, serial + 1);
    let writes = lab
        .pve
        .requests()
        .await
        .into_iter()
        .skip(requests_before)
        .filter(|(method, _, _)| method != "GET")
        .count();
    assert_eq!(writes, 0, "apply -refresh-only changed nothing in Proxmox");
    let out = lab
        .run(&["plan", "-refresh-only", "-detailed-exitcode"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_version_change_rolls_control_planes_first_without_reboots() {
    let lab = Lab::start("2.9", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let reboots = |sim: &talosprov_sim::Simulator| -> Vec<u32> {
        lab.ips
            .iter()
            .map(|ip| sim.node(ip.parse().expect("ip")).expect("node").reboots())
            .collect()
    };
    let before = reboots(sim);

    lab.write_topology(|t| t.replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.36.3"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert_eq!(
        text.matches("~ kubernetes_version = v1.36.2 -> v1.36.3")
            .count(),
        3,
        "{text}"
    );
    assert_eq!(text.matches("bootstrap manifests").count(), 1, "{text}");
    // The lab's control planes turn kube-proxy off: only CoreDNS is named.
    assert!(
        text.contains("bootstrap manifests (CoreDNS) are not"),
        "{text}"
    );
    let cp = text.find("~ config/talos-controlplane-01").expect("cp");
    let gpu = text.find("~ config/talos-gpu-01").expect("gpu");
    assert!(cp < gpu, "control planes first:\n{text}");

    let logged = sim.rpc_log().len();
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(
        out.status.success(),
        "the Kubernetes roll failed: {}",
        stderr(&out)
    );
    assert_eq!(reboots(sim), before, "no node rebooted");
    // The snapshot before the roll says what it holds: the version the API
    // server ran then, not the topology's new one.
    let archived = crate::support::day2_cluster::archived(&lab.dir.path().join("etcd-snapshots"));
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(
        archived[0].1["kubernetes_version"], "v1.36.2",
        "{archived:?}"
    );
    assert!(archived[0].1["revision"].as_u64() > Some(0), "{archived:?}");
    let applies: Vec<std::net::IpAddr> = sim.rpc_log()[logged..]
        .iter()
        .filter(|l| l.rpc.ends_with("ApplyConfiguration") && l.code == tonic::Code::Ok)
        .map(|l| l.node)
        .collect();
    // The plan's dry runs come first; the roll's four applies are last: the
    // control plane's new component images, then each kubelet.
    let ip = |i: usize| -> std::net::IpAddr { lab.ips[i].parse().expect("ip") };
    let err = stderr(&out);
    let components = err
        .find("new control-plane component images applied on talos-controlplane-01")
        .unwrap_or_else(|| panic!("phase 1 on the control plane:\n{err}"));
    let kubelet = err
        .find("new kubelet image applied on talos-controlplane-01")
        .unwrap_or_else(|| panic!("phase 2 on the control plane:\n{err}"));
    assert!(components < kubelet, "{err}");
    assert_eq!(
        applies[applies.len() - 4..],
        [ip(0), ip(0), ip(2), ip(1)],
        "the control plane's components, then each kubelet, control plane first: {applies:?}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_version_change_gives_every_control_plane_its_components_before_any_kubelet() {
    let lab = Lab::start_ha("2.10", Duration::from_millis(100), "v1.13.8").await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let reboots = |sim: &talosprov_sim::Simulator| -> Vec<u32> {
        lab.ips
            .iter()
            .map(|ip| sim.node(ip.parse().expect("ip")).expect("node").reboots())
            .collect()
    };
    let before = reboots(sim);

    lab.write_topology(|t| t.replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.36.3"));
    let text = stdout(&lab.run(&["plan"]).await);
    assert_eq!(
        text.matches("~ kubernetes_version = v1.36.2 -> v1.36.3")
            .count(),
        5,
        "{text}"
    );
    assert!(
        text.contains("the new control-plane component images on every control plane first"),
        "{text}"
    );
    let logged = sim.rpc_log().len();
    let out = lab
        .run(&["apply", "-auto-approve", "--skip-etcd-snapshot"])
        .await;
    assert!(
        out.status.success(),
        "the Kubernetes roll failed: {}",
        stderr(&out)
    );
    assert_eq!(reboots(sim), before, "no node rebooted");
    let log = sim.rpc_log();
    let applies: Vec<(usize, std::net::IpAddr)> = log
        .iter()
        .enumerate()
        .skip(logged)
        .filter(|(_, l)| l.rpc.ends_with("ApplyConfiguration") && l.code == tonic::Code::Ok)
        .map(|(i, l)| (i, l.node))
        .collect();
    // The plan's dry runs come first; the roll's eight applies are last.
    let roll = &applies[applies.len() - 8..];
    let ip = |i: usize| -> std::net::IpAddr { lab.ips[i].parse().expect("ip") };
    assert_eq!(
        roll.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        [ip(0), ip(1), ip(2), ip(0), ip(1), ip(2), ip(3), ip(4)],
        "phase 1 on each control plane, then every kubelet, control planes first: {applies:?}"
    );
    // Before each control plane's apply, etcd was asked for its members.
    for pair in roll[..6].windows(2) {
        assert!(
            log[pair[0].0 + 1..pair[1].0]
                .iter()
                .any(|l| l.rpc.ends_with("EtcdMemberList") && l.code == tonic::Code::Ok),
            "etcd checked between two control-plane applies: {:?}",
            &log[pair[0].0..=pair[1].0]
        );
    }
    let err = stderr(&out);
    assert!(
        err.contains(
            "new control-plane component images first, on talos-cp-01, talos-cp-02, talos-cp-03"
        ),
        "{err}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_deleted_by_hand_is_drift_and_apply_creates_and_configures_it_again() {
    let lab = Lab::start("2.11", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let worker = delete_vm_by_hand(&lab, "talos-worker-01").await;
    // A VM created again boots a fresh disk: Talos in maintenance mode.
    let ip: std::net::IpAddr = lab.ips[1].parse().expect("ip");
    let node = reset_to_maintenance(&lab, ip).await;

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(
        text.contains("# vm/talos-worker-01 has been deleted"),
        "{text}"
    );
    assert!(text.contains("+ vm/talos-worker-01"), "{text}");
    assert!(text.contains("config/talos-worker-01"), "{text}");
    assert!(!text.contains("vm/talos-controlplane-01"), "{text}");

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let vms = lab.vms().await;
    assert!(
        vms.iter()
            .any(|v| v["vmid"].as_u64() == Some(u64::from(worker.vmid))
                && v["status"] == "running"),
        "{vms:?}"
    );
    assert_eq!(node.phase(), Phase::Secure);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_refresh_false_plans_from_the_state_and_reads_nothing_back() {
    let lab = Lab::start("2.12", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    lab.write_topology(|t| t.replace("nameservers: [127.0.0.1]", "nameservers: [127.0.0.53]"));
    let reads = |requests: &[(String, String, String)], from: usize| {
        requests[from..]
            .iter()
            .filter(|(method, path, _)| method == "GET" && path.contains("cluster/resources"))
            .count()
    };

    let from = lab.pve.request_total().await;
    let out = lab.run(&["apply", "-auto-approve", "-refresh=false"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("~ config/talos-controlplane-01"),
        "{}",
        stdout(&out)
    );
    assert_eq!(reads(&lab.pve.requests().await, from), 0, "no read-back");

    // A plan saved with -refresh=false is applied the same way.
    lab.write_topology(|t| t.replace("nameservers: [127.0.0.1]", "nameservers: [127.0.0.54]"));
    let plan = lab.dir.path().join("offline.tfplan");
    let plan = plan.to_str().expect("utf-8");
    assert!(
        lab.run(&["plan", "-refresh=false", "-out", plan])
            .await
            .status
            .success()
    );
    let from = lab.pve.request_total().await;
    let out = lab.run(&["apply", plan]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(reads(&lab.pve.requests().await, from), 0, "no read-back");

    let out = lab
        .run(&["apply", "-auto-approve", "-refresh-only", "-refresh=false"])
        .await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("-refresh=false"), "{}", stderr(&out));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
