//! The Proxmox API's certificate against fakepve: a self-signed server
//! certificate (its own issuer, `CA:FALSE` or `CA:TRUE`) given as
//! `proxmox.ca_file`; a CA file that did not issue it; `proxmox.fingerprint`
//! with `proxmox.ca_file`, both enforced; and the errors users see, which say
//! what to set.

use crate::support::fakepve::{FakeOptions, FakePve};
use talosprov_proxmox::client::Client;
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::storage;
use talosprov_proxmox::tls::{Fingerprint, TlsMode};

/// A PEM file with a CA that issued nothing fakepve serves.
fn stranger_ca(dir: &std::path::Path) -> std::path::PathBuf {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "some other CA");
    let cert = params.self_signed(&key).expect("CA");
    let path = dir.join("other-ca.pem");
    std::fs::write(&path, cert.pem()).expect("write CA");
    path
}

/// The error as users see it, with what changes from run to run replaced.
fn shown(e: &ProxmoxError, fake: &FakePve, ca_file: Option<&std::path::Path>) -> String {
    let mut text = e.to_string().replace(&fake.url, "https://PVE:8006");
    if let Some(path) = ca_file {
        text = text.replace(&path.display().to_string(), "/CA_FILE");
    }
    text.replace(&fake.fingerprint.to_string(), "[FINGERPRINT OF THE SERVER]")
}

async fn version(tls: TlsMode, fake: &FakePve) -> Result<String, ProxmoxError> {
    let mut settings = fake.settings();
    settings.tls = tls;
    storage::check_version(&Client::new(settings).expect("client"))
        .await
        .map(|v| v.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_server_certificate_given_as_ca_file_is_trusted_as_itself() {
    let fake = FakePve::start(FakeOptions {
        self_signed: true,
        ..FakeOptions::default()
    })
    .await;
    let text = std::fs::read_to_string(&fake.ca_file).expect("ca file");
    assert_eq!(text.matches("BEGIN CERTIFICATE").count(), 1);
    assert_eq!(
        version(TlsMode::CaFile(fake.ca_file.clone()), &fake)
            .await
            .expect("the self-signed certificate in ca_file is trusted"),
        "9.0.10"
    );
    // With its fingerprint pinned too, both checks pass.
    let both = TlsMode::CaFileAndFingerprint {
        ca_file: fake.ca_file.clone(),
        fingerprint: fake.fingerprint,
    };
    assert_eq!(version(both, &fake).await.expect("both match"), "9.0.10");
    // Without it, the system's CAs do not know it; the error says what to set.
    let e = version(TlsMode::System, &fake)
        .await
        .expect_err("not trusted by the system");
    assert!(matches!(e, ProxmoxError::Tls { .. }), "{e:?}");
    insta::assert_snapshot!(shown(&e, &fake, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_marked_ca_given_as_ca_file_is_trusted_as_itself() {
    // `openssl req -x509` marks its certificate CA:TRUE; webpki refuses such a
    // certificate as the server's own (CaUsedAsEndEntity).
    let fake = FakePve::start(FakeOptions {
        self_signed: true,
        self_signed_is_ca: true,
        ..FakeOptions::default()
    })
    .await;
    assert_eq!(
        version(TlsMode::CaFile(fake.ca_file.clone()), &fake)
            .await
            .expect("the self-signed certificate in ca_file is trusted"),
        "9.0.10"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_that_did_not_issue_the_certificate_is_refused_saying_what_to_set() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let other = stranger_ca(dir.path());
    let e = version(TlsMode::CaFile(other.clone()), &fake)
        .await
        .expect_err("wrong CA");
    let ProxmoxError::Tls { refusal, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(refusal.fingerprint, fake.fingerprint);
    let text = shown(&e, &fake, Some(&other));
    assert!(!text.contains("refresh"), "{text}");
    insta::assert_snapshot!(text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprint_and_ca_file_are_both_enforced() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let wrong_pin = Fingerprint::parse(&["AB"; 32].join(":")).expect("fingerprint");

    // Both right: accepted.
    let both = TlsMode::CaFileAndFingerprint {
        ca_file: fake.ca_file.clone(),
        fingerprint: fake.fingerprint,
    };
    assert_eq!(version(both, &fake).await.expect("both match"), "9.0.10");

    // The right CA, a wrong pin: refused (the pin is not ignored).
    let e = version(
        TlsMode::CaFileAndFingerprint {
            ca_file: fake.ca_file.clone(),
            fingerprint: wrong_pin,
        },
        &fake,
    )
    .await
    .expect_err("the pin does not match");
    insta::assert_snapshot!("right_ca_wrong_pin", shown(&e, &fake, Some(&fake.ca_file)));

    // The right pin, a CA that did not issue it: refused (the CA is not ignored).
    let other = stranger_ca(dir.path());
    let e = version(
        TlsMode::CaFileAndFingerprint {
            ca_file: other.clone(),
            fingerprint: fake.fingerprint,
        },
        &fake,
    )
    .await
    .expect_err("the CA did not issue it");
    insta::assert_snapshot!("wrong_ca_right_pin", shown(&e, &fake, Some(&other)));
}
