//! A connection to one node's Talos API (port 50000), in maintenance or secure mode,
//! and the mapping of transport failures and gRPC statuses to [`TalosError`].

use std::error::Error as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use tonic::transport::{Channel, Endpoint};

use super::credentials::ClientCredentials;
use super::error::{NodeName, TalosError};
use super::roles;
use super::tls;

/// The Talos API port (apid).
pub const TALOS_API_PORT: u16 = 50000;

/// Largest message Talos sends or accepts, 32 MiB (`constants.GRPCMaxMessageSize`).
pub(crate) const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// How the client authenticates to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionMode {
    /// No config on the node: TLS without verification, no client certificate.
    Maintenance,
    /// Configured node: mutual TLS with the talosconfig credentials.
    Secure,
}

/// A Talos API client for one node. Cheap to clone; the channel reconnects by itself
/// after the node reboots.
#[derive(Clone)]
pub struct TalosClient {
    pub(crate) node: NodeName,
    pub(crate) mode: ConnectionMode,
    pub(crate) channel: Channel,
}

impl std::fmt::Debug for TalosClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TalosClient")
            .field("node", &self.node.to_string())
            .field("mode", &self.mode)
            .finish()
    }
}

impl TalosClient {
    /// Connects to `ip:50000` in maintenance mode (talosctl `--insecure`).
    ///
    /// Errors: [`TalosError::Unreachable`] when nothing accepts the connection.
    pub async fn connect_maintenance(ip: IpAddr) -> Result<TalosClient, TalosError> {
        Self::connect(
            NodeName { ip, hostname: None },
            ConnectionMode::Maintenance,
            tls::maintenance_config(),
        )
        .await
    }

    /// Connects to `ip:50000` with mutual TLS. The server certificate must be issued by
    /// the OS CA in `credentials` and list `ip` among its SANs.
    ///
    /// Errors: [`TalosError::Credentials`], [`TalosError::Unreachable`],
    /// [`TalosError::ServerCertificate`].
    pub async fn connect_secure(
        ip: IpAddr,
        credentials: &ClientCredentials,
    ) -> Result<TalosClient, TalosError> {
        Self::connect(
            NodeName { ip, hostname: None },
            ConnectionMode::Secure,
            tls::secure_config(credentials)?,
        )
        .await
    }

    async fn connect(
        node: NodeName,
        mode: ConnectionMode,
        config: Arc<ClientConfig>,
    ) -> Result<TalosClient, TalosError> {
        let addr = SocketAddr::new(node.ip, TALOS_API_PORT);
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| TalosError::Unreachable {
                node: node.clone(),
                reason: e.to_string(),
            })?
            .connect_timeout(Duration::from_secs(10))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20));
        let connector = tower::service_fn(move |_uri: http::Uri| {
            let config = config.clone();
            async move { tls::connect_tls(config, addr).await }
        });
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| transport_error(&node, &e))?;
        Ok(TalosClient {
            node,
            mode,
            channel,
        })
    }

    /// Names the node's hostname in every later error.
    pub fn with_hostname(mut self, hostname: impl Into<String>) -> Self {
        self.node.hostname = Some(hostname.into());
        self
    }

    /// The node this client talks to.
    pub fn node(&self) -> &NodeName {
        &self.node
    }

    /// Maintenance or secure.
    pub fn mode(&self) -> ConnectionMode {
        self.mode
    }

    /// Maps a gRPC status from `rpc` (full path `path`) to a [`TalosError`], keeping the
    /// code and message Talos sent.
    pub(crate) fn status_error(
        &self,
        service: &str,
        rpc: &'static str,
        status: tonic::Status,
    ) -> TalosError {
        classify_status(&self.node, self.mode, service, rpc, status)
    }
}

/// RPCs a node in maintenance mode serves (readers plus ApplyConfiguration).
fn allowed_in_maintenance(rpc: &str) -> bool {
    matches!(
        rpc,
        "ApplyConfiguration" | "Version" | "ServiceList" | "EtcdMemberList"
    )
}

/// The status-to-error rules of the Talos client (see [`TalosError`] variants).
pub(crate) fn classify_status(
    node: &NodeName,
    mode: ConnectionMode,
    service: &str,
    rpc: &'static str,
    status: tonic::Status,
) -> TalosError {
    if let Some(err) = status.source().and_then(|s| cause_error(node, s)) {
        return err;
    }
    let code = status.code();
    let message = status.message().trim_end().to_string();
    let path = format!("/{service}/{rpc}");
    match code {
        tonic::Code::PermissionDenied | tonic::Code::Unimplemented
            if mode == ConnectionMode::Maintenance && !allowed_in_maintenance(rpc) =>
        {
            TalosError::MaintenanceMode {
                node: node.clone(),
                rpc,
                code,
                message,
            }
        }
        tonic::Code::PermissionDenied => TalosError::PermissionDenied {
            node: node.clone(),
            rpc,
            required: roles::required_roles_text(&path),
            code,
            message,
        },
        tonic::Code::InvalidArgument if rpc == "ApplyConfiguration" => TalosError::InvalidConfig {
            node: node.clone(),
            message,
        },
        tonic::Code::FailedPrecondition => TalosError::NotReady {
            node: node.clone(),
            rpc,
            message,
        },
        tonic::Code::Unavailable => TalosError::Unreachable {
            node: node.clone(),
            reason: message,
        },
        _ => TalosError::Rpc {
            node: node.clone(),
            rpc,
            code,
            message,
        },
    }
}

/// Maps a failure to connect (tonic transport error) to a [`TalosError`].
pub(crate) fn transport_error(node: &NodeName, err: &tonic::transport::Error) -> TalosError {
    err.source()
        .and_then(|s| cause_error(node, s))
        .unwrap_or_else(|| TalosError::Unreachable {
            node: node.clone(),
            reason: chain_text(err),
        })
}

