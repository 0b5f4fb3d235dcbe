//! State locks: OpenTofu's LockInfo JSON (the body the http backend sends and
//! GitLab answers a conflict with), and the error that names the holder.
//! Field names follow OpenTofu `internal/states/statemgr/locker.go`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who holds a lock, for what and since when. Serialised with OpenTofu's
/// field names (`ID`, `Operation`, `Info`, `Who`, `Version`, `Created`,
/// `Path`); `Pid` is talosprov's own, for the local backend.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockInfo {
    /// Unique lock ID (a UUID v4); `force-unlock` takes it.
    #[serde(rename = "ID", default)]
    pub id: String,
    /// The command holding the lock, e.g. `apply`, `state rm`.
    #[serde(rename = "Operation", default)]
    pub operation: String,
    /// Free text; talosprov leaves it empty.
    #[serde(rename = "Info", default)]
    pub info: String,
    /// `user@host` of the holder.
    #[serde(rename = "Who", default)]
    pub who: String,
    /// The holder's talosprov version.
    #[serde(rename = "Version", default)]
    pub version: String,
    /// When the lock was taken, RFC 3339 UTC.
    #[serde(rename = "Created", default)]
    pub created: String,
    /// The state path or address locked.
    #[serde(rename = "Path", default)]
    pub path: String,
    /// Process ID of the holder (local backend).
    #[serde(rename = "Pid", default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl LockInfo {
    /// The host part of `who` (after the last `@`), if any.
    pub fn host(&self) -> Option<&str> {
        self.who.rsplit_once('@').map(|(_, h)| h)
    }

    /// The JSON body sent to lock and unlock endpoints.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("lock info always serialises")
    }
}

/// Whether the process holding a local lock still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderProcess {
    /// Not known (another host, a remote backend, or no pid recorded).
    Unknown,
    /// The holder's pid runs on this host.
    Running,
    /// The holder was on this host and its pid is gone: the lock is stale, but
    /// still needs `force-unlock`, as in OpenTofu.
    Gone,
}

/// The state is locked by someone else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHeld {
    /// The holder's lock info, as recorded (may be partial).
    pub holder: LockInfo,
    /// Whether the holder still runs, where that can be told.
    pub process: HolderProcess,
}

impl fmt::Display for LockHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.holder;
        let or_unknown = |s: &str| {
            if s.is_empty() {
                "(unknown)".to_owned()
            } else {
                s.to_owned()
            }
        };
        write!(
            f,
            "the state is locked by {} since {} for {} (lock ID {})",
            or_unknown(&h.who),
            or_unknown(&h.created),
            or_unknown(&h.operation),
            or_unknown(&h.id),
        )?;
        match (self.process, h.pid) {
            (HolderProcess::Gone, Some(pid)) => write!(
                f,
                "; its process {pid} is no longer running, so the lock is stale: \
                 release it with `talosprov force-unlock {}`",
                h.id
            ),
            (HolderProcess::Running, Some(pid)) => {
                write!(f, "; process {pid} on this host is still running")
            }
            _ => write!(
                f,
                "; once that run is over, release it with `talosprov force-unlock {}`",
                h.id
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> LockInfo {
        LockInfo {
            id: "5f3e-lock".to_owned(),
            operation: "apply".to_owned(),
            info: String::new(),
            who: "ci@runner-7".to_owned(),
            version: "0.1.0".to_owned(),
            created: "2026-01-02T03:04:05Z".to_owned(),
            path: "talosprov.tfstate".to_owned(),
            pid: Some(4242),
        }
    }

    #[test]
    fn lock_info_uses_opentofu_field_names() {
        let v: serde_json::Value = serde_json::from_slice(&holder().to_json()).unwrap();
        for key in [
            "ID",
            "Operation",
            "Info",
            "Who",
            "Version",
            "Created",
            "Path",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(holder().host(), Some("runner-7"));
    }

    #[test]
    fn lock_held_names_holder_and_stale_process() {
        let held = LockHeld {
            holder: holder(),
            process: HolderProcess::Gone,
        };
        insta::assert_snapshot!(held.to_string());
    }
}
