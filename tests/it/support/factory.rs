//! A loopback Image Factory stand-in for end-to-end tests: `POST /schematics`
//! answers the ID the factory computes (our own `Schematic::id` of the parsed
//! body), and images are served as a small qcow2-looking file.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use talosprov::factory::Schematic;
use tokio::net::TcpListener;

/// The running stand-in; stops when dropped.
pub struct Factory {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
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
            let mut image = vec![0u8; 64 * 1024];
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
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle))
                        .await;
                });
            }
        });
        Factory { url, task }
    }
}

impl Drop for Factory {
    fn drop(&mut self) {
        self.task.abort();
    }
}
