//! Who holds a lock, read from the system: the user name (from `$USER`, else
//! the password database), the process's start time, and whether a holder
//! recorded in a lock info still runs on this host. Linux answers through
//! `/proc`; elsewhere a holder's liveness is unknown.

use std::path::Path;

use talosprov_statefile::lock::{HolderProcess, LockInfo};

/// The name of the user running talosprov, for a lock's `Who`: `$USER` when
/// set, else the system's name for the effective user (getpwuid_r, as
/// OpenTofu's `user.Current()`), else `$USERNAME`, else `uid <n>` from
/// `/proc/self`, else `unknown`.
pub fn user_name() -> String {
    let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    from_env("USER")
        .or_else(|| {
            whoami::fallible::username()
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .or_else(|| from_env("USERNAME"))
        .or_else(uid_of_this_process)
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(unix)]
fn uid_of_this_process() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .ok()
        .map(|m| format!("uid {}", m.uid()))
}

#[cfg(not(unix))]
fn uid_of_this_process() -> Option<String> {
    None
}

/// When process `pid` started, in clock ticks since boot (field 22 of
/// `/proc/<pid>/stat`); `None` when there is no such process or no `/proc`.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    start_of_stat(&stat)
}

/// The start time in a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself, so fields
/// are counted after its last `)`: field 3 (the state) comes first, so field
/// 22 is the 20th.
fn start_of_stat(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the holder recorded in `holder` still runs: only known for a lock
/// taken on this host with a pid, and where `/proc` exists. A pid that now
/// belongs to a process started at another time than the recorded
/// `ProcessStart` is a reused pid: the holder is gone.
pub fn liveness(holder: &LockInfo) -> HolderProcess {
    let (Some(pid), Some(host)) = (holder.pid, holder.host()) else {
        return HolderProcess::Unknown;
    };
    if host != host_name() || !Path::new("/proc/self").exists() {
        return HolderProcess::Unknown;
    }
    match (process_start(pid), holder.process_start) {
        (None, _) if !Path::new(&format!("/proc/{pid}")).exists() => HolderProcess::Gone,
        (Some(now), Some(then)) if now != then => HolderProcess::Gone,
        _ => HolderProcess::Running,
    }
}

/// This machine's host name (as `Who` records it), or `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32, start: Option<u64>) -> LockInfo {
        LockInfo {
            id: "l".to_owned(),
            who: format!("alice@{}", host_name()),
            pid: Some(pid),
            process_start: start,
            ..LockInfo::default()
        }
    }

    #[test]
    fn start_time_is_read_after_the_command_name() {
        let line = "4242 (talos prov) (x)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 \
                    1 0 987654 1000 10 18446744073709551615";
        assert_eq!(start_of_stat(line), Some(987_654));
        assert_eq!(start_of_stat("garbage"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_runs_and_a_missing_or_reused_pid_is_gone() {
        let me = std::process::id();
        let start = process_start(me);
        assert!(start.is_some());
        assert_eq!(liveness(&holder(me, start)), HolderProcess::Running);
        assert_eq!(liveness(&holder(me, None)), HolderProcess::Running);
        assert_eq!(
            liveness(&holder(me, start.map(|s| s + 1))),
            HolderProcess::Gone,
            "same pid, another start time: a reused pid"
        );
        assert_eq!(liveness(&holder(u32::MAX - 7, None)), HolderProcess::Gone);
    }

    #[test]
    fn another_host_or_no_pid_is_unknown() {
        let mut other = holder(std::process::id(), None);
        other.who = "alice@elsewhere.invalid".to_owned();
        assert_eq!(liveness(&other), HolderProcess::Unknown);
        let mut no_pid = holder(1, None);
        no_pid.pid = None;
        assert_eq!(liveness(&no_pid), HolderProcess::Unknown);
    }

    #[test]
    fn user_name_is_never_empty() {
        assert!(!user_name().trim().is_empty());
    }
}
