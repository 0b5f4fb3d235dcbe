//! Which patch last changed each value of a patched config, recorded patch
//! by patch in time linear in what each patch reaches, not in the config's
//! size: before a patch applies, [`Watch::before`] takes the leaves of the
//! parts of the config it can change (a strategic merge descends key by key
//! where a mapping merges into a mapping; a list, a replaced or URL field, a
//! delete or a new document is taken whole; a JSON patch, the whole config),
//! and [`Provenance::record`] compares them with the same parts after.

use std::collections::BTreeMap;

use serde_yaml_ng::Value;

use super::document::{DocumentId, MachineConfig, scalar_text};
use super::load::{Patch, PatchBody};
use super::merge::StrategicStep;
use super::rules::{FieldRule, rule_for};

/// Which patch last changed each value of a patched config.
///
/// Values are leaves (scalars, empty lists and mappings) addressed by their
/// document and a dotted path such as `machine.network.interfaces[0].vip.ip`.
/// A value no patch changed comes from the base config. A patch that shifts a
/// list (a delete, say) counts as changing every element it moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// Patch sources, in the order they were applied.
    sources: Vec<String>,
    /// For each leaf, the index in `sources` of the last patch that changed it.
    setters: BTreeMap<(DocumentId, String), usize>,
}

/// Every leaf value of a part of a config, by document and dotted path.
type Leaves = BTreeMap<(DocumentId, String), Value>;

/// A part of a config: a document, and the keys to a subtree of it (none:
/// the whole document).
type Part = (DocumentId, Vec<String>);

/// The parts of a config a patch can change, with their leaves before it
/// applied. `None` parts: the whole config.
#[derive(Debug)]
pub(crate) struct Watch {
    parts: Option<Vec<Part>>,
    before: Leaves,
}

impl Watch {
    /// Watch what `patch` can change in `config`, before it is applied.
    pub(crate) fn before(config: &MachineConfig, patch: &Patch) -> Watch {
        let parts = reach(config, patch);
        let before = leaves_of(config, parts.as_deref());
        Watch { parts, before }
    }
}

impl Provenance {
    /// The source of the patch that last changed the value at `path` in the
    /// document `doc`, or, for a list or mapping, the latest patch that changed
    /// anything under it; `None` when the base config set it.
    pub fn source_of(&self, doc: &DocumentId, path: &str) -> Option<&str> {
        let exact = self.setters.get(&(doc.clone(), path.to_string())).copied();
        let under = self
            .under(doc, path)
            .filter(|(p, _)| p.len() > path.len())
            .map(|(_, i)| i)
            .max();
        exact.or(under).map(|i| self.sources[i].as_str())
    }

    /// The setters of the leaves at or under `path` in `doc`, by path.
    fn under<'a>(
        &'a self,
        doc: &'a DocumentId,
        path: &'a str,
    ) -> impl Iterator<Item = (&'a str, usize)> + 'a {
        self.setters
            .range((doc.clone(), path.to_owned())..)
            .take_while(move |((d, p), _)| d == doc && p.starts_with(path))
            .filter(move |((_, p), _)| {
                p.len() == path.len()
                    || path.is_empty()
                    || matches!(p.as_bytes()[path.len()], b'.' | b'[')
            })
            .map(|((_, p), i)| (p.as_str(), *i))
    }

    /// Record `source` as the setter of every leaf of the watched parts that
    /// differs between before the patch and `config` after it.
    pub(crate) fn record(&mut self, watch: Watch, config: &MachineConfig, source: &str) {
        let index = self.sources.len();
        self.sources.push(source.to_string());
        let after = leaves_of(config, watch.parts.as_deref());
        let gone: Vec<(DocumentId, String)> = match &watch.parts {
            None => self
                .setters
                .keys()
                .filter(|k| !after.contains_key(*k))
                .cloned()
                .collect(),
            Some(parts) => parts
                .iter()
                .flat_map(|(doc, keys)| {
                    let path = keys.join(".");
                    self.under(doc, &path)
                        .map(|(p, _)| (doc.clone(), p.to_owned()))
                        .collect::<Vec<_>>()
                })
                .filter(|k| !after.contains_key(k))
                .collect(),
        };
        for k in gone {
            self.setters.remove(&k);
        }
        for (k, v) in after {
            if watch.before.get(&k) != Some(&v) {
                self.setters.insert(k, index);
            }
        }
    }
}

