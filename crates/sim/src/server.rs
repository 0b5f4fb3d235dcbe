//! Serving one simulated node on `<ip>:50000`: binds only while the node is up (so a
//! rebooting node refuses connections), terminates TLS itself (maintenance: no client
//! certificate asked; secure: client certificates from the OS CA required), and hands
//! each connection's roles to the gRPC handlers.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::certs::{self, Identity};
use super::config::NodeConfig;
use super::peer::{Peer, ServeMode};
use super::service::Api;
use super::state::{Node, Phase, Shared};
use super::verify::ApidClientVerifier;
use talosprov_talos::api::cosi::resource::state_server::StateServer;
use talosprov_talos::api::machine::image_service_server::ImageServiceServer;
use talosprov_talos::api::machine::lifecycle_service_server::LifecycleServiceServer;
use talosprov_talos::api::machine::machine_service_server::MachineServiceServer;
use talosprov_talos::client::TALOS_API_PORT;
use talosprov_talos::roles::Role;

/// A TLS connection plus its caller's identity, for tonic's `serve_with_incoming`.
pub(crate) struct SimConn {
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    peer: Peer,
}

impl Connected for SimConn {
    type ConnectInfo = Peer;
    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for SimConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tls).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

/// The node's server loop; returns when the simulator shuts down. `first` is the
/// listener bound at start-up, so bind errors reach the caller of `Simulator::start`.
pub(crate) async fn run_node(shared: Arc<Shared>, node: Arc<Node>, mut first: Option<TcpListener>) {
    let mut generation = node.generation.subscribe();
    let mut changed = shared.changed.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        generation.borrow_and_update();
        changed.borrow_and_update();
        let phase = node.lock().phase;
        match phase {
            Phase::Down { until, .. } => {
                first = None;
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => shared.finish_boot(&node),
                    _ = generation.changed() => {}
                    _ = shutdown.changed() => {}
                }
            }
            Phase::Halted => {
                first = None;
                tokio::select! {
                    _ = generation.changed() => {}
                    _ = shutdown.changed() => {}
                }
            }
            Phase::Maintenance | Phase::Secure => {
                let tls = match server_tls(&shared, &node) {
                    Ok(Some(tls)) => tls,
                    Ok(None) => {
                        // A worker waits for a control plane to sign its certificate.
                        first = None;
                        tokio::select! {
                            _ = changed.changed() => {}
                            _ = generation.changed() => {}
                            _ = shutdown.changed() => {}
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(target: "talos_sim", node = %node.ip, error = %e, "cannot make the server certificate");
                        tokio::select! {
                            _ = generation.changed() => {}
                            _ = shutdown.changed() => {}
                        }
                        continue;
                    }
                };
                let listener = match first.take() {
                    Some(l) => l,
                    None => match bind_retrying(node.ip).await {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(target: "talos_sim", node = %node.ip, error = %e, "cannot listen");
                            return;
                        }
                    },
                };
                let mode = if phase == Phase::Secure {
                    ServeMode::Secure
                } else {
                    ServeMode::Maintenance
                };
                tracing::info!(target: "talos_sim", node = %node.ip, ?mode, "listening on port 50000");
                serve(
                    &shared,
                    &node,
                    listener,
                    tls,
                    mode,
                    &mut generation,
                    &mut shutdown,
                )
                .await;
            }
        }
    }
}

/// Binds `<ip>:50000`, retrying briefly while the previous socket is released.
async fn bind_retrying(ip: IpAddr) -> std::io::Result<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(SocketAddr::new(ip, TALOS_API_PORT)).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The TLS settings for the node's current phase; `Ok(None)` when a worker has no
/// control plane to get its certificate from yet.
fn server_tls(shared: &Shared, node: &Node) -> Result<Option<Arc<ServerConfig>>, String> {
    let provider = talosprov_talos::tls::provider();
    // Copy what is needed and release the node's lock before looking at other nodes
    // (trustd_ca_key locks each node in turn, this one included).
    let (phase, config, hostname) = {
        let state = node.lock();
        (state.phase, state.config.clone(), node.hostname(&state))
    };
    let (identity, client_ca) = match (phase, config) {
        (Phase::Secure, Some(cfg)) => {
            let key = match &cfg.os_ca_key_pem {
                Some(key) => key.clone(),
                None => match shared.trustd_ca_key(&cfg) {
                    Some(key) => key,
                    None => return Ok(None),
                },
            };
            let id =
                certs::apid_identity(&cfg.os_ca_crt_pem, &key, node.ip, &hostname, &cfg.cert_sans)?;
            (id, Some(cfg.os_client_cas()))
        }
        _ => (certs::maintenance_identity(node.ip)?, None),
    };
    let Identity { chain, key } = identity;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match client_ca {
        None => builder.with_no_client_auth().with_single_cert(chain, key),
        Some(ca_pems) => {
            let mut roots = rustls::RootCertStore::empty();
            let joined = ca_pems.concat();
            for ca in rustls_pemfile::certs(&mut joined.as_bytes()) {
                roots
                    .add(ca.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
            let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| e.to_string())?;
            let verifier = Arc::new(ApidClientVerifier { inner });
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
        }
    }
    .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Arc::new(config)))
}