/// Looks through an error chain for a TLS failure or an I/O error and names it.
fn cause_error(node: &NodeName, top: &(dyn std::error::Error + 'static)) -> Option<TalosError> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(top);
    let mut io_reason = None;
    while let Some(err) = current {
        // io::Error hides its payload from source(); look inside explicitly.
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|e| e as &(dyn std::error::Error + 'static));
        for candidate in [Some(err), inner].into_iter().flatten() {
            if let Some(tls) = candidate.downcast_ref::<rustls::Error>() {
                return Some(tls_error(node, tls));
            }
        }
        if io_reason.is_none()
            && let Some(io) = err.downcast_ref::<std::io::Error>()
        {
            // h2 rebuilds I/O errors from their kind and text, so a TLS alert that
            // arrives after the handshake is only visible as text.
            if let Some(alert) = client_cert_alert(&io.to_string()) {
                return Some(TalosError::ClientCertificateRejected {
                    node: node.clone(),
                    alert,
                });
            }
            io_reason = Some(io.to_string());
        }
        current = err.source().or(inner.and_then(|i| i.source()));
    }
    Some(TalosError::Unreachable {
        node: node.clone(),
        reason: io_reason.unwrap_or_else(|| chain_text(top)),
    })
}

/// TLS alerts a server sends when it refuses the client certificate (Go's crypto/tls
/// sends bad_certificate; rustls sends unknown_ca, decrypt_error, ...).
const CLIENT_CERT_ALERTS: &[&str] = &[
    "BadCertificate",
    "UnknownCA",
    "CertificateRequired",
    "CertificateUnknown",
    "UnsupportedCertificate",
    "AccessDenied",
    "DecryptError",
];

/// `received fatal alert: UnknownCA` → `UnknownCA`, when it is a client-certificate alert.
fn client_cert_alert(text: &str) -> Option<String> {
    let alert = text.split("received fatal alert: ").nth(1)?;
    let alert = alert.split(|c: char| !c.is_alphanumeric()).next()?;
    CLIENT_CERT_ALERTS
        .contains(&alert)
        .then(|| alert.to_string())
}

fn tls_error(node: &NodeName, err: &rustls::Error) -> TalosError {
    use rustls::CertificateError as C;
    match err {
        rustls::Error::InvalidCertificate(cert) => TalosError::ServerCertificate {
            node: node.clone(),
            reason: err.to_string(),
            // A CA with the same name but another key gives BadSignature.
            unknown_issuer: matches!(cert, C::UnknownIssuer | C::BadSignature),
        },
        rustls::Error::AlertReceived(alert)
            if client_cert_alert(&format!("received fatal alert: {alert:?}")).is_some() =>
        {
            TalosError::ClientCertificateRejected {
                node: node.clone(),
                alert: format!("{alert:?}"),
            }
        }
        other => TalosError::Unreachable {
            node: node.clone(),
            reason: format!("TLS: {other}"),
        },
    }
}

fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut current = err.source();
    while let Some(e) = current {
        let s = e.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        current = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeName {
        NodeName {
            ip: "10.0.0.5".parse().unwrap(),
            hostname: Some("cp-1".into()),
        }
    }

    const MS: &str = "machine.MachineService";

    #[test]
    fn maintenance_refusal_of_bootstrap_means_still_in_maintenance_mode() {
        for code in [tonic::Code::PermissionDenied, tonic::Code::Unimplemented] {
            let err = classify_status(
                &node(),
                ConnectionMode::Maintenance,
                MS,
                "Bootstrap",
                tonic::Status::new(code, "not authorized"),
            );
            assert!(matches!(err, TalosError::MaintenanceMode { .. }), "{err:?}");
            assert!(err.to_string().contains("still in maintenance mode"));
        }
    }

    #[test]
    fn permission_denied_in_secure_mode_names_the_role() {
        let err = classify_status(
            &node(),
            ConnectionMode::Secure,
            MS,
            "ApplyConfiguration",
            tonic::Status::permission_denied("not authorized"),
        );
        insta::assert_snapshot!(err.to_string(), @r#"node 10.0.0.5 (cp-1) refused ApplyConfiguration: the client certificate lacks role os:admin (PermissionDenied "not authorized")"#);
    }

    #[test]
    fn invalid_argument_on_apply_is_a_config_error_with_the_node_message() {
        let err = classify_status(
            &node(),
            ConnectionMode::Maintenance,
            MS,
            "ApplyConfiguration",
            tonic::Status::invalid_argument("1 error occurred:\n\t* machine.type is required"),
        );
        assert!(matches!(err, TalosError::InvalidConfig { .. }));
        assert!(
            err.to_string()
                .contains("(cp-1) rejected the machine config")
        );
        assert!(err.to_string().contains("machine.type is required"));
    }

    #[test]
    fn client_certificate_alerts_are_recognised_in_text() {
        assert_eq!(
            client_cert_alert("received fatal alert: UnknownCA").as_deref(),
            Some("UnknownCA")
        );
        assert_eq!(
            client_cert_alert("received fatal alert: HandshakeFailure"),
            None
        );
        assert_eq!(client_cert_alert("connection reset by peer"), None);
    }

    #[test]
    fn failed_precondition_is_transient() {
        let err = classify_status(
            &node(),
            ConnectionMode::Secure,
            MS,
            "Bootstrap",
            tonic::Status::failed_precondition("bootstrap is not available yet"),
        );
        assert!(err.is_transient());
        assert_eq!(err.code(), Some(tonic::Code::FailedPrecondition));
    }
}
