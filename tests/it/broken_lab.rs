//! A cluster talosprov cannot read in full is never planned as converged: a
//! node that answers neither in secure nor in maintenance mode is shown as
//! unknown, naming the node and the error, and `plan -detailed-exitcode`
//! (and `-refresh-only`, as a scheduled drift job runs it) exits 1, not 0.
//! A control plane whose etcd is gone (back in maintenance mode, or configured
//! again with an etcd that waits for a bootstrap) is Broken: apply refuses
//! the plan, until `-allow-new-etcd` bootstraps a new, empty etcd.

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_wiped_to_maintenance_is_broken_until_a_new_etcd_is_allowed() {
    let lab = Lab::start("20.14", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = crate::support::kubectl::lab_kubeconfig(&lab).await;
    crate::backup_lab::put_marker(&lab, &kubeconfig);
    let ip: std::net::IpAddr = lab.ips[0].parse().expect("ip");
    let node = lab.sim.as_ref().expect("sim").node(ip).expect("node");
    // Reset by hand: its VM stays, it boots into maintenance mode, etcd is gone.
    node.wipe();
    assert!(
        node.wait_for_phase(
            |p| p == talosprov_sim::state::Phase::Maintenance,
            Duration::from_secs(30)
        )
        .await
    );

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "Broken: bootstrap: etcd is gone on every control plane (talos-controlplane-01: \
             maintenance mode)"
        ),
        "{text}"
    );
    assert!(text.contains("config/talos-controlplane-01"), "{text}");
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the plan cannot be applied as it is; nothing was changed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(node.phase(), talosprov_sim::state::Phase::Maintenance);

    // Configured again by hand (as talosctl apply-config would): secure mode,
    // with an etcd that waits for a bootstrap. Still broken, and said so.
    let config = lab.state().outputs.machineconfigs["talos-controlplane-01"]
        .value
        .expose()
        .clone();
    let client = talosprov_talos::client::TalosClient::connect_maintenance(ip)
        .await
        .expect("maintenance mode");
    client
        .apply_configuration(
            config.as_bytes(),
            &talosprov_talos::types::ApplyOptions::default(),
        )
        .await
        .expect("apply the config by hand");
    assert!(
        node.wait_for_phase(
            |p| p == talosprov_sim::state::Phase::Secure,
            Duration::from_secs(30)
        )
        .await
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(
            "etcd is gone on every control plane (talos-controlplane-01: etcd waits for a \
             bootstrap)"
        ),
        "{}",
        stdout(&out)
    );

    // A broken plan is not saved (apply would refuse it), and the plan fails:
    // a merge request's plan job goes red, not its apply job after review.
    let planfile = lab.dir.path().join("new-etcd.plan");
    let report = lab.dir.path().join("plan.json");
    let out = lab
        .run(&[
            "plan",
            "-out",
            planfile.to_str().unwrap(),
            "--report-gitlab",
            report.to_str().unwrap(),
        ])
        .await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("Broken: bootstrap"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("the plan is not saved to")
            && stderr(&out).contains("apply refuses a broken plan"),
        "{}",
        stderr(&out)
    );
    assert!(!planfile.exists(), "no saved plan");
    assert!(!stdout(&out).contains("Saved the plan"), "{}", stdout(&out));

    // A saved plan made with -allow-new-etcd shows the new bootstrap, and
    // applies it: a new, empty etcd; the old objects are gone.
    let out = lab
        .run(&[
            "plan",
            "-allow-new-etcd",
            "-out",
            planfile.to_str().unwrap(),
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("a new, empty etcd on talos-controlplane-01 (-allow-new-etcd)"),
        "{text}"
    );
    assert!(!text.contains("Broken:"), "{text}");
    let out = lab.run(&["apply", planfile.to_str().unwrap()]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(node.etcd_bootstrapped());
    let gone =
        crate::support::kubectl::kubectl_output(&kubeconfig, &["get", "configmap", "marker"]);
    assert!(
        !gone.status.success(),
        "a new etcd has none of the old objects"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
