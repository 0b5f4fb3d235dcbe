//! The transport against fakepve: API token and ticket login, TLS with a CA file,
//! a pinned fingerprint, and refusals (wrong fingerprint, unknown CA, bad token).

use crate::support::fakepve::{FakeOptions, FakePve, ROOT_PASSWORD};
use talosprov_base::sensitive::Sensitive;
use talosprov_proxmox::client::Client;
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::settings::Auth;
use talosprov_proxmox::tls::{Fingerprint, TlsMode};
use talosprov_proxmox::{pool, storage};

fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!("\ncaused by: {s}"));
        source = s.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_with_ca_file_reads_the_version() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let v = storage::check_version(&fake.client())
        .await
        .expect("version");
    assert_eq!(v.text, "9.0.10");
    assert_eq!(v.major_minor, (9, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_fingerprint_is_accepted_and_a_wrong_one_refused() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let mut settings = fake.settings();
    settings.tls = TlsMode::Fingerprint(fake.fingerprint);
    let client = Client::new(settings.clone()).expect("client");
    storage::check_version(&client)
        .await
        .expect("pinned certificate accepted");

    let wrong = Fingerprint::parse(&["AB"; 32].join(":")).expect("fingerprint");
    settings.tls = TlsMode::Fingerprint(wrong);
    let e = storage::check_version(&Client::new(settings).expect("client"))
        .await
        .expect_err("wrong fingerprint");
    assert!(matches!(e, ProxmoxError::Tls { .. }), "{e:?}");
    let text = chain(&e);
    assert!(
        text.contains("not the pinned proxmox.fingerprint AB:AB"),
        "{text}"
    );
    assert!(text.contains(&fake.fingerprint.to_string()), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_certificate_is_refused_without_a_ca_or_pin() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let mut settings = fake.settings();
    settings.tls = TlsMode::System;
    let e = storage::check_version(&Client::new(settings).expect("client"))
        .await
        .expect_err("self-signed CA not trusted");
    assert!(matches!(e, ProxmoxError::Tls { .. }), "{e:?}");
    assert!(
        chain(&e).to_lowercase().contains("certificate"),
        "{}",
        chain(&e)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_token_rejected_without_retries() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let client =
        fake.client_with_token("root@pam!talosprov", "00000000-0000-0000-0000-000000000000");
    let e = storage::check_version(&client).await.expect_err("401");
    assert!(matches!(e, ProxmoxError::TokenRejected { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "read the Proxmox VE version: token rejected: Proxmox VE refused the API token (HTTP 401: authentication failure)"
    );
    assert!(
        !e.to_string().contains("00000000-0000"),
        "the secret is never shown"
    );
    assert_eq!(client.requests_sent(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_login_sends_the_csrf_token_on_writes() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let mut settings = fake.settings();
    settings.auth = Auth::Password {
        username: "root@pam".into(),
        password: Sensitive::new(ROOT_PASSWORD),
    };
    let client = Client::new(settings.clone()).expect("client");
    storage::check_version(&client)
        .await
        .expect("GET with the ticket");
    assert_eq!(
        pool::ensure_pool(&client, "TALOS", None)
            .await
            .expect("POST with CSRF"),
        pool::PoolOutcome::Created
    );
    assert_eq!(
        fake.count("POST", "/access/ticket").await,
        1,
        "one login for the session"
    );

    settings.auth = Auth::Password {
        username: "root".into(),
        password: Sensitive::new("wrong-password"),
    };
    let e = storage::check_version(&Client::new(settings).expect("client"))
        .await
        .expect_err("bad password");
    assert_eq!(
        e.to_string(),
        "login as root@pam failed: authentication failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_before_8_4_are_refused_for_import_content() {
    let fake = FakePve::start(FakeOptions::default()).await;
    fake.cmd(serde_json::json!({"cmd": "set_version", "version": "8.3.2"}))
        .await;
    let e = storage::check_version(&fake.client())
        .await
        .expect_err("too old");
    assert_eq!(
        e.to_string(),
        "Proxmox VE 8.3.2 is too old: downloading qcow2 images as 'import' content needs 8.4 or later"
    );
}
