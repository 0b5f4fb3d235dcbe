//! `talosprov validate`: every check that needs no network, on the topology file
//! and the patch tree, with all problems reported together. Each stage returns
//! diagnostics; later stages (rendering, merging) append theirs the same way.

use clap::Args;
use std::path::{Path, PathBuf};

use super::{CommandError, Outcome};
use crate::patch::discover::{self, PatchFile, PatchTree};
use crate::topology::{self, Code, Diagnostic, Topology, diagnostics};
use crate::ui::summary::ValidateReport;

/// Arguments of `talosprov validate` (its help text is on `Command::Validate`).
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The topology file; patches are read from its `patches_dir`
    /// (default: the `patches` folder beside it).
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = "cluster.yaml"
    )]
    pub file: PathBuf,

    /// Print the report as one JSON object on stdout (diagnostics, the
    /// validated topology with defaults applied, and each node's patches).
    #[arg(long)]
    pub json: bool,
}

/// Each node's patch files in merge order, by hostname, in node order.
pub type NodePatches = Vec<(String, Vec<PatchFile>)>;

/// What `validate` found: the model, the patch tree and every diagnostic.
#[derive(Debug, Clone)]
pub struct Validation {
    /// The topology, when it has no error.
    pub topology: Option<Topology>,
    /// Each node's patches in merge order, by hostname, in node order.
    pub patches: NodePatches,
    /// Files in the patch tree that are not patches.
    pub ignored: Vec<PathBuf>,
    /// Every diagnostic of every stage, each stage's sorted by file and line.
    pub diagnostics: Vec<Diagnostic>,
}

/// The patch-tree stage: list the tree, give each node its patches, and warn
/// about empty files and `nodes/<name>` folders that match no node.
pub fn patch_tree_stage(t: &Topology) -> (PatchTree, NodePatches, Vec<Diagnostic>) {
    let tree = match discover::list_tree(&t.patches_dir) {
        Ok(tree) => tree,
        Err(e) => {
            let msg = format!(
                "cannot read the patch tree {}: {e}",
                t.patches_dir.display()
            );
            let d = Diagnostic::error(Code::UnreadablePatchTree, &t.patches_dir, msg)
                .field("patches_dir");
            return (PatchTree::default(), Vec::new(), vec![d]);
        }
    };
    let patches = t
        .nodes
        .iter()
        .map(|n| (n.hostname.clone(), tree.patches_for(&n.hostname, n.role)))
        .collect();
    let mut diagnostics = tree.check(t.nodes.iter().map(|n| n.hostname.as_str()));
    diagnostics::sort(&mut diagnostics);
    (tree, patches, diagnostics)
}

/// Run every stage on `file`. Stages after the topology run only when it has
/// no error (they need the model).
///
/// # Errors
/// When the topology file cannot be read at all.
pub fn check(file: &Path) -> Result<Validation, topology::LoadError> {
    let loaded = topology::load(file)?;
    let mut v = Validation {
        topology: loaded.topology,
        patches: Vec::new(),
        ignored: Vec::new(),
        diagnostics: loaded.diagnostics,
    };
    if let Some(t) = &v.topology {
        let (tree, patches, diagnostics) = patch_tree_stage(t);
        v.ignored = tree.ignored();
        v.patches = patches;
        v.diagnostics.extend(diagnostics);
    }
    Ok(v)
}

/// Run `validate`: exit 0 when there is no error, 1 otherwise.
///
/// # Errors
/// [`CommandError::Reported`] when any diagnostic is an error (they are
/// already printed); a failure when the file cannot be read or stdout is closed.
pub fn run(args: ValidateArgs) -> Result<Outcome, CommandError> {
    let v = check(&args.file)?;
    let report = ValidateReport {
        file: &args.file,
        topology: v.topology.as_ref(),
        patches: &v.patches,
        ignored: &v.ignored,
        diagnostics: &v.diagnostics,
    };
    let failed = diagnostics::has_errors(&v.diagnostics) || v.topology.is_none();
    if args.json {
        crate::ui::write_stdout(&(crate::ui::summary::json(&report) + "\n"))?;
    } else {
        crate::ui::write_stderr(&crate::ui::diagnostics::render_all(
            &v.diagnostics,
            crate::ui::diagnostics::stderr_colour(),
        ));
        if !failed {
            crate::ui::write_stdout(&crate::ui::summary::summary_text(&report))?;
        }
    }
    if failed {
        Err(CommandError::Reported)
    } else {
        Ok(Outcome::Success)
    }
}
