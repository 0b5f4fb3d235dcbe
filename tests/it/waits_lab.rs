//! Runs that say why, end to end against fakepve and the Talos simulator: a
//! connection reset is retried and shown as one line per retry; a failed
//! control plane stops the workers' waits at once with the reason; a wait
//! names the cause that keeps it waiting; a node reset to maintenance mode is
//! recognised by a wait for a configured node, and its config re-applied by
//! the next plan; a TLS refusal says what to set.

use std::time::Duration;

use crate::support::cli::{signal, stderr, stdout};
use crate::support::lab::Lab;
use crate::support::wait::until;
use serde_json::json;
use talosprov_sim::state::Phase;
use talosprov_talos::client::TalosClient;

/// Lines of `text` containing `needle`, with what changes from run to run
/// (the clock, elapsed seconds) taken out.
fn lines_with(text: &str, needle: &str) -> String {
    text.lines()
        .filter(|l| l.contains(needle))
        .map(|l| {
            let l = match l.split_once(' ') {
                Some((stamp, rest)) if stamp.len() == 8 && stamp.as_bytes()[2] == b':' => rest,
                _ => l,
            };
            let mut out = String::new();
            let mut rest = l;
            while let Some(i) = rest.find(|c: char| c.is_ascii_digit()) {
                let (head, tail) = rest.split_at(i);
                let digits = tail.chars().take_while(char::is_ascii_digit).count();
                let after = &tail[digits..];
                out.push_str(head);
                if after.starts_with("s elapsed") || after.starts_with("s:") {
                    out.push('N');
                } else {
                    out.push_str(&tail[..digits]);
                }
                rest = after;
            }
            out.push_str(rest);
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_are_retried_and_each_retry_is_a_line() {
    let lab = Lab::start("9.5", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    // During a plan's refresh: the cluster-wide VM listing.
    lab.pve
        .cmd(json!({"cmd": "reset_connections", "method": "GET", "suffix": "/cluster/resources", "times": 1}))
        .await;
    let out = lab.run(&["plan"]).await;
    assert!(out.status.success());
    let err = stderr(&out);
    assert_eq!(
        err.matches("Retrying Proxmox: list the cluster's VMs")
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("(attempt 2): Connection reset by peer"),
        "{err}"
    );

    // During an apply's steps: the status of the tasks they wait for.
    lab.pve
        .cmd(
            json!({"cmd": "reset_connections", "method": "GET", "suffix": "/status",
                    "contains": "/tasks/", "times": 2}),
        )
        .await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the resets do not fail the apply");
    let err = stderr(&out);
    let retries: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(": retrying Proxmox: "))
        .collect();
    assert_eq!(retries.len(), 2, "one line per retry:\n{err}");
    assert!(
        retries
            .iter()
            .all(|l| l.contains("Connection reset by peer")),
        "{retries:?}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_control_plane_stops_the_workers_waits_at_once_with_the_reason() {
    let lab = Lab::start("9.6", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    let cp: std::net::IpAddr = lab.ips[0].parse().expect("ip");
    let sim = lab.sim.as_ref().expect("sim");
    sim.node(cp).expect("node").fail_next_apply(
        tonic::Code::InvalidArgument,
        "machine.install.disk is required",
    );
    // Without the control plane the workers cannot get their certificates; their
    // 900 s secure-mode waits must not be waited out (`run` gives up after 120 s).
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    for worker in ["talos-worker-01", "talos-gpu-01"] {
        assert!(
            err.contains(&format!(
                "config/{worker}: failed after 0s: {worker} cannot come up in secure mode"
            )) || err.contains(&format!(
                "config/{worker}: failed after 1s: {worker} cannot come up in secure mode"
            )),
            "{err}"
        );
    }
    insta::assert_snapshot!(lines_with(&err, "config/talos-worker-01: failed"));

    // The fault is gone: the next apply configures every node.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the apply after the fault");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_names_its_cause_and_a_reset_node_is_recognised_by_a_wait_for_a_configured_one() {
    let lab = Lab::start("9.7", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    let cp: std::net::IpAddr = lab.ips[0].parse().expect("ip");
    let node = lab.sim.as_ref().expect("sim").node(cp).expect("node");
    // etcd never gets ready: the bootstrap keeps waiting, and says why.
    node.set_slow_boot(Duration::from_secs(3600));
    let apply = lab
        .command(&["apply", "-auto-approve"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start apply");
    until(
        "the control plane up in secure mode",
        Duration::from_secs(60),
        async || {
            lab.state()
                .resources
                .configs
                .get("talos-controlplane-01")
                .is_some_and(|c| c.secure_mode)
        },
    )
    .await;
    // The cause is named after a few attempts of the etcd wait: wait until
    // the node served more than that many, then stop the run.
    until(
        "etcd asked about 4 times",
        Duration::from_secs(60),
        async || {
            node.served()
                .iter()
                .filter(|s| s.rpc == "ServiceList")
                .count()
                >= 4
        },
    )
    .await;
    signal(apply.id().expect("pid"), "INT");
    let out = tokio::time::timeout(Duration::from_secs(60), apply.wait_with_output())
        .await
        .expect("apply stops")
        .expect("output");
    assert_eq!(out.status.code(), Some(130));
    let err = stderr(&out);
    insta::assert_snapshot!(
        "bootstrap_names_why_it_waits",
        lines_with(
            &err,
            "bootstrap: waiting for etcd on talos-controlplane-01: "
        )
    );
    assert!(lab.state().resources.bootstrap.is_none());

    // The control plane is reset by hand: the state still says configured.
    let client = TalosClient::connect_secure(cp, &lab.talos_credentials().await)
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
    assert!(
        node.wait_for_phase(|p| p == Phase::Halted, Duration::from_secs(30))
            .await
    );
    node.set_slow_boot(Duration::ZERO);
    node.power_on();
    assert!(
        node.wait_for_phase(|p| p == Phase::Maintenance, Duration::from_secs(30))
            .await
    );

    // A plan from the state alone still bootstraps; the wait for the
    // configured control plane sees it in maintenance mode and stops at once.
    let out = lab.run(&["apply", "-refresh=false", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(
        "bootstrap_sees_the_node_in_maintenance_mode",
        lines_with(&stderr(&out), "bootstrap: failed")
    );

    // Refresh sees it too: the plan re-applies its config, and apply converges.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(
        text.contains("~ mode = secure -> maintenance (reset)"),
        "{text}"
    );
    assert!(text.contains("~ config/talos-controlplane-01"), "{text}");
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply after the reset");
    assert!(lab.state().resources.bootstrap.is_some_and(|b| b.done));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_refusal_says_what_to_set_not_to_skip_the_refresh() {
    let lab = Lab::start("9.8", Duration::from_millis(200)).await;
    lab.import_secrets().await;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other = lab.dir.path().join("other-ca.pem");
    std::fs::write(&other, params.self_signed(&key).expect("CA").pem()).expect("write");
    let ca = lab.pve.ca_file.display().to_string();
    let other_text = other.display().to_string();
    lab.write_topology(|t| t.replace(&ca, &other_text));
    let out = lab.run(&["plan"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out)
        .replace(&lab.pve.url, "https://PVE:8006")
        .replace(&other_text, "/CA_FILE")
        .replace(&lab.pve.fingerprint.to_string(), "[FINGERPRINT]");
    assert!(!err.contains("-refresh=false"), "{err}");
    insta::assert_snapshot!(err);

    // Pinned on top of the right CA: both are checked, a wrong pin is refused.
    lab.write_topology(|t| {
        t.replace(
            "  ca_file:",
            &format!("  fingerprint: \"{}\"\n  ca_file:", ["AB"; 32].join(":")),
        )
    });
    let out = lab.run(&["plan"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not the pinned proxmox.fingerprint AB:AB"),
        "{}",
        stderr(&out)
    );
    lab.write_topology(|t| {
        t.replace(
            "  ca_file:",
            &format!("  fingerprint: \"{}\"\n  ca_file:", lab.pve.fingerprint),
        )
    });
    assert!(lab.run(&["plan"]).await.status.success());
}
