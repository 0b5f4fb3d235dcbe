//! The patch files a topology's nodes use, each read and compiled once however many nodes
//! share it (a file in `common/` used by 1000 nodes is read once). Files are listed and read
//! through the caller's [`Inputs`] ([`PatchSet::load`]); [`PatchSet::build`] takes the reads
//! as a function.

use foldhash::{HashMap, HashMapExt as _, HashSet};
use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};

use super::discover::{self, PatchFile, PatchKind, PatchTree};
use super::document::{DocumentId, MachineConfig, parse_documents};
use super::load::{LoadError, Patch, PatchBody, load_documents, load_patch_parsed};
use super::locate::{self, locate_field};
use super::merge::StrategicStep;
use super::render::{Prepared, RenderError, Renderer, Reuse, TemplateVars, rendered_documents};
use rayon::prelude::*;
use talosprov_base::budgets::{COMMAND_ENV, NODE_ENV, PatchBudgets, human};
use talosprov_base::diagnostics;
use talosprov_base::diagnostics::{Code, Diagnostic, Pos};
use talosprov_base::inputs::Inputs;
use talosprov_topology::model::Topology;

/// Every patch file of a topology, read once, templates compiled once.
pub struct PatchSet {
    /// Each node's patch files in merge order, by hostname, in node order.
    nodes: Vec<(String, Vec<PatchFile>)>,
    /// Files in the tree that are not patches.
    ignored: Vec<PathBuf>,
    /// Warnings about the tree (empty files, stray folders).
    warnings: Vec<Diagnostic>,
    /// Problems with single files (unreadable, template syntax, invalid literal YAML).
    errors: Vec<Diagnostic>,
    /// Files with an error in `errors`: nodes that use them cannot be rendered.
    broken: HashSet<PathBuf>,
    /// The source text of every readable file, for locating fields.
    texts: HashMap<PathBuf, String>,
    /// Compiled templates.
    renderer: Renderer,
    /// Literal files, loaded as patches once.
    literal: HashMap<PathBuf, Patch>,
    /// The budget error of the nodes the set was built for, when over a budget.
    over: Option<Diagnostic>,
}

impl std::fmt::Debug for PatchSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchSet")
            .field("nodes", &self.nodes.len())
            .field("files", &self.texts.len())
            .field("errors", &self.errors.len())
            .finish_non_exhaustive()
    }
}

impl PatchSet {
    /// List the topology's patch tree through `inputs` and read every file its nodes use.
    ///
    /// # Errors
    /// A `P003 unreadable-patch-tree` diagnostic when a folder of the tree cannot be listed.
    /// Problems with single files are kept in [`PatchSet::errors`] so that they are reported
    /// together with every other problem.
    pub fn load(
        topology: &Topology,
        inputs: &(impl Inputs + Sync + ?Sized),
    ) -> Result<PatchSet, Vec<Diagnostic>> {
        let mut trees = Vec::new();
        for root in &topology.patches_dirs {
            let tree = discover::list_tree(root, inputs).map_err(|e| {
                let msg = format!("cannot read the patch tree {}: {e}", root.display());
                vec![Diagnostic::error(Code::UnreadablePatchTree, root, msg).field("patches_dir")]
            })?;
            trees.push(tree);
        }
        Ok(PatchSet::build(topology, &trees, |p| {
            inputs.read(p).map_err(io::Error::other)
        }))
    }

