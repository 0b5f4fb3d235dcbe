//! A loopback stand-in for GitLab's Terraform state API
//! (`/api/v4/projects/:id/terraform/state/:name` and `.../lock`): basic auth,
//! lock conflicts answered 409 with the holder's LockInfo, the `?ID=` check on
//! save, 204 for an empty state, 422 for a state without `serial`, and faults.
//! With `keep_lock_info` set it keeps each lock's LockInfo as sent, `Who`,
//! `Pid` and all, as a plain Terraform http backend server does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use md5::{Digest, Md5};
use tokio::sync::Notify;

/// The state path the server serves.
pub const STATE_PATH: &str = "/api/v4/projects/1/terraform/state/lab";
/// The user GitLab CI authenticates as.
pub const USERNAME: &str = "gitlab-ci-token";
/// The job token the server accepts.
pub const TOKEN: &str = "glcbt-64_fake-job-token-9f8e7d";

/// What the server holds.
#[derive(Debug, Default)]
pub struct Stored {
    /// The state document, as last saved.
    pub state: Option<Vec<u8>>,
    /// The lock: the holder's LockInfo JSON as GitLab answers it.
    pub lock: Option<serde_json::Value>,
    /// Every request: `METHOD path?query`.
    pub requests: Vec<String>,
}

/// A running server; stops when dropped.
pub struct GitlabState {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The stored state, lock and request log.
    pub stored: Arc<Mutex<Stored>>,
    /// Saves to accept and then drop the connection without answering
    /// (the response is lost, as when a runner's network blips).
    pub drop_saves: Arc<AtomicUsize>,
    /// When set, state reads never answer (a hung server), and `stalled` is
    /// notified as each one arrives.
    pub stall_reads: Arc<AtomicBool>,
    /// Notified when a read stalls.
    pub stalled: Arc<Notify>,
    /// When set, a lock keeps the LockInfo as sent instead of GitLab's
    /// (its `Who` is the GitLab user, and `Pid` is dropped).
    pub keep_lock_info: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GitlabState {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GitlabState {
    /// Start on 127.0.0.1, port 0.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let stored = Arc::new(Mutex::new(Stored::default()));
        let drop_saves = Arc::new(AtomicUsize::new(0));
        let stall_reads = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(Notify::new());
        let keep_lock_info = Arc::new(AtomicBool::new(false));
        let faults = Faults {
            drop_saves: drop_saves.clone(),
            stall_reads: stall_reads.clone(),
            stalled: stalled.clone(),
            keep_lock_info: keep_lock_info.clone(),
        };
        let s = stored.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (s, f) = (s.clone(), faults.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (s, f) = (s.clone(), f.clone());
                        async move { handle(req, s, f).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        GitlabState {
            base: format!("http://{addr}"),
            stored,
            drop_saves,
            stall_reads,
            stalled,
            keep_lock_info,
            task,
        }
    }

    /// The state URL.
    pub fn address(&self) -> String {
        format!("{}{STATE_PATH}", self.base)
    }

    /// The lock URL.
    pub fn lock_address(&self) -> String {
        format!("{}{STATE_PATH}/lock", self.base)
    }

    /// The `TF_HTTP_*` variables GitLab's OpenTofu tooling sets.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("TF_HTTP_ADDRESS", self.address()),
            ("TF_HTTP_LOCK_ADDRESS", self.lock_address()),
            ("TF_HTTP_UNLOCK_ADDRESS", self.lock_address()),
            ("TF_HTTP_LOCK_METHOD", "POST".to_owned()),
            ("TF_HTTP_UNLOCK_METHOD", "DELETE".to_owned()),
            ("TF_HTTP_USERNAME", USERNAME.to_owned()),
            ("TF_HTTP_PASSWORD", TOKEN.to_owned()),
            ("TF_HTTP_RETRY_WAIT_MIN", "0".to_owned()),
            ("TF_HTTP_RETRY_WAIT_MAX", "0".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The stored state bytes.
    pub fn state(&self) -> Option<Vec<u8>> {
        self.stored.lock().unwrap().state.clone()
    }

    /// The current lock holder's ID.
    pub fn lock_id(&self) -> Option<String> {
        let s = self.stored.lock().unwrap();
        s.lock
            .as_ref()
            .map(|l| l["ID"].as_str().unwrap_or_default().to_owned())
    }

    /// The request log.
    pub fn requests(&self) -> Vec<String> {
        self.stored.lock().unwrap().requests.clone()
    }
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .body(Full::new(body.into()))
        .unwrap()
}

fn authorized<B>(req: &Request<B>) -> bool {
    let expected = base64::engine::general_purpose::STANDARD.encode(format!("{USERNAME}:{TOKEN}"));
    req.headers()
        .get("Authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Basic {expected}"))
}

/// The `ID` query parameter.
fn query_id(query: Option<&str>) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "ID")
        .map(|(_, v)| v.into_owned())
}

/// Dropping the connection: hyper closes it when the service fails.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped on purpose")
    }
}

