//! Proxmox VE REST API client: requests built as plain values (`request`), apart
//! from sending them (`client`); task waits (`task`); and one file per resource
//! family, each operation idempotent (look, then act). Facts and sources:
//! reference/proxmox.md (pve-manager, qemu-server, pve-storage, pve-common).

// Errors carry the operation, node, vmid and UPID by value; they are the cold path
// of network calls, so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod client;
pub mod error;
pub mod lenient;
pub mod lifecycle;
pub mod mapping;
pub mod observe;
pub mod pending;
pub mod pool;
pub mod request;
pub mod settings;
pub mod storage;
pub mod task;
pub mod tls;
pub mod vm;

pub use client::Client;
pub use error::ProxmoxError;
pub use request::{Operation, Request};
pub use settings::{ApiToken, Auth, Settings, Timeouts};
pub use task::Upid;
pub use tls::{Fingerprint, TlsMode};
pub use vm::{HostPci, VmSpec};

/// A secret (API token secret, password, ticket): its `Debug` and `Display`
/// print `(sensitive)`, never the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(sensitive)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(sensitive)")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn secret_never_prints_its_value() {
        let s = Secret::new("3f1c-uuid");
        assert_eq!(format!("{s}"), "(sensitive)");
        assert_eq!(format!("{s:?}"), "(sensitive)");
        assert_eq!(s.expose(), "3f1c-uuid");
    }
}
