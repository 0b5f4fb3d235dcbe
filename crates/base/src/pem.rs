//! A certificate with its private key, both as PEM text: what Talos's secrets
//! bundle, talosconfig and kubeconfig carry. A plain value: the machine layer
//! issues and reads them, the clients only pass them on.

use crate::sensitive::Sensitive;

/// A PEM certificate and its PEM private key, as Talos's `PEMEncodedCertificateAndKey`. The
/// PEM texts are kept exactly as read so that an imported bundle exports byte-identical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertAndKey {
    /// The certificate, PEM text.
    pub crt: String,
    /// The private key, PEM text (redacted when printed).
    pub key: Sensitive<String>,
}
