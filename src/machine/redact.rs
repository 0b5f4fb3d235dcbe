//! Redaction of the secret values in a machine config, for printing it (`render` without
//! `--show-sensitive`). Follows Talos `v1alpha1_provider.go` `Config.Redact`: only non-empty
//! values are replaced, so an empty worker CA key stays visibly empty.

use serde_yaml_ng::Value;

use super::sensitive::REDACTED;

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

/// Replace every secret value in the documents with `(sensitive)`.
pub fn redact_secrets(documents: &mut [Value]) {
    for doc in documents.iter_mut() {
        if doc.get("kind").is_some() {
            // RegistryAuthConfig documents carry the same credentials at their top level.
            if doc.get("kind").and_then(Value::as_str) == Some("RegistryAuthConfig") {
                for field in ["password", "auth", "identityToken"] {
                    redact(doc, field);
                }
            }
            continue;
        }
        for path in V1ALPHA1_SECRETS {
            redact(doc, path);
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

fn redact(v: &mut Value, path: &str) {
    let target = path.split('.').try_fold(v, |cur, key| cur.get_mut(key));
    if let Some(t) = target {
        if t.as_str().is_some_and(|s| !s.is_empty()) {
            *t = Value::String(REDACTED.to_string());
        }
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
        let text = crate::machine::machine_config_yaml(&docs);
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
}
