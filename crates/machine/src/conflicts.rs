//! Talos's refusal of a v1alpha1 field beside the document that replaces it: each document
//! kind's `V1Alpha1ConflictValidate`, which `container/validate.go` runs on every document of
//! a config against its v1alpha1 document. Each document reports its first conflict only, as
//! Talos's functions return at the first. Source: Talos v1.14.0-rc.1 (commit 7a84d742b3d5)
//! `pkg/machinery/config/types/{k8s,cluster,runtime,network,cri}/*.go`; the messages are
//! Talos's own. Pure.

use serde_yaml_ng::Value;

/// What triggers a conflict: the v1alpha1 field at `path` (dotted) is
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    /// set to anything (a Go pointer or slice that is not nil: `{}` and `[]` count);
    Present,
    /// a non-empty list, map or string;
    NonEmpty,
    /// `true`;
    True,
    /// set to anything but `0`.
    NonZero,
}

/// One rule: a document kind, the v1alpha1 field, the trigger and Talos's message.
struct Rule {
    kind: &'static str,
    field: &'static str,
    when: When,
    message: &'static str,
}

const fn rule(kind: &'static str, field: &'static str, when: When, message: &'static str) -> Rule {
    Rule {
        kind,
        field,
        when,
        message,
    }
}

use When::{NonEmpty, NonZero, Present, True};

