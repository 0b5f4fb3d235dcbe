//! `$patch: delete` in strategic-merge patches: pulled out of a patch document
//! into delete selectors, then applied to the matching config document before
//! the rest of the patch merges. Follows Talos's
//! `configloader/internal/decoder/{delete.go,selector.go}`.

use serde_yaml_ng::{Mapping, Value};
use std::fmt;

use super::document::{DocumentId, V1ALPHA1, scalar_field, scalar_text};
use super::rules::is_map_field;

/// One step of a path inside a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A mapping key.
    Key(String),
    /// A list element, chosen by the first other key/value of the patch element
    /// (`- interface: eth0` with `$patch: delete` selects by `interface: eth0`).
    Item {
        /// The key that selects the element (`interface`).
        key: String,
        /// The value that key must have.
        value: Value,
    },
}

/// A delete selector: what to remove, and from which document.
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteSelector {
    /// The document it applies to.
    pub document: DocumentId,
    /// The path inside the document; empty deletes the whole document.
    pub path: Vec<Step>,
}

/// Why a `$patch: delete` could not be read or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// A mapping key under a list element: Talos cannot address it.
    #[error("cannot delete an inner key in '{path}'")]
    InnerKey {
        /// The dotted path of the key.
        path: String,
    },
    /// A list element holding only `$patch: delete`, with no key to select by.
    #[error("no key:val found in sequence node for path {path}")]
    NoSelector {
        /// The dotted path of the list.
        path: String,
    },
    /// A document deleted as a whole must say which one.
    #[error("missing {field} in document for which $patch: delete is used")]
    MissingIdentity {
        /// `apiVersion` or `kind`.
        field: &'static str,
    },
    /// `$patch` with a value other than `delete`.
    #[error("unsupported $patch: {value} at '{path}' (only $patch: delete is supported)")]
    Unsupported {
        /// The dotted path of the `$patch` key (`machine.network`).
        path: String,
        /// The `$patch` value found instead of `delete`.
        value: String,
    },
    /// The path does not exist in the config document.
    #[error("patch delete: path '{path}' in document '{document}': lookup failed")]
    LookupFailed {
        /// The dotted path that was to be deleted.
        path: String,
        /// The document searched, as `apiVersion/kind[/name]`.
        document: String,
    },
    /// A list element path with more steps after it.
    #[error("patch delete: path '{path}': searching for complex paths in lists is not supported")]
    ComplexPath {
        /// The dotted path, down to the list element and past it.
        path: String,
    },
    /// The root of the v1alpha1 document cannot be deleted.
    #[error("can't delete the root of the legacy document")]
    LegacyRoot,
}

/// Dotted form of a path, `machine.network.interfaces[interface=eth0]`.
pub fn path_text(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Item { key, value } => {
                // The selecting value names the element, but a `content` or
                // `key` field may hold a secret: those are not shown.
                let sensitive = [
                    "content", "key", "token", "secret", "password", "crt", "data",
                ]
                .iter()
                .any(|w| key.to_ascii_lowercase().contains(w));
                let v = if sensitive {
                    "(hidden)".to_string()
                } else {
                    scalar_text(value)
                        .unwrap_or_else(|| serde_json::to_string(value).unwrap_or_default())
                };
                out.push_str(&format!("[{key}={v}]"));
            }
        }
    }
    out
}

impl fmt::Display for DeleteSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", path_text(&self.path), self.document)
    }
}

/// What is left of a patch document once its deletes are pulled out.
#[derive(Debug, Clone, PartialEq)]
pub struct Extracted {
    /// The delete selectors, in document order.
    pub deletes: Vec<DeleteSelector>,
    /// The rest of the document to merge, or `None` when nothing is left to
    /// merge (only `version`, `kind` or `name` remained, or the whole document
    /// was deleted).
    pub rest: Option<Value>,
}

#[derive(Debug)]
enum Seg {
    Key(String),
    Index,
}

