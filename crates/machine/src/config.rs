//! The base machine config per role, equal to what `talosctl gen config` writes for the v1.12,
//! v1.13 and v1.14 contracts (checked against Talos's stability golden files; the v1.14
//! documents are in [`super::config_v114`]).
//! Source: Talos v1.13.9 `pkg/machinery/config/generate/{generate.go,init.go,worker.go,network.go}`.

use serde_yaml_ng::{Mapping, Value};

use super::config_parts::{
    APISERVER_IMAGE, CONTROLLER_MANAGER_IMAGE, DNS_DOMAIN, KUBELET_IMAGE, KUBEPRISM_PORT,
    LABEL_EXCLUDE_FROM_EXTERNAL_LB, POD_SUBNET, PROXY_IMAGE, SCHEDULER_IMAGE, SERVICE_SUBNET, b64,
    cert_pair, default_audit_policy, etcd_ca, machine_identity, map, pod_security_admission, put,
    put_accepted, sans,
};
use super::secrets::EncryptionSecret;
use crate::config_parts::BaseConfigInput;
use talosprov_base::version::{Contract, VersionError, contract_for, default_kubernetes_version};
use talosprov_base::yaml::{Flavour, documents_to_string};

use talosprov_base::role::Role;

/// Errors generating a base config.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cluster endpoint is not an https URL with a host (talosctl `validateClusterEndpoint`).
    #[error("invalid cluster endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Talos's wording of the problem.
        reason: String,
    },
    /// The cluster name is empty.
    #[error("the cluster name must not be empty")]
    EmptyClusterName,
    /// A version problem (e.g. no default Kubernetes version for this Talos release).
    #[error(transparent)]
    Version(#[from] VersionError),
}

/// A generated base config: its documents, in Talos's key order, and how it was made.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseConfig {
    /// The v1alpha1 document first, then `HostnameConfig` when asked for and the Talos version
    /// has it (1.12 and later).
    pub documents: Vec<Value>,
    /// The contract generated.
    pub contract: Contract,
    /// The Kubernetes version used, without `v` (e.g. `1.36.3`).
    pub kubernetes_version: String,
    /// Warnings for the caller to print (e.g. a Talos version outside v1.12–v1.13).
    pub warnings: Vec<String>,
}

impl BaseConfig {
    /// The config as Talos writes it (see [`machine_config_yaml`]).
    pub fn to_yaml(&self) -> String {
        machine_config_yaml(&self.documents)
    }
}

/// Multi-document machine config text in Talos's style: go-yaml with 4-space indent, documents
/// separated by `---`. Use it for final configs after patches, too.
pub fn machine_config_yaml(documents: &[Value]) -> String {
    documents_to_string(documents, Flavour::MachineConfig)
}

/// Generate the base config for one role.
///
/// Pod and service subnets are always the IPv4 defaults: Talos switches to IPv6 only when the
/// whole endpoint string parses as an IPv6 address, which an https URL never does.
///
/// # Errors
/// [`ConfigError`] for an empty cluster name, an endpoint that is not `https://host[:port]`, or
/// a Talos release with no known default Kubernetes version when none is given.
pub fn base_config(input: &BaseConfigInput<'_>) -> Result<BaseConfig, ConfigError> {
    base_config_for(input, contract_for(&input.talos_version))
}

/// [`base_config`] in the contract `choice` gives (its warning is the config's), whatever
/// `input`'s Talos version would choose.
///
/// # Errors
/// As [`base_config`].
pub fn base_config_for(
    input: &BaseConfigInput<'_>,
    choice: talosprov_base::version::ContractChoice,
) -> Result<BaseConfig, ConfigError> {
    if input.cluster_name.trim().is_empty() {
        return Err(ConfigError::EmptyClusterName);
    }
    validate_endpoint(&input.endpoint)?;
    let kubernetes_version = match &input.kubernetes_version {
        Some(v) => v.trim_start_matches('v').to_string(),
        None => default_kubernetes_version(&input.talos_version)?.to_string(),
    };
    if choice.contract == Contract::V1_14 {
        return Ok(BaseConfig {
            documents: super::config_v114::documents(input, &kubernetes_version),
            contract: choice.contract,
            kubernetes_version,
            warnings: choice.warning.into_iter().collect(),
        });
    }
    let mut documents = vec![v1alpha1(input, choice.contract, &kubernetes_version)];
    if input.hostname_config && choice.hostname_config {
        documents.push(map([
            ("apiVersion", "v1alpha1".into()),
            ("kind", "HostnameConfig".into()),
            ("auto", "stable".into()),
        ]));
    }
    Ok(BaseConfig {
        documents,
        contract: choice.contract,
        kubernetes_version,
        warnings: choice.warning.into_iter().collect(),
    })
}

/// The v1alpha1 document: version flags, then `machine` and `cluster`.
fn v1alpha1(input: &BaseConfigInput<'_>, contract: Contract, k8s: &str) -> Value {
    map([
        ("version", "v1alpha1".into()),
        ("debug", false.into()),
        ("persist", true.into()),
        (
            "machine",
            Value::Mapping(machine_section(input, contract, k8s)),
        ),
        ("cluster", Value::Mapping(cluster_section(input, k8s))),
    ])
}