/// The parts of `config` that `patch` can change; `None`: any.
fn reach(config: &MachineConfig, patch: &Patch) -> Option<Vec<Part>> {
    let PatchBody::Strategic(steps) = &patch.body else {
        return None;
    };
    let mut out = Vec::new();
    for step in steps {
        match step {
            StrategicStep::Delete(sel) => out.push((sel.document.clone(), Vec::new())),
            StrategicStep::Merge { id, document } => match config.position(id) {
                None => out.push((id.clone(), Vec::new())),
                Some(pos) => {
                    let mut keys = Vec::new();
                    descend(
                        document,
                        Some(&config.documents[pos]),
                        &id.kind,
                        &mut keys,
                        &mut out,
                        id,
                    );
                }
            },
        }
    }
    Some(out)
}

/// Where merging `patch` at `keys` changes `target`: each key of a mapping
/// merged into a mapping by the default (or per-key `extraArgs`) rule, else
/// `keys` whole.
fn descend(
    patch: &Value,
    target: Option<&Value>,
    kind: &str,
    keys: &mut Vec<String>,
    out: &mut Vec<Part>,
    doc: &DocumentId,
) {
    let per_key = matches!(rule_for(kind, keys), FieldRule::Default | FieldRule::Args);
    match (untagged(patch), target.and_then(untagged)) {
        (Some(p), Some(t)) if per_key && !p.contains_key("$patch") => {
            for (k, v) in p {
                let Some(key) = scalar_text(k) else {
                    out.push((doc.clone(), keys.clone()));
                    return;
                };
                keys.push(key);
                descend(v, t.get(k), kind, keys, out, doc);
                keys.pop();
            }
        }
        _ => out.push((doc.clone(), keys.clone())),
    }
}

/// `v` as a mapping, through a tag.
fn untagged(v: &Value) -> Option<&serde_yaml_ng::Mapping> {
    match v {
        Value::Tagged(t) => t.value.as_mapping(),
        Value::Mapping(m) => Some(m),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Sequence(_) => {
            None
        }
    }
}

/// The leaves of `parts` of `config` (all of it for `None`).
fn leaves_of(config: &MachineConfig, parts: Option<&[Part]>) -> Leaves {
    let mut out = BTreeMap::new();
    for (doc, id) in config.documents.iter().zip(config.ids()) {
        let Some(id) = id else { continue };
        let mut add = |keys: &[String]| {
            let Some(sub) = subtree(doc, keys) else {
                return;
            };
            let mut path = keys.join(".");
            walk(sub, &mut path, &mut |p, v| {
                out.insert((id.clone(), p.to_string()), v.clone());
            });
        };
        match parts {
            None => add(&[]),
            Some(parts) => parts
                .iter()
                .filter(|(d, _)| *d == id)
                .for_each(|(_, keys)| add(keys)),
        }
    }
    out
}

/// The value at `keys` under `doc`, through mappings (and tags).
fn subtree<'a>(doc: &'a Value, keys: &[String]) -> Option<&'a Value> {
    let mut at = doc;
    for key in keys {
        let m = untagged(at)?;
        // A string key is found at once; another scalar (a number) by its text.
        at = match m.get(Value::String(key.clone())) {
            Some(v) => v,
            None => m
                .iter()
                .find(|(k, _)| !k.is_string() && scalar_text(k).as_deref() == Some(key.as_str()))
                .map(|(_, v)| v)?,
        };
    }
    Some(at)
}

