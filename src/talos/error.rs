//! Errors of the Talos client. Each carries the node address (and hostname when known)
//! and, for refused RPCs, the gRPC code and message exactly as Talos sent them.

use std::net::IpAddr;
use std::time::Duration;

/// A node as the operator knows it: its API address, and its hostname once known.
///
/// Displays as `10.0.0.5` or `10.0.0.5 (talos-cp-01)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeName {
    /// Address of the node's Talos API (port 50000).
    pub ip: IpAddr,
    /// Hostname, when the caller knows it (from the topology or the machine config).
    pub hostname: Option<String>,
}

impl std::fmt::Display for NodeName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.hostname {
            Some(h) => write!(f, "{} ({h})", self.ip),
            None => write!(f, "{}", self.ip),
        }
    }
}

/// Errors from talking to one Talos node.
///
/// `code` fields hold the gRPC status code Talos returned and `message` its text,
/// unchanged, so the operator sees what the node said.
#[derive(Debug, thiserror::Error)]
pub enum TalosError {
    /// The talosconfig-style credentials could not be used (bad PEM, wrong key type).
    #[error("unusable Talos client credentials: {reason}")]
    Credentials {
        /// What is wrong, without any key material.
        reason: String,
    },
    /// Nothing answers on the node's Talos API port (refused, reset, timed out),
    /// or it answered Unavailable. Waits retry this.
    #[error("Talos API on node {node} is unreachable: {reason}")]
    Unreachable {
        /// The node.
        node: NodeName,
        /// The transport's own description.
        reason: String,
    },
    /// The node's server certificate was refused by our TLS verification
    /// (unknown issuer, or not valid for the node's IP).
    #[error(
        "node {node} presented a server certificate {}: {reason}",
        if *.unknown_issuer { "not issued by the talosconfig's CA (is the node still in maintenance mode, or in another cluster?)" } else { "that does not verify" }
    )]
    ServerCertificate {
        /// The node.
        node: NodeName,
        /// The verifier's reason.
        reason: String,
        /// The certificate was not signed by the OS CA (unknown issuer, or a same-named
        /// CA with another key); typical of a node still in maintenance mode
        /// (self-signed certificate) or of another cluster.
        unknown_issuer: bool,
    },
    /// The node refused our client certificate during the TLS handshake.
    #[error(
        "node {node} refused the client certificate ({alert}); it is not signed by a CA the node accepts (machine.ca or machine.acceptedCAs)"
    )]
    ClientCertificateRejected {
        /// The node.
        node: NodeName,
        /// The TLS alert the node sent.
        alert: String,
    },
    /// A secure-only RPC was refused because the node has no config yet. Talos 1.13
    /// answers PermissionDenied, older releases Unimplemented.
    #[error("node {node} is still in maintenance mode: {rpc} refused with {code:?} \"{message}\"")]
    MaintenanceMode {
        /// The node.
        node: NodeName,
        /// The RPC name, e.g. `Bootstrap`.
        rpc: &'static str,
        /// The gRPC code Talos returned.
        code: tonic::Code,
        /// The message Talos returned.
        message: String,
    },
    /// The client certificate lacks the role the RPC requires.
    #[error(
        "node {node} refused {rpc}: the client certificate lacks role {required} ({code:?} \"{message}\")"
    )]
    PermissionDenied {
        /// The node.
        node: NodeName,
        /// The RPC name.
        rpc: &'static str,
        /// The role(s) that would allow the call, e.g. `os:admin`.
        required: &'static str,
        /// Always PermissionDenied; kept for uniformity.
        code: tonic::Code,
        /// The message Talos returned (usually "not authorized").
        message: String,
    },
    /// The node rejected the machine config (InvalidArgument on ApplyConfiguration).
    #[error("node {node} rejected the machine config: {message}")]
    InvalidConfig {
        /// The node.
        node: NodeName,
        /// The node's own message, unchanged.
        message: String,
    },
    /// The node is not ready for the RPC yet (FailedPrecondition). Waits retry this.
    #[error("node {node} is not ready for {rpc}: {message}")]
    NotReady {
        /// The node.
        node: NodeName,
        /// The RPC name.
        rpc: &'static str,
        /// The node's message, e.g. "bootstrap is not available yet".
        message: String,
    },
    /// Any other gRPC status.
    #[error("node {node} failed {rpc}: {code:?} \"{message}\"")]
    Rpc {
        /// The node.
        node: NodeName,
        /// The RPC name.
        rpc: &'static str,
        /// The gRPC code Talos returned.
        code: tonic::Code,
        /// The message Talos returned.
        message: String,
    },
    /// The kubeconfig stream was not the gzip-compressed tar Talos sends.
    #[error("node {node} sent a kubeconfig that cannot be read: {reason}")]
    Kubeconfig {
        /// The node.
        node: NodeName,
        /// What was wrong with the bytes.
        reason: String,
    },
    /// The installer run by LifecycleService/Upgrade exited non-zero.
    #[error(
        "upgrade on node {node} failed: installer exited with code {exit_code}: {last_message}"
    )]
    UpgradeFailed {
        /// The node.
        node: NodeName,
        /// The installer's exit code.
        exit_code: i32,
        /// The last progress line the node streamed.
        last_message: String,
    },
    /// A wait ran out of time. The last error seen is the source.
    #[error("node {node} was not {what} within {}", seconds(*.waited))]
    Deadline {
        /// The node.
        node: NodeName,
        /// What was waited for, e.g. "reachable in maintenance mode".
        what: &'static str,
        /// The deadline, from the start of the wait.
        waited: Duration,
        /// The last error seen before the deadline.
        #[source]
        last: Box<TalosError>,
    },
}

