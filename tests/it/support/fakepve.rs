//! The fakepve harness: starts `fakepve_launch.py` (fakepve 0.5.0 from PyPI, with the
//! gaps filled) on a 127.0.0.x address with a CA and server certificate made here,
//! waits for it under a timeout, talks to it over stdin/stdout, and kills it on drop.

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use talosprov_proxmox::client::Client;
use talosprov_proxmox::settings::{ApiToken, Auth, Settings, Timeouts};
use talosprov_proxmox::tls::{Fingerprint, TlsMode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

/// The token every harness registers with full rights (root@pam's).
pub const ROOT_TOKEN_ID: &str = "root@pam!talosprov";
/// Its secret.
pub const ROOT_TOKEN_SECRET: &str = "5d2a2b7e-6c1f-4a39-9d0e-3f6c2a1b8e70";
/// The password of root@pam in the fake, for ticket login.
pub const ROOT_PASSWORD: &str = "fake-root-password";

static NEXT_HOST: AtomicU32 = AtomicU32::new(0);

/// How to start the fake.
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// Nodes besides `pve1`.
    pub nodes: Vec<String>,
    /// Storage options merged into fakepve's storages (`local`, `local-lvm` exist).
    pub storages: Value,
    /// Extra API tokens: `(user@realm!name, secret)`.
    pub tokens: Vec<(String, String)>,
    /// ACL grants: `(user or token, path, privileges)`; the first turns ACL checks on.
    pub grants: Vec<(String, String, Vec<String>)>,
    /// PVE seconds to real seconds; 0 runs tasks to completion before answering.
    pub time_scale: f64,
    /// Fetch download-url URLs (loopback only) instead of pretending.
    pub fetch_downloads: bool,
    /// Serve a self-signed certificate (its own issuer, `CA:FALSE`, as a PVE
    /// node's own certificate can be) instead of one a test CA issued;
    /// [`FakePve::ca_file`] then holds that certificate itself.
    pub self_signed: bool,
    /// With `self_signed`: mark it `CA:TRUE`, as `openssl req -x509` does by default.
    pub self_signed_is_ca: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            nodes: Vec::new(),
            // fakepve counts each allocation against `avail` as a thick storage
            // does: room for every VM the tests make, as the lab has it.
            storages: lab_storages(),
            tokens: Vec::new(),
            grants: Vec::new(),
            time_scale: 0.0,
            fetch_downloads: true,
            self_signed: false,
            self_signed_is_ca: false,
        }
    }
}

/// The storages `examples/lab/run.sh` gives fakepve
/// (`examples/lab/fakepve-storages.json`): `local` for images, `local-lvm`
/// with 10 TiB for the VMs.
pub fn lab_storages() -> Value {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/lab/fakepve-storages.json");
    let text = std::fs::read_to_string(&file).expect("examples/lab/fakepve-storages.json");
    serde_json::from_str(&text).expect("the lab's storages are JSON")
}

/// A running fakepve.
pub struct FakePve {
    /// `https://127.0.0.x:<port>`.
    pub url: String,
    /// The CA that signed the server certificate (PEM file).
    pub ca_file: PathBuf,
    /// SHA-256 of the server certificate.
    pub fingerprint: Fingerprint,
    child: Child,
    stdin: Mutex<ChildStdin>,
    stdout: Mutex<Lines<BufReader<ChildStdout>>>,
    _dir: tempfile::TempDir,
}

/// The Python that has fakepve: `TALOSPROV_TEST_PYTHON`, else `target/venv/bin/python`.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TALOSPROV_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    assert!(
        venv.exists(),
        "fakepve is not installed: run tests/run.sh, which installs fakepve 0.5.0 into target/venv \
         and sets TALOSPROV_TEST_PYTHON"
    );
    venv
}

/// A CA, and a server certificate for `host` signed by it: (CA PEM, cert PEM, key PEM, cert DER).
fn certificates(host: &str) -> (String, String, String, Vec<u8>) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fakepve test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("server key");
    let params = CertificateParams::new(vec![host.to_string()]).expect("server params");
    let cert = params.signed_by(&key, &issuer).expect("server cert");
    (
        ca_cert.pem(),
        cert.pem(),
        key.serialize_pem(),
        cert.der().to_vec(),
    )
}

