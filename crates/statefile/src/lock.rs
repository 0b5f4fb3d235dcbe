//! State locks: OpenTofu's LockInfo JSON (the body the http backend sends and
//! GitLab answers a conflict with), the error that names the holder, and the
//! notice for a lock taken over from a holder that died. Field names follow
//! OpenTofu `internal/states/statemgr/locker.go`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who holds a lock, for what and since when. Serialised with OpenTofu's
/// field names (`ID`, `Operation`, `Info`, `Who`, `Version`, `Created`,
/// `Path`); `Pid` and `ProcessStart` are talosprov's own: with the host in
/// `Who`, they tell whether the holder still runs.
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
    /// Process ID of the holder.
    #[serde(rename = "Pid", default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// When the holder process started, in clock ticks since its host booted
    /// (field 22 of Linux's `/proc/<pid>/stat`), so that a pid reused after the
    /// holder died is not taken for the holder. `None` off Linux and in locks
    /// written before it existed.
    #[serde(
        rename = "ProcessStart",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub process_start: Option<u64>,
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

/// Whether the process holding a lock still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderProcess {
    /// Not known: another host, no pid recorded, or a server that does not
    /// keep them (GitLab keeps only the ID, its user and the time).
    Unknown,
    /// The holder runs on this host (its pid exists and started when it did),
    /// or it holds the local lock file's OS lock.
    Running,
    /// The holder was on this host and its process is gone: the lock is
    /// stale, and the next run takes it over.
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
            (HolderProcess::Running, Some(pid)) => write!(
                f,
                "; process {pid} on this host is still running: wait for it to finish, \
                 or retry with -lock-timeout=DURATION to wait for it"
            ),
            (HolderProcess::Running, None) => write!(
                f,
                "; a running process holds it: wait for it to finish, or retry with \
                 -lock-timeout=DURATION to wait for it"
            ),
            _ => write!(
                f,
                "; once that run is over, release it with `talosprov force-unlock {}`",
                h.id
            ),
        }
    }
}

impl LockHeld {
    /// The holder in a few words, for a wait notice: `alice@host (process
    /// 4242) for apply since <time> (lock ID <id>)`.
    pub fn holder_summary(&self) -> String {
        let h = &self.holder;
        let or_unknown = |s: &str| {
            if s.is_empty() {
                "(unknown)".to_owned()
            } else {
                s.to_owned()
            }
        };
        let process = h.pid.map(|p| format!(" (process {p})")).unwrap_or_default();
        format!(
            "{}{process} for {} since {} (lock ID {})",
            or_unknown(&h.who),
            or_unknown(&h.operation),
            or_unknown(&h.created),
            or_unknown(&h.id)
        )
    }
}

/// A lock taken over from a holder on this host whose process is gone (killed,
/// or its machine restarted): the holder as its lock info recorded it. The run
/// that took it over warns with this text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenOver {
    /// The dead holder's lock info.
    pub holder: LockInfo,
}

impl fmt::Display for TakenOver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = LockHeld {
            holder: self.holder.clone(),
            process: HolderProcess::Gone,
        };
        write!(
            f,
            "took over the state lock left by {}: that process is no longer running",
            held.holder_summary()
        )
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
            process_start: Some(1234),
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

    #[test]
    fn lock_held_by_a_running_process_says_to_wait() {
        let held = LockHeld {
            holder: holder(),
            process: HolderProcess::Running,
        };
        insta::assert_snapshot!(held.to_string(), @"the state is locked by ci@runner-7 since 2026-01-02T03:04:05Z for apply (lock ID 5f3e-lock); process 4242 on this host is still running: wait for it to finish, or retry with -lock-timeout=DURATION to wait for it");
    }

    #[test]
    fn takeover_names_the_dead_holder() {
        let taken = TakenOver { holder: holder() };
        insta::assert_snapshot!(taken.to_string(), @"took over the state lock left by ci@runner-7 (process 4242) for apply since 2026-01-02T03:04:05Z (lock ID 5f3e-lock): that process is no longer running");
    }

    #[test]
    fn process_start_is_optional_and_named_like_the_other_fields() {
        let v: serde_json::Value = serde_json::from_slice(&holder().to_json()).unwrap();
        assert_eq!(v["ProcessStart"], 1234);
        let old: LockInfo = serde_json::from_str(r#"{"ID":"x","Pid":7}"#).unwrap();
        assert_eq!((old.pid, old.process_start), (Some(7), None));
        let bare = LockInfo::default().to_json();
        assert!(!String::from_utf8(bare).unwrap().contains("ProcessStart"));
    }
}
