//! The v1alpha1 fields Talos 1.14 deprecates, each with what replaces it, and the ones a
//! patch sets. Talos 1.14 still reads them, but each has a document of its own now, the
//! JSON schema leaves them out, and setting both a field and its document is an error.
//! Source: Talos v1.14.0-rc.1 (commit 7a84d742b3d5): the `Deprecated:` comments of
//! `pkg/machinery/config/types/v1alpha1/v1alpha1_types.go`, the legacy bridge
//! `v1alpha1_k8s_bridge.go`, and the release notes in `hack/release.toml`.

use serde_yaml_ng::Value;

use talosprov_base::version::TalosVersion;
use talosprov_patch::load::{Patch, PatchBody};
use talosprov_patch::merge::StrategicStep;

/// A deprecated v1alpha1 field and what replaces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deprecation {
    /// The field, dotted from the document root (`machine.kubelet.image`); everything
    /// under it is deprecated with it.
    pub field: &'static str,
    /// What replaces it, as a message ends: `the KubeletConfig document (image)`, or why
    /// nothing does.
    pub replacement: &'static str,
}

impl Deprecation {
    /// The warning for a patch that sets `path` (this field or one under it).
    pub fn message(&self, path: &str) -> String {
        match self.replacement.strip_prefix("nothing") {
            Some(rest) => format!(
                "{path} is deprecated from Talos 1.14, which still reads it; nothing replaces \
                 it{rest}"
            ),
            None => format!(
                "{path} is deprecated from Talos 1.14, which still reads it; use {} instead",
                self.replacement
            ),
        }
    }
}

/// The first Talos minor release that deprecates these fields.
pub const DEPRECATED_FROM: (u32, u32) = (1, 14);

/// Whether Talos `version` deprecates the fields of [`DEPRECATED_IN_1_14`].
pub fn applies_to(version: &TalosVersion) -> bool {
    (version.major, version.minor) >= DEPRECATED_FROM
}

macro_rules! deprecations {
    ($($field:literal => $replacement:literal,)*) => {
        /// Every field Talos 1.14 deprecates, with what replaces it.
        pub const DEPRECATED_IN_1_14: &[Deprecation] = &[
            $(Deprecation { field: $field, replacement: $replacement },)*
        ];
    };
}

