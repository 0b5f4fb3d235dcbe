//! The one retry pacing of the workspace ([`Backoff`], used by the Proxmox
//! client and its task waits, the Talos waits, the health gates and the http
//! state backend), and retry notices: a client that sends a request again after a transient failure
//! (Proxmox, the Image Factory) says so here, and whoever runs the current task
//! (the executor, for a step; refresh, for a plan) shows it as one line. No
//! watcher: the notice only goes to the developer log.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Retry pacing: the first pause, doubling after each failure up to `max`.
/// The default (200 ms doubling to 5 s) is the Talos waits'; the Proxmox
/// client and the http state backend take theirs from their settings
/// (`first_backoff`/`max_backoff`, `retry_wait_min`/`retry_wait_max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First pause after a failure.
    pub initial: Duration,
    /// Largest pause.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The pause before retry number `attempt` (0-based): `initial × 2^attempt`,
    /// at most `max` (saturating, so any `attempt` is safe).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.min(16);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// One retry about to happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// What is retried, in operator words, e.g. `Proxmox: read VM config (node pve1, vmid 121)`.
    pub what: String,
    /// Why: the failure of the attempt that just ended, one line.
    pub cause: String,
    /// The attempt that comes next (2 for the first retry).
    pub attempt: u32,
    /// The pause before it.
    pub delay: Duration,
}

impl std::fmt::Display for Notice {
    /// `retrying Proxmox: read VM status (node pve1, vmid 121) in 0.5 s (attempt 2): connection reset by peer`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "retrying {} in {} (attempt {}): {}",
            self.what,
            seconds(self.delay),
            self.attempt,
            self.cause
        )
    }
}

/// `2 s`, or `0.25 s` below a whole second (at most two decimals, no
/// trailing zero): how deadlines and pauses are worded in messages.
pub fn seconds(d: Duration) -> String {
    let text = format!("{:.2}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// The innermost description of a connection failure: the operating
/// system's error (`Connection reset by peer (os error 104)`) when there is
/// one, else the HTTP client's deepest message; a timeout says so.
pub fn transport_cause(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer in time (timed out)".to_owned();
    }
    let mut deepest = e.to_string();
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.to_string();
        }
        deepest = err.to_string();
        current = err.source();
    }
    deepest
}

/// Something that shows retry notices.
pub type Watcher = Arc<dyn Fn(&Notice) + Send + Sync>;

tokio::task_local! {
    static WATCHER: Watcher;
}

/// Run `future` with `watcher` told of every retry the clients make inside it
/// (in this task; a task it spawns is not watched).
pub async fn watched<F: Future>(watcher: Watcher, future: F) -> F::Output {
    WATCHER.scope(watcher, future).await
}

/// Tell the current task's watcher (if any) of a retry, and the developer log.
pub fn notify(notice: &Notice) {
    tracing::debug!(what = %notice.what, attempt = notice.attempt, cause = %notice.cause, "retrying");
    let _ = WATCHER.try_with(|w| w(notice));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_up_to_max_for_any_attempt() {
        let b = Backoff {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(5),
        };
        let waits: Vec<u128> = (0..7).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
        assert_eq!(Backoff::default().delay(0), Duration::from_millis(200));
    }

    #[test]
    fn a_notice_names_what_when_and_why() {
        let n = Notice {
            what: "Proxmox: read VM status (node pve1, vmid 121)".into(),
            cause: "connection reset by peer".into(),
            attempt: 2,
            delay: Duration::from_millis(250),
        };
        assert_eq!(
            n.to_string(),
            "retrying Proxmox: read VM status (node pve1, vmid 121) in 0.25 s (attempt 2): connection reset by peer"
        );
        let n = Notice {
            delay: Duration::from_millis(500),
            ..n
        };
        assert!(n.to_string().contains(" in 0.5 s "), "{n}");
        let n = Notice {
            delay: Duration::from_secs(2),
            ..n
        };
        assert!(n.to_string().contains(" in 2 s "), "{n}");
    }

    #[tokio::test]
    async fn only_the_watched_task_hears_of_retries() {
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = heard.clone();
        let notice = Notice {
            what: "x".into(),
            cause: "y".into(),
            attempt: 2,
            delay: Duration::ZERO,
        };
        notify(&notice);
        watched(
            Arc::new(move |n: &Notice| sink.lock().expect("lock").push(n.clone())),
            async { notify(&notice) },
        )
        .await;
        assert_eq!(*heard.lock().expect("lock"), vec![notice]);
    }
}
