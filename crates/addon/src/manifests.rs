//! `manifests` add-ons: their files (globs expanded in byte-wise order),
//! rendered like patches (literal, minijinja `.j2`/`.jinja`, `templatefile`
//! `.tftpl`), read as Kubernetes objects; the bootstrap ones as inline
//! manifests; and the checks across add-ons' objects (two add-ons with one
//! object, a CNI on a cluster that has one).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_yaml_ng::Value;

use talosprov_base::diagnostics::{Code, Diagnostic, Pos};
use talosprov_base::inputs::Inputs;
use talosprov_base::preset::spec::ClusterFacts;
use talosprov_base::preset::spec::Phase;
use talosprov_machine::inline::InlineManifest;
use talosprov_patch::discover::PatchKind;
use talosprov_patch::render::{RenderError, Renderer};
use talosprov_topology::model::{Addon, AddonSource, Topology};

/// The host folder every CNI writes its config into (the CNI specification's
/// conventional `/etc/cni/net.d`, which the kubelet reads): a DaemonSet
/// mounting it carries a CNI.
pub const CNI_CONFIG_DIR: &str = "/etc/cni/net.d";

/// The kubelet's device-plugin socket folder, which every device plugin
/// mounts (Kubernetes device plugin API).
pub const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";

/// One Kubernetes object of an add-on.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// `apiVersion`, such as `apps/v1`.
    pub api_version: String,
    /// `kind`, such as `DaemonSet`.
    pub kind: String,
    /// `metadata.namespace` as it will be applied: as written, else the
    /// add-on's namespace for a kind that is not cluster-scoped.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The whole object, with the namespace filled in.
    pub body: Value,
    /// The file it came from.
    pub file: PathBuf,
}

impl Object {
    /// `kind/namespace/name` (or `kind/name`), with the API group: how two
    /// add-ons' objects are told apart.
    pub fn identity(&self) -> String {
        let group = self.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let kind = if group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{group}", self.kind)
        };
        match &self.namespace {
            Some(ns) => format!("{kind} {ns}/{}", self.name),
            None => format!("{kind} {}", self.name),
        }
    }

    /// Whether it is a DaemonSet whose pods mount the host's CNI config
    /// folder: what every CNI is.
    pub fn carries_cni(&self) -> bool {
        self.mounts_host_path(CNI_CONFIG_DIR)
    }

    /// Whether it is a DaemonSet whose pods mount the kubelet's device-plugin
    /// folder: a device plugin (NVIDIA's, the GPU operator's).
    pub fn carries_device_plugin(&self) -> bool {
        self.mounts_host_path(DEVICE_PLUGINS_DIR)
    }

    /// Whether it is a DaemonSet with a `hostPath` volume of `dir`.
    fn mounts_host_path(&self, dir: &str) -> bool {
        self.kind == "DaemonSet"
            && self.body["spec"]["template"]["spec"]["volumes"]
                .as_sequence()
                .is_some_and(|volumes| {
                    volumes.iter().any(|v| {
                        v["hostPath"]["path"]
                            .as_str()
                            .is_some_and(|p| p.trim_end_matches('/') == dir)
                    })
                })
    }
}

/// The objects of one add-on, in file and document order.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedAddon {
    /// The add-on's name.
    pub name: String,
    /// Its objects; a non-default namespace's `Namespace` object (with the
    /// add-on's labels) comes first when the files do not declare it.
    pub objects: Vec<Object>,
}

