//! Rolling upgrades against the simulator: control planes one at a time and first,
//! each behind the etcd gate and after a snapshot, then workers; a failed upgrade
//! stops at its node and a second run continues; a v1.12 cluster takes the legacy
//! RPC; a Kubernetes version change is applied without reboots.

use crate::support::day2_cluster;

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use crate::support::talos::{FAST, WAIT};
use day2_cluster::TestCluster;
use talosprov_base::schematic::SchematicId;
use talosprov_engine::apply::upgrade::events::{KubernetesPhase, UpgradeError, UpgradeEvent};
use talosprov_engine::apply::upgrade::kubernetes::{
    ConfigUpdate, KubernetesRoll, upgrade_kubernetes,
};
use talosprov_engine::apply::upgrade::rolling::{
    RolloutOptions, UpgradeNode, UpgradeTarget, rolling_upgrade,
};
use talosprov_engine::apply::upgrade::snapshot::SnapshotPolicy;
use talosprov_engine::health::cluster::{ClusterNode, Cni};
use talosprov_engine::health::judge::Expectations;
use talosprov_engine::health::probe::run_checks;
use talosprov_sim::state::{LoggedRpc, Phase};
use talosprov_talos::types::UpgradePath;

const SCHEMATIC: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

fn target(version: &str) -> UpgradeTarget {
    let factory = url::Url::parse("https://factory.talos.dev").unwrap();
    let id = SchematicId::parse(SCHEMATIC).unwrap();
    UpgradeTarget::from_factory(&factory, &id, &version.parse().unwrap())
}

fn options(snapshot: SnapshotPolicy) -> RolloutOptions {
    RolloutOptions {
        health_timeout: WAIT,
        reboot_timeout: WAIT,
        backoff: FAST,
        ..RolloutOptions::new(snapshot)
    }
}

fn every_node(cluster: &TestCluster, from: &str) -> Vec<UpgradeNode> {
    cluster
        .nodes
        .iter()
        .map(|n| UpgradeNode {
            node: n.clone(),
            from_version: from.to_string(),
        })
        .collect()
}

/// The engine's view: it records nodes as the events say.
#[derive(Default)]
struct Recorder(Mutex<Vec<UpgradeEvent>>);

impl Recorder {
    fn record(&self, event: UpgradeEvent) {
        self.0.lock().unwrap().push(event);
    }

    fn upgraded(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                UpgradeEvent::Upgraded { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    }

    fn already(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                UpgradeEvent::AlreadyUpgraded { node, .. } => Some(node.clone()),
                _ => None,
            })
            .collect()
    }
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

