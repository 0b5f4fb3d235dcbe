//! Discovery of the patch tree: `common/`, then `<role>/`, then
//! `pools/<pool>/` (a pool's members), then `nodes/<hostname>/`, each folder
//! sorted byte-wise by file name. With several roots (`patches_dir` as a
//! list), each level reads the roots in the order given. The folders
//! are listed through the caller's [`Inputs`] ([`list_tree`]); ordering and
//! classifying are pure.

use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use talosprov_base::diagnostics::did_you_mean;
use talosprov_base::diagnostics::{Code, Diagnostic};
use talosprov_base::inputs::Inputs;
use talosprov_base::inputs::Listed;
use talosprov_base::role::Role;

/// How a patch file is turned into YAML, decided by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchKind {
    /// `.yaml`, `.yml`: taken as written (`{{` is safe in it).
    Literal,
    /// `.yaml.j2`, `.yml.j2`, `.yaml.jinja`: a minijinja template.
    Jinja,
    /// `.yaml.tftpl`: OpenTofu `templatefile` syntax (`${var}`).
    Templatefile,
}

impl PatchKind {
    /// The kind for a file name, or `None` for a file that is not a patch
    /// (a README, say). Suffixes are matched case-sensitively, as OpenTofu and
    /// talosctl see them.
    pub fn of(name: &str) -> Option<PatchKind> {
        const SUFFIXES: [(&str, PatchKind); 6] = [
            (".yaml.tftpl", PatchKind::Templatefile),
            (".yaml.jinja", PatchKind::Jinja),
            (".yaml.j2", PatchKind::Jinja),
            (".yml.j2", PatchKind::Jinja),
            (".yaml", PatchKind::Literal),
            (".yml", PatchKind::Literal),
        ];
        SUFFIXES
            .iter()
            .find(|(suffix, _)| name.len() > suffix.len() && name.ends_with(suffix))
            .map(|(_, kind)| *kind)
    }
}

/// Which folder a patch comes from; patches apply in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchLevel {
    /// `common/`: every node.
    Common,
    /// `controlplane/` or `worker/`: every node of that role.
    Role,
    /// `pools/<pool>/`: every member of one pool.
    Pool,
    /// `nodes/<hostname>/`: one node.
    Node,
}

/// One patch file for a node, in merge order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchFile {
    /// The file: `<patches_dir>/<folder>/<name>`.
    pub path: PathBuf,
    /// How to render it.
    pub kind: PatchKind,
    /// Which folder it comes from.
    pub level: PatchLevel,
    /// Its size as listed, in bytes (a template's source, not its output).
    #[serde(skip)]
    pub len: u64,
}

/// The patch tree as listed from disk: plain data, so ordering and checks are
/// pure. A folder that does not exist is simply absent (or empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchTree {
    /// The `patches_dir`.
    pub root: PathBuf,
    /// The entries of the root itself.
    pub top: Vec<Listed>,
    /// `common/`.
    pub common: Vec<Listed>,
    /// `controlplane/`.
    pub controlplane: Vec<Listed>,
    /// `worker/`.
    pub worker: Vec<Listed>,
    /// `pools/<name>/`, by folder name.
    pub pools: BTreeMap<OsString, Vec<Listed>>,
    /// `nodes/<name>/`, by folder name.
    pub nodes: BTreeMap<OsString, Vec<Listed>>,
    /// The entries of `nodes/` that are files, not folders.
    pub nodes_files: Vec<Listed>,
}

const FOLDERS: [&str; 5] = ["common", "controlplane", "worker", "pools", "nodes"];

fn sorted(entries: &[Listed]) -> Vec<&Listed> {
    let mut v: Vec<&Listed> = entries.iter().collect();
    v.sort_by(|a, b| a.name.as_encoded_bytes().cmp(b.name.as_encoded_bytes()));
    v
}

impl PatchTree {
    fn folder(
        &self,
        level: PatchLevel,
        role: Role,
        hostname: &str,
        pool: Option<&str>,
    ) -> (PathBuf, Option<&Vec<Listed>>) {
        match level {
            PatchLevel::Common => (self.root.join("common"), Some(&self.common)),
            PatchLevel::Role => match role {
                Role::Controlplane => (self.root.join("controlplane"), Some(&self.controlplane)),
                Role::Worker => (self.root.join("worker"), Some(&self.worker)),
            },
            PatchLevel::Pool => match pool {
                Some(p) => (
                    self.root.join("pools").join(p),
                    self.pools.get(std::ffi::OsStr::new(p)),
                ),
                None => (self.root.join("pools"), None),
            },
            PatchLevel::Node => (
                self.root.join("nodes").join(hostname),
                self.nodes.get(std::ffi::OsStr::new(hostname)),
            ),
        }
    }

