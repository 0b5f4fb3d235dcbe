//! The `output`, `state` and `force-unlock` commands, run as a user would:
//! sensitive values stay hidden in the human view, `--out-file` is 0600,
//! `state rm` asks or refuses, encryption switches only on request, and lock
//! conflicts and force-unlock work against the GitLab-like state server.

use crate::support::gitlab_state;

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::cli::{BIN, run_clean, signal};
use talosprov_backend::backend::Backend;
use talosprov_backend::local::LocalBackend;
use talosprov_backend::store::StateStore;
use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::format::State;
use talosprov_statefile::format::{Output as StateOutput, Vm};
use talosprov_statefile::lock::LockInfo;

const KUBECONFIG: &str =
    "apiVersion: v1\nkind: Config\nusers:\n- user:\n    client-key-data: S3CRETKEYDATA\n";
const SECRETS: &str = "cluster:\n  secret: CLUSTERS3CRET\n";

/// A state file in a fresh folder, with every output set.
async fn cluster_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("talosprov.tfstate");
    let mut state = State::new(uuid::Uuid::from_u128(7));
    state.secrets = Some(Sensitive::new(SECRETS));
    state.outputs.kubeconfig = Some(StateOutput::sensitive(KUBECONFIG));
    state.outputs.talosconfig = Some(StateOutput::sensitive("context: lab\n"));
    state.outputs.machineconfigs.insert(
        "talos-worker-01".to_owned(),
        StateOutput::sensitive("version: v1alpha1\nmachine:\n  token: MACHINETOKEN\n"),
    );
    state.resources.vms.insert(
        "talos-worker-01".to_owned(),
        Vm {
            vmid: 122,
            node: "pve".to_owned(),
            name: "talos-worker-01".to_owned(),
            cores: 4,
            memory_mib: 8192,
            disk_gib: 100,
            hostpci: Default::default(),
            tags: vec!["talos".to_owned()],
            net: Default::default(),
            disks: Default::default(),
            agent: true,
            ha: None,
        },
    );
    let store = StateStore::new(LocalBackend::new(path.clone()), None);
    store.save(&mut state, false).await.unwrap();
    (dir, path)
}

/// Run talosprov in `dir` with a clean environment plus `env`.
fn run(dir: &Path, args: &[&str], env: &[(String, String)]) -> Output {
    run_clean(dir, args, env)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8(o.stdout.clone()).unwrap(),
        String::from_utf8(o.stderr.clone()).unwrap(),
    )
}

fn assert_no_secret(all: &str) {
    for s in [
        "S3CRETKEYDATA",
        "CLUSTERS3CRET",
        "MACHINETOKEN",
        "context: lab",
    ] {
        assert!(!all.contains(s), "{s} leaked in: {all}");
    }
}

