//! Machine config changes on a running cluster, through plan and apply against
//! fakepve, the factory stand-in and the Talos simulator: a change Talos cannot
//! apply at once reboots that node only (one node at a time, behind the etcd
//! health gate, when it concerns several), and `apply --staged` leaves every node
//! running, with the plan saying the staged config waits for a reboot until the
//! node has rebooted.

use std::net::IpAddr;
use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::lab::Lab;
use talosprov_sim::state::Phase;
use talosprov_sim::{SimNode, Simulator};
use talosprov_talos::client::TalosClient;
use talosprov_talos::types::RebootMode;

/// The patch added to talos-worker-01: `machine.env` is not a setting Talos
/// applies at once (CanApplyImmediate), so the node reboots for it.
const ENV_PATCH: &str = "# A proxy for the worker's Talos services.\nmachine:\n  env:\n    HTTPS_PROXY: http://127.0.0.1:3128\n";

/// Adds [`ENV_PATCH`] to talos-worker-01's patches.
fn add_env_patch(lab: &Lab) {
    let dir = lab.dir.path().join("patches/nodes/talos-worker-01");
    std::fs::create_dir_all(&dir).expect("node patch folder");
    std::fs::write(dir.join("50-env.yaml"), ENV_PATCH).expect("write the patch");
}

fn node(sim: &Simulator, ip: &str) -> SimNode {
    sim.node(ip.parse().expect("ip")).expect("simulated node")
}

/// Each lab node's reboot count, in the lab's address order.
fn reboots(lab: &Lab) -> Vec<u32> {
    let sim = lab.sim.as_ref().expect("sim");
    lab.ips.iter().map(|ip| node(sim, ip).reboots()).collect()
}