impl RenderedAddon {
    /// The objects as one multi-document YAML text (`---` between them).
    pub fn to_yaml(&self) -> String {
        self.objects
            .iter()
            .map(|o| serde_yaml_ng::to_string(&o.body).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

/// What a manifest template sees: the cluster-wide patch variables, every
/// node's topology entry, and the add-on's own entry.
#[derive(Debug, Serialize)]
pub struct AddonVars<'a> {
    /// The cluster name.
    pub cluster_name: &'a str,
    /// The shared VIP, if any.
    pub vip: Option<String>,
    /// The default gateway.
    pub gateway: String,
    /// DNS servers, possibly empty.
    pub nameservers: Vec<String>,
    /// The nodes' prefix length.
    pub prefix_length: u8,
    /// The Talos version, `v1.13.8`.
    pub talos_version: String,
    /// The Kubernetes version, `v1.36.2`.
    pub kubernetes_version: &'a str,
    /// Every node's topology entry, in file order.
    pub nodes: Vec<serde_json::Value>,
    /// The add-on's entry (`addon.name`, `addon.namespace`, ...).
    pub addon: &'a Addon,
}

/// Kinds that are not namespaced (Kubernetes's built-in cluster-scoped
/// resources): an object of one of these kinds gets no namespace.
pub const CLUSTER_SCOPED: [&str; 21] = [
    "APIService",
    "CSIDriver",
    "CSINode",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "FlowSchema",
    "IngressClass",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
];

/// Render every `manifests` add-on of `topology`, reading files through
/// `inputs`; `kubernetes_version` is the cluster's (`v1.36.2`).
///
/// Returns the add-ons that rendered, in file order, and every problem:
/// `A009` for a file that cannot be read, a glob that matches nothing or a
/// document that is not an object, `P006`/`P007` for a template or its
/// output.
pub fn render_manifests(
    topology: &Topology,
    inputs: &(impl Inputs + ?Sized),
    kubernetes_version: &str,
) -> (Vec<RenderedAddon>, Vec<Diagnostic>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let nodes: Vec<serde_json::Value> = topology
        .nodes
        .iter()
        .map(|n| serde_json::to_value(n).unwrap_or_default())
        .collect();
    for addon in topology.addons.values() {
        let AddonSource::Manifests(patterns) = &addon.source else {
            continue;
        };
        let vars = AddonVars {
            cluster_name: &topology.cluster.name,
            vip: topology.cluster.vip.map(|v| v.to_string()),
            gateway: topology.cluster.gateway.to_string(),
            nameservers: topology
                .cluster
                .nameservers
                .iter()
                .map(ToString::to_string)
                .collect(),
            prefix_length: topology.cluster.prefix_length,
            talos_version: topology.cluster.talos_version.to_string(),
            kubernetes_version,
            nodes: nodes.clone(),
            addon,
        };
        let before = problems.len();
        let mut objects = Vec::new();
        for file in expand(topology, addon, patterns, inputs, &mut problems) {
            objects.extend(render_file(
                topology,
                addon,
                &file,
                inputs,
                &vars,
                &mut problems,
            ));
        }
        if problems.len() == before {
            out.push(RenderedAddon {
                name: addon.name.clone(),
                objects: with_namespace(addon, objects),
            });
        }
    }
    (out, problems)
}

/// The files of `patterns`, each glob's matches in byte-wise order.
fn expand(
    topology: &Topology,
    addon: &Addon,
    patterns: &[PathBuf],
    inputs: &(impl Inputs + ?Sized),
    problems: &mut Vec<Diagnostic>,
) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for pattern in patterns {
        let name = pattern
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !name.contains(['*', '?', '[']) {
            files.push(pattern.clone());
            continue;
        }
        let dir = talosprov_base::paths::folder_of(pattern);
        let matcher = glob::Pattern::new(&name);
        let listed = inputs.list(dir);
        let mut matched: Vec<PathBuf> = match (&matcher, listed) {
            (Ok(m), Ok(entries)) => entries
                .into_iter()
                .filter(|e| !e.is_dir)
                .filter(|e| {
                    m.matches_with(
                        &e.name.to_string_lossy(),
                        glob::MatchOptions {
                            case_sensitive: true,
                            require_literal_separator: true,
                            require_literal_leading_dot: true,
                        },
                    )
                })
                .map(|e| dir.join(e.name))
                .collect(),
            (Err(e), _) => {
                problems.push(problem(
                    topology,
                    addon,
                    format!("manifest pattern {}: {e}", pattern.display()),
                ));
                continue;
            }
            (_, Err(e)) => {
                problems.push(problem(
                    topology,
                    addon,
                    format!(
                        "cannot list {} for the pattern {}: {e}",
                        dir.display(),
                        pattern.display()
                    ),
                ));
                continue;
            }
        };
        if matched.is_empty() {
            problems.push(problem(
                topology,
                addon,
                format!("the manifest pattern {} matches no file", pattern.display()),
            ));
        }
        matched.sort_by(|a, b| {
            a.as_os_str()
                .as_encoded_bytes()
                .cmp(b.as_os_str().as_encoded_bytes())
        });
        files.extend(matched);
    }
    files
}

/// One file's objects; problems go to `problems`.
fn render_file(
    topology: &Topology,
    addon: &Addon,
    file: &Path,
    inputs: &(impl Inputs + ?Sized),
    vars: &AddonVars<'_>,
    problems: &mut Vec<Diagnostic>,
) -> Vec<Object> {
    let text = match inputs.read(file) {
        Ok(t) => t,
        Err(e) => {
            problems.push(problem(
                topology,
                addon,
                format!("cannot read the manifest {}: {e}", file.display()),
            ));
            return Vec::new();
        }
    };
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let kind = PatchKind::of(&name).unwrap_or(PatchKind::Literal);
    let mut renderer = Renderer::new();
    let docs = renderer
        .add(file, kind, &text)
        .and_then(|()| renderer.render_documents(file, vars));
    let docs = match docs {
        Ok(d) => d,
        Err(e) => {
            problems.push(render_problem(&e, addon));
            return Vec::new();
        }
    };
    let starts = (kind == PatchKind::Literal).then(|| document_lines(&text));
    objects_of(docs, file, addon, starts.as_deref(), problems)
}

/// A manifest file that did not render or read as YAML: `P006` for a
/// template error, `A009` (not the patches' `P007`) for YAML that is not
/// valid or beyond the input bounds, at its line (of the file, or of a template the
/// line that wrote the faulty output when its text tells, else line 1).
fn render_problem(e: &RenderError, addon: &Addon) -> Diagnostic {
    let field = format!("addons.{}.manifests", addon.name);
    match e {
        RenderError::Yaml {
            file,
            line,
            column,
            rendered,
            origin,
            message,
        } => {
            let (place, pos) = if *rendered {
                (
                    format!(" at line {line} of the rendered output"),
                    Pos::new(to_u32(origin.unwrap_or(1)), 1),
                )
            } else {
                let pos = Pos::new(to_u32(*line), to_u32(column.unwrap_or(1)));
                (String::new(), pos)
            };
            let msg = format!(
                "the manifests of add-on `{}` are not YAML{place}: {message}",
                addon.name
            );
            Diagnostic::error(Code::InvalidAddonManifest, file, msg)
                .at(pos)
                .field(field)
        }
        RenderError::Template { .. } | RenderError::NotLoaded { .. } => {
            talosprov_patch::set::render_diagnostic(e, None).field(field)
        }
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The objects of one file's documents; `starts`: each document's first
/// line, when the lines are the file's own (not a template's output).
fn objects_of(
    docs: Vec<Value>,
    file: &Path,
    addon: &Addon,
    starts: Option<&[u32]>,
    problems: &mut Vec<Diagnostic>,
) -> Vec<Object> {
    let mut objects = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        match object(doc, file, addon) {
            Ok(o) => objects.push(o),
            Err(why) => {
                let d = Diagnostic::error(
                    Code::InvalidAddonManifest,
                    file,
                    format!(
                        "document {} of add-on `{}` is not a Kubernetes object: {why}",
                        i + 1,
                        addon.name
                    ),
                )
                .field(format!("addons.{}.manifests", addon.name));
                // A template's output has no lines of the file: the whole file.
                let line = starts.and_then(|s| s.get(i)).copied().unwrap_or(1);
                let d = d.at(Pos::new(line, 1));
                problems.push(d);
            }
        }
    }
    objects
}

/// The objects of a `url` or `helm` add-on from its text (downloaded from
/// the URL, its digest already checked, or printed by `helm template`),
/// labelled `source` in messages, read through the bounded loader with
/// `budget` ([`Budget::DOWNLOAD`](crate::load::Budget::DOWNLOAD) for a
/// download, [`Budget::HELM_OUTPUT`](crate::load::Budget::HELM_OUTPUT) for a
/// chart): `None` with the problems when a document is not YAML, is beyond
/// the bounds, or is not an object (`A009`, naming the source and the line).
pub fn render_text(
    topology: &Topology,
    addon: &Addon,
    source: &str,
    text: &str,
    budget: talosprov_base::load::Budget,
) -> (Option<RenderedAddon>, Vec<Diagnostic>) {
    let mut problems = Vec::new();
    let file = Path::new(source);
    let docs = match talosprov_base::load::yaml_documents(text, budget) {
        Ok(d) => d,
        Err(e) => {
            let what = if e.is_limit() {
                "are beyond the input bounds"
            } else {
                "are not YAML"
            };
            let msg = format!(
                "the manifests of add-on `{}` from {source} {what}: {e}",
                addon.name
            );
            problems.push(at(topology, addon, Code::InvalidAddonManifest, msg));
            return (None, problems);
        }
    };
    let starts = document_lines(text);
    let objects = objects_of(docs, file, addon, Some(&starts), &mut problems);
    if !problems.is_empty() {
        return (None, problems);
    }
    let rendered = RenderedAddon {
        name: addon.name.clone(),
        objects: with_namespace(addon, objects),
    };
    (Some(rendered), problems)
}

/// The 1-based line where each YAML document of `text` starts: its first
/// line that is neither blank, a comment nor a `---` separator. A document
/// of only comments has none, as the parser skips it.
fn document_lines(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_end();
        if t == "---" || t.starts_with("--- ") || t == "..." {
            open = false;
            continue;
        }
        let content = t.trim_start();
        if open || content.is_empty() || content.starts_with('#') {
            continue;
        }
        open = true;
        out.push(u32::try_from(i + 1).unwrap_or(u32::MAX));
    }
    out
}

/// Read one document as an object, filling in the add-on's namespace.
fn object(mut doc: Value, file: &Path, addon: &Addon) -> Result<Object, String> {
    let text = |v: &Value, what: &str| -> Result<String, String> {
        match v.as_str() {
            Some(s) if !s.is_empty() => Ok(s.to_owned()),
            _ => Err(format!("it has no {what}")),
        }
    };
    if !doc.is_mapping() {
        return Err("it is not a mapping".into());
    }
    let api_version = text(&doc["apiVersion"], "apiVersion")?;
    let kind = text(&doc["kind"], "kind")?;
    let name = text(&doc["metadata"]["name"], "metadata.name")?;
    strings_only(&doc, &api_version, &kind)?;
    let namespace = match doc["metadata"]["namespace"].as_str() {
        Some(ns) => Some(ns.to_owned()),
        None if CLUSTER_SCOPED.contains(&kind.as_str()) => None,
        None => {
            if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_mapping_mut) {
                meta.insert("namespace".into(), addon.namespace.clone().into());
            }
            Some(addon.namespace.clone())
        }
    };
    Ok(Object {
        api_version,
        kind,
        namespace,
        name,
        body: doc,
        file: file.to_path_buf(),
    })
}

