//! `talosprov machineconfig patch`: apply strategic-merge and JSON 6902
//! patches to a machine config file, as `talosctl machineconfig patch` does,
//! to debug patches against it.

use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::{Patch, load_patch};

/// Arguments of `talosprov machineconfig patch`.
#[derive(Debug, Args)]
pub struct PatchArgs {
    /// The machine config file to patch (YAML, one or more documents).
    pub config: PathBuf,

    /// A patch: `@FILE`, a file name, or the patch itself inline (YAML or JSON).
    /// Repeat to apply several, in order.
    #[arg(short = 'p', long = "patch", value_name = "PATCH", required = true)]
    pub patches: Vec<String>,

    /// Write the result to this file (mode 0600) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Run `machineconfig patch`: the patched config on stdout or in `--output`.
///
/// # Errors
/// Unreadable files, invalid config or patches, a patch that fails to apply.
pub(super) fn run(args: PatchArgs) -> Result<Outcome, CommandError> {
    let text = talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, &args.config)
        .with_context(|| format!("cannot read the machine config {}", args.config.display()))?;
    let config = MachineConfig::parse(&text)
        .with_context(|| format!("{} is not a valid machine config", args.config.display()))?;
    let mut patches = Vec::with_capacity(args.patches.len());
    for (i, arg) in args.patches.iter().enumerate() {
        patches.push(read_patch(arg, i + 1)?);
    }
    let patched = apply_patches(&config, &patches)?;
    // The same Talos-style writer as `machineconfig gen` and `render`.
    let yaml = talosprov_machine::config::machine_config_yaml(&patched.documents);
    match &args.output {
        Some(path) => talosprov_files::write_private(path, yaml.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(yaml.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(Outcome::Success)
}

/// Read one `--patch` value the way talosctl's `LoadPatches` does: `@file`, a
/// bare file name (no space or newline, not starting with `[` or `{`), or an
/// inline patch.
fn read_patch(arg: &str, position: usize) -> anyhow::Result<Patch> {
    let (source, text) = if let Some(file) = arg.strip_prefix('@') {
        (file.to_string(), read_file(Path::new(file))?)
    } else if !arg.contains([' ', '\n']) && !arg.starts_with(['[', '{']) {
        (arg.to_string(), read_file(Path::new(arg))?)
    } else {
        (format!("inline patch {position}"), arg.to_string())
    };
    load_patch(source.clone(), &text).with_context(|| format!("cannot load patch {source}"))
}

fn read_file(path: &Path) -> anyhow::Result<String> {
    talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, path)
        .with_context(|| format!("cannot read the patch {}", path.display()))
}
