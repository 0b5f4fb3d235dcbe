//! Errors of the Proxmox client, each naming the operation, node, vmid and UPID it
//! concerns, and the pure mapping from an HTTP answer to one of them (PVE's status
//! codes and message texts: reference/proxmox.md §2 and §8).

use crate::request::Operation;

/// Everything the Proxmox client can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ProxmoxError {
    /// HTTP 401: the token (or ticket) was not accepted.
    #[error("{op}: token rejected: Proxmox VE refused the {credential} (HTTP 401: {message})")]
    TokenRejected {
        /// What was being done.
        op: Operation,
        /// "API token" or "login ticket".
        credential: &'static str,
        /// The answer's message or reason phrase.
        message: String,
    },
    /// Ticket login (`POST /access/ticket`) refused the user name or password.
    #[error("login as {username} failed: {message}")]
    LoginFailed {
        /// The user that tried to log in.
        username: String,
        /// PVE's message.
        message: String,
    },
    /// HTTP 403. `privilege` and `path` come from PVE's "Permission check failed (<path>, <priv>)".
    #[error("{op}: permission denied: {}", forbidden_text(.path.as_deref(), .privilege.as_deref(), .message))]
    Forbidden {
        /// What was being done.
        op: Operation,
        /// The ACL path PVE checked, when it said.
        path: Option<String>,
        /// The privilege PVE found missing, when it said.
        privilege: Option<String>,
        /// PVE's whole message.
        message: String,
    },
    /// A 404, or a 500 whose text says "does not exist" (PVE's not-found).
    #[error("{op}: not found: {message}")]
    NotFound {
        /// What was being done.
        op: Operation,
        /// PVE's message.
        message: String,
    },
    /// `POST /nodes/{node}/qemu` found the vmid taken (500 "... already exists on node 'X'").
    #[error("vmid {vmid} is already taken by {} on node {node}", .name.as_deref().map(|n| format!("VM '{n}'")).unwrap_or_else(|| "a guest".into()))]
    VmidTaken {
        /// The vmid asked for.
        vmid: u32,
        /// The Proxmox node that holds it.
        node: String,
        /// The name of the guest holding it, when known.
        name: Option<String>,
    },
    /// Any other error answer.
    #[error("{op}: HTTP {status}: {message}{}", field_text(.errors))]
    Api {
        /// What was being done.
        op: Operation,
        /// HTTP status (595, 596 and 599 are pveproxy's pseudo-statuses).
        status: u16,
        /// PVE's message (first line in the reason phrase, whole text in the body).
        message: String,
        /// Per-parameter errors of a 400 "Parameter verification failed.".
        errors: Vec<(String, String)>,
    },
    /// A transient failure that did not clear before the retry deadline; the last one is the source.
    #[error(
        "{op}: still failing after {attempts} attempts within the {deadline_secs} s retry deadline"
    )]
    GaveUp {
        /// What was being done.
        op: Operation,
        /// How many times the request was sent.
        attempts: u32,
        /// The retry deadline, in seconds.
        deadline_secs: u64,
        /// The last failure.
        #[source]
        last: Box<ProxmoxError>,
    },
    /// A task ended with an exit status other than `OK` or `WARNINGS: N`.
    #[error("{op}: task {upid} failed: {exitstatus}")]
    TaskFailed {
        /// What was being done.
        op: Operation,
        /// The task's UPID.
        upid: String,
        /// The exit status: the error text, as in the log's `TASK ERROR: <text>`.
        exitstatus: String,
        /// The task log's last lines.
        log: Vec<String>,
    },
    /// A task was still running at the deadline.
    #[error("{op}: task {upid} did not finish within {deadline_secs} s")]
    TaskTimeout {
        /// What was being done.
        op: Operation,
        /// The task's UPID.
        upid: String,
        /// The wait deadline, in seconds.
        deadline_secs: u64,
    },
    /// A UPID that does not follow `UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:`.
    #[error("invalid UPID '{0}'")]
    BadUpid(String),
    /// The connection failed, or broke before the whole answer arrived
    /// (refused, reset, timed out, DNS).
    #[error("{op}: cannot reach {endpoint}")]
    Transport {
        /// What was being done.
        op: Operation,
        /// The API base URL.
        endpoint: String,
        /// The HTTP client's error (DNS, connection, TLS protocol, timeout).
        #[source]
        source: reqwest::Error,
        /// Whether sending the request again is safe, so that the failure is
        /// retried: the connection was never made (nothing reached Proxmox), or
        /// the request is a read (GET), which changes nothing.
        retry_safe: bool,
    },
    /// The server's TLS certificate was refused; the message says what to set.
    #[error("{op}: the Proxmox API at {endpoint} {problem}; {remedy}")]
    Tls {
        /// What was being done.
        op: Operation,
        /// The API base URL.
        endpoint: String,
        /// What is wrong with the certificate, with its SHA-256 fingerprint.
        problem: String,
        /// What to set: `proxmox.ca_file`, `proxmox.fingerprint`, or the endpoint.
        remedy: String,
        /// The refusal itself (fingerprint and kind).
        refusal: crate::tls::CertificateRefusal,
    },
    /// An answer that is not the JSON PVE sends.
    #[error("{op}: unexpected answer: {detail}")]
    Decode {
        /// What was being done.
        op: Operation,
        /// What was wrong with it.
        detail: String,
    },
    /// The client settings are unusable (endpoint, token form, fingerprint).
    #[error("invalid Proxmox settings: {0}")]
    Settings(String),
    /// The CA file named in `proxmox.ca_file` cannot be read or holds no certificate.
    #[error("cannot use the CA file {path}: {detail}")]
    CaFile {
        /// The CA file's path, as `proxmox.ca_file` gives it.
        path: String,
        /// Why it cannot be used (the read error, or no certificate found).
        detail: String,
    },
    /// The Proxmox VE release is older than a feature needs.
    #[error("Proxmox VE {found} is too old: {feature} needs {needed} or later")]
    VersionTooOld {
        /// The version `GET /version` reported.
        found: String,
        /// The least version that works.
        needed: String,
        /// What needs it.
        feature: &'static str,
    },
    /// The image storage does not list `import` among its content types.
    #[error(
        "storage '{storage}' on node {node} does not allow content type 'import' (it has: {content}); \
         add it with `pvesm set {storage} --content {content},import`, or in the web UI under \
         Datacenter > Storage > {storage} > Content"
    )]
    ImportContentMissing {
        /// The image storage's ID (`local`).
        storage: String,
        /// The Proxmox host whose view of the storage was read.
        node: String,
        /// Its content types now, comma-separated.
        content: String,
    },
    /// The permissions preflight found privileges missing; nothing was changed.
    #[error(
        "the Proxmox credentials lack {} privilege(s) the plan needs (nothing was changed):{}",
        missing.len(),
        missing_text(missing, grantee)
    )]
    MissingPrivileges {
        /// Each requirement not met.
        missing: Vec<MissingPrivilege>,
        /// Who the credentials are, as `pveum acl modify` takes them
        /// (`crate::settings::Auth::grantee`).
        grantee: String,
    },
    /// A disk would have to shrink; refused, never done.
    #[error(
        "vm {vmid} on node {node}: {disk} is {current_gib} GiB; shrinking it to {wanted_gib} GiB is refused (Proxmox cannot shrink a disk without losing data)"
    )]
    DiskShrink {
        /// The VM.
        vmid: u32,
        /// Its Proxmox node.
        node: String,
        /// The disk key, e.g. `scsi0`.
        disk: String,
        /// Its size now, GiB.
        current_gib: u64,
        /// The size asked for, GiB.
        wanted_gib: u64,
    },
}

