//! The `machine.install` values talosprov manages, and the patches that override them.
//!
//! talosprov sets `machine.install.image` to the Image Factory installer of the node's
//! schematic (`<factory>/nocloud-installer/<id>:<version>`, which its upgrades also install)
//! and `machine.install.disk` to `cluster.install_disk`, the VM's system disk (`scsi0` on its
//! SCSI controller, `/dev/sda` on Talos by default). Patches apply over the base config, so a
//! patch that sets (or removes) one of these values wins in the rendered config; this module
//! finds which patch did it so the caller can warn. Pure.

use serde_yaml_ng::Value;

use talosprov_patch::apply::apply_in_place;
use talosprov_patch::document::scalar_text;
use talosprov_patch::document::{DocumentId, MachineConfig};
use talosprov_patch::load::Patch;

/// A value of the v1alpha1 document that talosprov sets itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagedField {
    /// `machine.install.image`: the schematic's installer.
    InstallImage,
    /// `machine.install.disk`: `cluster.install_disk`.
    InstallDisk,
}

impl ManagedField {
    /// The dotted path of the field in the v1alpha1 document.
    pub fn path(self) -> &'static str {
        match self {
            ManagedField::InstallImage => "machine.install.image",
            ManagedField::InstallDisk => "machine.install.disk",
        }
    }

    /// The document and dotted path that carry the field in a config: the v1alpha1 document
    /// for the v1.13 contract and older, `UnattendedInstallConfig` (`installer.image`,
    /// `provisioning.diskSelector.match`) when `config` has one (the v1.14 contract).
    pub fn location(self, config: &MachineConfig) -> (DocumentId, &'static str) {
        if super::effective::document(&config.documents, UNATTENDED).is_none() {
            return (DocumentId::v1alpha1(), self.path());
        }
        let path = match self {
            ManagedField::InstallImage => "installer.image",
            ManagedField::InstallDisk => "provisioning.diskSelector.match",
        };
        let id = DocumentId {
            api_version: "v1alpha1".to_string(),
            kind: UNATTENDED.to_string(),
            name: None,
        };
        (id, path)
    }
}

/// The v1.14 document that replaces `machine.install`.
const UNATTENDED: &str = "UnattendedInstallConfig";

/// A managed value that the rendered config does not carry as talosprov set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// Which managed field the patch changed: the installer image or the
    /// install disk.
    pub field: ManagedField,
    /// The value talosprov sets (and, for the image, upgrades with).
    pub ours: String,
    /// The value in the rendered config, as Go's yaml would read it into a string; `None` when
    /// a patch removed it.
    pub rendered: Option<String>,
    /// The source of the last patch that changed the value (a patch file path).
    pub source: String,
}

/// The field's value in `config`, wherever its contract carries it
/// ([`super::effective`]); the install disk of a 1.14 selector that is not the generator's
/// `disk.dev_path == "<path>"` comes back as the whole expression.
fn value_at(config: &MachineConfig, field: ManagedField) -> Option<String> {
    let (id, path) = field.location(config);
    let doc = &config.documents[config.position(&id)?];
    let text = path
        .split('.')
        .try_fold(doc, |cur, key| cur.as_mapping()?.get(key))
        .filter(|v| !v.is_null())
        .and_then(|v: &Value| scalar_text(v))?;
    match (field, id.kind.as_str()) {
        (ManagedField::InstallDisk, UNATTENDED) => {
            Some(super::effective::dev_path_of(&text).unwrap_or(text))
        }
        _ => Some(text),
    }
}

