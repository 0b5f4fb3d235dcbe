//! apid's client-certificate check: the chain must lead to the OS CA (webpki), and the
//! leaf's ExtKeyUsage must be exactly ClientAuth, else the handshake fails
//! ("missing the client auth extended key usage"; internal/app/apid/service.go).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// Wraps the webpki verifier with apid's ExtKeyUsage rule.
#[derive(Debug)]
pub(crate) struct ApidClientVerifier {
    pub inner: Arc<dyn ClientCertVerifier>,
}

/// True when the certificate's ExtKeyUsage is present and is exactly `[ClientAuth]`.
pub(crate) fn only_client_auth(der: &[u8]) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return false;
    };
    match cert.extended_key_usage() {
        Ok(Some(eku)) => {
            let e = &eku.value;
            e.client_auth
                && !(e.any
                    || e.server_auth
                    || e.code_signing
                    || e.email_protection
                    || e.time_stamping
                    || e.ocsp_signing)
                && e.other.is_empty()
        }
        _ => false,
    }
}

impl ClientCertVerifier for ApidClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if !only_client_auth(end_entity) {
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::InvalidPurpose,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose as Eku, KeyPair};

    fn cert(ekus: Vec<Eku>) -> Vec<u8> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = CertificateParams::default();
        params.extended_key_usages = ekus;
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn only_exactly_client_auth_passes() {
        assert!(only_client_auth(&cert(vec![Eku::ClientAuth])));
        assert!(!only_client_auth(&cert(vec![
            Eku::ClientAuth,
            Eku::ServerAuth
        ])));
        assert!(!only_client_auth(&cert(vec![Eku::ServerAuth])));
        assert!(!only_client_auth(&cert(vec![])));
    }
}
