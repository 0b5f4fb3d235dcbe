//! The topology file: the raw serde mirror (`raw`, filled by `read`), the
//! validated model (`model`; `validate` converts one to the other and reports
//! every problem at once), and diagnostics. `load` is the only I/O here.

#![warn(missing_docs)]
#![deny(clippy::wildcard_enum_match_arm)]

mod check;
pub mod model;
mod on_disk;
pub mod pools;
pub mod raw;
pub mod read;
pub mod schema;
pub mod syntax;
pub mod validate;

mod validate_addons;
pub mod validate_devices;
mod validate_nodes;
mod validate_sections;

use crate::model::{Environment, Topology};
use talosprov_base::diagnostics::{Code, Diagnostic};

use std::path::{Path, PathBuf};

/// The result of loading: the topology when there was no error, and every
/// diagnostic (errors and warnings) in file order.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The validated topology; `None` when any diagnostic is an error.
    pub topology: Option<Topology>,
    /// Every problem found.
    pub diagnostics: Vec<Diagnostic>,
}

/// The topology file could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading the file failed (missing, unreadable, not a regular file,
    /// over the size limit, not UTF-8: the source says which, and where).
    #[error("cannot read the topology file {}", path.display())]
    Read {
        /// The topology file's path, as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: talosprov_base::limits::ReadError,
    },
}

/// Parse and validate topology text: the pure core of [`load`].
///
/// `file` labels diagnostics and anchors relative paths (`patches_dir`,
/// `ca_file`, `state.path`).
pub fn parse(text: &str, file: &Path, env: &Environment) -> Loaded {
    parse_keeping_raw(text, file, env).1
}

/// [`parse`], with the raw topology it read (for the checks that look at
/// the files it names).
fn parse_keeping_raw(
    text: &str,
    file: &Path,
    env: &Environment,
) -> (Option<raw::RawTopology>, Loaded) {
    let (raw, mut diagnostics) = read::read(text, file);
    let topology = match &raw {
        Some(raw) => {
            let (topology, mut more) = validate::validate(raw, file, env);
            // A field with a value of the wrong type reads as absent; neither it
            // nor anything inside it is also "missing" (a `sha256` that is not a
            // string is not also a download without its digest).
            let wrong: Vec<String> = diagnostics
                .iter()
                .filter(|d| d.code == Code::WrongType)
                .filter_map(|d| d.field.clone())
                .collect();
            let inside = |field: &str, w: &str| {
                field == w
                    || field
                        .strip_prefix(w)
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
            };
            more.retain(|d| {
                !matches!(d.code, Code::MissingField | Code::AddonChecksum)
                    || !d
                        .field
                        .as_deref()
                        .is_some_and(|f| wrong.iter().any(|w| inside(f, w)))
            });
            diagnostics.extend(more);
            topology.filter(|_| !talosprov_base::diagnostics::has_errors(&diagnostics))
        }
        None => None,
    };
    talosprov_base::diagnostics::sort(&mut diagnostics);
    (
        raw,
        Loaded {
            topology,
            diagnostics,
        },
    )
}

/// Read the topology file through `inputs`, then [`parse`] it with `env`.
///
/// # Errors
/// [`LoadError::Read`] when the file cannot be read; problems in its content
/// are diagnostics in the result, not errors.
pub fn load(
    file: &Path,
    inputs: &(impl talosprov_base::inputs::Inputs + ?Sized),
    env: &Environment,
) -> Result<Loaded, LoadError> {
    let text = inputs.read(file).map_err(|source| LoadError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let (raw, mut loaded) = parse_keeping_raw(&text, file, env);
    let found = raw.map_or_else(Vec::new, |raw| on_disk::check(&raw, file, inputs));
    if !found.is_empty() {
        loaded.diagnostics.extend(found);
        talosprov_base::diagnostics::sort(&mut loaded.diagnostics);
        loaded.topology = None;
    }
    Ok(loaded)
}
