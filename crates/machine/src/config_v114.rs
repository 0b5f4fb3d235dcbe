//! The base machine config of the v1.14 contract, as `talosctl gen config --talos-version
//! v1.14` writes it: a v1alpha1 document reduced to the machine's identity, its CAs and
//! tokens, then one document per concern, in the generator's order.
//! Source: Talos v1.14.0-rc.1 (commit 7a84d742b3d5) `pkg/machinery/config/generate/{init.go,
//! worker.go,kubernetes.go,block.go,security_profile.go,network.go}` and `contract.go`, checked
//! against its stability golden files `types/v1alpha1/testdata/stability/v1.14/base-*.yaml`.
//!
//! The certificates and keys of the new documents are PEM text (`cert: |`), not the base64 of
//! PEM the v1alpha1 document holds.

use serde_yaml_ng::{Mapping, Value};

use talosprov_base::role::Role;

use super::config_parts::{
    APISERVER_IMAGE, BaseConfigInput, CONTROLLER_MANAGER_IMAGE, DNS_DOMAIN, KUBELET_IMAGE,
    KUBEPRISM_PORT, LABEL_EXCLUDE_FROM_EXTERNAL_LB, POD_SUBNET, PROXY_IMAGE, SCHEDULER_IMAGE,
    SERVICE_SUBNET, default_audit_policy, etcd_ca, machine_identity, map, pod_security_admission,
    put, sans,
};
use super::secrets::EncryptionSecret;

/// The discovery service Talos registers with by default.
const DISCOVERY_ENDPOINT: &str = "https://discovery.talos.dev/";
/// How often the EPHEMERAL volume is trimmed (`FilesystemTrimConfig`, Go duration text).
const TRIM_INTERVAL: &str = "168h0m0s";
/// The control-plane node label and taint, which 1.14 writes out.
const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// Flannel's VXLAN backend and port (`KubeFlannelCNIConfig`).
const FLANNEL_BACKEND: &str = "vxlan";
const FLANNEL_PORT: u64 = 4789;

/// Every document of the v1.14 base config for `input`'s role, in Talos's order; `k8s` is the
/// Kubernetes version without `v`.
pub(super) fn documents(input: &BaseConfigInput<'_>, k8s: &str) -> Vec<Value> {
    let s = input.secrets;
    let control_plane = input.role == Role::Controlplane;
    let mut out = vec![
        v1alpha1(input),
        doc(
            "DiscoveryServiceConfig",
            [
                ("name", "default".into()),
                ("endpoint", DISCOVERY_ENDPOINT.into()),
            ],
        ),
        doc(
            "DiscoveryIdentityConfig",
            [
                ("clusterID", s.cluster.id.as_str().into()),
                ("clusterSecret", s.cluster.secret.expose().as_str().into()),
            ],
        ),
    ];
    if let Some(disk) = &input.install_disk {
        out.push(unattended_install(disk, input.install_image.as_deref()));
    }
    out.push(doc(
        "ResolverConfig",
        [(
            "hostDNS",
            map([
                ("enabled", true.into()),
                ("forwardKubeDNSToHost", true.into()),
            ]),
        )],
    ));
    out.push(doc(
        "VolumeConfig",
        [
            ("name", "EPHEMERAL".into()),
            ("mount", map([("secure", true.into())])),
        ],
    ));
    out.push(doc(
        "FilesystemTrimConfig",
        [("interval", TRIM_INTERVAL.into())],
    ));
    out.push(doc(
        "SecurityProfileConfig",
        [("workloadIsolation", true.into())],
    ));
    if input.hostname_config {
        out.push(doc("HostnameConfig", [("auto", "stable".into())]));
    }
    out.extend(kubernetes(input, k8s));
    if control_plane {
        out.extend(control_plane_documents(input, k8s));
    }
    out
}

/// A document of `kind`: `apiVersion: v1alpha1`, `kind`, then `fields` in order.
fn doc<const N: usize>(kind: &str, fields: [(&str, Value); N]) -> Value {
    let mut m = Mapping::new();
    put(&mut m, "apiVersion", "v1alpha1".into());
    put(&mut m, "kind", kind.into());
    for (k, v) in fields {
        put(&mut m, k, v);
    }
    Value::Mapping(m)
}

/// PEM text as the new documents hold it: a block scalar ending in a newline.
fn pem(text: &str) -> Value {
    let mut t = text.trim_end().to_owned();
    t.push('\n');
    Value::String(t)
}

