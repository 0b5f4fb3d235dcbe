//! Registering a schematic with the Image Factory, against a loopback fake of `POST
//! /schematics` that answers like the factory (201, `{"id", "schematic"}`) and records the
//! conversation.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use std::time::Duration;
use talosprov_base::schematic::Schematic;
use talosprov_factory::client::{FactoryClient, FactoryError};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How the fake answers.
#[derive(Clone, Copy)]
enum Answer {
    /// Like the factory: the ID is the SHA-256 of the (already canonical) body.
    Factory,
    /// A wrong ID, as a factory serialising differently would give.
    WrongId,
    /// A 400 with the factory's error text.
    BadRequest,
    /// The first request's connection is closed without an answer, the
    /// second gets a 503, the next ones are answered like the factory.
    FlakyTwice,
}

#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    body: String,
}

/// Start the fake on 127.0.0.1, port 0; every request is sent on the returned channel.
async fn fake_factory(answer: Answer) -> (url::Url, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            let served = served.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let tx = tx.clone();
                    let nth = served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async move {
                        let (parts, body) = req.into_parts();
                        let body =
                            String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec())
                                .unwrap();
                        let content_type = parts
                            .headers
                            .get(hyper::header::CONTENT_TYPE)
                            .map(|v| v.to_str().unwrap().to_string())
                            .unwrap_or_default();
                        let id = hex::encode(Sha256::digest(body.as_bytes()));
                        let _ = tx.send(Seen {
                            method: parts.method.to_string(),
                            path: parts.uri.path().to_string(),
                            content_type,
                            body: body.clone(),
                        });
                        let (status, text) = match answer {
                            Answer::FlakyTwice if nth == 0 => {
                                // An error from the service: hyper closes the
                                // connection without an answer.
                                return Err(std::io::Error::other("dropped on purpose"));
                            }
                            Answer::FlakyTwice if nth == 1 => {
                                (StatusCode::SERVICE_UNAVAILABLE, "upstream busy".to_string())
                            }
                            Answer::Factory | Answer::FlakyTwice => (
                                StatusCode::CREATED,
                                serde_json::json!({"id": id, "schematic": body}).to_string(),
                            ),
                            Answer::WrongId => (
                                StatusCode::CREATED,
                                serde_json::json!({"id": "0".repeat(64), "schematic": body})
                                    .to_string(),
                            ),
                            Answer::BadRequest => (
                                StatusCode::BAD_REQUEST,
                                "yaml: unmarshal errors: field bogus not found".to_string(),
                            ),
                        };
                        Ok::<_, std::io::Error>(
                            Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(text)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, rx)
}

fn qemu() -> Schematic {
    Schematic {
        extensions: vec!["siderolabs/qemu-guest-agent".into()],
        kernel_args: vec![],
    }
}

const DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn registering_posts_the_schematic_yaml_and_returns_the_matching_id() {
    let (url, mut seen) = fake_factory(Answer::Factory).await;
    let client = FactoryClient::new(url).unwrap();
    let id = tokio::time::timeout(DEADLINE, client.register(&qemu()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        id.as_str(),
        "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
    );
    let request = tokio::time::timeout(DEADLINE, seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/schematics");
    assert_eq!(request.content_type, "application/yaml");
    assert_eq!(
        request.body,
        "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/qemu-guest-agent\n"
    );
    assert!(seen.try_recv().is_err(), "exactly one request");
}

#[tokio::test]
async fn a_factory_id_that_differs_from_ours_is_a_clear_error() {
    let (url, _seen) = fake_factory(Answer::WrongId).await;
    let client = FactoryClient::new(url).unwrap();
    let err = tokio::time::timeout(DEADLINE, client.register(&qemu()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, FactoryError::IdMismatch { .. }), "{err:?}");
    insta::assert_snapshot!(err.to_string());
}

#[tokio::test]
async fn a_refused_schematic_reports_the_status_and_the_factory_message() {
    let (url, _seen) = fake_factory(Answer::BadRequest).await;
    let client = FactoryClient::new(url.clone()).unwrap();
    let err = tokio::time::timeout(DEADLINE, client.register(&qemu()))
        .await
        .unwrap()
        .unwrap_err();
    let text = err
        .to_string()
        .replace(url.as_str().trim_end_matches('/'), "http://FACTORY");
    insta::assert_snapshot!(text);
}

#[tokio::test]
async fn a_lost_connection_and_a_busy_factory_are_retried_and_each_retry_told() {
    let (url, mut seen) = fake_factory(Answer::FlakyTwice).await;
    let client = FactoryClient::new(url).unwrap();
    let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = told.clone();
    let watcher: talosprov_retry::Watcher =
        std::sync::Arc::new(move |n: &talosprov_retry::Notice| {
            sink.lock().unwrap().push(n.clone())
        });
    let id = tokio::time::timeout(
        DEADLINE,
        talosprov_retry::watched(watcher, client.register(&qemu())),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(id, qemu().id());
    let mut requests = 0;
    while seen.try_recv().is_ok() {
        requests += 1;
    }
    assert_eq!(requests, 3, "sent three times");
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(
        told[0]
            .what
            .starts_with("Image Factory: register the schematic"),
        "{:?}",
        told[0]
    );
    assert_eq!(told[1].cause, "HTTP 503 Service Unavailable: upstream busy");
}
