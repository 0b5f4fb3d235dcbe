//! Certificates made the way siderolabs/crypto `x509` makes them: self-signed CAs
//! (`NewSelfSignedCertificateAuthority`) and client certificates signed by a CA
//! (`NewKeyPair` → `NewCertificateFromCSR`). Serials and key IDs come from the caller's RNG.

use rand::{CryptoRng, RngCore};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, DnValue,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyUsagePurpose, SerialNumber,
};
use time::OffsetDateTime;

use super::keys::{KeyError, PrivateKey, pem_decode, pem_encode};
use talosprov_base::pem::CertAndKey;
use talosprov_base::sensitive::Sensitive;

/// Errors making or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A key could not be read or used.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The certificate text is not a PEM `CERTIFICATE`.
    #[error("not a PEM CERTIFICATE block (found {0:?})")]
    NotCertificate(String),
    /// rcgen refused the parameters or could not read the CA certificate.
    #[error("certificate generation failed: {0}")]
    Rcgen(#[from] rcgen::Error),
}

/// The DER bytes of `pair`'s certificate.
///
/// # Errors
/// [`PkiError::NotCertificate`] when the text is not a PEM certificate.
pub fn certificate_der(pair: &CertAndKey) -> Result<Vec<u8>, PkiError> {
    let (label, der) = pem_decode(&pair.crt)?;
    if label != "CERTIFICATE" {
        return Err(PkiError::NotCertificate(label));
    }
    Ok(der)
}

/// `pair`'s private key, parsed.
///
/// # Errors
/// [`PkiError::Key`] when the key is not one Talos reads.
pub fn private_key(pair: &CertAndKey) -> Result<PrivateKey, PkiError> {
    Ok(PrivateKey::from_pem(pair.key.expose())?)
}

/// What a Talos CA certificate holds besides its key: the subject organization (none for the
/// aggregator CA, whose template drops the common name it is given) and the validity window.
pub(crate) struct CaSpec<'a> {
    pub organization: Option<&'a str>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

/// A self-signed CA certificate: IsCA, KeyUsage CertSign|DigitalSignature (critical), ExtKeyUsage
/// ServerAuth+ClientAuth, a random 20-byte subject key ID and a random serial below 2^128.
///
/// # Errors
/// [`PkiError`] when the key cannot sign (RSA) or rcgen fails.
pub(crate) fn self_signed_ca<R: RngCore + CryptoRng>(
    key: &PrivateKey,
    spec: &CaSpec<'_>,
    rng: &mut R,
) -> Result<CertAndKey, PkiError> {
    let signer = key.signer()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(
        spec.organization
            .iter()
            .map(|o| (DnType::OrganizationName, *o)),
    );
    params.not_before = spec.not_before;
    params.not_after = spec.not_after;
    params.serial_number = Some(serial(rng));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let mut skid = [0u8; 20];
    rng.fill_bytes(&mut skid);
    params.key_identifier_method = KeyIdMethod::PreSpecified(skid.to_vec());
    let cert = params.self_signed(&signer)?;
    Ok(CertAndKey {
        crt: pem_encode("CERTIFICATE", cert.der()),
        key: Sensitive::new(key.to_pem()),
    })
}

/// What a client certificate holds: subject, validity, and key usages.
pub(crate) struct ClientSpec<'a> {
    /// Subject attributes in Go's `pkix.Name` order (O before CN).
    pub subject: Vec<(DnType, &'a str)>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub key_usages: Vec<KeyUsagePurpose>,
}

/// A client certificate (ExtKeyUsage ClientAuth only, no basic constraints, authority key ID
/// of the CA) for a new key of the CA's kind, as siderolabs/crypto `NewKeyPair` makes it: an
/// Ed25519 CA gives an Ed25519 leaf, an ECDSA CA a P-256 leaf.
///
/// # Errors
/// [`PkiError`] when the CA's key cannot sign or its certificate cannot be read.
pub(crate) fn issue_client_certificate<R: RngCore + CryptoRng>(
    ca: &CertAndKey,
    spec: &ClientSpec<'_>,
    rng: &mut R,
) -> Result<CertAndKey, PkiError> {
    let ca_key = private_key(ca)?;
    let ca_der = certificate_der(ca)?;
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), ca_key.signer()?)?;
    let leaf_key = match ca_key.algorithm() {
        super::keys::KeyAlgorithm::Ed25519 => PrivateKey::generate_ed25519(rng),
        super::keys::KeyAlgorithm::EcdsaP256 | super::keys::KeyAlgorithm::Rsa => {
            PrivateKey::generate_p256(rng)
        }
    };
    let mut params = CertificateParams::default();
    params.distinguished_name = name(spec.subject.iter().map(|(t, v)| (t.clone(), *v)));
    params.not_before = spec.not_before;
    params.not_after = spec.not_after;
    params.serial_number = Some(serial(rng));
    params.is_ca = IsCa::NoCa;
    params.key_usages = spec.key_usages.clone();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&leaf_key.signer()?, &issuer)?;
    Ok(CertAndKey {
        crt: pem_encode("CERTIFICATE", cert.der()),
        key: Sensitive::new(leaf_key.to_pem()),
    })
}

/// A distinguished name with Go's string type choice: PrintableString when the value fits its
/// alphabet, UTF8String otherwise (encoding/asn1).
fn name<'a>(attrs: impl Iterator<Item = (DnType, &'a str)>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (ty, value) in attrs {
        let value = match rcgen::string::PrintableString::try_from(value) {
            Ok(p) => DnValue::PrintableString(p),
            Err(_) => DnValue::Utf8String(value.to_string()),
        };
        dn.push(ty, value);
    }
    dn
}

/// A random positive serial below 2^128, minimally encoded (Go `rand.Int(2^128)`).
fn serial<R: RngCore>(rng: &mut R) -> SerialNumber {
    let mut bytes = [0u8; 16];
    rng.fill_bytes(&mut bytes);
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(15);
    SerialNumber::from_slice(&bytes[start..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn serial_is_minimal_and_below_2_pow_128() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        for _ in 0..100 {
            let s = serial(&mut rng);
            let bytes = s.as_ref();
            assert!(!bytes.is_empty() && bytes.len() <= 16);
            assert!(bytes.len() == 1 || bytes[0] != 0);
        }
    }

    #[test]
    fn ca_from_an_rsa_key_is_refused() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        let key = PrivateKey::generate_rsa(&mut rng, 1024).unwrap();
        let spec = CaSpec {
            organization: Some("x"),
            not_before: OffsetDateTime::UNIX_EPOCH,
            not_after: OffsetDateTime::UNIX_EPOCH + time::Duration::days(1),
        };
        let err = self_signed_ca(&key, &spec, &mut rng).unwrap_err();
        assert!(err.to_string().contains("RSA"), "{err}");
    }
}