fn forbidden_text(path: Option<&str>, privilege: Option<&str>, message: &str) -> String {
    match (privilege, path) {
        (Some(p), Some(path)) => format!("missing privilege {p} on {path}"),
        _ => message.to_string(),
    }
}

fn field_text(errors: &[(String, String)]) -> String {
    errors
        .iter()
        .map(|(k, v)| format!("; {k}: {}", v.trim().replace('\n', " ")))
        .collect()
}

/// The name of the README's role, which a missing privilege's `pveum` line grants.
pub const ROLE: &str = "Talosprov";

/// Each missing requirement, and the `pveum` line that grants its first
/// alternative through the README's role.
fn missing_text(missing: &[MissingPrivilege], grantee: &str) -> String {
    missing
        .iter()
        .map(|m| {
            let paths: std::collections::BTreeSet<&str> = m
                .alternatives
                .first()
                .map(|alt| alt.iter().map(|(p, _)| p.as_str()).collect())
                .unwrap_or_default();
            let grants: Vec<String> = paths
                .into_iter()
                .map(|p| format!("pveum acl modify {p} {grantee} --roles {}", ROLE))
                .collect();
            format!("\n  - {m}\n    grant it: {}", grants.join("; "))
        })
        .collect()
}

impl ProxmoxError {
    /// True for the failures worth retrying with backoff (reference/proxmox.md §8):
    /// a config lock "got timeout", a `cfs-lock` timeout, "got no worker upid",
    /// pveproxy's 595/596/599, and "no quorum"; and a connection-level failure
    /// when sending again is safe (see [`ProxmoxError::Transport`]'s
    /// `retry_safe`). Everything else fails at once.
    pub fn is_transient(&self) -> bool {
        match self {
            ProxmoxError::Api {
                status, message, ..
            } => matches!(status, 595 | 596 | 599) || is_transient_text(message),
            ProxmoxError::TaskFailed { exitstatus, .. } => is_transient_text(exitstatus),
            ProxmoxError::Transport { retry_safe, .. } => *retry_safe,
            _ => false,
        }
    }