impl std::error::Error for DropConnection {}

/// The faults the tests switch on.
#[derive(Clone)]
struct Faults {
    drop_saves: Arc<AtomicUsize>,
    stall_reads: Arc<AtomicBool>,
    stalled: Arc<Notify>,
    keep_lock_info: Arc<AtomicBool>,
}

async fn handle(
    req: Request<Incoming>,
    stored: Arc<Mutex<Stored>>,
    faults: Faults,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let line = match &query {
        Some(q) => format!("{method} {path}?{q}"),
        None => format!("{method} {path}"),
    };
    stored.lock().unwrap().requests.push(line);
    if !authorized(&req) {
        return Ok(reply(
            StatusCode::UNAUTHORIZED,
            r#"{"message":"401 Unauthorized"}"#,
        ));
    }
    let md5 = req
        .headers()
        .get("Content-MD5")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if let Some(md5) = md5 {
        let actual = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
        if actual != md5 {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                r#"{"message":"Content-MD5 mismatch"}"#,
            ));
        }
    }
    if method == hyper::Method::GET && faults.stall_reads.load(Ordering::SeqCst) {
        faults.stalled.notify_one();
        std::future::pending::<()>().await;
    }
    let lock_path = format!("{STATE_PATH}/lock");
    let mut s = stored.lock().unwrap();
    Ok(match (method.as_str(), path.as_str()) {
        ("GET", p) if p == STATE_PATH => match &s.state {
            Some(state) => reply(StatusCode::OK, state.clone()),
            None => reply(StatusCode::NO_CONTENT, Bytes::new()),
        },
        ("POST", p) if p == STATE_PATH => {
            if body.is_empty() {
                return Ok(reply(StatusCode::NO_CONTENT, Bytes::new()));
            }
            let held = s
                .lock
                .as_ref()
                .map(|l| l["ID"].as_str().unwrap_or_default().to_owned());
            if held != query_id(query.as_deref()) {
                return Ok(reply(StatusCode::CONFLICT, Bytes::new()));
            }
            let doc: serde_json::Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(_) => return Ok(reply(StatusCode::BAD_REQUEST, Bytes::new())),
            };
            if !doc.get("serial").is_some_and(serde_json::Value::is_u64) {
                return Ok(reply(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    r#"{"message":"serial is missing"}"#,
                ));
            }
            s.state = Some(body.to_vec());
            let dropped = faults
                .drop_saves
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if dropped {
                return Err(DropConnection);
            }
            reply(StatusCode::OK, "{}")
        }
        ("POST", p) if p == lock_path => {
            let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if let Some(holder) = &s.lock {
                return Ok(reply(StatusCode::CONFLICT, holder.to_string()));
            }
            let Some(id) = asked["ID"].as_str().filter(|id| !id.is_empty()) else {
                return Ok(reply(
                    StatusCode::BAD_REQUEST,
                    r#"{"error":"ID is missing"}"#,
                ));
            };
            if faults.keep_lock_info.load(Ordering::SeqCst) {
                s.lock = Some(asked.clone());
                return Ok(reply(StatusCode::OK, asked.to_string()));
            }
            // GitLab answers with the stored lock: Who is the GitLab user.
            let holder = serde_json::json!({
                "ID": id,
                "Operation": asked["Operation"],
                "Info": asked["Info"],
                "Who": USERNAME,
                "Version": asked["Version"],
                "Created": asked["Created"],
                "Path": asked["Path"],
            });
            s.lock = Some(holder.clone());
            reply(StatusCode::OK, holder.to_string())
        }
        ("DELETE", p) if p == lock_path => {
            let asked: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let held = s
                .lock
                .as_ref()
                .map(|l| l["ID"].as_str().unwrap_or_default().to_owned());
            match (asked["ID"].as_str(), held) {
                (Some(a), Some(h)) if a != h => reply(StatusCode::CONFLICT, Bytes::new()),
                _ => {
                    s.lock = None;
                    reply(StatusCode::OK, Bytes::new())
                }
            }
        }
        _ => reply(StatusCode::NOT_FOUND, r#"{"message":"404 Not Found"}"#),
    })
}
