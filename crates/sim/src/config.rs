//! The simulator's machine-config loader: splits the YAML documents, finds the v1alpha1
//! document, and rejects what Talos's configloader and v1alpha1 validation reject, in
//! Talos's multierror wording ("1 error occurred:\n\t* ...").

use std::collections::BTreeSet;

use serde::Deserialize as _;
use serde_yaml_ng::Value;
use talosprov_base::role::Role;
use talosprov_machine::effective;

/// What the simulator keeps from an accepted config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// The raw YAML, as applied.
    pub raw: Vec<u8>,
    /// `machine.type`.
    pub machine_type: Role,
    /// `machine.token` (trustd token).
    pub token: String,
    /// `machine.ca.crt`, PEM (decoded from base64).
    pub os_ca_crt_pem: String,
    /// `machine.ca.key`, PEM; present on control planes only.
    pub os_ca_key_pem: Option<String>,
    /// `machine.certSANs`.
    pub cert_sans: Vec<String>,
    /// `machine.network.hostname`, if set statically.
    pub hostname: Option<String>,
    /// `machine.install.image`, if set.
    pub install_image: Option<String>,
    /// `cluster.id` (groups simulated nodes into clusters); empty when absent.
    pub cluster_id: String,
    /// `cluster.clusterName`.
    pub cluster_name: String,
    /// `cluster.controlPlane.endpoint`.
    pub endpoint: String,
    /// `cluster.ca.crt`, PEM.
    pub k8s_ca_crt_pem: Option<String>,
    /// `cluster.ca.key`, PEM (control planes).
    pub k8s_ca_key_pem: Option<String>,
    /// `machine.acceptedCAs[].crt`, PEM: client certificates apid accepts beside
    /// the ones `machine.ca` issued.
    pub os_accepted_pems: Vec<String>,
    /// `cluster.acceptedCAs[].crt`, PEM: client certificates the API server accepts
    /// beside the ones `cluster.ca` issued.
    pub k8s_accepted_pems: Vec<String>,
}

impl NodeConfig {
    /// The CA certificates (PEM) apid verifies client certificates against: the issuing
    /// one and every accepted one (Talos `OSRoot.AcceptedCAs`).
    pub fn os_client_cas(&self) -> Vec<String> {
        let mut out = vec![self.os_ca_crt_pem.clone()];
        out.extend(self.os_accepted_pems.iter().cloned());
        out
    }

    /// The CA certificates (PEM) the API server verifies client certificates against.
    pub fn k8s_client_cas(&self) -> Vec<String> {
        let mut out: Vec<String> = self.k8s_ca_crt_pem.iter().cloned().collect();
        out.extend(self.k8s_accepted_pems.iter().cloned());
        out
    }
}

