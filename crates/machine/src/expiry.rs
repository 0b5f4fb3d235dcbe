//! When the client certificates in the state's talosconfig and kubeconfig expire, and the
//! endpoint a kubeconfig points at. The certificate is read from the file as written: the
//! talosconfig's current context's `crt` and the kubeconfig's first user's
//! `client-certificate-data` (standard base64 of PEM, kubectl's `clientcmd` layout).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use time::OffsetDateTime;

use talosprov_base::talosconfig::Talosconfig;

/// The `NotAfter` of the first certificate in `pem`, or `None` when it holds no X.509
/// certificate.
pub fn certificate_not_after(pem: &str) -> Option<OffsetDateTime> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    Some(cert.validity().not_after.to_datetime())
}

/// When the talosconfig's admin client certificate expires, or `None` when the text is not a
/// talosconfig with one.
pub fn talosconfig_not_after(text: &str) -> Option<OffsetDateTime> {
    let tc = Talosconfig::parse(text).ok()?;
    certificate_not_after(&tc.client.crt)
}

/// When the kubeconfig's first user's client certificate expires, or `None` when there is
/// no such certificate.
pub fn kubeconfig_not_after(text: &str) -> Option<OffsetDateTime> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
    let data = doc
        .get("users")?
        .get(0)?
        .get("user")?
        .get("client-certificate-data")?
        .as_str()?;
    let pem = STANDARD.decode(data.trim()).ok()?;
    certificate_not_after(std::str::from_utf8(&pem).ok()?)
}

/// The kubeconfig's first cluster: its name and its API server URL.
pub fn kubeconfig_cluster(text: &str) -> Option<(String, String)> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
    let cluster = doc.get("clusters")?.get(0)?;
    let name = cluster.get("name")?.as_str()?.to_owned();
    let server = cluster.get("cluster")?.get("server")?.as_str()?.to_owned();
    Some((name, server))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeconfig::{AdminKubeconfig, KubeconfigInput};
    use crate::secrets::SecretsBundle;
    use crate::talosconfig::{ADMIN_CERTIFICATE_VALIDITY, TalosconfigInput, generate};
    use rand::SeedableRng as _;
    use time::macros::datetime;

    fn bundle() -> SecretsBundle {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        SecretsBundle::generate(&mut rng, datetime!(2026-01-01 00:00 UTC)).expect("bundle")
    }

    #[test]
    fn the_expiry_of_each_client_config_is_read_from_its_certificate() {
        let secrets = bundle();
        let now = datetime!(2026-03-04 05:06:07 UTC);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let tc = generate(
            &TalosconfigInput {
                context: "lab".into(),
                endpoints: vec!["10.0.0.2".into()],
                nodes: vec![],
                secrets: &secrets,
                now,
                lifetime: ADMIN_CERTIFICATE_VALIDITY,
            },
            &mut rng,
        )
        .expect("talosconfig");
        assert_eq!(
            talosconfig_not_after(&tc.to_yaml()),
            Some(now + ADMIN_CERTIFICATE_VALIDITY)
        );
        let k = AdminKubeconfig::generate(
            &KubeconfigInput {
                cluster_name: "lab".into(),
                endpoint: "https://10.0.0.2:6443".into(),
                secrets: &secrets,
                now,
                lifetime: time::Duration::hours(24),
            },
            &mut rng,
        )
        .expect("kubeconfig");
        assert_eq!(
            kubeconfig_not_after(&k.yaml),
            Some(now + time::Duration::hours(24))
        );
        assert_eq!(
            kubeconfig_cluster(&k.yaml),
            Some(("lab".into(), "https://10.0.0.2:6443".into()))
        );
        for junk in [
            "",
            "context: x\n",
            "users: [{user: {client-certificate-data: '!!'}}]\n",
        ] {
            assert_eq!(talosconfig_not_after(junk), None);
            assert_eq!(kubeconfig_not_after(junk), None);
        }
    }
}