/// `machine`: type, token, OS CA, SANs, kubelet, install, features, and the
/// control plane's node label (Talos `generate/init.go`, `worker.go`).
fn machine_section(input: &BaseConfigInput<'_>, contract: Contract, k8s: &str) -> Mapping {
    let control_plane = input.role == Role::Controlplane;
    let mut machine = machine_identity(input);
    put(
        &mut machine,
        "kubelet",
        map([
            ("image", format!("{KUBELET_IMAGE}:v{k8s}").into()),
            ("defaultRuntimeSeccompProfileEnabled", true.into()),
            ("disableManifestsDirectory", true.into()),
        ]),
    );
    if contract.emits_empty_machine_network() {
        put(&mut machine, "network", Value::Mapping(Mapping::new()));
    }
    let mut install = Mapping::new();
    if let Some(disk) = &input.install_disk {
        put(&mut install, "disk", disk.as_str().into());
    }
    if let Some(image) = &input.install_image {
        put(&mut install, "image", image.as_str().into());
    }
    put(&mut install, "wipe", false.into());
    put(&mut install, "grubUseUKICmdline", true.into());
    put(&mut machine, "install", Value::Mapping(install));
    put(
        &mut machine,
        "features",
        map([
            ("diskQuotaSupport", true.into()),
            (
                "kubePrism",
                map([("enabled", true.into()), ("port", KUBEPRISM_PORT.into())]),
            ),
            (
                "hostDNS",
                map([
                    ("enabled", true.into()),
                    ("forwardKubeDNSToHost", true.into()),
                ]),
            ),
        ]),
    );
    if control_plane {
        put(
            &mut machine,
            "nodeLabels",
            map([(LABEL_EXCLUDE_FROM_EXTERNAL_LB, "".into())]),
        );
    }
    machine
}

/// `cluster`: identity, endpoint, network, token, Kubernetes CA, discovery;
/// on a control plane also the secrets-at-rest key, the components and etcd.
fn cluster_section(input: &BaseConfigInput<'_>, k8s: &str) -> Mapping {
    let s = input.secrets;
    let control_plane = input.role == Role::Controlplane;
    let mut cluster = Mapping::new();
    put(&mut cluster, "id", s.cluster.id.as_str().into());
    put(
        &mut cluster,
        "secret",
        s.cluster.secret.expose().as_str().into(),
    );
    put(
        &mut cluster,
        "controlPlane",
        map([("endpoint", input.endpoint.as_str().into())]),
    );
    put(
        &mut cluster,
        "clusterName",
        input.cluster_name.as_str().into(),
    );
    put(
        &mut cluster,
        "network",
        map([
            ("dnsDomain", DNS_DOMAIN.into()),
            ("podSubnets", Value::Sequence(vec![POD_SUBNET.into()])),
            (
                "serviceSubnets",
                Value::Sequence(vec![SERVICE_SUBNET.into()]),
            ),
        ]),
    );
    put(
        &mut cluster,
        "token",
        s.bootstrap_token.expose().as_str().into(),
    );
    if control_plane {
        // A bundle made for Talos ≤ 1.2 carries an AES-CBC secret; keep using it rather than
        // leave the control plane without a secrets-at-rest key.
        let (field, value) = match &s.encryption {
            EncryptionSecret::Secretbox(v) => ("secretboxEncryptionSecret", v),
            EncryptionSecret::AesCbc(v) => ("aescbcEncryptionSecret", v),
        };
        put(&mut cluster, field, value.expose().as_str().into());
    }
    let k8s_key = control_plane.then(|| s.certs.k8s.key.expose().as_str());
    put(&mut cluster, "ca", cert_pair(&s.certs.k8s.crt, k8s_key));
    put_accepted(&mut cluster, &input.accepted_cas.kubernetes);
    if control_plane {
        put_control_plane_components(&mut cluster, input, k8s);
    }
    put(
        &mut cluster,
        "discovery",
        map([
            ("enabled", true.into()),
            (
                "registries",
                map([
                    ("kubernetes", map([("disabled", true.into())])),
                    ("service", Value::Mapping(Mapping::new())),
                ]),
            ),
        ]),
    );
    if control_plane {
        put(&mut cluster, "etcd", etcd_ca(input));
    }
    cluster
}

