//! A loopback Image Factory stand-in: `POST /schematics` answers the ID the
//! factory computes (our own `Schematic::id` of the parsed body), `GET
//! /image/<schematic>/<version>/nocloud-amd64.qcow2` a small qcow2-looking file,
//! anything else 404; it records every path asked, so no test reaches the real
//! factory.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};
use talosprov_base::schematic::Schematic;
use tokio::net::TcpListener;

/// Size of the served image, bytes (64 KiB: the imported disk's size before resize).
pub const IMAGE_BYTES: usize = 64 * 1024;

/// The running stand-in; stops when dropped.
pub struct Factory {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    paths: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_owned();
    let (status, body): (StatusCode, Bytes) =
        if req.method() == Method::POST && path == "/schematics" {
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            match Schematic::from_yaml(&body).ok() {
                Some(s) => (
                    StatusCode::CREATED,
                    format!("{{\"id\":\"{}\"}}", s.id()).into(),
                ),
                None => (
                    StatusCode::BAD_REQUEST,
                    Bytes::from_static(b"bad schematic"),
                ),
            }
        } else if path.starts_with("/image/") && path.ends_with("/nocloud-amd64.qcow2") {
            let mut image = vec![0u8; IMAGE_BYTES];
            image[..4].copy_from_slice(b"QFI\xfb");
            (StatusCode::OK, image.into())
        } else {
            (StatusCode::NOT_FOUND, Bytes::new())
        };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    Ok(r)
}

impl Factory {
    /// Listen on 127.0.0.1 with a port the system picks.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let seen = seen.clone();
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    seen.lock().expect("lock").push(req.uri().path().to_owned());
                    handle(req)
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Factory { url, paths, task }
    }

    /// Every path requested so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.paths.lock().expect("lock").clone()
    }
}

impl Drop for Factory {
    fn drop(&mut self) {
        self.task.abort();
    }
}
