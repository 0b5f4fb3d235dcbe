//! The http backend: the Terraform http state protocol as GitLab serves it
//! (GET the state, POST it with `?ID=<lock>` and `Content-MD5`, LOCK/UNLOCK
//! with LockInfo JSON), with OpenTofu's retries. Follows OpenTofu
//! `internal/backend/remote-state/http/client.go` and GitLab's Terraform state API.

use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use md5::{Digest, Md5};
use reqwest::{Method, StatusCode, header};
use url::Url;

use super::backend::{Backend, BackendError};
use super::bounded::MAX_STATE_BYTES;
use super::holder::liveness;
use crate::backend::HttpError;
use talosprov_statefile::config::HttpBackendConfig;
use talosprov_statefile::lock::{HolderProcess, LockHeld, LockInfo, TakenOver};

/// The state behind a Terraform http endpoint (GitLab-managed state).
#[derive(Debug)]
pub struct HttpBackend {
    config: HttpBackendConfig,
    client: reqwest::Client,
    held: Mutex<Option<LockInfo>>,
}

/// One response, fully read.
struct Answer {
    status: StatusCode,
    md5: Option<String>,
    body: Vec<u8>,
}

impl HttpBackend {
    /// A backend for `config`, with its own HTTP client.
    ///
    /// # Errors
    /// [`HttpError::Client`] or [`HttpError::Method`].
    pub fn new(config: HttpBackendConfig) -> Result<Self, HttpError> {
        for m in [
            &config.update_method,
            &config.lock_method,
            &config.unlock_method,
        ] {
            method(m)?;
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("talosprov/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(HttpError::Client)?;
        Ok(HttpBackend {
            config,
            client,
            held: Mutex::new(None),
        })
    }

    /// Whether a lock address is configured (without one there is no locking,
    /// as in OpenTofu).
    pub fn locks(&self) -> bool {
        self.config.lock_address.is_some()
    }

    /// The wait before retry number `attempt + 1`: `retry_wait_min * 2^attempt`,
    /// at most `retry_wait_max` (go-retryablehttp's DefaultBackoff).
    pub fn backoff(&self, attempt: u32) -> Duration {
        talosprov_retry::Backoff {
            initial: self.config.retry_wait_min,
            max: self.config.retry_wait_max,
        }
        .delay(attempt)
    }

    /// Send one request, retrying connection errors, 429 and 5xx (but 501)
    /// up to `retry_max` times with [`HttpBackend::backoff`].
    async fn send(
        &self,
        what: &'static str,
        method: Method,
        url: &Url,
        body: Option<&[u8]>,
    ) -> Result<Answer, HttpError> {
        let mut attempt = 0u32;
        loop {
            let mut req = self.client.request(method.clone(), url.clone());
            if let Some(user) = &self.config.username {
                req = req.basic_auth(user, self.config.password.as_ref().map(|p| p.expose()));
            }
            if let Some(b) = body {
                let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(b));
                req = req
                    .header(header::CONTENT_TYPE, "application/json")
                    .header("Content-MD5", md5)
                    .body(b.to_vec());
            }
            let result = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let md5 = resp
                        .headers()
                        .get("Content-MD5")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    match bounded_body(resp, MAX_STATE_BYTES).await {
                        Ok(Ok(body)) => Ok(Answer { status, md5, body }),
                        Ok(Err(bytes)) => {
                            return Err(HttpError::TooLarge {
                                what,
                                method: method.to_string(),
                                url: without_credentials(url),
                                bytes,
                                limit: MAX_STATE_BYTES,
                            });
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            let retry = match &result {
                Ok(a) => {
                    a.status == StatusCode::TOO_MANY_REQUESTS
                        || (a.status.is_server_error() && a.status != StatusCode::NOT_IMPLEMENTED)
                }
                Err(e) => !e.is_builder(),
            };
            if !retry || attempt >= self.config.retry_max {
                return result.map_err(|source| HttpError::Transport {
                    what,
                    method: method.to_string(),
                    url: url.to_string(),
                    attempts: attempt + 1,
                    source,
                });
            }
            tracing::debug!(%method, %url, attempt, "state backend request failed, retrying");
            tokio::time::sleep(self.backoff(attempt)).await;
            attempt += 1;
        }
    }

    fn unexpected(what: &'static str, method: Method, url: &Url, a: &Answer) -> HttpError {
        if matches!(a.status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return HttpError::Auth {
                what,
                method: method.to_string(),
                url: url.to_string(),
                status: a.status,
            };
        }
        let text = String::from_utf8_lossy(&a.body);
        let text = text.trim();
        let detail = if text.is_empty() {
            String::new()
        } else {
            format!(": {}", text.chars().take(200).collect::<String>())
        };
        HttpError::Status {
            what,
            method: method.to_string(),
            url: url.to_string(),
            status: a.status,
            detail,
        }
    }
}

/// The body of `resp`, read as it streams in and never past `limit` bytes
/// ([`MAX_STATE_BYTES`]): `Ok(Err(bytes))` when it is longer (its
/// `Content-Length`, or the limit plus one), with nothing more read.
async fn bounded_body(
    mut resp: reqwest::Response,
    limit: u64,
) -> Result<Result<Vec<u8>, u64>, reqwest::Error> {
    if let Some(n) = resp.content_length().filter(|n| *n > limit) {
        return Ok(Err(n));
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if (body.len() + chunk.len()) as u64 > limit {
            return Ok(Err(limit + 1));
        }
        // Grown to the limit at most: doubling past it would reserve twice the limit.
        if body.capacity() < body.len() + chunk.len() {
            let cap = usize::try_from(limit).unwrap_or(usize::MAX);
            let grown = (body.capacity() * 2).max(body.len() + chunk.len()).min(cap);
            body.reserve_exact(grown.saturating_sub(body.len()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

/// `url` without a user name or password, for messages.
fn without_credentials(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.to_string()
}

fn method(m: &str) -> Result<Method, HttpError> {
    Method::from_bytes(m.as_bytes()).map_err(|_| HttpError::Method(m.to_owned()))
}

impl Backend for HttpBackend {
    fn describe(&self) -> String {
        without_credentials(&self.config.address)
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        let url = &self.config.address;
        let what = "read the state";
        let a = self.send(what, Method::GET, url, None).await?;
        match a.status {
            StatusCode::OK => {}
            // 404: no such state. 204: GitLab's "empty state", a state its
            // lock endpoint created and nothing ever saved. (GitLab answers 204
            // too when a saved version's file is missing from its storage;
            // that cannot be told apart here, which is why a run that would
            // generate secrets first checks the nodes for an existing cluster.)
            StatusCode::NO_CONTENT | StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(Self::unexpected(what, Method::GET, url, &a).into()),
        }
        if a.body.iter().all(u8::is_ascii_whitespace) {
            return Err(HttpError::EmptyBody {
                url: self.describe(),
            }
            .into());
        }
        if let Some(expected) = &a.md5 {
            let actual = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&a.body));
            if &actual != expected {
                return Err(HttpError::Md5Mismatch {
                    url: url.to_string(),
                }
                .into());
            }
        }
        Ok(Some(a.body))
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        let mut url = self.config.address.clone();
        if let Some(held) = self.held.lock().expect("lock state poisoned").as_ref() {
            url.query_pairs_mut().append_pair("ID", &held.id);
        }
        let m = method(&self.config.update_method)?;
        let what = "save the state";
        let a = self.send(what, m.clone(), &url, Some(document)).await?;
        match a.status {
            StatusCode::OK | StatusCode::CREATED | StatusCode::NO_CONTENT => Ok(()),
            StatusCode::CONFLICT | StatusCode::LOCKED => {
                Err(locked(&a.body).unwrap_or_else(|| Self::unexpected(what, m, &url, &a).into()))
            }
            _ => Err(Self::unexpected(what, m, &url, &a).into()),
        }
    }

    async fn lock(&self, info: &LockInfo) -> Result<Option<TakenOver>, BackendError> {
        if self.config.lock_address.is_none() {
            return Ok(None);
        }
        let taken_over = match self.try_lock(info).await? {
            None => None,
            // The server keeps the holder's host and pid (GitLab does not), and
            // that process is gone from this host: release its lock with its
            // ID, as `force-unlock` would, and take it once more.
            Some(held) if held.process == HolderProcess::Gone => {
                self.release(&held.holder.id, &held.holder.to_json())
                    .await?;
                if let Some(again) = self.try_lock(info).await? {
                    return Err(BackendError::Locked(Box::new(again)));
                }
                Some(TakenOver {
                    holder: held.holder,
                })
            }
            Some(held) => return Err(BackendError::Locked(Box::new(held))),
        };
        *self.held.lock().expect("lock state poisoned") = Some(info.clone());
        Ok(taken_over)
    }

    async fn unlock(&self, id: &str) -> Result<(), BackendError> {
        if self.config.unlock_address.is_none() {
            return Ok(());
        }
        let held = self.held.lock().expect("lock state poisoned").clone();
        let body = match &held {
            Some(h) if h.id == id => h.to_json(),
            Some(h) => {
                return Err(HttpError::LockMismatch {
                    requested: id.to_owned(),
                    held: h.id.clone(),
                }
                .into());
            }
            // force-unlock: only the ID is known (as OpenTofu sends it).
            None => {
                self.refuse_a_running_holder(id).await?;
                LockInfo {
                    id: id.to_owned(),
                    ..LockInfo::default()
                }
                .to_json()
            }
        };
        self.release(id, &body).await
    }

    fn restore_hint(&self) -> Option<String> {
        Some(format!(
            "restore it from an earlier version the server keeps (GitLab keeps each one: GET \
             {}/versions/<serial> with the same credentials): save the last good one back as \
             the state, then run the command again",
            self.describe().trim_end_matches('/')
        ))
    }
}

impl HttpBackend {
    /// Ask for the lock once: `None` when taken, else the holder, with
    /// whether its process runs where the server kept enough to tell.
    async fn try_lock(&self, info: &LockInfo) -> Result<Option<LockHeld>, BackendError> {
        let Some(url) = &self.config.lock_address else {
            return Ok(None);
        };
        let m = method(&self.config.lock_method)?;
        let what = "lock the state";
        let a = self
            .send(what, m.clone(), url, Some(&info.to_json()))
            .await?;
        match a.status {
            StatusCode::OK => Ok(None),
            StatusCode::CONFLICT | StatusCode::LOCKED => {
                let holder = serde_json::from_slice::<LockInfo>(&a.body).ok();
                // A retried lock whose first attempt got through finds itself.
                if holder.as_ref().is_some_and(|h| h.id == info.id) {
                    return Ok(None);
                }
                let holder = holder.unwrap_or_default();
                Ok(Some(LockHeld {
                    process: liveness(&holder),
                    holder,
                }))
            }
            _ => Err(Self::unexpected(what, m, url, &a).into()),
        }
    }

    /// Send the unlock request for lock `id` with `body`.
    async fn release(&self, id: &str, body: &[u8]) -> Result<(), BackendError> {
        let Some(url) = &self.config.unlock_address else {
            return Ok(());
        };
        let m = method(&self.config.unlock_method)?;
        let what = "unlock the state";
        let a = self.send(what, m.clone(), url, Some(body)).await?;
        match a.status {
            StatusCode::OK | StatusCode::NO_CONTENT => {
                let mut held = self.held.lock().expect("lock state poisoned");
                if held.as_ref().is_some_and(|h| h.id == id) {
                    *held = None;
                }
                Ok(())
            }
            StatusCode::CONFLICT | StatusCode::LOCKED => {
                Err(locked(&a.body).unwrap_or_else(|| {
                    HttpError::UnlockRefused {
                        requested: id.to_owned(),
                    }
                    .into()
                }))
            }
            _ => Err(Self::unexpected(what, m, url, &a).into()),
        }
    }

    /// Before `force-unlock` releases lock `id`, learn its holder the only way
    /// the protocol allows, by asking for the lock: refuse when the server
    /// says the holder runs on this host. A lock that was free is given back
    /// at once, and the state was not locked.
    async fn refuse_a_running_holder(&self, id: &str) -> Result<(), BackendError> {
        if self.config.lock_address.is_none() {
            return Ok(());
        }
        let probe = LockInfo {
            id: uuid::Uuid::new_v4().to_string(),
            operation: "force-unlock".to_owned(),
            who: format!(
                "{}@{}",
                super::holder::user_name(),
                super::holder::host_name()
            ),
            pid: Some(std::process::id()),
            ..LockInfo::default()
        };
        match self.try_lock(&probe).await? {
            None => {
                self.release(&probe.id, &probe.to_json()).await?;
                Err(HttpError::NotLocked {
                    url: self.describe(),
                }
                .into())
            }
            Some(held) if held.holder.id == id && held.process == HolderProcess::Running => {
                Err(BackendError::HolderRunning(Box::new(held)))
            }
            Some(_) => Ok(()),
        }
    }
}

/// A lock conflict from a 409/423 body carrying the holder's LockInfo.
fn locked(body: &[u8]) -> Option<BackendError> {
    let holder: LockInfo = serde_json::from_slice(body).ok()?;
    Some(BackendError::Locked(Box::new(LockHeld {
        process: liveness(&holder),
        holder,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min: u64, max: u64) -> HttpBackendConfig {
        HttpBackendConfig {
            address: Url::parse("http://user:pw@127.0.0.1:9/state").unwrap(),
            update_method: "POST".to_owned(),
            lock_address: None,
            unlock_address: None,
            lock_method: "LOCK".to_owned(),
            unlock_method: "UNLOCK".to_owned(),
            username: None,
            password: None,
            retry_max: 2,
            retry_wait_min: Duration::from_secs(min),
            retry_wait_max: Duration::from_secs(max),
        }
    }

    #[test]
    fn backoff_doubles_from_min_up_to_max() {
        let b = HttpBackend::new(config(1, 30)).unwrap();
        let waits: Vec<u64> = (0..7).map(|n| b.backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(b.backoff(200), Duration::from_secs(30));
    }

    #[test]
    fn description_hides_url_credentials() {
        let b = HttpBackend::new(config(1, 1)).unwrap();
        assert_eq!(b.describe(), "http://127.0.0.1:9/state");
    }

    /// A loopback server that answers every connection with `head`, then
    /// writes `chunk` (chunked encoding) until the client goes away.
    async fn endless(head: &'static str, chunk: Option<Vec<u8>>) -> Url {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/state", listener.local_addr().unwrap())).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let chunk = chunk.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let Some(chunk) = chunk else {
                        // Holds the connection open, as a stalled server would.
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    };
                    let frame =
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
                    while stream.write_all(&frame).await.is_ok() {}
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_not_read_past_it() {
        let client = reqwest::Client::new();
        let url = endless(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Some(vec![b'x'; 4096]),
        )
        .await;
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(bounded_body(resp, 100_000).await.unwrap(), Err(100_001));
        let url = endless(
            "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n",
            None,
        )
        .await;
        let resp = client.get(url).send().await.unwrap();
        assert_eq!(
            bounded_body(resp, MAX_STATE_BYTES).await.unwrap(),
            Err(999_999_999_999)
        );
    }

    #[tokio::test]
    async fn a_state_answer_over_the_limit_is_an_error_naming_the_url_not_the_password() {
        let url = endless(
            "HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n",
            None,
        )
        .await;
        let mut c = config(1, 1);
        c.address = url.clone();
        c.address.set_username("user").unwrap();
        c.address.set_password(Some("hunter2")).unwrap();
        let e = HttpBackend::new(c).unwrap().get().await.unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&format!("GET {url}")), "{text}");
        assert!(text.contains("999999999999 bytes or more"), "{text}");
        assert!(text.contains("limit of 256 MiB"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn invalid_methods_are_refused_up_front() {
        let mut c = config(1, 1);
        c.lock_method = "LO CK".to_owned();
        assert!(matches!(HttpBackend::new(c), Err(HttpError::Method(_))));
    }
}
