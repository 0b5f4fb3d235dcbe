//! `addons:`: each entry's one source, its preset, phase, namespace and
//! labels, and the `depends_on` graph (unknown names, cycles, a bootstrap
//! add-on that waits on a later one). Checks that need the rendered configs
//! or the rendered objects (the cluster's CNI, GPU nodes, two add-ons with
//! the same object) come after rendering, in [`crate::addon`].

use std::collections::BTreeMap;
use std::path::Path;

use indexmap::IndexMap;

use super::check::{Cx, known, resolve};
use super::raw::{Entry, RawAddon, RawHelm, RawTopology, Spanned};
use super::syntax::is_dns_label;
use crate::model::{Addon, AddonSource};
use talosprov_base::diagnostics::{Code, Pos};
use talosprov_base::preset::Preset;
use talosprov_base::preset::spec::Phase;

/// The longest add-on name: Helm's release-name limit (53 characters), since
/// the name is the release's.
pub const MAX_ADDON_NAME: usize = 53;

impl Cx<'_> {
    /// Every add-on of `raw` that validates, by name in file order; every
    /// problem is a diagnostic.
    pub(super) fn addons(&mut self, raw: &RawTopology, base: &Path) -> IndexMap<String, Addon> {
        let Some(entries) = &raw.addons else {
            return IndexMap::new();
        };
        let declared: Vec<&String> = entries.value.iter().map(|e| &e.name.value).collect();
        let mut out = IndexMap::new();
        for entry in &entries.value {
            if let Some(addon) = self.addon(entry, &declared, base) {
                out.insert(addon.name.clone(), addon);
            }
        }
        self.addon_graph(&entries.value, &out);
        out
    }

    fn addon(
        &mut self,
        entry: &Entry<RawAddon>,
        declared: &[&String],
        base: &Path,
    ) -> Option<Addon> {
        let name = &entry.name.value;
        let a = &entry.value;
        let path = format!("addons.{name}");
        let mut ok = true;
        if !is_dns_label(name) || name.len() > MAX_ADDON_NAME {
            let msg = format!(
                "add-on name {name:?} must be a lowercase DNS label of at most {MAX_ADDON_NAME} \
                 characters (it names the Helm release and the inline manifest)"
            );
            self.error(Code::InvalidValue, entry.name.pos, &path, msg);
            ok = false;
        }
        let preset = match &a.preset {
            None => None,
            Some(p) => match Preset::ALL.iter().find(|k| k.name() == p.value) {
                Some(k) => Some(*k),
                None => {
                    let names: Vec<String> =
                        Preset::ALL.iter().map(|k| k.name().to_owned()).collect();
                    let msg = format!(
                        "`{path}.preset` must be one of {}, found {:?}",
                        names.join(", "),
                        p.value
                    );
                    self.error(Code::InvalidValue, p.pos, &format!("{path}.preset"), msg);
                    ok = false;
                    None
                }
            },
        };
        let source = self.addon_source(a, &path, base);
        let phase = match &a.phase {
            None => Some(preset.map_or(Phase::Cluster, Preset::default_phase)),
            Some(p) if p.value == "bootstrap" => Some(Phase::Bootstrap),
            Some(p) if p.value == "cluster" => Some(Phase::Cluster),
            Some(p) => {
                let msg = format!(
                    "`{path}.phase` must be bootstrap or cluster, found {:?}",
                    p.value
                );
                self.error(Code::InvalidValue, p.pos, &format!("{path}.phase"), msg);
                None
            }
        };
        let namespace = self.addon_namespace(a, preset, &path);
        let namespace_labels = self.namespace_labels(a, preset, &path);
        let mut depends_on = Vec::new();
        for d in a.depends_on.iter().flat_map(|d| &d.value) {
            if declared.contains(&&d.value) {
                depends_on.push(d.value.clone());
            } else {
                let msg = format!(
                    "`{path}.depends_on` names {:?}, which is not declared under `addons`{}",
                    d.value,
                    known(declared.iter().copied().filter(|n| *n != name))
                );
                self.error(
                    Code::UnknownAddon,
                    d.pos,
                    &format!("{path}.depends_on"),
                    msg,
                );
                ok = false;
            }
        }
        Some(Addon {
            name: name.clone(),
            pos: entry.name.pos,
            preset,
            source: source?,
            namespace: namespace?,
            namespace_labels: namespace_labels?,
            phase: phase?,
            depends_on,
        })
        .filter(|_| ok)
    }

    /// The one source among `helm`, `manifests` and `url`.
    fn addon_source(&mut self, a: &RawAddon, path: &str, base: &Path) -> Option<AddonSource> {
        let given: Vec<(&str, Pos)> = [
            a.helm.as_ref().map(|h| ("helm", h.pos)),
            a.manifests.as_ref().map(|m| ("manifests", m.pos)),
            a.url.as_ref().map(|u| ("url", u.pos)),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let (Some(sha), None) = (&a.sha256, &a.url) {
            let msg =
                format!("`{path}.sha256` is the digest of a `url` download, and there is no `url`");
            self.error(
                Code::ConflictingFields,
                sha.pos,
                &format!("{path}.sha256"),
                msg,
            );
        }
        match given.as_slice() {
            [] => {
                let msg = format!("add-on `{path}` needs one source: `helm`, `manifests` or `url`");
                self.error(Code::AddonSource, a.pos, path, msg);
                None
            }
            [_] => {
                if let Some(h) = &a.helm {
                    self.helm(&h.value, h.pos, path, base)
                } else if let Some(m) = &a.manifests {
                    self.manifests(m, path, base)
                } else {
                    self.download(a, path)
                }
            }
            [(first, _), rest @ ..] => {
                for (other, pos) in rest {
                    let msg = format!(
                        "add-on `{path}` has both `{first}` and `{other}`: give exactly one source"
                    );
                    self.error(Code::AddonSource, *pos, &format!("{path}.{other}"), msg);
                }
                None
            }
        }
    }

    fn helm(&mut self, h: &RawHelm, pos: Pos, path: &str, base: &Path) -> Option<AddonSource> {
        let field = format!("{path}.helm");
        let repo = match &h.repo {
            None => {
                self.missing(
                    Some(pos),
                    None,
                    &format!("{field}.repo"),
                    " (an https:// chart repository or an oci:// reference)",
                );
                None
            }
            Some(r) if r.value.starts_with("oci://") => {
                let rest = &r.value["oci://".len()..];
                if rest.is_empty() || rest.contains(char::is_whitespace) || rest.starts_with('/') {
                    let msg = format!(
                        "`{field}.repo` must be oci://<registry>/<path>, found {:?}",
                        r.value
                    );
                    self.error(Code::InvalidUrl, r.pos, &format!("{field}.repo"), msg);
                    None
                } else {
                    Some(r.value.trim_end_matches('/').to_owned())
                }
            }
            Some(r) => self.url(r, &format!("{field}.repo"), false),
        };
        let oci = h
            .repo
            .as_ref()
            .is_some_and(|r| r.value.starts_with("oci://"));
        let chart = match &h.chart {
            Some(c) if !c.value.is_empty() && !c.value.contains(['/', ' ']) => {
                Some(c.value.clone())
            }
            Some(c) => {
                let msg = format!(
                    "`{field}.chart` must be a chart name such as cilium, found {:?}",
                    c.value
                );
                self.error(Code::InvalidValue, c.pos, &format!("{field}.chart"), msg);
                None
            }
            None if oci => Some(String::new()),
            None => {
                self.missing(
                    Some(pos),
                    None,
                    &format!("{field}.chart"),
                    " (the chart's name in the repository)",
                );
                None
            }
        };
        let version = match &h.version {
            None => {
                self.missing(
                    Some(pos),
                    None,
                    &format!("{field}.version"),
                    ": charts are always pinned to one version",
                );
                None
            }
            Some(v) if is_exact_chart_version(&v.value) => Some(v.value.clone()),
            Some(v) => {
                let msg = format!(
                    "`{field}.version` must be one exact chart version such as 1.19.6, found {:?} \
                     (ranges are not pinned)",
                    v.value
                );
                self.error(Code::InvalidValue, v.pos, &format!("{field}.version"), msg);
                None
            }
        };
        let values = h.values.as_ref().map_or_else(
            || serde_json::Value::Object(serde_json::Map::new()),
            |v| v.value.clone(),
        );
        let values_files = h
            .values_files
            .iter()
            .flat_map(|f| &f.value)
            .map(|f| resolve(base, &f.value))
            .collect();
        Some(AddonSource::Helm {
            repo: repo?,
            chart: chart?,
            version: version?,
            values,
            values_files,
        })
    }

    fn manifests(
        &mut self,
        m: &Spanned<Vec<Spanned<String>>>,
        path: &str,
        base: &Path,
    ) -> Option<AddonSource> {
        let field = format!("{path}.manifests");
        if m.value.is_empty() {
            let msg = format!("`{field}` is empty: list at least one file or glob");
            self.error(Code::AddonSource, m.pos, &field, msg);
            return None;
        }
        let mut out = Vec::with_capacity(m.value.len());
        let mut ok = true;
        for f in &m.value {
            let dir_glob = Path::new(&f.value)
                .parent()
                .is_some_and(|p| p.to_string_lossy().contains(['*', '?', '[']));
            if f.value.trim().is_empty() || dir_glob {
                let msg = format!(
                    "`{field}` entry {:?} must be a file, or a glob whose wildcards are in the file \
                     name only (addons/cni/*.yaml)",
                    f.value
                );
                self.error(Code::InvalidValue, f.pos, &field, msg);
                ok = false;
            } else {
                out.push(resolve(base, &f.value));
            }
        }
        ok.then_some(AddonSource::Manifests(out))
    }

    fn download(&mut self, a: &RawAddon, path: &str) -> Option<AddonSource> {
        let u = a.url.as_ref()?;
        let url = self.url(u, &format!("{path}.url"), false);
        let sha256 = match &a.sha256 {
            None => {
                let msg = format!(
                    "add-on `{path}` downloads {:?} without `sha256`: give the file's SHA-256 so \
                     that a changed download is refused",
                    u.value
                );
                self.error(Code::AddonChecksum, u.pos, &format!("{path}.sha256"), msg);
                None
            }
            Some(s) if s.value.len() == 64 && s.value.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Some(s.value.to_ascii_lowercase())
            }
            Some(s) => {
                let msg = format!("`{path}.sha256` must be 64 hex digits, found {:?}", s.value);
                self.error(Code::AddonChecksum, s.pos, &format!("{path}.sha256"), msg);
                None
            }
        };
        Some(AddonSource::Url {
            url: url?,
            sha256: sha256?,
        })
    }

    fn addon_namespace(
        &mut self,
        a: &RawAddon,
        preset: Option<Preset>,
        path: &str,
    ) -> Option<String> {
        match &a.namespace {
            None => Some(
                preset
                    .map_or("default", Preset::default_namespace)
                    .to_owned(),
            ),
            Some(n) if is_dns_label(&n.value) => Some(n.value.clone()),
            Some(n) => {
                let msg = format!(
                    "`{path}.namespace` must be a Kubernetes namespace name (a lowercase DNS label), found {:?}",
                    n.value
                );
                self.error(Code::InvalidValue, n.pos, &format!("{path}.namespace"), msg);
                None
            }
        }
    }

    fn namespace_labels(
        &mut self,
        a: &RawAddon,
        preset: Option<Preset>,
        path: &str,
    ) -> Option<BTreeMap<String, String>> {
        let mut labels = BTreeMap::new();
        for (k, v) in preset.map(Preset::namespace_labels).unwrap_or_default() {
            labels.insert((*k).to_owned(), (*v).to_owned());
        }
        let mut ok = true;
        for (k, v) in a.namespace_labels.iter().flat_map(|l| &l.value) {
            let field = format!("{path}.namespace_labels.{}", k.value);
            if !is_label_key(&k.value) {
                let msg = format!(
                    "label key {:?} is not a Kubernetes label key ([prefix/]name)",
                    k.value
                );
                self.error(Code::InvalidValue, k.pos, &field, msg);
                ok = false;
            } else if !is_label_value(&v.value) {
                let msg = format!(
                    "label value {:?} is not a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.')",
                    v.value
                );
                self.error(Code::InvalidValue, v.pos, &field, msg);
                ok = false;
            } else {
                labels.insert(k.value.clone(), v.value.clone());
            }
        }
        ok.then_some(labels)
    }

    /// Cycles in `depends_on`, and bootstrap add-ons that depend on a
    /// cluster-phase one (Talos applies inline manifests at bootstrap, before
    /// anything talosprov applies later).
    fn addon_graph(&mut self, entries: &[Entry<RawAddon>], addons: &IndexMap<String, Addon>) {
        let pos_of = |name: &str| {
            entries
                .iter()
                .find(|e| e.name.value == name)
                .map_or(Pos::default(), |e| {
                    e.value.depends_on.as_ref().map_or(e.name.pos, |d| d.pos)
                })
        };
        for cycle in cycles(addons) {
            let first = &cycle[0];
            let msg = format!(
                "add-ons depend on each other in a cycle: {} -> {first}",
                cycle.join(" -> ")
            );
            self.error(
                Code::AddonCycle,
                pos_of(first),
                &format!("addons.{first}.depends_on"),
                msg,
            );
        }
        for a in addons.values().filter(|a| a.phase == Phase::Bootstrap) {
            for d in &a.depends_on {
                if addons.get(d).is_some_and(|d| d.phase == Phase::Cluster) {
                    let msg = format!(
                        "bootstrap add-on `{}` depends on `{d}`, which is installed later \
                         (phase: cluster): make `{d}` a bootstrap add-on too, or drop the dependency",
                        a.name
                    );
                    self.error(
                        Code::ConflictingFields,
                        pos_of(&a.name),
                        &format!("addons.{}.depends_on", a.name),
                        msg,
                    );
                }
            }
        }
    }
}