    /// Build the set from the listed trees (one per `patches_dir` folder, in
    /// order), reading each file the nodes use once through `read`. Files are
    /// read, and literal ones parsed, on every core; templates are compiled
    /// and problems reported in the order the nodes use the files.
    pub fn build(
        topology: &Topology,
        trees: &[PatchTree],
        read: impl Fn(&Path) -> io::Result<String> + Sync,
    ) -> PatchSet {
        let nodes: Vec<(String, Vec<PatchFile>)> = topology
            .nodes
            .iter()
            .map(|n| {
                let pool = n.pool.as_ref().map(|m| m.pool.as_str());
                let files = discover::patches_across(trees, &n.hostname, n.role, pool);
                (n.hostname.clone(), files)
            })
            .collect();
        let pools: Vec<&str> = topology.pools.iter().map(|p| p.name.as_str()).collect();
        let mut warnings: Vec<Diagnostic> = trees
            .iter()
            .flat_map(|t| t.check(topology.nodes.iter().map(|n| n.hostname.as_str()), &pools))
            .collect();
        diagnostics::sort(&mut warnings);
        let mut set = PatchSet {
            nodes: Vec::new(),
            ignored: trees.iter().flat_map(PatchTree::ignored).collect(),
            warnings,
            errors: Vec::new(),
            broken: Default::default(),
            texts: HashMap::new(),
            renderer: Renderer::new(),
            literal: HashMap::new(),
            over: None,
        };
        let mut blank: HashSet<PathBuf> = HashSet::default();
        // How many nodes use each file: a template one node uses is not kept
        // compiled ([`Reuse::Once`]).
        let mut uses: HashMap<&Path, usize> = HashMap::new();
        // Over a byte budget, nothing is read: `over_budget` reports it.
        set.over = over_budget(topology, &nodes, 0);
        let over = set.over.is_some();
        let unique: Vec<&PatchFile> = nodes
            .iter()
            .filter(|_| !over)
            .flat_map(|(_, files)| files)
            .filter(|f| {
                let n = uses.entry(f.path.as_path()).or_insert(0);
                *n += 1;
                *n == 1
            })
            .collect();
        let reuse = |file: &PatchFile| {
            if uses.get(file.path.as_path()).copied().unwrap_or(0) > 1 {
                Reuse::Shared
            } else {
                Reuse::Once
            }
        };
        let renderer = &set.renderer;
        let read_all: Vec<io::Result<Option<ReadFile>>> = unique
            .par_iter()
            .map(|file| {
                let text = read(&file.path)?;
                if only_comments(&text) {
                    return Ok(None);
                }
                let parsed = (file.kind == PatchKind::Literal).then(|| {
                    // One YAML parse serves the renderer and the patch.
                    let docs = parse_documents(&text);
                    Parsed {
                        patch: load_patch_parsed(file.path.display().to_string(), &text, &docs),
                        documents: rendered_documents(&file.path, file.kind, docs),
                    }
                });
                // Templates are translated, and those one node uses
                // compiled for their syntax, here on every core.
                let prepared = renderer.prepare(&file.path, file.kind, &text, reuse(file));
                Ok(Some(ReadFile {
                    text,
                    parsed,
                    prepared,
                }))
            })
            .collect();
        for (file, result) in unique.into_iter().zip(read_all) {
            match result {
                Ok(None) => {
                    let msg = format!(
                        "patch file {} holds only comments and is skipped",
                        file.path.display()
                    );
                    set.warnings
                        .push(Diagnostic::warning(Code::EmptyPatch, &file.path, msg));
                    blank.insert(file.path.clone());
                }
                Ok(Some(read)) => set.add(file, read),
                Err(e) => {
                    let msg = format!("cannot read the patch file {}: {e}", file.path.display());
                    set.fail(Diagnostic::error(Code::UnreadablePatch, &file.path, msg));
                }
            }
        }
        diagnostics::sort(&mut set.errors);
        diagnostics::sort(&mut set.warnings);
        set.nodes = nodes
            .into_iter()
            .map(|(host, files)| {
                let kept = files
                    .into_iter()
                    .filter(|f| !blank.contains(&f.path))
                    .collect();
                (host, kept)
            })
            .collect();
        set
    }

    /// The first node over its patch byte budget, or the command over its own, as one
    /// located error (`T043`), counting `manifests` bytes of bootstrap add-ons on each
    /// control plane; `None` within the budgets ([`crate::budgets`]). A set built over
    /// its budget (its files then left unread) keeps saying so, whichever nodes are asked
    /// about afterwards (`render NODE` builds for one node of a larger topology).
    pub fn over_budget(&self, topology: &Topology, manifests: u64) -> Option<Diagnostic> {
        self.over
            .clone()
            .or_else(|| over_budget(topology, &self.nodes, manifests))
    }

    fn fail(&mut self, d: Diagnostic) {
        self.broken.insert(d.file.clone());
        self.errors.push(d);
    }

