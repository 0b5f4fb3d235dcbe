//! The offline admin kubeconfig, built from the secrets bundle as Talos builds it from a control
//! plane's config: client certificate `CN=admin, O=system:masters` signed by the Kubernetes CA.
//! Source: Talos `pkg/kubeconfig/generate.go`; the file format is client-go's `clientcmd`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::{CryptoRng, RngCore};
use rcgen::{DnType, KeyUsagePurpose};
use serde::Serialize;
use time::{Duration, OffsetDateTime};

use super::pki::{ClientSpec, PkiError, issue_client_certificate};
use super::secrets::SecretsBundle;
use talosprov_base::pem::CertAndKey;

/// Default lifetime of the admin client certificate: 365 days
/// (`cluster.adminKubeconfig.certLifetime` default).
pub const DEFAULT_CERTIFICATE_LIFETIME: Duration = Duration::days(365);

/// Clock skew allowance: the certificate is valid from 10 s before `now` (`allowedTimeSkew`).
pub const ALLOWED_TIME_SKEW: Duration = Duration::seconds(10);

/// What the kubeconfig holds.
#[derive(Debug, Clone)]
pub struct KubeconfigInput<'a> {
    /// The cluster name: cluster `<name>`, user and context `admin@<name>`.
    pub cluster_name: String,
    /// The API server URL (`cluster.controlPlane.endpoint`), e.g. `https://192.168.1.120:6443`.
    pub endpoint: String,
    /// The cluster's secrets (the Kubernetes CA signs the client certificate).
    pub secrets: &'a SecretsBundle,
    /// Issue time.
    pub now: OffsetDateTime,
    /// Certificate lifetime; [`DEFAULT_CERTIFICATE_LIFETIME`] unless the cluster sets another.
    pub lifetime: Duration,
}

/// An admin kubeconfig and the client certificate in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminKubeconfig {
    /// The admin client certificate and key, PEM.
    pub client: CertAndKey,
    /// The file text (kubeconfig v1, as `clientcmd.Write` lays it out). Write it with mode 0600.
    pub yaml: String,
}

#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    clusters: Vec<NamedCluster<'a>>,
    contexts: Vec<NamedContext<'a>>,
    #[serde(rename = "current-context")]
    current_context: &'a str,
    kind: &'a str,
    preferences: serde_yaml_ng::Mapping,
    users: Vec<NamedUser<'a>>,
}

#[derive(Serialize)]
struct NamedCluster<'a> {
    cluster: ClusterEntry,
    name: &'a str,
}

#[derive(Serialize)]
struct NamedContext<'a> {
    context: ContextBody,
    name: &'a str,
}

#[derive(Serialize)]
struct ClusterEntry {
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: String,
    server: String,
}

#[derive(Serialize)]
struct ContextBody {
    cluster: String,
    namespace: String,
    user: String,
}

#[derive(Serialize)]
struct NamedUser<'a> {
    name: &'a str,
    user: UserBody,
}

#[derive(Serialize)]
struct UserBody {
    #[serde(rename = "client-certificate-data")]
    client_certificate_data: String,
    #[serde(rename = "client-key-data")]
    client_key_data: String,
}

impl AdminKubeconfig {
    /// Issue a new admin client certificate (ECDSA P-256 from the Kubernetes CA; KeyUsage
    /// DigitalSignature|KeyEncipherment; ExtKeyUsage ClientAuth; valid from `now - 10 s` to
    /// `now + lifetime`) and write the kubeconfig around it.
    ///
    /// # Errors
    /// [`PkiError`] when the Kubernetes CA cannot be read or cannot sign.
    pub fn generate<R: RngCore + CryptoRng>(
        input: &KubeconfigInput<'_>,
        rng: &mut R,
    ) -> Result<Self, PkiError> {
        let now = input.now.replace_nanosecond(0).unwrap_or(input.now);
        let spec = ClientSpec {
            subject: vec![
                (DnType::OrganizationName, "system:masters"),
                (DnType::CommonName, "admin"),
            ],
            not_before: now - ALLOWED_TIME_SKEW,
            not_after: now + input.lifetime,
            key_usages: vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ],
        };
        let k8s_ca = &input.secrets.certs.k8s;
        let client = issue_client_certificate(k8s_ca, &spec, rng)?;
        let name = input.cluster_name.as_str();
        let user = format!("admin@{name}");
        let file = File {
            api_version: "v1",
            clusters: vec![NamedCluster {
                cluster: ClusterEntry {
                    certificate_authority_data: STANDARD.encode(k8s_ca.crt.as_bytes()),
                    server: input.endpoint.clone(),
                },
                name,
            }],
            contexts: vec![NamedContext {
                context: ContextBody {
                    cluster: name.to_string(),
                    namespace: "default".into(),
                    user: user.clone(),
                },
                name: &user,
            }],
            current_context: &user,
            kind: "Config",
            preferences: serde_yaml_ng::Mapping::new(),
            users: vec![NamedUser {
                name: &user,
                user: UserBody {
                    client_certificate_data: STANDARD.encode(client.crt.as_bytes()),
                    client_key_data: STANDARD.encode(client.key.expose().as_bytes()),
                },
            }],
        };
        // Serialising plain structs of strings cannot fail.
        let yaml = serde_yaml_ng::to_string(&file).unwrap_or_default();
        Ok(AdminKubeconfig { client, yaml })
    }
}
