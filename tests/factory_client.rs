//! Registering a schematic with the Image Factory, against a loopback fake of `POST
//! /schematics` that answers like the factory (201, `{"id", "schematic"}`) and records the
//! conversation.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use std::time::Duration;
use talosprov::factory::{FactoryClient, FactoryError, Schematic};
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
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let tx = tx.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body =
                            String::from_utf8(body.collect().await?.to_bytes().to_vec()).unwrap();
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
                            Answer::Factory => (
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
                        Ok::<_, hyper::Error>(
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