/// Every rule, in the order each kind's function checks them.
#[rustfmt::skip]
const RULES: &[Rule] = &[
    rule("KubeletConfig", "machine.kubelet", Present, "kubelet config is already set in v1alpha1 config (.machine.kubelet)"),
    rule("KubeCredentialProviderConfig", "machine.kubelet", Present, "cannot use KubeCredentialProviderConfig with legacy kubelet configuration (.machine.kubelet)"),
    rule("KubeNodeConfig", "cluster.allowSchedulingOnControlPlanes", Present, ".cluster.allowSchedulingOnControlPlanes is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "cluster.allowSchedulingOnMasters", Present, ".cluster.allowSchedulingOnMasters is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.kubelet.skipNodeRegistration", Present, ".machine.kubelet.skipNodeRegistration is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.kubelet.registerWithFQDN", Present, ".machine.kubelet.registerWithFQDN is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.kubelet.nodeIP", Present, ".machine.kubelet.nodeIP is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.nodeLabels", Present, ".machine.nodeLabels is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.nodeAnnotations", Present, ".machine.nodeAnnotations is already set in v1alpha1 config"),
    rule("KubeNodeConfig", "machine.nodeTaints", Present, ".machine.nodeTaints is already set in v1alpha1 config"),
    rule("KubeClusterConfig", "cluster.clusterName", NonEmpty, "cluster name is already set in the v1alpha1 config (.cluster.clusterName). Please remove it and use only the new KubeClusterConfig document to avoid conflicts"),
    rule("KubeClusterConfig", "cluster.controlPlane.endpoint", NonEmpty, "cluster endpoint is already set in the v1alpha1 config (.cluster.controlPlane.endpoint). Please remove it and use only the new KubeClusterConfig document to avoid conflicts"),
    rule("KubeNetworkConfig", "cluster.network", Present, "cluster network config is already set in the v1alpha1 config (.machine.cluster.network). Please remove it and use only the new KubeNetworkConfig document to avoid conflicts"),
    rule("KubeFlannelCNIConfig", "cluster.network", Present, "cluster network config in v1alpha1 config (.machine.cluster.network) can't be used with KubeFlannelCNIConfig document, please remove it to avoid conflicts"),
    rule("KubeAPIServerCAConfig", "cluster.ca", Present, "kube-apiserver CA is already set in v1alpha1 config (.cluster.ca)"),
    rule("KubeAggregatorCAConfig", "cluster.aggregatorCA", Present, "kube-apiserver aggregator CA is already set in v1alpha1 config (.cluster.aggregatorCA), please remove it and use the new KubeAggregatorCAConfig document instead"),
    rule("KubeServiceAccountConfig", "cluster.serviceAccount", Present, "service account is already set in v1alpha1 config (.cluster.serviceAccount)"),
    rule("KubeEtcdEncryptionConfig", "cluster.secretboxEncryptionSecret", NonEmpty, "etcd encryption config is already set in v1alpha1 config"),
    rule("KubeEtcdEncryptionConfig", "cluster.aescbcEncryptionSecret", NonEmpty, "etcd encryption config is already set in v1alpha1 config"),
    rule("KubeAPIServerConfig", "cluster.apiServer", Present, "kube-apiserver config is already set in v1alpha1 config (.cluster.apiServer)"),
    rule("KubeAPIServerConfig", "cluster.controlPlane.localAPIServerPort", NonZero, "kube-apiserver API port is already set in v1alpha1 config (.cluster.controlPlane.localAPIServerPort)"),
    rule("KubeAdmissionControlConfig", "cluster.apiServer.admissionControl", NonEmpty, "admission control plugin config is already set in v1alpha1 config"),
    // Talos checks the admission plugins here too (not the authorization config).
    rule("KubeAuthorizerConfig", "cluster.apiServer.admissionControl", NonEmpty, "admission control plugin config is already set in v1alpha1 config"),
    rule("KubeAuditPolicyConfig", "cluster.apiServer.auditPolicy", NonEmpty, "audit policy config is already set in v1alpha1 config"),
    rule("KubeControllerManagerConfig", "cluster.controllerManager", Present, "kube-controller-manager config is already set in v1alpha1 config (.cluster.controllerManager)"),
    rule("KubeControllerManagerConfig", "machine.controlPlane.controllerManager", Present, "kube-controller-manager config is already set in v1alpha1 config (.machine.controlplane.controllerManager)"),
    rule("KubeSchedulerConfig", "cluster.scheduler", Present, "kube-scheduler config is already set in v1alpha1 config (.cluster.scheduler)"),
    rule("KubeSchedulerConfig", "machine.controlPlane.scheduler", Present, "kube-scheduler config is already set in v1alpha1 config (.machine.controlplane.scheduler)"),
    rule("KubeProxyConfig", "cluster.proxy", Present, "cluster proxy config in v1alpha1 config (.machine.cluster.proxy) can't be used with KubeProxyConfig document, please remove it to avoid conflicts"),
    rule("KubeCoreDNSConfig", "cluster.coreDNS", Present, "CoreDNS config is already set in v1alpha1 config (.cluster.coreDNS)"),
    rule("KubePrismConfig", "machine.features.kubePrism", Present, "KubePrism config in v1alpha1 config (.machine.features.kubePrism) can't be used with KubePrismConfig document, please remove it to avoid conflicts"),
    rule("KubeTalosAPIAccessConfig", "machine.features.kubernetesTalosAPIAccess", Present, ".machine.features.kubernetesTalosAPIAccess is already set in v1alpha1 config"),
    rule("DiscoveryServiceConfig", "cluster.discovery", Present, "discovery service is already configured in .cluster.discovery of the v1alpha1 config"),
    rule("DiscoveryIdentityConfig", "cluster.id", NonEmpty, "cluster identity is already configured in .cluster.id/.cluster.secret of the v1alpha1 config"),
    rule("DiscoveryIdentityConfig", "cluster.secret", NonEmpty, "cluster identity is already configured in .cluster.id/.cluster.secret of the v1alpha1 config"),
    rule("UnattendedInstallConfig", "machine.install", Present, "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)"),
    rule("ResolverConfig", "machine.network.searchDomains", Present, ".machine.network.searchDomains is already set in v1alpha1 config"),
    rule("ResolverConfig", "machine.network.nameservers", Present, ".machine.network.nameservers is already set in v1alpha1 config"),
    rule("ResolverConfig", "machine.network.disableSearchDomain", True, ".machine.network.disableSearchDomain is already set in v1alpha1 config"),
    rule("TimeSyncConfig", "machine.time.disabled", True, "time sync cannot be disabled in both v1alpha1 and new-style configuration"),
    rule("TimeSyncConfig", "machine.time.servers", NonEmpty, "time servers cannot be specified in both v1alpha1 and new-style configuration"),
    rule("TimeSyncConfig", "machine.time.bootTimeout", NonEmpty, "boot timeout cannot be specified in both v1alpha1 and new-style configuration"),
    rule("KubeSpanConfig", "machine.network.kubespan", Present, "kubespan is already configured in v1alpha1 machine.network.kubespan"),
    rule("CRIBaseRuntimeSpecConfig", "machine.baseRuntimeSpecOverrides", Present, "base runtime spec overrides are already set in v1alpha1 config"),
    rule("ImageCacheConfig", "machine.features.imageCache", Present, "image cache config is already set in v1alpha1 config"),
];

/// The document kinds Talos allows only in control-plane configs: those that implement
/// `container.ControlplaneOnlyConfig` (Talos v1.14.0-rc.1 `types/k8s/*.go`). On a worker,
/// `container/validate.go` refuses them with [`control_plane_only_message`].
pub const CONTROL_PLANE_ONLY: &[&str] = &[
    "KubeAdmissionControlConfig",
    "KubeAggregatorCAConfig",
    "KubeAPIServerConfig",
    "KubeAuditPolicyConfig",
    "KubeAuthenticationConfig",
    "KubeAuthorizerConfig",
    "KubeControllerManagerConfig",
    "KubeCoreDNSConfig",
    "KubeEtcdEncryptionConfig",
    "KubeFlannelCNIConfig",
    "KubeProxyConfig",
    "KubeSchedulerConfig",
    "KubeServiceAccountConfig",
    "KubeTalosAPIAccessConfig",
];

/// Talos's refusal of control-plane-only documents on another machine: `kinds` sorted and
/// deduplicated, written as Go's `%v` writes a string slice.
pub fn control_plane_only_message(kinds: &[&str]) -> String {
    let mut kinds = kinds.to_vec();
    kinds.sort_unstable();
    kinds.dedup();
    format!(
        "the following document kinds are only allowed on control plane machines: [{}]",
        kinds.join(" ")
    )
}

/// One conflict: the document, the v1alpha1 field it conflicts with and Talos's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The document's kind, e.g. `KubeletConfig`.
    pub kind: &'static str,
    /// The document's `name`, for named kinds.
    pub name: Option<String>,
    /// The v1alpha1 field, dotted (`machine.kubelet`).
    pub field: &'static str,
    /// Talos's error, word for word.
    pub message: &'static str,
}

