//! Reading one patch and deciding its type as Talos's `LoadPatch` does
//! (`configpatcher/load.go`): a strategic-merge patch if it reads as config
//! documents, else an RFC 6902 JSON patch in JSON, else one in YAML.

use serde_yaml_ng::Value;

use super::delete::{self, DeleteError};
use super::document::{DocumentError, DocumentId, identify, normalize_v1alpha1, parse_documents};
use super::json6902::yaml_to_json;
use super::merge::StrategicStep;
use talosprov_base::load::Budget;

/// Top-level keys of the v1alpha1 document (`v1alpha1.Config`).
const V1ALPHA1_KEYS: [&str; 5] = ["version", "debug", "persist", "machine", "cluster"];

/// A loaded patch and where it came from.
#[derive(Debug, Clone)]
pub struct Patch {
    /// Where the patch came from, for messages: a file path, or `inline patch N`.
    pub source: String,
    /// What it does.
    pub body: PatchBody,
}

/// The two patch types Talos accepts.
#[derive(Debug, Clone)]
pub enum PatchBody {
    /// Strategic merge: the steps in the order Talos applies them (every
    /// delete for the v1alpha1 document, that document, then each other
    /// document's deletes followed by the document).
    Strategic(Vec<StrategicStep>),
    /// RFC 6902 JSON patch operations.
    Json6902(json_patch::Patch),
}

/// Why a patch could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a valid strategic-merge patch (and not a JSON patch either).
    #[error(transparent)]
    Document(#[from] DocumentError),
    /// A `$patch: delete` that cannot be read.
    #[error(transparent)]
    Delete(#[from] DeleteError),
    /// An unknown top-level key in the v1alpha1 document.
    #[error(
        "unknown field \"{field}\" in the v1alpha1 document (known: version, debug, persist, machine, cluster)"
    )]
    UnknownField {
        /// The top-level key the v1alpha1 document does not have.
        field: String,
    },
    /// Looks like a JSON patch (starts with `[`) but is not one: not JSON,
    /// beyond the input bounds, or not a list of operations; where, and why.
    #[error("invalid JSON patch: {0}")]
    Json(talosprov_base::load::Located),
    /// A YAML list that is not a list of JSON patch operations.
    #[error("invalid JSON patch in YAML: {0}")]
    YamlOps(String),
}

/// Read a patch from text, deciding its type as Talos does.
///
/// # Errors
/// When the text is neither a strategic-merge patch nor a JSON patch: the JSON
/// error when the text starts with `[`, otherwise the strategic-merge error.
pub fn load_patch(source: impl Into<String>, text: &str) -> Result<Patch, LoadError> {
    load_patch_parsed(source, text, &parse_documents(text))
}

/// [`load_patch`] with the text's YAML documents already parsed by
/// [`parse_documents`] (the text itself is still needed for a JSON patch).
///
/// # Errors
/// As [`load_patch`].
pub fn load_patch_parsed(
    source: impl Into<String>,
    text: &str,
    parsed: &Result<Vec<Value>, DocumentError>,
) -> Result<Patch, LoadError> {
    let source = source.into();
    let strategic = match parsed {
        Ok(docs) => strategic_steps(docs.clone()),
        Err(e) => Err(LoadError::from(e.clone())),
    };
    let strategic_err = match strategic {
        Ok(steps) => {
            return Ok(Patch {
                source,
                body: PatchBody::Strategic(steps),
            });
        }
        Err(e) => e,
    };
    // Bounded like every input: nesting and nodes checked before serde_json builds anything.
    let json_err = match talosprov_base::load::json_value::<json_patch::Patch>(text, Budget::INPUT)
    {
        Ok(ops) => {
            return Ok(Patch {
                source,
                body: PatchBody::Json6902(ops),
            });
        }
        Err(e) => e,
    };
    if let Ok(docs) = parsed
        && let [Value::Sequence(_)] = docs.as_slice()
    {
        let ops = yaml_ops(&docs[0])?;
        return Ok(Patch {
            source,
            body: PatchBody::Json6902(ops),
        });
    }
    if text.trim_start().starts_with('[') {
        return Err(LoadError::Json(json_err));
    }
    Err(strategic_err)
}

/// Build a patch from already parsed YAML documents (a rendered template):
/// mappings are a strategic-merge patch, a single list is a JSON patch.
///
/// # Errors
/// As [`load_patch`].
pub fn load_documents(source: impl Into<String>, docs: Vec<Value>) -> Result<Patch, LoadError> {
    let source = source.into();
    let body = match docs.as_slice() {
        [Value::Sequence(_)] => PatchBody::Json6902(yaml_ops(&docs[0])?),
        _ => PatchBody::Strategic(strategic_steps(docs)?),
    };
    Ok(Patch { source, body })
}

