//! `talosprov patches migrate`: rewrite the patch tree for a newer config
//! contract, showing each file's diff; only `--write` changes the files.

use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::migrate::{FileMigration, PatchMigration, migrate_patches};
use talosprov_plan::config_diff::unified_diff_headed;

/// The config contracts `patches migrate` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MigrateTarget {
    /// Talos 1.14's documents.
    #[value(name = "v1.14")]
    V1_14,
}

/// Arguments of `talosprov patches migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The topology file; its nodes' patch files are migrated.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = "cluster.yaml"
    )]
    pub file: PathBuf,

    /// The config contract to migrate to.
    #[arg(long = "to", value_name = "CONTRACT")]
    pub to: MigrateTarget,

    /// Write the migrated files (each replaced whole, keeping its permissions).
    #[arg(long)]
    pub write: bool,
}

/// Run `patches migrate` and print the report.
///
/// # Errors
/// The topology's errors (printed, exit 1), unreadable or unwritable files.
pub(super) fn run(args: MigrateArgs) -> Result<Outcome, CommandError> {
    let MigrateTarget::V1_14 = args.to;
    match migrate_patches(&args.file, args.write)? {
        PatchMigration::Invalid(diagnostics) => {
            crate::ui::out::write_stderr(&crate::ui::diagnostics::render_all(
                &diagnostics,
                crate::ui::diagnostics::stderr_colour(),
            ));
            Err(CommandError::Reported)
        }
        PatchMigration::Done { files, written } => {
            crate::ui::out::write_stdout(&report(&files, written))?;
            Ok(Outcome::Success)
        }
    }
}

/// The diff of each file that changes, what moved and what stayed, then a summary line.
fn report(files: &[FileMigration], written: bool) -> String {
    let mut out = String::new();
    for f in files {
        let path = f.path.display();
        if let Some(why) = &f.whole {
            let _ = writeln!(out, "{path}: left as it is: {why}\n");
            continue;
        }
        if f.changes() {
            out.push_str(&unified_diff_headed(
                &f.before,
                &f.after,
                (&format!("{path} (now)"), &format!("{path} (migrated)")),
            ));
            for m in &f.moved {
                let _ = writeln!(out, "  moved {} -> {}", m.from, m.to);
            }
        }
        for l in &f.left {
            let _ = writeln!(out, "  {path}: {} left as it is: {}", l.field, l.reason);
        }
        if f.changes() || !f.left.is_empty() {
            out.push('\n');
        }
    }
    let changed = files.iter().filter(|f| f.changes()).count();
    let moved: usize = files.iter().map(|f| f.moved.len()).sum();
    let left: usize = files
        .iter()
        .map(|f| f.left.len() + usize::from(f.whole.is_some()))
        .sum();
    let s = |n: usize| if n == 1 { "" } else { "s" };
    let verdict = match (changed, written) {
        (0, _) => "nothing to migrate".to_owned(),
        (_, true) => format!("{changed} file{} written", s(changed)),
        (_, false) => format!(
            "{changed} file{} to migrate: run again with --write to write them",
            s(changed)
        ),
    };
    let _ = writeln!(
        out,
        "{verdict} ({moved} field{} moved, {left} left as {}; {} patch file{} read)",
        s(moved),
        if left == 1 { "it is" } else { "they are" },
        files.len(),
        s(files.len())
    );
    out
}