deprecations! {
    "persist" => "nothing: it has no effect",
    "machine.kubelet.image" => "the KubeletConfig document (image)",
    "machine.kubelet.extraArgs" => "the KubeletConfig document (extraArgs)",
    "machine.kubelet.extraConfig" => "the KubeletConfig document (config)",
    "machine.kubelet.clusterDNS" => "the KubeletConfig document (clusterDNS)",
    "machine.kubelet.defaultRuntimeSeccompProfileEnabled" => "the KubeletConfig document (defaultRuntimeSeccompProfileEnabled)",
    "machine.kubelet.credentialProviderConfig" => "the KubeCredentialProviderConfig document (configuration)",
    "machine.kubelet.extraMounts" => "nothing: the multi-document kubelet config has no extra mounts",
    "machine.kubelet.disableManifestsDirectory" => "nothing: the manifests directory is always disabled",
    "machine.kubelet.nodeIP" => "the KubeNodeConfig document (nodeIP.validSubnets)",
    "machine.kubelet.registerWithFQDN" => "the KubeNodeConfig document (registerWithFQDN)",
    "machine.kubelet.skipNodeRegistration" => "the KubeNodeConfig document (skipNodeRegistration)",
    "machine.kubelet" => "the KubeletConfig and KubeNodeConfig documents",
    "machine.nodeLabels" => "the KubeNodeConfig document (labels)",
    "machine.nodeAnnotations" => "the KubeNodeConfig document (annotations)",
    "machine.nodeTaints" => "the KubeNodeConfig document (taints)",
    "machine.pods" => "one KubeStaticPodConfig document per pod (name, pod)",
    "machine.controlPlane.controllerManager.disabled" => "the KubeControllerManagerConfig document (enabled: false)",
    "machine.controlPlane.scheduler.disabled" => "the KubeSchedulerConfig document (enabled: false)",
    "machine.features.kubePrism" => "the KubePrismConfig document (port; no document: KubePrism off)",
    "machine.features.kubernetesTalosAPIAccess" => "the KubeTalosAPIAccessConfig document (allowedRoles, allowedKubernetesNamespaces)",
    "machine.features.hostDNS" => "the ResolverConfig document (hostDNS)",
    "machine.features.imageCache" => "the ImageCacheConfig document (local.enabled)",
    "machine.features.stableHostname" => "the HostnameConfig document (auto: stable)",
    "machine.network.hostname" => "the HostnameConfig document (hostname)",
    "machine.network.nameservers" => "the ResolverConfig document (nameservers[].address)",
    "machine.network.searchDomains" => "the ResolverConfig document (searchDomains.domains)",
    "machine.network.disableSearchDomain" => "the ResolverConfig document (searchDomains.disableDefault)",
    "machine.network.extraHostEntries" => "one StaticHostConfig document per address (name: the IP, hostnames)",
    "machine.network.kubespan" => "the KubeSpanConfig document",
    "machine.network.interfaces" => "the LinkConfig, BondConfig, VLANConfig, DHCPv4Config and Layer2VIPConfig documents",
    "machine.time" => "the TimeSyncConfig document (enabled, ntp.servers, bootTimeout)",
    "machine.install.disk" => "the UnattendedInstallConfig document (provisioning.diskSelector.match)",
    "machine.install.diskSelector" => "the UnattendedInstallConfig document (provisioning.diskSelector.match, a CEL expression)",
    "machine.install.image" => "the UnattendedInstallConfig document (installer.image)",
    "machine.install.wipe" => "the UnattendedInstallConfig document (provisioning.wipe)",
    "machine.install.extraKernelArgs" => "nothing in the config: put kernel arguments in the node's Image Factory schematic",
    "machine.install" => "the UnattendedInstallConfig document",
    "machine.sysctls" => "the SysctlConfig document (params)",
    "machine.sysfs" => "the SysfsConfig document (params)",
    "machine.kernel.modules" => "one KernelModuleConfig document per module (name, parameters)",
    "machine.udev" => "the UdevRulesConfig document (rules)",
    "machine.files" => "one EtcFileConfig document per file under /etc (or a CRICustomizationConfig document for containerd's)",
    "machine.baseRuntimeSpecOverrides" => "the CRIBaseRuntimeSpecConfig document (overrides)",
    "machine.env" => "the EnvironmentConfig document (variables)",
    "machine.registries" => "the RegistryMirrorConfig, RegistryAuthConfig and RegistryTLSConfig documents",
    "machine.disks" => "one UserVolumeConfig document per volume",
    "machine.systemDiskEncryption" => "the VolumeConfig documents of STATE and EPHEMERAL (encryption)",
    "cluster.id" => "the DiscoveryIdentityConfig document (clusterID)",
    "cluster.secret" => "the DiscoveryIdentityConfig document (clusterSecret)",
    "cluster.clusterName" => "the KubeClusterConfig document (clusterName)",
    "cluster.controlPlane.endpoint" => "the KubeClusterConfig document (endpoint)",
    "cluster.controlPlane.localAPIServerPort" => "the KubeAPIServerConfig document (apiPort)",
    "cluster.network.cni" => "a KubeFlannelCNIConfig document for flannel, KubeExternalManifestConfig documents for a custom CNI's URLs (no document for none)",
    "cluster.network" => "the KubeNetworkConfig document (dnsDomain, podSubnets, serviceSubnets)",
    "cluster.ca" => "the KubeAPIServerCAConfig document (issuingCA)",
    "cluster.acceptedCAs" => "the KubeAPIServerCAConfig document (acceptedCAs)",
    "cluster.aggregatorCA" => "the KubeAggregatorCAConfig document (issuingCA)",
    "cluster.serviceAccount" => "the KubeServiceAccountConfig document (issuer.privateKey)",
    "cluster.secretboxEncryptionSecret" => "the KubeEtcdEncryptionConfig document (config)",
    "cluster.aescbcEncryptionSecret" => "the KubeEtcdEncryptionConfig document (config)",
    "cluster.apiServer.certSANs" => "the KubeAPIServerConfig document (certExtraSANs)",
    "cluster.apiServer.extraVolumes" => "nothing: the multi-document API server config has no extra volumes",
    "cluster.apiServer.disablePodSecurityPolicy" => "nothing: it has no effect",
    "cluster.apiServer.admissionControl" => "one KubeAdmissionControlConfig document per plugin (name, configuration)",
    "cluster.apiServer.auditPolicy" => "the KubeAuditPolicyConfig document (configuration)",
    "cluster.apiServer.authorizationConfig" => "one KubeAuthorizerConfig document per authorizer (name, type, webhook)",
    "cluster.apiServer" => "the KubeAPIServerConfig document (image, extraArgs, env, resources)",
    "cluster.controllerManager.extraVolumes" => "nothing: the multi-document controller manager config has no extra volumes",
    "cluster.controllerManager" => "the KubeControllerManagerConfig document (image, extraArgs, env, resources)",
    "cluster.scheduler.extraVolumes" => "nothing: the multi-document scheduler config has no extra volumes",
    "cluster.scheduler" => "the KubeSchedulerConfig document (image, extraArgs, env, resources, config)",
    "cluster.proxy" => "the KubeProxyConfig document (enabled, image, mode, extraArgs)",
    "cluster.coreDNS" => "the KubeCoreDNSConfig document (enabled, image)",
    "cluster.extraManifests" => "one KubeExternalManifestConfig document per URL (name, url)",
    "cluster.extraManifestHeaders" => "the KubeExternalManifestConfig documents (headers)",
    "cluster.inlineManifests" => "one KubeInlineManifestConfig document per manifest (name, manifest)",
    "cluster.allowSchedulingOnControlPlanes" => "the KubeNodeConfig document's taints, without the control-plane NoSchedule taint",
    "cluster.allowSchedulingOnMasters" => "the KubeNodeConfig document's taints, without the control-plane NoSchedule taint",
    "cluster.discovery.registries.kubernetes" => "nothing: only the discovery service registry remains",
    "cluster.discovery" => "one DiscoveryServiceConfig document per registry (name, endpoint)",
    "cluster.etcd.subnet" => "cluster.etcd.advertisedSubnets",
}