/// The reduced v1alpha1 document: version flags, the machine's type, token, OS CA (with
/// any accepted beside it), SANs and disk quota; the bootstrap token and, on a control
/// plane, the etcd CA.
fn v1alpha1(input: &BaseConfigInput<'_>) -> Value {
    let s = input.secrets;
    let control_plane = input.role == Role::Controlplane;
    let mut machine = machine_identity(input);
    put(
        &mut machine,
        "features",
        map([("diskQuotaSupport", true.into())]),
    );
    let mut cluster = Mapping::new();
    put(
        &mut cluster,
        "token",
        s.bootstrap_token.expose().as_str().into(),
    );
    if control_plane {
        put(&mut cluster, "etcd", etcd_ca(input));
    }
    map([
        ("version", "v1alpha1".into()),
        ("debug", false.into()),
        ("persist", true.into()),
        ("machine", Value::Mapping(machine)),
        ("cluster", Value::Mapping(cluster)),
    ])
}

/// `UnattendedInstallConfig`, which replaces `machine.install` from 1.14: the disk by a CEL
/// selector on its path (`fmt.Sprintf("disk.dev_path == %q", disk)` in Talos), no wipe, and
/// the installer image when one is given.
fn unattended_install(disk: &str, image: Option<&str>) -> Value {
    let installer = match image {
        Some(image) => map([("image", image.into())]),
        None => Value::Mapping(Mapping::new()),
    };
    doc(
        "UnattendedInstallConfig",
        [
            ("installer", installer),
            (
                "provisioning",
                map([
                    (
                        "diskSelector",
                        map([("match", super::effective::dev_path_selector(disk).into())]),
                    ),
                    ("wipe", false.into()),
                ]),
            ),
        ],
    )
}

/// The Kubernetes documents of every node: cluster, node, kubelet, network, the API
/// server's CA (issuing on a control plane, accepted on a worker) and KubePrism.
fn kubernetes(input: &BaseConfigInput<'_>, k8s: &str) -> Vec<Value> {
    let s = input.secrets;
    let control_plane = input.role == Role::Controlplane;
    let mut node = Mapping::new();
    put(&mut node, "apiVersion", "v1alpha1".into());
    put(&mut node, "kind", "KubeNodeConfig".into());
    put(&mut node, "nodeIP", Value::Mapping(Mapping::new()));
    if control_plane {
        put(
            &mut node,
            "labels",
            map([
                (CONTROL_PLANE_LABEL, "".into()),
                (LABEL_EXCLUDE_FROM_EXTERNAL_LB, "".into()),
            ]),
        );
        put(
            &mut node,
            "taints",
            map([(CONTROL_PLANE_LABEL, "NoSchedule".into())]),
        );
    }
    let mut ca = Mapping::new();
    put(&mut ca, "apiVersion", "v1alpha1".into());
    put(&mut ca, "kind", "KubeAPIServerCAConfig".into());
    let mut accepted: Vec<Value> = input
        .accepted_cas
        .kubernetes
        .iter()
        .map(|c| pem(c))
        .collect();
    if control_plane {
        put(
            &mut ca,
            "issuingCA",
            map([
                ("cert", pem(&s.certs.k8s.crt)),
                ("key", pem(s.certs.k8s.key.expose())),
            ]),
        );
    } else {
        accepted.insert(0, pem(&s.certs.k8s.crt));
    }
    if !accepted.is_empty() {
        put(&mut ca, "acceptedCAs", Value::Sequence(accepted));
    }
    vec![
        doc(
            "KubeClusterConfig",
            [
                ("clusterName", input.cluster_name.as_str().into()),
                ("endpoint", input.endpoint.as_str().into()),
            ],
        ),
        Value::Mapping(node),
        doc(
            "KubeletConfig",
            [
                ("image", format!("{KUBELET_IMAGE}:v{k8s}").into()),
                ("config", Value::Mapping(Mapping::new())),
                ("defaultRuntimeSeccompProfileEnabled", true.into()),
            ],
        ),
        doc(
            "KubeNetworkConfig",
            [
                ("dnsDomain", DNS_DOMAIN.into()),
                ("podSubnets", Value::Sequence(vec![POD_SUBNET.into()])),
                (
                    "serviceSubnets",
                    Value::Sequence(vec![SERVICE_SUBNET.into()]),
                ),
            ],
        ),
        Value::Mapping(ca),
        doc("KubePrismConfig", [("port", KUBEPRISM_PORT.into())]),
    ]
}