fn seg_text(path: &[Seg]) -> String {
    path.iter()
        .map(|s| match s {
            Seg::Key(k) => k.clone(),
            Seg::Index => "[]".into(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn is_delete_marker(k: &Value, v: &Value) -> Option<Result<(), String>> {
    if k.as_str() != Some("$patch") {
        return None;
    }
    match v.as_str() {
        Some("delete") => Some(Ok(())),
        _ => Some(Err(
            scalar_text(v).unwrap_or_else(|| "(not a string)".into())
        )),
    }
}

/// Pull the `$patch: delete` markers out of one patch document.
///
/// `id` is the document's identity; documents deleted as a whole must carry
/// `apiVersion` and `kind`.
///
/// # Errors
/// [`DeleteError::InnerKey`], [`DeleteError::NoSelector`],
/// [`DeleteError::MissingIdentity`], [`DeleteError::Unsupported`].
pub fn extract(mut doc: Value, id: &DocumentId) -> Result<Extracted, DeleteError> {
    if !has_directive(&doc) {
        let rest = (!is_empty_doc(&doc)).then_some(doc);
        return Ok(Extracted {
            deletes: Vec::new(),
            rest,
        });
    }
    let mut found = Vec::new();
    let mut path = Vec::new();
    let whole = walk(&mut doc, false, &mut path, &mut Vec::new(), &mut found)?;
    let mut deletes = Vec::with_capacity(found.len());
    for steps in found {
        if steps.is_empty() {
            let map = doc.as_mapping();
            let api = map.and_then(|m| scalar_field(m, "apiVersion"));
            let kind = map.and_then(|m| scalar_field(m, "kind"));
            if api.is_none() {
                return Err(DeleteError::MissingIdentity {
                    field: "apiVersion",
                });
            }
            if kind.is_none() {
                return Err(DeleteError::MissingIdentity { field: "kind" });
            }
        }
        deletes.push(DeleteSelector {
            document: id.clone(),
            path: steps,
        });
    }
    let rest = if whole || is_empty_doc(&doc) {
        None
    } else {
        Some(doc)
    };
    Ok(Extracted { deletes, rest })
}

/// Whether a `$patch` key appears anywhere (most patches have none, and skip
/// the walk).
fn has_directive(v: &Value) -> bool {
    match v {
        Value::Mapping(m) => m
            .iter()
            .any(|(k, v)| k.as_str() == Some("$patch") || has_directive(v)),
        Value::Sequence(items) => items.iter().any(has_directive),
        Value::Tagged(t) => has_directive(&t.value),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

/// Talos drops a patch document whose only keys are `version`, `kind` or `name`.
fn is_empty_doc(doc: &Value) -> bool {
    let Some(map) = doc.as_mapping() else {
        return false;
    };
    map.iter().all(|(k, v)| {
        matches!(k.as_str(), Some("version" | "kind" | "name"))
            && !v.is_mapping()
            && !v.is_sequence()
    })
}

/// Returns whether `node` is to be removed from its parent.
fn walk(
    node: &mut Value,
    in_list: bool,
    segs: &mut Vec<Seg>,
    steps: &mut Vec<Step>,
    found: &mut Vec<Vec<Step>>,
) -> Result<bool, DeleteError> {
    match node {
        Value::Mapping(map) => {
            for (k, v) in map.iter() {
                match is_delete_marker(k, v) {
                    Some(Ok(())) => {
                        if in_list {
                            let (key, value) = map
                                .iter()
                                .find(|(k, v)| is_delete_marker(k, v).is_none())
                                .map(|(k, v)| (scalar_text(k).unwrap_or_default(), v.clone()))
                                .ok_or_else(|| DeleteError::NoSelector {
                                    path: seg_text(segs),
                                })?;
                            let mut at = steps.clone();
                            at.push(Step::Item { key, value });
                            found.push(at);
                        } else {
                            if segs.iter().any(|s| matches!(s, Seg::Index)) {
                                return Err(DeleteError::InnerKey {
                                    path: seg_text(segs),
                                });
                            }
                            found.push(steps.clone());
                        }
                        return Ok(true);
                    }
                    Some(Err(value)) => {
                        return Err(DeleteError::Unsupported {
                            path: seg_text(segs),
                            value,
                        });
                    }
                    None => {}
                }
            }
            let keys: Vec<Value> = map.keys().cloned().collect();
            for key in keys {
                let name = scalar_text(&key).unwrap_or_default();
                segs.push(Seg::Key(name.clone()));
                steps.push(Step::Key(name));
                let child = map.get_mut(&key).expect("key listed above");
                let remove = walk(child, false, segs, steps, found);
                segs.pop();
                steps.pop();
                if remove? {
                    map.shift_remove(&key);
                    if map.is_empty() {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        }
        Value::Sequence(items) => {
            let mut i = 0;
            let mut removed_any = false;
            while i < items.len() {
                segs.push(Seg::Index);
                let remove = walk(&mut items[i], true, segs, steps, found);
                segs.pop();
                if remove? {
                    items.remove(i);
                    removed_any = true;
                } else {
                    i += 1;
                }
            }
            Ok(removed_any && items.is_empty())
        }
        Value::Tagged(t) => walk(&mut t.value, in_list, segs, steps, found),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(false),
    }
}

/// What applying a selector did to its document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// A value inside the document was removed (or was already absent).
    Inside,
    /// The whole document is to be removed.
    Document,
}

/// Apply a delete selector to the config document it names.
///
/// A missing last key is not an error when it names a typed field that is
/// already unset; a missing parent, a key missing from a map field such as
/// `machine.nodeLabels`, or a list element that matches nothing, is
/// [`DeleteError::LookupFailed`], as in Talos.
///
/// # Errors
/// [`DeleteError::LookupFailed`], [`DeleteError::ComplexPath`],
/// [`DeleteError::LegacyRoot`].
pub fn apply(selector: &DeleteSelector, doc: &mut Value) -> Result<Deleted, DeleteError> {
    if selector.path.is_empty() {
        if selector.document.kind == V1ALPHA1 && selector.document.api_version.is_empty() {
            return Err(DeleteError::LegacyRoot);
        }
        return Ok(Deleted::Document);
    }
    let lookup_failed = || DeleteError::LookupFailed {
        path: path_text(&selector.path),
        document: selector.document.to_string(),
    };
    let (last, parents) = selector.path.split_last().expect("non-empty path");
    let mut node = doc;
    for step in parents {
        match step {
            Step::Key(k) => {
                node = node
                    .as_mapping_mut()
                    .and_then(|m| m.get_mut(k.as_str()))
                    .filter(|v| !v.is_null())
                    .ok_or_else(lookup_failed)?;
            }
            Step::Item { .. } => {
                return Err(DeleteError::ComplexPath {
                    path: path_text(&selector.path),
                });
            }
        }
    }
    match last {
        Step::Key(k) => {
            let map: &mut Mapping = node.as_mapping_mut().ok_or_else(lookup_failed)?;
            let removed = map.shift_remove(k.as_str()).is_some();
            let parent: Vec<&str> = parents
                .iter()
                .filter_map(|s| match s {
                    Step::Key(k) => Some(k.as_str()),
                    Step::Item { .. } => None,
                })
                .collect();
            if !removed && is_map_field(&selector.document.kind, &parent) {
                return Err(lookup_failed());
            }
            Ok(Deleted::Inside)
        }
        Step::Item { key, value } => {
            let items = node.as_sequence_mut().ok_or_else(lookup_failed)?;
            let pos = items
                .iter()
                .position(|item| item_matches(item, key, value))
                .ok_or_else(lookup_failed)?;
            items.remove(pos);
            Ok(Deleted::Inside)
        }
    }
}

/// Whether a list element has `key` equal to `value`. Scalars compare by their
/// text, as Talos compares the field's string form; mappings compare whole
/// (Talos cannot select by a mapping such as `deviceSelector`; we can).
fn item_matches(item: &Value, key: &str, value: &Value) -> bool {
    let Some(got) = item.as_mapping().and_then(|m| m.get(key)) else {
        return false;
    };
    match (scalar_text(got), scalar_text(value)) {
        (Some(a), Some(b)) => a == b,
        _ => got == value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_yaml_ng::from_str(s).unwrap()
    }

    #[test]
    fn map_key_delete_removes_emptied_parents_from_the_patch() {
        let ex = extract(
            yaml("machine:\n  nodeLabels:\n    a:\n      $patch: delete\ncluster:\n  x: 1\n"),
            &DocumentId::v1alpha1(),
        )
        .unwrap();
        assert_eq!(path_text(&ex.deletes[0].path), "machine.nodeLabels.a");
        assert_eq!(ex.rest, Some(yaml("cluster:\n  x: 1\n")));
    }

    #[test]
    fn list_item_delete_selects_by_first_other_key() {
        let ex = extract(
            yaml("machine:\n  network:\n    interfaces:\n      - interface: eth0\n        $patch: delete\n"),
            &DocumentId::v1alpha1(),
        )
        .unwrap();
        assert_eq!(
            path_text(&ex.deletes[0].path),
            "machine.network.interfaces[interface=eth0]"
        );
        assert_eq!(ex.rest, None);
    }

    #[test]
    fn inner_key_under_a_list_is_refused() {
        let err = extract(
            yaml("machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          $patch: delete\n"),
            &DocumentId::v1alpha1(),
        )
        .unwrap_err();
        assert!(matches!(err, DeleteError::InnerKey { .. }), "{err}");
    }

    #[test]
    fn whole_document_delete_needs_api_version_and_kind() {
        let err =
            extract(yaml("kind: Foo\n$patch: delete\n"), &DocumentId::v1alpha1()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "missing apiVersion in document for which $patch: delete is used"
        );
    }

    #[test]
    fn missing_parent_is_a_lookup_failure_but_missing_leaf_is_not() {
        let sel = |p: &str| DeleteSelector {
            document: DocumentId::v1alpha1(),
            path: p.split('.').map(|k| Step::Key(k.into())).collect(),
        };
        let mut doc = yaml("machine:\n  network: {}\n");
        assert_eq!(
            apply(&sel("machine.network.hostname"), &mut doc),
            Ok(Deleted::Inside)
        );
        let err = apply(&sel("machine.install.disk"), &mut doc).unwrap_err();
        assert_eq!(
            err.to_string(),
            "patch delete: path 'machine.install.disk' in document '/v1alpha1': lookup failed"
        );
    }

    #[test]
    fn selector_values_that_may_be_secret_are_not_shown() {
        let path = [
            Step::Key("configFiles".into()),
            Step::Item {
                key: "content".into(),
                value: Value::String("hunter2".into()),
            },
        ];
        assert_eq!(path_text(&path), "configFiles[content=(hidden)]");
    }

    #[test]
    fn a_key_missing_from_a_map_field_is_a_lookup_failure() {
        let sel = DeleteSelector {
            document: DocumentId::v1alpha1(),
            path: ["machine", "nodeLabels", "absent"]
                .iter()
                .map(|k| Step::Key((*k).into()))
                .collect(),
        };
        let mut doc = yaml("machine:\n  nodeLabels:\n    present: x\n");
        assert!(matches!(
            apply(&sel, &mut doc),
            Err(DeleteError::LookupFailed { .. })
        ));
    }

    #[test]
    fn other_patch_directives_are_refused() {
        let err = extract(
            yaml("machine:\n  a:\n    $patch: replace\n"),
            &DocumentId::v1alpha1(),
        )
        .unwrap_err();
        assert!(matches!(err, DeleteError::Unsupported { .. }));
    }
}
