//! The transport: one reqwest client (rustls with ring) per Proxmox endpoint, built
//! from explicit settings; API-token or ticket authentication; retries with backoff
//! within a deadline, on transient failures only. Environment variables are read
//! only by [`Settings::from_lookup`], at the edge.

use crate::proxmox::Secret;
use crate::proxmox::error::{self, ProxmoxError};
use crate::proxmox::request::{Method, Operation, Request};
use crate::proxmox::tls::{self, Fingerprint, TlsMode};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// An API token `USER@REALM!TOKENID=SECRET`, sent as `Authorization: PVEAPIToken=...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The token ID, `user@realm!name`.
    pub id: String,
    /// The token secret (a UUID).
    pub secret: Secret,
}

impl ApiToken {
    /// Parse `USER@REALM!TOKENID=SECRET`, split at the last `=` as PVE does
    /// (pve-access-control `verify_token`).
    ///
    /// # Errors
    /// [`ProxmoxError::Settings`] when there is no `=`, no `@` or no `!` (the secret is not shown).
    pub fn parse(text: &str) -> Result<Self, ProxmoxError> {
        let text = text.trim();
        let text = text.strip_prefix("PVEAPIToken=").unwrap_or(text);
        let Some((id, secret)) = text.rsplit_once('=') else {
            return Err(ProxmoxError::Settings(
                "PROXMOX_VE_API_TOKEN must look like USER@REALM!TOKENID=SECRET (no '=' found)"
                    .into(),
            ));
        };
        let well_formed = id
            .split_once('@')
            .and_then(|(user, rest)| {
                rest.split_once('!')
                    .map(|(realm, name)| (user, realm, name))
            })
            .is_some_and(|(u, r, n)| !u.is_empty() && !r.is_empty() && !n.is_empty());
        if !well_formed || secret.is_empty() {
            return Err(ProxmoxError::Settings(format!(
                "PROXMOX_VE_API_TOKEN must look like USER@REALM!TOKENID=SECRET; the token ID '{id}' does not"
            )));
        }
        Ok(ApiToken {
            id: id.to_string(),
            secret: Secret::new(secret),
        })
    }

    fn header(&self) -> String {
        format!("PVEAPIToken={}={}", self.id, self.secret.expose())
    }
}

/// How the client authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// An API token (preferred; exempt from CSRF).
    Token(ApiToken),
    /// Ticket login with a user name and password; non-GET requests send the CSRF token.
    Password {
        /// `user@realm`; `@pam` is added when no realm is given.
        username: String,
        /// The password.
        password: Secret,
    },
}

/// Deadlines and backoff, in wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long transient failures of one request are retried.
    pub retry_deadline: Duration,
    /// How long one task (download, create, start...) may run.
    pub task_deadline: Duration,
    /// The first backoff delay; it doubles up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest backoff delay.
    pub max_backoff: Duration,
    /// Per HTTP request.
    pub request: Duration,
}

impl Default for Timeouts {
    /// 120 s of retries, 15 min per task, backoff 250 ms doubling to 5 s, 60 s per request.
    fn default() -> Self {
        Timeouts {
            retry_deadline: Duration::from_secs(120),
            task_deadline: Duration::from_secs(900),
            first_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            request: Duration::from_secs(60),
        }
    }
}

/// Everything a [`Client`] needs, explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `https://host:8006`, without `/api2/json`.
    pub endpoint: String,
    /// Credentials.
    pub auth: Auth,
    /// Certificate checking.
    pub tls: TlsMode,
    /// Deadlines and backoff.
    pub timeouts: Timeouts,
}

