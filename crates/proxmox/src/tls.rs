//! TLS for the Proxmox API, in the order of preference the topology offers: a CA
//! file (`proxmox.ca_file`, e.g. `/etc/pve/pve-root-ca.pem`), pinning of the
//! leaf certificate's SHA-256 fingerprint (`proxmox.fingerprint`, as
//! `GET /nodes/{node}/certificates/info` shows it), both at once, or insecure
//! (asked for only). A refused certificate is reported with its fingerprint and
//! the setting that would make it trusted.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why TLS settings cannot be used. The client turns it into
/// [`crate::ProxmoxError::Settings`] or [`crate::ProxmoxError::CaFile`], the
/// errors users see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsSetupError {
    /// A setting is malformed (a fingerprint that is not 32 bytes of hex) or
    /// rustls refused the configuration.
    #[error("invalid Proxmox settings: {0}")]
    Settings(String),
    /// The CA file cannot be read or holds no usable certificate.
    #[error("cannot use the CA file {path}: {detail}")]
    CaFile {
        /// The file, as given.
        path: String,
        /// Why.
        detail: String,
    },
}

/// How the server certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsMode {
    /// The system's trusted roots (an ACME or other public certificate).
    System,
    /// Trust only the certificates in this PEM file: CAs, with host-name checks;
    /// a self-signed server certificate in it is trusted as itself, like a pin.
    CaFile(PathBuf),
    /// Accept exactly the leaf certificate with this SHA-256 fingerprint.
    Fingerprint(Fingerprint),
    /// Both checks: the certificate must be trusted through the CA file (as
    /// [`TlsMode::CaFile`]) and have this fingerprint.
    CaFileAndFingerprint {
        /// The PEM file of CAs (or of the self-signed server certificate).
        ca_file: PathBuf,
        /// The SHA-256 fingerprint the server certificate must have.
        fingerprint: Fingerprint,
    },
    /// Accept any certificate. The caller prints [`INSECURE_WARNING`].
    Insecure,
}

/// The warning to print when TLS verification is off.
pub const INSECURE_WARNING: &str = "TLS certificate verification of the Proxmox API is off (insecure); \
     anyone on the network path can read the API token. Set proxmox.fingerprint or proxmox.ca_file instead.";

/// A SHA-256 certificate fingerprint (32 bytes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Parse `AB:CD:...` (32 colon-separated hex pairs, either case), or 64 hex digits.
    ///
    /// # Errors
    /// [`TlsSetupError::Settings`] when the text is not 32 bytes of hex.
    pub fn parse(text: &str) -> Result<Self, TlsSetupError> {
        let hexdigits: String = text.trim().chars().filter(|c| *c != ':').collect();
        let bytes = hex::decode(&hexdigits).map_err(|_| {
            TlsSetupError::Settings(format!(
                "fingerprint '{text}' is not hex (expected 32 colon-separated pairs such as AB:CD:..)"
            ))
        })?;
        let array: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            TlsSetupError::Settings(format!(
                "fingerprint '{text}' has {} bytes; a SHA-256 fingerprint has 32",
                b.len()
            ))
        })?;
        Ok(Fingerprint(array))
    }

    /// The fingerprint of a DER certificate.
    pub fn of_der(der: &[u8]) -> Self {
        Fingerprint(Sha256::digest(der).into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|b| format!("{b:02X}")).collect();
        f.write_str(&parts.join(":"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Why the Proxmox API's certificate was refused: what is wrong with it, and
/// its SHA-256 fingerprint (the value an operator can check and pin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateRefusal {
    /// The SHA-256 fingerprint of the certificate the server presented.
    pub fingerprint: Fingerprint,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a refused certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// No trusted CA issued it (nor is it a self-signed certificate of the CA file).
    UnknownIssuer,
    /// It does not name the endpoint's host; `detail` is the verifier's text.
    NotValidForName {
        /// The verifier's description (expected and presented names).
        detail: String,
    },
    /// It has expired, or is not valid yet; `detail` is the verifier's text.
    OutsideValidity {
        /// The verifier's description.
        detail: String,
    },
    /// Its fingerprint is not the pinned one.
    FingerprintMismatch {
        /// `proxmox.fingerprint`.
        pinned: Fingerprint,
    },
    /// Anything else the verifier refused (bad encoding, bad signature, ...).
    Other {
        /// The verifier's description.
        detail: String,
    },
}

impl fmt::Display for CertificateRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::UnknownIssuer => f.write_str("certificate not issued by a trusted CA"),
            Problem::NotValidForName { detail } => {
                write!(f, "certificate not valid for the host ({detail})")
            }
            Problem::OutsideValidity { detail } => {
                write!(f, "certificate outside its validity ({detail})")
            }
            Problem::FingerprintMismatch { pinned } => write!(
                f,
                "server certificate fingerprint {} does not match the pinned fingerprint {pinned}",
                self.fingerprint
            ),
            Problem::Other { detail } => write!(f, "certificate refused ({detail})"),
        }?;
        write!(f, " [SHA-256 {}]", self.fingerprint)
    }
}