/// Refuse what the API server cannot decode: a value of `metadata.labels` or
/// `metadata.annotations`, or of a core ConfigMap's `data`/`binaryData` or a
/// Secret's `data`/`stringData`, that is not a string (the Go types are
/// `map[string]string` and `map[string][]byte`), such as YAML's unquoted
/// `1`, `true` or `on`.
fn strings_only(doc: &Value, api_version: &str, kind: &str) -> Result<(), String> {
    let mut maps = vec!["metadata.labels", "metadata.annotations"];
    match (api_version, kind) {
        ("v1", "ConfigMap") => maps.extend(["data", "binaryData"]),
        ("v1", "Secret") => maps.extend(["data", "stringData"]),
        _ => {}
    }
    for path in maps {
        let at = path.split('.').try_fold(doc, |v, key| v.get(key));
        let Some(map) = at.and_then(Value::as_mapping) else {
            continue;
        };
        for (key, value) in map {
            if value.is_string() {
                continue;
            }
            let key = key
                .as_str()
                .map_or_else(|| format!("{key:?}"), str::to_owned);
            let shown = serde_yaml_ng::to_string(value).unwrap_or_default();
            return Err(format!(
                "`{path}.{key}` is {}, not a string, which the API server refuses: quote it",
                shown.trim_end()
            ));
        }
    }
    Ok(())
}

