//! Talos strategic merge over YAML documents (`merge.Merge` in
//! siderolabs/talos `pkg/machinery/config/merge/merge.go`, plus the custom
//! `Merge` methods listed in `rules.rs`): maps merge per key, lists append,
//! scalars replace unless the patch holds a zero value.

use serde_yaml_ng::{Mapping, Value};

use super::delete::{self, DeleteError, DeleteSelector, Deleted};
use super::document::{DocumentId, MachineConfig, scalar_text};
use super::rules::{FieldRule, merge_url, rule_for};

/// Why two values could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// The config and the patch disagree on the shape of a field.
    #[error(
        "merge type mismatch at '{path}' in document {document}: the config has a {left}, the patch a {right}"
    )]
    TypeMismatch {
        /// The config document.
        document: String,
        /// Dotted path of the field (`[]` marks a list element).
        path: String,
        /// Shape in the config (`mapping`, `list`, `string`...).
        left: &'static str,
        /// Shape in the patch.
        right: &'static str,
    },
    /// A `$patch: delete` failed.
    #[error(transparent)]
    Delete(#[from] DeleteError),
}

/// One step of a strategic-merge patch, in the order Talos applies them.
#[derive(Debug, Clone, PartialEq)]
pub enum StrategicStep {
    /// Remove something (`$patch: delete`).
    Delete(DeleteSelector),
    /// Merge this document into the config document with the same identity,
    /// or append it when there is none.
    Merge {
        /// The identity of the patch document.
        id: DocumentId,
        /// The document, without its `$patch: delete` markers.
        document: Value,
    },
}

/// Apply strategic-merge steps to a config, in order
/// (`configpatcher/strategic.go`, `StrategicMerge`). A delete whose document
/// is absent from the config does nothing.
///
/// # Errors
/// [`MergeError`] from the first step that fails; the config is then partly
/// patched, so callers work on a copy.
pub fn apply_strategic(
    config: &mut MachineConfig,
    steps: &[StrategicStep],
) -> Result<(), MergeError> {
    for step in steps {
        match step {
            StrategicStep::Delete(sel) => {
                let Some(pos) = config.position(&sel.document) else {
                    continue;
                };
                if delete::apply(sel, &mut config.documents[pos])? == Deleted::Document {
                    config.documents.remove(pos);
                }
            }
            StrategicStep::Merge { id, document } => match config.position(id) {
                Some(pos) => {
                    let mut path = Vec::new();
                    let target = &mut config.documents[pos];
                    merge_value(target, document.clone(), &id.kind, &mut path, id)?;
                }
                None => config.documents.push(document.clone()),
            },
        }
    }
    Ok(())
}

fn shape(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Sequence(_) => "list",
        Value::Mapping(_) => "mapping",
        Value::Tagged(_) => "tagged value",
    }
}

/// Zero values of Go scalars, which a patch cannot set over a value
/// (`false` is not one of them: a bool always replaces).
fn is_zero_scalar(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null
        | Value::Bool(_)
        | Value::Sequence(_)
        | Value::Mapping(_)
        | Value::Tagged(_) => false,
    }
}

fn is_scalar(v: &Value) -> bool {
    matches!(
        v,
        Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Tagged(_)
    )
}

