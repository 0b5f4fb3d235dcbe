//! One Kubernetes object an add-on renders, as apply sends it, and the digest
//! that tells whether it changed (the plan compares digests, never bodies,
//! since a body may hold secrets).

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// One object an add-on renders, as apply sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredObject {
    /// `apiVersion`, such as `apps/v1`.
    pub api_version: String,
    /// The whole object as JSON, its namespace filled in. It may hold
    /// secrets (a Secret's data), so plans carry only its digest.
    pub body: Value,
    /// [`digest`] of `body`.
    pub digest: String,
    /// The add-ons its add-on depends on (`depends_on`): their objects are
    /// applied, and rolled out, first.
    pub after: Vec<String>,
}

impl DesiredObject {
    /// The object of `body` (JSON), with its digest.
    pub fn new(api_version: &str, body: Value, after: Vec<String>) -> DesiredObject {
        DesiredObject {
            api_version: api_version.to_owned(),
            digest: digest(&body),
            body,
            after,
        }
    }
}

/// Hex SHA-256 of `value`'s canonical JSON (object keys sorted at every
/// level), so that the order keys were written in is not a change.
pub fn digest(value: &Value) -> String {
    let bytes = serde_json::to_vec(&super::helm::canonical(value)).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}
