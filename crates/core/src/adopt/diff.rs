//! The strategic-merge patches that turn one machine config into another,
//! under Talos's merge rules (see [`crate::patch::merge`] and
//! [`crate::patch::rules`]), and the check that two configs mean the same.
//!
//! A patch cannot replace a list that merges by appending, nor set a string
//! or number back to its zero value, nor take a key away, so the patches
//! come in two parts: the first deletes (`$patch: delete` on each key that
//! must go or be set anew), the second sets. Paths never pass through a list
//! element (Talos cannot address a key under one): a list that differs is
//! deleted and set whole at its key.

use serde_yaml_ng::{Mapping, Value};

use crate::patch::document::{DocumentId, MachineConfig, identify};
use crate::patch::rules::{FieldRule, is_map_field, rule_for};
use crate::yaml::{Flavour, documents_to_string};

/// Whether Talos's typed config holds `v` as its zero value, which it
/// encodes as nothing (`omitempty`): null, `""`, `0`, an empty list or map.
/// `false` is not one: a `*bool` keeps it.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Sequence(s) => s.is_empty(),
        Value::Mapping(m) => m.values().all(is_empty),
        Value::Bool(_) | Value::Tagged(_) => false,
    }
}

fn key_text(k: &Value) -> String {
    crate::patch::document::scalar_text(k).unwrap_or_default()
}

fn delete_marker() -> Value {
    let mut m = Mapping::new();
    m.insert("$patch".into(), "delete".into());
    Value::Mapping(m)
}

/// What one document's diff needs: keys to delete first, values to set next.
#[derive(Default)]
struct Parts {
    delete: Mapping,
    set: Mapping,
}

/// Diff two mappings of a document of `kind` at `path`.
fn diff_mapping(kind: &str, path: &mut Vec<String>, from: &Mapping, to: &Mapping) -> Parts {
    let mut parts = Parts::default();
    for (k, want) in to {
        path.push(key_text(k));
        match from.get(k) {
            None if is_empty(want) => {}
            None => {
                parts.set.insert(k.clone(), want.clone());
            }
            Some(have) => diff_value(kind, path, k, have, want, &mut parts),
        }
        path.pop();
    }
    for (k, have) in from {
        if !to.contains_key(k) && !is_empty(have) {
            parts.delete.insert(k.clone(), delete_marker());
        }
    }
    parts
}

/// Diff one key's values (`path` ends with the key).
fn diff_value(
    kind: &str,
    path: &mut Vec<String>,
    k: &Value,
    have: &Value,
    want: &Value,
    parts: &mut Parts,
) {
    if same(have, want) {
        return;
    }
    // A key whose value a patch replaces whole, but for its zero value.
    let replace = |parts: &mut Parts| {
        if is_empty(want) {
            parts.delete.insert(k.clone(), delete_marker());
        } else {
            parts.delete.insert(k.clone(), delete_marker());
            parts.set.insert(k.clone(), want.clone());
        }
    };
    match (rule_for(kind, path), have, want) {
        (FieldRule::Replace, _, w) if !is_empty(w) => {
            parts.set.insert(k.clone(), want.clone());
        }
        (FieldRule::Default, Value::Mapping(h), Value::Mapping(w)) => {
            let inner = diff_mapping(kind, path, h, w);
            if !inner.delete.is_empty() {
                parts.delete.insert(k.clone(), Value::Mapping(inner.delete));
            }
            if !inner.set.is_empty() {
                parts.set.insert(k.clone(), Value::Mapping(inner.set));
            }
        }
        (FieldRule::Args, Value::Mapping(h), Value::Mapping(w)) if is_map_field(kind, path) => {
            // Per key, the patch's value replaces the config's.
            let mut delete = Mapping::new();
            let mut set = Mapping::new();
            for (ak, av) in w {
                if h.get(ak).is_none_or(|hv| !same(hv, av)) {
                    set.insert(ak.clone(), av.clone());
                }
            }
            for ak in h.keys() {
                if !w.contains_key(ak) {
                    delete.insert(ak.clone(), delete_marker());
                }
            }
            if !delete.is_empty() {
                parts.delete.insert(k.clone(), Value::Mapping(delete));
            }
            if !set.is_empty() {
                parts.set.insert(k.clone(), Value::Mapping(set));
            }
        }
        (FieldRule::Default, h, w)
            if is_scalar(h) && is_scalar(w) && !is_zero_scalar(w) && !is_empty(w) =>
        {
            parts.set.insert(k.clone(), want.clone());
        }
        _ => replace(parts),
    }
}

fn is_scalar(v: &Value) -> bool {
    matches!(v, Value::Bool(_) | Value::Number(_) | Value::String(_))
}