fn triggered(doc: &Value, path: &str, when: When) -> bool {
    let Some(v) = path.split('.').try_fold(doc, |v, key| v.get(key)) else {
        return false;
    };
    match when {
        Present => !v.is_null(),
        NonEmpty => match v {
            Value::Null => false,
            Value::String(s) => !s.is_empty(),
            Value::Sequence(s) => !s.is_empty(),
            Value::Mapping(m) => !m.is_empty(),
            Value::Bool(_) | Value::Number(_) | Value::Tagged(_) => true,
        },
        True => v.as_bool() == Some(true),
        NonZero => !(v.is_null() || v.as_u64() == Some(0)),
    }
}

/// The conflicts of the v1alpha1 document `v1alpha1` with the documents beside it (`others`,
/// in order): for each document, its kind's first conflict. `ResolverConfig` conflicts with
/// `machine.features.hostDNS` only when it sets `hostDNS` itself, as in Talos.
pub fn find<'a>(v1alpha1: &Value, others: impl IntoIterator<Item = &'a Value>) -> Vec<Conflict> {
    let mut out = Vec::new();
    for doc in others {
        let Some(kind) = doc.get("kind").and_then(Value::as_str) else {
            continue;
        };
        let name = doc.get("name").and_then(Value::as_str).map(str::to_owned);
        let mut first = RULES
            .iter()
            .filter(|r| r.kind == kind)
            .find(|r| triggered(v1alpha1, r.field, r.when))
            .map(|r| (r.kind, r.field, r.message));
        if first.is_none()
            && kind == "ResolverConfig"
            && doc.get("hostDNS").is_some_and(|h| !h.is_null())
            && triggered(v1alpha1, "machine.features.hostDNS", Present)
        {
            first = Some((
                "ResolverConfig",
                "machine.features.hostDNS",
                ".machine.features.hostDNS is already set in v1alpha1 config",
            ));
        }
        if let Some((kind, field, message)) = first {
            out.push(Conflict {
                kind,
                name,
                field,
                message,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<Value> {
        talosprov_patch::document::parse_documents(text).unwrap()
    }

    #[test]
    fn a_legacy_field_beside_its_document_is_refused_with_talos_s_message() {
        let d = docs(
            "machine:\n  kubelet: {}\n  network:\n    nameservers: [1.1.1.1]\ncluster:\n  network:\n    cni: {name: none}\n  proxy:\n    disabled: true\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k\n---\napiVersion: v1alpha1\nkind: ResolverConfig\nhostDNS: {enabled: true}\n---\napiVersion: v1alpha1\nkind: KubeNetworkConfig\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
        );
        let found = find(&d[0], &d[1..]);
        let fields: Vec<&str> = found.iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "machine.kubelet",
                "machine.network.nameservers",
                "cluster.network",
                "cluster.proxy"
            ]
        );
        assert_eq!(
            found[0].message,
            "kubelet config is already set in v1alpha1 config (.machine.kubelet)"
        );
    }

    #[test]
    fn only_the_first_conflict_of_a_document_counts_and_empty_values_do_not() {
        let d = docs(
            "cluster:\n  id: x\n  secret: y\n  clusterName: ''\n  controlPlane:\n    localAPIServerPort: 0\n---\napiVersion: v1alpha1\nkind: DiscoveryIdentityConfig\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\n---\napiVersion: v1alpha1\nkind: KubeAPIServerConfig\n",
        );
        let found = find(&d[0], &d[1..]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, "cluster.id");
    }

    #[test]
    fn host_dns_conflicts_only_with_a_resolver_config_that_sets_it() {
        let legacy = "machine:\n  features:\n    hostDNS: {enabled: true}\n";
        let without = docs(&format!(
            "{legacy}---\napiVersion: v1alpha1\nkind: ResolverConfig\nnameservers: [{{address: 1.1.1.1}}]\n"
        ));
        assert!(find(&without[0], &without[1..]).is_empty());
        let with = docs(&format!(
            "{legacy}---\napiVersion: v1alpha1\nkind: ResolverConfig\nhostDNS: {{enabled: true}}\n"
        ));
        assert_eq!(
            find(&with[0], &with[1..])[0].field,
            "machine.features.hostDNS"
        );
    }
}