/// A control plane's `cluster` keys after the CA: the aggregator CA, the
/// service-account key, and the API server, controller manager, proxy and
/// scheduler at Kubernetes `k8s`.
fn put_control_plane_components(cluster: &mut Mapping, input: &BaseConfigInput<'_>, k8s: &str) {
    let s = input.secrets;
    let agg = &s.certs.k8s_aggregator;
    put(
        cluster,
        "aggregatorCA",
        cert_pair(&agg.crt, Some(agg.key.expose())),
    );
    put(
        cluster,
        "serviceAccount",
        map([("key", b64(s.certs.k8s_service_account.expose()))]),
    );
    let mut api = Mapping::new();
    put(
        &mut api,
        "image",
        format!("{APISERVER_IMAGE}:v{k8s}").into(),
    );
    if !input.additional_sans.is_empty() {
        put(&mut api, "certSANs", sans(input));
    }
    put(
        &mut api,
        "admissionControl",
        Value::Sequence(vec![pod_security_admission()]),
    );
    put(&mut api, "auditPolicy", default_audit_policy());
    put(cluster, "apiServer", Value::Mapping(api));
    put(
        cluster,
        "controllerManager",
        map([("image", format!("{CONTROLLER_MANAGER_IMAGE}:v{k8s}").into())]),
    );
    put(
        cluster,
        "proxy",
        map([("image", format!("{PROXY_IMAGE}:v{k8s}").into())]),
    );
    put(
        cluster,
        "scheduler",
        map([("image", format!("{SCHEDULER_IMAGE}:v{k8s}").into())]),
    );
}

/// talosctl `validateClusterEndpoint` plus siderolabs/net `ValidateEndpointURI`, in their words.
pub(crate) fn validate_endpoint(endpoint: &str) -> Result<(), ConfigError> {
    let fail = |reason: String| ConfigError::Endpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    if !endpoint.contains("://") {
        let with_port = if endpoint
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        {
            endpoint.to_string()
        } else {
            format!("{endpoint}:6443")
        };
        return Err(fail(format!(
            "no scheme specified for the cluster endpoint URL\ntry: \"https://{with_port}\""
        )));
    }
    let url = url::Url::parse(endpoint)
        .map_err(|e| fail(format!("failed to parse the cluster endpoint URL: {e}")))?;
    if url.scheme() != "https" {
        return Err(fail(format!(
            "the control plane endpoint URL should have scheme https://\ntry: \"https://{}:{}\"",
            url.host_str().unwrap_or_default(),
            url.port().unwrap_or(6443)
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(fail("hostname must not be blank".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::AcceptedCas;
    use crate::secrets::SecretsBundle;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    #[test]
    fn endpoint_must_be_https_with_a_host() {
        assert!(validate_endpoint("https://192.168.1.120:6443").is_ok());
        assert!(validate_endpoint("https://cp.lan").is_ok());
        for bad in [
            "http://cp.lan:6443",
            "cp.lan",
            "cp.lan:6443",
            "https://:6443",
        ] {
            assert!(validate_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn accepted_cas_follow_each_ca_as_talos_orders_them() {
        use rand::SeedableRng as _;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(3);
        let secrets =
            SecretsBundle::generate_for_checks(&mut rng, time::OffsetDateTime::UNIX_EPOCH)
                .expect("bundle");
        let accepted = AcceptedCas {
            os: vec!["-----BEGIN CERTIFICATE-----\nos\n-----END CERTIFICATE-----\n".into()],
            kubernetes: vec![
                "-----BEGIN CERTIFICATE-----\nk8s\n-----END CERTIFICATE-----\n".into(),
            ],
        };
        let mut input = BaseConfigInput {
            cluster_name: "c".into(),
            endpoint: "https://10.0.0.1:6443".into(),
            kubernetes_version: None,
            talos_version: "v1.13.9".parse().expect("version"),
            role: Role::Worker,
            secrets: &secrets,
            install_disk: None,
            install_image: None,
            additional_sans: Vec::new(),
            hostname_config: true,
            accepted_cas: &accepted,
        };
        for role in [Role::Worker, Role::Controlplane] {
            input.role = role;
            let yaml = base_config(&input).expect("config").to_yaml();
            let keys: Vec<&str> = yaml
                .lines()
                .filter(|l| l.starts_with("    ") && !l.starts_with("     "))
                .map(str::trim)
                .collect();
            let after = |first: &str| keys.iter().position(|k| k.starts_with(first));
            let (ca, accepted_at) = (after("ca:"), after("acceptedCAs:"));
            assert_eq!(accepted_at, ca.map(|i| i + 1), "machine: {yaml}");
            assert_eq!(yaml.matches("acceptedCAs:").count(), 2, "{yaml}");
            assert!(yaml.contains(&STANDARD.encode(&accepted.os[0])), "{yaml}");
            assert!(
                yaml.contains(&STANDARD.encode(&accepted.kubernetes[0])),
                "{yaml}"
            );
        }
        input.accepted_cas = &crate::rotation::NO_ACCEPTED_CAS;
        let yaml = base_config(&input).expect("config").to_yaml();
        assert!(!yaml.contains("acceptedCAs"), "{yaml}");
    }

    #[test]
    fn endpoint_without_scheme_suggests_the_default_port() {
        let err = validate_endpoint("10.0.0.1").unwrap_err().to_string();
        assert!(err.contains("try: \"https://10.0.0.1:6443\""), "{err}");
        let err = validate_endpoint("10.0.0.1:443").unwrap_err().to_string();
        assert!(err.contains("try: \"https://10.0.0.1:443\""), "{err}");
    }
}
