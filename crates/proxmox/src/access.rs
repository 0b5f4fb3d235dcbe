//! The permissions preflight: from what the run will do, list every privilege it
//! needs on which ACL path (reference/proxmox.md §5), read the credentials'
//! effective privileges with `GET /access/permissions?path=`, and report every
//! missing one before anything is changed.

use crate::client::Client;
use crate::error::ProxmoxError;
pub use crate::error::{MissingPrivilege, Requirement};
use crate::request::{Operation, Request};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The privileges on `/vms/<id>` (or the VM's pool) that creating, configuring,
/// starting and deleting a talosprov VM needs.
pub const VM_PRIVILEGES: [&str; 9] = [
    "VM.Allocate",
    "VM.Audit",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Disk",
    "VM.Config.Network",
    "VM.PowerMgmt",
];

/// What the run will do, as far as permissions go. Plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// `(node, storage)` pairs that will run `download-url`.
    pub downloads: Vec<(String, String)>,
    /// The storage images are listed and imported from.
    pub image_storage: Option<String>,
    /// The storage VM disks are allocated on.
    pub datastore: Option<String>,
    /// vmids that will be created, changed or deleted.
    pub vms: Vec<u32>,
    /// The pool the VMs are in (VM privileges may come from it).
    pub pool: Option<String>,
    /// The pool will be created.
    pub create_pool: bool,
    /// PCI mappings attached to VMs (`hostpciN=mapping=<id>`).
    pub mappings_used: Vec<String>,
    /// PCI mappings created or updated.
    pub mappings_managed: Vec<String>,
    /// Bridges of `net0` (PVE ≥ 8 checks `SDN.Use` for non-root users).
    pub bridges: Vec<String>,
}

impl Requirement {
    fn one(path: impl Into<String>, privilege: &str, purpose: impl Into<String>) -> Self {
        Requirement {
            alternatives: vec![vec![(path.into(), privilege.to_string())]],
            purpose: purpose.into(),
        }
    }

    /// True when `held` (path to privileges) meets one alternative.
    pub fn is_met(&self, held: &BTreeMap<String, BTreeSet<String>>) -> bool {
        self.alternatives.iter().any(|alt| {
            alt.iter()
                .all(|(path, privilege)| held.get(path).is_some_and(|p| p.contains(privilege)))
        })
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alternatives: Vec<String> = self
            .alternatives
            .iter()
            .map(|alt| {
                let mut by_path: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
                for (path, privilege) in alt {
                    by_path.entry(path).or_default().push(privilege);
                }
                by_path
                    .into_iter()
                    .map(|(path, privs)| format!("{} on {path}", privs.join(" and ")))
                    .collect::<Vec<_>>()
                    .join(" and ")
            })
            .collect();
        write!(f, "{} (to {})", alternatives.join(", or "), self.purpose)
    }
}

/// Every requirement for these needs, in a stable order. Pure.
pub fn requirements(needs: &Needs) -> Vec<Requirement> {
    let mut out = Vec::new();
    let mut downloads: Vec<_> = needs.downloads.clone();
    downloads.sort();
    downloads.dedup();
    for (node, storage) in &downloads {
        let purpose = format!("download images to storage {storage} on node {node}");
        out.push(Requirement::one(
            format!("/storage/{storage}"),
            "Datastore.AllocateTemplate",
            purpose.clone(),
        ));
        out.push(Requirement {
            alternatives: vec![
                vec![
                    ("/".to_string(), "Sys.Audit".to_string()),
                    ("/".to_string(), "Sys.Modify".to_string()),
                ],
                vec![(format!("/nodes/{node}"), "Sys.AccessNetwork".to_string())],
            ],
            purpose,
        });
    }
    if let Some(storage) = &needs.image_storage {
        let path = format!("/storage/{storage}");
        out.push(Requirement {
            alternatives: vec![
                vec![(path.clone(), "Datastore.Audit".to_string())],
                vec![(path, "Datastore.AllocateSpace".to_string())],
            ],
            purpose: format!("list and import images on storage {storage}"),
        });
    }
    if let Some(ds) = &needs.datastore {
        out.push(Requirement::one(
            format!("/storage/{ds}"),
            "Datastore.AllocateSpace",
            format!("allocate VM disks on storage {ds}"),
        ));
    }
    if needs.create_pool
        && let Some(pool) = &needs.pool
    {
        out.push(Requirement::one(
            format!("/pool/{pool}"),
            "Pool.Allocate",
            format!("create pool {pool}"),
        ));
    }
    let mut vms = needs.vms.clone();
    vms.sort_unstable();
    vms.dedup();
    for vmid in vms {
        for privilege in VM_PRIVILEGES {
            let mut alternatives = vec![vec![(format!("/vms/{vmid}"), privilege.to_string())]];
            if let Some(pool) = &needs.pool {
                alternatives.push(vec![(format!("/pool/{pool}"), privilege.to_string())]);
            }
            out.push(Requirement {
                alternatives,
                purpose: format!("manage VM {vmid}"),
            });
        }
    }
    let mut managed = needs.mappings_managed.clone();
    managed.sort();
    managed.dedup();
    for id in managed {
        out.push(Requirement::one(
            "/mapping/pci",
            "Mapping.Modify",
            format!("create or update PCI mapping {id}"),
        ));
    }
    let mut used = needs.mappings_used.clone();
    used.sort();
    used.dedup();
    for id in used {
        out.push(Requirement::one(
            format!("/mapping/pci/{id}"),
            "Mapping.Use",
            format!("attach PCI mapping {id} to VMs"),
        ));
    }
    let mut bridges = needs.bridges.clone();
    bridges.sort();
    bridges.dedup();
    for bridge in bridges {
        out.push(Requirement::one(
            format!("/sdn/zones/localnetwork/{bridge}"),
            "SDN.Use",
            format!("connect VMs to bridge {bridge}"),
        ));
    }
    out.dedup();
    out
}

