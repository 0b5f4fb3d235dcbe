//! Machine config comparisons (pure): the redacted text of a config, the
//! unified diff between two, whether applying the new one reboots the node,
//! and which changed settings Talos applies only at bootstrap.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::Value;

use talosprov_machine::config::machine_config_yaml;
use talosprov_machine::effective;
use talosprov_machine::redact::redact_secrets;

/// Settings Talos acts on only when the cluster is bootstrapped (the
/// bootstrap manifests): changing them later has no effect on the cluster.
pub const BOOTSTRAP_ONLY: &[(&str, &str)] = &[
    ("cluster.network.cni", "the CNI"),
    ("cluster.proxy", "kube-proxy"),
    ("cluster.coreDNS", "CoreDNS"),
    ("cluster.extraManifests", "extraManifests"),
    ("cluster.extraManifestHeaders", "extraManifests"),
    ("cluster.inlineManifests", "inlineManifests"),
];

/// The documents of a multi-document machine config; unparsable text gives
/// one string document, so a diff still shows something.
pub fn documents(text: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        match Value::deserialize(doc) {
            Ok(Value::Null) => {}
            Ok(v) => docs.push(v),
            Err(_) => return vec![Value::String("(not valid YAML)".into())],
        }
    }
    docs
}

/// The config with every secret value replaced by `(sensitive)`, in Talos's
/// own layout, for diffs and views.
pub fn redacted(text: &str) -> String {
    let mut docs = documents(text);
    redact_secrets(&mut docs);
    machine_config_yaml(&docs)
}

/// Unified diff (3 lines of context) from `before` to `after`, both already
/// redacted, headed `recorded` and `desired`.
pub fn unified_diff(before: &str, after: &str) -> String {
    unified_diff_headed(before, after, ("recorded", "desired"))
}

/// [`unified_diff`] with its own headers (`running`, `desired` for a config changed on
/// the node).
pub fn unified_diff_headed(before: &str, after: &str, (from, to): (&str, &str)) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

