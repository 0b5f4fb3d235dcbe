//! Client credentials for secure mode, in talosconfig form: the OS CA certificate, and
//! a client certificate and key signed by it (PEM). The key never appears in output.

use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::error::TalosError;
use talosprov_base::sensitive::Sensitive;
use talosprov_base::talosconfig::Talosconfig;

/// The `ca`, `crt` and `key` of a talosconfig context, decoded to PEM.
///
/// `ca` is the OS CA (`machine.ca`) that signs node server certificates; `crt` and `key`
/// are the client certificate (roles in its Organization) and its key. Talos writes
/// Ed25519 keys with the non-standard label `ED25519 PRIVATE KEY`; both that and
/// `PRIVATE KEY` are accepted.
#[derive(Debug, Clone)]
pub struct ClientCredentials {
    /// OS CA certificate, PEM.
    pub ca_pem: String,
    /// Client certificate, PEM.
    pub crt_pem: String,
    /// Client key, PEM (PKCS#8, or SEC1 / PKCS#1).
    pub key_pem: Sensitive,
}

impl ClientCredentials {
    /// Builds credentials from PEM text.
    pub fn from_pem(ca: impl Into<String>, crt: impl Into<String>, key: Sensitive) -> Self {
        ClientCredentials {
            ca_pem: ca.into(),
            crt_pem: crt.into(),
            key_pem: key,
        }
    }

    /// The credentials of a talosconfig's current context (read with
    /// [`Talosconfig::parse`]): its OS CA and its client certificate and key.
    pub fn from_talosconfig(tc: &Talosconfig) -> Self {
        ClientCredentials {
            ca_pem: tc.ca.clone(),
            crt_pem: tc.client.crt.clone(),
            key_pem: tc.client.key.clone(),
        }
    }

    /// The CA certificates, DER.
    pub(crate) fn ca_certs(&self) -> Result<Vec<CertificateDer<'static>>, TalosError> {
        certs_from_pem(&self.ca_pem, "ca")
    }

    /// The client certificate chain, DER.
    pub(crate) fn client_chain(&self) -> Result<Vec<CertificateDer<'static>>, TalosError> {
        certs_from_pem(&self.crt_pem, "crt")
    }

    /// The client key, DER.
    pub(crate) fn client_key(&self) -> Result<PrivateKeyDer<'static>, TalosError> {
        private_key_from_pem(self.key_pem.expose())
    }
}

/// Parses every certificate in `pem`. Errors name `field`, never the content.
pub(crate) fn certs_from_pem(
    pem: &str,
    field: &str,
) -> Result<Vec<CertificateDer<'static>>, TalosError> {
    let certs = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TalosError::Credentials {
            reason: format!("{field} is not PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TalosError::Credentials {
            reason: format!("{field} holds no CERTIFICATE block"),
        });
    }
    Ok(certs)
}

/// Parses a private key, accepting Talos's `ED25519 PRIVATE KEY` label for PKCS#8.
pub(crate) fn private_key_from_pem(pem: &str) -> Result<PrivateKeyDer<'static>, TalosError> {
    let relabelled = relabel_ed25519(pem);
    rustls_pemfile::private_key(&mut relabelled.as_bytes())
        .map_err(|e| TalosError::Credentials {
            reason: format!("key is not PEM: {e}"),
        })?
        .ok_or_else(|| TalosError::Credentials {
            reason: "key holds no PRIVATE KEY block".to_string(),
        })
}

/// Talos labels PKCS#8 Ed25519 keys `ED25519 PRIVATE KEY`; standard parsers want
/// `PRIVATE KEY` (siderolabs/crypto x509 PEMEncodedKey).
pub fn relabel_ed25519(pem: &str) -> String {
    pem.replace("BEGIN ED25519 PRIVATE KEY", "BEGIN PRIVATE KEY")
        .replace("END ED25519 PRIVATE KEY", "END PRIVATE KEY")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_pem_never_prints_its_content() {
        let key = Sensitive::new("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----");
        assert_eq!(format!("{key}"), "(sensitive)");
        assert_eq!(format!("{key:?}"), "(sensitive)");
        let creds = ClientCredentials::from_pem("ca", "crt", key);
        assert!(!format!("{creds:?}").contains("AAAA"));
    }

    #[test]
    fn talos_ed25519_label_is_accepted() {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let talos_pem = key
            .serialize_pem()
            .replace("PRIVATE KEY", "ED25519 PRIVATE KEY");
        assert!(private_key_from_pem(&talos_pem).is_ok());
    }
}