    fn add(&mut self, file: &PatchFile, read: ReadFile) {
        let ReadFile {
            text,
            parsed,
            prepared,
        } = read;
        let (documents, patch) = match parsed {
            Some(p) => (Some(p.documents), Some(p.patch)),
            None => (None, None),
        };
        let added = prepared.and_then(|prepared| {
            self.renderer
                .add_prepared(&file.path, file.kind, text.clone(), prepared, documents)
        });
        if let Err(e) = added {
            self.fail(render_diagnostic(&e, None));
        } else if let Some(patch) = patch {
            match patch {
                Ok(patch) => {
                    self.literal.insert(file.path.clone(), patch);
                }
                Err(e) => {
                    let d = match self.renderer.render_documents(&file.path, &empty_vars()) {
                        Err(render) => render_diagnostic(&render, None),
                        Ok(_) => load_diagnostic(&file.path, &e, &text),
                    };
                    self.fail(d);
                }
            }
        }
        self.texts.insert(file.path.clone(), text);
    }

    /// Each node's patch files in merge order, by hostname, in node order.
    pub fn node_patches(&self) -> &[(String, Vec<PatchFile>)] {
        &self.nodes
    }

    /// One node's patch files in merge order (empty for an unknown hostname).
    pub fn for_node(&self, hostname: &str) -> &[PatchFile] {
        self.nodes
            .iter()
            .find(|(h, _)| h == hostname)
            .map_or(&[][..], |(_, files)| files.as_slice())
    }

    /// Hex SHA-256 of every patch file read, by path: the inputs a saved plan
    /// records, so that apply can tell which file changed since.
    pub fn file_digests(&self) -> std::collections::BTreeMap<PathBuf, String> {
        use sha2::Digest as _;
        self.texts
            .iter()
            .map(|(path, text)| (path.clone(), hex::encode(sha2::Sha256::digest(text))))
            .collect()
    }

    /// Files in the tree that are not patches, in path order.
    pub fn ignored(&self) -> &[PathBuf] {
        &self.ignored
    }

    /// Warnings about the tree: empty patch files, stray folders.
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Problems with single files, found once for every node that uses them: unreadable
    /// files, template syntax errors, literal files that are not valid patches.
    pub fn errors(&self) -> &[Diagnostic] {
        &self.errors
    }

    /// Whether the file has one of the [`PatchSet::errors`].
    pub fn is_broken(&self, file: &Path) -> bool {
        self.broken.contains(file)
    }

    /// The patch a file gives for one node: rendered with `vars` when it is a template.
    ///
    /// # Errors
    /// A `P006 template-error` (with the template's line) or `P007 invalid-patch` diagnostic
    /// naming the file and the node.
    pub fn patch(&self, file: &Path, vars: &TemplateVars) -> Result<Cow<'_, Patch>, Diagnostic> {
        if let Some(p) = self.literal.get(file) {
            return Ok(Cow::Borrowed(p));
        }
        let docs = self
            .renderer
            .render_documents(file, vars)
            .map_err(|e| render_diagnostic(&e, Some(&vars.hostname)))?;
        let source = file.display().to_string();
        load_documents(source, docs).map(Cow::Owned).map_err(|e| {
            let text = self.texts.get(file).map_or("", String::as_str);
            load_diagnostic(file, &e, text).on_node(Some(&vars.hostname))
        })
    }

    /// The line of `patch`'s file that wrote `path` (list indices as in the final config) of
    /// the document `doc` of the final config `config`: the path is translated to the patch's
    /// own list items, then found in block or flow style, or, for a JSON patch, by its JSON
    /// pointer. `None` when the file does not spell it out.
    pub fn locate_value(
        &self,
        patch: &Patch,
        doc: &DocumentId,
        config: &MachineConfig,
        path: &str,
    ) -> Option<Pos> {
        let text = self.texts.get(Path::new(&patch.source))?;
        match &patch.body {
            PatchBody::Json6902(_) => locate::locate_pointer(text, path),
            PatchBody::Strategic(steps) => {
                let written = steps.iter().find_map(|s| match s {
                    StrategicStep::Merge { id, document } if id == doc => Some(document),
                    StrategicStep::Delete(_) | StrategicStep::Merge { .. } => None,
                });
                let translated = match (written, config.position(doc)) {
                    (Some(w), Some(i)) => locate::patch_path(&config.documents[i], w, path),
                    _ => path.to_string(),
                };
                let (offset, section) = document_section(text, doc);
                locate::locate_path(section, &translated)
                    .or_else(|| {
                        if translated.is_empty() {
                            Some(Pos::new(1, 1))
                        } else {
                            None
                        }
                    })
                    .map(|p| Pos::new(p.line + offset, p.column))
            }
        }
    }

    /// The line where a field (a dotted path such as `machine.network.hostname`, list indices
    /// allowed) is written in a patch file, found from the file's indentation; `None` when the
    /// file is not known or does not spell the field out in block style.
    pub fn locate(&self, file: &Path, field: &str) -> Option<Pos> {
        locate_field(self.texts.get(file)?, field)
    }
}