/// Each managed value of `base` (the config talosprov generates, with `managed` set as given)
/// that differs in `rendered` (`base` with `patches` applied in order, all of which apply),
/// with the last patch that changed it. A patch that writes talosprov's own value is no
/// override; a value no patch changed is never reported.
pub fn overrides(
    base: &MachineConfig,
    patches: &[Patch],
    rendered: &MachineConfig,
    managed: &[(ManagedField, &str)],
) -> Vec<Override> {
    let changed: Vec<(ManagedField, &str, Option<String>)> = managed
        .iter()
        .map(|&(field, ours)| (field, ours, value_at(rendered, field)))
        .filter(|(_, ours, now)| now.as_deref() != Some(*ours))
        .collect();
    if changed.is_empty() {
        return Vec::new();
    }
    // Only now is it worth replaying the patches one by one, in place: each
    // costs what it merges, whatever the config's size.
    let mut setters: Vec<Option<&str>> = vec![None; changed.len()];
    let mut current = base.clone();
    let values = |c: &MachineConfig| -> Vec<Option<String>> {
        changed
            .iter()
            .map(|(field, _, _)| value_at(c, *field))
            .collect()
    };
    let mut before = values(&current);
    for patch in patches {
        if apply_in_place(&mut current, patch).is_err() {
            // Every patch applied when `rendered` was made: this one cannot
            // fail; if it did, what it half-merged leaves nothing to name.
            break;
        }
        let after = values(&current);
        for (i, (was, now)) in before.iter().zip(&after).enumerate() {
            if was != now {
                setters[i] = Some(&patch.source);
            }
        }
        before = after;
    }
    changed
        .into_iter()
        .zip(setters)
        .filter_map(|((field, ours, now), source)| {
            Some(Override {
                field,
                ours: ours.to_string(),
                rendered: now,
                source: source?.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_patch::load::load_patch;

    const IMAGE: &str = "factory.talos.dev/nocloud-installer/abc:v1.13.8";

    fn base() -> MachineConfig {
        MachineConfig::parse(&format!(
            "machine:\n  install:\n    disk: /dev/sda\n    image: {IMAGE}\n    wipe: false\n"
        ))
        .unwrap()
    }

    fn run(patches: &[(&str, &str)]) -> Vec<Override> {
        let patches: Vec<Patch> = patches
            .iter()
            .map(|(s, t)| load_patch(*s, t).unwrap())
            .collect();
        let rendered = talosprov_patch::apply::apply_patches(&base(), &patches).unwrap();
        overrides(
            &base(),
            &patches,
            &rendered,
            &[
                (ManagedField::InstallImage, IMAGE),
                (ManagedField::InstallDisk, "/dev/sda"),
            ],
        )
    }

    #[test]
    fn the_last_patch_that_changed_a_managed_value_is_named() {
        let found = run(&[
            ("a.yaml", "machine:\n  install:\n    disk: /dev/vdb\n"),
            ("b.yaml", "machine:\n  install:\n    disk: /dev/vda\n"),
            ("c.yaml", "machine:\n  install:\n    wipe: true\n"),
        ]);
        assert_eq!(
            found,
            vec![Override {
                field: ManagedField::InstallDisk,
                ours: "/dev/sda".into(),
                rendered: Some("/dev/vda".into()),
                source: "b.yaml".into(),
            }]
        );
    }

    #[test]
    fn a_json_patch_that_removes_the_image_is_an_override() {
        let found = run(&[(
            "rm.yaml",
            "[{\"op\": \"remove\", \"path\": \"/machine/install/image\"}]",
        )]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].field, ManagedField::InstallImage);
        assert_eq!(found[0].rendered, None);
        assert_eq!(found[0].source, "rm.yaml");
    }

    #[test]
    fn writing_talosprovs_own_value_or_setting_it_back_is_no_override() {
        assert_eq!(
            run(&[("same.yaml", "machine:\n  install:\n    disk: /dev/sda\n")]),
            vec![]
        );
        assert_eq!(
            run(&[
                ("a.yaml", "machine:\n  install:\n    disk: /dev/vda\n"),
                ("b.yaml", "machine:\n  install:\n    disk: /dev/sda\n"),
            ]),
            vec![]
        );
    }
}