fn walk(v: &Value, path: &mut String, f: &mut impl FnMut(&str, &Value)) {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            for (k, child) in m {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&scalar_text(k).unwrap_or_default());
                walk(child, path, f);
                path.truncate(len);
            }
        }
        Value::Sequence(items) if !items.is_empty() => {
            for (i, child) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(child, path, f);
                path.truncate(len);
            }
        }
        Value::Tagged(t) => walk(&t.value, path, f),
        leaf @ Value::Null
        | leaf @ Value::Bool(_)
        | leaf @ Value::Number(_)
        | leaf @ Value::String(_)
        | leaf @ Value::Sequence(_)
        | leaf @ Value::Mapping(_) => f(path, leaf),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::apply_patches_traced;
    use crate::load::load_patch;

    fn traced(base: &str, patches: &[(&str, &str)]) -> Provenance {
        let base = MachineConfig::parse(base).unwrap();
        let patches: Vec<Patch> = patches
            .iter()
            .map(|(s, t)| load_patch(*s, t).unwrap())
            .collect();
        apply_patches_traced(&base, &patches).unwrap().1
    }

    #[test]
    fn each_value_names_the_last_patch_that_changed_it_however_it_was_reached() {
        let v1 = DocumentId::v1alpha1();
        let p = traced(
            "machine:\n  install:\n    disk: /dev/sda\n  kubelet:\n    extraArgs:\n      a: '1'\n",
            &[
                (
                    "labels.yaml",
                    "machine:\n  nodeLabels:\n    x: '1'\n    y: '2'\n",
                ),
                ("y.yaml", "machine:\n  nodeLabels:\n    y: '3'\n"),
                (
                    "args.yaml",
                    "machine:\n  kubelet:\n    extraArgs:\n      b: '2'\n",
                ),
                (
                    "delete.yaml",
                    "machine:\n  nodeLabels:\n    x:\n      $patch: delete\n",
                ),
                (
                    "json.yaml",
                    "[{\"op\": \"add\", \"path\": \"/machine/install/wipe\", \"value\": true}]",
                ),
            ],
        );
        assert_eq!(p.source_of(&v1, "machine.nodeLabels.y"), Some("y.yaml"));
        assert_eq!(p.source_of(&v1, "machine.nodeLabels.x"), None, "deleted");
        assert_eq!(p.source_of(&v1, "machine.nodeLabels"), Some("y.yaml"));
        assert_eq!(
            p.source_of(&v1, "machine.kubelet.extraArgs.b"),
            Some("args.yaml")
        );
        assert_eq!(
            p.source_of(&v1, "machine.kubelet.extraArgs.a"),
            None,
            "the base's"
        );
        assert_eq!(p.source_of(&v1, "machine.install.wipe"), Some("json.yaml"));
        assert_eq!(p.source_of(&v1, "machine.install.disk"), None);
    }

    #[test]
    fn a_patch_watches_only_the_keys_it_merges_into() {
        let config = MachineConfig::parse(
            "machine:\n  nodeLabels:\n    a: '1'\n    b: '2'\n  network:\n    interfaces:\n      - interface: eth0\n",
        )
        .unwrap();
        let label = load_patch("l", "machine:\n  nodeLabels:\n    c: '3'\n").unwrap();
        let parts = reach(&config, &label).unwrap();
        let keys: Vec<String> = parts.iter().map(|(_, k)| k.join(".")).collect();
        assert_eq!(keys, ["machine.nodeLabels.c"]);
        let iface = load_patch(
            "i",
            "machine:\n  network:\n    interfaces:\n      - interface: eth1\n",
        )
        .unwrap();
        let keys: Vec<String> = reach(&config, &iface)
            .unwrap()
            .iter()
            .map(|(_, k)| k.join("."))
            .collect();
        assert_eq!(keys, ["machine.network.interfaces"], "a list whole");
    }
}
