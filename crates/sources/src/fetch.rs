//! A `url` add-on's manifest file, downloaded over HTTP(S), bounded in size,
//! and checked against the SHA-256 the topology pins before a byte of it is
//! used. Transport failures, 429 and 5xx answers are retried with the one
//! [`talosprov_retry::Backoff`] pacing; a digest that differs is never
//! retried (the file changed).

use std::time::Duration;

use sha2::{Digest, Sha256};
use talosprov_retry::{Backoff, Notice, notify, transport_cause};

/// The largest manifest file talosprov downloads, bytes (32 MiB: a bundle
/// of CRDs such as the Prometheus operator's is a few MiB).
pub const MAX_MANIFEST_BYTES: u64 = 32 * 1024 * 1024;

/// Attempts per download before a transport failure, 429 or 5xx is final.
pub const ATTEMPTS: u32 = 3;

/// How long one request may take, headers and body.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a manifest could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The HTTP client cannot be built (TLS roots unavailable).
    #[error("cannot set up the HTTP client")]
    Client(#[source] reqwest::Error),
    /// No answer: connection refused, reset, TLS failure, timeout; after
    /// [`ATTEMPTS`] attempts.
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
}

impl Fetcher {
    /// A fetcher with [`REQUEST_TIMEOUT`] per request and the default pacing.
    ///
    /// # Errors
    /// [`FetchError::Client`] when the HTTP client cannot be built.
    pub fn new() -> Result<Self, FetchError> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("talosprov/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(FetchError::Client)?;
        Ok(Fetcher {
            http,
            backoff: Backoff::default(),
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
    /// [`FetchError`]: transport failures and 429/5xx answers still there
    /// after [`ATTEMPTS`] attempts, other non-2xx answers, a body over
    /// [`MAX_MANIFEST_BYTES`], a digest that differs, a file that is not
    /// UTF-8.
    pub async fn manifest(&self, url: &str, sha256: &str) -> Result<String, FetchError> {
        let mut attempt = 1;
        loop {
            let (retryable, error) = match self.once(url).await {
                Ok(bytes) => return check(url, sha256, bytes),
                Err(e) => e,
            };
            if !retryable || attempt >= ATTEMPTS {
                return Err(error);
            }
            let delay = self.backoff.delay(attempt - 1);
            attempt += 1;
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
        let mut response = self.http.get(url).send().await.map_err(|e| transport(&e))?;
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
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
            if (body.len() + chunk.len()) as u64 > MAX_MANIFEST_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
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
        Fetcher::new().expect("client").with_backoff(Backoff {
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
}