/// Whether a patch file holds nothing but blank lines, YAML comments and
/// document markers: it patches nothing, like an empty file.
/// The patch bytes each node merges (the listed sizes of its files, and `manifests`, the
/// bootstrap add-ons, on a control plane) checked against [`PatchBudgets`], before anything
/// is read: the first node
/// over its budget, or the command over its own, as one located error.
fn over_budget(
    topology: &Topology,
    nodes: &[(String, Vec<PatchFile>)],
    manifests: u64,
) -> Option<Diagnostic> {
    let budgets = PatchBudgets::current();
    let mut total = 0u64;
    for (node, (_, files)) in topology.nodes.iter().zip(nodes) {
        let mut bytes: u64 = files.iter().map(|f| f.len).sum();
        if node.role == talosprov_base::role::Role::Controlplane {
            bytes += manifests;
        }
        if bytes > budgets.per_node {
            let largest = files.iter().min_by_key(|f| std::cmp::Reverse(f.len));
            let msg = format!(
                "node {} merges {} of patches ({} files{}), over the budget of {} per node{}; \
                 split the settings, or raise the budget with {NODE_ENV}",
                node.hostname,
                human(bytes),
                files.len(),
                if node.role == talosprov_base::role::Role::Controlplane && manifests > 0 {
                    format!(" and {} of bootstrap add-on manifests", human(manifests))
                } else {
                    String::new()
                },
                human(budgets.per_node),
                largest.map_or(String::new(), |f| format!(
                    "; the largest is {} ({})",
                    f.path.display(),
                    human(f.len)
                )),
            );
            let at = largest.map_or(&topology.patches_dir, |f| &f.path);
            return Some(
                Diagnostic::error(Code::InputLimit, at, msg)
                    .at(talosprov_base::diagnostics::Pos::new(1, 1))
                    .on_node(Some(&node.hostname)),
            );
        }
        total += bytes;
    }
    (total > budgets.per_command).then(|| {
        let msg = format!(
            "the nodes merge {} of patches in all (each node counts every file of common/, of \
             its role's folder, of its pool's folder and of its own folder), over the budget of {} per command: move \
             settings shared by many nodes into fewer, smaller files, or raise the budget with \
             {COMMAND_ENV}",
            human(total),
            human(budgets.per_command)
        );
        Diagnostic::error(Code::InputLimit, &topology.patches_dir, msg).field("patches_dir")
    })
}

fn only_comments(text: &str) -> bool {
    text.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
    })
}

/// A patch file read on a worker thread: its text, and for a literal file
/// what parsing it gave (`None` for a template, compiled afterwards).
struct ReadFile {
    text: String,
    parsed: Option<Parsed>,
    /// The template translated and checked ([`Renderer::prepare`]).
    prepared: Result<Prepared, RenderError>,
}

/// A literal patch file read on a worker thread: its documents, as the
/// renderer keeps them, and its patch.
struct Parsed {
    documents: Result<Vec<serde_yaml_ng::Value>, RenderError>,
    patch: Result<Patch, LoadError>,
}

