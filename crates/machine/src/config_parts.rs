//! What a base machine config is made from ([`BaseConfigInput`]) and the pieces every
//! contract's generator writes it with: Talos's images and defaults, base64 certificate
//! pairs, accepted CAs, SANs, and the admission and audit policies Talos generates.
//! Source: Talos `pkg/machinery/config/generate` and `pkg/machinery/constants`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_yaml_ng::{Mapping, Value};

use super::rotation::AcceptedCas;
use super::secrets::SecretsBundle;
use talosprov_base::role::Role;
use talosprov_base::version::TalosVersion;

/// Everything the base config depends on.
#[derive(Debug, Clone)]
pub struct BaseConfigInput<'a> {
    /// `cluster.clusterName`.
    pub cluster_name: String,
    /// `cluster.controlPlane.endpoint`, e.g. `https://192.168.1.120:6443`.
    pub endpoint: String,
    /// Kubernetes version with or without `v`; `None` takes the Talos release's default.
    pub kubernetes_version: Option<String>,
    /// The Talos version the nodes run; selects the contract.
    pub talos_version: TalosVersion,
    /// Control plane or worker.
    pub role: Role,
    /// The cluster's secrets.
    pub secrets: &'a SecretsBundle,
    /// `machine.install.disk` (e.g. `/dev/sda`); left out when `None`.
    pub install_disk: Option<String>,
    /// `machine.install.image` (e.g. `factory.talos.dev/nocloud-installer/<id>:v1.13.9`);
    /// left out when `None`.
    pub install_image: Option<String>,
    /// Extra names and addresses (e.g. the VIP) for both `machine.certSANs` and
    /// `cluster.apiServer.certSANs`.
    pub additional_sans: Vec<String>,
    /// Whether to emit the `HostnameConfig` document (`auto: stable`) that Talos 1.12+
    /// generates; it is left out for an older Talos version even when this is `true`
    /// ([`ContractChoice::hostname_config`](crate::version::ContractChoice::hostname_config)).
    pub hostname_config: bool,
    /// CA certificates accepted beside the issuing ones during a CA rotation:
    /// `machine.acceptedCAs` and `cluster.acceptedCAs` (empty: not written).
    pub accepted_cas: &'a AcceptedCas,
}

/// Kubernetes component images (Talos `constants.go`).
pub(crate) const KUBELET_IMAGE: &str = "ghcr.io/siderolabs/kubelet";
pub(crate) const APISERVER_IMAGE: &str = "registry.k8s.io/kube-apiserver";
pub(crate) const CONTROLLER_MANAGER_IMAGE: &str = "registry.k8s.io/kube-controller-manager";
pub(crate) const PROXY_IMAGE: &str = "registry.k8s.io/kube-proxy";
pub(crate) const SCHEDULER_IMAGE: &str = "registry.k8s.io/kube-scheduler";
/// Generation defaults (talosctl `gen config` and `constants.go`).
pub(crate) const DNS_DOMAIN: &str = "cluster.local";
pub(crate) const POD_SUBNET: &str = "10.244.0.0/16";
pub(crate) const SERVICE_SUBNET: &str = "10.96.0.0/12";
pub(crate) const KUBEPRISM_PORT: u64 = 7445;
pub(crate) const LABEL_EXCLUDE_FROM_EXTERNAL_LB: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// A PEM text as the base64 string Talos writes for it.
pub(crate) fn b64(pem: &str) -> Value {
    Value::String(STANDARD.encode(pem.as_bytes()))
}

/// A `{crt, key}` pair in base64; the key empty when `None` (a worker gets
/// the CA certificate without its key).
pub(crate) fn cert_pair(crt: &str, key: Option<&str>) -> Value {
    map([
        ("crt", b64(crt)),
        ("key", key.map(b64).unwrap_or_else(|| "".into())),
    ])
}

/// `acceptedCAs: [{crt: <base64 PEM>}…]` after a `ca`, as Talos's
/// `PEMEncodedCertificate` list; nothing when `cas` is empty.
pub(crate) fn put_accepted(section: &mut Mapping, cas: &[String]) {
    if cas.is_empty() {
        return;
    }
    let list = cas.iter().map(|crt| map([("crt", b64(crt))])).collect();
    put(section, "acceptedCAs", Value::Sequence(list));
}

/// The extra certificate SANs, as a YAML sequence.
pub(crate) fn sans(input: &BaseConfigInput<'_>) -> Value {
    Value::Sequence(
        input
            .additional_sans
            .iter()
            .map(|s| s.as_str().into())
            .collect(),
    )
}

/// The PodSecurity admission plugin config Talos generates (keys sorted, as Talos writes maps).
pub(crate) fn pod_security_admission() -> Value {
    let defaults = map([
        ("audit", "restricted".into()),
        ("audit-version", "latest".into()),
        ("enforce", "baseline".into()),
        ("enforce-version", "latest".into()),
        ("warn", "restricted".into()),
        ("warn-version", "latest".into()),
    ]);
    let exemptions = map([
        ("namespaces", Value::Sequence(vec!["kube-system".into()])),
        ("runtimeClasses", Value::Sequence(vec![])),
        ("usernames", Value::Sequence(vec![])),
    ]);
    map([
        ("name", "PodSecurity".into()),
        (
            "configuration",
            map([
                (
                    "apiVersion",
                    "pod-security.admission.config.k8s.io/v1alpha1".into(),
                ),
                ("defaults", defaults),
                ("exemptions", exemptions),
                ("kind", "PodSecurityConfiguration".into()),
            ]),
        ),
    ])
}

/// `v1alpha1.APIServerDefaultAuditPolicy`.
pub(crate) fn default_audit_policy() -> Value {
    map([
        ("apiVersion", "audit.k8s.io/v1".into()),
        ("kind", "Policy".into()),
        (
            "rules",
            Value::Sequence(vec![map([("level", "Metadata".into())])]),
        ),
    ])
}

pub(crate) fn put(m: &mut Mapping, key: &str, value: Value) {
    m.insert(Value::String(key.to_string()), value);
}

pub(crate) fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Mapping(
        entries
            .into_iter()
            .map(|(k, v)| (Value::String(k.into()), v))
            .collect(),
    )
}

/// The start of `machine` in every contract: type, trustd token, OS CA (its key on a control
/// plane only), the CAs accepted beside it, and the certificate SANs.
pub(crate) fn machine_identity(input: &BaseConfigInput<'_>) -> Mapping {
    let s = input.secrets;
    let mut machine = Mapping::new();
    put(&mut machine, "type", input.role.as_str().into());
    put(
        &mut machine,
        "token",
        s.trustd_token.expose().as_str().into(),
    );
    let os_key = (input.role == Role::Controlplane).then(|| s.certs.os.key.expose().as_str());
    put(&mut machine, "ca", cert_pair(&s.certs.os.crt, os_key));
    put_accepted(&mut machine, &input.accepted_cas.os);
    put(&mut machine, "certSANs", sans(input));
    machine
}

/// `cluster.etcd`: the etcd CA with its key (control planes only).
pub(crate) fn etcd_ca(input: &BaseConfigInput<'_>) -> Value {
    let etcd = &input.secrets.certs.etcd;
    map([("ca", cert_pair(&etcd.crt, Some(etcd.key.expose())))])
}
