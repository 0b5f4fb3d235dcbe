//! The checks Talos makes on a machine config that can run offline, over the final documents
//! (base plus patches). Each problem names the field, so the caller can point at the patch that
//! set it. Messages use Talos's words; sources are Talos v1.13.9 files named on each check.

use serde_yaml_ng::Value;
use std::collections::HashSet;
use std::fmt;

/// How serious a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Talos refuses the config.
    Error,
    /// Talos accepts it but warns, or talosprov expects it to fail later (at install).
    Warning,
}

/// What kind of check found a problem; it decides the diagnostic code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// Talos's validation of a decoded config (`Config.Validate`) or talosprov's early checks.
    Validation,
    /// A key, or a document kind, that the contract's field set does not have (Talos:
    /// `unknown keys found during decoding`, `not registered`).
    UnknownKey,
    /// A value that cannot be decoded into its field's type.
    WrongType,
    /// A network entry that takes the node's link over without the node's address.
    AddressLost,
    /// A link name or selector that is not (or may not be) the node's link.
    OtherLink,
}

/// One problem found in a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Error or warning.
    pub severity: Severity,
    /// The check that found it.
    pub kind: ProblemKind,
    /// The document: `v1alpha1` or `<apiVersion>/<kind>[/<name>]`.
    pub document: String,
    /// Dotted field path inside the document (e.g. `machine.network.hostname`); empty for the
    /// document as a whole.
    pub field: String,
    /// The message, in Talos's words where Talos has one.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.document)?;
        if !self.field.is_empty() {
            write!(f, " {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

const V1ALPHA1: &str = "v1alpha1";

struct Checker {
    problems: Vec<ConfigProblem>,
    document: String,
}

impl Checker {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        self.push(Severity::Error, field, message);
    }

    fn warning(&mut self, field: &str, message: impl Into<String>) {
        self.push(Severity::Warning, field, message);
    }

    fn push(&mut self, severity: Severity, field: &str, message: impl Into<String>) {
        self.problems.push(ConfigProblem {
            severity,
            kind: ProblemKind::Validation,
            document: self.document.clone(),
            field: field.to_string(),
            message: message.into(),
        });
    }
}

/// Look up a dotted path in a YAML value.
fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(v, |cur, key| cur.as_mapping()?.get(key))
        .filter(|v| !v.is_null())
}

fn get_str<'a>(v: &'a Value, path: &str) -> &'a str {
    get(v, path).and_then(Value::as_str).unwrap_or("")
}

/// The text of a scalar at a dotted path, as Go's yaml reads any scalar into a string field
/// (`disk: 42` is the string `42`); empty when absent or not a scalar.
fn get_text(v: &Value, path: &str) -> String {
    get(v, path)
        .and_then(talosprov_patch::document::scalar_text)
        .unwrap_or_default()
}

fn get_bool(v: &Value, path: &str) -> Option<bool> {
    get(v, path).and_then(Value::as_bool)
}

/// Whether a document is the legacy v1alpha1 config: it has no `kind` and one of its keys
/// (Talos `configloader/internal/decoder/decoder.go`).
fn is_v1alpha1(doc: &Value) -> bool {
    doc.as_mapping().is_some_and(|m| {
        !m.contains_key("kind")
            && ["version", "machine", "cluster", "debug", "persist"]
                .iter()
                .any(|k| m.contains_key(*k))
    })
}