/// The part of a patch file that holds one document, and the number of lines before it:
/// documents are split at `---` lines; a typed document is the one whose top-level `kind:` (and
/// `name:`) lines name it, the v1alpha1 document the first without `kind:`. The whole text
/// when none is found.
fn document_section<'t>(text: &'t str, doc: &DocumentId) -> (u32, &'t str) {
    let mut sections = Vec::new();
    let (mut start, mut first_line, mut line) = (0usize, 0u32, 0u32);
    for (offset, l) in text.split_inclusive('\n').scan(0usize, |at, l| {
        let here = *at;
        *at += l.len();
        Some((here, l))
    }) {
        if l.starts_with("---") {
            sections.push((first_line, &text[start..offset]));
            start = offset + l.len();
            first_line = line + 1;
        }
        line += 1;
    }
    sections.push((first_line, &text[start..]));
    let top = |section: &str, key: &str| {
        section.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.strip_prefix(':'))
                .map(|v| v.trim().trim_matches(['"', '\'']).to_string())
        })
    };
    let found = sections.iter().find(|(_, section)| {
        let kind = top(section, "kind");
        if doc.is_v1alpha1() {
            kind.is_none()
                && section.lines().any(|l| {
                    let l = l.trim();
                    !l.is_empty() && !l.starts_with('#')
                })
        } else {
            kind.as_deref() == Some(doc.kind.as_str())
                && doc
                    .name
                    .as_ref()
                    .is_none_or(|n| top(section, "name").as_ref() == Some(n))
        }
    });
    match found {
        Some((offset, section)) => (*offset, section),
        None => (0, text),
    }
}