/// The control plane's own documents: aggregator CA, admission, audit, authentication,
/// authorizers, etcd encryption, service accounts, then the components, Flannel and CoreDNS.
fn control_plane_documents(input: &BaseConfigInput<'_>, k8s: &str) -> Vec<Value> {
    let s = input.secrets;
    let agg = &s.certs.k8s_aggregator;
    let mut admission = doc("KubeAdmissionControlConfig", []);
    if let (Value::Mapping(m), Value::Mapping(plugin)) = (&mut admission, pod_security_admission())
    {
        m.extend(plugin);
    }
    let mut api = Mapping::new();
    put(&mut api, "apiVersion", "v1alpha1".into());
    put(&mut api, "kind", "KubeAPIServerConfig".into());
    put(
        &mut api,
        "image",
        format!("{APISERVER_IMAGE}:v{k8s}").into(),
    );
    if !input.additional_sans.is_empty() {
        put(&mut api, "certExtraSANs", sans(input));
    }
    vec![
        doc(
            "KubeAggregatorCAConfig",
            [(
                "issuingCA",
                map([("cert", pem(&agg.crt)), ("key", pem(agg.key.expose()))]),
            )],
        ),
        admission,
        doc(
            "KubeAuditPolicyConfig",
            [("configuration", default_audit_policy())],
        ),
        doc(
            "KubeAuthenticationConfig",
            [("configuration", anonymous_health())],
        ),
        doc(
            "KubeAuthorizerConfig",
            [("name", "node".into()), ("type", "Node".into())],
        ),
        doc(
            "KubeAuthorizerConfig",
            [("name", "rbac".into()), ("type", "RBAC".into())],
        ),
        doc(
            "KubeEtcdEncryptionConfig",
            [("config", encryption(&s.encryption))],
        ),
        doc(
            "KubeServiceAccountConfig",
            [(
                "issuer",
                map([
                    ("privateKey", pem(s.certs.k8s_service_account.expose())),
                    ("issuerURL", input.endpoint.as_str().into()),
                ]),
            )],
        ),
        Value::Mapping(api),
        doc(
            "KubeControllerManagerConfig",
            [("image", format!("{CONTROLLER_MANAGER_IMAGE}:v{k8s}").into())],
        ),
        doc(
            "KubeSchedulerConfig",
            [
                ("image", format!("{SCHEDULER_IMAGE}:v{k8s}").into()),
                ("config", Value::Mapping(Mapping::new())),
            ],
        ),
        doc(
            "KubeProxyConfig",
            [
                ("image", format!("{PROXY_IMAGE}:v{k8s}").into()),
                ("config", Value::Mapping(Mapping::new())),
            ],
        ),
        doc(
            "KubeFlannelCNIConfig",
            [
                ("backendType", FLANNEL_BACKEND.into()),
                ("backendPort", FLANNEL_PORT.into()),
            ],
        ),
        doc("KubeCoreDNSConfig", [("enabled", true.into())]),
    ]
}

/// The API server's AuthenticationConfiguration Talos generates: anonymous access to the
/// health endpoints only, no JWT issuers.
fn anonymous_health() -> Value {
    let conditions = ["/livez", "/readyz", "/healthz"]
        .into_iter()
        .map(|p| map([("path", p.into())]))
        .collect();
    map([
        (
            "anonymous",
            map([
                ("conditions", Value::Sequence(conditions)),
                ("enabled", true.into()),
            ]),
        ),
        ("jwt", Value::Sequence(Vec::new())),
    ])
}

/// The etcd EncryptionConfiguration for Secrets (`generate/kubernetes.go`): the secretbox
/// key as `key2`, and a bundle's legacy AES-CBC secret, if it has one, as a secretbox key
/// `key1` after it, as Talos writes it.
fn encryption(secret: &EncryptionSecret) -> Value {
    let key = |name: &str, value: &str| map([("name", name.into()), ("secret", value.into())]);
    let keys = match secret {
        EncryptionSecret::Secretbox(v) => vec![key("key2", v.expose())],
        EncryptionSecret::AesCbc(v) => vec![key("key1", v.expose())],
    };
    map([(
        "resources",
        Value::Sequence(vec![map([
            (
                "providers",
                Value::Sequence(vec![map([(
                    "secretbox",
                    map([("keys", Value::Sequence(keys))]),
                )])]),
            ),
            ("resources", Value::Sequence(vec!["secrets".into()])),
        ])]),
    )])
}
