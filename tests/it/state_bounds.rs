//! The state file is read through one bounded reader: a topology whose
//! `state.path` is a FIFO or a device is refused at once, naming the path,
//! by `plan` and by `state list` (a FIFO used to hang `plan`; `/dev/zero`
//! was read for 4 GB).

use std::path::Path;

use crate::support::cli::{BIN, finish, stderr};

/// The minimal topology with its state at `state_path`.
fn topology(dir: &Path, state_path: &str) {
    let text = format!(
        "{}state:\n  backend: local\n  path: {state_path}\n",
        include_str!("../fixtures/valid/minimal.yaml")
    );
    std::fs::write(dir.join("cluster.yaml"), text).expect("write topology");
}

/// Runs `talosprov args` in `dir` with a clean environment; the test fails
/// unless it ends within 120 s.
async fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut command = tokio::process::Command::new(BIN);
    command
        .current_dir(dir)
        .env_clear()
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    finish(command).await
}

#[tokio::test]
async fn a_fifo_as_the_state_file_is_refused_promptly_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    let fifo = dir.path().join("state.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    topology(dir.path(), "state.fifo");
    for args in [&["plan", "-refresh=false"][..], &["state", "list"][..]] {
        let out = run(dir.path(), args).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("state.fifo"), "{args:?}: {err}");
        assert!(
            err.contains("it is a FIFO, not a regular file"),
            "{args:?}: {err}"
        );
    }
}

#[tokio::test]
async fn dev_zero_as_the_state_file_is_refused_unread() {
    let dir = tempfile::tempdir().expect("dir");
    topology(dir.path(), "/dev/zero");
    let out = run(dir.path(), &["state", "list"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/dev/zero: it is a character device, not a regular file"),
        "{err}"
    );
}

#[tokio::test]
async fn a_saved_plan_that_is_a_fifo_is_refused_promptly_naming_it() {
    let dir = tempfile::tempdir().expect("dir");
    topology(dir.path(), "talosprov.tfstate");
    let fifo = dir.path().join("saved.plan");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let out = run(dir.path(), &["apply", "saved.plan"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot read the saved plan saved.plan: it is a FIFO"),
        "{err}"
    );
}
