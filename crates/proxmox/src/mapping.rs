//! PCI hardware mappings (`/cluster/mapping/pci`): ensure each exists with the
//! declared `map` entries and description, and update it when they differ
//! (pve-guest-common `Mapping/PCI.pm`, pve-manager `API2/Cluster/Mapping/PCI.pm`).

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::request::{Operation, Request};
use serde::Deserialize;
use std::collections::BTreeMap;

/// One `map` entry: the device on one Proxmox node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciMapEntry {
    /// The Proxmox node.
    pub node: String,
    /// PCI path with domain, lower-case hex: `0000:01:00` (all functions) or `0000:01:00.0`.
    pub path: String,
    /// Vendor and device: `10de:2507`.
    pub id: String,
    /// IOMMU group, checked at VM start.
    pub iommu_group: Option<u32>,
    /// Subsystem vendor and device, checked at VM start.
    pub subsystem_id: Option<String>,
}

impl PciMapEntry {
    /// The property string, in PVE's key order:
    /// `node=<n>,path=<p>,id=<v:d>[,iommugroup=<g>][,subsystem-id=<v:d>]`.
    pub fn property_string(&self) -> String {
        let mut s = format!(
            "node={},path={},id={}",
            self.node,
            self.path.to_lowercase(),
            self.id.to_lowercase()
        );
        if let Some(g) = self.iommu_group {
            s.push_str(&format!(",iommugroup={g}"));
        }
        if let Some(sub) = &self.subsystem_id {
            s.push_str(&format!(",subsystem-id={}", sub.to_lowercase()));
        }
        s
    }
}

impl PciMapEntry {
    /// An entry from a `map` property string as PVE returns it (keys in any
    /// order; `path` may list several functions with `;`). The PCI values are
    /// lower case with `0x` dropped, as [`normalise`] gives them; the node is
    /// as written. A missing `node`, `path` or `id` reads as empty, and an
    /// `iommugroup` that is not a number as none. Pure.
    pub fn parse(property: &str) -> PciMapEntry {
        let node = property
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == "node")
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_default();
        let mut kv = normalise(property);
        let mut take = |k: &str| kv.remove(k);
        PciMapEntry {
            node,
            path: take("path").unwrap_or_default(),
            id: take("id").unwrap_or_default(),
            iommu_group: take("iommugroup").and_then(|g| g.parse().ok()),
            subsystem_id: take("subsystem-id"),
        }
    }
}

/// A mapping as declared: its ID, description and entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciMappingSpec {
    /// The mapping ID, e.g. `gpu` (what `hostpciN=mapping=<id>` names).
    pub id: String,
    /// Shown in the web UI.
    pub description: Option<String>,
    /// One entry per node that has the device.
    pub entries: Vec<PciMapEntry>,
}

/// A mapping as PVE returns it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PciMapping {
    /// The mapping ID.
    pub id: String,
    /// The mapping's comment in Proxmox (`description`), if any.
    #[serde(default)]
    pub description: Option<String>,
    /// The `map` property strings.
    #[serde(default)]
    pub map: Vec<String>,
}

/// A property string as a key-to-value map, normalised for comparison (lower
/// case, `0x` dropped, as `assert_valid` compares).
pub fn normalise(property: &str) -> BTreeMap<String, String> {
    property
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = v.trim().to_lowercase();
            let v = v.replace("0x", "");
            (k.trim().to_string(), v)
        })
        .collect()
}

/// True when the existing mapping has the declared entries (in any order) and description.
pub fn matches(spec: &PciMappingSpec, existing: &PciMapping) -> bool {
    let mut want: Vec<_> = spec
        .entries
        .iter()
        .map(|e| normalise(&e.property_string()))
        .collect();
    let mut have: Vec<_> = existing
        .map
        .iter()
        .map(|m| {
            let mut n = normalise(m);
            n.remove("description");
            n
        })
        .collect();
    want.sort();
    have.sort();
    let description = |d: &Option<String>| d.clone().unwrap_or_default();
    want == have && description(&spec.description) == description(&existing.description)
}

fn with_body(mut r: Request, spec: &PciMappingSpec) -> Request {
    for e in &spec.entries {
        r = r.form("map", e.property_string());
    }
    if let Some(d) = &spec.description {
        r = r.form("description", d);
    }
    r
}

/// `POST /cluster/mapping/pci` request (`map` repeated, one per entry).
pub fn create_request(spec: &PciMappingSpec) -> Request {
    let r = Request::post(
        &["cluster", "mapping", "pci"],
        Operation::new(format!("create PCI mapping {}", spec.id)),
    )
    .form("id", &spec.id);
    with_body(r, spec)
}

/// `PUT /cluster/mapping/pci/{id}` request, replacing `map` and the description.
pub fn update_request(spec: &PciMappingSpec) -> Request {
    let r = Request::put(
        &["cluster", "mapping", "pci", &spec.id],
        Operation::new(format!("update PCI mapping {}", spec.id)),
    );
    let r = with_body(r, spec);
    if spec.description.is_none() {
        r.form("delete", "description")
    } else {
        r
    }
}

/// What [`ensure_mapping`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MappingOutcome {
    /// It matched.
    Present,
    /// It was created.
    Created,
    /// It differed and was updated.
    Updated,
}

