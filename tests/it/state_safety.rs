//! The cluster's secrets are never replaced by accident, end to end against
//! fakepve and the Talos simulator: an empty state, a state that lost its
//! secrets, and a missing state beside running nodes are each refused with
//! nothing written (the state and its `.backup` byte for byte, no Proxmox
//! request, no node RPC), and the refusals read as users see them.

use std::time::Duration;

use crate::support::cli::{BIN, stderr, stdout};
use crate::support::fixtures::SECRETS_FILE;
use crate::support::lab::Lab;

/// What a refused run must leave as it was.
struct Untouched {
    state: Option<Vec<u8>>,
    backup: Vec<u8>,
    proxmox_requests: usize,
    node_rpcs: Vec<usize>,
}

impl Untouched {
    async fn record(lab: &Lab) -> Untouched {
        Untouched {
            state: std::fs::read(lab.state_file()).ok(),
            backup: std::fs::read(backup(lab)).expect("the lab has a backup"),
            proxmox_requests: lab.pve.request_total().await,
            node_rpcs: rpcs(lab),
        }
    }

    async fn check(&self, lab: &Lab, after: &str) {
        assert_eq!(
            std::fs::read(lab.state_file()).ok(),
            self.state,
            "{after}: the state file changed"
        );
        assert_eq!(
            std::fs::read(backup(lab)).expect("backup"),
            self.backup,
            "{after}: the backup changed"
        );
        assert_eq!(
            lab.pve.request_total().await,
            self.proxmox_requests,
            "{after}: Proxmox was asked"
        );
        assert_eq!(rpcs(lab), self.node_rpcs, "{after}: a node was called");
    }
}

fn backup(lab: &Lab) -> std::path::PathBuf {
    lab.dir.path().join("talosprov.tfstate.backup")
}

/// How many RPCs each simulated node has served.
fn rpcs(lab: &Lab) -> Vec<usize> {
    let sim = lab.sim.as_ref().expect("sim");
    lab.ips
        .iter()
        .map(|ip| {
            sim.node(ip.parse().expect("ip"))
                .expect("node")
                .served()
                .len()
        })
        .collect()
}

