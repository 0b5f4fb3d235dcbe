//! TLS for the Proxmox API, in the order of preference the topology offers: a CA
//! file (`proxmox.ca_file`, e.g. `/etc/pve/pve-root-ca.pem`), pinning of the
//! leaf certificate's SHA-256 fingerprint (`proxmox.fingerprint`, as
//! `GET /nodes/{node}/certificates/info` shows it), or insecure (asked for only).

use crate::proxmox::error::ProxmoxError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// How the server certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsMode {
    /// The system's trusted roots (an ACME or other public certificate).
    System,
    /// Trust only the CA certificates in this PEM file, with hostname checks.
    CaFile(PathBuf),
    /// Accept exactly the leaf certificate with this SHA-256 fingerprint.
    Fingerprint(Fingerprint),
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
    /// [`ProxmoxError::Settings`] when the text is not 32 bytes of hex.
    pub fn parse(text: &str) -> Result<Self, ProxmoxError> {
        let hexdigits: String = text.trim().chars().filter(|c| *c != ':').collect();
        let bytes = hex::decode(&hexdigits).map_err(|_| {
            ProxmoxError::Settings(format!(
                "fingerprint '{text}' is not hex (expected 32 colon-separated pairs such as AB:CD:..)"
            ))
        })?;
        let array: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
            ProxmoxError::Settings(format!(
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

/// The rustls client configuration for a mode, or `None` for [`TlsMode::System`]
/// (reqwest's own native roots).
///
/// # Errors
/// [`ProxmoxError::CaFile`] when the CA file cannot be read or holds no usable certificate.
pub fn client_config(mode: &TlsMode) -> Result<Option<rustls::ClientConfig>, ProxmoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProxmoxError::Settings(format!("TLS setup: {e}")))?;
    let config = match mode {
        TlsMode::System => return Ok(None),
        TlsMode::CaFile(path) => {
            let shown = path.display().to_string();
            let pem = std::fs::read(path).map_err(|e| ProxmoxError::CaFile {
                path: shown.clone(),
                detail: e.to_string(),
            })?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| ProxmoxError::CaFile {
                    path: shown.clone(),
                    detail: e.to_string(),
                })?;
                roots.add(cert).map_err(|e| ProxmoxError::CaFile {
                    path: shown.clone(),
                    detail: e.to_string(),
                })?;
            }
            if roots.is_empty() {
                return Err(ProxmoxError::CaFile {
                    path: shown,
                    detail: "no PEM certificate in it".into(),
                });
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        TlsMode::Fingerprint(fp) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedLeaf {
                pinned: Some(*fp),
                provider,
            }))
            .with_no_client_auth(),
        TlsMode::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedLeaf {
                pinned: None,
                provider,
            }))
            .with_no_client_auth(),
    };
    Ok(Some(config))
}

/// Accepts the leaf certificate whose SHA-256 is `pinned` (any, when `None`), and
/// still checks the handshake signatures against that certificate's key. The pin
/// is the identity, so the host name is not checked.
#[derive(Debug)]
struct PinnedLeaf {
    pinned: Option<Fingerprint>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedLeaf {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pinned) = self.pinned else {
            return Ok(ServerCertVerified::assertion());
        };
        let got = Fingerprint::of_der(end_entity.as_ref());
        if got == pinned {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server certificate fingerprint {got} does not match the pinned fingerprint {pinned}"
            )))
        }
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