impl std::error::Error for CertificateRefusal {}

impl CertificateRefusal {
    fn from_rustls(fingerprint: Fingerprint, e: &rustls::Error) -> Self {
        let problem = match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    Problem::UnknownIssuer
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Problem::NotValidForName {
                    detail: e.to_string(),
                },
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => Problem::OutsideValidity {
                    detail: e.to_string(),
                },
                _ => Problem::Other {
                    detail: e.to_string(),
                },
            },
            other => Problem::Other {
                detail: other.to_string(),
            },
        };
        CertificateRefusal {
            fingerprint,
            problem,
        }
    }

    fn into_rustls(self) -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(self))))
    }

    /// The refusal carried by a rustls error, when it is one of ours.
    pub fn of(e: &rustls::Error) -> Option<&CertificateRefusal> {
        match e {
            rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
                inner.downcast_ref::<CertificateRefusal>()
            }
            _ => None,
        }
    }

    /// What is wrong, and what to set, for an operator, given how `mode`
    /// checks certificates: `(problem, remedy)`, e.g. ("presented a certificate
    /// that no CA in proxmox.ca_file (ca.pem) issued", "set proxmox.ca_file to ...").
    pub fn explain(&self, mode: &TlsMode) -> (String, String) {
        let fp = &self.fingerprint;
        let pin_it = format!(
            "or pin this certificate with proxmox.fingerprint: \"{fp}\" once you have checked that \
             it is the fingerprint the Proxmox node shows under System > Certificates"
        );
        let trusted = match mode {
            TlsMode::CaFile(path) | TlsMode::CaFileAndFingerprint { ca_file: path, .. } => {
                format!("that no CA in proxmox.ca_file ({}) issued", path.display())
            }
            _ => "that no CA this system trusts issued (neither proxmox.ca_file nor \
                  proxmox.fingerprint is set)"
                .to_owned(),
        };
        let both = matches!(mode, TlsMode::CaFileAndFingerprint { .. });
        match &self.problem {
            Problem::UnknownIssuer => (
                format!("presented a certificate (SHA-256 {fp}) {trusted}"),
                if both {
                    "set proxmox.ca_file to the CA that issued it (on a Proxmox node: a copy of \
                     /etc/pve/pve-root-ca.pem); with proxmox.fingerprint set too, both must match"
                        .to_owned()
                } else {
                    format!(
                        "set proxmox.ca_file to the CA that issued it (on a Proxmox node: a copy of \
                         /etc/pve/pve-root-ca.pem, or the node's own certificate when it is \
                         self-signed), {pin_it}"
                    )
                },
            ),
            Problem::NotValidForName { detail } => (
                format!(
                    "presented a certificate (SHA-256 {fp}) that is not valid for its address: {detail}"
                ),
                if both {
                    "use an endpoint (proxmox.endpoint) with a name or address the certificate lists"
                        .to_owned()
                } else {
                    format!(
                        "use an endpoint (proxmox.endpoint) with a name or address the certificate \
                         lists, {pin_it}"
                    )
                },
            ),
            Problem::OutsideValidity { detail } => (
                format!("presented a certificate (SHA-256 {fp}) outside its validity: {detail}"),
                "renew the node's certificate (`pvecm updatecerts --force` on the node for its \
                 self-signed one) and check the clocks of this machine and the node"
                    .to_owned(),
            ),
            Problem::FingerprintMismatch { pinned } => (
                format!(
                    "presented a certificate with SHA-256 fingerprint {fp}, not the pinned \
                     proxmox.fingerprint {pinned}"
                ),
                "if the node's certificate was renewed, set proxmox.fingerprint to the new \
                 fingerprint shown under the node's System > Certificates; otherwise this is not \
                 the expected server"
                    .to_owned(),
            ),
            Problem::Other { detail } => (
                format!("presented a certificate (SHA-256 {fp}) that cannot be used: {detail}"),
                format!("set proxmox.ca_file to the CA that issued it, {pin_it}"),
            ),
        }
    }
}

