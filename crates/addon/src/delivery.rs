//! The rendered add-ons as the objects server-side apply sends (pure): each
//! object as JSON, addressed by add-on, group, kind, namespace and name, with
//! the add-ons its add-on depends on.

use std::collections::BTreeMap;

use super::object::DesiredObject;
use talosprov_statefile::address::ObjectAddress;
use talosprov_topology::model::Topology;

use crate::manifests::RenderedAddon;

/// Every object of `rendered`, by address. An object that is not a JSON
/// object once converted (YAML with non-string keys, which validation
/// refuses) is left out.
pub fn desired_objects(
    topology: &Topology,
    rendered: &[RenderedAddon],
) -> BTreeMap<ObjectAddress, DesiredObject> {
    let mut out = BTreeMap::new();
    for addon in rendered {
        let after = topology
            .addons
            .get(&addon.name)
            .map(|a| a.depends_on.clone())
            .unwrap_or_default();
        for o in &addon.objects {
            let Ok(body) = serde_json::to_value(&o.body) else {
                continue;
            };
            if !body.is_object() {
                continue;
            }
            let address = ObjectAddress::new(
                &addon.name,
                &o.api_version,
                &o.kind,
                o.namespace.as_deref(),
                &o.name,
            );
            out.insert(
                address,
                DesiredObject::new(&o.api_version, body, Vec::clone(&after)),
            );
        }
    }
    out
}
