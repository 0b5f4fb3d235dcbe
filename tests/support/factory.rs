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

fn schematic_of(body: &[u8]) -> Option<Schematic> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_slice(body).ok()?;
    let list = |v: Option<&serde_yaml_ng::Value>| -> Vec<String> {
        v.and_then(|v| v.as_sequence())
            .map(|s| {
                s.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let c = doc.get("customization");
    Some(Schematic {
        extensions: list(
            c.and_then(|c| c.get("systemExtensions"))
                .and_then(|s| s.get("officialExtensions")),
        ),
        kernel_args: list(c.and_then(|c| c.get("extraKernelArgs"))),
    })
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
            match schematic_of(&body) {
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