/// Whether the node's running (or staged) config carries the patch.
fn has_proxy(config: Option<Vec<u8>>) -> bool {
    config.is_some_and(|c| String::from_utf8_lossy(&c).contains("HTTPS_PROXY"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_that_needs_a_reboot_reboots_that_node_only() {
    let lab = Lab::start("4.1", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let worker = node(sim, &lab.ips[1]);
    let before = reboots(&lab);

    add_env_patch(&lab);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("~ config/talos-worker-01"), "{text}");
    assert!(
        text.contains("+        HTTPS_PROXY: http://127.0.0.1:3128"),
        "{text}"
    );
    assert_eq!(
        text.matches("(the node reboots)").count(),
        1,
        "the node's dry run says it reboots:\n{text}"
    );
    assert!(!text.contains("~ config/talos-controlplane-01"), "{text}");
    assert!(!text.contains("~ config/talos-gpu-01"), "{text}");
    assert!(
        text.contains("Plan: 0 to add, 0 to change, 0 to destroy. Talos: 1 config to apply."),
        "{text}"
    );

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the apply failed");
    // Apply returns once the node is back in secure mode, running the new config.
    assert_eq!(worker.phase(), Phase::Secure);
    assert!(has_proxy(worker.running_config()));
    assert_eq!(worker.staged_config(), None);
    let mut expected = before.clone();
    expected[1] += 1;
    assert_eq!(reboots(&lab), expected, "the worker rebooted, and only it");
    let served: Vec<String> = worker.served().into_iter().map(|s| s.rpc).collect();
    assert!(
        !served.iter().any(|r| r == "Reboot"),
        "the apply's reboot mode rebooted it, not a Reboot call: {served:?}"
    );
    let state = lab.state();
    let record = &state.resources.configs["talos-worker-01"];
    assert!(record.secure_mode && record.staged.is_none(), "{record:?}");

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_change_that_reboots_every_node_rolls_one_node_at_a_time_behind_etcd() {
    let lab = Lab::start_ha("4.3", Duration::from_millis(100), "v1.13.8").await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let installs = sim.reboot_log().len();

    std::fs::write(lab.dir.path().join("patches/common/50-env.yaml"), ENV_PATCH)
        .expect("write the patch");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert_eq!(text.matches("(the node reboots)").count(), 5, "{text}");

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the apply failed");
    let log = sim.reboot_log()[installs..].to_vec();
    let order: Vec<IpAddr> = log.iter().map(|r| r.node).collect();
    let ips: Vec<IpAddr> = lab.ips.iter().map(|ip| ip.parse().expect("ip")).collect();
    assert_eq!(
        order, ips,
        "control planes first, one node at a time: {log:?}"
    );
    assert!(
        log.iter().all(|r| r.etcd_healthy),
        "each node went down only with etcd healthy: {log:?}"
    );
    for ip in &lab.ips {
        let n = node(sim, ip);
        assert_eq!(n.phase(), Phase::Secure);
        assert!(has_proxy(n.running_config()), "{ip} runs the new config");
    }
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_config_waits_for_a_reboot_and_the_plan_says_so_until_then() {
    let lab = Lab::start("4.2", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let sim = lab.sim.as_ref().expect("sim");
    let worker = node(sim, &lab.ips[1]);
    let worker_ip: IpAddr = lab.ips[1].parse().expect("ip");
    let before = reboots(&lab);

    // Staged: no node reboots; the worker keeps running its config and holds the
    // new one for its next boot.
    add_env_patch(&lab);
    let out = lab.run(&["apply", "-auto-approve", "--staged"]).await;
    assert!(out.status.success(), "the staged apply failed");
    let text = stdout(&out);
    assert!(
        text.contains("staged (--staged): the node runs it from its next reboot"),
        "{text}"
    );
    assert!(!text.contains("(the node reboots)"), "{text}");
    assert!(
        text.contains("(staged: no reboot now; the node takes it at its next reboot)"),
        "{text}"
    );
    assert_eq!(reboots(&lab), before, "no node rebooted");
    assert_eq!(worker.phase(), Phase::Secure);
    assert!(!has_proxy(worker.running_config()));
    assert!(has_proxy(worker.staged_config()));
    let state = lab.state();
    let record = &state.resources.configs["talos-worker-01"];
    let staged = record.staged.expect("recorded as staged");
    assert_eq!(staged.boot_time, Some(worker.boot_time()));
    assert!(state.resources.configs["talos-gpu-01"].staged.is_none());

    // The plan has nothing to change, and says the config waits for a reboot.
    let warning = "Warning: config/talos-worker-01: the machine config was applied in staged mode";
    let reboot_hint = format!("`talosctl --nodes {worker_ip} reboot`");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("No changes to make."), "{text}");
    assert!(text.contains(warning), "{text}");
    assert!(text.contains(&reboot_hint), "{text}");

    // Applying again without --staged sends nothing: the config is the recorded one.
    let applies = |n: &SimNode| {
        n.served()
            .iter()
            .filter(|s| s.rpc == "ApplyConfiguration")
            .count()
    };
    let applied = applies(&worker);
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success());
    assert!(stdout(&out).contains(warning), "{}", stdout(&out));
    assert_eq!(
        applies(&worker),
        applied,
        "the same config is not sent again"
    );
    assert_eq!(reboots(&lab), before);
    assert!(
        lab.state().resources.configs["talos-worker-01"]
            .staged
            .is_some()
    );

    // The operator reboots the node through the Talos API, as talosctl does.
    let client = TalosClient::connect_secure(worker_ip, &lab.talos_credentials().await)
        .await
        .expect("connect");
    client.reboot(RebootMode::Default).await.expect("reboot");
    assert!(
        worker
            .wait_for_phase(|p| p == Phase::Secure, Duration::from_secs(30))
            .await,
        "the worker came back"
    );
    assert!(
        has_proxy(worker.running_config()),
        "the boot took the staged config"
    );
    assert_eq!(worker.staged_config(), None);

    // The plan no longer warns: the staged record is drift that refresh-only records.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(!text.contains(warning), "{text}");
    assert!(
        text.contains("# config/talos-worker-01 has changed"),
        "{text}"
    );
    assert!(
        text.contains("~ staged = waiting for a reboot -> taken: the node rebooted"),
        "{text}"
    );
    let out = lab
        .run(&["plan", "-refresh-only", "-detailed-exitcode"])
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    // A plain apply keeps what refresh saw, as `apply -refresh-only` would.
    let serial = lab.state().serial;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success());
    let state = lab.state();
    assert!(state.resources.configs["talos-worker-01"].staged.is_none());
    assert_eq!(state.serial, serial + 1);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(!text.contains("Warning:"), "{text}");
    assert!(text.contains("No changes."), "{text}");
}
