//! Retry notices: a client that sends a request again after a transient failure
//! (Proxmox, the Image Factory) says so here, and whoever runs the current task
//! (the executor, for a step; refresh, for a plan) shows it as one line. No
//! watcher: the notice only goes to the developer log.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

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

/// `2 s`, or `0.25 s` below a whole second (at most two decimals, no trailing zero).
fn seconds(d: Duration) -> String {
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
