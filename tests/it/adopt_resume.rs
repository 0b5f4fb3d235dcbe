//! `talosprov adopt` stopped part way: a signal while it reads the cluster
//! writes nothing and names the command to run again; an adopt killed while
//! writing its files (so some are there and no state was saved) is finished
//! by the same command; and a node with thousands of config patches adopts
//! in merge order.

use std::path::Path;
use std::time::Duration;

use crate::support::cli::{BIN, signal, stderr, stdout};
use crate::support::fixtures::SECRETS_FILE;
use crate::support::tfstate::{ADOPT_SETTINGS, provider_state};

/// `talosprov adopt --from-tfstate FILE --out OUT` with a Proxmox endpoint
/// given (nothing is asked of it), in `dir`.
fn adopt(dir: &Path, file: &Path, out: &Path) -> std::process::Output {
    std::process::Command::new(BIN)
        .current_dir(dir)
        .args(["adopt", "--from-tfstate"])
        .arg(file)
        .arg("--out")
        .arg(out)
        .args(ADOPT_SETTINGS)
        .env_remove("PROXMOX_VE_ENDPOINT")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run talosprov")
}

/// The files under `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("under").display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_adopt_killed_while_writing_its_files_is_finished_by_the_same_command() {
    let dir = tempfile::tempdir().expect("dir");
    let secrets = std::fs::read_to_string(SECRETS_FILE).expect("secrets");
    let file = dir.path().join("source.tfstate");
    let state = provider_state(&secrets, 1_005);
    std::fs::write(&file, serde_json::to_vec(&state).expect("JSON")).expect("write");
    let whole = dir.path().join("whole");
    let out = adopt(dir.path(), &file, &whole);
    assert!(out.status.success(), "{}", stderr(&out));
    let files = tree(&whole);
    assert!(files.contains(&"talosprov.tfstate".to_owned()), "{files:?}");
    // Over a thousand patches every node shares: in common/, numbered so
    // byte-wise order is theirs.
    let common: Vec<&String> = files
        .iter()
        .filter(|f| f.starts_with("patches/common/"))
        .collect();
    assert!(common.len() > 1_000, "{files:?}");
    assert!(
        common[0].starts_with("patches/common/0000-"),
        "{}",
        common[0]
    );

    // What a kill while writing leaves: some of the files, no state.
    let stopped = dir.path().join("stopped");
    for f in files.iter().take(files.len() / 2) {
        if f == "talosprov.tfstate" {
            continue;
        }
        let to = stopped.join(f);
        std::fs::create_dir_all(to.parent().expect("folder")).expect("mkdir");
        std::fs::copy(whole.join(f), to).expect("copy");
    }
    let out = adopt(dir.path(), &file, &stopped);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Adopt complete."), "{}", stdout(&out));
    assert_eq!(tree(&stopped), files, "the rest written, the state saved");

    // Once a state is saved, the folder is adopt's no longer: refused.
    let out = adopt(dir.path(), &file, &stopped);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("give an empty --out folder"),
        "{}",
        stderr(&out)
    );
    // Nor is a file with other content taken for adopt's own.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("cluster.yaml"), "cluster: {}\n").expect("write");
    let out = adopt(dir.path(), &file, &other);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cluster.yaml"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_while_adopt_reads_the_nodes_writes_nothing_and_names_the_command() {
    // A node that takes the connection and never answers: adopt waits on it.
    let listener = tokio::net::TcpListener::bind("127.22.6.1:50000")
        .await
        .expect("bind");
    let (accepted, mut connected) = tokio::sync::watch::channel(false);
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
            let _ = accepted.send(true);
        }
    });
    let dir = tempfile::tempdir().expect("dir");
    let out_dir = dir.path().join("adopted");
    let child = tokio::process::Command::new(BIN)
        .current_dir(dir.path())
        .args([
            "adopt",
            "--from-talos",
            SECRETS_FILE,
            "--node",
            "127.22.6.1",
            "--out",
        ])
        .arg(&out_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start talosprov");
    // It is connected (and waiting) once the listener has its socket.
    tokio::time::timeout(Duration::from_secs(30), connected.wait_for(|c| *c))
        .await
        .expect("adopt connects to the node within 30 s")
        .expect("the listener runs");
    signal(child.id().expect("pid"), "TERM");
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("exits soon after the signal")
        .expect("wait");
    held.abort();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(
        err.contains("SIGTERM received while reading the cluster to adopt: nothing was written"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "run `talosprov adopt --from-talos {SECRETS_FILE} --node 127.22.6.1 --out {}` to start over",
            out_dir.display()
        )),
        "{err}"
    );
    assert!(!out_dir.exists(), "nothing written");
}