/// The requirements `held` does not meet. Pure.
pub fn missing(
    reqs: &[Requirement],
    held: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<MissingPrivilege> {
    reqs.iter().filter(|r| !r.is_met(held)).cloned().collect()
}

/// `GET /access/permissions?path=<path>` request.
pub fn permissions_request(path: &str) -> Request {
    Request::get(
        &["access", "permissions"],
        Operation::new(format!("read permissions on {path}")),
    )
    .query("path", path)
}

/// The privileges an answer grants: the union over its entries (PVE answers
/// `{path: {priv: propagate}}` for the asked path; the key's presence is what counts).
pub fn privileges_of(answer: &Value) -> BTreeSet<String> {
    answer
        .as_object()
        .map(|paths| {
            paths
                .values()
                .filter_map(Value::as_object)
                .flat_map(|privs| privs.keys().cloned())
                .collect()
        })
        .unwrap_or_default()
}

/// Check the credentials against everything `needs` implies; nothing is changed.
///
/// # Errors
/// [`ProxmoxError::MissingPrivileges`] listing every missing privilege with its
/// path and purpose; request errors.
pub async fn preflight(client: &Client, needs: &Needs) -> Result<(), ProxmoxError> {
    let reqs = requirements(needs);
    let paths: BTreeSet<String> = reqs
        .iter()
        .flat_map(|r| r.alternatives.iter().flatten().map(|(p, _)| p.clone()))
        .collect();
    let mut held = BTreeMap::new();
    for path in paths {
        let answer = client.send(&permissions_request(&path)).await?;
        held.insert(path, privileges_of(&answer));
    }
    let missing = missing(&reqs, &held);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ProxmoxError::MissingPrivileges(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> Needs {
        Needs {
            downloads: vec![("pve1".into(), "local".into())],
            image_storage: Some("local".into()),
            datastore: Some("local-lvm".into()),
            vms: vec![123],
            pool: Some("TALOS".into()),
            create_pool: true,
            mappings_used: vec!["gpu".into()],
            mappings_managed: vec![],
            bridges: vec!["vmbr0".into()],
        }
    }

    fn grant(held: &mut BTreeMap<String, BTreeSet<String>>, path: &str, privs: &[&str]) {
        held.entry(path.into())
            .or_default()
            .extend(privs.iter().map(|p| p.to_string()));
    }

    #[test]
    fn missing_mapping_use_is_named_with_its_path() {
        let mut held = BTreeMap::new();
        grant(
            &mut held,
            "/storage/local",
            &["Datastore.AllocateTemplate", "Datastore.Audit"],
        );
        grant(&mut held, "/nodes/pve1", &["Sys.AccessNetwork"]);
        grant(
            &mut held,
            "/storage/local-lvm",
            &["Datastore.AllocateSpace"],
        );
        grant(&mut held, "/pool/TALOS", &VM_PRIVILEGES);
        grant(&mut held, "/pool/TALOS", &["Pool.Allocate"]);
        grant(&mut held, "/sdn/zones/localnetwork/vmbr0", &["SDN.Use"]);
        let m = missing(&requirements(&needs()), &held);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[0].to_string(),
            "Mapping.Use on /mapping/pci/gpu (to attach PCI mapping gpu to VMs)"
        );
    }

    #[test]
    fn download_alternatives_are_shown_together() {
        let m = missing(&requirements(&needs()), &BTreeMap::new());
        let text: Vec<String> = m.iter().map(ToString::to_string).collect();
        assert!(text.contains(
            &"Sys.Audit and Sys.Modify on /, or Sys.AccessNetwork on /nodes/pve1 (to download images to storage local on node pve1)"
                .to_string()
        ), "{text:#?}");
        assert!(
            text.contains(
                &"VM.Allocate on /vms/123, or VM.Allocate on /pool/TALOS (to manage VM 123)"
                    .to_string()
            )
        );
    }

    #[test]
    fn privileges_are_the_keys_of_every_entry() {
        let answer = serde_json::json!({"/": {"Sys.Audit": 1}, "/storage": {"Datastore.Audit": 0}});
        let p = privileges_of(&answer);
        assert!(p.contains("Sys.Audit") && p.contains("Datastore.Audit"));
    }
}