/// Each cycle of the `depends_on` graph once, as the names along it starting
/// from the one declared first (Tarjan's strongly connected components; a
/// component of one name is a cycle only when it names itself).
pub fn cycles(addons: &IndexMap<String, Addon>) -> Vec<Vec<String>> {
    let names: Vec<&String> = addons.keys().collect();
    let edges: Vec<Vec<usize>> = addons
        .values()
        .map(|a| {
            a.depends_on
                .iter()
                .filter_map(|d| addons.get_index_of(d))
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for component in strongly_connected(&edges) {
        let looped = component.len() > 1 || edges[component[0]].contains(&component[0]);
        if looped {
            out.push(
                walk(&component, &edges)
                    .into_iter()
                    .map(|i| names[i].clone())
                    .collect(),
            );
        }
    }
    out.sort();
    out
}

/// The shortest cycle through the component's first-declared member, found
/// breadth-first inside the component: the members along it, in edge order.
fn walk(component: &[usize], edges: &[Vec<usize>]) -> Vec<usize> {
    let mut member = vec![false; edges.len()];
    for &i in component {
        member[i] = true;
    }
    let start = *component.iter().min().unwrap_or(&0);
    let mut parent: Vec<Option<usize>> = vec![None; edges.len()];
    let mut queue = std::collections::VecDeque::from([start]);
    member[start] = false;
    while let Some(v) = queue.pop_front() {
        if edges[v].contains(&start) {
            let mut path = vec![v];
            let mut at = v;
            while let Some(p) = parent[at] {
                path.push(p);
                at = p;
            }
            path.reverse();
            return path;
        }
        for &w in &edges[v] {
            if member[w] {
                member[w] = false;
                parent[w] = Some(v);
                queue.push_back(w);
            }
        }
    }
    vec![start]
}

/// Tarjan's algorithm, iterative so that a long chain cannot overflow the
/// stack: each strongly connected component, its members sorted.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some((v, i)) = work.pop() {
            if i == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = edges[v].get(i) {
                work.push((v, i + 1));
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort_unstable();
                out.push(component);
            }
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
        }
    }
    out
}

