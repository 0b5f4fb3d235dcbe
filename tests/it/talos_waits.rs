//! Secure-mode waits against the simulator that say why they wait: the cause
//! that persists is told once and named in the deadline error; a node found
//! in maintenance mode where it should be configured, or one running another
//! cluster's config, ends the wait at once instead of being waited out.

use crate::support::talos::{FAST, WAIT, ip, sim_options};
use crate::support::talos_pki;

use std::sync::Mutex;
use std::time::Duration;

use talos_pki::ClusterPki;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::ApplyOptions;
use talosprov_talos::wait::{
    InMaintenance, SecureWait, wait_maintenance, wait_secure, wait_secure_with,
};

fn options() -> SimOptions {
    sim_options(Duration::ZERO)
}

/// `for the last 3 s` → `for the last N s`, so snapshots do not depend on timing.
fn steady(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("for the last ") {
        let (head, tail) = rest.split_at(i + "for the last ".len());
        out.push_str(head);
        let digits = tail.chars().take_while(char::is_ascii_digit).count();
        out.push('N');
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn a_node_in_maintenance_mode_ends_a_wait_for_a_configured_node_at_once() {
    let addr = ip("127.79.1.1");
    let pki = ClusterPki::new("waits-maintenance");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let told = Mutex::new(Vec::<String>::new());
    let on_cause = |c: &str| told.lock().unwrap().push(c.to_owned());
    let wait = SecureWait {
        timeout: Duration::from_secs(600),
        backoff: FAST,
        in_maintenance: InMaintenance::Fails,
        on_cause: &on_cause,
    };
    // The test's own bound: far below the wait's 600 s deadline.
    let err = tokio::time::timeout(
        WAIT,
        wait_secure_with(addr, Some("cp-1"), &pki.admin, &wait),
    )
    .await
    .expect("the wait ends without waiting out its deadline")
    .unwrap_err();
    assert!(
        matches!(
            err,
            TalosError::InMaintenance {
                after_apply: false,
                ..
            }
        ),
        "{err:?}"
    );
    insta::assert_snapshot!(err.to_string(), @"node 127.79.1.1 (cp-1) is in maintenance mode: it was reset, or lost its config, though the state records it configured; run `talosprov plan`: it plans the config's re-apply");
    sim.shutdown().await;
}

#[tokio::test]
async fn maintenance_mode_after_the_config_is_tolerated_for_the_grace_then_named() {
    let addr = ip("127.79.1.2");
    let pki = ClusterPki::new("waits-grace");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let wait = SecureWait {
        timeout: Duration::from_secs(600),
        backoff: FAST,
        in_maintenance: InMaintenance::AfterApply {
            grace: Duration::from_millis(300),
        },
        on_cause: &|_| {},
    };
    let err = tokio::time::timeout(WAIT, wait_secure_with(addr, Some("w-1"), &pki.admin, &wait))
        .await
        .expect("the wait ends after the grace")
        .unwrap_err();
    assert!(
        matches!(
            err,
            TalosError::InMaintenance {
                after_apply: true,
                settling: false,
                ..
            }
        ),
        "{err:?}"
    );
    insta::assert_snapshot!(err.to_string(), @"node 127.79.1.2 (w-1) answers in maintenance mode again after it was given its machine config: it was reset, or did not keep the config (a failed install); run apply again to give it the config");
    // The node never went down: it was in maintenance mode throughout.
    assert_eq!(sim.node(addr).unwrap().reboots(), 0);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_node_of_another_cluster_ends_the_wait_at_once() {
    let addr = ip("127.79.1.3");
    let theirs = ClusterPki::new("waits-theirs");
    let ours = ClusterPki::new("waits-ours");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    client
        .apply_configuration(
            theirs
                .machine_config("controlplane", "cp-1", addr)
                .as_bytes(),
            &ApplyOptions::default(),
        )
        .await
        .unwrap();
    wait_secure(addr, Some("cp-1"), &theirs.admin, WAIT, FAST)
        .await
        .unwrap();
    let wait = SecureWait {
        timeout: Duration::from_secs(600),
        backoff: FAST,
        in_maintenance: InMaintenance::Fails,
        on_cause: &|_| {},
    };
    let err = tokio::time::timeout(
        WAIT,
        wait_secure_with(addr, Some("cp-1"), &ours.admin, &wait),
    )
    .await
    .expect("the wait ends at once")
    .unwrap_err();
    assert!(matches!(err, TalosError::OtherCluster { .. }), "{err:?}");
    insta::assert_snapshot!(err.to_string(), @"node 127.79.1.3 (cp-1) runs another cluster's config: its certificate is not from our cluster's CA and it requires a client certificate; it was reset and configured by someone else, or its address belongs to another machine");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_cause_that_persists_is_told_once_and_named_in_the_deadline_error() {
    // A worker whose cluster has no configured control plane keeps its API
    // closed: it has no certificate (trustd) yet.
    let addr = ip("127.79.1.4");
    let pki = ClusterPki::new("waits-cause");
    let sim = Simulator::start(&[addr], options()).await.unwrap();
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    client
        .apply_configuration(
            pki.machine_config("worker", "w-1", addr).as_bytes(),
            &ApplyOptions::default(),
        )
        .await
        .unwrap();
    let told = Mutex::new(Vec::<String>::new());
    let on_cause = |c: &str| told.lock().unwrap().push(c.to_owned());
    let wait = SecureWait {
        timeout: Duration::from_millis(1500),
        backoff: FAST,
        in_maintenance: InMaintenance::AfterApply {
            grace: Duration::from_secs(10),
        },
        on_cause: &on_cause,
    };
    let err = wait_secure_with(addr, Some("w-1"), &pki.admin, &wait)
        .await
        .unwrap_err();
    assert_eq!(
        *told.lock().unwrap(),
        ["w-1 refuses connections on the Talos API port 50000: it is down, booting or installing"],
        "told once, however many attempts failed the same way"
    );
    insta::assert_snapshot!(steady(&err.to_string()), @"node 127.79.1.4 (w-1) was not up in secure mode within 1.5 s: w-1 refuses connections on the Talos API port 50000 (for the last N s): it is down, booting or installing");
    sim.shutdown().await;
}
