//! How long a source may take: one deadline for a whole `helm template` run
//! or a whole download (its retries and their waits included), and a minimum
//! transfer rate for downloads, so that a server that trickles is left long
//! before the deadline. The engine passes them in ([`SourceLimits`]), the
//! deadline from [`SOURCE_TIMEOUT_ENV`].

use std::time::Duration;

/// The variable that sets [`SourceLimits::deadline`]: seconds (`300`) or a
/// duration such as `5m`.
pub const SOURCE_TIMEOUT_ENV: &str = "TALOSPROV_SOURCE_TIMEOUT";

/// The default deadline of one `helm template` run or one download, retries
/// included: 120 s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(120);

/// The default minimum of a download: at least this many bytes in every
/// [`DEFAULT_RATE_WINDOW`] (10 KiB per 10 s, about 1 KiB/s; a manifest
/// served from anywhere comes faster by orders of magnitude).
pub const DEFAULT_MIN_BYTES: u64 = 10 * 1024;

/// The default window over which [`DEFAULT_MIN_BYTES`] must arrive: 10 s,
/// sliding, counted from the moment the request is sent (the answer's
/// headers must come within it too).
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(10);

/// The bounds in time of the add-on sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceLimits {
    /// The most one `helm template` run, or one download with all its
    /// attempts and the waits between them, may take; the run is killed (its
    /// process group) or the download dropped when it passes.
    pub deadline: Duration,
    /// A download fails (and is retried, within the deadline) when fewer
    /// than this many bytes arrived over the last [`SourceLimits::rate_window`];
    /// 0 turns the check off.
    pub min_bytes: u64,
    /// The sliding window of [`SourceLimits::min_bytes`].
    pub rate_window: Duration,
}

impl Default for SourceLimits {
    /// [`DEFAULT_DEADLINE`], [`DEFAULT_MIN_BYTES`] over [`DEFAULT_RATE_WINDOW`].
    fn default() -> Self {
        SourceLimits {
            deadline: DEFAULT_DEADLINE,
            min_bytes: DEFAULT_MIN_BYTES,
            rate_window: DEFAULT_RATE_WINDOW,
        }
    }
}

/// What to tell the user to raise the deadline.
pub(crate) fn raise_hint() -> String {
    format!("set {SOURCE_TIMEOUT_ENV} (seconds, or a duration such as 5m) to allow longer")
}
