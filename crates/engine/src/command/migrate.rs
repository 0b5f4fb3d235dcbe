//! `patches migrate --to v1.14`: every patch file the topology's nodes use, rewritten from
//! the v1alpha1 fields Talos 1.14 deprecates to the documents that replace them
//! ([`talosprov_machine::migrate`]). Nothing is written unless asked; a file is written
//! only when it changes, and the whole tree is migrated before any file is written.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use talosprov_base::diagnostics::Diagnostic;
use talosprov_base::role::Role;
use talosprov_machine::migrate::{Left, Moved, Scope, migrate_to_v1_14};

/// One patch file's migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMigration {
    /// The file, as the topology names it (`<patches_dir>/<folder>/<name>`).
    pub path: PathBuf,
    /// Its text now.
    pub before: String,
    /// Its text migrated (equal to `before` when nothing moves).
    pub after: String,
    /// The fields moved.
    pub moved: Vec<Moved>,
    /// The deprecated fields left as written, with the reason.
    pub left: Vec<Left>,
    /// Why the file was left whole (not YAML before templating, a JSON 6902 patch).
    pub whole: Option<String>,
}

impl FileMigration {
    /// Whether migrating changes the file.
    pub fn changes(&self) -> bool {
        self.before != self.after
    }
}

/// What `patches migrate` found, or the topology's problems.
#[derive(Debug, Clone)]
pub enum PatchMigration {
    /// The topology or the patch tree has errors: nothing was migrated.
    Invalid(Vec<Diagnostic>),
    /// Every patch file used by a node, in the tree's order, and whether the changed ones
    /// were written.
    Done {
        /// Each file's migration.
        files: Vec<FileMigration>,
        /// The changed files were written.
        written: bool,
    },
}

/// Migrate the patch tree of the topology `file` to Talos 1.14's documents; with `write`,
/// rewrite each file that changes (keeping its permissions, through a rename).
///
/// # Errors
/// The topology file cannot be read, a patch file cannot be read, or a write fails (the
/// files written before it stay written; each write is whole).
pub fn migrate_patches(file: &Path, write: bool) -> anyhow::Result<PatchMigration> {
    let loaded = talosprov_files::load_topology(file)?;
    let Some(topology) = loaded.topology else {
        return Ok(PatchMigration::Invalid(loaded.diagnostics));
    };
    let set = match talosprov_files::load_patches(&topology) {
        Ok(set) => set,
        Err(diagnostics) => return Ok(PatchMigration::Invalid(diagnostics)),
    };
    // Each file once, in the order nodes first use it, with whether a worker uses it.
    let mut used: Vec<(PathBuf, bool)> = Vec::new();
    for (hostname, files) in set.node_patches() {
        let worker = topology
            .nodes
            .iter()
            .any(|n| &n.hostname == hostname && n.role == Role::Worker);
        for f in files {
            match used.iter_mut().find(|(p, _)| *p == f.path) {
                Some((_, workers)) => *workers |= worker,
                None => used.push((f.path.clone(), worker)),
            }
        }
    }
    let mut files = Vec::with_capacity(used.len());
    for (path, workers) in used {
        let before = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read the patch file {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let migration = match migrate_to_v1_14(&name, &before, Scope { workers }) {
            Ok(m) => FileMigration {
                path,
                after: m.text,
                before,
                moved: m.moved,
                left: m.left,
                whole: None,
            },
            Err(why) => FileMigration {
                path,
                after: before.clone(),
                before,
                moved: Vec::new(),
                left: Vec::new(),
                whole: Some(why.to_string()),
            },
        };
        files.push(migration);
    }
    if write {
        for f in files.iter().filter(|f| f.changes()) {
            talosprov_files::replace_file(&f.path, f.after.as_bytes())
                .with_context(|| format!("cannot write {}", f.path.display()))?;
        }
    }
    Ok(PatchMigration::Done {
        files,
        written: write,
    })
}