/// A lab whose cluster is up, with a state and a `.backup`.
async fn running_lab(net: &str) -> Lab {
    let lab = Lab::start(net, Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply failed");
    assert!(backup(&lab).exists());
    lab
}

/// A new cluster's secrets bundle (`talosprov secrets gen`), in the lab folder.
fn other_bundle(lab: &Lab) -> std::path::PathBuf {
    let path = lab.dir.path().join("other-secrets.yaml");
    let out = std::process::Command::new(BIN)
        .args(["secrets", "gen", "-o"])
        .arg(&path)
        .output()
        .expect("secrets gen");
    assert!(out.status.success(), "{}", stderr(&out));
    path
}

/// stderr with the lab's folder and the random lineages made stable.
fn shown(lab: &Lab, out: &std::process::Output) -> String {
    let dir = lab.dir.path().display().to_string();
    let text = stderr(out).replace(&dir, "[DIR]");
    let uuid = regex_free_uuid_filter(&text);
    uuid.replace(&lab.ips[0], "[CP]")
        .replace(&lab.ips[1], "[W1]")
        .replace(&lab.ips[2], "[GPU]")
}

/// Replace every UUID (8-4-4-4-12 hex digits) with `[UUID]`.
fn regex_free_uuid_filter(text: &str) -> String {
    let bytes = text.as_bytes();
    let shape = [8, 4, 4, 4, 12];
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    'outer: while i < bytes.len() {
        let mut j = i;
        for (n, len) in shape.iter().enumerate() {
            if j + len > bytes.len() || !bytes[j..j + len].iter().all(u8::is_ascii_hexdigit) {
                break;
            }
            j += len;
            if n < 4 {
                if bytes.get(j) != Some(&b'-') {
                    break;
                }
                j += 1;
            } else {
                out.push_str("[UUID]");
                i = j;
                continue 'outer;
            }
        }
        let ch = text[i..].chars().next().expect("a char");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_state_is_refused_by_every_command_and_nothing_is_written() {
    let lab = running_lab("5.1").await;
    std::fs::write(lab.state_file(), b"").expect("empty the state");
    let before = Untouched::record(&lab).await;

    let apply = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(apply.status.code(), Some(1));
    before.check(&lab, "apply").await;
    let text = shown(&lab, &apply);
    assert!(text.contains("talosprov.tfstate.backup (serial"), "{text}");
    insta::assert_snapshot!("empty_state_apply", text);

    for args in [
        &["plan"][..],
        &["destroy", "-auto-approve"],
        &["state", "list"],
        &["output"],
        &["secrets", "export", "-o", "/nonexistent/out.yaml"],
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
    ] {
        let out = lab.run(args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let text = stderr(&out);
        assert!(
            text.contains("talosprov.tfstate is empty") && text.contains("`cp "),
            "{args:?}: {text}"
        );
        before.check(&lab, &args.join(" ")).await;
    }
    // `secrets import` does not start a new state over it either.
    let out = lab.run(&["secrets", "import", SECRETS_FILE]).await;
    assert_eq!(out.status.code(), Some(1));
    before.check(&lab, "secrets import").await;

    // Restoring the backup as the error says brings the cluster back: it
    // holds the secrets; what the last run created is not in it, and is
    // taken over with the import commands the plan names; then the next
    // apply converges without re-creating anything.
    std::fs::copy(backup(&lab), lab.state_file()).expect("restore");
    let out = lab.run(&["plan", "-json"]).await;
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let commands: Vec<String> = plan["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .flat_map(|c| c["commands"].as_array().expect("commands").clone())
        .map(|c| c.as_str().expect("command").to_owned())
        .collect();
    assert_eq!(commands.len(), 5, "{commands:?}");
    for command in &commands {
        let args: Vec<&str> = command.split(' ').skip(1).collect();
        let out = lab.run(&args).await;
        assert!(out.status.success(), "{command}: {}", stderr(&out));
    }
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lab.pve.count("POST", "/nodes/pve1/qemu").await, 3);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_without_secrets_is_refused_until_the_cluster_secrets_are_imported() {
    let lab = running_lab("5.2").await;
    let mut state = lab.state();
    state.secrets = None;
    std::fs::write(lab.state_file(), state.to_json()).expect("write");
    let before = Untouched::record(&lab).await;

    let apply = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(apply.status.code(), Some(1));
    before.check(&lab, "apply").await;
    insta::assert_snapshot!("no_secrets_apply", shown(&lab, &apply));
    let plan = lab.run(&["plan"]).await;
    assert_eq!(plan.status.code(), Some(1));
    assert!(
        stderr(&plan).contains("talosprov secrets import"),
        "{}",
        stderr(&plan)
    );
    before.check(&lab, "plan").await;
    let offline = lab.run(&["plan", "-refresh=false"]).await;
    assert_eq!(offline.status.code(), Some(1));
    before.check(&lab, "plan -refresh=false").await;

    // Another cluster's bundle is refused: the state's talosconfig trusts
    // another CA.
    let other = other_bundle(&lab);
    let out = lab
        .run(&["secrets", "import", other.to_str().expect("utf-8")])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not this cluster's secrets bundle"),
        "{}",
        stderr(&out)
    );
    before.check(&lab, "secrets import of another bundle").await;

    // The way out the error names: import the cluster's own bundle.
    let out = lab.run(&["secrets", "import", SECRETS_FILE]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "the same secrets: no change\n{}",
        stdout(&out)
    );
    // Secrets are still generated for a state that never applied anything.
    let mut blank = talosprov_statefile::format::State::new(uuid::Uuid::new_v4());
    blank.serial = 1;
    let blank_file = lab.dir.path().join("blank.tfstate");
    std::fs::write(&blank_file, blank.to_json()).expect("write");
    let out = lab
        .run(&[
            "plan",
            "-refresh=false",
            "--state",
            blank_file.to_str().expect("utf-8"),
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_state_beside_running_nodes_is_refused_before_any_secret_is_made() {
    let lab = running_lab("5.3").await;
    std::fs::remove_file(lab.state_file()).expect("lose the state");
    let before = Untouched::record(&lab).await;

    let apply = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(apply.status.code(), Some(1));
    before.check(&lab, "apply").await;
    assert!(!lab.state_file().exists(), "no new state was started");
    insta::assert_snapshot!("running_cluster_apply", shown(&lab, &apply));

    let plan = lab.run(&["plan"]).await;
    assert_eq!(plan.status.code(), Some(1));
    assert!(
        stderr(&plan).contains("these nodes belong to an existing cluster"),
        "{}",
        stderr(&plan)
    );
    before.check(&lab, "plan").await;
    // A saved plan made offline is refused when applied: apply asks the nodes.
    let saved = lab.dir.path().join("offline.plan");
    let out = lab
        .run(&[
            "plan",
            "-refresh=false",
            "-out",
            saved.to_str().expect("utf-8"),
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = lab.run(&["apply", saved.to_str().expect("utf-8")]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("these nodes belong to an existing cluster"),
        "{}",
        stderr(&out)
    );
    before.check(&lab, "apply of an offline plan").await;

    // A state with other secrets is refused the same way (its CA is not theirs).
    let other = other_bundle(&lab);
    let other_file = lab.dir.path().join("other.tfstate");
    let other_path = other_file.to_str().expect("utf-8");
    let out = lab
        .run(&[
            "secrets",
            "import",
            other.to_str().expect("utf-8"),
            "--state",
            other_path,
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let other_state = std::fs::read(&other_file).expect("state");
    let out = lab
        .run(&["apply", "-auto-approve", "--state", other_path])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("whose secrets are not those in the state"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&other_file).expect("state"), other_state);
    before
        .check(&lab, "apply with another cluster's secrets")
        .await;

    // With the cluster's own secrets imported into a new state, the nodes
    // are ours: no refusal for them.
    let same_file = lab.dir.path().join("same.tfstate");
    let same = same_file.to_str().expect("utf-8");
    let out = lab
        .run(&["secrets", "import", SECRETS_FILE, "--state", same])
        .await;
    assert!(out.status.success());
    let out = lab.run(&["plan", "--state", same]).await;
    assert!(
        !stderr(&out).contains("belong to an existing cluster"),
        "{}",
        stderr(&out)
    );
}