/// `GET /cluster/mapping/pci/{id}`, or `None` when it does not exist
/// (500 "mapping '<id>' not found").
///
/// # Errors
/// Request errors other than not-found.
pub async fn read(client: &Client, id: &str) -> Result<Option<PciMapping>, ProxmoxError> {
    let req = Request::get(
        &["cluster", "mapping", "pci", id],
        Operation::new(format!("read PCI mapping {id}")),
    );
    match client.send(&req).await {
        Ok(v) if v.is_null() || v.as_object().is_some_and(|o| o.is_empty()) => Ok(None),
        Ok(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| ProxmoxError::Decode {
                op: req.op.clone(),
                detail: e.to_string(),
            }),
        Err(e) if e.is_not_found() || e.message().is_some_and(|m| m.contains("not found")) => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// `GET /cluster/mapping/pci` request: every mapping the caller may see.
pub fn list_request() -> Request {
    Request::get(
        &["cluster", "mapping", "pci"],
        Operation::new("list the PCI mappings"),
    )
}

/// Every PCI mapping the token may see (`Mapping.Audit`, `Mapping.Use` or
/// `Mapping.Modify`), in one request.
///
/// # Errors
/// Request errors, and an answer that is not a list of mappings.
pub async fn list(client: &Client) -> Result<Vec<PciMapping>, ProxmoxError> {
    client.send_as::<Vec<PciMapping>>(&list_request()).await
}

/// Make sure the mapping exists as declared: look, then create or update.
///
/// # Errors
/// Request errors, e.g. a missing `Mapping.Modify` (403).
pub async fn ensure_mapping(
    client: &Client,
    spec: &PciMappingSpec,
) -> Result<MappingOutcome, ProxmoxError> {
    match read(client, &spec.id).await? {
        Some(existing) if matches(spec, &existing) => Ok(MappingOutcome::Present),
        Some(_) => {
            client.send(&update_request(spec)).await?;
            Ok(MappingOutcome::Updated)
        }
        None => match client.send(&create_request(spec)).await {
            Ok(_) => Ok(MappingOutcome::Created),
            Err(e) if e.message().is_some_and(|m| m.contains("already defined")) => {
                client.send(&update_request(spec)).await?;
                Ok(MappingOutcome::Updated)
            }
            Err(e) => Err(e),
        },
    }
}

/// Delete the mapping (`DELETE /cluster/mapping/pci/{id}`); already gone is success.
///
/// # Errors
/// Request errors, e.g. a missing `Mapping.Modify` (403).
pub async fn delete_mapping(client: &Client, id: &str) -> Result<(), ProxmoxError> {
    if read(client, id).await?.is_none() {
        return Ok(());
    }
    let req = Request::delete(
        &["cluster", "mapping", "pci", id],
        Operation::new(format!("delete PCI mapping {id}")),
    );
    match client.send(&req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> PciMappingSpec {
        PciMappingSpec {
            id: "gpu".into(),
            description: Some("GeForce RTX 3050".into()),
            entries: vec![PciMapEntry {
                node: "pve1".into(),
                path: "0000:01:00".into(),
                id: "10de:2507".into(),
                iommu_group: Some(10),
                subsystem_id: Some("10de:2507".into()),
            }],
        }
    }

    #[test]
    fn map_entry_property_string_has_all_three_checked_keys() {
        assert_eq!(
            gpu().entries[0].property_string(),
            "node=pve1,path=0000:01:00,id=10de:2507,iommugroup=10,subsystem-id=10de:2507"
        );
    }

    #[test]
    fn create_sends_map_as_an_array_and_the_description() {
        let r = create_request(&gpu());
        assert_eq!(r.form_value("id"), Some("gpu"));
        assert_eq!(r.form.iter().filter(|(k, _)| k == "map").count(), 1);
        assert_eq!(r.form_value("description"), Some("GeForce RTX 3050"));
    }

    #[test]
    fn map_entries_parse_back_in_any_key_order() {
        let e = PciMapEntry::parse(
            "id=10DE:2507,iommugroup=10,node=pve1,path=0000:01:00,subsystem-id=0x10de:0x2507",
        );
        assert_eq!(e, gpu().entries[0]);
        let bare = PciMapEntry::parse("node=pve2,path=0000:02:00.0,id=8086:1533");
        assert_eq!(bare.iommu_group, None);
        assert_eq!(bare.subsystem_id, None);
        assert_eq!(bare.node, "pve2");
    }

    #[test]
    fn comparison_ignores_order_case_and_0x() {
        let existing = PciMapping {
            id: "gpu".into(),
            description: Some("GeForce RTX 3050".into()),
            map: vec![
                "id=10DE:2507,iommugroup=10,node=pve1,path=0000:01:00,subsystem-id=0x10de:0x2507"
                    .into(),
            ],
        };
        assert!(matches(&gpu(), &existing));
        let mut other = existing.clone();
        other.map = vec![
            "id=10de:2507,iommugroup=11,node=pve1,path=0000:01:00,subsystem-id=10de:2507".into(),
        ];
        assert!(!matches(&gpu(), &other));
        let mut undescribed = existing;
        undescribed.description = None;
        assert!(!matches(&gpu(), &undescribed));
    }
}