    /// The patches of one node in merge order: `common/`, `<role>/`,
    /// `nodes/<hostname>/`, each sorted byte-wise by name; only files with a
    /// patch suffix, and empty files are left out (see [`PatchTree::check`]).
    pub fn patches_for(&self, hostname: &str, role: Role) -> Vec<PatchFile> {
        patches_across(std::slice::from_ref(self), hostname, role, None)
    }

    /// The files of one level of this tree for a node, sorted byte-wise.
    fn level_files(
        &self,
        level: PatchLevel,
        role: Role,
        hostname: &str,
        pool: Option<&str>,
        out: &mut Vec<PatchFile>,
    ) {
        let (dir, entries) = self.folder(level, role, hostname, pool);
        for e in sorted(entries.map_or(&[][..], Vec::as_slice)) {
            let Some(kind) = e.name.to_str().and_then(PatchKind::of) else {
                continue;
            };
            if e.is_dir || (e.len == 0 && e.special.is_none()) {
                continue;
            }
            out.push(PatchFile {
                path: dir.join(&e.name),
                kind,
                level,
                len: e.len,
            });
        }
    }

    /// Everything in the tree that is not a patch: other files and folders,
    /// in path order. `validate` lists them so a misnamed patch is noticed.
    pub fn ignored(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in sorted(&self.top) {
            let known = e.is_dir && e.name.to_str().is_some_and(|n| FOLDERS.contains(&n));
            if !known {
                out.push(self.root.join(&e.name));
            }
        }
        let mut folder = |dir: PathBuf, entries: &[Listed]| {
            for e in sorted(entries) {
                if e.is_dir || e.name.to_str().and_then(PatchKind::of).is_none() {
                    out.push(dir.join(&e.name));
                }
            }
        };
        folder(self.root.join("common"), &self.common);
        folder(self.root.join("controlplane"), &self.controlplane);
        folder(self.root.join("worker"), &self.worker);
        for (name, entries) in &self.pools {
            folder(self.root.join("pools").join(name), entries);
        }
        for (name, entries) in &self.nodes {
            folder(self.root.join("nodes").join(name), entries);
        }
        for e in sorted(&self.nodes_files) {
            out.push(self.root.join("nodes").join(&e.name));
        }
        out
    }

    /// Warnings about the tree: each empty patch file (skipped), each folder
    /// at the top that is not a patch level, and each `nodes/<name>/` folder
    /// that matches none of `hostnames`, or `pools/<name>/` none of `pools`
    /// (a typo, usually).
    pub fn check<'a>(
        &self,
        hostnames: impl IntoIterator<Item = &'a str>,
        pools: &[&str],
    ) -> Vec<Diagnostic> {
        let hostnames: Vec<&str> = hostnames.into_iter().collect();
        let mut out = Vec::new();
        let mut empty = |dir: PathBuf, entries: &[Listed]| {
            for e in sorted(entries) {
                let patch = e.name.to_str().and_then(PatchKind::of).is_some();
                if !e.is_dir && e.len == 0 && e.special.is_none() && patch {
                    let path = dir.join(&e.name);
                    let msg = format!("patch file {} is empty and is skipped", path.display());
                    out.push(Diagnostic::warning(Code::EmptyPatch, &path, msg));
                }
            }
        };
        empty(self.root.join("common"), &self.common);
        empty(self.root.join("controlplane"), &self.controlplane);
        empty(self.root.join("worker"), &self.worker);
        for (name, entries) in &self.pools {
            empty(self.root.join("pools").join(name), entries);
        }
        for (name, entries) in &self.nodes {
            empty(self.root.join("nodes").join(name), entries);
        }
        for name in self.pools.keys() {
            if !name.to_str().is_some_and(|n| pools.contains(&n)) {
                let dir = self.root.join("pools").join(name);
                let msg = format!(
                    "patch folder {} matches no pool, so its patches apply to nothing{}",
                    dir.display(),
                    name.to_str()
                        .map(|n| did_you_mean(n, pools.iter().copied()))
                        .unwrap_or_default()
                );
                out.push(Diagnostic::warning(Code::UnknownPatchNode, &dir, msg));
            }
        }
        let mut folders = vec![
            (self.root.join("common"), &self.common),
            (self.root.join("controlplane"), &self.controlplane),
            (self.root.join("worker"), &self.worker),
        ];
        folders.extend(
            self.nodes
                .iter()
                .map(|(name, entries)| (self.root.join("nodes").join(name), entries)),
        );
        for (dir, entries) in folders {
            out.extend(mixed_prefix_widths(&dir, entries));
        }
        for e in sorted(&self.top) {
            let name = e.name.to_string_lossy();
            if e.is_dir && !FOLDERS.contains(&name.as_ref()) {
                let dir = self.root.join(&e.name);
                let msg = format!(
                    "patch folder {} is not one of {}, so its files are ignored{}",
                    dir.display(),
                    FOLDERS.join(", "),
                    did_you_mean(&name, FOLDERS)
                );
                out.push(Diagnostic::warning(Code::UnknownPatchFolder, &dir, msg));
            }
        }
        for name in self.nodes.keys() {
            let matches = name.to_str().is_some_and(|n| hostnames.contains(&n));
            if !matches {
                let dir = self.root.join("nodes").join(name);
                let close = name
                    .to_str()
                    .map(|n| did_you_mean(n, hostnames.iter().copied()))
                    .unwrap_or_default();
                let msg = format!(
                    "patch folder {} matches no node, so its patches apply to nothing{}",
                    dir.display(),
                    close
                );
                let name = name.to_string_lossy().into_owned();
                out.push(
                    Diagnostic::warning(Code::UnknownPatchNode, &dir, msg).on_node(Some(&name)),
                );
            }
        }
        out
    }
}