/// A self-signed server certificate for `host` (its own issuer; `CA:FALSE`, or
/// `CA:TRUE` with `is_ca`):
/// (cert PEM, cert PEM, key PEM, cert DER), the first being what a client trusts.
fn self_signed_certificate(host: &str, is_ca: bool) -> (String, String, String, Vec<u8>) {
    let key = KeyPair::generate().expect("server key");
    let mut params = CertificateParams::new(vec![host.to_string()]).expect("server params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, host.to_string());
    params.is_ca = if is_ca {
        IsCa::Ca(BasicConstraints::Unconstrained)
    } else {
        IsCa::ExplicitNoCa
    };
    let cert = params.self_signed(&key).expect("self-signed cert");
    (
        cert.pem(),
        cert.pem(),
        key.serialize_pem(),
        cert.der().to_vec(),
    )
}

impl FakePve {
    /// Start the fake and wait (at most 30 s) until it listens.
    pub async fn start(opts: FakeOptions) -> Self {
        let n = NEXT_HOST.fetch_add(1, Ordering::Relaxed) + std::process::id();
        let host = format!("127.0.{}.{}", (n / 250) % 250, n % 250 + 2);
        let (ca_pem, cert_pem, key_pem, der) = if opts.self_signed {
            self_signed_certificate(&host, opts.self_signed_is_ca)
        } else {
            certificates(&host)
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca_pem).expect("write CA");
        std::fs::write(dir.path().join("server.pem"), cert_pem).expect("write cert");
        std::fs::write(dir.path().join("server.key"), key_pem).expect("write key");
        let mut tokens = serde_json::Map::new();
        tokens.insert(ROOT_TOKEN_ID.into(), ROOT_TOKEN_SECRET.into());
        for (id, secret) in &opts.tokens {
            tokens.insert(id.clone(), secret.clone().into());
        }
        let mut nodes = vec!["pve1".to_string()];
        nodes.extend(opts.nodes.iter().cloned());
        let config = json!({
            "host": host,
            "port": 0,
            "cert": dir.path().join("server.pem"),
            "key": dir.path().join("server.key"),
            "password": ROOT_PASSWORD,
            "tokens": tokens,
            "grants": opts.grants,
            "nodes": nodes,
            "storages": opts.storages,
            "time_scale": opts.time_scale,
            "fetch_downloads": opts.fetch_downloads,
        });
        let launcher =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/fakepve_launch.py");
        let mut child = Command::new(python())
            .arg(launcher)
            .arg(config.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the fakepve launcher");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("fakepve did not report its address within 30 s")
            .expect("read the launcher's output")
            .expect("the launcher exited before listening (see its stderr above)");
        let ready: Value = serde_json::from_str(&ready).expect("a JSON ready line");
        FakePve {
            url: ready["url"].as_str().expect("url").to_string(),
            ca_file,
            fingerprint: Fingerprint::of_der(&der),
            child,
            stdin: Mutex::new(stdin),
            stdout: Mutex::new(stdout),
            _dir: dir,
        }
    }

    /// Short deadlines, so fault tests run in seconds.
    pub fn timeouts() -> Timeouts {
        Timeouts {
            retry_deadline: Duration::from_secs(2),
            task_deadline: Duration::from_secs(10),
            first_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
            request: Duration::from_secs(10),
        }
    }

    /// Settings with the root token and the CA file.
    pub fn settings(&self) -> Settings {
        Settings {
            endpoint: self.url.clone(),
            auth: Auth::Token(
                ApiToken::parse(&format!("{ROOT_TOKEN_ID}={ROOT_TOKEN_SECRET}")).expect("token"),
            ),
            tls: TlsMode::CaFile(self.ca_file.clone()),
            timeouts: Self::timeouts(),
        }
    }

    /// A client with the root token, verifying the CA.
    pub fn client(&self) -> Client {
        Client::new(self.settings()).expect("client")
    }

    /// A client with another token.
    pub fn client_with_token(&self, id: &str, secret: &str) -> Client {
        let mut s = self.settings();
        s.auth = Auth::Token(ApiToken::parse(&format!("{id}={secret}")).expect("token"));
        Client::new(s).expect("client")
    }

    /// Send a control command; panics when the launcher reports an error.
    pub async fn cmd(&self, command: Value) -> Value {
        let mut stdin = self.stdin.lock().await;
        let mut stdout = self.stdout.lock().await;
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("send a command");
        stdin.flush().await.expect("flush");
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("no answer within 30 s")
            .expect("read")
            .expect("launcher gone");
        let answer: Value = serde_json::from_str(&line).expect("JSON answer");
        assert_eq!(answer["ok"], true, "command {command} failed: {answer}");
        answer["result"].clone()
    }

    /// Every request the fake received: (method, path, body).
    pub async fn requests(&self) -> Vec<(String, String, String)> {
        let r = self.cmd(json!({"cmd": "requests"})).await;
        r["requests"]
            .as_array()
            .expect("list")
            .iter()
            .map(|x| {
                (
                    x[0].as_str().unwrap_or("").to_string(),
                    x[1].as_str().unwrap_or("").to_string(),
                    x[2].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// How many requests the fake received.
    pub async fn request_total(&self) -> usize {
        self.cmd(json!({"cmd": "requests", "since": 1_000_000}))
            .await["total"]
            .as_u64()
            .expect("total") as usize
    }

    /// How many requests match `method` and end with `suffix`.
    pub async fn count(&self, method: &str, suffix: &str) -> usize {
        self.requests()
            .await
            .iter()
            .filter(|(m, p, _)| m == method && p.ends_with(suffix))
            .count()
    }

    /// Wait (at most `secs`) until `count(method, suffix)` reaches `n`.
    pub async fn wait_for_requests(&self, method: &str, suffix: &str, n: usize, secs: u64) {
        let what = format!("{n} {method} ...{suffix} requests");
        super::wait::until(&what, Duration::from_secs(secs), async || {
            self.count(method, suffix).await >= n
        })
        .await;
    }

    /// A kill point: serve `count` more requests, then hold every later one
    /// unanswered until [`FakePve::release_held`]. Control commands do not
    /// count; requests made through the API by the test itself do.
    pub async fn hold_after(&self, count: usize) {
        self.cmd(json!({"cmd": "hold_after", "count": count})).await;
    }

    /// A kill point at a request: serve every request until one is `method`
    /// on a path ending in `suffix`, then hold it and every later one.
    pub async fn hold_at(&self, method: &str, suffix: &str) {
        self.cmd(json!({"cmd": "hold_at", "method": method, "suffix": suffix}))
            .await;
    }

    /// The requests the kill point holds, as `METHOD /path`.
    pub async fn held(&self) -> Vec<String> {
        let r = self.cmd(json!({"cmd": "held"})).await;
        r["held"]
            .as_array()
            .expect("list")
            .iter()
            .map(|x| x.as_str().unwrap_or("").to_string())
            .collect()
    }

    /// Open the kill point: the first held request is served when
    /// `serve_first` (as a request that reached PVE before its client died),
    /// and waited for; the others are dropped unserved.
    pub async fn release_held(&self, serve_first: bool) {
        self.cmd(json!({"cmd": "release_held", "serve_first": serve_first}))
            .await;
    }

    /// GET a path below /api2/json as root and return `data`.
    pub async fn get(&self, path: &str) -> Value {
        let client = self.client();
        let req = talosprov_proxmox::request::Request {
            method: talosprov_proxmox::request::Method::Get,
            path: path.to_string(),
            query: Vec::new(),
            form: Vec::new(),
            op: talosprov_proxmox::request::Operation::new(format!("test GET {path}")),
        };
        client.send(&req).await.expect("GET through the API")
    }
}

impl FakePve {
    /// DELETE a path below /api2/json as root (someone working in the web
    /// UI); returns `data`.
    pub async fn delete(&self, path: &str) -> Value {
        let client = self.client();
        let req = talosprov_proxmox::request::Request {
            method: talosprov_proxmox::request::Method::Delete,
            path: path.to_string(),
            query: Vec::new(),
            form: Vec::new(),
            op: talosprov_proxmox::request::Operation::new(format!("test DELETE {path}")),
        };
        client.send(&req).await.expect("DELETE through the API")
    }
}

impl Drop for FakePve {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
