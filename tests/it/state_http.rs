//! The http state backend against a loopback GitLab-like state server: locks,
//! the `?ID=` check, retries after a lost connection, force-unlock, and an
//! encrypted state that leaves no secret on the server.

use crate::support::gitlab_state;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use gitlab_state::GitlabState;
use talosprov_backend::backend::{Backend, BackendError};
use talosprov_backend::encrypt::StateKeys;
use talosprov_backend::http::HttpBackend;
use talosprov_backend::store::StateStore;
use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::config::{self, BackendConfig, StateSection};
use talosprov_statefile::format::State;
use talosprov_statefile::lock::LockInfo;

fn http_backend(server: &GitlabState) -> HttpBackend {
    let env: BTreeMap<String, String> = server.env().into_iter().collect();
    let BackendConfig::Http(c) =
        config::resolve(&StateSection::default(), &env, &[], Path::new("."), None).unwrap()
    else {
        panic!("TF_HTTP_ADDRESS selects the http backend");
    };
    HttpBackend::new(*c).unwrap()
}

fn lock_info(id: &str, operation: &str) -> LockInfo {
    LockInfo {
        id: id.to_owned(),
        operation: operation.to_owned(),
        who: "ci@runner".to_owned(),
        version: "0.1.0".to_owned(),
        created: "2026-01-02T03:04:05Z".to_owned(),
        ..LockInfo::default()
    }
}

fn state() -> State {
    let mut s = State::new(uuid::Uuid::from_u128(42));
    s.secrets = Some(Sensitive::new(
        "certs:\n  os:\n    key: -----BEGIN ED25519 PRIVATE KEY-----\n",
    ));
    s
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("the state server answered in time")
}

#[tokio::test]
async fn empty_state_reads_as_none() {
    let server = GitlabState::start().await;
    assert_eq!(within(http_backend(&server).get()).await.unwrap(), None);
}

#[tokio::test]
async fn an_empty_body_or_a_body_that_is_not_a_state_is_never_no_state() {
    let server = GitlabState::start().await;
    for (body, expected) in [
        (&b""[..], "HTTP 200 with an empty body"),
        (
            b"<html>sign in</html>",
            "it is not a state talosprov can read",
        ),
    ] {
        server.stored.lock().unwrap().state = Some(body.to_vec());
        let store = StateStore::new(http_backend(&server), None);
        let err = within(store.load()).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(expected), "{text}");
        assert!(
            text.contains("/terraform/state/lab") && !text.contains(gitlab_state::TOKEN),
            "{text}"
        );
    }
    // A state that was never saved: GitLab's 204 (and 404) read as none.
    server.stored.lock().unwrap().state = None;
    assert_eq!(within(http_backend(&server).get()).await.unwrap(), None);
}

fn this_host(id: &str, pid: u32) -> LockInfo {
    LockInfo {
        who: format!("ci@{}", talosprov_backend::holder::host_name()),
        pid: Some(pid),
        ..lock_info(id, "apply")
    }
}

#[tokio::test]
async fn dead_holder_of_this_host_is_taken_over_and_a_live_one_is_not_force_unlocked() {
    use std::sync::atomic::Ordering;
    let server = GitlabState::start().await;
    server.keep_lock_info.store(true, Ordering::SeqCst);
    let dead = this_host("dead-run", u32::MAX - 7);
    within(http_backend(&server).lock(&dead)).await.unwrap();

    let next = http_backend(&server);
    let taken = within(next.lock(&this_host("next-run", std::process::id())))
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(taken.holder.id, "dead-run");
    assert_eq!(server.lock_id().as_deref(), Some("next-run"));

    // The holder runs (this test process): no takeover, no force-unlock.
    let err = within(http_backend(&server).lock(&this_host("third", 1)))
        .await
        .unwrap_err();
    assert_eq!(
        err.lock_held().unwrap().process,
        talosprov_statefile::lock::HolderProcess::Running
    );
    let err = within(http_backend(&server).unlock("next-run"))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::HolderRunning(_)), "{err}");
    assert_eq!(server.lock_id().as_deref(), Some("next-run"));
    within(next.unlock("next-run")).await.unwrap();
    let err = within(http_backend(&server).unlock("next-run"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not locked"), "{err}");
    assert_eq!(server.lock_id(), None, "the probe's own lock is given back");
}

#[tokio::test]
async fn second_writer_sees_the_lock_holder_and_cannot_save() {
    let server = GitlabState::start().await;
    let first = StateStore::new(http_backend(&server), None);
    let second = StateStore::new(http_backend(&server), None);
    within(first.lock(&lock_info("lock-a", "apply")))
        .await
        .unwrap();

    let err = within(second.lock(&lock_info("lock-b", "apply")))
        .await
        .unwrap_err();
    let text = err.to_string();
    let talosprov_backend::store::StoreError::Backend(BackendError::Locked(held)) = err else {
        panic!("expected a lock conflict, got {text}");
    };
    assert_eq!(held.holder.id, "lock-a");
    assert_eq!(held.holder.operation, "apply");
    assert_eq!(held.holder.created, "2026-01-02T03:04:05Z");
    assert!(
        text.contains("gitlab-ci-token") && text.contains("force-unlock lock-a"),
        "{text}"
    );

    // Without the lock, the server refuses the save (no ?ID=).
    assert!(within(second.save(&mut state(), false)).await.is_err());
    let mut s = state();
    within(first.save(&mut s, false)).await.unwrap();
    assert!(
        server.requests().iter().any(|r| r.ends_with("?ID=lock-a")),
        "{:?}",
        server.requests()
    );
    within(first.unlock("lock-a")).await.unwrap();
    within(second.lock(&lock_info("lock-b", "apply")))
        .await
        .unwrap();
    let loaded = within(second.load()).await.unwrap().unwrap();
    assert_eq!(loaded.state.serial, 1);
}

#[tokio::test]
async fn killed_holder_lock_is_released_by_force_unlock() {
    let server = GitlabState::start().await;
    {
        // A run that takes the lock and dies without unlocking.
        let killed = http_backend(&server);
        within(killed.lock(&lock_info("dead-run", "apply")))
            .await
            .unwrap();
    }
    let next = http_backend(&server);
    let err = within(next.lock(&lock_info("next-run", "plan")))
        .await
        .unwrap_err();
    assert_eq!(err.lock_held().unwrap().holder.id, "dead-run");

    let wrong = within(http_backend(&server).unlock("not-the-id"))
        .await
        .unwrap_err();
    assert!(
        wrong
            .to_string()
            .contains("refused to release lock not-the-id"),
        "{wrong}"
    );
    within(http_backend(&server).unlock("dead-run"))
        .await
        .unwrap();
    assert_eq!(server.lock_id(), None);
    within(next.lock(&lock_info("next-run", "plan")))
        .await
        .unwrap();
}

#[tokio::test]
async fn lost_connection_during_save_is_retried_without_corruption() {
    let server = GitlabState::start().await;
    let store = StateStore::new(http_backend(&server), None);
    within(store.lock(&lock_info("l1", "apply"))).await.unwrap();
    let mut s = state();
    within(store.save(&mut s, false)).await.unwrap();
    server
        .drop_saves
        .store(1, std::sync::atomic::Ordering::SeqCst);
    s.resources.pools.insert(
        "TALOS".to_owned(),
        talosprov_statefile::format::Pool { comment: None },
    );
    within(store.save(&mut s, false)).await.unwrap();

    let posts = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("POST /api/v4/projects/1/terraform/state/lab?"))
        .count();
    assert_eq!(posts, 3, "one save, then one dropped and retried");
    assert_eq!(server.state().unwrap(), s.to_json());
    let loaded = within(store.load()).await.unwrap().unwrap();
    assert_eq!(loaded.state, s);
    assert_eq!(loaded.state.serial, 2);
}