fn position(log: &[LoggedRpc], ip: IpAddr, rpc: &str, after: usize) -> Option<usize> {
    log.iter()
        .enumerate()
        .skip(after)
        .find(|(_, e)| e.node == ip && e.rpc == rpc && e.code == tonic::Code::Ok)
        .map(|(i, _)| i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_planes_upgrade_one_at_a_time_behind_the_etcd_gate_then_workers() {
    let cluster = TestCluster::start("127.78.1", 3, 2, "v1.13.7").await;
    // etcd comes back a while after apid does, as on a real node: only the gate
    // keeps the next control plane waiting.
    for cp in ["cp-1", "cp-2", "cp-3"] {
        let node = cluster.sim.node(cluster.node(cp).ip).unwrap();
        node.set_slow_boot(std::time::Duration::from_millis(400));
    }
    // cp-3 is cut off for a moment when the rollout starts: etcd has an unhealthy
    // member, so cp-1 must wait.
    let cp3 = cluster.sim.node(cluster.node("cp-3").ip).unwrap();
    cp3.refuse_connections_for(std::time::Duration::from_millis(1500));
    let dir = tempfile::tempdir().unwrap();
    let recorder = Recorder::default();
    let target = target("v1.13.8");
    assert_send(rolling_upgrade(
        &cluster.nodes,
        &every_node(&cluster, "v1.13.7"),
        &target,
        &cluster.pki.admin,
        &options(day2_cluster::archive_into(dir.path()).0),
        &|e| recorder.record(e),
    ))
    .await
    .unwrap();

    // The order the nodes accepted their upgrades, and etcd healthy at each one.
    let upgrades = cluster.sim.upgrade_log();
    let order: Vec<String> = upgrades
        .iter()
        .map(|u| cluster.hostname_of(u.node))
        .collect();
    assert_eq!(order, ["cp-1", "cp-2", "cp-3", "w-1", "w-2"]);
    assert!(upgrades.iter().all(|u| u.etcd_healthy), "{upgrades:#?}");
    assert!(upgrades.iter().all(|u| u.image == target.image));

    // One at a time: each control plane rebooted, came back and answered the etcd
    // gate before the next one was asked to pull its image; workers came after.
    let log = cluster.sim.rpc_log();
    let mut cursor = 0;
    for pair in ["cp-1", "cp-2", "cp-3", "w-1"].windows(2) {
        let (a, b) = (cluster.node(pair[0]).ip, cluster.node(pair[1]).ip);
        let reboot = position(&log, a, "Reboot", cursor).expect("reboot");
        let gate = position(&log, a, "EtcdMemberList", reboot).expect("gate after reboot");
        let next = position(&log, b, "ImageService/Pull", 0).expect("next pull");
        assert!(reboot < gate && gate < next, "{} then {}", pair[0], pair[1]);
        cursor = reboot;
    }
    let first_worker = position(&log, cluster.node("w-1").ip, "ImageService/Pull", 0).unwrap();
    assert!(
        log[..first_worker]
            .iter()
            .all(|e| e.rpc != "Reboot" || cluster.hostname_of(e.node).starts_with("cp-"))
    );

    // The engine heard of each node in order; every node runs the new version.
    assert_eq!(recorder.upgraded(), ["cp-1", "cp-2", "cp-3", "w-1", "w-2"]);
    for n in &cluster.nodes {
        assert_eq!(cluster.sim.node(n.ip).unwrap().talos_tag(), "v1.13.8");
    }
    let paths: Vec<UpgradePath> = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            UpgradeEvent::Rebooting { path, .. } => Some(*path),
            _ => None,
        })
        .collect();
    assert_eq!(paths, [UpgradePath::Lifecycle; 5]);

    // One snapshot per control plane, encrypted, each with its manifest.
    let reasons: Vec<String> = day2_cluster::archived(dir.path())
        .into_iter()
        .map(|(_, m)| m["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        reasons,
        ["cp-1", "cp-2", "cp-3"].map(|cp| format!("before talos v1.13.8 on {cp}"))
    );
    let expect = Expectations {
        talos_version: "v1.13.8".into(),
        cni: Some(Cni::None),
    };
    let report = run_checks(&cluster.nodes, &cluster.pki.admin, &expect).await;
    assert!(report.is_healthy(), "{:#?}", report.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upgrade_stops_at_its_node_and_a_second_run_continues() {
    let cluster = TestCluster::start("127.78.2", 3, 2, "v1.13.7").await;
    let cp2 = cluster.sim.node(cluster.node("cp-2").ip).unwrap();
    cp2.fail_next_upgrade("installer: not enough space on the boot partition");
    let recorder = Recorder::default();
    let nodes = every_node(&cluster, "v1.13.7");
    let target = target("v1.13.8");
    let options = options(SnapshotPolicy::Skip);
    let err = rolling_upgrade(
        &cluster.nodes,
        &nodes,
        &target,
        &cluster.pki.admin,
        &options,
        &|e| recorder.record(e),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, UpgradeError::Upgrade { .. }), "{err:?}");
    assert_eq!(err.node(), "cp-2");
    let chain: Vec<String> = anyhow::Error::new(err)
        .chain()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        chain,
        [
            format!("upgrade of cp-2 to {} failed", target.image),
            "upgrade on node 127.78.2.2 (cp-2) failed: installer exited with code 1: installer: not enough space on the boot partition".to_string(),
        ]
    );

    // Stopped at cp-2: only cp-1 moved; the rest were not touched.
    assert_eq!(recorder.upgraded(), ["cp-1"]);
    let tags: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| cluster.sim.node(n.ip).unwrap().talos_tag())
        .collect();
    assert_eq!(
        tags,
        ["v1.13.8", "v1.13.7", "v1.13.7", "v1.13.7", "v1.13.7"]
    );
    for name in ["cp-3", "w-1", "w-2"] {
        assert!(
            cluster
                .sim
                .node(cluster.node(name).ip)
                .unwrap()
                .upgrades()
                .is_empty()
        );
    }

    // The second run skips cp-1 (already at the version) and finishes the rest.
    let again = Recorder::default();
    rolling_upgrade(
        &cluster.nodes,
        &nodes,
        &target,
        &cluster.pki.admin,
        &options,
        &|e| again.record(e),
    )
    .await
    .unwrap();
    assert_eq!(again.already(), ["cp-1"]);
    assert_eq!(again.upgraded(), ["cp-2", "cp-3", "w-1", "w-2"]);
    let cp1 = cluster.sim.node(cluster.node("cp-1").ip).unwrap();
    assert_eq!(cp1.upgrades().len(), 1, "cp-1 was not upgraded twice");
    for n in &cluster.nodes {
        assert_eq!(cluster.sim.node(n.ip).unwrap().talos_tag(), "v1.13.8");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_before_talos_1_13_upgrade_through_the_legacy_rpc() {
    let cluster = TestCluster::start("127.78.3", 1, 1, "v1.12.6").await;
    let recorder = Recorder::default();
    rolling_upgrade(
        &cluster.nodes,
        &every_node(&cluster, "v1.12.6"),
        &target("v1.13.8"),
        &cluster.pki.admin,
        &options(SnapshotPolicy::Skip),
        &|e| recorder.record(e),
    )
    .await
    .unwrap();
    let events = recorder.0.lock().unwrap().clone();
    let paths: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            UpgradeEvent::Rebooting { node, path } => Some((node.as_str(), *path)),
            _ => None,
        })
        .collect();
    assert_eq!(
        paths,
        [("cp-1", UpgradePath::Legacy), ("w-1", UpgradePath::Legacy)]
    );
    let log = cluster.sim.rpc_log();
    let upgrade_rpcs: Vec<(String, &str)> = log
        .iter()
        .filter(|e| e.rpc.contains("Upgrade"))
        .map(|e| (cluster.hostname_of(e.node), e.rpc.as_str()))
        .collect();
    assert_eq!(
        upgrade_rpcs,
        [
            ("cp-1".to_string(), "Upgrade"),
            ("w-1".to_string(), "Upgrade")
        ]
    );
    for n in &cluster.nodes {
        let node = cluster.sim.node(n.ip).unwrap();
        assert!(
            node.wait_for_phase(|p| p == Phase::Secure, WAIT).await
                && node.talos_tag() == "v1.13.8"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_upgrade_at_most_max_parallel_at_a_time() {
    let cluster = TestCluster::start("127.78.9", 1, 3, "v1.13.7").await;
    let options = RolloutOptions {
        max_parallel: NonZeroUsize::new(2).unwrap(),
        ..options(SnapshotPolicy::Skip)
    };
    let recorder = Recorder::default();
    rolling_upgrade(
        &cluster.nodes,
        &every_node(&cluster, "v1.13.7"),
        &target("v1.13.8"),
        &cluster.pki.admin,
        &options,
        &|e| recorder.record(e),
    )
    .await
    .unwrap();
    // w-3 started only after both w-1 and w-2 were back.
    let log = cluster.sim.rpc_log();
    let ip = |name: &str| cluster.node(name).ip;
    let w3_pull = position(&log, ip("w-3"), "ImageService/Pull", 0).unwrap();
    for w in ["w-1", "w-2"] {
        let reboot = position(&log, ip(w), "Reboot", 0).unwrap();
        let back = position(&log, ip(w), "ServiceList", reboot).unwrap();
        assert!(back < w3_pull, "{w} was back before w-3 started");
    }
    let mut upgraded = recorder.upgraded();
    upgraded[1..3].sort();
    assert_eq!(upgraded, ["cp-1", "w-1", "w-2", "w-3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_roll_applies_components_then_kubelets_without_reboots_control_planes_first() {
    let cluster = TestCluster::start("127.78.4", 3, 1, "v1.13.8").await;
    let endpoint = cluster.node("cp-1").ip;
    let config = |n: &ClusterNode, kubelet: &str| {
        cluster
            .pki
            .machine_config(n.role.as_str(), &n.hostname, endpoint)
            .replace(
                "  certSANs: []\n",
                &format!(
                    "  certSANs: []\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:{kubelet}\n"
                ),
            )
            .replace(
                "cluster:\n",
                "cluster:\n  apiServer:\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n",
            )
            .into_bytes()
    };
    // The worker comes first in the lists; the roll still starts with the control
    // planes, and phase 1 touches control planes only.
    let nodes: Vec<ClusterNode> = cluster.nodes.iter().rev().cloned().collect();
    let roll = KubernetesRoll {
        control_plane_components: nodes
            .iter()
            .map(|n| ConfigUpdate {
                node: n.clone(),
                config: config(n, "v1.36.2"),
            })
            .collect(),
        kubelet: nodes
            .iter()
            .map(|n| ConfigUpdate {
                node: n.clone(),
                config: config(n, "v1.36.3"),
            })
            .collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    let before = cluster.sim.rpc_log().len();
    let recorder = Recorder::default();
    assert_send(upgrade_kubernetes(
        &cluster.nodes,
        &roll,
        "v1.13.8",
        &cluster.pki.admin,
        &options(day2_cluster::archive_into(dir.path()).0),
        &|e| recorder.record(e),
    ))
    .await
    .unwrap();
    let log = cluster.sim.rpc_log();
    let applied: Vec<String> = log[before..]
        .iter()
        .filter(|e| e.rpc == "ApplyConfiguration" && e.code == tonic::Code::Ok)
        .map(|e| cluster.hostname_of(e.node))
        .collect();
    assert_eq!(
        applied,
        ["cp-3", "cp-2", "cp-1", "cp-3", "cp-2", "cp-1", "w-1"]
    );
    let phases: Vec<(String, KubernetesPhase)> = recorder
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            UpgradeEvent::ConfigApplied { node, phase } => Some((node.clone(), *phase)),
            _ => None,
        })
        .collect();
    assert_eq!(
        phases[2],
        ("cp-1".into(), KubernetesPhase::ControlPlaneComponents)
    );
    assert_eq!(phases[3], ("cp-3".into(), KubernetesPhase::Kubelet));
    assert!(
        log[before..]
            .iter()
            .all(|e| !e.rpc.contains("Reboot") && !e.rpc.contains("Upgrade")),
        "no reboot and no upgrade"
    );
    for n in &cluster.nodes {
        assert_eq!(cluster.sim.node(n.ip).unwrap().phase(), Phase::Secure);
    }
    // One snapshot, before the first control plane.
    let archived = day2_cluster::archived(dir.path());
    assert_eq!(archived.len(), 1, "{archived:?}");
    assert_eq!(archived[0].1["reason"], "before kubernetes-upgrade on cp-3");
    let debug = format!("{:?}", roll.kubelet[0]);
    assert!(
        !debug.contains("kubelet") && debug.contains("(sensitive"),
        "{debug}"
    );
}
