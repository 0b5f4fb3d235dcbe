//! State locks as users meet them, with real `talosprov` processes: a lock left
//! by a run killed with SIGKILL is taken over by the next run with a warning
//! naming the dead holder (local file and http server), `force-unlock -force`
//! refuses a holder still running on this host, `-lock-timeout` waits for a
//! lock released meanwhile and exits 3 when it runs out, and the holder's user
//! is named from the system when `$USER` is unset.

use crate::support::cli::{BIN, finish, stderr};
use crate::support::fixtures::{SECRETS_FILE, copy_tree, repo};
use crate::support::gitlab_state;
use crate::support::wait::poll;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use talosprov_backend::backend::Backend;
use talosprov_backend::holder::host_name;
use talosprov_backend::local::LocalBackend;
use talosprov_backend::store::StateStore;
use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::format::State;
use talosprov_statefile::format::Vm;
use talosprov_statefile::lock::LockInfo;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A folder with the lab topology (nodes on 127.5.9.x, where nothing
/// listens; TLS checks off for the Proxmox stand-in) and its patches.
fn topology_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = repo();
    let text = std::fs::read_to_string(repo.join("examples/lab/cluster.yaml"))
        .expect("lab topology")
        .replace("ca_file: .run/ca.pem", "insecure: true")
        .replace("127.0.0.12", "127.5.9.12")
        .replace("../../patches", "patches");
    std::fs::write(dir.path().join("cluster.yaml"), text).expect("write topology");
    copy_tree(&repo.join("patches"), &dir.path().join("patches"));
    copy_tree(
        &repo.join("examples/lab/addons"),
        &dir.path().join("addons"),
    );
    dir
}

/// A Proxmox endpoint that accepts connections and never answers, so a run
/// that reads Proxmox waits there, holding the state lock.
async fn stalled_proxmox() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    (url, task)
}

/// A talosprov command in `dir` with only the environment given (no `$USER`).
fn command(dir: &Path, args: &[&str], env: &[(String, String)]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(BIN);
    c.current_dir(dir)
        .env_clear()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    c
}

/// Wait (at most 60 s) until the lock file names a holder with `pid`.
async fn lock_held_by(lock_file: &Path, pid: u32) -> LockInfo {
    poll(
        "the run taking the lock",
        Duration::from_secs(60),
        async || {
            let bytes = std::fs::read(lock_file).ok()?;
            let info = serde_json::from_slice::<LockInfo>(&bytes).ok()?;
            (info.pid == Some(pid)).then_some(info)
        },
    )
    .await
}

/// The user `id -un` names: what the system calls this process's user.
fn system_user() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id -un");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_owned()
}

/// A plan run that holds the local lock while it waits on Proxmox.
struct Holder {
    child: tokio::process::Child,
    info: LockInfo,
    /// The Proxmox environment the topology needs.
    env: Vec<(String, String)>,
    _proxmox: tokio::task::JoinHandle<()>,
}

