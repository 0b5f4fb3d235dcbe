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
pub fn is_zero_scalar(v: &Value) -> bool {
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
            // Each patch element goes to the first config element with its key, found by an
            // index kept up to date as elements merge, are replaced and appended: linear in
            // the lists' lengths where scanning for each element was quadratic.
            let mut index = KeyIndex::of(rule, existing);
            for item in items {
                match (index.first(rule, &item), rule) {
                    (Some(i), FieldRule::ReplaceBy(_)) => {
                        index.forget(rule, &existing[i], i);
                        existing[i] = item;
                        index.add(rule, &existing[i], i);
                    }
                    (Some(i), _) => {
                        index.forget(rule, &existing[i], i);
                        merge_value(&mut existing[i], item, kind, path, doc)?;
                        index.add(rule, &existing[i], i);
                    }
                    (None, _) => {
                        index.add(rule, &item, existing.len());
                        existing.push(item);
                    }
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

/// What a keyed list's elements are matched by (Talos's `NetworkDeviceList.Merge` and the
/// keyed `Merge` methods): equal keys are the same entry. A missing key counts as its zero
/// value, as in Go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum ElementKey {
    /// `interface`, when not empty: matched first.
    Interface(String),
    /// `deviceSelector` without its zero fields, matched when the patch element has no
    /// `interface`. (Talos 1.13 compares `physical` by pointer, so it never matches there; we
    /// compare the values, which is what the rule means.)
    Selector(Value),
    /// The rule's key as text, empty for a zero value (`""`, `0`, missing).
    Key(String),
}

/// The config list's elements by key, each key to the positions that hold it (the first is
/// the one a patch element merges into).
struct KeyIndex(std::collections::HashMap<ElementKey, std::collections::BTreeSet<usize>>);

impl KeyIndex {
    fn of(rule: FieldRule, items: &[Value]) -> Self {
        let mut index = KeyIndex(std::collections::HashMap::with_capacity(items.len()));
        for (i, item) in items.iter().enumerate() {
            index.add(rule, item, i);
        }
        index
    }

    /// The keys a config element is found by.
    fn keys(rule: FieldRule, v: &Value) -> Vec<ElementKey> {
        match rule {
            FieldRule::Interfaces => {
                let mut keys = Vec::with_capacity(2);
                let name = field_text(v, "interface");
                if !name.is_empty() {
                    keys.push(ElementKey::Interface(name));
                }
                if let Some(sel) = v.get("deviceSelector").filter(|s| !s.is_null()) {
                    keys.push(ElementKey::Selector(without_zero_fields(sel)));
                }
                keys
            }
            FieldRule::MergeBy(key) | FieldRule::ReplaceBy(key) => {
                vec![ElementKey::Key(zero_as_empty(field_text(v, key)))]
            }
            FieldRule::Default | FieldRule::Replace | FieldRule::Args | FieldRule::Url => {
                Vec::new()
            }
        }
    }

    fn add(&mut self, rule: FieldRule, v: &Value, at: usize) {
        for key in Self::keys(rule, v) {
            self.0.entry(key).or_default().insert(at);
        }
    }

    fn forget(&mut self, rule: FieldRule, v: &Value, at: usize) {
        for key in Self::keys(rule, v) {
            if let Some(positions) = self.0.get_mut(&key) {
                positions.remove(&at);
            }
        }
    }

    /// The first config element a patch element is the same entry as: by `interface` when
    /// the patch element names one, else by a non-null `deviceSelector`; by the rule's key.
    fn first(&self, rule: FieldRule, patch: &Value) -> Option<usize> {
        let key = match rule {
            FieldRule::Interfaces => {
                let name = field_text(patch, "interface");
                if name.is_empty() {
                    let sel = patch.get("deviceSelector").filter(|s| !s.is_null())?;
                    ElementKey::Selector(without_zero_fields(sel))
                } else {
                    ElementKey::Interface(name)
                }
            }
            FieldRule::MergeBy(key) | FieldRule::ReplaceBy(key) => {
                ElementKey::Key(zero_as_empty(field_text(patch, key)))
            }
            FieldRule::Default | FieldRule::Replace | FieldRule::Args | FieldRule::Url => {
                return None;
            }
        };
        self.0.get(&key)?.first().copied()
    }
}

/// The text of a mapping's scalar field, empty when it is missing or not a scalar.
fn field_text(v: &Value, key: &str) -> String {
    v.as_mapping()
        .and_then(|m| m.get(key))
        .and_then(scalar_text)
        .unwrap_or_default()
}

/// A key's text with its zero values (`""`, `0`) as one: Go compares them equal.
fn zero_as_empty(text: String) -> String {
    if text == "0" { String::new() } else { text }
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