/// Variables for reading a literal file's documents (they are not rendered).
fn empty_vars() -> TemplateVars {
    TemplateVars {
        hostname: String::new(),
        node_ip: String::new(),
        role: String::new(),
        vip: None,
        gateway: String::new(),
        nameservers: Vec::new(),
        prefix_length: 0,
        cluster_name: String::new(),
        talos_version: String::new(),
        kubernetes_version: String::new(),
        node: serde_json::Value::Null,
        pool: None,
        index: None,
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The diagnostic for a template or YAML error of a rendered file: `P006`
/// (template) or `P007` (YAML), on `hostname` when given.
pub fn render_diagnostic(e: &RenderError, hostname: Option<&str>) -> Diagnostic {
    let d = match e {
        RenderError::Template {
            file,
            line,
            column,
            message,
        } => Diagnostic::error(
            Code::TemplateError,
            file,
            format!("template error: {message}"),
        )
        .at(Pos::new(to_u32(*line), to_u32(column.unwrap_or(1)))),
        RenderError::Yaml {
            file,
            line,
            column,
            rendered,
            origin,
            message,
        } => {
            let place = if *rendered {
                format!("line {line} of the rendered patch")
            } else {
                format!("line {line}")
            };
            let d = Diagnostic::error(
                Code::InvalidPatch,
                file,
                format!("invalid YAML at {place}: {message}"),
            );
            if *rendered {
                // The line is the rendered output's; in the template, the line that wrote
                // it when its text tells, else the whole file.
                d.at(Pos::new(to_u32(origin.unwrap_or(1)), 1))
            } else {
                d.at(Pos::new(to_u32(*line), to_u32(column.unwrap_or(1))))
            }
        }
        RenderError::NotLoaded { file } => {
            Diagnostic::error(Code::UnreadablePatch, file, e.to_string())
        }
    };
    d.on_node(hostname)
}

/// A patch that reads as YAML but is neither a config patch nor a JSON patch.
fn load_diagnostic(file: &Path, e: &LoadError, text: &str) -> Diagnostic {
    let mut message = format!("not a machine config patch: {e}");
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !message.contains(&c_text) {
            message.push_str(&format!(": {c_text}"));
        }
        cause = c.source();
    }
    let d = Diagnostic::error(Code::InvalidPatch, file, message);
    // Line 1 when the problem is not one place of the file (a document that is not a mapping).
    let whole = Pos::new(1, 1);
    match e {
        LoadError::UnknownField { field } => {
            let pos = locate_field(text, field).unwrap_or(whole);
            d.at(pos).field(field.clone())
        }
        LoadError::Json(located) => d.at(located.pos),
        LoadError::Document(super::document::DocumentError::Yaml {
            line: Some(line),
            column,
            ..
        }) => d.at(Pos::new(to_u32(*line), to_u32(column.unwrap_or(1)))),
        LoadError::Document(_) | LoadError::Delete(_) | LoadError::YamlOps(_) => d.at(whole),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET: &str = "\
machine:
  kubelet:
    extraArgs:
      a: b
  network:
    hostname: x
    interfaces:
      - interface: eth0
        dhcp: true
      - deviceSelector:
          physical: true
        vip:
          ip: 10.0.0.2
cluster:
  network:
    cni:
      name: none
";

    #[test]
    fn locate_finds_nested_keys_below_their_parents() {
        assert_eq!(
            locate_field(NET, "machine.network.hostname"),
            Some(Pos::new(6, 5))
        );
        assert_eq!(
            locate_field(NET, "cluster.network.cni.name"),
            Some(Pos::new(17, 7))
        );
        assert_eq!(locate_field(NET, "cluster.network"), Some(Pos::new(15, 3)));
    }

    #[test]
    fn locate_counts_list_items() {
        assert_eq!(
            locate_field(NET, "machine.network.interfaces[1].vip.ip"),
            Some(Pos::new(13, 11))
        );
        assert_eq!(
            locate_field(NET, "machine.network.interfaces[0].dhcp"),
            Some(Pos::new(9, 9))
        );
    }

    #[test]
    fn locate_gives_none_for_a_field_the_file_does_not_write() {
        assert_eq!(locate_field(NET, "machine.install.disk"), None);
        assert_eq!(locate_field(NET, "cluster.proxy"), None);
    }
}

#[cfg(test)]
mod build_tests {
    use super::*;
    use talosprov_base::inputs::Listed;
    use talosprov_topology::model::Environment;

    fn topology(nodes: usize) -> Topology {
        let mut text = String::from(
            "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n\
             proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\nnodes:\n",
        );
        for i in 0..nodes {
            text.push_str(&format!(
                "  - {{hostname: n{i}, ip: 10.0.0.{}, cores: 2, memory: 4096}}\n",
                101 + i
            ));
        }
        talosprov_topology::parse(&text, Path::new("c.yaml"), &Environment::default())
            .topology
            .expect("valid")
    }

    #[test]
    fn a_file_shared_by_every_node_is_read_once() {
        let t = topology(5);
        let tree = PatchTree {
            root: PathBuf::from("p"),
            top: vec![Listed::dir("common")],
            common: vec![
                Listed::file("10-a.yaml", 10),
                Listed::file("20-b.yaml.j2", 10),
            ],
            ..PatchTree::default()
        };
        let reads = std::sync::Mutex::new(Vec::new());
        let set = PatchSet::build(&t, std::slice::from_ref(&tree), |p| {
            reads.lock().expect("reads").push(p.to_path_buf());
            Ok("machine:\n  nodeLabels:\n    a: \"{{ hostname }}\"\n".to_string())
        });
        let reads = reads.into_inner().expect("reads");
        assert_eq!(reads.len(), 2, "{reads:?}");
        assert!(set.errors().is_empty());
        assert_eq!(set.for_node("n3").len(), 2);
    }

    #[test]
    fn a_template_syntax_error_is_one_diagnostic_with_its_line() {
        let t = topology(3);
        let tree = PatchTree {
            root: PathBuf::from("p"),
            top: vec![Listed::dir("common")],
            common: vec![Listed::file("10-a.yaml.j2", 10)],
            ..PatchTree::default()
        };
        let set = PatchSet::build(&t, std::slice::from_ref(&tree), |_| {
            Ok("machine:\n  a: {{ x \n".to_string())
        });
        assert_eq!(set.errors().len(), 1);
        let d = &set.errors()[0];
        assert_eq!(d.code, Code::TemplateError);
        assert_eq!(d.file, Path::new("p/common/10-a.yaml.j2"));
        assert_eq!(d.pos.map(|p| p.line), Some(2));
        assert!(set.is_broken(Path::new("p/common/10-a.yaml.j2")));
    }
}