/// The deprecation that covers `path` (dotted, list indices left out): the entry for
/// the path itself or, failing that, for its nearest parent.
pub fn deprecation(path: &str) -> Option<&'static Deprecation> {
    let mut candidate = path;
    loop {
        if let Some(d) = DEPRECATED_IN_1_14.iter().find(|d| d.field == candidate) {
            return Some(d);
        }
        candidate = &candidate[..candidate.rfind('.')?];
    }
}

/// The deprecated fields `patch` sets in the v1alpha1 document, each with its
/// deprecation, in the patch's order: a strategic-merge patch's keys (the most specific
/// entry that covers each; nothing under a deprecated field is named again), a JSON
/// patch's `add`, `replace`, `copy` and `move` targets. Removing a field is never
/// reported.
pub fn set_by(patch: &Patch) -> Vec<(String, &'static Deprecation)> {
    let mut out = Vec::new();
    match &patch.body {
        PatchBody::Strategic(steps) => {
            for step in steps {
                match step {
                    StrategicStep::Merge { id, document } if id.is_v1alpha1() => {
                        walk(document, "", &mut out);
                    }
                    StrategicStep::Merge { .. } | StrategicStep::Delete(_) => {}
                }
            }
        }
        PatchBody::Json6902(ops) => {
            for op in &ops.0 {
                let target = match op {
                    json_patch::PatchOperation::Add(o) => &o.path,
                    json_patch::PatchOperation::Replace(o) => &o.path,
                    json_patch::PatchOperation::Copy(o) => &o.path,
                    json_patch::PatchOperation::Move(o) => &o.path,
                    json_patch::PatchOperation::Remove(_) | json_patch::PatchOperation::Test(_) => {
                        continue;
                    }
                };
                let dotted: Vec<String> = target
                    .tokens()
                    .map(|t| t.decoded().into_owned())
                    .filter(|t| !t.is_empty() && !t.bytes().all(|b| b.is_ascii_digit()) && t != "-")
                    .collect();
                if let Some(d) = deprecation(&dotted.join(".")) {
                    push(&mut out, d.field.to_owned(), d);
                }
            }
        }
    }
    out
}

/// The deprecated fields a v1alpha1 document (a patch's or a config's) sets, with each one's
/// deprecation, in key order: the most specific entry that covers each key.
pub fn in_document(doc: &Value) -> Vec<(String, &'static Deprecation)> {
    let mut out = Vec::new();
    walk(doc, "", &mut out);
    out
}