/// `objects`, preceded by the add-on's `Namespace` (with its labels) unless
/// it is `default`, `kube-system` or declared by the files.
fn with_namespace(addon: &Addon, objects: Vec<Object>) -> Vec<Object> {
    let ns = &addon.namespace;
    let declared = objects
        .iter()
        .any(|o| o.kind == "Namespace" && &o.name == ns);
    if declared || ns == "default" || ns == "kube-system" {
        return objects;
    }
    let mut body = serde_yaml_ng::Mapping::new();
    body.insert("apiVersion".into(), "v1".into());
    body.insert("kind".into(), "Namespace".into());
    let mut meta = serde_yaml_ng::Mapping::new();
    meta.insert("name".into(), ns.clone().into());
    if !addon.namespace_labels.is_empty() {
        let labels: serde_yaml_ng::Mapping = addon
            .namespace_labels
            .iter()
            .map(|(k, v)| (Value::from(k.as_str()), Value::from(v.as_str())))
            .collect();
        meta.insert("labels".into(), Value::Mapping(labels));
    }
    body.insert("metadata".into(), Value::Mapping(meta));
    let namespace = Object {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: None,
        name: ns.clone(),
        body: Value::Mapping(body),
        file: PathBuf::new(),
    };
    std::iter::once(namespace).chain(objects).collect()
}

