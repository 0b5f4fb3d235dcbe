//! Removing nodes against the simulator: a control plane reset gracefully leaves
//! etcd; an unreachable one has its member removed from another control plane; the
//! last control plane is refused and left alone; a worker is reset.

use crate::support::day2_cluster;

use std::time::Duration;

use crate::support::talos::{FAST, WAIT};
use day2_cluster::TestCluster;
use talosprov_engine::apply::remove::{RemovalOptions, RemovalOutcome, RemoveError, remove_node};
use talosprov_engine::apply::upgrade::snapshot::SnapshotPolicy;
use talosprov_plan::removal::{RemovalRefused, RemovalWarning};
use talosprov_sim::state::Phase;
use talosprov_talos::client::TalosClient;

fn options(snapshot: SnapshotPolicy) -> RemovalOptions {
    RemovalOptions {
        reach_timeout: Duration::from_secs(5),
        etcd_timeout: WAIT,
        backoff: FAST,
        ..RemovalOptions::new(snapshot)
    }
}

/// The etcd member hostnames as `hostname` sees them, sorted.
async fn members_seen_by(cluster: &TestCluster, hostname: &str) -> Vec<String> {
    let client = TalosClient::connect_secure(cluster.node(hostname).ip, &cluster.pki.admin)
        .await
        .unwrap();
    let mut names: Vec<String> = client
        .etcd_member_list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.hostname)
        .collect();
    names.sort();
    names
}

fn served(cluster: &TestCluster, hostname: &str, rpc: &str) -> usize {
    cluster
        .sim
        .node(cluster.node(hostname).ip)
        .unwrap()
        .served()
        .iter()
        .filter(|s| s.rpc == rpc && s.code == tonic::Code::Ok)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_control_plane_is_reset_gracefully_and_leaves_etcd() {
    let cluster = TestCluster::start("127.78.5", 3, 1, "v1.13.8").await;
    let dir = tempfile::tempdir().unwrap();
    let removal = remove_node(
        &cluster.nodes,
        cluster.node("cp-3"),
        &cluster.pki.admin,
        &options(day2_cluster::archive_into(dir.path()).0),
    )
    .await
    .unwrap();
    assert_eq!(removal.outcome, RemovalOutcome::Reset);
    assert_eq!(
        removal.warnings,
        [RemovalWarning::EvenControlPlanes { remaining: 2 }]
    );
    let snapshot = removal.snapshot.unwrap();
    let archived = day2_cluster::archived(dir.path());
    assert_eq!(archived.len(), 1, "{archived:?}");
    let (name, manifest) = &archived[0];
    assert_eq!(snapshot.archive, format!("{}/{name}", dir.path().display()));
    assert_eq!(manifest["reason"], "before removal on cp-3");
    assert_eq!(manifest["plaintext_bytes"], snapshot.bytes);

    assert_eq!(members_seen_by(&cluster, "cp-1").await, ["cp-1", "cp-2"]);
    assert_eq!(members_seen_by(&cluster, "cp-2").await, ["cp-1", "cp-2"]);
    // The node was reset (not asked to remove anyone) and halts for its VM deletion.
    let cp3 = cluster.sim.node(cluster.node("cp-3").ip).unwrap();
    assert!(cp3.wait_for_phase(|p| p == Phase::Halted, WAIT).await);
    assert_eq!(served(&cluster, "cp-3", "Reset"), 1);
    assert_eq!(served(&cluster, "cp-1", "EtcdRemoveMemberByID"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_control_plane_is_removed_from_etcd_through_another() {
    let cluster = TestCluster::start("127.78.6", 3, 0, "v1.13.8").await;
    let cp2 = cluster.sim.node(cluster.node("cp-2").ip).unwrap();
    cp2.refuse_connections_for(Duration::from_secs(600));
    let removal = remove_node(
        &cluster.nodes,
        cluster.node("cp-2"),
        &cluster.pki.admin,
        &options(SnapshotPolicy::Skip),
    )
    .await
    .unwrap();
    match &removal.outcome {
        RemovalOutcome::MemberRemoved { via, .. } => assert_eq!(via, "cp-1"),
        other => panic!("expected the member removed through cp-1, got {other:?}"),
    }
    assert_eq!(removal.snapshot, None);
    assert_eq!(members_seen_by(&cluster, "cp-1").await, ["cp-1", "cp-3"]);
    assert_eq!(members_seen_by(&cluster, "cp-3").await, ["cp-1", "cp-3"]);
    assert_eq!(served(&cluster, "cp-1", "EtcdRemoveMemberByID"), 1);
    assert_eq!(served(&cluster, "cp-2", "Reset"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_control_plane_is_refused_and_left_alone() {
    let cluster = TestCluster::start("127.78.7", 1, 1, "v1.13.8").await;
    let dir = tempfile::tempdir().unwrap();
    let err = remove_node(
        &cluster.nodes,
        cluster.node("cp-1"),
        &cluster.pki.admin,
        &options(day2_cluster::archive_into(dir.path()).0),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &err,
            RemoveError::Refused(RemovalRefused::LastControlPlane { removing }) if removing == &["cp-1"]
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("refusing to remove cp-1"));
    assert_eq!(served(&cluster, "cp-1", "Reset"), 0);
    assert_eq!(served(&cluster, "cp-1", "EtcdSnapshot"), 0);
    assert_eq!(members_seen_by(&cluster, "cp-1").await, ["cp-1"]);
    assert_eq!(
        cluster.sim.node(cluster.node("cp-1").ip).unwrap().phase(),
        Phase::Secure
    );

    // The worker can go: it is reset, and etcd is untouched.
    let removal = remove_node(
        &cluster.nodes,
        cluster.node("w-1"),
        &cluster.pki.admin,
        &options(day2_cluster::archive_into(dir.path()).0),
    )
    .await
    .unwrap();
    assert_eq!(removal.outcome, RemovalOutcome::Reset);
    assert_eq!(removal.snapshot, None);
    assert_eq!(members_seen_by(&cluster, "cp-1").await, ["cp-1"]);
}
