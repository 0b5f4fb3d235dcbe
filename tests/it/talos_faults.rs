//! The simulator's rejections and fault switches as the client sees them: a config the
//! node rejects, a failing apply, refused connections, a slow boot before bootstrap, and
//! a lost etcd member; plus the etcd maintenance RPCs.

use crate::support::talos::{FAST, WAIT, ip, sim_options};
use crate::support::talos_pki;

use std::net::IpAddr;
use std::time::Duration;

use talos_pki::ClusterPki;
use talosprov_sim::Simulator;
use talosprov_sim::state::{Phase, SimOptions};
use talosprov_talos::client::TalosClient;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::{ApplyOptions, BootstrapOutcome};
use talosprov_talos::wait::{bootstrap_when_ready, wait_etcd_ready, wait_maintenance, wait_secure};

fn options() -> SimOptions {
    sim_options(Duration::from_millis(100))
}

async fn configure(
    addr: IpAddr,
    pki: &ClusterPki,
    role: &str,
    hostname: &str,
    endpoint: IpAddr,
) -> TalosClient {
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    let config = pki.machine_config(role, hostname, endpoint);
    client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    wait_secure(addr, Some(hostname), &pki.admin, WAIT, FAST)
        .await
        .unwrap()
}

#[tokio::test]
async fn rejected_config_comes_back_with_the_node_message_and_hostname() {
    let addr = ip("127.77.4.1");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let pki = ClusterPki::new("rejected");
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    let config = pki
        .machine_config("worker", "w-bad", addr)
        .replace("type: worker", "type: \"\"")
        .replace("https://", "http://");
    let err = client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, TalosError::InvalidConfig { .. }), "{err:?}");
    insta::assert_snapshot!(err.to_string(), @r#"
    node 127.77.4.1 (w-bad) rejected the machine config: 2 errors occurred:
    	* unknown machine type ""
    	* invalid controlplane endpoint: "http://127.77.4.1:6443": scheme must be https, not "http"
    "#);
    // Nothing changed on the node.
    assert_eq!(sim.node(addr).unwrap().phase(), Phase::Maintenance);
    sim.shutdown().await;
}

#[tokio::test]
async fn failing_apply_is_reported_and_the_next_apply_succeeds() {
    let addr = ip("127.77.4.2");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let pki = ClusterPki::new("failing-apply");
    let node = sim.node(addr).unwrap();
    node.fail_next_apply(tonic::Code::Internal, "failed to write config to STATE");
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    let config = pki.machine_config("worker", "w-1", addr);
    let err = client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::Internal));
    assert!(
        err.to_string().contains("failed to write config to STATE"),
        "{err}"
    );
    client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    let codes: Vec<_> = node
        .served()
        .into_iter()
        .filter(|s| s.rpc == "ApplyConfiguration")
        .map(|s| s.code)
        .collect();
    assert_eq!(codes, [tonic::Code::Internal, tonic::Code::Ok]);
    sim.shutdown().await;
}

#[tokio::test]
async fn refused_connections_are_retried_until_the_node_listens_or_the_deadline() {
    let addr = ip("127.77.4.3");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let node = sim.node(addr).unwrap();
    node.refuse_connections_for(Duration::from_secs(60));
    let err = wait_maintenance(addr, Some("w-1"), Duration::from_millis(500), FAST)
        .await
        .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"node 127.77.4.3 (w-1) was not reachable in maintenance mode within 0.5 s: w-1 refuses connections on the Talos API port 50000 (for the last 0 s): it is down, booting or installing");
    let TalosError::Deadline { last, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(**last, TalosError::Unreachable { .. }), "{last:?}");

    node.refuse_connections_for(Duration::from_millis(400));
    let client = wait_maintenance(addr, Some("w-1"), WAIT, FAST)
        .await
        .unwrap();
    assert_eq!(client.version().await.unwrap().platform, "nocloud");
    sim.shutdown().await;
}

