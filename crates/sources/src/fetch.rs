//! A `url` add-on's manifest file, downloaded over HTTP(S), bounded in size
//! and in time, and checked against the SHA-256 the topology pins before a
//! byte of it is used. Transport failures, a transfer slower than the
//! minimum rate, 429 and 5xx answers are retried with the one
//! [`talosprov_retry::Backoff`] pacing; a digest that differs is never
//! retried (the file changed). The whole download, retries and their waits
//! included, ends at [`SourceLimits::deadline`].

use std::collections::VecDeque;
use std::time::Duration;

use sha2::{Digest, Sha256};
use talosprov_retry::{Backoff, Notice, notify, seconds, transport_cause};
use tokio::time::Instant;

use crate::limits::{SourceLimits, raise_hint};

/// The largest manifest file talosprov downloads, bytes (32 MiB: a bundle
/// of CRDs such as the Prometheus operator's is a few MiB).
pub const MAX_MANIFEST_BYTES: u64 = 32 * 1024 * 1024;

/// Attempts per download before a transport failure, a slow transfer, 429
/// or 5xx is final (fewer when the deadline comes first).
pub const ATTEMPTS: u32 = 3;

/// How long one connection may take to set up (TCP and TLS), at most.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a manifest could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The HTTP client cannot be built (TLS roots unavailable).
    #[error("cannot set up the HTTP client")]
    Client(#[source] reqwest::Error),
    /// No answer: connection refused, reset, TLS failure; after [`ATTEMPTS`]
    /// attempts.
    #[error("cannot download {url}: {cause}")]
    Transport {
        /// The URL.
        url: String,
        /// The innermost cause, one line.
        cause: String,
    },
    /// A non-2xx answer (final for 4xx, after [`ATTEMPTS`] for 429 and 5xx).
    #[error("cannot download {url}: the server answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: reqwest::StatusCode,
    },
    /// Fewer than [`SourceLimits::min_bytes`] arrived over the last
    /// [`SourceLimits::rate_window`] (the answer's headers included), in
    /// each of [`ATTEMPTS`] attempts.
    #[error(
        "cannot download {url}: fewer than {min_bytes} bytes arrived in {} ({got} bytes in all), \
         below talosprov's minimum rate for a download; the server or the network is stalled: \
         check the URL, or serve the file from a closer mirror",
        seconds(*window)
    )]
    TooSlow {
        /// The URL.
        url: String,
        /// The minimum, in bytes per window.
        min_bytes: u64,
        /// The window.
        window: Duration,
        /// The body bytes received by the last attempt.
        got: u64,
    },
    /// The download, retries included, was not done by
    /// [`SourceLimits::deadline`].
    #[error(
        "cannot download {url}: not done within the deadline of {} for a download, retries \
         included{}; {}",
        seconds(*deadline),
        match last { Some(cause) => format!(" (before: {cause})"), None => String::new() },
        raise_hint()
    )]
    Deadline {
        /// The URL.
        url: String,
        /// The deadline that passed.
        deadline: Duration,
        /// Why the attempt before the last one failed, when one did.
        last: Option<String>,
    },
    /// The body is longer than [`MAX_MANIFEST_BYTES`]; reading stopped there.
    #[error("{url} is over talosprov's limit of {} MiB for a manifest file", MAX_MANIFEST_BYTES / (1024 * 1024))]
    TooLarge {
        /// The URL.
        url: String,
    },
    /// The file's SHA-256 is not the one the topology pins.
    #[error(
        "{url} has SHA-256 {actual}, and the topology pins {expected}: the file changed, or the digest is wrong"
    )]
    Mismatch {
        /// The URL.
        url: String,
        /// The digest in the topology.
        expected: String,
        /// The digest of what was downloaded.
        actual: String,
    },
    /// The file matches its digest and is not UTF-8 text.
    #[error("{url} is not UTF-8 text, so not a YAML manifest")]
    NotUtf8 {
        /// The URL.
        url: String,
    },
}

/// Downloads manifest files.
#[derive(Debug, Clone)]
pub struct Fetcher {
    http: reqwest::Client,
    backoff: Backoff,
    limits: SourceLimits,
}

