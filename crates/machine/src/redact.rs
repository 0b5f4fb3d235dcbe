//! Redaction of the secret values in a machine config, for printing it (`render` without
//! `--show-sensitive`, plan diffs). Follows Talos `v1alpha1_provider.go` `Config.Redact` and
//! the `Redact` of each typed document with secrets (the v1.14 ones included): only
//! non-empty values are replaced, so an empty worker CA key stays visibly empty. Beyond Talos,
//! the `data` and `stringData` values of Kubernetes Secrets inside
//! `cluster.inlineManifests[].contents` are redacted too.

use serde_yaml_ng::Value;

use talosprov_base::sensitive::REDACTED;

/// Secret fields of the v1alpha1 document, as dotted paths.
const V1ALPHA1_SECRETS: &[&str] = &[
    "machine.token",
    "machine.ca.key",
    "cluster.secret",
    "cluster.token",
    "cluster.secretboxEncryptionSecret",
    "cluster.aescbcEncryptionSecret",
    "cluster.ca.key",
    "cluster.aggregatorCA.key",
    "cluster.serviceAccount.key",
    "cluster.etcd.ca.key",
];

/// Registry credentials, under each `machine.registries.config.<host>`.
const REGISTRY_SECRETS: &[&str] = &[
    "auth.password",
    "auth.auth",
    "auth.identityToken",
    "tls.clientIdentity.key",
];

/// Secret fields of the typed documents, by kind, as dotted paths (Talos's `Redact` of each
/// `config.SecretDocument`, v1.14.0-rc.1).
const DOCUMENT_SECRETS: &[(&str, &[&str])] = &[
    ("RegistryAuthConfig", &["password", "auth", "identityToken"]),
    ("RegistryTLSConfig", &["clientIdentity.key"]),
    ("WireguardConfig", &["privateKey"]),
    ("HCloudVIPConfig", &["apiToken"]),
    ("DiscoveryIdentityConfig", &["clusterSecret"]),
    ("KubeAPIServerCAConfig", &["issuingCA.key"]),
    ("KubeAggregatorCAConfig", &["issuingCA.key"]),
    ("KubeServiceAccountConfig", &["issuer.privateKey"]),
];

/// Replace every secret value in the documents with `(sensitive)`.
pub fn redact_secrets(documents: &mut [Value]) {
    for doc in documents.iter_mut() {
        if let Some(kind) = doc.get("kind").and_then(Value::as_str).map(str::to_owned) {
            for (_, paths) in DOCUMENT_SECRETS.iter().filter(|(k, _)| *k == kind) {
                for path in *paths {
                    redact(doc, path);
                }
            }
            match kind.as_str() {
                // Every `secret` of the etcd EncryptionConfiguration, at any depth.
                "KubeEtcdEncryptionConfig" => redact_keys_named(doc, "secret"),
                "WireguardConfig" => redact_each(doc, "peers", "presharedKey"),
                // An inline manifest's Secrets, as in `cluster.inlineManifests`.
                "KubeInlineManifestConfig" => {
                    if let Some(manifest) = doc.get_mut("manifest") {
                        redact_manifest_secrets(manifest);
                    }
                }
                _ => {}
            }
            continue;
        }
        for path in V1ALPHA1_SECRETS {
            redact(doc, path);
        }
        if let Some(Value::Sequence(manifests)) = doc
            .get_mut("cluster")
            .and_then(|c| c.get_mut("inlineManifests"))
        {
            for m in manifests.iter_mut() {
                if let Some(contents) = m.get_mut("contents") {
                    redact_manifest_secrets(contents);
                }
            }
        }
        let hosts = doc
            .get("machine")
            .and_then(|m| m.get("registries"))
            .and_then(|r| r.get("config"))
            .and_then(Value::as_mapping)
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        for host in hosts {
            let Some(host_cfg) = doc
                .get_mut("machine")
                .and_then(|m| m.get_mut("registries"))
                .and_then(|r| r.get_mut("config"))
                .and_then(|c| c.get_mut(&host))
            else {
                continue;
            };
            for path in REGISTRY_SECRETS {
                redact(host_cfg, path);
            }
        }
    }
}

/// Redact the `data` and `stringData` values of every Kubernetes `Secret` in an inline
/// manifest's `contents` (multi-document YAML text). Contents that are not YAML but mention a
/// Secret are hidden whole, since their values cannot be told apart.
fn redact_manifest_secrets(contents: &mut Value) {
    let Some(text) = contents.as_str() else {
        return;
    };
    // Parsed only within the bounds of any YAML talosprov reads (size, nesting, aliases,
    // values); the contents may be a chart's rendering.
    let docs =
        talosprov_base::load::yaml_documents(text, talosprov_base::load::Budget::HELM_OUTPUT);
    let Ok(mut docs) = docs else {
        if text.contains("Secret") {
            *contents = Value::String(REDACTED.to_string());
        }
        return;
    };
    let mut changed = false;
    for doc in &mut docs {
        changed |= redact_secret_object(doc);
    }
    if changed {
        let texts: Vec<String> = docs
            .iter()
            .filter(|d| !d.is_null())
            .map(|d| serde_yaml_ng::to_string(d).unwrap_or_default())
            .collect();
        *contents = Value::String(texts.join("---\n"));
    }
}