/// Merge `right` into `left`. `path` holds the keys down to `left`, with `[]`
/// for list elements, to look up the field's rule.
fn merge_value(
    left: &mut Value,
    right: Value,
    kind: &str,
    path: &mut Vec<String>,
    doc: &DocumentId,
) -> Result<(), MergeError> {
    if right.is_null() {
        return Ok(());
    }
    let rule = rule_for(kind, path);
    if left.is_null()
        && !matches!(
            rule,
            FieldRule::Interfaces | FieldRule::MergeBy(_) | FieldRule::ReplaceBy(_)
        )
    {
        *left = right;
        return Ok(());
    }
    let mismatch = |left: &Value, right: &Value, path: &[String]| MergeError::TypeMismatch {
        document: doc.to_string(),
        path: path.join(".").replace(".[]", "[]"),
        left: shape(left),
        right: shape(right),
    };
    match rule {
        FieldRule::Replace => {
            *left = right;
            Ok(())
        }
        FieldRule::Url => {
            match (left.as_str(), right.as_str()) {
                (Some(l), Some(r)) if !r.is_empty() => *left = Value::String(merge_url(l, r)),
                (_, Some("")) => {}
                _ => *left = right,
            }
            Ok(())
        }
        FieldRule::Args => match (left.as_mapping_mut(), right) {
            (Some(l), Value::Mapping(r)) => {
                for (k, v) in r {
                    l.insert(k, v);
                }
                Ok(())
            }
            (_, right) => Err(mismatch(left, &right, path)),
        },
        FieldRule::Interfaces | FieldRule::MergeBy(_) | FieldRule::ReplaceBy(_) => {
            if left.is_null() {
                *left = Value::Sequence(Vec::new());
            }
            let Value::Sequence(items) = right else {
                return Err(mismatch(left, &right, path));
            };
            let Some(existing) = left.as_sequence_mut() else {
                return Err(mismatch(left, &Value::Sequence(items), path));
            };
            path.push("[]".into());
            for item in items {
                let found = existing.iter().position(|e| same_element(rule, e, &item));
                match (found, rule) {
                    (Some(i), FieldRule::ReplaceBy(_)) => existing[i] = item,
                    (Some(i), _) => merge_value(&mut existing[i], item, kind, path, doc)?,
                    (None, _) => existing.push(item),
                }
            }
            path.pop();
            Ok(())
        }
        FieldRule::Default => match (left, right) {
            (Value::Mapping(l), Value::Mapping(r)) => merge_mapping(l, r, kind, path, doc),
            (Value::Sequence(l), Value::Sequence(r)) => {
                l.extend(r);
                Ok(())
            }
            (left, right) if is_scalar(left) && is_scalar(&right) => {
                if !is_zero_scalar(&right) {
                    *left = right;
                }
                Ok(())
            }
            (left, right) => Err(mismatch(left, &right, path)),
        },
    }
}

fn merge_mapping(
    left: &mut Mapping,
    right: Mapping,
    kind: &str,
    path: &mut Vec<String>,
    doc: &DocumentId,
) -> Result<(), MergeError> {
    for (k, v) in right {
        let name = scalar_text(&k).unwrap_or_default();
        path.push(name);
        let result = match left.get_mut(&k) {
            Some(existing) => merge_value(existing, v, kind, path, doc),
            None if v.is_null() => Ok(()),
            None => {
                // A keyed list merges element by element even into an empty
                // list, so duplicates inside one patch collapse as in Talos.
                let keyed = matches!(
                    rule_for(kind, path),
                    FieldRule::Interfaces | FieldRule::MergeBy(_)
                );
                if keyed && v.is_sequence() {
                    let mut fresh = Value::Sequence(Vec::new());
                    let r = merge_value(&mut fresh, v, kind, path, doc);
                    left.insert(k, fresh);
                    r
                } else {
                    left.insert(k, v);
                    Ok(())
                }
            }
        };
        path.pop();
        result?;
    }
    Ok(())
}

/// Whether a config list element and a patch list element are the same entry
/// for a keyed list rule. A missing key counts as its zero value, as in Go.
fn same_element(rule: FieldRule, existing: &Value, patch: &Value) -> bool {
    let field = |v: &Value, key: &str| v.as_mapping().and_then(|m| m.get(key)).cloned();
    let text = |v: Option<Value>| v.as_ref().and_then(scalar_text).unwrap_or_default();
    match rule {
        FieldRule::Interfaces => {
            let name = text(field(patch, "interface"));
            if !name.is_empty() {
                return text(field(existing, "interface")) == name;
            }
            // Talos compares the selector structs field by field; an absent
            // field equals its zero value. (Talos 1.13 compares `physical` by
            // pointer, so it never matches there; we compare the values, which
            // is what the rule means.)
            match (
                field(patch, "deviceSelector"),
                field(existing, "deviceSelector"),
            ) {
                (Some(p), Some(e)) if !p.is_null() && !e.is_null() => {
                    without_zero_fields(&p) == without_zero_fields(&e)
                }
                _ => false,
            }
        }
        FieldRule::MergeBy(key) | FieldRule::ReplaceBy(key) => {
            let a = text(field(existing, key));
            let b = text(field(patch, key));
            let zero = |s: &str| s.is_empty() || s == "0";
            a == b || (zero(&a) && zero(&b))
        }
        FieldRule::Default | FieldRule::Replace | FieldRule::Args | FieldRule::Url => false,
    }
}

fn without_zero_fields(v: &Value) -> Value {
    match v {
        Value::Mapping(m) => Value::Mapping(
            m.iter()
                .filter(|(_, v)| !v.is_null() && !is_zero_scalar(v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other @ Value::Null
        | other @ Value::Bool(_)
        | other @ Value::Number(_)
        | other @ Value::String(_)
        | other @ Value::Sequence(_)
        | other @ Value::Tagged(_) => other.clone(),
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
