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
        /// The node asked: its address, and its hostname when the caller named it.
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
        /// The node asked: its address, and its hostname when the caller named it.
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
        "node {node} refuses our client certificate ({}): it runs another cluster's config, or was reset and configured again; our talosconfig's CA is not among the CAs it accepts (machine.ca or machine.acceptedCAs)",
        alert_words(.alert)
    )]
    ClientCertificateRejected {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// The TLS alert the node sent.
        alert: String,
    },
    /// A secure-only RPC was refused because the node has no config yet. Talos 1.13
    /// answers PermissionDenied, older releases Unimplemented.
    #[error("node {node} is still in maintenance mode: {rpc} refused with {code:?} \"{message}\"")]
    MaintenanceMode {
        /// The node asked: its address, and its hostname when the caller named it.
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
        /// The node asked: its address, and its hostname when the caller named it.
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
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// The node's own message, unchanged.
        message: String,
    },
    /// The node is not ready for the RPC yet (FailedPrecondition). Waits retry this.
    #[error("node {node} is not ready for {rpc}: {message}")]
    NotReady {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// The RPC name.
        rpc: &'static str,
        /// The node's message, e.g. "bootstrap is not available yet".
        message: String,
    },
    /// Any other gRPC status.
    #[error("node {node} failed {rpc}: {code:?} \"{message}\"")]
    Rpc {
        /// The node asked: its address, and its hostname when the caller named it.
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
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// What was wrong with the bytes.
        reason: String,
    },
    /// The installer run by LifecycleService/Upgrade exited non-zero.
    #[error(
        "upgrade on node {node} failed: installer exited with code {exit_code}: {last_message}"
    )]
    UpgradeFailed {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// The installer's exit code.
        exit_code: i32,
        /// The last progress line the node streamed.
        last_message: String,
    },
    /// The node answers in maintenance mode (it has no config) where a
    /// configured node was expected.
    #[error(
        "node {node} {}",
        if *.after_apply {
            "answers in maintenance mode again after it was given its machine config: it was reset, or did not keep the config (a failed install); run apply again to give it the config"
        } else {
            "is in maintenance mode: it was reset, or lost its config, though the state records it configured; run `talosprov plan`: it plans the config's re-apply"
        }
    )]
    InMaintenance {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// A config was applied in maintenance mode during this wait.
        after_apply: bool,
        /// Still within the time a node may take to leave maintenance mode
        /// after its config: retried.
        settling: bool,
    },
    /// The node runs a config whose CA is not our talosconfig's: its
    /// certificate is from another CA and it asks for a client certificate.
    #[error(
        "node {node} runs another cluster's config: its certificate is not from our cluster's CA and it requires a client certificate; it was reset and configured by someone else, or its address belongs to another machine"
    )]
    OtherCluster {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
    },
    /// A wait ran out of time. The last error seen is the source; `cause`
    /// names what kept failing, in operator words, when it was the same at
    /// the end for several attempts.
    #[error("node {node} was not {what} within {}{}", seconds(*.waited), .cause.as_deref().map(|c| format!(": {c}")).unwrap_or_default())]
    Deadline {
        /// The node asked: its address, and its hostname when the caller named it.
        node: NodeName,
        /// What was waited for, e.g. "reachable in maintenance mode".
        what: &'static str,
        /// The deadline, from the start of the wait.
        waited: Duration,
        /// What kept failing, e.g. `cp-1 refuses connections on port 50000
        /// (for the last 880 s): it is down, booting or installing`.
        cause: Option<String>,
        /// The last error seen before the deadline.
        #[source]
        last: Box<TalosError>,
    },
}

