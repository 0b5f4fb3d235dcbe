//! Chart values: the effective values of a Helm add-on,
//! merged the way Helm merges them (a mapping key by key, any other value
//! replaced, `null` removing the key).

use serde_json::{Value, json};

use talosprov_base::preset::spec::ClusterFacts;
use talosprov_topology::model::{Addon, AddonSource};

/// Merge `over` into `base` as Helm merges values: mappings key by key
/// (recursively), any other value replaced, and a `null` in `over` removing
/// the key from `base`.
pub fn merge_values(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k) {
                    merge_values(existing, v);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The values `helm template` gets for `addon`: the preset's, then each of
/// `files` (the `values_files`, read and parsed by the caller, in order), then
/// `values`. An add-on that is not a Helm one has none (`{}`).
pub fn effective_values(addon: &Addon, facts: &ClusterFacts, files: &[Value]) -> Value {
    let AddonSource::Helm { values, .. } = &addon.source else {
        return json!({});
    };
    let mut out = addon.preset.map_or_else(|| json!({}), |p| p.values(facts));
    for f in files.iter().chain(std::iter::once(values)) {
        merge_values(&mut out, f);
    }
    out
}

/// What a redacted value shows.
pub const REDACTED: &str = "(sensitive)";

/// `values` with the value of every key that names a secret shown as
/// [`REDACTED`], at any depth: a key whose lowercase name contains
/// `password`, `passwd`, `secret`, `token`, `credential` or `privatekey`
/// (`_` and `-` ignored), or is `key` or ends with `.key` (`tls.key`,
/// `ca.key`). For plans and logs; `helm template` gets the values whole.
pub fn redact_values(values: &Value) -> Value {
    match values {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let shown = if names_a_secret(k) && !v.is_null() {
                        Value::String(REDACTED.to_owned())
                    } else {
                        redact_values(v)
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact_values).collect()),
        other @ Value::Null
        | other @ Value::Bool(_)
        | other @ Value::Number(_)
        | other @ Value::String(_) => other.clone(),
    }
}

fn names_a_secret(key: &str) -> bool {
    let k: String = key
        .to_ascii_lowercase()
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .collect();
    [
        "password",
        "passwd",
        "secret",
        "token",
        "credential",
        "privatekey",
    ]
    .iter()
    .any(|w| k.contains(w))
        || k == "key"
        || k.ends_with(".key")
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::preset::Preset;

    fn facts(kube_proxy_disabled: bool) -> ClusterFacts {
        ClusterFacts {
            cni: "none".into(),
            kube_proxy_disabled,
            kubernetes_version: "1.36.2".into(),
        }
    }

    #[test]
    fn cilium_preset_values_without_kube_proxy() {
        insta::assert_json_snapshot!(Preset::Cilium.values(&facts(true)));
    }

    #[test]
    fn cilium_preset_values_with_kube_proxy() {
        insta::assert_json_snapshot!(Preset::Cilium.values(&facts(false)));
    }

    #[test]
    fn gpu_operator_preset_values() {
        insta::assert_json_snapshot!(Preset::NvidiaGpuOperator.values(&facts(true)));
    }

    #[test]
    fn secret_values_are_redacted_at_any_depth_and_the_rest_kept() {
        let v = json!({
            "hubble": {"tls": {"ca": {"cert": "PEM", "key": "PEM KEY"}, "server": {"tls.key": "k"}}},
            "auth": {"adminPassword": "p", "api_token": "t", "existingSecret": "name", "passwordless": null},
            "list": [{"privateKey": "x", "port": 443}],
            "keys": ["a"], "monkey": 1
        });
        assert_eq!(
            redact_values(&v),
            json!({
                "hubble": {"tls": {"ca": {"cert": "PEM", "key": "(sensitive)"}, "server": {"tls.key": "(sensitive)"}}},
                "auth": {"adminPassword": "(sensitive)", "api_token": "(sensitive)", "existingSecret": "(sensitive)", "passwordless": null},
                "list": [{"privateKey": "(sensitive)", "port": 443}],
                "keys": ["a"], "monkey": 1
            })
        );
    }

    #[test]
    fn user_values_override_key_by_key_and_null_removes() {
        let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "d": true, "e": "x"});
        merge_values(
            &mut base,
            &json!({"a": {"c": [3], "f": {"g": 1}}, "d": null, "e": {"now": "a map"}}),
        );
        assert_eq!(
            base,
            json!({"a": {"b": 1, "c": [3], "f": {"g": 1}}, "e": {"now": "a map"}})
        );
    }

    #[test]
    fn effective_values_layer_preset_files_then_values() {
        let addon = Addon {
            name: "cilium".into(),
            pos: Default::default(),
            preset: Some(Preset::Cilium),
            source: AddonSource::Helm {
                repo: "https://helm.cilium.io".into(),
                chart: "cilium".into(),
                version: "1.19.6".into(),
                values: json!({"operator": {"replicas": 1}, "ipam": {"mode": "cluster-pool"}}),
                values_files: Vec::new(),
            },
            namespace: "kube-system".into(),
            namespace_labels: Default::default(),
            phase: talosprov_base::preset::spec::Phase::Bootstrap,
            depends_on: Vec::new(),
        };
        let files = [json!({"operator": {"replicas": 3, "prometheus": {"enabled": true}}})];
        let v = effective_values(&addon, &facts(true), &files);
        assert_eq!(
            v["ipam"]["mode"], "cluster-pool",
            "values win over the preset"
        );
        assert_eq!(
            v["operator"],
            json!({"replicas": 1, "prometheus": {"enabled": true}})
        );
        assert_eq!(v["k8sServicePort"], 7445);
        assert_eq!(v["cgroup"]["hostRoot"], "/sys/fs/cgroup");
    }
}