/// The patches of one node across several trees, in merge order: each
/// level (common, role, pool, node) reads the trees in the order given,
/// each folder sorted byte-wise; only files with a patch suffix, and empty
/// files left out.
pub fn patches_across(
    trees: &[PatchTree],
    hostname: &str,
    role: Role,
    pool: Option<&str>,
) -> Vec<PatchFile> {
    let mut out = Vec::new();
    for level in [
        PatchLevel::Common,
        PatchLevel::Role,
        PatchLevel::Pool,
        PatchLevel::Node,
    ] {
        if level == PatchLevel::Pool && pool.is_none() {
            continue;
        }
        for tree in trees {
            tree.level_files(level, role, hostname, pool, &mut out);
        }
    }
    out
}

/// A warning for a folder whose patch files start with numbers of different
/// widths (`2-a.yaml` beside `10-b.yaml`): they merge in byte-wise order, so
/// `10-b.yaml` comes first, which is rarely what the numbers meant.
fn mixed_prefix_widths(dir: &Path, entries: &[Listed]) -> Option<Diagnostic> {
    let patches: Vec<&str> = sorted(entries)
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| e.name.to_str())
        .filter(|n| PatchKind::of(n).is_some())
        .collect();
    let widths: std::collections::BTreeSet<usize> = patches
        .iter()
        .map(|n| n.bytes().take_while(u8::is_ascii_digit).count())
        .filter(|w| *w > 0)
        .collect();
    if widths.len() < 2 {
        return None;
    }
    let msg = format!(
        "patch files in {} start with numbers of different widths, and merge in byte-wise \
         order: {}; pad the numbers to one width (02-, 10-) to merge them in numeric order",
        dir.display(),
        patches.join(", ")
    );
    Some(Diagnostic::warning(Code::MixedPrefixWidths, dir, msg))
}

