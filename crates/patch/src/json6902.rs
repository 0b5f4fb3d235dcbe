//! RFC 6902 JSON patches over a machine config, as Talos's
//! `configpatcher/json6902.go`: only for a single-document config; the
//! document goes through JSON, the `json-patch` crate applies the operations.

use serde_json::Value as Json;
use serde_yaml_ng::Value as Yaml;

use super::document::MachineConfig;

/// Why a JSON patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum Json6902Error {
    /// Talos refuses JSON patches on multi-document configs; the wording is
    /// Talos's own.
    #[error("JSON6902 patches are not supported for multi-document machine configuration")]
    MultiDocument,
    /// The config holds a value JSON cannot represent.
    #[error("failure converting talos machine config to json: {0}")]
    ToJson(String),
    /// An operation failed (a missing path, a failed `test`).
    #[error("failure applying rfc6902 patches to talos machine config: {0}")]
    Apply(#[from] json_patch::PatchError),
    /// The result could not be turned back into YAML.
    #[error("failure converting talos machine config from json to yaml: {0}")]
    ToYaml(String),
}

/// Convert a YAML value to JSON. Scalar keys become strings, as ghodss/yaml does.
///
/// # Errors
/// A mapping key that is a list or mapping, or a non-finite number.
pub fn yaml_to_json(v: &Yaml) -> Result<Json, String> {
    Ok(match v {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => {
            if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(u) = n.as_u64() {
                Json::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                Json::Number(
                    serde_json::Number::from_f64(f)
                        .ok_or_else(|| format!("the number {n} has no JSON form"))?,
                )
            }
        }
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Sequence(items) => {
            Json::Array(items.iter().map(yaml_to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Mapping(map) => {
            let mut out = serde_json::Map::with_capacity(map.len());
            for (k, v) in map {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Bool(b) => b.to_string(),
                    Yaml::Number(n) => n.to_string(),
                    Yaml::Null => "null".into(),
                    Yaml::Sequence(_) | Yaml::Mapping(_) | Yaml::Tagged(_) => {
                        return Err("a mapping key is not a scalar".into());
                    }
                };
                out.insert(key, yaml_to_json(v)?);
            }
            Json::Object(out)
        }
        Yaml::Tagged(t) => yaml_to_json(&t.value)?,
    })
}

/// Apply a JSON patch to a single-document config.
///
/// # Errors
/// [`Json6902Error::MultiDocument`] when the config has more or fewer than one
/// document; otherwise a conversion or operation failure. The config is
/// unchanged on error.
pub fn apply_json6902(
    config: &mut MachineConfig,
    patch: &json_patch::Patch,
) -> Result<(), Json6902Error> {
    if config.documents.len() != 1 {
        return Err(Json6902Error::MultiDocument);
    }
    let mut json = yaml_to_json(&config.documents[0]).map_err(Json6902Error::ToJson)?;
    json_patch::patch(&mut json, &patch.0)?;
    let yaml = serde_yaml_ng::to_value(&json).map_err(|e| Json6902Error::ToYaml(e.to_string()))?;
    config.documents[0] = yaml;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(ops: &str) -> json_patch::Patch {
        serde_json::from_str(ops).unwrap()
    }

    #[test]
    fn operations_apply_to_a_single_document() {
        let mut config = MachineConfig::parse("machine:\n  network:\n    hostname: a\n").unwrap();
        apply_json6902(
            &mut config,
            &patch(r#"[{"op":"replace","path":"/machine/network/hostname","value":"b"}]"#),
        )
        .unwrap();
        assert_eq!(
            config,
            MachineConfig::parse("machine:\n  network:\n    hostname: b\n").unwrap()
        );
    }

    #[test]
    fn multi_document_config_is_refused_with_talos_wording() {
        let mut config =
            MachineConfig::parse("machine: {}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\n")
                .unwrap();
        let err = apply_json6902(&mut config, &patch("[]")).unwrap_err();
        assert!(err.to_string().contains("JSON6902"), "{err}");
    }

    #[test]
    fn a_failed_operation_leaves_the_config_unchanged() {
        let mut config = MachineConfig::parse("machine: {}\n").unwrap();
        let before = config.clone();
        let err = apply_json6902(
            &mut config,
            &patch(r#"[{"op":"remove","path":"/machine/nothing"}]"#),
        )
        .unwrap_err();
        assert!(matches!(err, Json6902Error::Apply(_)));
        assert_eq!(config, before);
    }
}
