//! The Talos images (`image/<schematic8>-<version>`) Proxmox downloads
//! from the Image Factory (`download-url`) for the VMs created from them.

use std::collections::BTreeSet;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::State;

use crate::change::{Action, Change, ImageOp};
use crate::desired::Desired;
use crate::field::Field;
use crate::model::field;
use crate::ownership;
use crate::planned::PlannedImage;

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The `image/<name>` kind.
#[derive(Debug, Clone, Copy)]
pub struct Image;

impl ResourceKind for Image {
    type Op = ImageOp;

    fn action(op: &ImageOp) -> Action {
        match op {
            ImageOp::Create(_) => Action::Create,
            ImageOp::Delete => Action::Delete,
        }
    }

    fn phase(op: &ImageOp) -> Phase {
        match op {
            ImageOp::Create(_) => Phase::Provision,
            ImageOp::Delete => Phase::ProvisionDeletes,
        }
    }

    /// Reads the VMs planned before it ([`Planning::fresh_vms`]).
    fn plan(p: &mut Planning<'_>) {
        plan_images(p.desired, p.state, &p.fresh_vms, &mut p.changes);
    }

    /// The recorded images go only with `--purge-images` (they are the
    /// storage's, shared by clusters of the same version).
    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>) {
        if d.purge_images {
            for (name, image) in &d.state.resources.images {
                let volid = field(Field::Volid, Some(&image.volid), None);
                changes.push(
                    Change::image(name.clone(), ImageOp::Delete, "--purge-images")
                        .with_fields(vec![volid]),
                );
            }
        }
        ownership::leftover_deletes(d.state, |a| matches!(a, Address::Image(_)), changes);
    }
}

/// The image downloads: an image is downloaded for the VMs created from it;
/// a node upgraded in place keeps its disk, so a new version's image waits
/// for a new node.
fn plan_images(
    d: &Desired,
    state: &State,
    fresh_vms: &BTreeSet<String>,
    changes: &mut Vec<Change>,
) {
    let needed: BTreeSet<&str> = d
        .vms
        .iter()
        .filter(|(host, _)| fresh_vms.contains(host.as_str()))
        .map(|(_, vm)| vm.image.as_str())
        .collect();
    for (name, image) in &d.images {
        if !state.resources.images.contains_key(name) && needed.contains(name.as_str()) {
            let address = Address::Image(name.clone());
            let started = if state.intent(&address).is_some() {
                " (an interrupted apply started it: a download still running is waited for)"
            } else {
                ""
            };
            let planned = PlannedImage {
                record: image.record.clone(),
                factory_url: d.factory_url.clone(),
            };
            let reason = format!(
                "download Talos {} ({}) to {} on {}{started}",
                image.record.talos_version,
                short(&image.record.schematic_id),
                image.record.storage,
                image.record.node
            );
            let volid = field(Field::Volid, None, Some(&image.record.volid));
            changes.push(
                Change::image(name.clone(), ImageOp::Create(planned), reason)
                    .with_fields(vec![volid]),
            );
        }
    }
    // Downloads an interrupted apply started for VMs that are no longer to
    // be made: deleted once their task ends, so nothing is left unrecorded.
    for (address, _) in state.intents() {
        if let Address::Image(name) = &address
            && !state.resources.images.contains_key(name)
            && !changes.iter().any(|c| *c.address() == address)
        {
            changes.push(Change::image(
                name.clone(),
                ImageOp::Delete,
                ownership::leftover(None),
            ));
        }
    }
}

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}
