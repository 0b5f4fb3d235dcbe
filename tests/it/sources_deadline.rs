//! The add-on sources' deadline reaches `helm template` from
//! `TALOSPROV_SOURCE_TIMEOUT`: a `helm` that hangs is killed when it passes,
//! and the error names the command, the deadline and the variable.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use crate::support::cli::{BIN, finish, stderr};
use crate::support::fixtures::SECRETS_FILE;

/// The minimal topology with one plain `helm` add-on, and a `helm` in `dir`
/// that hangs.
fn hanging_helm(dir: &Path) -> String {
    let text = format!(
        "{}addons:\n  web:\n    helm: {{repo: https://charts.example.test/, chart: web, version: 1.0.0}}\n",
        include_str!("../fixtures/valid/minimal.yaml")
    );
    std::fs::write(dir.join("cluster.yaml"), text).expect("write topology");
    let helm = dir.join("helm");
    std::fs::write(&helm, "#!/bin/sh\nsleep 300\n").expect("write helm");
    std::fs::set_permissions(&helm, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    helm.display().to_string()
}

/// `talosprov render --secrets … cp-01` in `dir` with `timeout` as
/// `TALOSPROV_SOURCE_TIMEOUT`; the test fails unless it ends within 120 s.
async fn render(dir: &Path, helm: &str, timeout: &str) -> std::process::Output {
    let mut command = tokio::process::Command::new(BIN);
    command
        .current_dir(dir)
        .env_clear()
        .env("TALOSPROV_HELM", helm)
        .env("TALOSPROV_SOURCE_TIMEOUT", timeout)
        .args(["render", "--secrets", SECRETS_FILE, "cp-01"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    finish(command).await
}

#[tokio::test]
async fn a_hanging_helm_is_killed_at_the_deadline_the_variable_sets() {
    let dir = tempfile::tempdir().expect("dir");
    let helm = hanging_helm(dir.path());
    let out = render(dir.path(), &helm, "1s").await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&helm), "{err}");
    assert!(
        err.contains("ran for more than the deadline of 1 s for a helm run, and was killed"),
        "{err}"
    );
    assert!(err.contains("set TALOSPROV_SOURCE_TIMEOUT"), "{err}");
    assert!(err.contains("A012 addon-source-failed"), "{err}");
}

#[tokio::test]
async fn a_source_that_fails_and_one_that_gives_unusable_output_have_their_own_codes() {
    let dir = tempfile::tempdir().expect("dir");
    let helm = hanging_helm(dir.path());
    for (script, code) in [
        (
            "echo 'Error: chart not found' >&2; exit 1",
            "A012 addon-source-failed",
        ),
        ("printf '\\377\\376'", "A009 invalid-addon-manifest"),
    ] {
        std::fs::write(&helm, format!("#!/bin/sh\n{script}\n")).expect("write helm");
        let out = render(dir.path(), &helm, "60s").await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(code), "{script}: {err}");
    }
}

#[tokio::test]
async fn a_malformed_deadline_is_refused_naming_the_variable() {
    let dir = tempfile::tempdir().expect("dir");
    let helm = hanging_helm(dir.path());
    for value in ["soon", "0s"] {
        let out = render(dir.path(), &helm, value).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("TALOSPROV_SOURCE_TIMEOUT"), "{value}: {err}");
    }
}
