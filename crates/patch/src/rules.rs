//! Where Talos's strategic merge departs from "maps merge, lists append": the
//! fields whose Go types carry a custom `Merge` method or a `merge:"replace"` tag
//! in siderolabs/talos v1.13 (`types/v1alpha1/v1alpha1_types.go`,
//! `types/network/rule_config.go`, `types/runtime/extensions/service_config.go`,
//! `types/security/image_verification.go`, `types/meta/url.go`), and those of the documents
//! Talos v1.14.0-rc.1 adds (`types/k8s/*.go`: `merge:"replace"` and `meta.Args`;
//! `types/network/bgp.go`; `types/cri/base_runtime_spec.go`).

/// How one field merges, beyond the default rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRule {
    /// Maps merge per key, lists append, scalars replace unless zero.
    Default,
    /// The patch value replaces the config value whole (`merge:"replace"`).
    Replace,
    /// `extraArgs` (`Args.Merge`): per key, the patch replaces the whole value.
    Args,
    /// `machine.network.interfaces` (`NetworkDeviceList.Merge`): an element
    /// matches by `interface`, or else by an identical `deviceSelector`.
    Interfaces,
    /// A list whose elements match by this key and then merge recursively;
    /// unmatched elements append.
    MergeBy(&'static str),
    /// A list whose elements match by this key and are then replaced whole.
    ReplaceBy(&'static str),
    /// A URL (`*url.URL` embedded in a struct): merged component by component,
    /// each non-empty component of the patch replacing the config's.
    Url,
}

/// A path pattern: the document kind, then keys, with `[]` for any list element.
struct Pattern {
    kind: &'static str,
    path: &'static [&'static str],
    rule: FieldRule,
}

const fn p(kind: &'static str, path: &'static [&'static str], rule: FieldRule) -> Pattern {
    Pattern { kind, path, rule }
}

const V1: &str = "v1alpha1";

#[rustfmt::skip]
const TABLE: &[Pattern] = &[
    // v1alpha1
    p(V1, &["machine", "network", "interfaces"], FieldRule::Interfaces),
    p(V1, &["machine", "network", "interfaces", "[]", "vlans"], FieldRule::MergeBy("vlanId")),
    p(V1, &["cluster", "network", "podSubnets"], FieldRule::Replace),
    p(V1, &["cluster", "network", "serviceSubnets"], FieldRule::Replace),
    p(V1, &["cluster", "apiServer", "auditPolicy"], FieldRule::Replace),
    p(V1, &["cluster", "apiServer", "admissionControl"], FieldRule::MergeBy("name")),
    p(V1, &["machine", "kubelet", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "apiServer", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "controllerManager", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "scheduler", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "proxy", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "etcd", "extraArgs"], FieldRule::Args),
    p(V1, &["cluster", "controlPlane", "endpoint"], FieldRule::Url),
    // typed documents
    p("ExtensionServiceConfig", &["configFiles"], FieldRule::MergeBy("mountPath")),
    p("ImageVerificationConfig", &["rules"], FieldRule::ReplaceBy("image")),
    p("NetworkRuleConfig", &["ingress"], FieldRule::Replace),
    p("NetworkRuleConfig", &["portSelector", "ports"], FieldRule::Replace),
    p("SideroLinkConfig", &["apiUrl"], FieldRule::Url),
    p("KmsgLogConfig", &["url"], FieldRule::Url),
    // typed documents of Talos 1.14
    p("KubeNetworkConfig", &["podSubnets"], FieldRule::Replace),
    p("KubeNetworkConfig", &["serviceSubnets"], FieldRule::Replace),
    p("KubeAuditPolicyConfig", &["configuration"], FieldRule::Replace),
    p("KubeAuthenticationConfig", &["configuration"], FieldRule::Replace),
    p("KubeCredentialProviderConfig", &["configuration"], FieldRule::Replace),
    p("KubeStaticPodConfig", &["pod"], FieldRule::Replace),
    p("CRIBaseRuntimeSpecConfig", &["overrides"], FieldRule::Replace),
    p("BGPInstanceConfig", &["advertise"], FieldRule::Replace),
    p("BGPInstanceConfig", &["importRoutes"], FieldRule::Replace),
    p("BGPInstanceConfig", &["neighbors"], FieldRule::Replace),
    p("KubeletConfig", &["extraArgs"], FieldRule::Args),
    p("KubeAPIServerConfig", &["extraArgs"], FieldRule::Args),
    p("KubeControllerManagerConfig", &["extraArgs"], FieldRule::Args),
    p("KubeSchedulerConfig", &["extraArgs"], FieldRule::Args),
    p("KubeProxyConfig", &["extraArgs"], FieldRule::Args),
];

/// The rule for the field at `path` (keys, with `[]` for list elements) in a
/// document of `kind` (`v1alpha1` for the legacy document).
pub fn rule_for<S: AsRef<str>>(kind: &str, path: &[S]) -> FieldRule {
    TABLE
        .iter()
        .find(|pat| {
            pat.kind == kind
                && pat.path.len() == path.len()
                && pat.path.iter().zip(path).all(|(a, b)| *a == b.as_ref())
        })
        .map_or(FieldRule::Default, |pat| pat.rule)
}

/// v1alpha1 fields that are Go maps (`map[string]string`, `Args`): deleting a
/// key they do not hold fails in Talos (`deleteForPath` finds no map entry),
/// while an unset struct field deletes silently.
#[rustfmt::skip]
const MAP_FIELDS: &[&[&str]] = &[
    &["machine", "sysctls"],
    &["machine", "sysfs"],
    &["machine", "env"],
    &["machine", "nodeLabels"],
    &["machine", "nodeAnnotations"],
    &["machine", "nodeTaints"],
    &["machine", "registries", "mirrors"],
    &["machine", "registries", "config"],
    &["machine", "kubelet", "extraArgs"],
    &["cluster", "extraManifestHeaders"],
    &["cluster", "apiServer", "extraArgs"],
    &["cluster", "controllerManager", "extraArgs"],
    &["cluster", "scheduler", "extraArgs"],
    &["cluster", "proxy", "extraArgs"],
    &["cluster", "etcd", "extraArgs"],
];

/// Whether the field at `path` in a document of `kind` is a Go map, whose
/// missing keys cannot be deleted.
pub fn is_map_field<S: AsRef<str>>(kind: &str, path: &[S]) -> bool {
    kind == V1
        && MAP_FIELDS
            .iter()
            .any(|p| p.len() == path.len() && p.iter().zip(path).all(|(a, b)| *a == b.as_ref()))
}

/// The parts of a URL that Go's `url.URL` keeps apart, for [`FieldRule::Url`].
#[derive(Debug, Default, PartialEq, Eq)]
struct UrlParts<'a> {
    scheme: &'a str,
    user: &'a str,
    host: &'a str,
    path: &'a str,
    query: &'a str,
    fragment: &'a str,
}

