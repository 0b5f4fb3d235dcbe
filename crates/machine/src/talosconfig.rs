//! The talosconfig: talosctl's client config with one context named after the cluster and an
//! admin client certificate (Ed25519, `O=os:admin`, ClientAuth only, 365 days) from the OS CA.
//! Sources: Talos `pkg/machinery/client/config/config.go`, `generate/secrets/ca.go`.

use rand::{CryptoRng, RngCore};
use rcgen::{DnType, KeyUsagePurpose};
use time::{Duration, OffsetDateTime};

use super::pki::{ClientSpec, PkiError, issue_client_certificate};
use super::secrets::SecretsBundle;
use talosprov_base::talosconfig::Talosconfig;

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
    /// How long the certificate is valid: [`ADMIN_CERTIFICATE_VALIDITY`] for the state's,
    /// shorter for one issued to a person (`output talosconfig --ttl`).
    pub lifetime: Duration,
}

/// A talosconfig for `input`, with a new admin client certificate from the OS CA.
///
/// # Errors
/// [`PkiError`] when the OS CA cannot be read or cannot sign (it must be Ed25519 or P-256).
pub fn generate<R: RngCore + CryptoRng>(
    input: &TalosconfigInput<'_>,
    rng: &mut R,
) -> Result<Talosconfig, PkiError> {
    let now = input.now.replace_nanosecond(0).unwrap_or(input.now);
    let spec = ClientSpec {
        subject: vec![(DnType::OrganizationName, ADMIN_ROLE)],
        not_before: now,
        not_after: now + input.lifetime,
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
