//! Running with no terminal, as in a CI job: no prompt, no escape codes, and
//! errors that name the missing flag or variable; and the topology's `state:`
//! section choosing the GitLab-managed state, with `--backend-config` on top.

use crate::support::fixtures::SECRETS_FILE;
use crate::support::gitlab_state;

use std::time::Duration;

use crate::support::cli::{BIN, stderr, stdout};
use crate::support::lab::Lab;
use gitlab_state::{GitlabState, TOKEN, USERNAME};

fn assert_plain(out: &std::process::Output) {
    let all = format!("{}{}", stdout(out), stderr(out));
    assert!(
        !all.contains('\x1b'),
        "escape codes without a terminal:\n{all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topology_state_section_selects_the_gitlab_state_and_backend_config_overrides_it() {
    let server = GitlabState::start().await;
    let mut lab = Lab::start("1.11", Duration::from_millis(100)).await;
    let (address, lock) = (server.address(), server.lock_address());
    lab.write_topology(|t| {
        format!(
            "{t}\nstate:\n  backend: http\n  address: {address}\n  lock_address: {lock}\n  \
             unlock_address: {lock}\n  lock_method: POST\n  unlock_method: DELETE\n"
        )
    });
    // Only the credentials come from the environment.
    lab.env.push(("TF_HTTP_USERNAME".into(), USERNAME.into()));
    lab.env.push(("TF_HTTP_PASSWORD".into(), TOKEN.into()));
    // A save whose answer is lost is retried, and logged at -v: plainly.
    server
        .drop_saves
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let out = lab.run(&["secrets", "import", SECRETS_FILE, "-v"]).await;
    assert!(out.status.success(), "secrets import failed");
    assert!(
        stderr(&out).contains("DEBUG"),
        "debug logs at -v: {}",
        stderr(&out)
    );
    assert_plain(&out);
    assert!(
        server.state().is_some(),
        "the secrets went to the state: section's backend"
    );
    assert!(!lab.state_file().exists(), "no local state");
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("POST") && r.contains("/lock")),
        "{requests:?}"
    );

    let out = lab.run(&["plan", "-refresh=false"]).await;
    assert!(out.status.success(), "plan from the state: section failed");
    assert_plain(&out);
    assert!(stderr(&out).contains("State lock ID: "), "{}", stderr(&out));
    // A remote state and no backup: section: the snapshots would stay on the runner.
    assert!(
        stdout(&out).contains("snapshots would be lost with the CI job"),
        "{}",
        stdout(&out)
    );

    let before = server.requests().len();
    let out = lab
        .run(&[
            "plan",
            "-refresh=false",
            "--backend-config",
            "backend=local",
        ])
        .await;
    assert!(out.status.success(), "plan on the local override failed");
    assert_eq!(
        server.requests().len(),
        before,
        "the override kept the server out"
    );
    assert!(
        !stderr(&out).contains("State lock ID: "),
        "no ID for a local lock"
    );
    assert!(
        !stdout(&out).contains("snapshots would be lost"),
        "a local state keeps its snapshots beside it"
    );

    // A remote state whose backup.destination is a folder: lost just the same.
    lab.write_topology(|t| {
        format!(
            "{t}\nstate:\n  backend: http\n  address: {address}\n  lock_address: {lock}\n  \
             unlock_address: {lock}\n  lock_method: POST\n  unlock_method: DELETE\n\
             backup:\n  destination: snaps\n"
        )
    });
    let out = lab.run(&["plan", "-refresh=false"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("backup.destination is a folder"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_errors_name_the_missing_flag_or_variable() {
    let server = GitlabState::start().await;
    let mut lab = Lab::start("1.12", Duration::from_millis(100)).await;
    lab.env.extend(server.env());

    // apply: neither -auto-approve nor a plan file.
    let out = lab.run(&["apply"]).await;
    assert!(!out.status.success());
    assert_plain(&out);
    let err = stderr(&out);
    assert!(
        err.contains("-auto-approve") && err.contains("plan -out"),
        "{err}"
    );
    assert_eq!(
        server.lock_id(),
        None,
        "the refused apply released its lock"
    );
    assert!(lab.vms().await.is_empty(), "nothing was made");
    assert!(server.state().is_none(), "a refused apply writes no state");

    // No Proxmox token.
    let out = lab
        .command(&["plan"])
        .env_remove("PROXMOX_VE_API_TOKEN")
        .output()
        .await
        .expect("run plan");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("PROXMOX_VE_API_TOKEN")
            && err.contains("cannot read the cluster back from Proxmox")
            && err.contains("-refresh=false"),
        "{err}"
    );

    // force-unlock without -force.
    let out = lab
        .run(&["force-unlock", "0b5e1d9c-0000-4000-8000-000000000000"])
        .await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("-force"), "{}", stderr(&out));

    // An encrypted state and a sealed plan, read without the passphrase.
    lab.env.push((
        talosprov_backend::encrypt::PASSPHRASE_VAR.to_owned(),
        "a passphrase for this test".to_owned(),
    ));
    lab.import_secrets().await;
    let plan_file = lab.dir.path().join("plan.cache");
    let plan_file = plan_file.to_str().expect("utf-8");
    let out = lab
        .run(&["plan", "-refresh=false", "-out", plan_file])
        .await;
    assert!(out.status.success(), "plan with the passphrase failed");
    lab.env.pop();
    let out = lab.run(&["plan", "-refresh=false"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("TALOSPROV_STATE_PASSPHRASE"),
        "{}",
        stderr(&out)
    );
    assert_eq!(server.lock_id(), None, "the failed plan released its lock");
    let out = std::process::Command::new(BIN)
        .args(["show", plan_file])
        .env_remove("TALOSPROV_STATE_PASSPHRASE")
        .output()
        .expect("run show");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("TALOSPROV_STATE_PASSPHRASE"),
        "{}",
        stderr(&out)
    );
}
