//! The transport: one reqwest client (rustls with ring) per Proxmox endpoint, built
//! from explicit [`Settings`]; API-token or ticket authentication; retries with
//! backoff within a deadline, on transient failures only (PVE's transient
//! answers, and connection failures where sending again is safe), each one
//! told to the task's [`crate::retry`] watcher.

use crate::error::{self, ProxmoxError};
use crate::request::{Method, Operation, Request};
use crate::settings::{Auth, Settings, Timeouts, normalize_endpoint};
use crate::tls::{self, CertificateRefusal, TlsMode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use talosprov_base::sensitive::Sensitive;
use tokio::time::Instant;

/// A logged-in ticket session.
struct Session {
    ticket: Sensitive,
    csrf: Sensitive,
}

/// The Proxmox VE API client. Cheap to share by reference; safe to use from many tasks.
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    auth: Auth,
    tls: TlsMode,
    timeouts: Timeouts,
    session: tokio::sync::Mutex<Option<Session>>,
    sent: AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Build the client; nothing is sent yet (a ticket login happens on first use).
    ///
    /// # Errors
    /// [`ProxmoxError::CaFile`] or [`ProxmoxError::Settings`] when TLS cannot be set up.
    pub fn new(settings: Settings) -> Result<Self, ProxmoxError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .timeout(settings.timeouts.request)
            .https_only(true)
            .user_agent(concat!("talosprov/", env!("CARGO_PKG_VERSION")));
        if let Some(config) = tls::client_config(&settings.tls)? {
            builder = builder.use_preconfigured_tls(config);
        }
        let http = builder
            .build()
            .map_err(|e| ProxmoxError::Settings(format!("HTTP client: {e}")))?;
        Ok(Client {
            http,
            endpoint: normalize_endpoint(&settings.endpoint)?,
            auth: settings.auth,
            tls: settings.tls,
            timeouts: settings.timeouts,
            session: tokio::sync::Mutex::new(None),
            sent: AtomicU64::new(0),
        })
    }

    /// Who the credentials are, as `pveum acl modify` names them (see
    /// [`Auth::grantee`]).
    pub fn grantee(&self) -> String {
        self.auth.grantee()
    }

    /// The deadlines this client was built with.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// How many HTTP requests this client has sent (logins and retries included).
    pub fn requests_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Send a request, retrying transient failures with backoff until the retry
    /// deadline; returns the answer's `data`.
    ///
    /// # Errors
    /// The mapped PVE error ([`error::from_answer`]); [`ProxmoxError::GaveUp`] with the
    /// last failure as source when transient failures outlast the deadline.
    pub async fn send(&self, req: &Request) -> Result<Value, ProxmoxError> {
        self.retrying(&req.op, || self.send_once(req)).await
    }

    /// [`Client::send`], then decode `data` into `T` leniently typed by the caller.
    ///
    /// # Errors
    /// As [`Client::send`], and [`ProxmoxError::Decode`] when `data` has another shape.
    pub async fn send_as<T: DeserializeOwned>(&self, req: &Request) -> Result<T, ProxmoxError> {
        let data = self.send(req).await?;
        serde_json::from_value(data).map_err(|e| ProxmoxError::Decode {
            op: req.op.clone(),
            detail: e.to_string(),
        })
    }

    /// Run `attempt` until it succeeds, fails for good, or transient failures outlast
    /// the retry deadline. Backoff starts at `first_backoff` and doubles up to `max_backoff`.
    ///
    /// # Errors
    /// The first non-transient error, or [`ProxmoxError::GaveUp`].
    pub async fn retrying<T, F, Fut>(
        &self,
        op: &Operation,
        mut attempt: F,
    ) -> Result<T, ProxmoxError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ProxmoxError>>,
    {
        let deadline = Instant::now() + self.timeouts.retry_deadline;
        let backoff = self.timeouts.backoff();
        let mut attempts = 0u32;
        loop {
            let delay = backoff.delay(attempts);
            attempts += 1;
            match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transient() => {
                    if Instant::now() + delay > deadline {
                        return Err(ProxmoxError::GaveUp {
                            op: op.clone(),
                            attempts,
                            deadline_secs: self.timeouts.retry_deadline.as_secs(),
                            last: Box::new(e),
                        });
                    }
                    talosprov_retry::notify(&talosprov_retry::Notice {
                        what: format!("Proxmox: {op}"),
                        cause: e.cause_text(),
                        attempt: attempts + 1,
                        delay,
                    });
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn send_once(&self, req: &Request) -> Result<Value, ProxmoxError> {
        let first = self.exchange(req).await;
        match (&self.auth, first) {
            // A ticket lives two hours: log in again once, then give up.
            (Auth::Password { .. }, Err(ProxmoxError::TokenRejected { .. })) => {
                *self.session.lock().await = None;
                self.exchange(req).await
            }
            (_, result) => result,
        }
    }

    async fn exchange(&self, req: &Request) -> Result<Value, ProxmoxError> {
        let url = format!("{}/api2/json{}", self.endpoint, req.path_and_query());
        let method = match req.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut builder = self.http.request(method, &url);
        match &self.auth {
            Auth::Token(token) => {
                builder = builder.header(reqwest::header::AUTHORIZATION, token.header());
            }
            Auth::Password { .. } => {
                let mut guard = self.session.lock().await;
                if guard.is_none() {
                    *guard = Some(self.login().await?);
                }
                if let Some(session) = guard.as_ref() {
                    builder = builder.header(
                        reqwest::header::COOKIE,
                        format!("PVEAuthCookie={}", session.ticket.expose()),
                    );
                    if req.method != Method::Get {
                        builder = builder.header("CSRFPreventionToken", session.csrf.expose());
                    }
                }
            }
        }
        if let Some(body) = req.body() {
            builder = builder
                .header(
                    reqwest::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded",
                )
                .body(body);
        }
        tracing::trace!(method = %req.method, path = %req.path, "proxmox request");
        self.sent.fetch_add(1, Ordering::Relaxed);
        let response = builder
            .send()
            .await
            .map_err(|source| self.transport_error(&req.op, req.method, source))?;
        let status = response.status();
        let reason = status.canonical_reason().unwrap_or("").to_string();
        let text = response
            .text()
            .await
            .map_err(|source| self.transport_error(&req.op, req.method, source))?;
        if !status.is_success() {
            let mut err = error::from_answer(&req.op, status.as_u16(), &reason, &text);
            if let (Auth::Password { .. }, ProxmoxError::TokenRejected { credential, .. }) =
                (&self.auth, &mut err)
            {
                *credential = "login ticket";
            }
            return Err(err);
        }
        let value: Value = serde_json::from_str(&text).map_err(|e| ProxmoxError::Decode {
            op: req.op.clone(),
            detail: format!("not JSON ({e})"),
        })?;
        Ok(value.get("data").cloned().unwrap_or(Value::Null))
    }

    /// The error for a request that got no (whole) answer: a refused server
    /// certificate is [`ProxmoxError::Tls`], saying what to set; anything else
    /// is [`ProxmoxError::Transport`], safe to send again when the connection
    /// was never made or the request is a GET.
    fn transport_error(
        &self,
        op: &Operation,
        method: Method,
        source: reqwest::Error,
    ) -> ProxmoxError {
        if let Some(refusal) = certificate_refusal(&source) {
            let (problem, remedy) = refusal.explain(&self.tls);
            return ProxmoxError::Tls {
                op: op.clone(),
                endpoint: self.endpoint.clone(),
                problem,
                remedy,
                refusal,
            };
        }
        let retry_safe = method == Method::Get || source.is_connect();
        ProxmoxError::Transport {
            op: op.clone(),
            endpoint: self.endpoint.clone(),
            source,
            retry_safe,
        }
    }

    /// `POST /access/ticket`: a ticket and its CSRF token.
    async fn login(&self) -> Result<Session, ProxmoxError> {
        let Auth::Password { username, password } = &self.auth else {
            return Err(ProxmoxError::Settings(
                "login needs a user name and password".into(),
            ));
        };
        let username = if username.contains('@') {
            username.clone()
        } else {
            format!("{username}@pam")
        };
        let op = Operation::new("log in");
        let url = format!("{}/api2/json/access/ticket", self.endpoint);
        let body = crate::request::encode_pairs(&[
            ("username".into(), username.clone()),
            ("password".into(), password.expose().to_string()),
        ]);
        self.sent.fetch_add(1, Ordering::Relaxed);
        let response = self
            .http
            .post(&url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|source| self.transport_error(&op, Method::Post, source))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let err = error::from_answer(
                &op,
                status.as_u16(),
                status.canonical_reason().unwrap_or(""),
                &text,
            );
            return Err(ProxmoxError::LoginFailed {
                username,
                message: err
                    .message()
                    .map_or_else(|| err.to_string(), str::to_string),
            });
        }
        let value: Value = serde_json::from_str(&text).map_err(|e| ProxmoxError::Decode {
            op: op.clone(),
            detail: format!("not JSON ({e})"),
        })?;
        let data = value.get("data").cloned().unwrap_or(Value::Null);
        if data.get("NeedTFA").and_then(crate::lenient::bool_of) == Some(true) {
            return Err(ProxmoxError::LoginFailed {
                username,
                message: "the user has two-factor authentication; use an API token (PROXMOX_VE_API_TOKEN)".into(),
            });
        }
        let field = |k: &str| data.get(k).and_then(Value::as_str).map(Sensitive::new);
        match (field("ticket"), field("CSRFPreventionToken")) {
            (Some(ticket), Some(csrf)) => Ok(Session { ticket, csrf }),
            _ => Err(ProxmoxError::Decode {
                op,
                detail: "the login answer has no ticket or CSRFPreventionToken".into(),
            }),
        }
    }
}

/// The certificate refusal in a request's error chain, if the TLS handshake
/// failed on the server's certificate. (rustls's error sits inside an
/// `io::Error`, whose payload is not its `source()`.)
fn certificate_refusal(e: &reqwest::Error) -> Option<CertificateRefusal> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = current {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return CertificateRefusal::of(tls).cloned();
        }
        // An io::Error's source() is its payload's source: step into the
        // payload itself (it may be another io::Error around rustls's).
        current = match err.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}