/// Run every offline check on a final config's documents and return all problems found
/// (empty when Talos would accept it).
pub fn check_config(documents: &[Value]) -> Vec<ConfigProblem> {
    let mut c = Checker {
        problems: Vec::new(),
        document: String::new(),
    };
    let mut seen = HashSet::new();
    let mut v1alpha1: Option<&Value> = None;
    let mut hostname_configs = Vec::new();
    for doc in documents.iter().filter(|d| !d.is_null()) {
        if is_v1alpha1(doc) {
            c.document = V1ALPHA1.into();
            if v1alpha1.replace(doc).is_some() {
                // container.go
                c.error("", "duplicate v1alpha1.Config");
            }
            continue;
        }
        let api_version = get_str(doc, "apiVersion");
        let kind = get_str(doc, "kind");
        let name = get_str(doc, "name");
        c.document = [api_version, kind, name]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        // decoder.go: ErrMissingKind / ErrMissingAPIVersion.
        if kind.is_empty() {
            c.error("kind", "missing kind");
            continue;
        }
        if api_version.is_empty() {
            c.error("apiVersion", "missing apiVersion");
            continue;
        }
        if !seen.insert((api_version, kind, name)) {
            c.error(
                "",
                format!("duplicate document {api_version}/{kind}/{name} is not allowed"),
            );
        }
        if kind == "HostnameConfig" {
            check_hostname_config(&mut c, doc);
            hostname_configs.push(c.document.clone());
        }
    }
    c.document = V1ALPHA1.into();
    match v1alpha1 {
        // container.go: ApplyConfiguration to a configured node needs the v1alpha1 document.
        None => c.error("", "v1alpha1.Config is not present in the container"),
        Some(doc) => {
            let kube_cluster = super::effective::document(documents, "KubeClusterConfig");
            check_v1alpha1(&mut c, doc, kube_cluster);
            check_container(&mut c, doc, documents);
            // Each document's `V1Alpha1ConflictValidate` (Talos 1.14).
            let others = documents.iter().filter(|d| !d.is_null() && !is_v1alpha1(d));
            for conflict in super::conflicts::find(doc, others) {
                c.error(
                    conflict.field,
                    format!(
                        "{} (the {} document replaces the field: `talosprov patches migrate \
                         --to v1.14` moves it there)",
                        conflict.message, conflict.kind
                    ),
                );
            }
            // network/hostname.go `V1Alpha1ConflictValidate`.
            for _ in &hostname_configs {
                if !get_str(doc, "machine.network.hostname").is_empty() {
                    c.error(
                        "machine.network.hostname",
                        "static hostname is already set in v1alpha1 config",
                    );
                }
                if get_bool(doc, "machine.features.stableHostname") == Some(true) {
                    c.error(
                        "machine.features.stableHostname",
                        "stable hostname is already set in v1alpha1 config",
                    );
                }
            }
        }
    }
    c.problems
}

/// Talos 1.14's container checks (`container/validate.go`): control-plane-only documents on
/// another machine, and a control plane running kube-apiserver (it has a
/// `KubeAPIServerCAConfig`) without an etcd encryption config, legacy or document.
fn check_container(c: &mut Checker, v1alpha1: &Value, documents: &[Value]) {
    let control_plane = matches!(get_str(v1alpha1, "machine.type"), "controlplane" | "init");
    fn kind_of(d: &Value) -> Option<&str> {
        d.get("kind").and_then(Value::as_str)
    }
    if !control_plane {
        let found: Vec<&str> = documents
            .iter()
            .filter_map(kind_of)
            .filter(|k| super::conflicts::CONTROL_PLANE_ONLY.contains(k))
            .collect();
        if !found.is_empty() {
            c.error("", super::conflicts::control_plane_only_message(&found));
        }
        return;
    }
    let has = |kind: &str| documents.iter().any(|d| kind_of(d) == Some(kind));
    let legacy_encryption = !get_str(v1alpha1, "cluster.secretboxEncryptionSecret").is_empty()
        || !get_str(v1alpha1, "cluster.aescbcEncryptionSecret").is_empty();
    if has("KubeAPIServerCAConfig") && !has("KubeEtcdEncryptionConfig") && !legacy_encryption {
        c.error(
            "",
            "etcd encryption config is required for control plane machines running kube-apiserver",
        );
    }
}

