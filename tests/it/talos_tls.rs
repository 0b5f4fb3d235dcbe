//! Negative TLS and role checks between the Talos client and the simulator: a client
//! certificate from another CA, a reader calling ApplyConfiguration, a client
//! certificate with the wrong ExtKeyUsage, a server certificate that does not cover
//! the node's IP, and a secure client facing a node still in maintenance mode.

use crate::support::talos::{FAST, WAIT, ip, sim_options};
use crate::support::talos_pki;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use talos_pki::ClusterPki;
use talosprov_base::sensitive::Sensitive;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::ApplyOptions;
use talosprov_talos::wait::{wait_maintenance, wait_secure};

/// Starts one control-plane node and brings it to secure mode.
async fn secure_node(addr: IpAddr, pki: &ClusterPki) -> Simulator {
    let options = sim_options(Duration::ZERO);
    let sim = Simulator::start(&[addr], options).await.unwrap();
    let client = wait_maintenance(addr, None, WAIT, FAST).await.unwrap();
    let config = pki.machine_config("controlplane", "cp-1", addr);
    client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    wait_secure(addr, Some("cp-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    sim
}

/// The error from a first RPC over a fresh secure connection (the node may only
/// reject the client certificate after the client's side of the handshake is done).
async fn first_call_error(addr: IpAddr, credentials: &ClientCredentials) -> TalosError {
    match TalosClient::connect_secure(addr, credentials).await {
        Err(e) => e,
        Ok(client) => client
            .version()
            .await
            .expect_err("the node accepted the call"),
    }
}

#[tokio::test]
async fn client_certificate_from_another_ca_is_rejected_with_a_clear_message() {
    let addr = ip("127.77.3.1");
    let pki = ClusterPki::new("tls-other-ca");
    let sim = secure_node(addr, &pki).await;
    let stranger = talos_pki::client_credentials(&talos_pki::os_ca(), &["os:admin"]);
    // Trust the right OS CA for the server, but present a certificate from another CA.
    let credentials = ClientCredentials::from_pem(
        pki.os.crt_pem.clone(),
        stranger.crt_pem.clone(),
        stranger.key_pem.clone(),
    );
    let err = first_call_error(addr, &credentials).await;
    assert!(
        matches!(err, TalosError::ClientCertificateRejected { .. }),
        "{err:?}"
    );
    insta::assert_snapshot!(err.to_string(), @"node 127.77.3.1 refuses our client certificate (decrypt error): it runs another cluster's config, or was reset and configured again; our talosconfig's CA is not among the CAs it accepts (machine.ca or machine.acceptedCAs)");
    // Not retried by the waits: it cannot get better.
    assert!(!err.is_transient());
    sim.shutdown().await;
}

#[tokio::test]
async fn reader_is_refused_apply_with_permission_denied_naming_the_role() {
    let addr = ip("127.77.3.2");
    let pki = ClusterPki::new("tls-reader");
    let sim = secure_node(addr, &pki).await;
    let reader = talos_pki::client_credentials(&pki.os, &["os:reader"]);
    let client = wait_secure(addr, Some("cp-1"), &reader, WAIT, FAST)
        .await
        .unwrap();
    assert_eq!(client.version().await.unwrap().tag, "v1.13.8");
    let config = pki.machine_config("controlplane", "cp-1", addr);
    let err = client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::PermissionDenied));
    insta::assert_snapshot!(err.to_string(), @r#"node 127.77.3.2 (cp-1) refused ApplyConfiguration: the client certificate lacks role os:admin (PermissionDenied "not authorized")"#);
    let err = client.reboot(Default::default()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("lacks role os:admin or os:operator"),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn client_certificate_without_exactly_client_auth_usage_is_rejected() {
    let addr = ip("127.77.3.3");
    let pki = ClusterPki::new("tls-eku");
    let sim = secure_node(addr, &pki).await;
    // A server certificate from the right CA used as a client certificate.
    let (crt, key) = talos_pki::server_cert(&pki.os, &[addr]);
    let credentials = ClientCredentials::from_pem(pki.os.crt_pem.clone(), crt, Sensitive::new(key));
    let err = first_call_error(addr, &credentials).await;
    assert!(
        matches!(err, TalosError::ClientCertificateRejected { .. }),
        "{err:?}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn server_certificate_that_does_not_cover_the_node_ip_is_refused() {
    let addr = ip("127.77.3.4");
    let pki = ClusterPki::new("tls-san");
    // A TLS server with a certificate from the right OS CA, issued for another address.
    let (crt, key) = talos_pki::server_cert(&pki.os, &[ip("127.77.3.99")]);
    let chain = rustls_pemfile::certs(&mut crt.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls_pemfile::private_key(&mut key.as_bytes())
        .unwrap()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(addr, 50000))
        .await
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let server = tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = acceptor.accept(tcp).await;
        }
    });
    let err = TalosClient::connect_secure(addr, &pki.admin)
        .await
        .unwrap_err();
    match &err {
        TalosError::ServerCertificate {
            unknown_issuer,
            reason,
            ..
        } => {
            assert!(!unknown_issuer);
            assert!(reason.contains("not valid for name"), "{reason}");
        }
        other => panic!("expected a server certificate error, got {other:?}"),
    }
    // The wait gives up at once: a wrong certificate is not a node still booting.
    let started = tokio::time::Instant::now();
    let err = wait_secure(addr, None, &pki.admin, WAIT, FAST)
        .await
        .unwrap_err();
    assert!(
        matches!(err, TalosError::ServerCertificate { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < WAIT);
    server.abort();
}

#[tokio::test]
async fn secure_client_against_a_maintenance_node_waits_then_names_the_deadline() {
    let addr = ip("127.77.3.5");
    let pki = ClusterPki::new("tls-maintenance");
    let sim = Simulator::start(&[addr], SimOptions::default())
        .await
        .unwrap();
    let err = wait_secure(
        addr,
        Some("cp-1"),
        &pki.admin,
        Duration::from_millis(800),
        FAST,
    )
    .await
    .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"node 127.77.3.5 (cp-1) was not up in secure mode within 0.8 s: cp-1 still answers in maintenance mode (for the last 0 s): it has not gone down to install its config yet");
    let TalosError::Deadline { last, .. } = &err else {
        panic!("{err:?}")
    };
    // Its certificate is the maintenance one; a probe without a client
    // certificate finds it in maintenance mode, within the grace a node has
    // to go down for its install after the config.
    assert!(
        matches!(
            **last,
            TalosError::InMaintenance {
                after_apply: true,
                settling: true,
                ..
            }
        ),
        "{last:?}"
    );
    insta::assert_snapshot!(last.explain().text, @"cp-1 still answers in maintenance mode: it has not gone down to install its config yet");
    let direct = TalosClient::connect_secure(addr, &pki.admin)
        .await
        .unwrap_err();
    insta::assert_snapshot!(direct.to_string(), @"node 127.77.3.5 presented a server certificate not issued by the talosconfig's CA (is the node still in maintenance mode, or in another cluster?): invalid peer certificate: BadSignature");
    sim.shutdown().await;
}

#[tokio::test]
async fn worker_gets_its_certificate_once_a_control_plane_holds_the_os_ca_key() {
    let (cp, worker) = (ip("127.77.3.6"), ip("127.77.3.7"));
    let options = sim_options(Duration::ZERO);
    let sim = Simulator::start(&[cp, worker], options).await.unwrap();
    let pki = ClusterPki::new("tls-trustd");
    let client = wait_maintenance(worker, None, WAIT, FAST).await.unwrap();
    let config = pki.machine_config("worker", "w-1", cp);
    client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    // The worker config has no OS CA key: without a control plane (trustd) to sign its
    // certificate the worker's API stays closed.
    let err = wait_secure(
        worker,
        Some("w-1"),
        &pki.admin,
        Duration::from_millis(500),
        FAST,
    )
    .await
    .unwrap_err();
    let TalosError::Deadline { last, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(**last, TalosError::Unreachable { .. }), "{last:?}");

    let client = wait_maintenance(cp, None, WAIT, FAST).await.unwrap();
    let config = pki.machine_config("controlplane", "cp-1", cp);
    client
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    let worker_client = wait_secure(worker, Some("w-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    assert_eq!(worker_client.version().await.unwrap().tag, "v1.13.8");
    sim.shutdown().await;
}