    /// The failure in a few words, for a retry line: PVE's status and message,
    /// or the connection's own error (`Connection reset by peer (os error 104)`).
    pub fn cause_text(&self) -> String {
        match self {
            ProxmoxError::Api {
                status, message, ..
            } => format!("HTTP {status}: {message}"),
            ProxmoxError::TaskFailed { exitstatus, .. } => format!("task failed: {exitstatus}"),
            ProxmoxError::Transport { source, .. } => talosprov_retry::transport_cause(source),
            other => other.to_string(),
        }
    }

    /// True when PVE said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ProxmoxError::NotFound { .. })
    }

    /// The PVE message text carried by this error, if any.
    pub fn message(&self) -> Option<&str> {
        match self {
            ProxmoxError::Api { message, .. }
            | ProxmoxError::NotFound { message, .. }
            | ProxmoxError::Forbidden { message, .. }
            | ProxmoxError::TokenRejected { message, .. } => Some(message),
            ProxmoxError::TaskFailed { exitstatus, .. } => Some(exitstatus),
            ProxmoxError::GaveUp { last, .. } => last.message(),
            _ => None,
        }
    }
}

/// True for a message that names a transient condition: the VM config lock
/// ("can't lock file '/var/lock/qemu-server/lock-<id>.conf' - got timeout"),
/// the cluster file-system lock ("cfs-lock ... got lock request timeout"),
/// "got no worker upid - start worker failed", and "cluster not ready - no quorum?".
pub fn is_transient_text(message: &str) -> bool {
    (message.contains("can't lock file") && message.contains("got timeout"))
        || message.contains("cfs-lock")
        || message.contains("got no worker upid")
        || message.contains("no quorum")
}