/// Talos `types/network/hostname.go` `Validate`.
fn check_hostname_config(c: &mut Checker, doc: &Value) {
    let auto = get_str(doc, "auto");
    let hostname = get_str(doc, "hostname");
    if auto.is_empty() && hostname.is_empty() {
        c.error("", "either 'auto' or 'hostname' must be set");
    }
    if !auto.is_empty() && auto != "off" && !hostname.is_empty() {
        c.error(
            "hostname",
            "'auto' and 'hostname' cannot be set at the same time",
        );
    }
    if !auto.is_empty() && auto != "off" && auto != "stable" {
        c.error("auto", format!("invalid value for 'auto': {auto}"));
    }
    if !hostname.is_empty() {
        if hostname.len() > 253 {
            c.error("hostname", format!("fqdn is too long: {}", hostname.len()));
        }
        let short = hostname.split('.').next().unwrap_or("");
        if short.is_empty() || short.len() > 63 {
            c.error("hostname", format!("invalid hostname {short:?}"));
        }
    }
}

/// Talos `types/v1alpha1/v1alpha1_validation.go` `Config.Validate` and `ClusterConfig.Validate`,
/// the parts that need no node, plus talosprov's own early checks (marked below).
fn check_v1alpha1(c: &mut Checker, doc: &Value, kube_cluster: Option<&Value>) {
    if get(doc, "machine").is_none() {
        c.error("machine", "machine instructions are required");
        return;
    }
    let machine_type = get_str(doc, "machine.type");
    let control_plane = matches!(machine_type, "controlplane" | "init");
    if get_bool(doc, "persist") == Some(false) {
        c.error("persist", ".persist should be enabled");
    }
    check_cluster(c, doc, control_plane);
    match kube_cluster {
        // The v1.14 contract: the endpoint is KubeClusterConfig's (`types/k8s/cluster.go`).
        Some(kube) => {
            let document = std::mem::replace(&mut c.document, kube_cluster_id(kube));
            check_endpoint(c, get_str(kube, "endpoint"), "endpoint");
            c.document = document;
        }
        None => check_endpoint(
            c,
            get_str(doc, "cluster.controlPlane.endpoint"),
            "cluster.controlPlane.endpoint",
        ),
    }

    // talosprov: Talos only fails at trustd time without it; every generated config has one.
    if get_str(doc, "machine.token").is_empty() {
        c.error(
            "machine.token",
            "machine token is required (.machine.token)",
        );
    }
    let ca_crt = get_str(doc, "machine.ca.crt");
    let ca_key = get_str(doc, "machine.ca.key");
    let accepted = get(doc, "machine.acceptedCAs")
        .and_then(Value::as_sequence)
        .is_some_and(|s| !s.is_empty());
    if ca_crt.is_empty() && ca_key.is_empty() && !accepted {
        c.error(
            "machine.ca",
            "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)",
        );
    }
    match machine_type {
        "controlplane" | "init" => {
            check_cni(c, doc);
            if ca_crt.is_empty() && ca_key.is_empty() {
                c.error("machine.ca", "issuing CA is required (.machine.ca)");
            } else if ca_key.is_empty() {
                c.error(
                    "machine.ca.key",
                    "issuing CA key is required for controlplane nodes (.machine.ca.key)",
                );
            }
        }
        "worker" => {
            for (i, iface) in sequence(doc, "machine.network.interfaces")
                .iter()
                .enumerate()
            {
                if get(iface, "vip").is_some() {
                    c.error(
                        &format!("machine.network.interfaces[{i}].vip"),
                        "virtual (shared) IP is not allowed on non-controlplane nodes",
                    );
                }
                for (j, vlan) in sequence(iface, "vlans").iter().enumerate() {
                    if get(vlan, "vip").is_some() {
                        c.error(
                            &format!("machine.network.interfaces[{i}].vlans[{j}].vip"),
                            "virtual (shared) IP is not allowed on non-controlplane nodes",
                        );
                    }
                }
            }
            if !ca_key.is_empty() {
                c.error("machine.ca.key", "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)");
            }
            if get(doc, "machine.ca").is_some() && ca_crt.is_empty() && !accepted {
                c.error(
                    "machine.ca.crt",
                    "trusted CA certificates are required on non-controlplane nodes (.machine.ca.crt, .machine.acceptedCAs)",
                );
            }
            if !get_str(doc, "cluster.ca.key").is_empty() {
                c.error("cluster.ca.key", "issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)");
            }
        }
        other => c.error("machine.type", format!("unknown machine type {other:?}")),
    }
    if machine_type == "init" {
        c.warning(
            "machine.type",
            "use \"controlplane\" instead of \"init\" for machine type",
        );
    }
    if get_bool(doc, "machine.features.hostDNS.forwardKubeDNSToHost") == Some(true)
        && get_bool(doc, "machine.features.hostDNS.enabled") != Some(true)
    {
        c.error(
            "machine.features.hostDNS",
            "feature hostDNS.forwardKubeDNSToHost requires hostDNS.enabled to be true (.machine.features.hostDNS)",
        );
    }
    // talosprov: Talos resolves the install disk only when installing and then fails the boot.
    let disk = get_text(doc, "machine.install.disk");
    if !disk.is_empty() && !disk.starts_with("/dev/") {
        c.error(
            "machine.install.disk",
            format!("install disk {disk:?} is not a device path (e.g. /dev/sda, /dev/vda)"),
        );
    }
}

