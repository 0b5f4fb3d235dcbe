//! Tasks: UPID parsing and waiting. A worker endpoint answers with a UPID at once;
//! the work is done when `GET /nodes/{node}/tasks/{upid}/status` says `stopped`, on
//! the node named inside the UPID. `OK` is success, `WARNINGS: N` success with a
//! warning, anything else the error text (pve-common `UPID.pm`, `Tools.pm`).

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::lenient;
use crate::request::{Operation, Request};
use serde_json::Value;
use std::fmt;
use tokio::time::Instant;

/// A parsed UPID: `UPID:<node>:<pid 8 hex>:<pstart>:<starttime 8 hex>:<type>:<id>:<user>:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upid {
    /// The whole UPID text, as PVE gave it.
    pub text: String,
    /// The node the task runs on: where to poll.
    pub node: String,
    /// The worker's process id.
    pub pid: u32,
    /// The worker's start time in clock ticks.
    pub pstart: u64,
    /// Start time, seconds since the epoch.
    pub starttime: u64,
    /// Task type: `qmcreate`, `qmstart`, `download`, `resize`, ...
    pub task_type: String,
    /// Task ID: usually the vmid or the storage.
    pub id: String,
    /// The user (or `user@realm!token`) that started it.
    pub user: String,
}

impl Upid {
    /// Parse a UPID.
    ///
    /// # Errors
    /// [`ProxmoxError::BadUpid`] when it does not have the fields above.
    pub fn parse(text: &str) -> Result<Self, ProxmoxError> {
        let bad = || ProxmoxError::BadUpid(text.to_string());
        let rest = text.strip_prefix("UPID:").ok_or_else(bad)?;
        let parts: Vec<&str> = rest.splitn(8, ':').collect();
        if parts.len() < 7 || parts[0].is_empty() {
            return Err(bad());
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad());
        let user = parts[6].to_string();
        if user.is_empty() {
            return Err(bad());
        }
        Ok(Upid {
            text: text.to_string(),
            node: parts[0].to_string(),
            pid: u32::try_from(hex(parts[1])?).map_err(|_| bad())?,
            pstart: hex(parts[2])?,
            starttime: hex(parts[3])?,
            task_type: parts[4].to_string(),
            id: parts[5].to_string(),
            user,
        })
    }
}

impl fmt::Display for Upid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// How a finished task ended, from its `exitstatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskExit {
    /// `OK`.
    Ok,
    /// `WARNINGS: N`: success, with N warnings.
    Warnings(u32),
    /// Anything else: the error text.
    Failed(String),
}

/// Classify an exit status as PVE's `status_is_error` does.
pub fn classify_exit(exitstatus: &str) -> TaskExit {
    let s = exitstatus.trim();
    if s == "OK" {
        return TaskExit::Ok;
    }
    if let Some(n) = s.strip_prefix("WARNINGS: ").and_then(|n| n.parse().ok()) {
        return TaskExit::Warnings(n);
    }
    TaskExit::Failed(s.to_string())
}

/// What a successful task left: its UPID and any warning lines of its log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskDone {
    /// The task's UPID, as the worker request returned it.
    pub upid: Upid,
    /// `WARN:` lines of the log when it ended `WARNINGS: N`, else empty.
    pub warnings: Vec<String>,
}

/// The task's UPID from a worker endpoint's `data`.
///
/// # Errors
/// [`ProxmoxError::Decode`] when `data` is not a string, [`ProxmoxError::BadUpid`] when unparseable.
pub fn upid_of(op: &Operation, data: &Value) -> Result<Upid, ProxmoxError> {
    let text = data.as_str().ok_or_else(|| ProxmoxError::Decode {
        op: op.clone(),
        detail: format!("expected a task UPID, got {data}"),
    })?;
    Upid::parse(text)
}