/// List the patch tree under `root` through `inputs`. A missing `root` or
/// folder is empty.
///
/// # Errors
/// An I/O error reading a folder that exists (permissions, say).
pub fn list_tree(root: &Path, inputs: &(impl Inputs + Sync + ?Sized)) -> io::Result<PatchTree> {
    let list_dir = |dir: &Path| inputs.list(dir);
    let top = list_dir(root)?;
    let is_folder = |name: &str| top.iter().any(|e| e.is_dir && e.name == name);
    let sub = |name: &str| -> io::Result<Vec<Listed>> {
        if is_folder(name) {
            list_dir(&root.join(name))
        } else {
            Ok(Vec::new())
        }
    };
    let mut tree = PatchTree {
        root: root.to_path_buf(),
        common: sub("common")?,
        controlplane: sub("controlplane")?,
        worker: sub("worker")?,
        ..PatchTree::default()
    };
    // A folder per pool and per node: listed on every core.
    let list_each = |parent: &str, dirs: Vec<Listed>| -> io::Result<Vec<(OsString, Vec<Listed>)>> {
        dirs.into_par_iter()
            .map(|e| {
                let entries = list_dir(&root.join(parent).join(&e.name))?;
                Ok((e.name, entries))
            })
            .collect()
    };
    let (pools, _): (Vec<Listed>, Vec<Listed>) = sub("pools")?.into_iter().partition(|e| e.is_dir);
    tree.pools.extend(list_each("pools", pools)?);
    let (nodes, files): (Vec<Listed>, Vec<Listed>) =
        sub("nodes")?.into_iter().partition(|e| e.is_dir);
    tree.nodes.extend(list_each("nodes", nodes)?);
    tree.nodes_files = files;
    tree.top = top;
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> PatchTree {
        let mut t = PatchTree {
            root: PathBuf::from("p"),
            top: vec![
                Listed::dir("common"),
                Listed::dir("controlplane"),
                Listed::dir("nodes"),
                Listed::file("README.md", 10),
            ],
            common: vec![
                Listed::file("b.yaml", 5),
                Listed::file("a.yaml", 5),
                Listed::file("B.yaml", 5),
                Listed::file("notes.txt", 3),
            ],
            controlplane: vec![
                Listed::file("10-net.yaml.tftpl", 9),
                Listed::file("05-x.yml.j2", 9),
                Listed::file("20-empty.yaml", 0),
            ],
            worker: vec![Listed::file("30-w.yaml.jinja", 4)],
            ..PatchTree::default()
        };
        t.nodes
            .insert("gpu".into(), vec![Listed::file("30-nvidia.yaml", 8)]);
        t.nodes
            .insert("gpu-typo".into(), vec![Listed::file("x.yaml", 8)]);
        t
    }

    fn names(files: &[PatchFile]) -> Vec<String> {
        files.iter().map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn patches_follow_common_role_node_order_sorted_bytewise() {
        let got = tree().patches_for("gpu", Role::Controlplane);
        assert_eq!(
            names(&got),
            [
                "p/common/B.yaml",
                "p/common/a.yaml",
                "p/common/b.yaml",
                "p/controlplane/05-x.yml.j2",
                "p/controlplane/10-net.yaml.tftpl",
                "p/nodes/gpu/30-nvidia.yaml"
            ]
        );
        let levels: Vec<PatchLevel> = got.iter().map(|f| f.level).collect();
        assert_eq!(
            levels,
            [
                PatchLevel::Common,
                PatchLevel::Common,
                PatchLevel::Common,
                PatchLevel::Role,
                PatchLevel::Role,
                PatchLevel::Node
            ]
        );
    }

    #[test]
    fn missing_folders_count_as_empty() {
        let got = tree().patches_for("other", Role::Worker);
        assert_eq!(
            names(&got),
            [
                "p/common/B.yaml",
                "p/common/a.yaml",
                "p/common/b.yaml",
                "p/worker/30-w.yaml.jinja"
            ]
        );
        assert!(
            PatchTree::default()
                .patches_for("x", Role::Worker)
                .is_empty()
        );
    }

    #[test]
    fn kinds_follow_the_suffix() {
        assert_eq!(PatchKind::of("a.yaml"), Some(PatchKind::Literal));
        assert_eq!(PatchKind::of("a.yml"), Some(PatchKind::Literal));
        assert_eq!(PatchKind::of("a.yaml.j2"), Some(PatchKind::Jinja));
        assert_eq!(PatchKind::of("a.yml.j2"), Some(PatchKind::Jinja));
        assert_eq!(PatchKind::of("a.yaml.jinja"), Some(PatchKind::Jinja));
        assert_eq!(PatchKind::of("a.yaml.tftpl"), Some(PatchKind::Templatefile));
        assert_eq!(PatchKind::of("README.md"), None);
        assert_eq!(PatchKind::of("a.json"), None);
        assert_eq!(PatchKind::of(".yaml"), None);
    }

    #[test]
    fn empty_files_are_skipped_with_a_warning() {
        let t = tree();
        assert!(
            !names(&t.patches_for("gpu", Role::Controlplane))
                .iter()
                .any(|n| n.contains("20-empty"))
        );
        let warnings = t.check(["gpu", "gpu-typo"], &[]);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].code, Code::EmptyPatch);
        assert_eq!(
            warnings[0].file,
            PathBuf::from("p/controlplane/20-empty.yaml")
        );
    }

    #[test]
    fn node_folder_without_a_node_is_a_warning_with_a_suggestion() {
        let warnings = tree().check(["gpu"], &[]);
        let unknown: Vec<_> = warnings
            .iter()
            .filter(|d| d.code == Code::UnknownPatchNode)
            .collect();
        assert_eq!(unknown.len(), 1);
        assert!(
            unknown[0].message.contains("p/nodes/gpu-typo"),
            "{}",
            unknown[0].message
        );
        assert!(
            unknown[0].message.contains("did you mean `gpu`?"),
            "{}",
            unknown[0].message
        );
    }

    #[test]
    fn unknown_top_level_folder_is_a_warning_with_a_suggestion() {
        let mut t = tree();
        t.top.push(Listed::dir("controlplanes"));
        let w: Vec<_> = t
            .check(["gpu", "gpu-typo"], &[])
            .into_iter()
            .filter(|d| d.code == Code::UnknownPatchFolder)
            .collect();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].message.contains("did you mean `controlplane`?"),
            "{}",
            w[0].message
        );
    }

    #[test]
    fn non_patch_files_are_listed_as_ignored() {
        let ignored: Vec<String> = tree()
            .ignored()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(ignored, ["p/README.md", "p/common/notes.txt"]);
    }

    #[test]
    fn list_tree_reads_the_folders_and_a_missing_root_is_empty() -> std::io::Result<()> {
        let root = Path::new("patches");
        let none = talosprov_base::inputs::MemoryInputs::new();
        assert_eq!(list_tree(root, &none)?.patches_for("a", Role::Worker), []);
        let inputs = talosprov_base::inputs::MemoryInputs::new()
            .with("patches/common/10-x.yaml", "machine: {}\n")
            .with("patches/common/20-empty.yaml", "")
            .with("patches/worker/10-w.yaml.j2", "machine: {}\n")
            .with("patches/worker/sub/x.yaml", "machine: {}\n")
            .with("patches/nodes/a/10-n.yaml.tftpl", "machine: {}\n")
            .with("patches/nodes/stray.yaml", "machine: {}\n");
        let root = root.to_path_buf();
        let tree = list_tree(&root, &inputs)?;
        let got: Vec<(String, PatchKind)> = tree
            .patches_for("a", Role::Worker)
            .into_iter()
            .map(|f| {
                (
                    f.path
                        .strip_prefix(&root)
                        .unwrap_or(&f.path)
                        .display()
                        .to_string(),
                    f.kind,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("common/10-x.yaml".to_owned(), PatchKind::Literal),
                ("worker/10-w.yaml.j2".to_owned(), PatchKind::Jinja),
                (
                    "nodes/a/10-n.yaml.tftpl".to_owned(),
                    PatchKind::Templatefile
                ),
            ]
        );
        let ignored: Vec<PathBuf> = tree.ignored();
        assert_eq!(
            ignored,
            [root.join("worker/sub"), root.join("nodes/stray.yaml")]
        );
        let warnings = tree.check(["a"], &[]);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].code, Code::EmptyPatch);
        Ok(())
    }

    #[test]
    fn each_level_reads_every_root_in_order_and_pools_come_between_role_and_node()
    -> std::io::Result<()> {
        let inputs = talosprov_base::inputs::MemoryInputs::new()
            .with("shared/common/10-a.yaml", "machine: {}\n")
            .with("shared/worker/10-w.yaml", "machine: {}\n")
            .with("shared/pools/gpu/10-p.yaml", "machine: {}\n")
            .with("own/common/05-b.yaml", "machine: {}\n")
            .with("own/pools/gpu/20-q.yaml", "machine: {}\n")
            .with("own/nodes/lab-gpu-1/10-n.yaml", "machine: {}\n");
        let trees = [
            list_tree(Path::new("shared"), &inputs)?,
            list_tree(Path::new("own"), &inputs)?,
        ];
        let files = |pool: Option<&str>| -> Vec<String> {
            patches_across(&trees, "lab-gpu-1", Role::Worker, pool)
                .iter()
                .map(|f| f.path.display().to_string())
                .collect()
        };
        assert_eq!(
            files(Some("gpu")),
            [
                "shared/common/10-a.yaml",
                "own/common/05-b.yaml",
                "shared/worker/10-w.yaml",
                "shared/pools/gpu/10-p.yaml",
                "own/pools/gpu/20-q.yaml",
                "own/nodes/lab-gpu-1/10-n.yaml"
            ]
        );
        assert_eq!(files(None).len(), 4, "a listed node reads no pool folder");
        let warnings = trees[1].check(["lab-gpu-1"], &["cpu"]);
        assert!(
            warnings
                .iter()
                .any(|w| w.message.contains("matches no pool"))
        );
        Ok(())
    }
}