fn sequence<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The control-plane endpoint (at `field` of the current document): required, and talosctl's
/// endpoint check.
fn check_endpoint(c: &mut Checker, endpoint: &str, field: &str) {
    if endpoint.is_empty() {
        c.error(field, "cluster controlplane endpoint is required");
    } else if let Err(super::config::ConfigError::Endpoint { reason, .. }) =
        super::config::validate_endpoint(endpoint)
    {
        c.error(
            field,
            format!(
                "invalid controlplane endpoint: {}",
                reason.replace('\n', " ")
            ),
        );
    }
}

/// The problem-document name of a `KubeClusterConfig` (`apiVersion/kind`).
fn kube_cluster_id(doc: &Value) -> String {
    format!("{}/KubeClusterConfig", get_str(doc, "apiVersion"))
}

/// `ClusterConfig.Validate`.
fn check_cluster(c: &mut Checker, doc: &Value, control_plane: bool) {
    if get(doc, "cluster").is_none() {
        c.error("cluster", "cluster instructions are required");
        return;
    }
    let domain = get_str(doc, "cluster.network.dnsDomain");
    if !domain.is_empty() && !is_valid_dns_name(domain) {
        c.error(
            "cluster.network.dnsDomain",
            format!("{domain:?} is not a valid DNS name"),
        );
    }
    if get(doc, "cluster.etcd").is_some() && !control_plane {
        c.error(
            "cluster.etcd",
            "etcd config is only allowed on control plane machines",
        );
    }
    if !control_plane && !get_str(doc, "cluster.ca.key").is_empty() {
        c.error(
            "cluster.ca.key",
            "cluster CA key is not allowed on non-controlplane nodes (.cluster.ca)",
        );
    }
}

/// `ValidateCNI`: the CNI name and the fields each kind forbids.
fn check_cni(c: &mut Checker, doc: &Value) {
    let Some(cni) = get(doc, "cluster.network.cni") else {
        return;
    };
    let name = get_str(cni, "name");
    let urls = !sequence(cni, "urls").is_empty();
    match name {
        "flannel" | "none" if urls => {
            c.error(
                "cluster.network.cni.urls",
                format!("\"urls\" field should be empty for {name:?} CNI"),
            );
        }
        "flannel" | "none" => {}
        "custom" if !urls => {
            c.warning(
                "cluster.network.cni.urls",
                "\"urls\" field should not be empty for \"custom\" CNI",
            );
        }
        "custom" => {}
        _ => c.error(
            "cluster.network.cni.name",
            "cni name should be one of [\"flannel\", \"custom\", \"none\"]",
        ),
    }
}