fn split_url(s: &str) -> Option<UrlParts<'_>> {
    let (scheme, rest) = s.split_once("://")?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return None;
    }
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (user, host) = match authority.rfind('@') {
        Some(i) => (&authority[..i], &authority[i + 1..]),
        None => ("", authority),
    };
    Some(UrlParts {
        scheme,
        user,
        host,
        path,
        query,
        fragment,
    })
}

/// Merge two URLs as Talos's reflection merge does over `url.URL`: each
/// non-empty component of `patch` replaces the one in `base`. So patching
/// `https://a:6443/` with `https://b:6443` gives `https://b:6443/`.
/// Anything that is not `scheme://...` is replaced whole.
pub fn merge_url(base: &str, patch: &str) -> String {
    let (Some(b), Some(p)) = (split_url(base), split_url(patch)) else {
        return patch.to_string();
    };
    fn either<'a>(b: &'a str, p: &'a str) -> &'a str {
        if p.is_empty() { b } else { p }
    }
    let mut out = format!("{}://", either(b.scheme, p.scheme));
    let user = either(b.user, p.user);
    if !user.is_empty() {
        out.push_str(user);
        out.push('@');
    }
    out.push_str(either(b.host, p.host));
    out.push_str(either(b.path, p.path));
    let query = either(b.query, p.query);
    if !query.is_empty() {
        out.push('?');
        out.push_str(query);
    }
    let fragment = either(b.fragment, p.fragment);
    if !fragment.is_empty() {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_found_by_kind_and_path() {
        assert_eq!(
            rule_for("v1alpha1", &["machine", "network", "interfaces"]),
            FieldRule::Interfaces
        );
        assert_eq!(
            rule_for("v1alpha1", &["machine", "network"]),
            FieldRule::Default
        );
        assert_eq!(
            rule_for("Other", &["machine", "network", "interfaces"]),
            FieldRule::Default
        );
    }

    #[test]
    fn url_merge_keeps_components_the_patch_leaves_empty() {
        assert_eq!(
            merge_url("https://127.0.0.1:6643/", "https://10.0.0.1"),
            "https://10.0.0.1/"
        );
        assert_eq!(
            merge_url("https://a:6443", "https://b:6443"),
            "https://b:6443"
        );
        assert_eq!(
            merge_url("https://s/join?user=alice", "https://s/join?user=bob"),
            "https://s/join?user=bob"
        );
        assert_eq!(merge_url("https://a", "not a url"), "not a url");
    }
}