fn yaml_ops(list: &Value) -> Result<json_patch::Patch, LoadError> {
    let json = yaml_to_json(list).map_err(LoadError::YamlOps)?;
    serde_json::from_value(json).map_err(|e| LoadError::YamlOps(e.to_string()))
}

/// Turn patch documents into strategic-merge steps in Talos's order.
fn strategic_steps(docs: Vec<Value>) -> Result<Vec<StrategicStep>, LoadError> {
    let mut seen = std::collections::HashSet::new();
    let mut legacy_deletes = Vec::new();
    let mut legacy_doc = None;
    let mut rest = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let map = doc
            .as_mapping()
            .ok_or(DocumentError::NotAMapping { index: i + 1 })?;
        let id = identify_patch(map, i + 1)?;
        if id.is_v1alpha1()
            && let Some(key) = map
                .keys()
                .filter_map(Value::as_str)
                .find(|k| !V1ALPHA1_KEYS.contains(k))
        {
            return Err(LoadError::UnknownField {
                field: key.to_string(),
            });
        }
        if !seen.insert(id.clone()) {
            return Err(DocumentError::Duplicate { id }.into());
        }
        let mut doc = doc;
        if id.is_v1alpha1() {
            normalize_v1alpha1(&mut doc);
        }
        let extracted = delete::extract(doc, &id)?;
        let deletes = extracted.deletes.into_iter().map(StrategicStep::Delete);
        let merge = extracted.rest.map(|document| StrategicStep::Merge {
            id: id.clone(),
            document,
        });
        if id.is_v1alpha1() {
            legacy_deletes.extend(deletes);
            legacy_doc = merge;
        } else {
            rest.extend(deletes);
            rest.extend(merge);
        }
    }
    let mut steps = legacy_deletes;
    steps.extend(legacy_doc);
    steps.extend(rest);
    Ok(steps)
}

/// Identify a patch document. A v1alpha1 patch may hold only deletes (no
/// `machine` or `cluster` left to recognise it by), so `$patch` counts too.
fn identify_patch(map: &serde_yaml_ng::Mapping, index: usize) -> Result<DocumentId, DocumentError> {
    match identify(map, index) {
        Err(DocumentError::MissingKind { .. }) if map.contains_key("version") => {
            Ok(DocumentId::v1alpha1())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> PatchBody {
        load_patch("p.yaml", text).unwrap().body
    }

    #[test]
    fn a_config_document_is_a_strategic_patch() {
        assert!(matches!(
            body("machine:\n  network: {}\n"),
            PatchBody::Strategic(_)
        ));
    }

    #[test]
    fn a_json_list_of_operations_is_a_json_patch() {
        let b = body(r#"[{"op": "add", "path": "/machine/x", "value": 1}]"#);
        assert!(matches!(b, PatchBody::Json6902(p) if p.0.len() == 1));
    }

    #[test]
    fn a_yaml_list_of_operations_is_a_json_patch() {
        let b = body("- op: replace\n  path: /machine/network/hostname\n  value: foo\n");
        assert!(matches!(b, PatchBody::Json6902(p) if p.0.len() == 1));
    }

    #[test]
    fn broken_json_reports_the_json_error() {
        let err = load_patch("p.json", "[{\"op\": \"add\",").unwrap_err();
        assert!(matches!(err, LoadError::Json(_)), "{err}");
    }

    #[test]
    fn a_mapping_without_kind_reports_the_config_error() {
        let err = load_patch("p.yaml", "foo: bar\n").unwrap_err();
        assert!(err.to_string().contains("missing kind"), "{err}");
    }

    #[test]
    fn unknown_top_level_v1alpha1_keys_are_refused() {
        let err = load_patch("p.yaml", "machine: {}\nmachnie: {}\n").unwrap_err();
        assert!(err.to_string().contains("machnie"), "{err}");
    }

    #[test]
    fn v1alpha1_deletes_come_first_whatever_the_document_order() {
        let PatchBody::Strategic(steps) = body(
            "apiVersion: v1alpha1\nkind: A\nx: 1\n---\nmachine:\n  a:\n    $patch: delete\n  b: 1\n",
        ) else {
            panic!("strategic")
        };
        let kinds: Vec<&str> = steps
            .iter()
            .map(|s| match s {
                StrategicStep::Delete(_) => "delete",
                StrategicStep::Merge { id, .. } if id.is_v1alpha1() => "v1alpha1",
                StrategicStep::Merge { .. } => "A",
            })
            .collect();
        assert_eq!(kinds, ["delete", "v1alpha1", "A"]);
    }
}