/// What makes a machine config this cluster's: its cluster ID (`DiscoveryIdentityConfig`'s,
/// else the v1alpha1 document's `cluster.id`), else its OS CA (`machine.ca.crt`); `None` when
/// it has neither. Two configs with other identities belong to two clusters.
pub fn cluster_identity(text: &str) -> Option<String> {
    let docs = documents(text);
    effective::cluster_id(&docs).or_else(|| {
        at_path(v1alpha1(&docs)?, "machine.ca.crt")
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

/// The v1alpha1 document (no `kind`) of a config.
fn v1alpha1(docs: &[Value]) -> Option<&Value> {
    docs.iter()
        .find(|d| d.get("kind").is_none() && d.is_mapping())
}

/// Whether applying `after` over `before` in `auto` mode reboots the node, by
/// Talos's `CanApplyImmediate` rule ([`crate::machine::immediate`]).
pub fn needs_reboot(before: &str, after: &str) -> bool {
    !talosprov_machine::immediate::can_apply_immediate(before.as_bytes(), after.as_bytes())
}

/// The Kubernetes version a machine config runs: the tag of its kubelet image
/// (`KubeletConfig.image`, else `machine.kubelet.image`), e.g. `v1.36.2`; `None` when it has
/// none.
pub fn kubernetes_version(text: &str) -> Option<String> {
    let image = effective::kubelet_image(&documents(text))?;
    let (_, tag) = image.rsplit_once(':')?;
    (!tag.contains('/')).then(|| tag.to_owned())
}

/// Whether a machine config turns kube-proxy off (`KubeProxyConfig.enabled: false`, else
/// `cluster.proxy.disabled: true`, as with Cilium's kube-proxy replacement).
pub fn kube_proxy_disabled(text: &str) -> bool {
    effective::kube_proxy_disabled(&documents(text))
}

/// Whether a machine config is a control plane's (`machine.type`).
pub fn is_controlplane(text: &str) -> bool {
    documents(text).iter().any(|d| {
        d.get("machine")
            .and_then(|m| m.get("type"))
            .and_then(Value::as_str)
            == Some("controlplane")
    })
}

fn at_path<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, key| v.get(key))
}

/// The names of the inline manifests (`cluster.inlineManifests` entries and
/// `KubeInlineManifestConfig` documents) added, removed or changed between two configs,
/// sorted.
pub fn changed_inline_manifests(before: &str, after: &str) -> Vec<String> {
    let entries = |text: &str| -> BTreeMap<String, String> {
        effective::inline_manifests(&documents(text))
            .into_iter()
            .collect()
    };
    let (b, a) = (entries(before), entries(after));
    let mut names: Vec<String> = b
        .keys()
        .chain(a.keys())
        .filter(|n| b.get(*n) != a.get(*n))
        .cloned()
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The documents of the v1.14 contract that carry bootstrap-only settings, with the names
/// [`BOOTSTRAP_ONLY`] gives the legacy fields they replace.
pub const BOOTSTRAP_ONLY_DOCUMENTS: &[(&str, &str)] = &[
    ("KubeFlannelCNIConfig", "the CNI"),
    ("KubeProxyConfig", "kube-proxy"),
    ("KubeCoreDNSConfig", "CoreDNS"),
    ("KubeExternalManifestConfig", "extraManifests"),
    ("KubeInlineManifestConfig", "inlineManifests"),
];

/// The bootstrap-only settings (their names, deduplicated) that differ
/// between two configs, in either contract.
pub fn bootstrap_only_changes(before: &str, after: &str) -> Vec<&'static str> {
    let (bd, ad) = (documents(before), documents(after));
    if effective::is_multidoc_kubernetes(&bd) != effective::is_multidoc_kubernetes(&ad) {
        return contract_switch_changes(&bd, &ad);
    }
    let (b, a) = (v1alpha1(&bd), v1alpha1(&ad));
    let mut names: Vec<&'static str> = Vec::new();
    for (path, name) in BOOTSTRAP_ONLY {
        let before = b.and_then(|d| at_path(d, path));
        let after = a.and_then(|d| at_path(d, path));
        // kube-proxy or CoreDNS turned off before and after: its image (it
        // follows the Kubernetes version) runs nowhere, so nothing is missed.
        let disabled = |v: Option<&Value>| {
            v.and_then(|v| v.get("disabled")).and_then(Value::as_bool) == Some(true)
        };
        let off_throughout = disabled(before) && disabled(after);
        if before != after && !off_throughout && !names.contains(name) {
            names.push(name);
        }
    }
    for (kind, name) in BOOTSTRAP_ONLY_DOCUMENTS {
        let before: Vec<&Value> = effective::documents_of(&bd, kind).collect();
        let after: Vec<&Value> = effective::documents_of(&ad, kind).collect();
        let off = |docs: &[&Value]| {
            !docs.is_empty()
                && docs
                    .iter()
                    .all(|d| d.get("enabled").and_then(Value::as_bool) == Some(false))
        };
        let off_throughout = off(&before) && off(&after);
        if before != after && !off_throughout && !names.contains(name) {
            names.push(name);
        }
    }
    names
}

/// The bootstrap-only settings that differ between a config of the v1.13 contract and one of
/// the v1.14 documents (a cluster moved to Talos 1.14): what each says, read from its own
/// layout ([`effective`]), not where it says it.
fn contract_switch_changes(before: &[Value], after: &[Value]) -> Vec<&'static str> {
    let mut names = Vec::new();
    // Talos takes these from control planes only; a worker's have no effect (and its 1.14
    // config cannot even carry the control-plane documents).
    let control_plane = |d: &[Value]| {
        effective::v1alpha1(d)
            .and_then(|v| at_path(v, "machine.type"))
            .and_then(Value::as_str)
            == Some("controlplane")
    };
    if !control_plane(before) && !control_plane(after) {
        return names;
    }
    let cni = |d: &[Value]| (effective::cni_name(d), effective::custom_cni_urls(d));
    if cni(before) != cni(after) {
        names.push("the CNI");
    }
    if effective::kube_proxy_disabled(before) != effective::kube_proxy_disabled(after) {
        names.push("kube-proxy");
    }
    if effective::coredns_disabled(before) != effective::coredns_disabled(after) {
        names.push("CoreDNS");
    }
    if effective::extra_manifest_urls(before) != effective::extra_manifest_urls(after) {
        names.push("extraManifests");
    }
    if effective::inline_manifests(before) != effective::inline_manifests(after) {
        names.push("inlineManifests");
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_belongs_to_the_cluster_its_id_or_os_ca_names() {
        let with_id = "version: v1alpha1\nmachine:\n  ca: {crt: AAA}\ncluster:\n  id: one\n";
        assert_eq!(cluster_identity(with_id), Some("one".into()));
        let ca_only = "version: v1alpha1\nmachine:\n  ca: {crt: AAA}\n";
        assert_eq!(cluster_identity(ca_only), Some("AAA".into()));
        let documents = "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n---\nversion: v1alpha1\ncluster: {id: two}\n";
        assert_eq!(cluster_identity(documents), Some("two".into()));
        assert_eq!(
            cluster_identity("apiVersion: v1alpha1\nkind: HostnameConfig\n"),
            None
        );
    }

    #[test]
    fn a_component_disabled_before_and_after_is_not_a_bootstrap_only_change() {
        let proxy = |image: &str, disabled: bool| {
            format!(
                "version: v1alpha1\nmachine:\n    type: controlplane\ncluster:\n    proxy:\n        \
                 image: registry.k8s.io/kube-proxy:{image}\n        disabled: {disabled}\n"
            )
        };
        let none: Vec<&str> = Vec::new();
        assert_eq!(
            bootstrap_only_changes(&proxy("v1.36.2", true), &proxy("v1.36.3", true)),
            none
        );
        assert_eq!(
            bootstrap_only_changes(&proxy("v1.36.2", false), &proxy("v1.36.3", false)),
            vec!["kube-proxy"]
        );
        assert_eq!(
            bootstrap_only_changes(&proxy("v1.36.2", false), &proxy("v1.36.2", true)),
            vec!["kube-proxy"]
        );
    }

    const BASE: &str = "version: v1alpha1\nmachine:\n    type: worker\n    token: abc.0123456789abcdef\n    kubelet:\n        image: k:1\ncluster:\n    secret: c2VjcmV0\n    network:\n        cni:\n            name: flannel\n";

    #[test]
    fn redaction_hides_the_token_and_secret() {
        let r = redacted(BASE);
        assert!(!r.contains("abc.0123456789abcdef"), "{r}");
        assert!(!r.contains("c2VjcmV0"), "{r}");
        assert!(r.contains("(sensitive)"));
    }

    #[test]
    fn kubelet_changes_apply_without_reboot() {
        let after = BASE.replace("k:1", "k:2");
        assert!(!needs_reboot(BASE, &after));
    }

    #[test]
    fn machine_type_change_reboots() {
        let after = BASE.replace("type: worker", "type: controlplane");
        assert!(needs_reboot(BASE, &after));
    }

    #[test]
    fn cni_change_is_bootstrap_only() {
        let after = BASE.replace("flannel", "none");
        assert_eq!(bootstrap_only_changes(BASE, &after), vec!["the CNI"]);
        assert!(bootstrap_only_changes(BASE, BASE).is_empty());
    }

    #[test]
    fn diff_is_unified_with_headers() {
        let d = unified_diff("a\nb\n", "a\nc\n");
        assert!(d.starts_with("--- recorded\n+++ desired\n"), "{d}");
        assert!(d.contains("-b\n+c\n"), "{d}");
    }

    #[test]
    fn changed_inline_manifests_are_named() {
        let config = |cni: &str, extra: &str| {
            format!(
                "version: v1alpha1\nmachine: {{type: controlplane}}\ncluster:\n  inlineManifests:\n    \
                 - {{name: cni, contents: {cni}}}\n{extra}"
            )
        };
        assert_eq!(
            changed_inline_manifests(&config("a", ""), &config("b", "")),
            ["cni"]
        );
        assert!(changed_inline_manifests(&config("a", ""), &config("a", "")).is_empty());
        assert_eq!(
            changed_inline_manifests(
                &config("a", ""),
                &config("a", "    - {name: later, contents: x}\n")
            ),
            ["later"]
        );
    }

    #[test]
    fn a_move_to_the_1_14_documents_changes_no_bootstrap_setting_it_keeps() {
        let legacy = "machine: {type: controlplane}\ncluster:\n  network:\n    cni: {name: none}\n  proxy: {disabled: true}\n  extraManifests: [https://m/a.yaml]\n  inlineManifests: [{name: cni, contents: x}]\n";
        let docs = "machine: {type: controlplane}\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: false\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: a\nurl: https://m/a.yaml\n---\napiVersion: v1alpha1\nkind: KubeInlineManifestConfig\nname: cni\nmanifest: x\n";
        assert!(bootstrap_only_changes(legacy, docs).is_empty());
        assert!(bootstrap_only_changes(docs, legacy).is_empty());
        // A worker's CNI (Talos's default in its legacy config, none in 1.14) is no setting.
        let worker = |t: &str| t.replace("type: controlplane", "type: worker");
        assert!(bootstrap_only_changes(&worker("machine: {}\n"), &worker(docs)).is_empty());
        // What does change is still named.
        let flannel = format!("{docs}---\napiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n");
        assert_eq!(bootstrap_only_changes(legacy, &flannel), ["the CNI"]);
        let mut proxy_on = docs.replace("enabled: false", "enabled: true");
        proxy_on = proxy_on.replace("manifest: x", "manifest: y");
        assert_eq!(
            bootstrap_only_changes(legacy, &proxy_on),
            ["kube-proxy", "inlineManifests"]
        );
        // Within the 1.14 documents, the documents themselves are compared.
        let mut more = docs.to_owned();
        more.push_str("---\napiVersion: v1alpha1\nkind: KubeCoreDNSConfig\nimage: c:2\n");
        assert_eq!(bootstrap_only_changes(docs, &more), ["CoreDNS"]);
    }
}
