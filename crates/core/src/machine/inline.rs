//! `cluster.inlineManifests` on control planes: the bootstrap add-ons, which
//! Talos applies when it bootstraps the cluster (v1alpha1
//! `ClusterInlineManifest`: `name` and `contents`, the manifests as one
//! multi-document YAML text). Talos applies the list of the control plane it
//! bootstraps; every control plane carries the same list so that any of them
//! can, and so that `talosctl upgrade-k8s` finds it on each.

use serde_yaml_ng::{Mapping, Value};

/// One inline manifest: a bootstrap add-on's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineManifest {
    /// The add-on's name (Talos identifies inline manifests by name).
    pub name: String,
    /// The objects as YAML documents joined by `---`.
    pub contents: String,
}

/// Put `manifests` into the v1alpha1 document among `documents`: an entry
/// with the same name is replaced where it is (a patch's own entry of that
/// name gives way to the add-on), others are appended in order. Nothing
/// happens without a v1alpha1 document or with no manifests.
pub fn merge_inline_manifests(documents: &mut [Value], manifests: &[InlineManifest]) {
    if manifests.is_empty() {
        return;
    }
    let Some(doc) = documents
        .iter_mut()
        .find(|d| d.get("machine").is_some() || d.get("cluster").is_some())
    else {
        return;
    };
    let Some(root) = doc.as_mapping_mut() else {
        return;
    };
    let cluster = root
        .entry(Value::from("cluster"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if !cluster.is_mapping() {
        return;
    }
    let Some(cluster) = cluster.as_mapping_mut() else {
        return;
    };
    let list = cluster
        .entry(Value::from("inlineManifests"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    let Some(list) = list.as_sequence_mut() else {
        return;
    };
    for m in manifests {
        let mut entry = Mapping::new();
        entry.insert(Value::from("name"), Value::from(m.name.as_str()));
        entry.insert(Value::from("contents"), Value::from(m.contents.as_str()));
        let entry = Value::Mapping(entry);
        match list
            .iter_mut()
            .find(|e| e.get("name").and_then(Value::as_str) == Some(m.name.as_str()))
        {
            Some(existing) => *existing = entry,
            None => list.push(entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(name: &str, contents: &str) -> InlineManifest {
        InlineManifest {
            name: name.into(),
            contents: contents.into(),
        }
    }

    #[test]
    fn manifests_are_appended_and_replace_their_namesake() {
        let mut docs = vec![
            serde_yaml_ng::from_str::<Value>(
                "machine: {type: controlplane}\ncluster:\n  inlineManifests:\n    - {name: cni, contents: old}\n    - {name: mine, contents: kept}\n",
            )
            .expect("yaml"),
        ];
        merge_inline_manifests(&mut docs, &[manifest("cni", "new"), manifest("gpu", "g")]);
        let list = docs[0]["cluster"]["inlineManifests"]
            .as_sequence()
            .expect("list");
        let pairs: Vec<(&str, &str)> = list
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or_default(),
                    e["contents"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(pairs, [("cni", "new"), ("mine", "kept"), ("gpu", "g")]);
    }

    #[test]
    fn a_config_without_cluster_gets_one() {
        let mut docs = vec![
            serde_yaml_ng::from_str::<Value>("machine: {type: controlplane}\n").expect("yaml"),
        ];
        merge_inline_manifests(&mut docs, &[manifest("cni", "x")]);
        assert_eq!(docs[0]["cluster"]["inlineManifests"][0]["name"], "cni");
    }
}
