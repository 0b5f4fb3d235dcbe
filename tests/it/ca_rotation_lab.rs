//! `rotate-ca` on the three-node lab: the Talos API CA is replaced in three stages with no
//! node rebooted, a run stopped at any stage is resumed by the next, and in the end the old
//! talosconfig is refused and the new one accepted. The Kubernetes CA the same way, with
//! kubectl (an independent client) refused with the old kubeconfig.

use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::lab::{Lab, change_lines};

/// The worker, whose applies the tests make fail.
const WORKER: usize = 1;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every node's boot time, in address order.
fn boot_times(lab: &Lab) -> Vec<u64> {
    let sim = lab.sim.as_ref().expect("sim");
    lab.ips
        .iter()
        .map(|ip| sim.node(ip.parse().expect("ip")).expect("node").boot_time())
        .collect()
}

/// Talos client credentials from a talosconfig's text.
fn credentials(text: &str) -> talosprov_talos::credentials::ClientCredentials {
    let tc = talosprov_base::talosconfig::Talosconfig::parse(text).expect("talosconfig");
    talosprov_talos::credentials::ClientCredentials::from_talosconfig(&tc)
}

/// Whether `ip` answers a Version call with `credentials`.
async fn answers(ip: &str, credentials: &talosprov_talos::credentials::ClientCredentials) -> bool {
    match talosprov_talos::client::TalosClient::connect_secure(ip.parse().expect("ip"), credentials)
        .await
    {
        Ok(client) => client.version().await.is_ok(),
        Err(_) => false,
    }
}

/// The recorded rotation stage (`None`: no rotation in progress).
fn stage(lab: &Lab) -> Option<String> {
    lab.state()
        .ca_rotation
        .map(|r| format!("{:?}", r.stage).to_lowercase())
}