/// The rustls client configuration for a mode: every mode goes through
/// [`ProxmoxVerifier`], so a refusal names the certificate's fingerprint.
/// Returns `Some` always (`Option` is kept for callers that fall back).
///
/// # Errors
/// [`TlsSetupError::CaFile`] when the CA file cannot be read or holds no usable
/// certificate.
pub fn client_config(mode: &TlsMode) -> Result<Option<rustls::ClientConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsSetupError::Settings(format!("TLS setup: {e}")))?;
    let verifier = match mode {
        TlsMode::System => ProxmoxVerifier {
            chain: Some(webpki(system_roots(), &provider)?),
            self_signed: Vec::new(),
            pinned: None,
            provider,
        },
        TlsMode::CaFile(path) => {
            let (roots, self_signed) = ca_file_roots(path)?;
            ProxmoxVerifier {
                chain: webpki_or_none(roots, &provider)?,
                self_signed,
                pinned: None,
                provider,
            }
        }
        TlsMode::CaFileAndFingerprint {
            ca_file,
            fingerprint,
        } => {
            let (roots, self_signed) = ca_file_roots(ca_file)?;
            ProxmoxVerifier {
                chain: webpki_or_none(roots, &provider)?,
                self_signed,
                pinned: Some(*fingerprint),
                provider,
            }
        }
        TlsMode::Fingerprint(fp) => ProxmoxVerifier {
            chain: None,
            self_signed: Vec::new(),
            pinned: Some(*fp),
            provider,
        },
        TlsMode::Insecure => ProxmoxVerifier {
            chain: None,
            self_signed: Vec::new(),
            pinned: None,
            provider,
        },
    };
    Ok(Some(
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth(),
    ))
}

/// The system's trusted roots (the platform store), else the Mozilla roots
/// when the platform has none.
fn system_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

fn webpki(
    roots: rustls::RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, TlsSetupError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| TlsSetupError::Settings(format!("TLS setup: {e}")))
}

fn webpki_or_none(
    roots: rustls::RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<WebPkiServerVerifier>>, TlsSetupError> {
    if roots.is_empty() {
        return Ok(None);
    }
    webpki(roots, provider).map(Some)
}

/// The certificates of a CA file: as roots, and the self-signed ones apart
/// (issuer = subject), which are also trusted as exactly themselves, like a
/// pinned fingerprint. webpki refuses a server certificate marked `CA:TRUE`
/// (`CaUsedAsEndEntity`), which is what `openssl req -x509` makes by default;
/// a self-signed server certificate in the CA file is what the operator
/// asked to trust, whatever its flags, so it is compared as a whole (the
/// handshake still proves the server holds its key).
fn ca_file_roots(
    path: &Path,
) -> Result<(rustls::RootCertStore, Vec<CertificateDer<'static>>), TlsSetupError> {
    let shown = path.display().to_string();
    let bad = |detail: String| TlsSetupError::CaFile {
        path: shown.clone(),
        detail,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    let mut self_signed = Vec::new();
    let mut count = 0;
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        count += 1;
        let parsed = x509_parser::parse_x509_certificate(cert.as_ref())
            .map_err(|e| bad(format!("certificate {count} cannot be read: {e}")))?
            .1;
        let own_issuer = parsed.issuer() == parsed.subject();
        let is_ca = parsed
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|b| b.value.ca);
        if own_issuer {
            self_signed.push(cert.clone());
        }
        if is_ca || !own_issuer {
            roots
                .add(cert)
                .map_err(|e| bad(format!("certificate {count}: {e}")))?;
        }
    }
    if count == 0 {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok((roots, self_signed))
}

/// The one verifier of the Proxmox API's certificate: the chain through the
/// trusted roots with host-name checks (`chain`), or exactly a self-signed
/// certificate of the CA file; then the pinned fingerprint when there is one.
/// Handshake signatures are always checked against the presented
/// certificate's key. A refusal carries a [`CertificateRefusal`].
#[derive(Debug)]
struct ProxmoxVerifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    self_signed: Vec<CertificateDer<'static>>,
    pinned: Option<Fingerprint>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ProxmoxVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = Fingerprint::of_der(end_entity.as_ref());
        let own = self
            .self_signed
            .iter()
            .any(|c| c.as_ref() == end_entity.as_ref());
        if !own {
            if let Some(chain) = &self.chain {
                chain
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                    .map_err(|e| CertificateRefusal::from_rustls(got, &e).into_rustls())?;
            } else if !self.self_signed.is_empty() {
                return Err(CertificateRefusal {
                    fingerprint: got,
                    problem: Problem::UnknownIssuer,
                }
                .into_rustls());
            }
        }
        if let Some(pinned) = self.pinned
            && got != pinned
        {
            return Err(CertificateRefusal {
                fingerprint: got,
                problem: Problem::FingerprintMismatch { pinned },
            }
            .into_rustls());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_parses_pve_form_and_prints_it_back() {
        let text = "AB:cd:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB";
        let fp = Fingerprint::parse(text).expect("parses");
        assert_eq!(fp.to_string(), text.to_uppercase());
        let bare: String = text.chars().filter(|c| *c != ':').collect();
        assert_eq!(Fingerprint::parse(&bare).expect("parses"), fp);
    }

    #[test]
    fn fingerprint_of_wrong_length_is_refused() {
        let e = Fingerprint::parse("AB:CD").expect_err("too short");
        assert!(e.to_string().contains("has 2 bytes"), "{e}");
        assert!(Fingerprint::parse("zz").is_err());
    }

    #[test]
    fn missing_ca_file_is_named() {
        let e = client_config(&TlsMode::CaFile("/nonexistent/ca.pem".into())).expect_err("fails");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    }
}
