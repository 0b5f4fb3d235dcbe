//! What answers at a node's Talos API port, from one TLS handshake and no RPC:
//! nothing, a node in maintenance mode (a self-signed certificate, no client
//! certificate asked: Talos `internal/app/maintenance`), or a configured node
//! in secure mode (apid asks for a client certificate, and serves one issued by
//! its cluster's OS CA), and whether that CA is a given one. Used before
//! secrets are generated, to never take over an existing cluster by accident.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::client::TALOS_API_PORT;
use super::tls;

/// What a node's Talos API port answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAnswer {
    /// No TLS handshake within the deadline (nothing listens, the node is off
    /// or still booting): not an existing cluster.
    Silent,
    /// Maintenance mode: no client certificate asked. Not configured yet.
    Maintenance,
    /// Secure mode: configured, with mutual TLS.
    Secure {
        /// Whether its server certificate was issued by the CA given to
        /// [`probe_node`]; `false` when none was given.
        issued_by_ours: bool,
    },
}

/// Records the server's certificate chain, accepting any (the handshake
/// signatures are still checked, as for maintenance mode).
#[derive(Debug)]
struct Recorder {
    algorithms: WebPkiSupportedAlgorithms,
    chain: Mutex<Vec<CertificateDer<'static>>>,
    asked_for_client_cert: AtomicBool,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock().expect("chain poisoned") = chain;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Notes that the server asked for a client certificate, and sends none.
#[derive(Debug)]
struct NoClientCert(Arc<Recorder>);

impl ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.asked_for_client_cert.store(true, Ordering::SeqCst);
        None
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Ask `ip:50000` for a TLS handshake, for at most `deadline`, and tell what
/// answered. `our_ca_pem` is the OS CA (`machine.ca`) of the secrets talosprov
/// would configure the node with, when it has them.
pub async fn probe_node(ip: IpAddr, our_ca_pem: Option<&str>, deadline: Duration) -> NodeAnswer {
    let provider = tls::provider();
    let recorder = Arc::new(Recorder {
        algorithms: provider.signature_verification_algorithms,
        chain: Mutex::new(Vec::new()),
        asked_for_client_cert: AtomicBool::new(false),
    });
    let Ok(builder) =
        ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions()
    else {
        return NodeAnswer::Silent;
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_client_cert_resolver(Arc::new(NoClientCert(recorder.clone())));
    config.alpn_protocols = vec![b"h2".to_vec()];
    let addr = SocketAddr::new(ip, TALOS_API_PORT);
    // A secure node refuses the handshake once it sees no client certificate;
    // by then the client has seen its certificate and its request for ours.
    let _ = tokio::time::timeout(deadline, tls::connect_tls(Arc::new(config), addr)).await;
    let chain = recorder.chain.lock().expect("chain poisoned").clone();
    if chain.is_empty() {
        return NodeAnswer::Silent;
    }
    if !recorder.asked_for_client_cert.load(Ordering::SeqCst) {
        return NodeAnswer::Maintenance;
    }
    NodeAnswer::Secure {
        issued_by_ours: our_ca_pem.is_some_and(|ca| issued_by(&chain, ca, ip)),
    }
}

/// Whether the leaf of `chain` was issued by the CA in `ca_pem`. Checked by
/// webpki's path building at the leaf's own start of validity, so that only
/// the issuer and the signatures count (an expired certificate of our CA is
/// still ours); a leaf that does not name `ip` was still issued by it.
fn issued_by(chain: &[CertificateDer<'static>], ca_pem: &str, ip: IpAddr) -> bool {
    let mut roots = RootCertStore::empty();
    for ca in rustls_pemfile::certs(&mut ca_pem.as_bytes()).flatten() {
        let _ = roots.add(ca);
    }
    if roots.is_empty() {
        return false;
    }
    let Ok(verifier) =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), tls::provider()).build()
    else {
        return false;
    };
    let Some((leaf, intermediates)) = chain.split_first() else {
        return false;
    };
    let Some(start) = not_before(leaf) else {
        return false;
    };
    let at = UnixTime::since_unix_epoch(Duration::from_secs(start.saturating_add(1)));
    match verifier.verify_server_cert(
        leaf,
        intermediates,
        &ServerName::IpAddress(ip.into()),
        &[],
        at,
    ) {
        Ok(_) => true,
        Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => true,
        Err(_) => false,
    }
}

/// The leaf's notBefore, in seconds since the Unix epoch.
fn not_before(der: &CertificateDer<'_>) -> Option<u64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    u64::try_from(cert.validity().not_before.timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};

    fn ca() -> (rcgen::Certificate, KeyPair) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        (params.self_signed(&key).unwrap(), key)
    }

    fn leaf(ca: &(rcgen::Certificate, KeyPair), ip: IpAddr) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::IpAddress(ip)];
        let issuer = rcgen::Issuer::from_ca_cert_der(ca.0.der(), &ca.1).unwrap();
        params.signed_by(&key, &issuer).unwrap().der().clone()
    }

    #[test]
    fn a_certificate_is_ours_only_when_our_ca_issued_it() {
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let (ours, theirs) = (ca(), ca());
        let ours_pem = ours.0.pem();
        assert!(issued_by(&[leaf(&ours, ip)], &ours_pem, ip));
        assert!(
            issued_by(&[leaf(&ours, "127.0.0.10".parse().unwrap())], &ours_pem, ip),
            "another node's name: still our CA"
        );
        assert!(!issued_by(&[leaf(&theirs, ip)], &ours_pem, ip));
        assert!(!issued_by(&[leaf(&ours, ip)], "not a PEM", ip));
    }
}
