//! The Image Factory HTTP client: register a schematic (`POST /schematics`, retried after a
//! connection failure or a 5xx, as it is idempotent) and check that the factory computed the
//! same ID as we did. Source: image-factory
//! `internal/frontend/http/configuration.go` (`201 Created`, JSON `{"id", "schematic"}`).

use serde::Deserialize;
use std::time::Duration;

use talosprov_base::schematic::{Schematic, SchematicId};

/// How long one factory request may take before it fails.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How many times a registration is sent at most: the first, then retries
/// after a connection failure, a 429 or a 5xx (registering is idempotent: the
/// same schematic always gets the same ID).
pub const ATTEMPTS: u32 = 4;

/// The pause before the first retry; it doubles for each next one.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Retry pacing of a registration: [`FIRST_BACKOFF`] doubling, so the
/// [`ATTEMPTS`] attempts pause 0.5, 1 and 2 s.
pub const BACKOFF: talosprov_retry::Backoff = talosprov_retry::Backoff {
    initial: FIRST_BACKOFF,
    max: Duration::from_secs(8),
};

/// Errors talking to the Image Factory.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    /// The request could not be sent or the response not read.
    #[error("request to the Image Factory at {url} failed")]
    Request {
        /// The URL requested.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The factory answered with an error status.
    #[error("the Image Factory at {url} answered {status}: {body}")]
    Status {
        /// The URL requested.
        url: String,
        /// The HTTP status.
        status: reqwest::StatusCode,
        /// The response body, trimmed.
        body: String,
    },
    /// The response was not the expected JSON.
    #[error("the Image Factory at {url} sent an unexpected response: {body}")]
    Decode {
        /// The URL requested.
        url: String,
        /// The response body, trimmed.
        body: String,
    },
    /// The factory's ID differs from the one computed locally: the schematic would not be the
    /// one the nodes' installer references name.
    #[error(
        "the Image Factory registered the schematic as {theirs}, but talosprov computed {ours}; \
         the factory serialises schematics differently than expected, so image references would be wrong"
    )]
    IdMismatch {
        /// Our ID.
        ours: SchematicId,
        /// The factory's ID.
        theirs: String,
    },
}

/// A client for one Image Factory (e.g. `https://factory.talos.dev`).
#[derive(Debug, Clone)]
pub struct FactoryClient {
    base: url::Url,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct CreateResponse {
    id: String,
}

impl FactoryClient {
    /// A client for the factory at `base`, with [`REQUEST_TIMEOUT`] per request.
    ///
    /// # Errors
    /// When the HTTP client cannot be built (TLS roots unavailable).
    pub fn new(base: url::Url) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("talosprov/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(FactoryClient { base, http })
    }

    /// The factory's base URL.
    pub fn base(&self) -> &url::Url {
        &self.base
    }

    /// Register `schematic` with the factory (idempotent: the same schematic always gets the
    /// same ID) and return its ID after checking it equals [`Schematic::id`].
    ///
    /// # Errors
    /// [`FactoryError`] for transport failures and 5xx answers still there after [`ATTEMPTS`]
    /// attempts, other non-2xx answers, unexpected bodies, and an ID that differs from ours.
    pub async fn register(&self, schematic: &Schematic) -> Result<SchematicId, FactoryError> {
        let url = format!("{}/schematics", self.base.as_str().trim_end_matches('/'));
        let mut attempt = 1;
        let (status, body) = loop {
            let answer = self.post_schematic(&url, schematic).await;
            let retry = match &answer {
                Ok((status, _)) => {
                    *status == reqwest::StatusCode::TOO_MANY_REQUESTS
                        || (status.is_server_error()
                            && *status != reqwest::StatusCode::NOT_IMPLEMENTED)
                }
                Err(_) => true,
            };
            if !retry || attempt >= ATTEMPTS {
                break answer?;
            }
            let cause = match &answer {
                Ok((status, body)) => format!("HTTP {status}: {}", body.trim()),
                Err(FactoryError::Request { source, .. }) => {
                    talosprov_retry::transport_cause(source)
                }
                Err(other) => other.to_string(),
            };
            let delay = BACKOFF.delay(attempt - 1);
            attempt += 1;
            talosprov_retry::notify(&talosprov_retry::Notice {
                what: format!("Image Factory: register the schematic ({url})"),
                cause,
                attempt,
                delay,
            });
            tokio::time::sleep(delay).await;
        };
        if !status.is_success() {
            return Err(FactoryError::Status {
                url,
                status,
                body: body.trim().to_string(),
            });
        }
        let parsed: CreateResponse =
            serde_json::from_str(&body).map_err(|_| FactoryError::Decode {
                url: url.clone(),
                body: body.trim().chars().take(200).collect(),
            })?;
        let ours = schematic.id();
        if parsed.id != ours.as_str() {
            return Err(FactoryError::IdMismatch {
                ours,
                theirs: parsed.id,
            });
        }
        Ok(ours)
    }

    /// One `POST /schematics`: the status and body, or the transport error.
    async fn post_schematic(
        &self,
        url: &str,
        schematic: &Schematic,
    ) -> Result<(reqwest::StatusCode, String), FactoryError> {
        let request_error = |source| FactoryError::Request {
            url: url.to_owned(),
            source,
        };
        let response = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/yaml")
            .body(schematic.to_yaml())
            .send()
            .await
            .map_err(request_error)?;
        let status = response.status();
        let body = response.text().await.map_err(request_error)?;
        Ok((status, body))
    }
}
