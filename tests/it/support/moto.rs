//! moto's S3 server (PyPI `moto[server]`, which tests/run.sh installs into the
//! venv), started on loopback by `moto_launch.py` with the buckets a test asks
//! for, driven over stdin/stdout, and killed on drop. It can answer every
//! request with an S3 error (403, 500) to test how talosprov refuses.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use super::fakepve::python;

/// A running moto S3 server.
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    _child: Child,
    stdin: Mutex<ChildStdin>,
    stdout: Mutex<Lines<BufReader<ChildStdout>>>,
}

impl Moto {
    /// Start moto with `buckets` created.
    pub async fn start(buckets: &[&str]) -> Moto {
        let launcher =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/moto_launch.py");
        let config = json!({"host": "127.0.0.1", "buckets": buckets});
        let mut child = Command::new(python())
            .arg(launcher)
            .arg(config.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the moto launcher");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), stdout.next_line())
            .await
            .expect("moto did not report its address within 60 s")
            .expect("read the launcher's output")
            .expect(
                "the moto launcher exited before listening (see its stderr above; \
                 tests/run.sh installs moto[server] into target/venv)",
            );
        let ready: Value = serde_json::from_str(&ready).expect("a JSON ready line");
        Moto {
            url: ready["url"].as_str().expect("url").to_owned(),
            _child: child,
            stdin: Mutex::new(stdin),
            stdout: Mutex::new(stdout),
        }
    }

    /// The `AWS_*` variables that point an S3 client here.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.url.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "talosprov-test"),
            ("AWS_SECRET_ACCESS_KEY", "talosprov-test-secret"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    async fn cmd(&self, command: Value) -> Value {
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

    /// Answer every later request with HTTP `status` and S3 error `code`.
    pub async fn fail_with(&self, status: u16, code: &str) {
        self.cmd(json!({"fault": {"status": status, "code": code}}))
            .await;
    }

    /// Serve requests again.
    pub async fn heal(&self) {
        self.cmd(json!({"fault": null})).await;
    }

    /// The objects of `bucket` with their sizes, as moto holds them.
    pub async fn objects(&self, bucket: &str) -> BTreeMap<String, u64> {
        let r = self.cmd(json!({"objects": bucket})).await;
        serde_json::from_value(r["objects"].clone()).expect("objects")
    }

    /// One object's bytes.
    pub async fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        let r = self.cmd(json!({"get": [bucket, key]})).await;
        base64::engine::general_purpose::STANDARD
            .decode(r["body"].as_str().expect("body"))
            .expect("base64")
    }

    /// The keys of `bucket`'s multipart uploads in progress (neither
    /// completed nor aborted).
    pub async fn uploads(&self, bucket: &str) -> Vec<String> {
        let r = self.cmd(json!({"uploads": bucket})).await;
        serde_json::from_value(r["uploads"].clone()).expect("uploads")
    }

    /// Every request so far, `METHOD /path`.
    pub async fn requests(&self) -> Vec<String> {
        let r = self.cmd(json!({"requests": true})).await;
        serde_json::from_value(r["requests"].clone()).expect("requests")
    }
}