/// The inline manifests of the bootstrap add-ons among `rendered`, in
/// `topology`'s add-on order.
pub fn inline_manifests(topology: &Topology, rendered: &[RenderedAddon]) -> Vec<InlineManifest> {
    crate::order::apply_order(&topology.addons)
        .into_iter()
        .filter(|a| a.phase == Phase::Bootstrap)
        .filter_map(|a| rendered.iter().find(|r| r.name == a.name))
        .map(|r| InlineManifest {
            name: r.name.clone(),
            contents: r.to_yaml(),
        })
        .collect()
}

/// Problems across the add-ons' objects: `A010` for an object two add-ons
/// render (the namespace objects talosprov adds are shared, not counted), and
/// `A005` for a bootstrap add-on that carries a CNI on a cluster whose CNI is
/// not `none` (`facts`, when the configs rendered).
pub fn object_checks(
    topology: &Topology,
    rendered: &[RenderedAddon],
    facts: Option<&ClusterFacts>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut seen: std::collections::HashMap<String, &str> = std::collections::HashMap::new();
    for r in rendered {
        for o in r.objects.iter().filter(|o| !o.file.as_os_str().is_empty()) {
            match seen.get(&o.identity()) {
                Some(first) if *first != r.name => {
                    if let Some(addon) = topology.addons.get(&r.name) {
                        let msg = format!(
                            "{} is in add-ons `{first}` and `{}` (from {}): each object belongs to one add-on",
                            o.identity(),
                            r.name,
                            o.file.display()
                        );
                        out.push(at(topology, addon, Code::AddonObjectConflict, msg));
                    }
                }
                _ => {
                    seen.insert(o.identity(), &r.name);
                }
            }
        }
        let addon = topology.addons.get(&r.name);
        let bootstrap = addon.is_some_and(|a| a.phase == Phase::Bootstrap);
        if let (Some(addon), Some(f), true) = (addon, facts, bootstrap)
            && f.cni != "none"
            && let Some(cni) = r.objects.iter().find(|o| o.carries_cni())
        {
            let why = format!("{} mounts {CNI_CONFIG_DIR}", cni.identity());
            out.push(super::checks::cni_conflict(topology, addon, f, &why));
        }
    }
    out
}