/// Turn an HTTP error answer into an error: `status` and its `reason` phrase, and
/// the body (JSON `{"data":null,"message":..,"errors":{..}}`, or empty, or HTML).
///
/// 401 is "token rejected"; 403 names the privilege and path when PVE's text
/// "Permission check failed (<path>, <priv>)" gives them; a 404 or a 500 saying
/// "does not exist" is not-found; "already exists on node 'X'" is a taken vmid.
pub fn from_answer(op: &Operation, status: u16, reason: &str, body: &str) -> ProxmoxError {
    let (message, errors) = parse_error_body(body);
    let message = message
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| reason.trim().to_string());
    let op = op.clone();
    match status {
        401 => ProxmoxError::TokenRejected {
            op,
            credential: "API token",
            message,
        },
        403 => {
            let (path, privilege) = parse_permission_check(&message);
            ProxmoxError::Forbidden {
                op,
                path,
                privilege,
                message,
            }
        }
        404 => ProxmoxError::NotFound { op, message },
        500 if message.contains("does not exist") => ProxmoxError::NotFound { op, message },
        500 if message.contains("already exists on node") && op.vmid.is_some() => {
            ProxmoxError::VmidTaken {
                vmid: op.vmid.unwrap_or_default(),
                node: quoted_after(&message, "already exists on node ").unwrap_or_default(),
                name: None,
            }
        }
        _ => ProxmoxError::Api {
            op,
            status,
            message,
            errors,
        },
    }
}

/// The message (first line's trailing newline dropped) and per-field errors of an error body.
fn parse_error_body(body: &str) -> (Option<String>, Vec<(String, String)>) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return (None, Vec::new());
    };
    let message = value
        .get("message")
        .and_then(|m| m.as_str())
        .map(|m| m.trim_end().to_string());
    let mut errors: Vec<(String, String)> = value
        .get("errors")
        .and_then(|e| e.as_object())
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    (k.clone(), text.trim_end().to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    errors.sort();
    (message, errors)
}

/// `(path, privilege)` from "Permission check failed (/mapping/pci/gpu, Mapping.Use)".
fn parse_permission_check(message: &str) -> (Option<String>, Option<String>) {
    let Some(start) = message.find("Permission check failed (") else {
        return (None, None);
    };
    let rest = &message[start + "Permission check failed (".len()..];
    let Some(end) = rest.rfind(')') else {
        return (None, None);
    };
    match rest[..end].rsplit_once(", ") {
        Some((path, privilege)) if path.starts_with('/') => {
            (Some(path.to_string()), Some(privilege.to_string()))
        }
        _ => (None, None),
    }
}

/// The text between single quotes right after `marker`.
fn quoted_after(message: &str, marker: &str) -> Option<String> {
    let rest = &message[message.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('\'')?;
    Some(rest[..rest.find('\'')?].to_string())
}

/// One need: satisfied when every `(path, privilege)` of any one alternative is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Alternatives; each a list of `(ACL path, privilege)` that must all be held.
    pub alternatives: Vec<Vec<(String, String)>>,
    /// What it is for, e.g. "create VM 121".
    pub purpose: String,
}

/// A requirement the credentials do not meet.
pub type MissingPrivilege = Requirement;

