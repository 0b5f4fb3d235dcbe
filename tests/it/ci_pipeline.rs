//! The GitLab CI sequence end to end, against the loopback GitLab-like state
//! server, fakepve, the factory stand-in and the Talos simulator: validate,
//! plan -out with the merge-request report, apply plan.cache, a second
//! pipeline with nothing to do, output kubeconfig through the same backend,
//! an encrypted state that leaves no secret on the server, a stale plan, and
//! SIGTERM mid-apply releasing the lock and saving the state.

use crate::support::gitlab_state;
use crate::support::wait::until;

use std::time::Duration;

use crate::support::cli::{BIN, signal, stderr, stdout};
use crate::support::lab::Lab;
use gitlab_state::{GitlabState, TOKEN};

const PASSPHRASE: &str = "correct horse battery staple for the lab";

/// The lab, with its state on `server` (`TF_HTTP_*` as GitLab CI sets them).
async fn lab_on(net: &str, reboot: Duration, server: &GitlabState) -> Lab {
    let mut lab = Lab::start(net, reboot).await;
    lab.env.extend(server.env());
    lab
}

/// The lock ID a run printed on stderr (`State lock ID: <uuid> ...`).
fn printed_lock_id(err: &str) -> String {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("State lock ID: "))
        .unwrap_or_else(|| panic!("no lock ID line in:\n{err}"));
    line.split_whitespace().next().expect("an ID").to_owned()
}

/// `talosprov show ARGS` with the lab's environment (show takes no `-f`).
fn show(lab: &Lab, args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .arg("show")
        .args(args)
        .envs(lab.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run talosprov show")
}

fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("the report")).expect("report JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_sequence_plans_applies_and_reaches_the_outputs_through_the_gitlab_state() {
    let server = GitlabState::start().await;
    let mut lab = lab_on("1.9", Duration::from_millis(200), &server).await;
    lab.env.push((
        talosprov_backend::encrypt::PASSPHRASE_VAR.to_owned(),
        PASSPHRASE.to_owned(),
    ));
    let dir = lab.dir.path().to_owned();
    let (cache, json) = (dir.join("plan.cache"), dir.join("plan.json"));
    let (cache_s, json_s) = (
        cache.to_str().expect("utf-8"),
        json.to_str().expect("utf-8"),
    );

    // validate
    let out = lab.run(&["validate"]).await;
    assert!(out.status.success(), "validate failed");

    // plan: every resource is a create; the report counts them as GitLab does.
    let out = lab
        .run(&["plan", "-out", cache_s, "--report-gitlab", json_s])
        .await;
    assert!(out.status.success(), "plan failed");
    let lock_id = printed_lock_id(&stderr(&out));
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.starts_with("POST") && r.ends_with("/lock")),
        "plan locked the state"
    );
    assert_eq!(server.lock_id(), None, "plan released lock {lock_id}");
    let shown = show(&lab, &["-json", cache_s]);
    assert!(shown.status.success(), "show -json failed");
    let plan: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("plan JSON");
    let actions: Vec<&str> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["action"].as_str().expect("action"))
        .collect();
    // The lab: image, pool, 3 VMs... (8 creates) and the add-ons' 4
    // objects, 3 first config applies, the bootstrap: GitLab counts
    // apply-config as update, bootstrap as create.
    let count = |name: &str| actions.iter().filter(|a| **a == name).count();
    assert_eq!(
        (count("create"), count("apply-config"), count("bootstrap")),
        (12, 3, 1),
        "{actions:?}"
    );
    assert_eq!(
        report(&json),
        serde_json::json!({"create": 13, "update": 3, "delete": 0})
    );
    let human = show(&lab, &[cache_s]);
    assert!(human.status.success());
    assert!(
        stdout(&human).contains("vm/talos-worker-01"),
        "{}",
        stdout(&human)
    );
    assert!(!stdout(&human).contains("BEGIN"), "show prints no key");

    // apply the saved plan (the manual job).
    let out = lab.run(&["apply", cache_s]).await;
    assert!(out.status.success(), "apply plan.cache failed");
    printed_lock_id(&stderr(&out));
    assert_eq!(server.lock_id(), None, "apply released its lock");
    assert_eq!(lab.vms().await.len(), 3);

    // The next pipeline: nothing to do.
    let (cache2, json2) = (dir.join("plan2.cache"), dir.join("plan2.json"));
    let out = lab
        .run(&[
            "plan",
            "-out",
            cache2.to_str().expect("utf-8"),
            "--report-gitlab",
            json2.to_str().expect("utf-8"),
            "-detailed-exitcode",
        ])
        .await;
    assert_eq!(out.status.code(), Some(0), "no changes");
    assert_eq!(
        report(&json2),
        serde_json::json!({"create": 0, "update": 0, "delete": 0})
    );

    // From a laptop: the kubeconfig through the same backend.
    let out = lab.run(&["output", "kubeconfig", "-raw"]).await;
    assert!(out.status.success(), "output kubeconfig failed");
    let kubeconfig: serde_yaml_ng::Value =
        serde_yaml_ng::from_slice(&out.stdout).expect("kubeconfig YAML");
    assert!(kubeconfig["clusters"][0]["cluster"]["server"].is_string());

    // The server holds an envelope: no PEM block, no token, no passphrase.
    let stored = String::from_utf8(server.state().expect("a stored state")).expect("text");
    let envelope: serde_json::Value = serde_json::from_str(&stored).expect("JSON");
    assert!(envelope["serial"].as_u64().is_some(), "serial in clear");
    // The age armour is the only PEM-style block: the state's own PEM
    // blocks (CA certificates and keys) are inside it.
    let outside_armour = stored
        .replace("-----BEGIN AGE ENCRYPTED FILE-----", "")
        .replace("-----END AGE ENCRYPTED FILE-----", "");
    for secret in [
        "-----BEGIN",
        "-----END",
        TOKEN,
        PASSPHRASE,
        "talos-worker-01",
    ] {
        assert!(
            !outside_armour.contains(secret),
            "the stored state holds {secret}"
        );
    }
    assert!(
        stored.contains("-----BEGIN AGE ENCRYPTED FILE-----"),
        "encrypted"
    );

    // The first plan was made before any state: applying it now is stale.
    let out = lab.run(&["apply", cache_s]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("stale"), "{}", stderr(&out));
    assert_eq!(server.lock_id(), None, "a refused apply releases the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_apply_on_the_gitlab_state_saves_and_releases_the_lock() {
    let server = GitlabState::start().await;
    let lab = lab_on("1.10", Duration::from_secs(3), &server).await;
    let child = lab
        .command(&["apply", "-auto-approve"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start apply");
    let recorded_vms = || {
        server.state().map_or(0, |bytes| {
            talosprov_statefile::format::State::from_json(&bytes)
                .map(|s| s.resources.vms.len())
                .unwrap_or(0)
        })
    };
    until("the VMs saved", Duration::from_secs(60), async || {
        recorded_vms() >= 3
    })
    .await;
    let held = server.lock_id().expect("apply holds the lock");
    signal(child.id().expect("pid"), "TERM");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("apply stops promptly")
        .expect("wait");
    assert_eq!(out.status.code(), Some(143), "SIGTERM: 128 + 15");
    assert_eq!(
        printed_lock_id(&stderr(&out)),
        held,
        "the printed ID is the lock's"
    );
    assert_eq!(server.lock_id(), None, "lock released");
    assert_eq!(recorded_vms(), 3, "state saved");

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply after the interruption failed");
    assert_eq!(
        lab.pve.count("POST", "/nodes/pve1/qemu").await,
        3,
        "one create per VM"
    );
}
