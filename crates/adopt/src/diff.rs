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

use talosprov_base::yaml::{Flavour, documents_to_string};
use talosprov_patch::document::{DocumentId, MachineConfig, identify};
use talosprov_patch::merge::is_zero_scalar;
use talosprov_patch::rules::{FieldRule, is_map_field, rule_for};

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
    talosprov_patch::document::scalar_text(k).unwrap_or_default()
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

/// One independent piece of the difference between two configs: what one
/// field of the v1alpha1 document at depth two (`machine.install`), or one
/// typed document, needs; its delete part applies before its set part.
/// Pieces touch different fields, so they apply in any order.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// What it touches, for a file name: `machine-install`, `resolverconfig`.
    pub label: String,
    /// The `$patch: delete` documents (empty when none).
    pub delete: Vec<Value>,
    /// The documents to merge (empty when none).
    pub set: Vec<Value>,
}

impl Piece {
    /// Its patches as YAML text, the deleting one first, each only when it
    /// has something to say.
    pub fn patches(&self) -> Vec<String> {
        [&self.delete, &self.set]
            .into_iter()
            .filter(|docs| !docs.is_empty())
            .map(|docs| documents_to_string(docs, Flavour::MachineConfig))
            .collect()
    }
}

fn with_identity(id: &DocumentId, part: Mapping) -> Vec<Value> {
    if part.is_empty() {
        return Vec::new();
    }
    let mut doc = identity(id);
    doc.extend(part);
    vec![Value::Mapping(doc)]
}

/// The v1alpha1 document's difference split at depth two.
fn v1alpha1_pieces(id: &DocumentId, parts: Parts, out: &mut Vec<Piece>) {
    let mut labels: Vec<(Value, Option<Value>)> = Vec::new();
    for (k, v) in parts.delete.iter().chain(parts.set.iter()) {
        let subs: Vec<Option<Value>> = match v.as_mapping() {
            Some(m) if !m.contains_key("$patch") => m.keys().cloned().map(Some).collect(),
            Some(_) | None => vec![None],
        };
        for sub in subs {
            if !labels.contains(&(k.clone(), sub.clone())) {
                labels.push((k.clone(), sub));
            }
        }
    }
    let pick = |m: &Mapping, k: &Value, sub: &Option<Value>| -> Mapping {
        let mut part = Mapping::new();
        match (m.get(k), sub) {
            (Some(Value::Mapping(inner)), Some(sk)) if !inner.contains_key("$patch") => {
                if let Some(v) = inner.get(sk) {
                    let mut one = Mapping::new();
                    one.insert(sk.clone(), v.clone());
                    part.insert(k.clone(), Value::Mapping(one));
                }
            }
            (Some(v), None) => {
                part.insert(k.clone(), v.clone());
            }
            _ => {}
        }
        part
    };
    for (k, sub) in labels {
        let label = match &sub {
            Some(sk) => format!("{}-{}", key_text(&k), key_text(sk)),
            None => key_text(&k),
        };
        out.push(Piece {
            label: label
                .to_ascii_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
            delete: with_identity(id, pick(&parts.delete, &k, &sub)),
            set: with_identity(id, pick(&parts.set, &k, &sub)),
        });
    }
}

/// The difference that makes `from` into `to`, in independent pieces (see
/// [`Piece`]), in `to`'s document order: empty when they mean the same.
pub fn pieces_between(from: &MachineConfig, to: &MachineConfig) -> Vec<Piece> {
    let from_docs = ids(from);
    let to_docs = ids(to);
    let mut out = Vec::new();
    let label = |id: &DocumentId| {
        let name = id
            .name
            .as_deref()
            .map(|n| format!("-{n}"))
            .unwrap_or_default();
        format!("{}{name}", id.kind)
            .to_ascii_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    };
    for (id, want) in &to_docs {
        let have = from_docs.iter().find(|(fid, _)| fid == id).map(|(_, d)| *d);
        let (Some(w), h) = (want.as_mapping(), have.and_then(Value::as_mapping)) else {
            continue;
        };
        let Some(h) = h else {
            out.push(Piece {
                label: label(id),
                delete: Vec::new(),
                set: vec![(*want).clone()],
            });
            continue;
        };
        let mut body = w.clone();
        let mut base = h.clone();
        for key in ["apiVersion", "kind", "name"] {
            body.remove(key);
            base.remove(key);
        }
        let parts = diff_mapping(id.kind.as_str(), &mut Vec::new(), &base, &body);
        if id.is_v1alpha1() {
            v1alpha1_pieces(id, parts, &mut out);
        } else if !parts.delete.is_empty() || !parts.set.is_empty() {
            out.push(Piece {
                label: label(id),
                delete: with_identity(id, parts.delete),
                set: with_identity(id, parts.set),
            });
        }
    }
    for (id, _) in &from_docs {
        if !id.is_v1alpha1() && !to_docs.iter().any(|(tid, _)| tid == id) {
            let mut doc = identity(id);
            doc.insert("$patch".into(), "delete".into());
            out.push(Piece {
                label: format!("{}-delete", label(id)),
                delete: vec![Value::Mapping(doc)],
                set: Vec::new(),
            });
        }
    }
    out
}

/// The patches (YAML text, each a strategic-merge patch, in merge order)
/// that make `from` into `to`: none when they already mean the same, else a
/// deleting patch and then a setting one, each only when it has something
/// to say.
pub fn patches_between(from: &MachineConfig, to: &MachineConfig) -> Vec<String> {
    let pieces = pieces_between(from, to);
    let merged = Piece {
        label: String::new(),
        delete: merge_docs(pieces.iter().flat_map(|p| p.delete.iter())),
        set: merge_docs(pieces.iter().flat_map(|p| p.set.iter())),
    };
    merged.patches()
}

/// Documents of the same identity merged into one (their pieces touch
/// different fields), in first-seen order.
fn merge_docs<'a>(docs: impl Iterator<Item = &'a Value>) -> Vec<Value> {
    let mut out: Vec<(Option<DocumentId>, Mapping)> = Vec::new();
    for (i, d) in docs.enumerate() {
        let Some(m) = d.as_mapping() else { continue };
        let id = identify(m, i + 1).ok();
        match out.iter_mut().find(|(oid, _)| oid.is_some() && *oid == id) {
            Some((_, into)) => deep_extend(into, m),
            None => out.push((id, m.clone())),
        }
    }
    out.into_iter().map(|(_, m)| Value::Mapping(m)).collect()
}

fn deep_extend(into: &mut Mapping, from: &Mapping) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Mapping(a)), Value::Mapping(b)) => deep_extend(a, b),
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
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