/// Whether `v` is one exact chart version (SemVer, with an optional `v`):
/// no range, no wildcard.
fn is_exact_chart_version(v: &str) -> bool {
    let core = v.strip_prefix('v').unwrap_or(v);
    let core = core.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+'))
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a
/// name of at most 63 alphanumerics, `-`, `_` and `.`, starting and ending
/// alphanumeric.
fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty() && p.len() <= 253 && p.split('.').all(super::syntax::is_dns_label)
    });
    prefix_ok && !name.is_empty() && is_label_value(name)
}

/// A Kubernetes label value: empty, or at most 63 alphanumerics, `-`, `_`
/// and `.`, starting and ending alphanumeric.
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> IndexMap<String, Addon> {
        edges
            .iter()
            .map(|(n, deps)| {
                let a = Addon {
                    name: (*n).to_owned(),
                    pos: Pos::default(),
                    preset: None,
                    source: AddonSource::Manifests(Vec::new()),
                    namespace: "default".into(),
                    namespace_labels: BTreeMap::new(),
                    phase: Phase::Cluster,
                    depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
                };
                ((*n).to_owned(), a)
            })
            .collect()
    }

    #[test]
    fn each_cycle_is_found_once_from_its_first_declared_member() {
        let g = graph(&[
            ("a", &["b"]),
            ("b", &["c"]),
            ("c", &["a"]),
            ("d", &["d"]),
            ("e", &["a"]),
            ("f", &[]),
        ]);
        assert_eq!(cycles(&g), [vec!["a", "b", "c"], vec!["d"]]);
        assert!(cycles(&graph(&[("a", &["b"]), ("b", &[]), ("c", &["a", "b"])])).is_empty());
    }

    #[test]
    fn a_long_chain_is_walked_without_recursion() {
        let names: Vec<String> = (0..20_000).map(|i| format!("a{i}")).collect();
        let mut g = IndexMap::new();
        for (i, n) in names.iter().enumerate() {
            let deps: Vec<&str> = names.get(i + 1).map(String::as_str).into_iter().collect();
            g.extend(graph(&[(n.as_str(), &deps)]));
        }
        assert!(cycles(&g).is_empty());
        g.get_mut(&names[19_999]).expect("last").depends_on = vec!["a0".into()];
        assert_eq!(cycles(&g)[0].len(), 20_000);
    }

    #[test]
    fn chart_versions_are_exact() {
        for ok in ["1.19.6", "v26.3.3", "1.0.0-rc.1", "2.1.0+build.5"] {
            assert!(is_exact_chart_version(ok), "{ok}");
        }
        for bad in [
            "1.19", "^1.19.6", "~1.2.3", "1.x.0", "*", ">=1.0.0", "latest", "",
        ] {
            assert!(!is_exact_chart_version(bad), "{bad}");
        }
    }

    #[test]
    fn label_keys_and_values_follow_kubernetes() {
        assert!(is_label_key("pod-security.kubernetes.io/enforce"));
        assert!(is_label_key("team"));
        assert!(!is_label_key("/x"));
        assert!(!is_label_key("Bad_Prefix/x"));
        assert!(is_label_value("privileged") && is_label_value(""));
        assert!(!is_label_value("-x") && !is_label_value(&"a".repeat(64)));
    }
}