#[tokio::test]
async fn output_lists_names_and_hides_sensitive_values() {
    let (dir, _) = cluster_dir().await;
    let o = run(dir.path(), &["output"], &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_no_secret(&(out.clone() + &err));
    insta::assert_snapshot!(out);

    let o = run(dir.path(), &["output", "kubeconfig"], &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_no_secret(&(out.clone() + &err));
    assert_eq!(out, "kubeconfig = <sensitive>\n");
    assert!(err.contains("-raw, -json or --out-file"), "{err}");
}

#[tokio::test]
async fn output_raw_and_json_print_the_value() {
    let (dir, _) = cluster_dir().await;
    let o = run(dir.path(), &["output", "kubeconfig", "-raw"], &[]);
    assert!(o.status.success());
    assert_eq!(text(&o).0, KUBECONFIG);
    let o = run(dir.path(), &["output", "-json", "talosconfig"], &[]);
    assert_eq!(text(&o).0, "\"context: lab\\n\"\n");
    let o = run(dir.path(), &["output", "-json"], &[]);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(all["kubeconfig"]["value"], KUBECONFIG);
    assert_eq!(all["kubeconfig"]["sensitive"], true);
}

#[cfg(unix)]
#[tokio::test]
async fn output_out_file_is_written_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, _) = cluster_dir().await;
    let o = run(
        dir.path(),
        &[
            "output",
            "machineconfig",
            "talos-worker-01",
            "--out-file",
            "w1.yaml",
        ],
        &[],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_no_secret(&(out + &err));
    let file = dir.path().join("w1.yaml");
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("MACHINETOKEN")
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test]
async fn output_errors_say_what_to_type() {
    let (dir, _) = cluster_dir().await;
    let err = |args: &[&str]| {
        let o = run(dir.path(), args, &[]);
        assert!(!o.status.success());
        text(&o).1
    };
    let all = [
        err(&["output", "machineconfig"]),
        err(&["output", "machineconfig", "nobody"]),
        err(&["output", "password"]),
        err(&["output", "-raw"]),
    ]
    .join("");
    insta::assert_snapshot!(all);
}

#[tokio::test]
async fn state_list_and_show_print_addresses_without_secrets() {
    let (dir, _) = cluster_dir().await;
    let o = run(dir.path(), &["state", "list"], &[]);
    assert_eq!(text(&o).0, "kubeconfig\ntalosconfig\nvm/talos-worker-01\n");
    let o = run(dir.path(), &["state", "show", "kubeconfig"], &[]);
    let (out, err) = text(&o);
    assert_no_secret(&(out.clone() + &err));
    let o = run(dir.path(), &["state", "show", "vm/talos-worker-01"], &[]);
    insta::assert_snapshot!(text(&o).0);
}

#[tokio::test]
async fn state_rm_without_terminal_or_flag_refuses_and_names_the_flag() {
    let (dir, path) = cluster_dir().await;
    let before = std::fs::read(&path).unwrap();
    let o = run(dir.path(), &["state", "rm", "vm/talos-worker-01"], &[]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("add -auto-approve"), "{}", text(&o).1);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn state_rm_auto_approve_forgets_and_bumps_the_serial() {
    let (dir, path) = cluster_dir().await;
    let o = run(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &[],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("Removed vm/talos-worker-01"), "{out}");
    let state = State::from_json(&std::fs::read(&path).unwrap()).unwrap();
    assert!(state.resources.vms.is_empty());
    assert_eq!(state.serial, 2);
    assert!(dir.path().join("talosprov.tfstate.backup").exists());
    assert!(
        !dir.path().join(".talosprov.tfstate.lock.info").exists(),
        "lock released"
    );
}

#[tokio::test]
async fn state_encrypt_and_decrypt_are_explicit_and_a_wrong_passphrase_changes_nothing() {
    let (dir, path) = cluster_dir().await;
    let pass = vec![(
        "TALOSPROV_STATE_PASSPHRASE".to_owned(),
        "lab passphrase".to_owned(),
    )];
    let o = run(dir.path(), &["state", "encrypt"], &pass);
    assert!(o.status.success(), "{}", text(&o).1);
    let stored = std::fs::read_to_string(&path).unwrap();
    assert_no_secret(&stored);
    assert!(stored.contains("\"encrypted_state\""));

    // Reading needs the key; a wrong one leaves the file as it was.
    let o = run(dir.path(), &["state", "list"], &[]);
    assert!(
        text(&o)
            .1
            .contains("the state is encrypted: set TALOSPROV_STATE_PASSPHRASE")
    );
    let wrong = vec![("TALOSPROV_STATE_PASSPHRASE".to_owned(), "nope".to_owned())];
    let o = run(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &wrong,
    );
    assert!(text(&o).1.contains("wrong passphrase"), "{}", text(&o).1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), stored);

    // Other writes keep the encryption.
    let o = run(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &pass,
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"encrypted_state\"")
    );

    let o = run(dir.path(), &["state", "decrypt"], &pass);
    assert!(o.status.success(), "{}", text(&o).1);
    let state = State::from_json(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(state.serial, 4);
    assert_eq!(state.secrets.unwrap().expose(), SECRETS);
}

#[tokio::test(flavor = "multi_thread")]
async fn second_command_reports_the_holder_and_force_unlock_frees_a_killed_run() {
    let server = gitlab_state::GitlabState::start().await;
    let (dir, path) = cluster_dir().await;
    server.stored.lock().unwrap().state = Some(std::fs::read(&path).unwrap());
    let env = server.env();
    {
        // A run that took the lock and was killed.
        let map = env.iter().cloned().collect();
        let talosprov_statefile::config::BackendConfig::Http(config) =
            talosprov_statefile::config::resolve(
                &Default::default(),
                &map,
                &[],
                Path::new("."),
                None,
            )
            .unwrap()
        else {
            panic!("http backend expected")
        };
        let killed = talosprov_backend::http::HttpBackend::new(*config).unwrap();
        let info = LockInfo {
            id: "killed-run-lock".to_owned(),
            operation: "apply".to_owned(),
            created: "2026-01-02T03:04:05Z".to_owned(),
            ..LockInfo::default()
        };
        killed.lock(&info).await.unwrap();
        assert!(killed.describe().ends_with("/terraform/state/lab"));
    }
    let run = |args: Vec<&'static str>| {
        let (dir, env) = (dir.path().to_path_buf(), env.clone());
        tokio::task::spawn_blocking(move || run(&dir, &args, &env))
    };
    let o = run(vec!["state", "rm", "-auto-approve", "vm/talos-worker-01"])
        .await
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("locked by gitlab-ci-token since 2026-01-02T03:04:05Z for apply"),
        "{err}"
    );
    assert!(
        err.contains("talosprov force-unlock killed-run-lock"),
        "{err}"
    );
    assert!(!err.contains(gitlab_state::TOKEN));

    let o = run(vec!["force-unlock", "killed-run-lock"]).await.unwrap();
    assert!(text(&o).1.contains("add -force"));
    let o = run(vec!["force-unlock", "-force", "killed-run-lock"])
        .await
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    assert_eq!(server.lock_id(), None);

    let o = run(vec!["state", "rm", "-auto-approve", "vm/talos-worker-01"])
        .await
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let stored = State::from_json(&server.state().unwrap()).unwrap();
    assert!(stored.resources.vms.is_empty());
    assert_eq!(
        server.lock_id(),
        None,
        "the lock is released after the command"
    );
}