impl Settings {
    /// Settings from the topology's values and the environment, read through `lookup`
    /// (pass `|k| std::env::var(k).ok()`): `PROXMOX_VE_ENDPOINT` when the topology
    /// has no endpoint; `PROXMOX_VE_API_TOKEN`, else `PROXMOX_VE_USERNAME` and
    /// `PROXMOX_VE_PASSWORD`; `PROXMOX_VE_INSECURE=true`. TLS preference: CA file,
    /// then fingerprint, then insecure, then the system roots.
    ///
    /// # Errors
    /// [`ProxmoxError::Settings`] for a missing endpoint or credentials, a malformed
    /// token or fingerprint, or an endpoint that is not `https://`.
    pub fn from_lookup(
        endpoint: Option<&str>,
        ca_file: Option<&std::path::Path>,
        fingerprint: Option<&str>,
        insecure: bool,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ProxmoxError> {
        let endpoint = match endpoint {
            Some(e) => e.to_string(),
            None => lookup("PROXMOX_VE_ENDPOINT").ok_or_else(|| {
                ProxmoxError::Settings(
                    "no Proxmox endpoint: set proxmox.endpoint in the topology or PROXMOX_VE_ENDPOINT".into(),
                )
            })?,
        };
        let auth = if let Some(token) = lookup("PROXMOX_VE_API_TOKEN").filter(|t| !t.is_empty()) {
            Auth::Token(ApiToken::parse(&token)?)
        } else {
            match (lookup("PROXMOX_VE_USERNAME"), lookup("PROXMOX_VE_PASSWORD")) {
                (Some(username), Some(password)) => Auth::Password {
                    username,
                    password: Secret::new(password),
                },
                _ => {
                    return Err(ProxmoxError::Settings(
                        "no Proxmox credentials: set PROXMOX_VE_API_TOKEN (USER@REALM!TOKENID=SECRET), \
                         or PROXMOX_VE_USERNAME and PROXMOX_VE_PASSWORD"
                            .into(),
                    ));
                }
            }
        };
        let env_insecure = lookup("PROXMOX_VE_INSECURE").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
        });
        let tls = match (ca_file, fingerprint) {
            (Some(path), _) => TlsMode::CaFile(path.to_path_buf()),
            (None, Some(fp)) => TlsMode::Fingerprint(Fingerprint::parse(fp)?),
            (None, None) if insecure || env_insecure => TlsMode::Insecure,
            (None, None) => TlsMode::System,
        };
        Ok(Settings {
            endpoint: normalize_endpoint(&endpoint)?,
            auth,
            tls,
            timeouts: Timeouts::default(),
        })
    }

    /// [`Settings::from_lookup`] over the process environment.
    ///
    /// # Errors
    /// As [`Settings::from_lookup`].
    pub fn from_env(
        endpoint: Option<&str>,
        ca_file: Option<&std::path::Path>,
        fingerprint: Option<&str>,
        insecure: bool,
    ) -> Result<Self, ProxmoxError> {
        Self::from_lookup(endpoint, ca_file, fingerprint, insecure, |k| {
            std::env::var(k).ok()
        })
    }

    /// The warning to print for these settings: TLS verification off.
    pub fn warning(&self) -> Option<&'static str> {
        (self.tls == TlsMode::Insecure).then_some(tls::INSECURE_WARNING)
    }
}

/// `https://host:8006` from what a user writes (a trailing `/` or `/api2/json` is dropped).
///
/// # Errors
/// [`ProxmoxError::Settings`] when it is not an `https://` URL with a host.
pub fn normalize_endpoint(endpoint: &str) -> Result<String, ProxmoxError> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/api2/json").unwrap_or(trimmed);
    let url = url::Url::parse(trimmed)
        .map_err(|e| ProxmoxError::Settings(format!("endpoint '{endpoint}': {e}")))?;
    if url.scheme() != "https" || url.host_str().is_none() {
        return Err(ProxmoxError::Settings(format!(
            "endpoint '{endpoint}' must be an https:// URL such as https://pve.lan:8006"
        )));
    }
    Ok(trimmed.to_string())
}

/// A logged-in ticket session.
struct Session {
    ticket: Secret,
    csrf: Secret,
}