/// A scalar a patch cannot set over another (Talos skips zero values).
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

/// Whether two values mean the same to Talos: mappings compare whatever
/// their key order, a key holding a zero value is the same as no key, and
/// lists compare in order.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Mapping(x), Value::Mapping(y)) => {
            x.iter()
                .all(|(k, v)| y.get(k).map_or_else(|| is_empty(v), |w| same(v, w)))
                && y.iter().all(|(k, w)| x.contains_key(k) || is_empty(w))
        }
        (Value::Sequence(x), Value::Sequence(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (x, y) if is_empty(x) && is_empty(y) => true,
        (x, y) => x == y,
    }
}

fn ids(config: &MachineConfig) -> Vec<(DocumentId, &Value)> {
    config
        .documents
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let id = identify(d.as_mapping()?, i + 1).ok()?;
            Some((id, d))
        })
        .collect()
}

/// The identity keys a typed patch document starts with.
fn identity(id: &DocumentId) -> Mapping {
    let mut m = Mapping::new();
    if !id.is_v1alpha1() {
        m.insert("apiVersion".into(), id.api_version.clone().into());
        m.insert("kind".into(), id.kind.clone().into());
        if let Some(name) = &id.name {
            m.insert("name".into(), name.clone().into());
        }
    }
    m
}

/// The patches (YAML text, each a strategic-merge patch, in merge order)
/// that make `from` into `to`: none when they already mean the same, else a
/// deleting patch and then a setting one, each only when it has something
/// to say. Each patch's documents follow `to`'s document order.
pub fn patches_between(from: &MachineConfig, to: &MachineConfig) -> Vec<String> {
    let from_docs = ids(from);
    let to_docs = ids(to);
    let mut deletes: Vec<Value> = Vec::new();
    let mut sets: Vec<Value> = Vec::new();
    for (id, want) in &to_docs {
        let kind = id.kind.as_str();
        let have = from_docs.iter().find(|(fid, _)| fid == id).map(|(_, d)| *d);
        let (Some(w), h) = (want.as_mapping(), have.and_then(Value::as_mapping)) else {
            continue;
        };
        let Some(h) = h else {
            sets.push((*want).clone());
            continue;
        };
        let mut body = w.clone();
        let mut base = h.clone();
        for key in ["apiVersion", "kind", "name"] {
            body.remove(key);
            base.remove(key);
        }
        let parts = diff_mapping(kind, &mut Vec::new(), &base, &body);
        for (part, out) in [(parts.delete, &mut deletes), (parts.set, &mut sets)] {
            if !part.is_empty() {
                let mut doc = identity(id);
                doc.extend(part);
                out.push(Value::Mapping(doc));
            }
        }
    }
    for (id, _) in &from_docs {
        if !id.is_v1alpha1() && !to_docs.iter().any(|(tid, _)| tid == id) {
            let mut doc = identity(id);
            doc.insert("$patch".into(), "delete".into());
            deletes.push(Value::Mapping(doc));
        }
    }
    [deletes, sets]
        .into_iter()
        .filter(|docs| !docs.is_empty())
        .map(|docs| documents_to_string(&docs, Flavour::MachineConfig))
        .collect()
}

/// The first place where `a` and `b` differ in meaning (see [`same`]):
/// `None` when they mean the same, else the document and dotted field
/// (`v1alpha1: machine.install.image`), never a value.
pub fn first_difference(a: &MachineConfig, b: &MachineConfig) -> Option<String> {
    let (x, y) = (ids(a), ids(b));
    for (id, doc) in &x {
        let Some((_, other)) = y.iter().find(|(i, _)| i == id) else {
            return Some(format!("{id}: only in the first"));
        };
        if let Some(path) = differs_at(doc, other, &mut Vec::new()) {
            return Some(format!("{}: {path}", id.kind));
        }
    }
    y.iter()
        .find(|(id, _)| !x.iter().any(|(i, _)| i == id))
        .map(|(id, _)| format!("{id}: only in the second"))
}

fn differs_at(a: &Value, b: &Value, path: &mut Vec<String>) -> Option<String> {
    match (a, b) {
        (Value::Mapping(x), Value::Mapping(y)) => {
            for k in x.keys().chain(y.keys()) {
                let (v, w) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                path.push(key_text(k));
                let found = differs_at(v, w, path);
                path.pop();
                if found.is_some() {
                    return found;
                }
            }
            None
        }
        (x, y) if same(x, y) => None,
        _ => Some(if path.is_empty() {
            "(the whole document)".to_owned()
        } else {
            path.join(".")
        }),
    }
}