/// Wait for a task: poll its status on its own node with backoff until it stops or
/// the client's task deadline passes.
///
/// # Errors
/// [`ProxmoxError::TaskFailed`] with the exit text and the log's tail;
/// [`ProxmoxError::TaskTimeout`] naming the deadline; request errors from polling.
pub async fn wait(client: &Client, op: &Operation, upid: &Upid) -> Result<TaskDone, ProxmoxError> {
    let t = client.timeouts();
    let deadline = Instant::now() + t.task_deadline;
    // Tasks are polled from 100 ms at most: most finish within a second.
    let backoff = talosprov_retry::Backoff {
        initial: t.first_backoff.min(std::time::Duration::from_millis(100)),
        max: t.max_backoff,
    };
    let mut polls = 0u32;
    let status_req = Request::get(
        &["nodes", &upid.node, "tasks", &upid.text, "status"],
        op.clone(),
    );
    loop {
        let status = match client.send(&status_req).await {
            Ok(v) => Some(v),
            // Right after it starts, a task may not be visible yet (bpg retries a 400 too).
            Err(ProxmoxError::Api { status: 400, .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(status) = status {
            let state = status.get("status").and_then(Value::as_str).unwrap_or("");
            if state == "stopped" {
                let exit = status
                    .get("exitstatus")
                    .and_then(lenient::string_of)
                    .unwrap_or_else(|| "unexpected status".to_string());
                return match classify_exit(&exit) {
                    TaskExit::Ok => Ok(TaskDone {
                        upid: upid.clone(),
                        warnings: Vec::new(),
                    }),
                    TaskExit::Warnings(_) => {
                        let log = log_lines(client, op, upid).await.unwrap_or_default();
                        let mut warnings: Vec<String> =
                            log.into_iter().filter(|l| l.contains("WARN:")).collect();
                        if warnings.is_empty() {
                            warnings.push(exit);
                        }
                        Ok(TaskDone {
                            upid: upid.clone(),
                            warnings,
                        })
                    }
                    TaskExit::Failed(text) => Err(ProxmoxError::TaskFailed {
                        op: op.clone(),
                        upid: upid.text.clone(),
                        exitstatus: text,
                        log: log_lines(client, op, upid).await.unwrap_or_default(),
                    }),
                };
            }
        }
        let delay = backoff.delay(polls);
        polls += 1;
        if Instant::now() + delay > deadline {
            return Err(ProxmoxError::TaskTimeout {
                op: op.clone(),
                upid: upid.text.clone(),
                deadline_secs: t.task_deadline.as_secs(),
            });
        }
        tokio::time::sleep(delay).await;
    }
}

/// Send a worker request and wait for its task; the task failing with a transient
/// text (a config lock "got timeout") sends the request again, within the retry deadline.
///
/// # Errors
/// As [`Client::send`] and [`wait`].
pub async fn run(client: &Client, req: &Request) -> Result<TaskDone, ProxmoxError> {
    client
        .retrying(&req.op, || async {
            let data = client.send(req).await?;
            let upid = upid_of(&req.op, &data)?;
            wait(client, &req.op, &upid).await
        })
        .await
}

/// The last 50 lines of a task's log (`limit` is given: PVE's default page is 50 from the start).
/// The first `limit` lines of a task's log (`GET .../tasks/{upid}/log?start=0&limit=N`).
///
/// # Errors
/// Request errors.
pub async fn first_log_lines(
    client: &Client,
    op: &Operation,
    upid: &Upid,
    limit: usize,
) -> Result<Vec<String>, ProxmoxError> {
    let req = Request::get(
        &["nodes", &upid.node, "tasks", &upid.text, "log"],
        op.clone(),
    )
    .query("start", 0)
    .query("limit", limit);
    let data = client.send(&req).await?;
    Ok(data
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.get("t").and_then(Value::as_str).map(str::to_string))
                .take(limit)
                .collect()
        })
        .unwrap_or_default())
}

async fn log_lines(
    client: &Client,
    op: &Operation,
    upid: &Upid,
) -> Result<Vec<String>, ProxmoxError> {
    let req = Request::get(
        &["nodes", &upid.node, "tasks", &upid.text, "log"],
        op.clone(),
    )
    .query("start", 0)
    .query("limit", 10000);
    let data = client.send(&req).await?;
    let lines: Vec<String> = data
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.get("t").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let skip = lines.len().saturating_sub(50);
    Ok(lines.into_iter().skip(skip).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upid_parses_fields_and_node() {
        let u =
            Upid::parse("UPID:pve2:000003E8:00001B58:6B0C3E99:qmcreate:121:root@pam!talosprov:")
                .expect("parses");
        assert_eq!(u.node, "pve2");
        assert_eq!(u.pid, 1000);
        assert_eq!(u.pstart, 7000);
        assert_eq!(u.starttime, 0x6B0C_3E99);
        assert_eq!(u.task_type, "qmcreate");
        assert_eq!(u.id, "121");
        assert_eq!(u.user, "root@pam!talosprov");
        assert_eq!(u.to_string(), u.text);
    }

    #[test]
    fn upid_with_empty_id_parses() {
        let u =
            Upid::parse("UPID:pve1:00001234:0000ABCD:6B0C3E99:imgcopy::root@pam:").expect("parses");
        assert_eq!(u.id, "");
    }

    #[test]
    fn malformed_upids_are_refused() {
        for bad in [
            "",
            "UPID:",
            "pve1:0:0:0:x:y:z:",
            "UPID:pve1:zz:0:0:qmstart:1:root@pam:",
            "UPID:pve1:1:2:3:qmstart:1::",
            "UPID::1:2:3:qmstart:1:root@pam:",
        ] {
            assert!(Upid::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exit_statuses_classify_like_pve() {
        assert_eq!(classify_exit("OK"), TaskExit::Ok);
        assert_eq!(classify_exit("WARNINGS: 2"), TaskExit::Warnings(2));
        assert_eq!(
            classify_exit("VM 100 already running"),
            TaskExit::Failed("VM 100 already running".into())
        );
        assert_eq!(
            classify_exit("WARNINGS: x"),
            TaskExit::Failed("WARNINGS: x".into())
        );
    }
}