/// `120 s`, or `0.8 s` below a whole second.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

impl TalosError {
    /// Names the node's hostname in the error when it does not name one yet.
    pub fn with_hostname(mut self, hostname: Option<&str>) -> Self {
        if let Some(h) = hostname
            && let Some(node) = self.node_mut()
            && node.hostname.is_none()
        {
            node.hostname = Some(h.to_string());
        }
        self
    }

    fn node_mut(&mut self) -> Option<&mut NodeName> {
        match self {
            TalosError::Credentials { .. } => None,
            TalosError::Unreachable { node, .. }
            | TalosError::ServerCertificate { node, .. }
            | TalosError::ClientCertificateRejected { node, .. }
            | TalosError::MaintenanceMode { node, .. }
            | TalosError::PermissionDenied { node, .. }
            | TalosError::InvalidConfig { node, .. }
            | TalosError::NotReady { node, .. }
            | TalosError::Rpc { node, .. }
            | TalosError::Kubeconfig { node, .. }
            | TalosError::UpgradeFailed { node, .. }
            | TalosError::Deadline { node, .. } => Some(node),
        }
    }

    /// The node the error concerns, when there is one.
    pub fn node(&self) -> Option<&NodeName> {
        match self {
            TalosError::Credentials { .. } => None,
            TalosError::Unreachable { node, .. }
            | TalosError::ServerCertificate { node, .. }
            | TalosError::ClientCertificateRejected { node, .. }
            | TalosError::MaintenanceMode { node, .. }
            | TalosError::PermissionDenied { node, .. }
            | TalosError::InvalidConfig { node, .. }
            | TalosError::NotReady { node, .. }
            | TalosError::Rpc { node, .. }
            | TalosError::Kubeconfig { node, .. }
            | TalosError::UpgradeFailed { node, .. }
            | TalosError::Deadline { node, .. } => Some(node),
        }
    }

    /// The gRPC code Talos answered with, when the error is a refused RPC.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            TalosError::MaintenanceMode { code, .. }
            | TalosError::PermissionDenied { code, .. }
            | TalosError::Rpc { code, .. } => Some(*code),
            TalosError::InvalidConfig { .. } => Some(tonic::Code::InvalidArgument),
            TalosError::NotReady { .. } => Some(tonic::Code::FailedPrecondition),
            TalosError::Unreachable { .. } => Some(tonic::Code::Unavailable),
            _ => None,
        }
    }

    /// True for failures a wait should retry: nothing listening yet, Unavailable,
    /// FailedPrecondition, and a server certificate from an unknown issuer (the node
    /// still runs its maintenance-mode certificate until it reboots).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            TalosError::Unreachable { .. }
                | TalosError::NotReady { .. }
                | TalosError::ServerCertificate {
                    unknown_issuer: true,
                    ..
                }
        )
    }
}