#[tokio::test]
async fn save_without_serial_gets_422_and_a_clear_error() {
    let server = GitlabState::start().await;
    let b = http_backend(&server);
    let err = within(b.put(br#"{"version":1}"#))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("422") && err.contains("serial is missing"),
        "{err}"
    );
    assert!(!err.contains(gitlab_state::TOKEN));
}

#[tokio::test]
async fn wrong_token_is_refused_and_never_printed() {
    let server = GitlabState::start().await;
    let mut env: BTreeMap<String, String> = server.env().into_iter().collect();
    env.insert("TF_HTTP_PASSWORD".to_owned(), "wrong-token-123".to_owned());
    let BackendConfig::Http(c) =
        config::resolve(&StateSection::default(), &env, &[], Path::new("."), None).unwrap()
    else {
        panic!()
    };
    let err = within(HttpBackend::new(*c).unwrap().get())
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("401"), "{text}");
    assert!(!text.contains("wrong-token-123"));
}

#[tokio::test]
async fn encrypted_state_on_the_server_holds_no_pem_block_and_no_token() {
    let server = GitlabState::start().await;
    let keys = StateKeys::Passphrase(Sensitive::new("correct horse battery staple"));
    let store = StateStore::new(http_backend(&server), Some(keys));
    within(store.lock(&lock_info("l1", "apply"))).await.unwrap();
    let mut s = state();
    within(store.save(&mut s, true)).await.unwrap();

    let stored = String::from_utf8(server.state().unwrap()).unwrap();
    for needle in [
        "PRIVATE KEY",
        "BEGIN CERTIFICATE",
        gitlab_state::TOKEN,
        "certs:",
    ] {
        assert!(!stored.contains(needle), "{needle} found in {stored}");
    }
    let doc: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(doc["serial"], 1);
    assert_eq!(doc["lineage"], s.lineage.to_string());

    let wrong = StateStore::new(
        http_backend(&server),
        Some(StateKeys::Passphrase(Sensitive::new("wrong"))),
    );
    assert!(within(wrong.load()).await.is_err());
    assert_eq!(
        server.state().unwrap(),
        stored.as_bytes(),
        "a wrong key changes nothing"
    );
    assert_eq!(within(store.load()).await.unwrap().unwrap().state, s);
}

#[tokio::test]
async fn unreachable_server_fails_after_the_configured_retries() {
    // A loopback port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env: BTreeMap<String, String> = [
        ("TF_HTTP_ADDRESS", format!("http://127.0.0.1:{port}/state")),
        ("TF_HTTP_RETRY_MAX", "3".to_owned()),
        ("TF_HTTP_RETRY_WAIT_MIN", "0".to_owned()),
        ("TF_HTTP_RETRY_WAIT_MAX", "0".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let BackendConfig::Http(c) =
        config::resolve(&StateSection::default(), &env, &[], Path::new("."), None).unwrap()
    else {
        panic!()
    };
    let err = within(HttpBackend::new(*c).unwrap().get())
        .await
        .unwrap_err();
    assert!(
        err.to_string().ends_with("failed after 4 attempt(s)"),
        "{err}"
    );
}
