//! Waiting for something another process or task does: poll a condition every
//! 20 ms under a bound, and fail the test naming what did not happen. No test
//! sleeps for a fixed time instead.

use std::time::Duration;

/// How often a condition is polled.
const EVERY: Duration = Duration::from_millis(20);

/// Polls `ready` until it returns `Some`, and returns that value; fails the
/// test with `what did not happen within N s` once `within` has passed.
pub async fn poll<T>(what: &str, within: Duration, mut ready: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = ready().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen within {} s",
            within.as_secs_f64()
        );
        tokio::time::sleep(EVERY).await;
    }
}

/// Polls `ready` until it returns true, as [`poll`].
pub async fn until(what: &str, within: Duration, mut ready: impl AsyncFnMut() -> bool) {
    poll(what, within, async || ready().await.then_some(())).await
}