async fn spawn_holder(dir: &Path) -> Holder {
    let out = finish(command(dir, &["secrets", "import", SECRETS_FILE], &[])).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let (url, proxmox) = stalled_proxmox().await;
    let env = vec![
        ("PROXMOX_VE_ENDPOINT".to_owned(), url),
        (
            "PROXMOX_VE_API_TOKEN".to_owned(),
            "root@pam!t=00000000-0000-0000-0000-000000000000".to_owned(),
        ),
    ];
    let child = command(dir, &["plan"], &env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start plan");
    let pid = child.id().expect("pid");
    let info = lock_held_by(&dir.join(".talosprov.tfstate.lock.info"), pid).await;
    Holder {
        child,
        info,
        env,
        _proxmox: proxmox,
    }
}

/// Replace the varying parts of a lock message: pid, time, lock ID, host, user.
fn stable(text: &str, info: &LockInfo) -> String {
    text.replace(&info.id, "[LOCK-ID]")
        .replace(&info.created, "[TIME]")
        .replace(&info.pid.expect("pid").to_string(), "[PID]")
        .replace(&info.who, "[USER@HOST]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_of_a_killed_run_is_taken_over_with_a_warning_naming_it() {
    let dir = topology_dir();
    let mut holder = spawn_holder(dir.path()).await;
    // `$USER` is unset in the holder's environment: the system names the user.
    assert_eq!(
        holder.info.who,
        format!("{}@{}", system_user(), host_name()),
        "the holder's user comes from the system"
    );
    holder.child.start_kill().expect("kill -9");
    let _ = holder.child.wait().await;
    let lock_file = dir.path().join(".talosprov.tfstate.lock.info");
    assert!(lock_file.exists(), "a killed run leaves its lock file");

    let out = finish(command(
        dir.path(),
        &["plan", "-refresh=false"],
        &holder.env,
    ))
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let warning = stderr(&out)
        .lines()
        .find(|l| l.contains("took over the state lock"))
        .unwrap_or_else(|| panic!("no takeover warning in:\n{}", stderr(&out)))
        .to_owned();
    insta::assert_snapshot!(stable(&warning, &holder.info), @"Warning: took over the state lock left by [USER@HOST] (process [PID]) for plan since [TIME] (lock ID [LOCK-ID]): that process is no longer running");
    assert!(!lock_file.exists(), "the new run released its own lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_refuses_a_holder_still_running_on_this_host() {
    let dir = topology_dir();
    let mut holder = spawn_holder(dir.path()).await;
    let lock_file = dir.path().join(".talosprov.tfstate.lock.info");
    let before = std::fs::read(&lock_file).expect("lock file");

    let out = finish(command(
        dir.path(),
        &["force-unlock", "-force", &holder.info.id],
        &[],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read(&lock_file).expect("lock file"),
        before,
        "the lock stays"
    );
    insta::assert_snapshot!(stable(&stderr(&out), &holder.info), @"Error: refusing to release lock [LOCK-ID]: it is held by [USER@HOST] (process [PID]) for plan since [TIME] (lock ID [LOCK-ID]), which is still running; stop that run first (or let it finish), and its lock is released with it");

    // Another run is told the holder runs, and exits 3.
    let out = finish(command(
        dir.path(),
        &["plan", "-refresh=false"],
        &holder.env,
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is still running"),
        "{}",
        stderr(&out)
    );
    holder.child.start_kill().expect("kill");
    let _ = holder.child.wait().await;
}

/// A state with one VM, in a fresh folder, and a lock on it held by this
/// test process.
async fn locked_state() -> (tempfile::TempDir, LocalBackend, LockInfo) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("talosprov.tfstate");
    let mut state = State::new(uuid::Uuid::from_u128(7));
    state.secrets = Some(Sensitive::new("cluster:\n  secret: S\n"));
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
            tags: vec![],
            net: Default::default(),
            disks: Default::default(),
            agent: true,
            ha: None,
        },
    );
    let store = StateStore::new(LocalBackend::new(path.clone()), None);
    store.save(&mut state, false).await.expect("save");
    let info = LockInfo {
        id: "held-by-the-test".to_owned(),
        operation: "apply".to_owned(),
        who: format!("tester@{}", host_name()),
        created: "2026-01-02T03:04:05Z".to_owned(),
        pid: Some(std::process::id()),
        ..LockInfo::default()
    };
    let backend = LocalBackend::new(path);
    backend.lock(&info).await.expect("lock");
    (dir, backend, info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_runs_out_with_exit_code_3() {
    let (dir, _held, info) = locked_state().await;
    let out = finish(command(
        dir.path(),
        &[
            "state",
            "rm",
            "-auto-approve",
            "-lock-timeout=1s",
            "vm/talos-worker-01",
        ],
        &[],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    insta::assert_snapshot!(stable(&stderr(&out), &info), @r"
    Waiting for the state lock, held by [USER@HOST] (process [PID]) for apply since [TIME] (lock ID [LOCK-ID]); trying again for up to 1s.
    Error: cannot lock the state: still held after -lock-timeout=1s
      caused by: the state is locked by [USER@HOST] since [TIME] for apply (lock ID [LOCK-ID]); process [PID] on this host is still running: wait for it to finish, or retry with -lock-timeout=DURATION to wait for it
    ");
    let state = State::from_json(&std::fs::read(dir.path().join("talosprov.tfstate")).unwrap())
        .expect("state");
    assert!(state.resources.vms.contains_key("talos-worker-01"));

    // Without -lock-timeout it fails at once, with the same exit code.
    let out = finish(command(
        dir.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &[],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert!(!stderr(&out).contains("Waiting"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_waits_for_a_lock_released_meanwhile() {
    let (dir, held, info) = locked_state().await;
    let mut child = command(
        dir.path(),
        &[
            "state",
            "rm",
            "-auto-approve",
            "-lock-timeout=2m",
            "vm/talos-worker-01",
        ],
        &[],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start state rm");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let waiting = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("a line within 60 s")
        .expect("read")
        .expect("a line");
    assert!(
        waiting.starts_with("Waiting for the state lock, held by") && waiting.contains(&info.id),
        "{waiting}"
    );
    held.unlock(&info.id).await.expect("release");
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("state rm finished after the lock was released")
        .expect("wait");
    assert!(status.success());
    let state = State::from_json(&std::fs::read(dir.path().join("talosprov.tfstate")).unwrap())
        .expect("state");
    assert!(state.resources.vms.is_empty(), "the waiting run went on");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_lock_of_a_killed_run_is_taken_over_where_the_server_keeps_its_pid() {
    use std::sync::atomic::Ordering;
    let server = gitlab_state::GitlabState::start().await;
    server.keep_lock_info.store(true, Ordering::SeqCst);
    let (dir, _, _) = locked_state().await;
    server.stored.lock().unwrap().state =
        Some(std::fs::read(dir.path().join("talosprov.tfstate")).unwrap());
    let work = tempfile::tempdir().expect("temp dir");
    server.stall_reads.store(true, Ordering::SeqCst);
    let stalled = server.stalled.notified();
    let mut child = command(
        work.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &server.env(),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("start state rm");
    tokio::time::timeout(Duration::from_secs(30), stalled)
        .await
        .expect("the run read the state under the lock");
    let holder = server.stored.lock().unwrap().lock.clone().expect("locked");
    assert_eq!(holder["Pid"], child.id().expect("pid"));
    child.start_kill().expect("kill -9");
    let _ = child.wait().await;
    server.stall_reads.store(false, Ordering::SeqCst);

    let out = finish(command(
        work.path(),
        &["state", "rm", "-auto-approve", "vm/talos-worker-01"],
        &server.env(),
    ))
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "took over the state lock left by {}",
            holder["Who"].as_str().expect("who")
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.lock_id(), None, "released after the run");
    let stored = State::from_json(&server.state().expect("state")).expect("state");
    assert!(stored.resources.vms.is_empty());
}
