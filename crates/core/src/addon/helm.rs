//! `helm` add-ons, the pure part: the `helm template` arguments, the values
//! it gets, and the digest of a rendering's inputs. Running `helm` is the
//! edge's (`talosprov-sources`).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::topology::{Addon, AddonSource};

/// The `helm template` arguments for `addon` (without `--values`, which the
/// runner adds with the file it writes), as Helm 3 takes them:
/// `template <release> <chart> [--repo <repo>] --version <v> --namespace <ns>
/// --kube-version <k8s> --include-crds`. The release is the add-on's name; an
/// `oci://` repo is the chart reference itself (with `/<chart>` when a chart
/// is given), with no `--repo`. `None` for an add-on that is not a Helm one.
pub fn template_args(addon: &Addon, kubernetes_version: &str) -> Option<Vec<String>> {
    let AddonSource::Helm {
        repo,
        chart,
        version,
        ..
    } = &addon.source
    else {
        return None;
    };
    let mut args = vec!["template".to_owned(), addon.name.clone()];
    if repo.starts_with("oci://") {
        args.push(if chart.is_empty() {
            repo.clone()
        } else {
            format!("{repo}/{chart}")
        });
    } else {
        args.extend([chart.clone(), "--repo".to_owned(), repo.clone()]);
    }
    args.extend([
        "--version".to_owned(),
        version.clone(),
        "--namespace".to_owned(),
        addon.namespace.clone(),
        "--kube-version".to_owned(),
        kubernetes_version.to_owned(),
        "--include-crds".to_owned(),
    ]);
    Some(args)
}

/// Lowercase hex SHA-256 of what a Helm rendering depends on: the
/// arguments ([`template_args`]: chart, version, namespace, Kubernetes
/// version) and the effective values, with every mapping's keys sorted so
/// that reordering a values file changes nothing.
pub fn inputs_digest(args: &[String], values: &Value) -> String {
    let doc = serde_json::json!({"args": args, "values": canonical(values)});
    hex::encode(Sha256::digest(doc.to_string().as_bytes()))
}

/// `v` with every object's keys in sorted order, at every level: the form
/// digests are taken of, so that key order is never a change.
pub fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other @ Value::Null
        | other @ Value::Bool(_)
        | other @ Value::Number(_)
        | other @ Value::String(_) => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Phase;
    use serde_json::json;

    fn addon(repo: &str, chart: &str) -> Addon {
        Addon {
            name: "cilium".into(),
            pos: Default::default(),
            preset: None,
            source: AddonSource::Helm {
                repo: repo.into(),
                chart: chart.into(),
                version: "1.19.6".into(),
                values: json!({}),
                values_files: Vec::new(),
            },
            namespace: "kube-system".into(),
            namespace_labels: Default::default(),
            phase: Phase::Bootstrap,
            depends_on: Vec::new(),
        }
    }

    #[test]
    fn a_repository_chart_and_an_oci_chart_give_helms_arguments() {
        assert_eq!(
            template_args(&addon("https://helm.cilium.io", "cilium"), "v1.36.2")
                .expect("helm")
                .join(" "),
            "template cilium cilium --repo https://helm.cilium.io --version 1.19.6 \
             --namespace kube-system --kube-version v1.36.2 --include-crds"
        );
        assert_eq!(
            template_args(&addon("oci://ghcr.io/siderolabs/charts/ccm", ""), "v1.36.2")
                .expect("helm")[2],
            "oci://ghcr.io/siderolabs/charts/ccm"
        );
        assert_eq!(
            template_args(&addon("oci://ghcr.io/charts", "ccm"), "v1.36.2").expect("helm")[2],
            "oci://ghcr.io/charts/ccm"
        );
    }

    #[test]
    fn the_digest_ignores_key_order_and_sees_every_input() {
        let args =
            template_args(&addon("https://helm.cilium.io", "cilium"), "v1.36.2").expect("helm");
        let a = inputs_digest(&args, &json!({"a": 1, "b": {"c": 2, "d": 3}}));
        let b = inputs_digest(&args, &json!({"b": {"d": 3, "c": 2}, "a": 1}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            inputs_digest(&args, &json!({"a": 2, "b": {"c": 2, "d": 3}}))
        );
        let newer =
            template_args(&addon("https://helm.cilium.io", "cilium"), "v1.36.3").expect("helm");
        assert_ne!(
            a,
            inputs_digest(&newer, &json!({"a": 1, "b": {"c": 2, "d": 3}}))
        );
    }
}