impl From<crate::tls::TlsSetupError> for ProxmoxError {
    fn from(e: crate::tls::TlsSetupError) -> Self {
        match e {
            crate::tls::TlsSetupError::Settings(detail) => ProxmoxError::Settings(detail),
            crate::tls::TlsSetupError::CaFile { path, detail } => {
                ProxmoxError::CaFile { path, detail }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op() -> Operation {
        Operation::new("create VM").node("pve1").vmid(121)
    }

    #[test]
    fn unauthorized_is_token_rejected_even_with_an_empty_body() {
        let e = from_answer(&op(), 401, "Authentication failed!", "");
        assert!(matches!(e, ProxmoxError::TokenRejected { .. }));
        assert!(e.to_string().contains("token rejected"), "{e}");
        assert!(e.to_string().contains("Authentication failed!"), "{e}");
    }

    #[test]
    fn forbidden_names_privilege_and_path() {
        let body = r#"{"data":null,"message":"Permission check failed (/mapping/pci/gpu, Mapping.Use)\n"}"#;
        let e = from_answer(&op(), 403, "Permission check failed", body);
        match &e {
            ProxmoxError::Forbidden {
                path, privilege, ..
            } => {
                assert_eq!(path.as_deref(), Some("/mapping/pci/gpu"));
                assert_eq!(privilege.as_deref(), Some("Mapping.Use"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "create VM (node pve1, vmid 121): permission denied: missing privilege Mapping.Use on /mapping/pci/gpu"
        );
    }

    #[test]
    fn forbidden_without_path_keeps_the_message() {
        let body = r#"{"message":"Permission check failed (pool 'nope' does not exist)\n"}"#;
        let e = from_answer(&op(), 403, "x", body);
        assert!(
            e.to_string()
                .ends_with("Permission check failed (pool 'nope' does not exist)")
        );
    }

    #[test]
    fn server_error_saying_does_not_exist_is_not_found() {
        let body = r#"{"data":null,"message":"Configuration file 'nodes/pve1/qemu-server/500.conf' does not exist\n"}"#;
        assert!(from_answer(&op(), 500, "x", body).is_not_found());
        assert!(!from_answer(&op(), 500, "x", r#"{"message":"boom\n"}"#).is_not_found());
    }

    #[test]
    fn duplicate_vmid_names_the_node_holding_it() {
        let body = r#"{"data":null,"message":"unable to create VM 121 - VM 121 already exists on node 'pve2'\n"}"#;
        match from_answer(&op(), 500, "x", body) {
            ProxmoxError::VmidTaken { vmid, node, .. } => {
                assert_eq!(vmid, 121);
                assert_eq!(node, "pve2");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parameter_errors_are_listed_by_field() {
        let body = r#"{"data":null,"message":"Parameter verification failed.\n","errors":{"ipconfig0":"invalid format - format error\n"}}"#;
        let e = from_answer(&op(), 400, "Parameter verification failed.", body);
        assert_eq!(
            e.to_string(),
            "create VM (node pve1, vmid 121): HTTP 400: Parameter verification failed.; ipconfig0: invalid format - format error"
        );
    }

    #[test]
    fn transient_failures_are_the_listed_ones_only() {
        let lock = r#"{"message":"can't lock file '/var/lock/qemu-server/lock-121.conf' - got timeout\n"}"#;
        assert!(from_answer(&op(), 500, "x", lock).is_transient());
        assert!(from_answer(&op(), 595, "No route to host", "").is_transient());
        assert!(from_answer(&op(), 596, "Broken pipe", "").is_transient());
        assert!(from_answer(&op(), 599, "Too many redirects", "").is_transient());
        let quorum = r#"{"message":"cluster not ready - no quorum?\n"}"#;
        assert!(from_answer(&op(), 500, "x", quorum).is_transient());
        let worker = r#"{"message":"got no worker upid - start worker failed\n"}"#;
        assert!(from_answer(&op(), 500, "x", worker).is_transient());
        let cfs = r#"{"message":"cfs-lock 'storage-local-lvm' error: got lock request timeout\n"}"#;
        assert!(from_answer(&op(), 500, "x", cfs).is_transient());
        let running = r#"{"message":"VM 121 is running - destroy failed\n"}"#;
        assert!(!from_answer(&op(), 500, "x", running).is_transient());
        assert!(!from_answer(&op(), 400, "x", "{}").is_transient());
        assert!(!is_transient_text("VM quit/powerdown failed - got timeout"));
    }

    #[test]
    fn html_bodies_fall_back_to_the_reason_phrase() {
        let e = from_answer(&op(), 502, "Bad Gateway", "<html>proxy</html>");
        assert_eq!(e.message(), Some("Bad Gateway"));
    }
}
