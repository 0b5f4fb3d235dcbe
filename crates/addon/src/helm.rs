//! `helm` add-ons, the pure part: the `helm template` arguments, the values
//! it gets, and the digest of a rendering's inputs. Running `helm` is the
//! edge's (`talosprov-sources`).

use serde_json::Value;
use sha2::{Digest, Sha256};

use talosprov_base::diagnostics::{Code, Diagnostic, Pos};
use talosprov_base::inputs::Inputs;
use talosprov_base::load::Budget;
use talosprov_topology::model::{Addon, AddonSource, Topology};

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

/// The `values_files` of a `helm` add-on, read through `inputs` and the
/// bounded loader ([`Budget::INPUT`]: 4 MiB, nesting, aliases, nodes), each
/// a YAML mapping as Helm's `--values` wants (an empty file is `{}`), in
/// order; with every problem, as `A009 invalid-addon-manifest`: a file that
/// cannot be read (at the add-on's entry in the topology file), not YAML,
/// beyond the bounds or not a mapping (at the line and column of the values
/// file). Offline: `validate` reports these, `plan` and `render` refuse to
/// run `helm` with them. Nothing for an add-on that is not a Helm one.
pub fn values_files(
    topology: &Topology,
    addon: &Addon,
    inputs: &(impl Inputs + ?Sized),
) -> (Vec<Value>, Vec<Diagnostic>) {
    let AddonSource::Helm { values_files, .. } = &addon.source else {
        return (Vec::new(), Vec::new());
    };
    let field = format!("addons.{}.helm.values_files", addon.name);
    let mut values = Vec::new();
    let mut problems = Vec::new();
    for file in values_files {
        let text = match inputs.read(file) {
            Ok(t) => t,
            Err(e) => {
                let msg = format!("cannot read the values file {}: {e}", file.display());
                let d = super::manifests::at(topology, addon, Code::InvalidAddonManifest, msg);
                problems.push(d.field(field.clone()));
                continue;
            }
        };
        let problem = |pos: Pos, why: String| {
            let msg = format!("the values file {} {why}", file.display());
            Diagnostic::error(Code::InvalidAddonManifest, file, msg)
                .at(pos)
                .field(field.clone())
        };
        match talosprov_base::load::yaml_value::<Value>(&text, Budget::INPUT) {
            Ok(None) => values.push(Value::Object(serde_json::Map::new())),
            Ok(Some(v)) if v.is_object() => values.push(v),
            Ok(Some(_)) => problems.push(problem(
                Pos::new(1, 1),
                "is not a mapping of chart values".into(),
            )),
            Err(e) if e.is_limit() => problems.push(problem(
                e.pos,
                format!("is beyond the input bounds: {}", e.message),
            )),
            Err(e) => problems.push(problem(e.pos, format!("is not YAML: {}", e.message))),
        }
    }
    (values, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use talosprov_base::preset::spec::Phase;

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
    fn values_files_are_read_bounded_and_located() {
        use std::path::{Path, PathBuf};
        use talosprov_base::inputs::MemoryInputs;
        let text = "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n\
            proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\n\
            nodes:\n  - {hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}\n\
            addons:\n  c:\n    helm:\n      repo: https://charts.test\n      chart: c\n      version: 1.0.0\n\
            \x20     values_files: [ok.yaml, empty.yaml, missing.yaml, bomb.yaml, deep.yaml, list.yaml]\n";
        let loaded =
            talosprov_topology::parse(text, Path::new("lab/cluster.yaml"), &Default::default());
        let t = loaded.topology.expect("topology");
        let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let inputs = MemoryInputs::new()
            .with("lab/ok.yaml", "replicas: 2\n")
            .with("lab/empty.yaml", "# nothing\n")
            .with("lab/bomb.yaml", bomb)
            .with(
                "lab/deep.yaml",
                format!("x:\n  y: {}\n", "{a: ".repeat(100_000)),
            )
            .with("lab/list.yaml", "- a\n");
        let (values, problems) = values_files(&t, &t.addons["c"], &inputs);
        assert_eq!(values, [json!({"replicas": 2}), json!({})]);
        let found: Vec<(Code, PathBuf, Option<Pos>)> = problems
            .iter()
            .map(|d| (d.code, d.file.clone(), d.pos))
            .collect();
        let topology_pos = t.addons["c"].pos;
        assert_eq!(
            found,
            [
                (
                    Code::InvalidAddonManifest,
                    PathBuf::from("lab/cluster.yaml"),
                    Some(topology_pos)
                ),
                (
                    Code::InvalidAddonManifest,
                    PathBuf::from("lab/bomb.yaml"),
                    Some(Pos::new(6, 10))
                ),
                (
                    Code::InvalidAddonManifest,
                    PathBuf::from("lab/deep.yaml"),
                    Some(Pos::new(2, 254))
                ),
                (
                    Code::InvalidAddonManifest,
                    PathBuf::from("lab/list.yaml"),
                    Some(Pos::new(1, 1))
                ),
            ],
            "{problems:#?}"
        );
        assert!(
            problems[0]
                .message
                .contains("cannot read the values file lab/missing.yaml")
        );
        assert!(
            problems[1].message.contains("excessive aliasing"),
            "{}",
            problems[1].message
        );
        assert!(
            problems[2].message.contains("deeper than 64"),
            "{}",
            problems[2].message
        );
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
