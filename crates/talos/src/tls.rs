//! TLS for the Talos API: maintenance mode (no server verification, no client
//! certificate: talosctl `--insecure`) and secure mode (mTLS, server certificate checked
//! against the OS CA and the node's IP SAN), and the tonic connector that uses them.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::credentials::ClientCredentials;
use super::error::TalosError;

/// The ring provider, shared by the client and the simulator.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Accepts any server certificate but still checks the handshake signatures, so the
/// session is encrypted with the key the certificate names. This is what talosctl
/// `--insecure` does for a node in maintenance mode, whose certificate is self-signed
/// and made at boot (internal/app/maintenance).
#[derive(Debug)]
struct AcceptAnyServerCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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

/// Client TLS settings for maintenance mode: no verification, no client certificate,
/// ALPN `h2`.
pub fn maintenance_config() -> Arc<ClientConfig> {
    let provider = provider();
    let verifier = Arc::new(AcceptAnyServerCert {
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// Client TLS settings for secure mode: the server certificate must chain to the OS CA
/// in `credentials` and (checked by webpki against the `ServerName::IpAddress` the
/// connector passes) carry the node's IP in its SANs; our client certificate is sent.
///
/// Errors: [`TalosError::Credentials`] when a PEM block or the key cannot be used.
pub fn secure_config(credentials: &ClientCredentials) -> Result<Arc<ClientConfig>, TalosError> {
    let mut roots = RootCertStore::empty();
    for ca in credentials.ca_certs()? {
        roots.add(ca).map_err(|e| TalosError::Credentials {
            reason: format!("ca is not a usable CA certificate: {e}"),
        })?;
    }
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(credentials.client_chain()?, credentials.client_key()?)
        .map_err(|e| TalosError::Credentials {
            reason: format!("client certificate and key do not form a usable pair: {e}"),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Opens a TCP connection to `addr` and runs the TLS handshake with `config`, naming
/// the server by its IP so that secure mode checks the IP SAN.
pub(crate) async fn connect_tls(
    config: Arc<ClientConfig>,
    addr: SocketAddr,
) -> std::io::Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let server_name = ServerName::IpAddress(addr.ip().into());
    let tls = TlsConnector::from(config).connect(server_name, tcp).await?;
    Ok(TokioIo::new(tls))
}