/// The Proxmox VE API client. Cheap to share by reference; safe to use from many tasks.
pub struct Client {
    http: reqwest::Client,
    endpoint: String,
    auth: Auth,
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
            timeouts: settings.timeouts,
            session: tokio::sync::Mutex::new(None),
            sent: AtomicU64::new(0),
        })
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
        let mut delay = self.timeouts.first_backoff;
        let mut attempts = 0u32;
        loop {
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
                    tracing::debug!(%op, attempts, ?delay, error = %e, "transient failure; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(self.timeouts.max_backoff);
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
            .map_err(|source| ProxmoxError::Transport {
                op: req.op.clone(),
                endpoint: self.endpoint.clone(),
                source,
            })?;
        let status = response.status();
        let reason = status.canonical_reason().unwrap_or("").to_string();
        let text = response
            .text()
            .await
            .map_err(|source| ProxmoxError::Transport {
                op: req.op.clone(),
                endpoint: self.endpoint.clone(),
                source,
            })?;
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
        let body = crate::proxmox::request::encode_pairs(&[
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
            .map_err(|source| ProxmoxError::Transport {
                op: op.clone(),
                endpoint: self.endpoint.clone(),
                source,
            })?;
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
        if data
            .get("NeedTFA")
            .and_then(crate::proxmox::lenient::bool_of)
            == Some(true)
        {
            return Err(ProxmoxError::LoginFailed {
                username,
                message: "the user has two-factor authentication; use an API token (PROXMOX_VE_API_TOKEN)".into(),
            });
        }
        let field = |k: &str| data.get(k).and_then(Value::as_str).map(Secret::new);
        match (field("ticket"), field("CSRFPreventionToken")) {
            (Some(ticket), Some(csrf)) => Ok(Session { ticket, csrf }),
            _ => Err(ProxmoxError::Decode {
                op,
                detail: "the login answer has no ticket or CSRFPreventionToken".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn token_splits_at_the_last_equals_sign() {
        let t = ApiToken::parse("root@pam!talosprov=3f1c-aa=bb").expect("parses");
        assert_eq!(t.id, "root@pam!talosprov=3f1c-aa");
        let t = ApiToken::parse("terraform@pve!tp=2c1f6e4a-0000-4000-8000-000000000001")
            .expect("parses");
        assert_eq!(t.id, "terraform@pve!tp");
        assert_eq!(
            t.header(),
            "PVEAPIToken=terraform@pve!tp=2c1f6e4a-0000-4000-8000-000000000001"
        );
    }

    #[test]
    fn malformed_token_is_refused_without_showing_the_secret() {
        let e = ApiToken::parse("root@pam:abc-secret").expect_err("no =");
        assert!(!e.to_string().contains("abc-secret"), "{e}");
        let e = ApiToken::parse("rootpam!x=very-secret").expect_err("no realm");
        assert!(!e.to_string().contains("very-secret"), "{e}");
    }

    #[test]
    fn settings_prefer_topology_endpoint_and_token() {
        let s = Settings::from_lookup(
            Some("https://pve.lan:8006/api2/json/"),
            None,
            None,
            false,
            env(&[
                ("PROXMOX_VE_ENDPOINT", "https://other:8006"),
                ("PROXMOX_VE_API_TOKEN", "root@pam!t=s3cret"),
                ("PROXMOX_VE_USERNAME", "root@pam"),
                ("PROXMOX_VE_PASSWORD", "pw"),
            ]),
        )
        .expect("valid");
        assert_eq!(s.endpoint, "https://pve.lan:8006");
        assert!(matches!(s.auth, Auth::Token(_)));
        assert_eq!(s.tls, TlsMode::System);
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn settings_fall_back_to_password_and_env_endpoint() {
        let s = Settings::from_lookup(
            None,
            None,
            None,
            false,
            env(&[
                ("PROXMOX_VE_ENDPOINT", "https://10.0.0.5:8006"),
                ("PROXMOX_VE_USERNAME", "root@pam"),
                ("PROXMOX_VE_PASSWORD", "pw"),
                ("PROXMOX_VE_INSECURE", "true"),
            ]),
        )
        .expect("valid");
        assert!(matches!(s.auth, Auth::Password { .. }));
        assert_eq!(s.tls, TlsMode::Insecure);
        assert!(s.warning().is_some());
    }

    #[test]
    fn ca_file_outranks_fingerprint_and_insecure() {
        let fp = "AB:CD:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB";
        let lookup = env(&[("PROXMOX_VE_API_TOKEN", "a@b!c=d")]);
        let s = Settings::from_lookup(
            Some("https://h:8006"),
            Some(std::path::Path::new("/etc/ca.pem")),
            Some(fp),
            true,
            &lookup,
        )
        .expect("valid");
        assert_eq!(s.tls, TlsMode::CaFile("/etc/ca.pem".into()));
        let s = Settings::from_lookup(Some("https://h:8006"), None, Some(fp), true, &lookup)
            .expect("valid");
        assert!(matches!(s.tls, TlsMode::Fingerprint(_)));
        assert_eq!(s.warning(), None);
    }

    #[test]
    fn missing_credentials_and_plain_http_are_refused() {
        let e = Settings::from_lookup(Some("https://h:8006"), None, None, false, env(&[]))
            .expect_err("no credentials");
        assert!(e.to_string().contains("PROXMOX_VE_API_TOKEN"), "{e}");
        let e = Settings::from_lookup(
            Some("http://h:8006"),
            None,
            None,
            false,
            env(&[("PROXMOX_VE_API_TOKEN", "a@b!c=d")]),
        )
        .expect_err("http");
        assert!(e.to_string().contains("https://"), "{e}");
    }
}
