//! The bootstrap add-ons in control planes' machine configs, which Talos applies when it
//! bootstraps the cluster. Up to the v1.13 contract they are `cluster.inlineManifests`
//! (v1alpha1 `ClusterInlineManifest`: `name` and `contents`, the manifests as one
//! multi-document YAML text); from v1.14, one `KubeInlineManifestConfig` document each
//! (`name`, `manifest`; Talos v1.14 `types/k8s/inline_manifest.go`), the v1alpha1 list being
//! deprecated. Talos applies the list of the control plane it bootstraps; every control plane
//! carries the same list so that any of them can, and so that `talosctl upgrade-k8s` finds it
//! on each.

use serde_yaml_ng::{Mapping, Value};

use talosprov_base::version::Contract;

/// One inline manifest: a bootstrap add-on's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineManifest {
    /// The add-on's name (Talos identifies inline manifests by name).
    pub name: String,
    /// The objects as YAML documents joined by `---`.
    pub contents: String,
}

/// The document kind that carries an inline manifest from the v1.14 contract.
pub const INLINE_MANIFEST_KIND: &str = "KubeInlineManifestConfig";

/// Put `manifests` into `documents` the way `contract` carries them: for v1.14 and later, a
/// `KubeInlineManifestConfig` document each, replacing a patch's document of the same name
/// where it is and appended otherwise; before v1.14, entries of the v1alpha1 document's
/// `cluster.inlineManifests`, with the same rule. Nothing happens with no manifests, or
/// before v1.14 without a v1alpha1 document.
pub fn merge_inline_manifests(
    documents: &mut Vec<Value>,
    manifests: &[InlineManifest],
    contract: Contract,
) {
    if manifests.is_empty() {
        return;
    }
    if contract >= Contract::V1_14 {
        for m in manifests {
            let mut doc = Mapping::new();
            doc.insert(Value::from("apiVersion"), Value::from("v1alpha1"));
            doc.insert(Value::from("kind"), Value::from(INLINE_MANIFEST_KIND));
            doc.insert(Value::from("name"), Value::from(m.name.as_str()));
            doc.insert(Value::from("manifest"), Value::from(m.contents.as_str()));
            let doc = Value::Mapping(doc);
            match documents.iter_mut().find(|d| {
                d.get("kind").and_then(Value::as_str) == Some(INLINE_MANIFEST_KIND)
                    && d.get("name").and_then(Value::as_str) == Some(m.name.as_str())
            }) {
                Some(existing) => *existing = doc,
                None => documents.push(doc),
            }
        }
        return;
    }
    merge_legacy(documents, manifests);
}

fn merge_legacy(documents: &mut [Value], manifests: &[InlineManifest]) {
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
        merge_inline_manifests(
            &mut docs,
            &[manifest("cni", "new"), manifest("gpu", "g")],
            Contract::V1_13,
        );
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
        merge_inline_manifests(&mut docs, &[manifest("cni", "x")], Contract::V1_13);
        assert_eq!(docs[0]["cluster"]["inlineManifests"][0]["name"], "cni");
    }

    #[test]
    fn from_1_14_each_manifest_is_its_own_document_replacing_its_namesake() {
        let mut docs = talosprov_patch::document::parse_documents(
            "machine: {type: controlplane}\n---\napiVersion: v1alpha1\nkind: KubeInlineManifestConfig\nname: cni\nmanifest: old\n---\napiVersion: v1alpha1\nkind: KubeInlineManifestConfig\nname: mine\nmanifest: kept\n",
        )
        .expect("yaml");
        merge_inline_manifests(
            &mut docs,
            &[manifest("cni", "new"), manifest("gpu", "g")],
            Contract::V1_14,
        );
        assert!(docs[0].get("cluster").is_none());
        assert_eq!(
            crate::effective::inline_manifests(&docs),
            [
                ("cni".to_owned(), "new".to_owned()),
                ("mine".to_owned(), "kept".to_owned()),
                ("gpu".to_owned(), "g".to_owned())
            ]
        );
        assert_eq!(docs[3]["apiVersion"], "v1alpha1");
    }
}