impl Fetcher {
    /// A fetcher bounded by `limits` (each download's deadline and minimum
    /// rate), with the default pacing of retries.
    ///
    /// # Errors
    /// [`FetchError::Client`] when the HTTP client cannot be built.
    pub fn new(limits: SourceLimits) -> Result<Self, FetchError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(limits.deadline))
            .user_agent(concat!("talosprov/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(FetchError::Client)?;
        Ok(Fetcher {
            http,
            backoff: Backoff::default(),
            limits,
        })
    }

    /// The same fetcher with another retry pacing (tests use a short one).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The text at `url`, once its SHA-256 is `sha256` (lowercase hex).
    ///
    /// # Errors
    /// [`FetchError`]: transport failures, slow transfers and 429/5xx
    /// answers still there after [`ATTEMPTS`] attempts, other non-2xx
    /// answers, the deadline passed, a body over [`MAX_MANIFEST_BYTES`], a
    /// digest that differs, a file that is not UTF-8.
    pub async fn manifest(&self, url: &str, sha256: &str) -> Result<String, FetchError> {
        let mut last = None;
        match tokio::time::timeout(self.limits.deadline, self.attempts(url, &mut last)).await {
            Ok(bytes) => check(url, sha256, bytes?),
            Err(_) => Err(FetchError::Deadline {
                url: url.to_owned(),
                deadline: self.limits.deadline,
                last,
            }),
        }
    }

    /// Every attempt at `url`, with the waits between them; `last` keeps why
    /// the latest one failed.
    async fn attempts(&self, url: &str, last: &mut Option<String>) -> Result<Vec<u8>, FetchError> {
        let mut attempt = 1;
        loop {
            let (retryable, error) = match self.once(url).await {
                Ok(bytes) => return Ok(bytes),
                Err(e) => e,
            };
            if !retryable || attempt >= ATTEMPTS {
                return Err(error);
            }
            let delay = self.backoff.delay(attempt - 1);
            attempt += 1;
            *last = Some(error.to_string());
            notify(&Notice {
                what: format!("download {url}"),
                cause: error.to_string(),
                attempt,
                delay,
            });
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt: the body, or the error and whether it is worth retrying.
    async fn once(&self, url: &str) -> Result<Vec<u8>, (bool, FetchError)> {
        let transport = |e: &reqwest::Error| {
            (
                true,
                FetchError::Transport {
                    url: url.to_owned(),
                    cause: transport_cause(e),
                },
            )
        };
        let mut rate = Rate::new(&self.limits, Instant::now());
        let too_slow = |got: u64| {
            (
                true,
                FetchError::TooSlow {
                    url: url.to_owned(),
                    min_bytes: self.limits.min_bytes,
                    window: self.limits.rate_window,
                    got,
                },
            )
        };
        let sent = self.http.get(url).send();
        let mut response = match rate.fails_at() {
            Some(at) => tokio::time::timeout_at(at, sent)
                .await
                .map_err(|_| too_slow(0))?,
            None => sent.await,
        }
        .map_err(|e| transport(&e))?;
        let status = response.status();
        if !status.is_success() {
            let retry =
                status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
            return Err((
                retry,
                FetchError::Status {
                    url: url.to_owned(),
                    status,
                },
            ));
        }
        let too_large = || {
            (
                false,
                FetchError::TooLarge {
                    url: url.to_owned(),
                },
            )
        };
        if response
            .content_length()
            .is_some_and(|n| n > MAX_MANIFEST_BYTES)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let next = response.chunk();
            let chunk = match rate.fails_at() {
                Some(at) => tokio::time::timeout_at(at, next)
                    .await
                    .map_err(|_| too_slow(body.len() as u64))?,
                None => next.await,
            }
            .map_err(|e| transport(&e))?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if (body.len() + chunk.len()) as u64 > MAX_MANIFEST_BYTES {
                return Err(too_large());
            }
            rate.arrived(Instant::now(), chunk.len() as u64);
            // Grown to the limit at most: doubling past it would reserve twice the limit.
            if body.capacity() < body.len() + chunk.len() {
                let cap = usize::try_from(MAX_MANIFEST_BYTES).unwrap_or(usize::MAX);
                let grown = (body.capacity() * 2).max(body.len() + chunk.len()).min(cap);
                body.reserve_exact(grown.saturating_sub(body.len()));
            }
            body.extend_from_slice(&chunk);
        }
    }
}

/// The bytes of one attempt that arrived within the last window, to tell
/// when the transfer falls below the minimum rate.
#[derive(Debug)]
struct Rate {
    min_bytes: u64,
    window: Duration,
    /// When the request was sent: no verdict before one window has passed.
    start: Instant,
    /// Each chunk of the last window: when it came, and its size.
    recent: VecDeque<(Instant, u64)>,
    /// The sum of `recent`'s sizes.
    sum: u64,
}

impl Rate {
    fn new(limits: &SourceLimits, start: Instant) -> Self {
        Rate {
            min_bytes: limits.min_bytes,
            window: limits.rate_window,
            start,
            recent: VecDeque::new(),
            sum: 0,
        }
    }

    /// Count `n` bytes that arrived at `now`, and forget what left the window.
    fn arrived(&mut self, now: Instant, n: u64) {
        self.recent.push_back((now, n));
        self.sum += n;
        while let Some(&(at, size)) = self.recent.front() {
            if at + self.window > now {
                break;
            }
            self.sum -= size;
            self.recent.pop_front();
        }
    }

    /// When fewer than the minimum will have arrived over the last window,
    /// should nothing more come; `None` when the check is off.
    fn fails_at(&self) -> Option<Instant> {
        if self.min_bytes == 0 {
            return None;
        }
        let mut sum = self.sum;
        let mut at = self.start + self.window;
        for &(came, size) in &self.recent {
            if sum < self.min_bytes {
                break;
            }
            sum -= size;
            at = at.max(came + self.window);
        }
        Some(at)
    }
}

/// Check `bytes` against `sha256` and decode them.
fn check(url: &str, sha256: &str, bytes: Vec<u8>) -> Result<String, FetchError> {
    let actual = hex::encode(Sha256::digest(&bytes));
    if !actual.eq_ignore_ascii_case(sha256) {
        return Err(FetchError::Mismatch {
            url: url.to_owned(),
            expected: sha256.to_ascii_lowercase(),
            actual,
        });
    }
    String::from_utf8(bytes).map_err(|_| FetchError::NotUtf8 {
        url: url.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::body::{Bytes, Incoming};
    use hyper::{Request, Response, StatusCode};
    use hyper_util::rt::TokioIo;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A loopback server that answers each request with the next of
    /// `answers` (the last one repeats), and counts the requests.
    async fn serve(answers: Vec<(u16, Vec<u8>)>) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!(
            "http://{}/manifest.yaml",
            listener.local_addr().expect("addr")
        );
        let count = Arc::new(AtomicUsize::new(0));
        let seen = count.clone();
        let answers = Arc::new(answers);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = seen.clone();
                let answers = answers.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                        let n = seen.fetch_add(1, Ordering::SeqCst);
                        let (status, body) = answers[n.min(answers.len() - 1)].clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                Response::builder()
                                    .status(StatusCode::from_u16(status).expect("status"))
                                    .body(Full::new(Bytes::from(body)))
                                    .expect("response"),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (url, count)
    }

    fn fetcher() -> Fetcher {
        limited(SourceLimits::default())
    }

    fn limited(limits: SourceLimits) -> Fetcher {
        Fetcher::new(limits).expect("client").with_backoff(Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(2),
        })
    }

    fn sha(text: &[u8]) -> String {
        hex::encode(Sha256::digest(text))
    }

    const TEXT: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";

    #[tokio::test]
    async fn a_matching_file_is_returned_after_a_retried_server_error() {
        let (url, count) = serve(vec![(503, Vec::new()), (200, TEXT.to_vec())]).await;
        let text = fetcher().manifest(&url, &sha(TEXT)).await.expect("fetched");
        assert_eq!(text.as_bytes(), TEXT);
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_changed_file_is_refused_once_without_retrying() {
        let (url, count) = serve(vec![(200, TEXT.to_vec())]).await;
        let pinned = sha(b"what was there before");
        match fetcher().manifest(&url, &pinned).await {
            Err(FetchError::Mismatch {
                expected, actual, ..
            }) => {
                assert_eq!(expected, pinned);
                assert_eq!(actual, sha(TEXT));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_missing_file_is_final_and_a_failing_server_is_tried_three_times() {
        let (url, count) = serve(vec![(404, Vec::new())]).await;
        let e = fetcher().manifest(&url, &sha(TEXT)).await.expect_err("404");
        assert!(
            matches!(e, FetchError::Status { status, .. } if status == 404),
            "{e}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1);
        let (url, count) = serve(vec![(500, Vec::new())]).await;
        fetcher().manifest(&url, &sha(TEXT)).await.expect_err("500");
        assert_eq!(count.load(Ordering::SeqCst), ATTEMPTS as usize);
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_not_read_past_it() {
        let big = vec![b'a'; (MAX_MANIFEST_BYTES + 1) as usize];
        let (url, _) = serve(vec![(200, big)]).await;
        let e = fetcher()
            .manifest(&url, &sha(TEXT))
            .await
            .expect_err("too large");
        assert!(matches!(e, FetchError::TooLarge { .. }), "{e}");
    }

    #[tokio::test]
    async fn nothing_listening_is_a_transport_error_naming_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}/x.yaml", listener.local_addr().expect("addr"));
        drop(listener);
        let e = fetcher()
            .manifest(&url, &sha(TEXT))
            .await
            .expect_err("refused");
        assert!(matches!(e, FetchError::Transport { .. }), "{e}");
        assert!(e.to_string().contains(&url), "{e}");
    }

    /// A loopback server that sends `head` on every connection, then the
    /// bytes of `body` one per `pace`, then holds the connection open.
    async fn trickle(head: &'static str, body: &'static [u8], pace: Duration) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/slow.yaml", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for b in body {
                        tokio::time::sleep(pace).await;
                        if stream.write_all(&[*b]).await.is_err() {
                            return;
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(600)).await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn a_server_that_trickles_fails_with_the_rate_error_long_before_the_deadline() {
        let body: &[u8] = &[b'a'; 1000];
        let url = trickle(
            "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n",
            body,
            Duration::from_secs(1),
        )
        .await;
        let limits = SourceLimits {
            deadline: Duration::from_secs(600),
            min_bytes: 64,
            rate_window: Duration::from_millis(500),
        };
        let started = std::time::Instant::now();
        let e = limited(limits)
            .manifest(&url, &sha(TEXT))
            .await
            .expect_err("too slow");
        assert!(started.elapsed() < Duration::from_secs(20), "{e}");
        assert!(
            matches!(e, FetchError::TooSlow { min_bytes: 64, .. }),
            "{e}"
        );
        let text = e.to_string();
        assert!(text.contains(&url), "{text}");
        assert!(
            text.contains("fewer than 64 bytes arrived in 0.5 s"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_at_the_deadline_naming_the_variable() {
        let url = trickle("", b"", Duration::ZERO).await;
        let limits = SourceLimits {
            deadline: Duration::from_millis(300),
            min_bytes: 0,
            rate_window: Duration::from_secs(10),
        };
        let started = std::time::Instant::now();
        let e = limited(limits)
            .manifest(&url, &sha(TEXT))
            .await
            .expect_err("deadline");
        assert!(started.elapsed() < Duration::from_secs(20), "{e}");
        assert!(matches!(e, FetchError::Deadline { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(&url), "{text}");
        assert!(text.contains("deadline of 0.3 s"), "{text}");
        assert!(text.contains("TALOSPROV_SOURCE_TIMEOUT"), "{text}");
    }

    #[tokio::test]
    async fn the_waits_between_retries_count_in_the_deadline() {
        let (url, count) = serve(vec![(503, Vec::new())]).await;
        let limits = SourceLimits {
            deadline: Duration::from_millis(500),
            ..SourceLimits::default()
        };
        let fetcher = Fetcher::new(limits).expect("client").with_backoff(Backoff {
            initial: Duration::from_secs(300),
            max: Duration::from_secs(300),
        });
        let started = std::time::Instant::now();
        let e = fetcher
            .manifest(&url, &sha(TEXT))
            .await
            .expect_err("deadline");
        assert!(started.elapsed() < Duration::from_secs(20), "{e}");
        let text = e.to_string();
        assert!(text.contains("before: cannot download"), "{text}");
        assert!(text.contains("503"), "{text}");
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_rate_fails_once_the_last_window_holds_too_little() {
        let t0 = Instant::now();
        let limits = SourceLimits {
            deadline: Duration::from_secs(120),
            min_bytes: 100,
            rate_window: Duration::from_secs(10),
        };
        let mut rate = Rate::new(&limits, t0);
        assert_eq!(rate.fails_at(), Some(t0 + Duration::from_secs(10)));
        rate.arrived(t0 + Duration::from_secs(1), 60);
        rate.arrived(t0 + Duration::from_secs(5), 60);
        // Once the first 60 leave the window, 60 < 100 are left.
        assert_eq!(rate.fails_at(), Some(t0 + Duration::from_secs(11)));
        rate.arrived(t0 + Duration::from_secs(12), 500);
        assert_eq!(rate.sum, 560);
        assert_eq!(rate.fails_at(), Some(t0 + Duration::from_secs(22)));
        let off = Rate::new(
            &SourceLimits {
                min_bytes: 0,
                ..limits
            },
            t0,
        );
        assert_eq!(off.fails_at(), None);
    }
}