/// Parses and validates a machine config; `Err` holds the InvalidArgument message.
pub fn load(raw: &[u8]) -> Result<NodeConfig, String> {
    let mut docs = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_slice(raw) {
        let value =
            Value::deserialize(document).map_err(|e| format!("failed to decode config: {e}"))?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    let mut v1alpha1 = Vec::new();
    let mut others = Vec::new();
    let mut seen = BTreeSet::new();
    for doc in &docs {
        let Some(map) = doc.as_mapping() else {
            return Err("failed to decode config: document is not a mapping".to_string());
        };
        let is_legacy = map.get("kind").is_none()
            && ["version", "machine", "cluster", "debug", "persist"]
                .iter()
                .any(|k| map.contains_key(*k));
        if is_legacy {
            v1alpha1.push(doc);
            continue;
        }
        let kind = str_at(doc, &["kind"]).unwrap_or_default();
        let api_version = str_at(doc, &["apiVersion"]).unwrap_or_default();
        if kind.is_empty() || api_version.is_empty() {
            return Err("failed to decode config: missing kind or apiVersion".to_string());
        }
        let name = str_at(doc, &["name"]).unwrap_or_default();
        if !seen.insert((api_version.clone(), kind.clone(), name.clone())) {
            return Err(if name.is_empty() {
                format!("duplicate document: {kind}")
            } else {
                format!("duplicate document: {kind}/{name}")
            });
        }
        others.push(doc);
    }
    let doc = match v1alpha1.as_slice() {
        [doc] => *doc,
        [] => {
            return Err(
                "the config must contain a v1alpha1 document (machine, cluster)".to_string(),
            );
        }
        _ => return Err("duplicate v1alpha1 document: only one is allowed".to_string()),
    };
    validate(raw, doc, &others)
}

/// Check the v1alpha1 document `doc` (with the `others` beside it) as
/// Talos's `Validate` does, collecting every error; gives the node's config.
fn validate(raw: &[u8], doc: &Value, others: &[&Value]) -> Result<NodeConfig, String> {
    let mut errors = Vec::new();
    let type_text = str_at(doc, &["machine", "type"]).unwrap_or_default();
    let machine_type = Role::from_machine_type(&type_text);
    if machine_type.is_none() {
        errors.push(format!("unknown machine type {type_text:?}"));
    }
    let token = str_at(doc, &["machine", "token"]).unwrap_or_default();
    if token.is_empty() {
        errors.push("trustd token is invalid".to_string());
    }
    let (ca_crt, ca_key) = check_machine_ca(doc, machine_type, &mut errors);
    // Every document, for the settings the v1.14 contract moved out of v1alpha1.
    let all: Vec<Value> = std::iter::once(doc)
        .chain(others.iter().copied())
        .cloned()
        .collect();
    if let Some(disk) = effective::install_disk(&all)
        && !disk.starts_with('/')
    {
        errors.push(format!(
            "install disk {disk:?} is not a device path (expected /dev/...)"
        ));
    }
    check_conflicts(doc, others, &mut errors);
    if machine_type == Some(Role::Worker) {
        let only: Vec<&str> = others
            .iter()
            .filter_map(|d| d.get("kind").and_then(Value::as_str))
            .filter(|k| talosprov_machine::conflicts::CONTROL_PLANE_ONLY.contains(k))
            .collect();
        if !only.is_empty() {
            errors.push(talosprov_machine::conflicts::control_plane_only_message(
                &only,
            ));
        }
    }
    let endpoint = check_endpoint(&all, &mut errors);
    let hostname = str_at(doc, &["machine", "network", "hostname"]).filter(|h| !h.is_empty());
    let hostname_config = others
        .iter()
        .find(|d| str_at(d, &["kind"]).as_deref() == Some("HostnameConfig"));
    if let Some(hc) = hostname_config {
        let auto = str_at(hc, &["auto"]).unwrap_or_default();
        if hostname.is_some() && auto == "stable" {
            errors.push("static hostname is already set in v1alpha1 config".to_string());
        }
    }
    if !errors.is_empty() {
        return Err(multierror(&errors));
    }
    let hostname = hostname.or_else(|| {
        hostname_config
            .and_then(|hc| str_at(hc, &["hostname"]))
            .filter(|h| !h.is_empty())
    });
    let mut scratch = Vec::new();
    let k8s_ca = effective::kubernetes_ca(&all);
    Ok(NodeConfig {
        raw: raw.to_vec(),
        machine_type: machine_type.expect("errors would have returned"),
        token,
        os_ca_crt_pem: ca_crt.expect("errors would have returned"),
        os_ca_key_pem: ca_key,
        cert_sans: seq_at(doc, &["machine", "certSANs"]),
        hostname,
        install_image: effective::install_image(&all),
        cluster_id: effective::cluster_id(&all).unwrap_or_default(),
        cluster_name: effective::cluster_name(&all).unwrap_or_default(),
        endpoint,
        k8s_ca_crt_pem: k8s_ca.0,
        k8s_ca_key_pem: k8s_ca.1,
        os_accepted_pems: accepted_at(doc, "machine", &mut scratch),
        k8s_accepted_pems: if effective::document(&all, "KubeAPIServerCAConfig").is_some() {
            effective::kubernetes_accepted(&all)
        } else {
            accepted_at(doc, "cluster", &mut scratch)
        },
    })
}

/// `machine.ca`: the certificate is required; its key is required on a
/// control plane and refused on a worker. Gives both PEM texts, decoded.
fn check_machine_ca(
    doc: &Value,
    machine_type: Option<Role>,
    errors: &mut Vec<String>,
) -> (Option<String>, Option<String>) {
    let ca_crt = pem_at(doc, &["machine", "ca", "crt"], "machine.ca.crt", errors);
    let ca_key = pem_at(doc, &["machine", "ca", "key"], "machine.ca.key", errors);
    if ca_crt.is_none() {
        errors.push(
            "issuing CA or some accepted CAs are required (.machine.ca, machine.acceptedCAs)"
                .to_string(),
        );
    }
    match machine_type {
        Some(Role::Controlplane) if ca_crt.is_some() && ca_key.is_none() => {
            errors.push(
                "issuing CA key is required for controlplane nodes (.machine.ca.key)".to_string(),
            );
        }
        Some(Role::Worker) if ca_key.is_some() => {
            errors.push(
                "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)"
                    .to_string(),
            );
        }
        _ => {}
    }
    (ca_crt, ca_key)
}

/// The control-plane endpoint (`KubeClusterConfig.endpoint`, else
/// `cluster.controlPlane.endpoint`): required, an https URL with a host.
fn check_endpoint(docs: &[Value], errors: &mut Vec<String>) -> String {
    let endpoint = effective::endpoint(docs).unwrap_or_default();
    if endpoint.is_empty() {
        errors.push("cluster controlplane endpoint is required".to_string());
    } else {
        match url::Url::parse(&endpoint) {
            Ok(u) if u.scheme() == "https" && u.host().is_some() => {}
            Ok(u) => errors.push(format!(
                "invalid controlplane endpoint: {endpoint:?}: scheme must be https, not {:?}",
                u.scheme()
            )),
            Err(e) => errors.push(format!("invalid controlplane endpoint: {endpoint:?}: {e}")),
        }
    }
    endpoint
}

/// Talos 1.14's refusals of a v1alpha1 field beside the document that replaces it
/// ([`talosprov_machine::conflicts`], the same table `validate` checks).
fn check_conflicts(doc: &Value, others: &[&Value], errors: &mut Vec<String>) {
    for c in talosprov_machine::conflicts::find(doc, others.iter().copied()) {
        errors.push(c.message.to_string());
    }
}

/// Refuse a document kind the running Talos release does not know (a Talos 1.14 document
/// sent to a 1.13 node, say), as Talos's decoder does (`registry.go`: `not registered`).
/// A release newer than talosprov's newest contract knows every kind.
pub fn check_kinds(raw: &[u8], running: &str) -> Result<(), String> {
    let Ok(version) = running.parse::<talosprov_base::version::TalosVersion>() else {
        return Ok(());
    };
    let contract = talosprov_base::version::contract_for(&version).contract;
    let set = talosprov_machine::fields::field_set(contract);
    for document in serde_yaml_ng::Deserializer::from_slice(raw) {
        let Ok(doc) = Value::deserialize(document) else {
            continue;
        };
        let (Some(kind), Some(api)) = (
            doc.get("kind").and_then(Value::as_str),
            doc.get("apiVersion").and_then(Value::as_str),
        ) else {
            continue;
        };
        if set.document(kind, api).is_none() {
            return Err(format!(
                "failed to decode config: not registered: {kind:?} {api:?}"
            ));
        }
    }
    Ok(())
}

/// Talos (hashicorp/go-multierror) error list format.
fn multierror(errors: &[String]) -> String {
    let head = if errors.len() == 1 {
        "1 error occurred:".to_string()
    } else {
        format!("{} errors occurred:", errors.len())
    };
    let items: String = errors.iter().map(|e| format!("\n\t* {e}")).collect();
    format!("{head}{items}\n\n")
}

fn at<'a>(doc: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, key| v.get(*key))
}

