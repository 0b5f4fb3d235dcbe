//! A cluster talosprov cannot read in full is never planned as converged: a
//! node that answers neither in secure nor in maintenance mode is shown as
//! unknown, naming the node and the error, and `plan -detailed-exitcode`
//! (and `-refresh-only`, as a scheduled drift job runs it) exits 1, not 0.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_node_makes_the_plan_unknown_and_detailed_exitcode_fail() {
    let lab = Lab::start("20.9", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let clean = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(clean.status.code(), Some(0), "{}", stdout(&clean));

    let worker = lab.ips[1].clone();
    let sim = lab.sim.as_ref().expect("simulator");
    sim.node(worker.parse().expect("ip"))
        .expect("node")
        .refuse_connections_for(Duration::from_secs(600));
    for args in [
        &["plan", "-detailed-exitcode"][..],
        &["plan", "-refresh-only", "-detailed-exitcode"][..],
    ] {
        let out = lab.run(args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        let text = stdout(&out);
        assert!(
            text.contains("Unknown: config/talos-worker-01: the node answers neither in secure mode nor in maintenance mode"),
            "{text}"
        );
        assert!(
            text.contains(&format!("node {worker} is unreachable")),
            "{text}"
        );
        assert!(
            !text.contains("No changes. The cluster matches the topology."),
            "{text}"
        );
        assert!(
            stderr(&out).contains("config/talos-worker-01"),
            "{}",
            stderr(&out)
        );
    }
    // Without -detailed-exitcode the plan still says so, and exits 0.
    let out = lab.run(&["plan"]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).contains("could not be read"),
        "{}",
        stdout(&out)
    );
}
