//! The talosconfig: talosctl's client config with one context named after the cluster and an
//! admin client certificate (Ed25519, `O=os:admin`, ClientAuth only, 365 days) from the OS CA.
//! Sources: Talos `pkg/machinery/client/config/config.go`, `generate/secrets/ca.go`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::{CryptoRng, RngCore};
use rcgen::{DnType, KeyUsagePurpose};
use serde_yaml_ng::{Mapping, Value};
use time::{Duration, OffsetDateTime};

use super::pki::{CertAndKey, ClientSpec, PkiError, issue_client_certificate};
use super::secrets::SecretsBundle;
use super::yaml::{Flavour, to_string};

/// Validity of the admin client certificate: 365 days
/// (`constants.TalosAPIDefaultCertificateValidityDuration`).
pub const ADMIN_CERTIFICATE_VALIDITY: Duration = Duration::days(365);

/// The role talosprov's client certificate carries (apid reads roles from Subject O).
pub const ADMIN_ROLE: &str = "os:admin";

/// What the talosconfig holds.
#[derive(Debug, Clone)]
pub struct TalosconfigInput<'a> {
    /// Context name: the cluster name.
    pub context: String,
    /// Talos API endpoints: the control-plane IPs (or names).
    pub endpoints: Vec<String>,
    /// Default target nodes: every node IP.
    pub nodes: Vec<String>,
    /// The cluster's secrets (the OS CA signs the client certificate).
    pub secrets: &'a SecretsBundle,
    /// Start of the certificate's validity.
    pub now: OffsetDateTime,
}

/// A talosconfig with one context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Talosconfig {
    /// The context name (the cluster name).
    pub context: String,
    /// `endpoints` (always written, possibly `[]`).
    pub endpoints: Vec<String>,
    /// `nodes` (left out when empty).
    pub nodes: Vec<String>,
    /// The OS CA certificate, PEM.
    pub ca: String,
    /// The admin client certificate and key, PEM.
    pub client: CertAndKey,
}

impl Talosconfig {
    /// Build a talosconfig, issuing a new admin client certificate from the OS CA.
    ///
    /// # Errors
    /// [`PkiError`] when the OS CA cannot be read or cannot sign (it must be Ed25519 or P-256).
    pub fn generate<R: RngCore + CryptoRng>(
        input: &TalosconfigInput<'_>,
        rng: &mut R,
    ) -> Result<Self, PkiError> {
        let now = input.now.replace_nanosecond(0).unwrap_or(input.now);
        let spec = ClientSpec {
            subject: vec![(DnType::OrganizationName, ADMIN_ROLE)],
            not_before: now,
            not_after: now + ADMIN_CERTIFICATE_VALIDITY,
            key_usages: vec![KeyUsagePurpose::DigitalSignature],
        };
        let client = issue_client_certificate(&input.secrets.certs.os, &spec, rng)?;
        Ok(Talosconfig {
            context: input.context.clone(),
            endpoints: input.endpoints.clone(),
            nodes: input.nodes.clone(),
            ca: input.secrets.certs.os.crt.clone(),
            client,
        })
    }

    /// The file text in talosctl's format (go-yaml `Marshal`): `context`, then `contexts` with
    /// `endpoints`, `nodes`, and `ca`/`crt`/`key` as standard base64 of PEM. Write it with
    /// mode 0600.
    pub fn to_yaml(&self) -> String {
        let list = |v: &[String]| Value::Sequence(v.iter().map(|s| s.as_str().into()).collect());
        let b64 = |s: &str| Value::String(STANDARD.encode(s.as_bytes()));
        let mut ctx = Mapping::new();
        ctx.insert("endpoints".into(), list(&self.endpoints));
        if !self.nodes.is_empty() {
            ctx.insert("nodes".into(), list(&self.nodes));
        }
        ctx.insert("ca".into(), b64(&self.ca));
        ctx.insert("crt".into(), b64(&self.client.crt));
        ctx.insert("key".into(), b64(self.client.key.expose()));
        let mut contexts = Mapping::new();
        contexts.insert(self.context.as_str().into(), Value::Mapping(ctx));
        let mut doc = Mapping::new();
        doc.insert("context".into(), self.context.as_str().into());
        doc.insert("contexts".into(), Value::Mapping(contexts));
        to_string(&Value::Mapping(doc), Flavour::Marshal)
    }
}