/// `out` shows no part of the new CA's key, as PEM or as the base64 a config holds.
fn no_new_key(lab: &Lab, out: &std::process::Output) {
    use base64::Engine as _;
    let Some(r) = lab.state().ca_rotation else {
        return;
    };
    let key = r.new_key.expose().clone();
    let body: String = key.lines().filter(|l| !l.starts_with("-----")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(key.as_bytes());
    let text = format!("{}{}", stdout(out), stderr(out));
    assert!(
        !text.contains(&body) && !text.contains(&b64[..40]),
        "the new CA key shown"
    );
}

/// Write the state's kubeconfig to `<dir>/<name>.kubeconfig`, check that kubectl lists the
/// nodes with it, and give its path.
async fn kubeconfig_works(lab: &Lab, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.kubeconfig"));
    let path = file.to_str().expect("utf-8");
    let out = lab.run(&["output", "kubeconfig", "--out-file", path]).await;
    assert!(out.status.success());
    crate::support::kubectl::kubectl(&file, &["get", "nodes"]);
    file
}

/// Make the worker's `n`-th real ApplyConfiguration from now fail.
fn fail_worker_apply(lab: &Lab, n: u32) {
    let sim = lab.sim.as_ref().expect("sim");
    sim.node(lab.ips[WORKER].parse().expect("ip"))
        .expect("worker")
        .fail_apply_at(n, tonic::Code::Unavailable, "connection reset by peer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_os_ca_is_staged_resumable_and_reboots_nothing() {
    let lab = Lab::start("19.4", Duration::from_millis(100)).await;
    lab.write_topology(|t| t);
    lab.import_secrets().await;
    lab.apply_text().await;
    let before = lab.state();
    let old_talosconfig = before.outputs.talosconfig.clone().expect("talosconfig");
    let old_secrets = before.secrets.clone().expect("secrets");
    let booted = boot_times(&lab);

    // Not while other changes are pending: the stages apply configs only.
    lab.write_topology(|t| t.replacen("memory: 8192", "memory: 8704", 1));
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("change(s) to apply first: run `talosprov apply`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stage(&lab), None, "nothing recorded");
    lab.write_topology(|t| t);

    // Stopped in stage 1: the worker's config is refused.
    fail_worker_apply(&lab, 1);
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(!out.status.success(), "the worker refused stage 1");
    let text = stdout(&out);
    assert!(
        text.contains("rotate the Talos API (OS) CA of cluster"),
        "{text}"
    );
    assert!(
        text.contains("1. accept the new CA beside the old one (machine.acceptedCAs)"),
        "{text}"
    );
    assert!(stderr(&out).contains("talos-worker-01"), "{}", stderr(&out));
    assert_eq!(stage(&lab).as_deref(), Some("accept"));
    let new_crt = lab.state().ca_rotation.expect("rotation").new_crt;
    // A plan in between names the rotation, and only the worker lags behind.
    let plan = lab.run(&["plan"]).await;
    let plan_text = stdout(&plan);
    assert!(
        plan_text.contains("a rotation of the Talos API (OS) CA is in progress (stage 1 of 3"),
        "{plan_text}"
    );
    assert_eq!(
        change_lines(&plan_text),
        ["~ config/talos-worker-01"],
        "{plan_text}"
    );
    assert!(plan_text.contains("acceptedCAs"), "{plan_text}");
    // `render` shows the configs as the stage renders them.
    let rendered = stdout(&lab.run(&["render", "talos-worker-01"]).await);
    assert!(rendered.contains("acceptedCAs:"), "{rendered}");

    // Resumed, and stopped in stage 2: the worker takes stage 1, then refuses stage 2.
    fail_worker_apply(&lab, 2);
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(!out.status.success());
    no_new_key(&lab, &out);
    assert!(
        stdout(&out).contains("resume the rotation of the Talos API (OS) CA"),
        "{}",
        stdout(&out)
    );
    assert_eq!(stage(&lab).as_deref(), Some("swap"));
    let rotation = lab.state().ca_rotation.expect("rotation");
    assert_eq!(rotation.new_crt, new_crt, "the same new CA on resuming");
    // Between stage 1 and 3 the state's talosconfig trusts both CAs, with a client
    // certificate from the new one.
    let mid = lab.state().outputs.talosconfig.expect("talosconfig");
    assert_ne!(mid.value.expose(), old_talosconfig.value.expose());

    // Resumed, and stopped in stage 3.
    fail_worker_apply(&lab, 2);
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(!out.status.success());
    no_new_key(&lab, &out);
    assert_eq!(stage(&lab).as_deref(), Some("drop"));
    let secrets = lab.state().secrets.expect("secrets");
    assert_ne!(
        secrets.expose(),
        old_secrets.expose(),
        "the bundle holds the new CA once every node swapped"
    );

    // Resumed to the end.
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Rotation complete!"));
    assert_eq!(stage(&lab), None);
    let after = lab.state();
    let bundle =
        talosprov_machine::secrets_file::parse_secrets_yaml(after.secrets.expect("s").expose())
            .expect("bundle");
    assert_eq!(bundle.certs.os.crt, new_crt);
    let old_bundle = talosprov_machine::secrets_file::parse_secrets_yaml(old_secrets.expose())
        .expect("old bundle");
    assert_eq!(
        bundle.certs.k8s.crt, old_bundle.certs.k8s.crt,
        "only the OS CA"
    );
    assert_eq!(bundle.cluster.id, old_bundle.cluster.id);

    // The old talosconfig is refused by every node, the new one accepted.
    let old = credentials(old_talosconfig.value.expose());
    let new = credentials(
        after
            .outputs
            .talosconfig
            .as_ref()
            .expect("talosconfig")
            .value
            .expose(),
    );
    assert_eq!(new.ca_pem.trim(), new_crt.trim(), "trusts the new CA only");
    for ip in &lab.ips {
        assert!(!answers(ip, &old).await, "{ip} refuses the old talosconfig");
        assert!(answers(ip, &new).await, "{ip} accepts the new talosconfig");
    }
    assert_eq!(boot_times(&lab), booted, "no node rebooted");

    // Converged: nothing to do, and the cluster is healthy.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = lab.run(&["health"]).await;
    assert!(out.status.success(), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_kubernetes_ca_swaps_the_kubeconfig_kubectl_uses() {
    let lab = Lab::start("19.5", Duration::from_millis(100)).await;
    lab.write_topology(|t| t);
    lab.import_secrets().await;
    lab.apply_text().await;
    let booted = boot_times(&lab);
    let dir = tempfile::tempdir().expect("dir");
    let old = kubeconfig_works(&lab, dir.path(), "old").await;

    // A rotation of the other CA cannot start while this one is in progress.
    fail_worker_apply(&lab, 1);
    let out = lab
        .run(&["rotate-ca", "--kubernetes", "-auto-approve"])
        .await;
    assert!(!out.status.success());
    let out = lab.run(&["rotate-ca", "--os", "-auto-approve"]).await;
    assert!(!out.status.success());
    no_new_key(&lab, &out);
    assert!(
        stderr(&out).contains("a rotation of the Kubernetes CA is in progress (stage 1 of 3)"),
        "{}",
        stderr(&out)
    );

    let out = lab
        .run(&["rotate-ca", "--kubernetes", "-auto-approve"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stage(&lab), None);
    kubeconfig_works(&lab, dir.path(), "new").await;
    let refused = crate::support::kubectl::kubectl_output(&old, &["get", "nodes"]);
    assert!(!refused.status.success(), "kubectl refused with the old CA");
    assert_eq!(boot_times(&lab), booted, "no node rebooted");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
