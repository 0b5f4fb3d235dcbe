//! Applying patches to a machine config in order (a later patch wins), as
//! Talos's `configpatcher.Apply`, and remembering which patch last set each
//! value so a later check can name the file to fix.

use super::document::MachineConfig;
use super::json6902::{Json6902Error, apply_json6902};
use super::load::{Patch, PatchBody};
use super::merge::{MergeError, apply_strategic};
use super::provenance::{Provenance, Watch};

/// A patch that failed, named by its source.
#[derive(Debug, thiserror::Error)]
#[error("cannot apply patch {source_name}")]
pub struct ApplyError {
    /// The failing patch's source (a file path, or `inline patch N`).
    pub source_name: String,
    /// What went wrong.
    #[source]
    pub cause: ApplyCause,
}

/// Why a patch failed to apply.
#[derive(Debug, thiserror::Error)]
pub enum ApplyCause {
    /// A strategic merge (or one of its deletes) failed.
    #[error(transparent)]
    Strategic(#[from] MergeError),
    /// A JSON patch failed, or was given a multi-document config.
    #[error(transparent)]
    Json6902(#[from] Json6902Error),
}

/// Apply one patch in place, at the cost of what it merges whatever the
/// config's size.
///
/// # Errors
/// [`ApplyError`] naming the patch; `config` may then be partly patched
/// (work on a copy where that matters).
pub fn apply_in_place(config: &mut MachineConfig, patch: &Patch) -> Result<(), ApplyError> {
    let result = match &patch.body {
        PatchBody::Strategic(steps) => apply_strategic(config, steps).map_err(ApplyCause::from),
        PatchBody::Json6902(ops) => apply_json6902(config, ops).map_err(ApplyCause::from),
    };
    result.map_err(|cause| ApplyError {
        source_name: patch.source.clone(),
        cause,
    })
}

/// Apply one patch to a copy of `config`.
///
/// # Errors
/// [`ApplyError`] naming the patch; `config` is left unchanged.
pub fn apply_patch(config: &MachineConfig, patch: &Patch) -> Result<MachineConfig, ApplyError> {
    let mut out = config.clone();
    apply_in_place(&mut out, patch)?;
    Ok(out)
}

/// Apply patches in order to a copy of `config`.
///
/// # Errors
/// The first [`ApplyError`].
pub fn apply_patches(
    config: &MachineConfig,
    patches: &[Patch],
) -> Result<MachineConfig, ApplyError> {
    let mut current = config.clone();
    for patch in patches {
        apply_in_place(&mut current, patch)?;
    }
    Ok(current)
}

/// A config patched as far as it goes: every patch that applies, in order, and every one that
/// does not, so that a check can report each failing patch rather than only the first.
#[derive(Debug)]
pub struct Applied {
    /// The config with every patch that applied; a failing patch leaves it as it was before
    /// that patch.
    pub config: MachineConfig,
    /// Which patch last changed each value (only from [`apply_patches_all_traced`]).
    pub provenance: Provenance,
    /// Each patch that failed, in patch order.
    pub errors: Vec<ApplyError>,
}

/// Apply every patch that applies, in order, skipping (and collecting) those that fail, as
/// [`apply_patches`] would apply them if the failing ones were not there.
pub fn apply_patches_all(config: &MachineConfig, patches: &[Patch]) -> Applied {
    apply_all(config, patches, false)
}

/// [`apply_patches_all`], also recording which patch last changed each value.
pub fn apply_patches_all_traced(config: &MachineConfig, patches: &[Patch]) -> Applied {
    apply_all(config, patches, true)
}

fn apply_all(config: &MachineConfig, patches: &[Patch], trace: bool) -> Applied {
    let mut current = config.clone();
    let mut provenance = Provenance::default();
    let mut errors = Vec::new();
    let mut failed = Vec::new();
    for (i, patch) in patches.iter().enumerate() {
        let watch = trace.then(|| Watch::before(&current, patch));
        match apply_in_place(&mut current, patch) {
            Ok(()) => {
                if let Some(watch) = watch {
                    provenance.record(watch, &current, &patch.source);
                }
            }
            Err(e) => {
                errors.push(e);
                failed.push(i);
                // A strategic merge may stop half-way: start again from the patches that
                // applied (they apply again, the config being the same).
                current = config.clone();
                for (j, ok) in patches[..i].iter().enumerate() {
                    if !failed.contains(&j) {
                        let _ = apply_in_place(&mut current, ok);
                    }
                }
            }
        }
    }
    Applied {
        config: current,
        provenance,
        errors,
    }
}

/// Apply patches in order and record which patch last changed each value.
///
/// # Errors
/// The first [`ApplyError`].
pub fn apply_patches_traced(
    config: &MachineConfig,
    patches: &[Patch],
) -> Result<(MachineConfig, Provenance), ApplyError> {
    let mut current = config.clone();
    let mut provenance = Provenance::default();
    for patch in patches {
        let watch = Watch::before(&current, patch);
        apply_in_place(&mut current, patch)?;
        provenance.record(watch, &current, &patch.source);
    }
    Ok((current, provenance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::load_patch;

    fn patch(source: &str, text: &str) -> Patch {
        load_patch(source, text).unwrap()
    }

    use crate::document::DocumentId;

    #[test]
    fn every_failing_patch_is_collected_and_the_others_still_apply() {
        let base = MachineConfig::parse("machine:\n  install:\n    disk: /dev/sda\n").unwrap();
        let patches = [
            patch(
                "a.yaml",
                "[{\"op\": \"remove\", \"path\": \"/machine/nothing\"}]",
            ),
            patch("b.yaml", "machine:\n  nodeLabels:\n    a: b\n"),
            patch("c.yaml", "machine:\n  install: /dev/vda\n"),
            patch(
                "d.yaml",
                "[{\"op\": \"test\", \"path\": \"/machine/type\", \"value\": \"x\"}]",
            ),
            patch("e.yaml", "machine:\n  install:\n    wipe: true\n"),
        ];
        let applied = apply_patches_all_traced(&base, &patches);
        let failed: Vec<&str> = applied
            .errors
            .iter()
            .map(|e| e.source_name.as_str())
            .collect();
        assert_eq!(failed, ["a.yaml", "c.yaml", "d.yaml"]);
        let expected = apply_patches(&base, &[patches[1].clone(), patches[4].clone()]).unwrap();
        assert_eq!(applied.config, expected);
        let v1 = DocumentId::v1alpha1();
        assert_eq!(
            applied.provenance.source_of(&v1, "machine.install.wipe"),
            Some("e.yaml")
        );
        assert_eq!(
            applied.provenance.source_of(&v1, "machine.nodeLabels.a"),
            Some("b.yaml")
        );
        assert_eq!(apply_patches_all(&base, &patches).config, expected);
    }
}