/// `isValidDNSName` in v1alpha1_validation.go.
fn is_valid_dns_name(name: &str) -> bool {
    if name.is_empty() || name.len() - name.matches('.').count() > 255 {
        return false;
    }
    let trimmed = name.strip_suffix(['.', '_']).unwrap_or(name);
    !trimmed.is_empty()
        && trimmed.split('.').all(|label| {
            let mut chars = label.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && label.len() <= 63
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(text: &str) -> Vec<String> {
        let docs = talosprov_patch::document::parse_documents(text).expect("yaml");
        check_config(&docs)
            .into_iter()
            .map(|p| format!("{}: {}", p.document, p.message))
            .collect()
    }

    const LEGACY: &str = "version: v1alpha1\nmachine:\n  type: TYPE\n  token: t\n  ca: {crt: Yw==}\ncluster:\n  controlPlane: {endpoint: https://a:6443}\n";

    #[test]
    fn control_plane_documents_on_a_worker_and_an_api_server_without_encryption_are_refused() {
        let worker = format!(
            "{}---\napiVersion: v1alpha1\nkind: KubeProxyConfig\n---\napiVersion: v1alpha1\nkind: KubeCoreDNSConfig\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nname: x\n",
            LEGACY.replace("TYPE", "worker")
        );
        assert!(messages(&worker).contains(
            &"v1alpha1: the following document kinds are only allowed on control plane machines: [KubeCoreDNSConfig KubeProxyConfig]".to_owned()
        ), "{:?}", messages(&worker));
        let cp = LEGACY
            .replace("TYPE", "controlplane")
            .replace("ca: {crt: Yw==}", "ca: {crt: Yw==, key: Yw==}");
        let ca = format!("{cp}---\napiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\n");
        let refusal = "v1alpha1: etcd encryption config is required for control plane machines running kube-apiserver".to_owned();
        assert!(messages(&ca).contains(&refusal), "{:?}", messages(&ca));
        let with_doc = format!("{ca}---\napiVersion: v1alpha1\nkind: KubeEtcdEncryptionConfig\n");
        assert!(!messages(&with_doc).contains(&refusal));
        let legacy = ca.replace("cluster:\n", "cluster:\n  secretboxEncryptionSecret: s\n");
        assert!(!messages(&legacy).contains(&refusal));
    }

    #[test]
    fn dns_domain_rules_follow_talos() {
        assert!(is_valid_dns_name("cluster.local"));
        assert!(is_valid_dns_name("cluster.local."));
        assert!(is_valid_dns_name("my_domain"));
        assert!(!is_valid_dns_name(""));
        assert!(!is_valid_dns_name("-bad.local"));
        assert!(!is_valid_dns_name("a..b"));
    }

    #[test]
    fn config_without_a_v1alpha1_document_is_refused() {
        let docs = [serde_yaml_ng::from_str::<Value>(
            "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
        )
        .unwrap()];
        let problems = check_config(&docs);
        assert_eq!(problems.len(), 1);
        assert_eq!(
            problems[0].message,
            "v1alpha1.Config is not present in the container"
        );
    }

    #[test]
    fn document_without_kind_or_api_version_is_refused() {
        let docs = [
            serde_yaml_ng::from_str::<Value>("apiVersion: v1alpha1\nauto: stable\n").unwrap(),
            serde_yaml_ng::from_str::<Value>("kind: HostnameConfig\nauto: stable\n").unwrap(),
        ];
        let messages: Vec<String> = check_config(&docs).into_iter().map(|p| p.message).collect();
        assert!(
            messages.contains(&"missing kind".to_string()),
            "{messages:?}"
        );
        assert!(
            messages.contains(&"missing apiVersion".to_string()),
            "{messages:?}"
        );
    }
}