fn str_at(doc: &Value, path: &[&str]) -> Option<String> {
    at(doc, path).and_then(Value::as_str).map(str::to_string)
}

fn seq_at(doc: &Value, path: &[&str]) -> Vec<String> {
    at(doc, path)
        .and_then(Value::as_sequence)
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `<section>.acceptedCAs[].crt`, each decoded to PEM; entries that are not base64 PEM
/// are left out (and noted in `errors`).
fn accepted_at(doc: &Value, section: &str, errors: &mut Vec<String>) -> Vec<String> {
    let Some(list) = at(doc, &[section, "acceptedCAs"]).and_then(Value::as_sequence) else {
        return Vec::new();
    };
    let field = format!("{section}.acceptedCAs[].crt");
    list.iter()
        .filter_map(|entry| pem_at(entry, &["crt"], &field, errors))
        .collect()
}

/// A base64-of-PEM field; empty string means absent (worker `machine.ca.key: ""`).
fn pem_at(doc: &Value, path: &[&str], field: &str, errors: &mut Vec<String>) -> Option<String> {
    use base64::Engine as _;
    let text = str_at(doc, path).filter(|s| !s.is_empty())?;
    match base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
    {
        Some(pem) if pem.contains("-----BEGIN") => Some(pem),
        _ => {
            errors.push(format!("{field} is not base64-encoded PEM"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn config(machine_type: &str, key: &str, extra: &str) -> String {
        let crt = b64("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n");
        format!(
            "version: v1alpha1\nmachine:\n  type: {machine_type}\n  token: abcdef.0123456789abcdef\n  ca:\n    crt: {crt}\n    key: \"{key}\"\n  install:\n    disk: /dev/sda\ncluster:\n  id: c1\n  clusterName: demo\n  controlPlane:\n    endpoint: https://10.0.0.10:6443\n{extra}"
        )
    }

    fn key() -> String {
        b64("-----BEGIN ED25519 PRIVATE KEY-----\nAA==\n-----END ED25519 PRIVATE KEY-----\n")
    }

    #[test]
    fn accepts_a_control_plane_config() {
        let cfg = load(config("controlplane", &key(), "").as_bytes()).unwrap();
        assert_eq!(cfg.machine_type, Role::Controlplane);
        assert_eq!(cfg.cluster_name, "demo");
        assert!(cfg.os_ca_key_pem.is_some());
    }

    #[test]
    fn control_plane_without_ca_key_is_rejected() {
        let err = load(config("controlplane", "", "").as_bytes()).unwrap_err();
        insta::assert_snapshot!(err, @r"
        1 error occurred:
        	* issuing CA key is required for controlplane nodes (.machine.ca.key)
        ");
    }

    #[test]
    fn missing_type_and_http_endpoint_are_both_reported() {
        let text = config("", "", "").replace("https://", "http://");
        let err = load(text.as_bytes()).unwrap_err();
        assert!(err.starts_with("2 errors occurred:"), "{err}");
        assert!(err.contains("unknown machine type \"\""));
        assert!(err.contains("scheme must be https"));
    }

    #[test]
    fn install_disk_must_be_a_path() {
        let text = config("worker", "", "").replace("/dev/sda", "sda");
        assert!(
            load(text.as_bytes())
                .unwrap_err()
                .contains("install disk \"sda\"")
        );
    }

    #[test]
    fn documents_are_checked_for_duplicates_and_v1alpha1() {
        let hc = "---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n";
        let twice = format!("{}{hc}{hc}", config("worker", "", ""));
        assert_eq!(
            load(twice.as_bytes()).unwrap_err(),
            "duplicate document: HostnameConfig"
        );
        let none = hc.trim_start_matches("---\n");
        assert!(
            load(none.as_bytes())
                .unwrap_err()
                .contains("must contain a v1alpha1")
        );
        let two = format!(
            "{}---\n{}",
            config("worker", "", ""),
            config("worker", "", "")
        );
        assert!(
            load(two.as_bytes())
                .unwrap_err()
                .contains("duplicate v1alpha1")
        );
        assert!(
            load(b"machine: [")
                .unwrap_err()
                .starts_with("failed to decode config")
        );
    }

    #[test]
    fn static_hostname_conflicts_with_stable_hostname_config() {
        let text = format!(
            "{}---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
            config("worker", "", "")
                .replace("  install:", "  network:\n    hostname: w1\n  install:")
        );
        assert!(
            load(text.as_bytes())
                .unwrap_err()
                .contains("static hostname is already set")
        );
    }

    #[test]
    fn the_1_14_documents_are_read_and_their_conflicts_refused() {
        let crt = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
        let legacy = config("worker", "", "")
            .replace("  install:\n    disk: /dev/sda\n", "")
            .replace("  id: c1\n  clusterName: demo\n  controlPlane:\n    endpoint: https://10.0.0.10:6443\n", "  token: t\n");
        let docs = format!(
            "{legacy}---\napiVersion: v1alpha1\nkind: DiscoveryIdentityConfig\nclusterID: c2\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: i:v1.14.0\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/vda\"\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\nclusterName: docs\nendpoint: https://10.0.0.11:6443\n---\napiVersion: v1alpha1\nkind: KubeAPIServerCAConfig\nacceptedCAs:\n  - |\n{}",
            crt.lines()
                .map(|l| format!("    {l}\n"))
                .collect::<String>()
        );
        let cfg = load(docs.as_bytes()).unwrap();
        assert_eq!(cfg.cluster_id, "c2");
        assert_eq!(cfg.cluster_name, "docs");
        assert_eq!(cfg.endpoint, "https://10.0.0.11:6443");
        assert_eq!(cfg.install_image.as_deref(), Some("i:v1.14.0"));
        assert_eq!(cfg.k8s_accepted_pems, [crt]);
        // A legacy field beside its document, and a control-plane document on a worker.
        let both = format!(
            "{}---\napiVersion: v1alpha1\nkind: KubeProxyConfig\n",
            docs.replace("  token: t\n", "  token: t\n  id: c1\n")
        );
        let err = load(both.as_bytes()).unwrap_err();
        assert!(
            err.contains("cluster identity is already configured"),
            "{err}"
        );
        assert!(
            err.contains("only allowed on control plane machines: [KubeProxyConfig]"),
            "{err}"
        );
        // A 1.13 node knows none of these kinds.
        assert_eq!(
            check_kinds(docs.as_bytes(), "v1.13.8"),
            Err(
                "failed to decode config: not registered: \"DiscoveryIdentityConfig\" \"v1alpha1\""
                    .into()
            )
        );
        assert_eq!(check_kinds(docs.as_bytes(), "v1.14.0"), Ok(()));
    }
}