/// A TLS alert name in words: `UnknownCA` → `unknown CA`.
fn alert_words(alert: &str) -> String {
    match alert {
        "UnknownCA" => "unknown CA".to_owned(),
        "BadCertificate" => "bad certificate".to_owned(),
        "CertificateRequired" => "certificate required".to_owned(),
        "CertificateUnknown" => "certificate unknown".to_owned(),
        "UnsupportedCertificate" => "unsupported certificate".to_owned(),
        "AccessDenied" => "access denied".to_owned(),
        "DecryptError" => "decrypt error".to_owned(),
        other => other.to_owned(),
    }
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
            | TalosError::InMaintenance { node, .. }
            | TalosError::OtherCluster { node }
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
            | TalosError::InMaintenance { node, .. }
            | TalosError::OtherCluster { node }
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
    /// FailedPrecondition, a server certificate from an unknown issuer (the node
    /// still runs its maintenance-mode certificate until it reboots), and a node
    /// still settling into its config.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            TalosError::Unreachable { .. }
                | TalosError::NotReady { .. }
                | TalosError::ServerCertificate {
                    unknown_issuer: true,
                    ..
                }
                | TalosError::InMaintenance { settling: true, .. }
        )
    }

    /// What the error means for a wait, in operator words, starting with the
    /// node's name (its hostname when known): e.g. `cp-1 refuses connections
    /// on port 50000: it is down, booting or installing`. Two errors with the
    /// same [`Explained::key`] are the same cause.
    pub fn explain(&self) -> Explained {
        let name = self
            .node()
            .map(|n| n.hostname.clone().unwrap_or_else(|| n.ip.to_string()))
            .unwrap_or_else(|| "the node".to_owned());
        let (key, text) = match self {
            TalosError::Unreachable { reason, .. } => {
                let lower = reason.to_ascii_lowercase();
                if lower.contains("refused") {
                    (
                        "refused".to_owned(),
                        format!(
                            "{name} refuses connections on the Talos API port 50000: it is down, \
                             booting or installing"
                        ),
                    )
                } else if lower.contains("timed out")
                    || lower.contains("deadline")
                    || lower.contains("elapsed")
                    || lower.contains("still running")
                {
                    (
                        "silent".to_owned(),
                        format!(
                            "{name} does not answer on the Talos API port 50000: it is down, or \
                             its address is wrong"
                        ),
                    )
                } else if lower.contains("no route") || lower.contains("unreachable") {
                    (
                        "no-route".to_owned(),
                        format!("there is no route to {name}: it is down, or its network is"),
                    )
                } else {
                    (
                        format!("unreachable: {reason}"),
                        format!("{name} is unreachable: {reason}"),
                    )
                }
            }
            TalosError::ServerCertificate {
                unknown_issuer: true,
                ..
            } => (
                "foreign-certificate".to_owned(),
                format!(
                    "{name} presents a certificate our cluster's CA did not issue: it is still in \
                     maintenance mode (or rebooting into its config), or runs another cluster's config"
                ),
            ),
            TalosError::ClientCertificateRejected { alert, .. } => (
                format!("client-certificate: {alert}"),
                format!(
                    "{name} refuses our client certificate ({}): it runs another cluster's config, \
                     or was reset",
                    alert_words(alert)
                ),
            ),
            TalosError::InMaintenance {
                after_apply,
                settling,
                ..
            } => (
                "maintenance".to_owned(),
                if *settling {
                    format!(
                        "{name} still answers in maintenance mode: it has not gone down to install \
                         its config yet"
                    )
                } else if *after_apply {
                    format!(
                        "{name} answers in maintenance mode again: it was reset, or did not keep its \
                         config"
                    )
                } else {
                    format!("{name} is in maintenance mode: it was reset, or lost its config")
                },
            ),
            TalosError::OtherCluster { .. } => (
                "other-cluster".to_owned(),
                format!("{name} runs another cluster's config"),
            ),
            TalosError::NotReady { rpc, message, .. } => (
                format!("not-ready: {rpc}: {message}"),
                format!("{name} is not ready for {rpc}: {message}"),
            ),
            TalosError::Deadline { last, .. } => return last.explain(),
            other => (other.to_string(), other.to_string()),
        };
        Explained { key, text }
    }
}

/// A wait's failure in operator words (see [`TalosError::explain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// What tells two failures apart: the same key is the same cause.
    pub key: String,
    /// The sentence, starting with the node's name.
    pub text: String,
}

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}