fn problem(topology: &Topology, addon: &Addon, msg: String) -> Diagnostic {
    at(topology, addon, Code::InvalidAddonManifest, msg)
}

/// A diagnostic about `addon`, at its entry in the topology file.
pub fn at(topology: &Topology, addon: &Addon, code: Code, msg: String) -> Diagnostic {
    Diagnostic::error(code, &topology.file, msg)
        .at(addon.pos)
        .field(format!("addons.{}", addon.name))
}

/// The cluster's Kubernetes version as templates see it (`v1.36.2`): the
/// topology's, else the Talos release's default; empty when neither is known
/// (node configs then report why).
pub fn kubernetes_version(topology: &Topology) -> String {
    if let Some(v) = &topology.cluster.kubernetes_version {
        return v.to_string();
    }
    topology
        .cluster
        .talos_version
        .to_string()
        .parse::<talosprov_base::version::TalosVersion>()
        .ok()
        .and_then(|t| talosprov_base::version::default_kubernetes_version(&t).ok())
        .map(|v| format!("v{v}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::inputs::MemoryInputs;
    use talosprov_topology::model::Environment;
    use talosprov_topology::parse;

    const HEAD: &str = "cluster:\n  name: lab\n  talos_version: v1.13.8\n  kubernetes_version: v1.36.2\n  gateway: 10.0.0.1\n\
        proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\n\
        nodes:\n  - {hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}\naddons:\n";

    const DAEMONSET: &str = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: cni}\n\
        spec:\n  template:\n    spec:\n      volumes:\n        - {name: c, hostPath: {path: /etc/cni/net.d/}}\n";

    fn topology(addons: &str) -> Topology {
        let loaded = parse(
            &format!("{HEAD}{addons}"),
            Path::new("lab/cluster.yaml"),
            &Environment::default(),
        );
        talosprov_base::diagnostics::assert_clean(&loaded.diagnostics);
        loaded.topology.expect("topology")
    }

    fn render(t: &Topology, files: MemoryInputs) -> (Vec<RenderedAddon>, Vec<(Code, String)>) {
        let (r, d) = render_manifests(t, &files, "v1.36.2");
        (r, d.into_iter().map(|d| (d.code, d.message)).collect())
    }

    fn identities(r: &RenderedAddon) -> Vec<String> {
        r.objects.iter().map(Object::identity).collect()
    }

    #[test]
    fn globs_expand_in_byte_order_and_templates_see_the_cluster_and_the_addon() {
        let t = topology(
            "  cni:\n    manifests: [\"a/*.yaml\", a/extra.yaml.j2]\n    namespace: net\n    namespace_labels: {team: infra}\n    phase: bootstrap\n",
        );
        let files = MemoryInputs::new()
            .with("lab/a/b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
            .with("lab/a/B.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: upper}\n")
            .with("lab/a/.hidden.yaml", "not: an object\n")
            .with("lab/a/extra.yaml.j2", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: '{{ addon.name }}-{{ cluster_name }}'\n  namespace: other\ndata: {k8s: '{{ kubernetes_version }}', nodes: '{{ nodes | length }}'}\n")
            .with("lab/a/role.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\n");
        let (rendered, problems) = render(&t, files);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            identities(&rendered[0]),
            [
                "Namespace net",
                "ConfigMap net/upper",
                "ConfigMap net/b",
                "ClusterRole.rbac.authorization.k8s.io r",
                "ConfigMap other/cni-lab",
            ]
        );
        let extra = &rendered[0].objects[4].body;
        assert_eq!(extra["data"]["k8s"], "v1.36.2");
        assert_eq!(extra["data"]["nodes"], "1");
        assert_eq!(
            rendered[0].objects[0].body["metadata"]["labels"]["team"],
            "infra"
        );
        let inline = inline_manifests(&t, &rendered);
        assert_eq!(inline.len(), 1);
        assert!(
            inline[0]
                .contents
                .starts_with("apiVersion: v1\nkind: Namespace\n"),
            "{}",
            inline[0].contents
        );
        assert_eq!(inline[0].contents.matches("\n---\n").count(), 4);
    }

    #[test]
    fn every_manifest_problem_is_reported() {
        let t = topology(
            "  a:\n    manifests: [\"none/*.yaml\", missing.yaml, bad.yaml, tpl.yaml.j2]\n",
        );
        let files = MemoryInputs::new()
            .with(
                "lab/bad.yaml",
                "apiVersion: v1\nkind: ConfigMap\n---\n- a list\n",
            )
            .with("lab/tpl.yaml.j2", "{{ undefined_thing }}\n");
        let (rendered, problems) = render(&t, files);
        assert!(rendered.is_empty());
        let codes: Vec<Code> = problems.iter().map(|(c, _)| *c).collect();
        assert_eq!(
            codes,
            [
                Code::InvalidAddonManifest,
                Code::InvalidAddonManifest,
                Code::InvalidAddonManifest,
                Code::InvalidAddonManifest,
                Code::TemplateError,
            ],
            "{problems:#?}"
        );
        assert!(
            problems[0].1.contains("matches no file"),
            "{}",
            problems[0].1
        );
        assert!(
            problems[2].1.contains("no metadata.name"),
            "{}",
            problems[2].1
        );
        assert!(problems[3].1.contains("not a mapping"), "{}", problems[3].1);
    }

    #[test]
    fn manifest_yaml_errors_are_addon_errors_at_their_line() {
        let t = topology("  a:\n    manifests: [bad.yaml, deep.yaml, out.yaml.j2]\n");
        let deep = format!(
            "apiVersion: v1\nkind: List\nitems: {}\n",
            "[".repeat(100_000)
        );
        let files = MemoryInputs::new()
            .with("lab/bad.yaml", "apiVersion: v1\nkind: ConfigMap\ndata: [\n")
            .with("lab/deep.yaml", deep)
            .with("lab/out.yaml.j2", "a: 1\nb: {{ '[' * 100000 }}\n");
        let (rendered, problems) = render_manifests(&t, &files, "v1.36.2");
        assert!(rendered.is_empty());
        let found: Vec<(Code, &str, Option<Pos>)> = problems
            .iter()
            .map(|d| (d.code, d.file.to_str().unwrap_or(""), d.pos))
            .collect();
        assert_eq!(
            found,
            [
                (
                    Code::InvalidAddonManifest,
                    "lab/bad.yaml",
                    Some(Pos::new(4, 1))
                ),
                (
                    Code::InvalidAddonManifest,
                    "lab/deep.yaml",
                    Some(Pos::new(3, 72))
                ),
                (
                    Code::InvalidAddonManifest,
                    "lab/out.yaml.j2",
                    Some(Pos::new(2, 1))
                ),
            ],
            "{problems:#?}"
        );
        assert!(
            problems[1].message.contains("deeper than 64"),
            "{}",
            problems[1].message
        );
        assert!(
            problems[2]
                .message
                .contains("line 2 of the rendered output"),
            "{}",
            problems[2].message
        );
    }

    #[test]
    fn downloaded_and_helm_text_is_bounded_by_its_budget() {
        let t = topology("  a:\n    manifests: [m.yaml]\n");
        let addon = &t.addons["a"];
        let deep = format!(
            "apiVersion: v1\nkind: List\nitems:\n  {}x\n",
            "- ".repeat(100_000)
        );
        let (r, p) = render_text(
            &t,
            addon,
            "https://x/m.yaml",
            &deep,
            talosprov_base::load::Budget::DOWNLOAD,
        );
        assert!(r.is_none());
        assert_eq!(p[0].code, Code::InvalidAddonManifest);
        assert!(
            p[0].message
                .contains("beyond the input bounds: line 4 column"),
            "{}",
            p[0].message
        );
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
        let big = format!("{cm}data:\n  x: \"{}\"\n", "y".repeat(5 * 1024 * 1024));
        let (r, p) = render_text(
            &t,
            addon,
            "helm template a",
            &big,
            talosprov_base::load::Budget::HELM_OUTPUT,
        );
        assert!(p.is_empty() && r.is_some(), "{p:#?}");
        let (_, p) = render_text(
            &t,
            addon,
            "helm template a",
            &big,
            talosprov_base::load::Budget::INPUT,
        );
        assert!(
            p[0].message.contains("over the 4 MiB limit"),
            "{}",
            p[0].message
        );
    }

    #[test]
    fn only_bootstrap_addons_are_inline_and_in_dependency_order() {
        let t = topology(
            "  late:\n    manifests: [l.yaml]\n\
             \x20 second:\n    manifests: [s.yaml]\n    phase: bootstrap\n    depends_on: [first]\n\
             \x20 first:\n    manifests: [f.yaml]\n    phase: bootstrap\n",
        );
        let cm = |n: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}}}\n");
        let files = MemoryInputs::new()
            .with("lab/l.yaml", cm("l"))
            .with("lab/s.yaml", cm("s"))
            .with("lab/f.yaml", cm("f"));
        let (rendered, problems) = render(&t, files);
        assert!(problems.is_empty(), "{problems:?}");
        let names: Vec<String> = inline_manifests(&t, &rendered)
            .into_iter()
            .map(|m| m.name)
            .collect();
        assert_eq!(names, ["first", "second"]);
    }

    #[test]
    fn two_addons_with_one_object_and_a_cni_on_a_cluster_with_one_are_refused() {
        let t = topology(
            "  one:\n    manifests: [cni.yaml]\n    phase: bootstrap\n\
             \x20 two:\n    manifests: [cni.yaml]\n",
        );
        let files = MemoryInputs::new().with("lab/cni.yaml", DAEMONSET);
        let (rendered, problems) = render(&t, files);
        assert!(problems.is_empty(), "{problems:?}");
        assert!(rendered[0].objects[0].carries_cni());
        let flannel = ClusterFacts {
            cni: "flannel".into(),
            kube_proxy_disabled: false,
            kubernetes_version: "1.36.2".into(),
        };
        let found: Vec<(Code, String)> = object_checks(&t, &rendered, Some(&flannel))
            .into_iter()
            .map(|d| (d.code, d.message))
            .collect();
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].0, Code::AddonCniConflict);
        assert!(
            found[0]
                .1
                .contains("DaemonSet.apps default/cni mounts /etc/cni/net.d"),
            "{}",
            found[0].1
        );
        assert_eq!(found[1].0, Code::AddonObjectConflict);
        assert!(
            found[1].1.contains("in add-ons `one` and `two`"),
            "{}",
            found[1].1
        );
        let none = ClusterFacts {
            cni: "none".into(),
            ..flannel
        };
        assert_eq!(
            object_checks(&t, &rendered, Some(&none)).len(),
            1,
            "only the shared object"
        );
    }
}
