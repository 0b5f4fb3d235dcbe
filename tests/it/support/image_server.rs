//! A loopback HTTP server standing in for the Image Factory: it answers
//! `GET /image/<schematic>/<version>/nocloud-amd64.qcow2` with a small qcow2-looking
//! file and records every path asked, so no test reaches the real factory.

use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Size of the served image, bytes (64 KiB: the imported disk's size before resize).
pub const IMAGE_BYTES: usize = 64 * 1024;

/// The running server; stops when dropped.
pub struct ImageServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ImageServer {
    /// Listen on 127.0.0.1 with a port the system picks.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                    let found =
                        path.starts_with("/image/") && path.ends_with("/nocloud-amd64.qcow2");
                    seen.lock().expect("lock").push(path);
                    let mut body = vec![0u8; IMAGE_BYTES];
                    body[..4].copy_from_slice(b"QFI\xfb");
                    let (status, body) = if found {
                        ("200 OK", body)
                    } else {
                        ("404 Not Found", Vec::new())
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(&body).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        ImageServer { url, paths, task }
    }

    /// Every path requested so far.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().expect("lock").clone()
    }
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