async fn serve(
    shared: &Arc<Shared>,
    node: &Arc<Node>,
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    mode: ServeMode,
    generation: &mut tokio::sync::watch::Receiver<u64>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SimConn, std::io::Error>>(16);
    let ip = node.ip;
    let mut current = CurrentTls {
        shared: shared.clone(),
        node: node.clone(),
        cas: node.lock().config.as_ref().map(NodeConfig::os_client_cas),
        acceptor: TlsAcceptor::from(tls),
    };
    let accept = tokio::spawn(async move {
        loop {
            let Ok((tcp, addr)) = listener.accept().await else {
                continue;
            };
            let acceptor = if mode == ServeMode::Secure {
                current.refreshed()
            } else {
                current.acceptor.clone()
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
                match handshake.await {
                    Ok(Ok(tls)) => match peer_of(&tls, addr, mode) {
                        Ok(peer) => {
                            let _ = tx.send(Ok(SimConn { tls, peer })).await;
                        }
                        Err(reason) => {
                            tracing::info!(target: "talos_sim", node = %ip, peer = %addr, reason, "refused client certificate");
                        }
                    },
                    Ok(Err(e)) => {
                        tracing::info!(target: "talos_sim", node = %ip, peer = %addr, error = %e, "TLS handshake failed");
                    }
                    Err(_) => {}
                }
            });
        }
    });
    let api = Api::new(shared.clone(), node.clone());
    let newer_api = crate::state::minor_version(&node.lock().tag).is_none_or(|v| v >= (1, 13));
    let mut router = tonic::transport::Server::builder()
        .add_service(MachineServiceServer::new(api.clone()).max_decoding_message_size(32 << 20))
        .add_service(StateServer::new(api.clone()));
    if newer_api {
        router = router
            .add_service(ImageServiceServer::new(api.clone()))
            .add_service(LifecycleServiceServer::new(api));
    }
    let abort = accept.abort_handle();
    let signal = async {
        tokio::select! {
            _ = generation.changed() => {}
            _ = shutdown.changed() => {}
        }
        // Closing the listener at once makes new connections fail like a rebooting node.
        abort.abort();
    };
    let served = router.serve_with_incoming_shutdown(ReceiverStream::new(rx), signal);
    if let Err(e) = served.await {
        tracing::warn!(target: "talos_sim", node = %ip, error = %e, "server stopped");
    }
    accept.abort();
    // Wait for the accept task to go so the listener is closed when this returns.
    let _ = accept.await;
}

/// Secure mode's TLS settings, rebuilt for a new connection when the node's config
/// changed its issuing or accepted CAs without a reboot, as apid reloads its
/// certificates and the CAs it accepts (`machine.ca`, `machine.acceptedCAs`) at once.
struct CurrentTls {
    shared: Arc<Shared>,
    node: Arc<Node>,
    /// The client CAs `acceptor` was built for.
    cas: Option<Vec<String>>,
    acceptor: TlsAcceptor,
}

impl CurrentTls {
    /// The acceptor for the node's config now.
    fn refreshed(&mut self) -> TlsAcceptor {
        let cas = self
            .node
            .lock()
            .config
            .as_ref()
            .map(NodeConfig::os_client_cas);
        if cas != self.cas
            && let Ok(Some(tls)) = server_tls(&self.shared, &self.node)
        {
            self.cas = cas;
            self.acceptor = TlsAcceptor::from(tls);
        }
        self.acceptor.clone()
    }
}

/// Roles of the caller. Maintenance mode: everyone is `os:reader` (ReadonlyRoleMode).
/// Secure mode: the Organization values of the client certificate, which the handshake
/// has verified (chain to the OS CA, ExtKeyUsage exactly ClientAuth).
fn peer_of(
    tls: &tokio_rustls::server::TlsStream<TcpStream>,
    addr: SocketAddr,
    mode: ServeMode,
) -> Result<Peer, String> {
    if mode == ServeMode::Maintenance {
        return Ok(Peer {
            mode,
            roles: vec![Role::Reader],
        });
    }
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or("no client certificate")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| e.to_string())?;
    let roles: Vec<Role> = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .filter_map(Role::parse)
        .collect();
    tracing::debug!(target: "talos_sim", peer = %addr, ?roles, "client certificate accepted");
    Ok(Peer { mode, roles })
}