#[tokio::test]
async fn slow_boot_makes_bootstrap_wait_through_failed_precondition() {
    let addr = ip("127.77.4.4");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let pki = ClusterPki::new("slow-boot");
    let node = sim.node(addr).unwrap();
    node.set_slow_boot(Duration::from_secs(2));
    let client = configure(addr, &pki, "controlplane", "cp-1", addr).await;
    let early = client.bootstrap().await.unwrap_err();
    assert!(matches!(early, TalosError::NotReady { .. }), "{early:?}");
    assert!(early.to_string().contains("bootstrap is not available yet"));
    assert_eq!(
        bootstrap_when_ready(&client, WAIT, FAST).await.unwrap(),
        BootstrapOutcome::Bootstrapped
    );
    wait_etcd_ready(&client, WAIT, FAST).await.unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn lost_etcd_member_leaves_the_member_list_and_bootstrap_is_no_longer_healthy() {
    let (cp1, cp2) = (ip("127.77.4.5"), ip("127.77.4.6"));
    let sim = Simulator::start(&[cp1, cp2], options()).await.unwrap();
    let pki = ClusterPki::new("lost-member");
    let c1 = configure(cp1, &pki, "controlplane", "cp-1", cp1).await;
    let c2 = configure(cp2, &pki, "controlplane", "cp-2", cp1).await;
    wait_etcd_ready(&c1, WAIT, FAST).await.unwrap();
    bootstrap_when_ready(&c1, WAIT, FAST).await.unwrap();
    assert_eq!(c1.etcd_member_list().await.unwrap().len(), 2);

    sim.node(cp2).unwrap().lose_etcd_member();
    let members: Vec<_> = c1
        .etcd_member_list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.hostname)
        .collect();
    assert_eq!(members, ["cp-1"]);
    let etcd = c2
        .service_list()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.id == "etcd")
        .unwrap();
    assert_eq!((etcd.state.as_str(), etcd.healthy), ("Failed", Some(false)));
    // cp-2 still has etcd data, so Bootstrap is AlreadyExists, but its etcd is not
    // healthy: that is not success.
    let err = c2.bootstrap().await.unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::AlreadyExists), "{err}");
    sim.shutdown().await;
}

#[tokio::test]
async fn etcd_snapshot_leave_and_remove_member() {
    let (cp1, cp2, cp3) = (ip("127.77.4.7"), ip("127.77.4.8"), ip("127.77.4.9"));
    let sim = Simulator::start(&[cp1, cp2, cp3], options()).await.unwrap();
    let pki = ClusterPki::new("etcd-ops");
    let c1 = configure(cp1, &pki, "controlplane", "cp-1", cp1).await;
    let c2 = configure(cp2, &pki, "controlplane", "cp-2", cp1).await;
    let _c3 = configure(cp3, &pki, "controlplane", "cp-3", cp1).await;
    wait_etcd_ready(&c1, WAIT, FAST).await.unwrap();
    bootstrap_when_ready(&c1, WAIT, FAST).await.unwrap();

    let mut snapshot = Vec::new();
    let written = c1.etcd_snapshot(&mut snapshot).await.unwrap();
    assert_eq!(written, snapshot.len() as u64);
    assert!(written > 0);

    c2.etcd_leave_cluster().await.unwrap();
    let members = c1.etcd_member_list().await.unwrap();
    assert_eq!(members.len(), 2);
    let cp3_id = members.iter().find(|m| m.hostname == "cp-3").unwrap().id;
    c1.etcd_remove_member_by_id(cp3_id).await.unwrap();
    let left: Vec<_> = c1
        .etcd_member_list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.hostname)
        .collect();
    assert_eq!(left, ["cp-1"]);
    let err = c1.etcd_remove_member_by_id(cp3_id).await.unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::NotFound), "{err}");
    sim.shutdown().await;
}