/// Report `path` once.
fn push(out: &mut Vec<(String, &'static Deprecation)>, path: String, d: &'static Deprecation) {
    if !out.iter().any(|(p, _)| *p == path) {
        out.push((path, d));
    }
}

/// Every key path of `value` under `prefix`, down to the first deprecated one.
fn walk(value: &Value, prefix: &str, out: &mut Vec<(String, &'static Deprecation)>) {
    let Value::Mapping(map) = value else {
        return;
    };
    for (key, child) in map {
        let Some(key) = key.as_str() else { continue };
        let path = if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        };
        // The most specific entry wins: go deeper while a child has an entry of its own.
        let deeper = DEPRECATED_IN_1_14
            .iter()
            .any(|d| d.field.len() > path.len() && d.field.starts_with(&format!("{path}.")));
        if deeper && child.is_mapping() {
            walk(child, &path, out);
        } else if let Some(d) = deprecation(&path) {
            push(out, path, d);
        } else {
            walk(child, &path, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_patch::load::load_patch;

    fn fields(text: &str) -> Vec<String> {
        let patch = load_patch("p.yaml", text).expect("patch");
        set_by(&patch).into_iter().map(|(p, _)| p).collect()
    }

    #[test]
    fn a_strategic_patch_names_each_deprecated_field_it_sets() {
        let found = fields(
            "machine:\n  kubelet:\n    image: k\n    extraArgs: {a: b}\n    extraMounts: []\n  \
             certSANs: [x]\n  network:\n    interfaces: [{interface: eth0}]\n    nameservers: [1.1.1.1]\n  \
             install:\n    extraKernelArgs: [a]\n  features:\n    diskQuotaSupport: true\ncluster:\n  \
             apiServer:\n    certSANs: [a]\n    image: i\n  network:\n    cni: {name: none}\n    \
             podSubnets: [10.0.0.0/16]\n",
        );
        assert_eq!(
            found,
            [
                "machine.kubelet.image",
                "machine.kubelet.extraArgs",
                "machine.kubelet.extraMounts",
                "machine.network.interfaces",
                "machine.network.nameservers",
                "machine.install.extraKernelArgs",
                "cluster.apiServer.certSANs",
                "cluster.apiServer.image",
                "cluster.network.cni",
                "cluster.network.podSubnets",
            ]
        );
        assert_eq!(
            deprecation("cluster.apiServer.image").map(|d| d.replacement),
            Some("the KubeAPIServerConfig document (image, extraArgs, env, resources)")
        );
        assert_eq!(deprecation("machine.certSANs"), None, "still in v1alpha1");
        let extra = deprecation("machine.kubelet.extraMounts").expect("entry");
        assert_eq!(
            extra.message("machine.kubelet.extraMounts"),
            "machine.kubelet.extraMounts is deprecated from Talos 1.14, which still reads it; \
             nothing replaces it: the multi-document kubelet config has no extra mounts"
        );
        let image = deprecation("machine.kubelet.image").expect("entry");
        assert!(
            image
                .message("machine.kubelet.image")
                .ends_with("use the KubeletConfig document (image) instead")
        );
        assert_eq!(deprecation("machine.features.diskQuotaSupport"), None);
    }

    #[test]
    fn other_documents_removals_and_json_patches() {
        assert!(fields("apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n").is_empty());
        assert!(fields("machine:\n  network:\n    hostname:\n      $patch: delete\n").is_empty());
        let json = "- op: add\n  path: /machine/sysctls/net.ipv4.ip_forward\n  value: \"1\"\n\
                    - op: remove\n  path: /cluster/proxy\n\
                    - op: add\n  path: /machine/kernel/modules/-\n  value: {name: br_netfilter}\n";
        assert_eq!(fields(json), ["machine.sysctls", "machine.kernel.modules"]);
    }

    #[test]
    fn only_talos_1_14_and_later_deprecate_them() {
        let v = |s: &str| s.parse::<TalosVersion>().expect("version");
        assert!(!applies_to(&v("v1.13.9")));
        assert!(applies_to(&v("v1.14.0")));
        assert!(applies_to(&v("v1.15.0-alpha.0")));
        // Every entry is distinct, so the most specific one is well defined.
        let mut all: Vec<&str> = DEPRECATED_IN_1_14.iter().map(|d| d.field).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), DEPRECATED_IN_1_14.len());
    }
}