#[tokio::test]
async fn force_unlock_releases_a_stale_local_lock() {
    let (dir, _) = cluster_dir().await;
    // What a killed local run leaves behind: the lock file, no OS lock, a dead pid.
    let stale = LockInfo {
        id: "stale-local-lock".to_owned(),
        operation: "apply".to_owned(),
        who: "alice@elsewhere".to_owned(),
        created: "2026-01-02T03:04:05Z".to_owned(),
        pid: Some(4_000_000_000),
        ..LockInfo::default()
    };
    let lock_file = dir.path().join(".talosprov.tfstate.lock.info");
    std::fs::write(&lock_file, stale.to_json()).unwrap();

    let o = run(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &[],
    );
    let err = text(&o).1;
    assert!(
        err.contains("locked by alice@elsewhere") && err.contains("force-unlock stale-local-lock"),
        "{err}"
    );

    let o = run(dir.path(), &["force-unlock", "-force", "wrong-id"], &[]);
    assert!(!o.status.success());
    assert!(lock_file.exists());
    let o = run(
        dir.path(),
        &["force-unlock", "-force", "stale-local-lock"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(!lock_file.exists());
    let o = run(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o).1);
}

#[test]
fn state_and_output_help_texts() {
    let dir = tempfile::tempdir().unwrap();
    let help = |args: &[&str]| text(&run(dir.path(), args, &[])).0;
    insta::assert_snapshot!("state_help", help(&["state", "-help"]));
    insta::assert_snapshot!("output_help", help(&["output", "-help"]));
    insta::assert_snapshot!("state_rm_help", help(&["state", "rm", "--help"]));
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_releases_the_lock_and_exits_143() {
    let server = gitlab_state::GitlabState::start().await;
    let (dir, path) = cluster_dir().await;
    server.stored.lock().unwrap().state = Some(std::fs::read(&path).unwrap());
    server
        .stall_reads
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let stalled = server.stalled.notified();

    let mut cmd = std::process::Command::new(BIN);
    cmd.current_dir(dir.path())
        .env_clear()
        .envs(server.env())
        .args(["state", "rm", "-auto-approve", "vm/talos-worker-01"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();

    // The command holds the lock and waits on the hung read: cancel it like a
    // GitLab job.
    tokio::time::timeout(std::time::Duration::from_secs(30), stalled)
        .await
        .expect("the command read the state under the lock");
    assert!(server.lock_id().is_some());
    signal(pid, "TERM");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the command stopped")
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(143),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.lock_id(), None, "the lock was released");
}
