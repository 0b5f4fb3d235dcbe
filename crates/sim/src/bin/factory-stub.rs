//! A loopback stand-in for the Talos Image Factory, for the lab and tests:
//! `POST /schematics` answers the ID the factory would compute for the
//! schematic, and `GET /image/<id>/<version>/nocloud-amd64.qcow2` serves a
//! small qcow2-looking file. It prints its URL on stdout, then serves until killed.

use std::convert::Infallible;
use std::net::SocketAddr;

use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use talosprov_sim::schematic::schematic_id;
use tokio::net::TcpListener;

/// Size of the served image, bytes.
const IMAGE_BYTES: usize = 64 * 1024;

/// Image Factory stand-in on a loopback address.
#[derive(Debug, Parser)]
#[command(name = "factory-stub")]
struct Args {
    /// Address to listen on (loopback only); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    eprintln!("factory-stub: {method} {path}");
    if method == Method::POST && path == "/schematics" {
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return Ok(reply(StatusCode::BAD_REQUEST, e.to_string())),
        };
        return Ok(match schematic_id(&body) {
            Ok(id) => reply(StatusCode::CREATED, format!("{{\"id\":\"{id}\"}}")),
            Err(e) => reply(StatusCode::BAD_REQUEST, e),
        });
    }
    if method == Method::GET
        && path.starts_with("/image/")
        && path.ends_with("/nocloud-amd64.qcow2")
    {
        let mut image = vec![0u8; IMAGE_BYTES];
        image[..4].copy_from_slice(b"QFI\xfb");
        return Ok(reply(StatusCode::OK, image));
    }
    Ok(reply(StatusCode::NOT_FOUND, "not found"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.listen.ip().is_loopback(),
        "factory-stub listens on loopback addresses only"
    );
    let listener = TcpListener::bind(args.listen).await?;
    println!("http://{}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::spawn(async move {
            let service = hyper::service::service_fn(handle);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