/// Redact one Kubernetes object if it is a Secret, or the Secrets among a `List`'s
/// `items`; whether anything was redacted.
fn redact_secret_object(object: &mut Value) -> bool {
    let mut changed = false;
    if let Some(Value::Sequence(items)) = object.get_mut("items") {
        for item in items {
            changed |= redact_secret_object(item);
        }
    }
    if object.get("kind").and_then(Value::as_str) == Some("Secret") {
        for field in ["data", "stringData"] {
            if let Some(Value::Mapping(values)) = object.get_mut(field) {
                for (_, v) in values.iter_mut() {
                    *v = Value::String(REDACTED.to_string());
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Redact every non-empty string under a key named `name`, at any depth.
fn redact_keys_named(v: &mut Value, name: &str) {
    match v {
        Value::Mapping(m) => {
            for (k, child) in m.iter_mut() {
                if k.as_str() == Some(name) && child.as_str().is_some_and(|s| !s.is_empty()) {
                    *child = Value::String(REDACTED.to_string());
                } else {
                    redact_keys_named(child, name);
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(|i| redact_keys_named(i, name)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Tagged(_) => {}
    }
}

/// Redact `field` in each item of the list at `list`.
fn redact_each(v: &mut Value, list: &str, field: &str) {
    if let Some(Value::Sequence(items)) = v.get_mut(list) {
        for item in items {
            redact(item, field);
        }
    }
}

fn redact(v: &mut Value, path: &str) {
    let target = path.split('.').try_fold(v, |cur, key| cur.get_mut(key));
    if let Some(t) = target
        && t.as_str().is_some_and(|s| !s.is_empty())
    {
        *t = Value::String(REDACTED.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_and_empty_values_kept() {
        let mut docs = vec![
            serde_yaml_ng::from_str::<Value>(
                "machine:\n  token: abc\n  ca: {crt: CRT, key: ''}\n  registries:\n    config:\n      r.lan: {auth: {password: pw}}\ncluster:\n  secret: s\n  ca: {crt: C, key: K}\n",
            )
            .unwrap(),
            serde_yaml_ng::from_str::<Value>("apiVersion: v1alpha1\nkind: RegistryAuthConfig\nname: r\npassword: pw\n").unwrap(),
        ];
        redact_secrets(&mut docs);
        let text = crate::config::machine_config_yaml(&docs);
        assert!(
            !text.contains("abc") && !text.contains("pw") && !text.contains(": K"),
            "{text}"
        );
        assert!(
            text.contains("crt: CRT") && text.contains("key: \"\""),
            "{text}"
        );
        assert_eq!(text.matches("(sensitive)").count(), 5, "{text}");
    }

    #[test]
    fn secrets_in_inline_manifests_are_redacted_and_other_objects_kept() {
        let contents = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {keep: visible}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {token: TUFSS0VSLWRhdGE=}\nstringData: {password: MARKER-pw}\n";
        let mut doc: Value =
            serde_yaml_ng::from_str("cluster: {inlineManifests: [{name: m}]}").unwrap();
        doc["cluster"]["inlineManifests"][0]["contents"] = Value::String(contents.into());
        let mut docs = vec![doc];
        redact_secrets(&mut docs);
        let text = crate::config::machine_config_yaml(&docs);
        assert!(
            !text.contains("MARKER") && !text.contains("TUFSS0VS"),
            "{text}"
        );
        assert!(text.contains("keep: visible"), "{text}");
        assert_eq!(text.matches("(sensitive)").count(), 2, "{text}");
        // A Secret inside a List.
        let listed = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}, stringData: {k: MARKER-listed}}\n";
        let mut doc: Value =
            serde_yaml_ng::from_str("cluster: {inlineManifests: [{name: m}]}").unwrap();
        doc["cluster"]["inlineManifests"][0]["contents"] = Value::String(listed.into());
        let mut docs = vec![doc];
        redact_secrets(&mut docs);
        let text = crate::config::machine_config_yaml(&docs);
        assert!(!text.contains("MARKER"), "{text}");
        // Not YAML, yet naming a Secret: hidden whole.
        let mut broken: Value =
            serde_yaml_ng::from_str("cluster: {inlineManifests: [{name: m}]}").unwrap();
        broken["cluster"]["inlineManifests"][0]["contents"] =
            Value::String("kind: Secret\nstringData: {password: MARKER\n  : [".into());
        let mut docs = vec![broken];
        redact_secrets(&mut docs);
        let text = crate::config::machine_config_yaml(&docs);
        assert!(!text.contains("MARKER"), "{text}");
    }
}
