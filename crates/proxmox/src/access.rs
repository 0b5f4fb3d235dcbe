//! The permissions preflight: from what the run will do, list every privilege it
//! needs on which ACL path (reference/proxmox.md §5), read the credentials'
//! effective privileges with `GET /access/permissions?path=`, and report every
//! missing one before anything is changed.

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::error::{MissingPrivilege, Requirement};
use crate::request::{Operation, Request};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The privileges on `/vms/<id>` (or the VM's pool) that creating, configuring,
/// starting and deleting a talosprov VM needs (qemu-server `API2/Qemu.pm`
/// `check_vm_modify_config_perm`: `ipconfig0` and `nameserver` are cloud-init
/// options, `machine`, `bios`, `scsihw` and `serial0` hardware, `agent`,
/// `boot` and `tags` options).
pub const VM_PRIVILEGES: [&str; 10] = [
    "VM.Allocate",
    "VM.Audit",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Disk",
    "VM.Config.Network",
    "VM.Config.Cloudinit",
    "VM.PowerMgmt",
];

/// Every privilege PVE 9 defines (pve-access-control `PVE/AccessControl.pm`,
/// the privilege groups of 9.0): `VM.Monitor` is gone, replaced by the
/// `VM.GuestAgent.*` privileges, and `VM.Replicate` is new.
pub const PVE9_PRIVILEGES: [&str; 47] = [
    "Datastore.Allocate",
    "Datastore.AllocateSpace",
    "Datastore.AllocateTemplate",
    "Datastore.Audit",
    "Group.Allocate",
    "Mapping.Audit",
    "Mapping.Modify",
    "Mapping.Use",
    "Permissions.Modify",
    "Pool.Allocate",
    "Pool.Audit",
    "Realm.Allocate",
    "Realm.AllocateUser",
    "SDN.Allocate",
    "SDN.Audit",
    "SDN.Use",
    "Sys.AccessNetwork",
    "Sys.Audit",
    "Sys.Console",
    "Sys.Incoming",
    "Sys.Modify",
    "Sys.PowerMgmt",
    "Sys.Syslog",
    "User.Modify",
    "VM.Allocate",
    "VM.Audit",
    "VM.Backup",
    "VM.Clone",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Cloudinit",
    "VM.Config.Disk",
    "VM.Config.HWType",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Console",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.FileRead",
    "VM.GuestAgent.FileSystemMgmt",
    "VM.GuestAgent.FileWrite",
    "VM.GuestAgent.Unrestricted",
    "VM.Migrate",
    "VM.PowerMgmt",
    "VM.Replicate",
    "VM.Snapshot",
    "VM.Snapshot.Rollback",
];

/// Whether `privilege` exists on PVE `major` (8 or 9): PVE 8 has `VM.Monitor`
/// and none of PVE 9's `VM.GuestAgent.*` and `VM.Replicate`; a role naming a
/// privilege its version lacks cannot be created (`pveum role add` refuses it).
pub fn privilege_exists(privilege: &str, major: u32) -> bool {
    if major >= 9 {
        PVE9_PRIVILEGES.contains(&privilege)
    } else {
        privilege == "VM.Monitor"
            || (PVE9_PRIVILEGES.contains(&privilege)
                && !privilege.starts_with("VM.GuestAgent.")
                && privilege != "VM.Replicate")
    }
}

/// The role the README gives a talosprov token: every privilege some
/// requirement may ask for (the first alternative of each), sorted. It exists
/// on PVE 8 and PVE 9 alike.
pub fn role_privileges() -> BTreeSet<&'static str> {
    let mut out: BTreeSet<&'static str> = VM_PRIVILEGES.into_iter().collect();
    out.extend([
        "Datastore.AllocateSpace",
        "Datastore.AllocateTemplate",
        "Datastore.Audit",
        "Mapping.Audit",
        "Mapping.Modify",
        "Mapping.Use",
        "Pool.Allocate",
        "Pool.Audit",
        "SDN.Use",
        "Sys.AccessNetwork",
        "Sys.Audit",
        "Sys.Console",
    ]);
    out
}

/// What the run will do, as far as permissions go. Plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The PVE major version (`GET /version`): 9 checks a tagged NIC's
    /// `SDN.Use` on the bridge's VLAN path.
    pub pve_major: u32,
    /// `(node, storage)` pairs that will run `download-url`.
    pub downloads: Vec<(String, String)>,
    /// The storage images are listed and imported from.
    pub image_storage: Option<String>,
    /// The storages VM disks are allocated on (system, EFI, cloud-init and
    /// data disks).
    pub datastores: Vec<String>,
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
    /// Each NIC's bridge and VLAN tag (PVE ≥ 8 checks `SDN.Use` for non-root
    /// users: on `/sdn/zones/localnetwork/<bridge>`, and on PVE 9 on
    /// `/sdn/zones/localnetwork/<bridge>/<tag>` for a tagged NIC).
    pub nics: Vec<(String, Option<u16>)>,
    /// HA resources or rules are read and written (`ha`, `proxmox.spread`):
    /// pve-ha-manager checks `Sys.Audit` (read) and `Sys.Console` (write) on
    /// `/`.
    pub ha: bool,
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
            // PVE 8.1+ takes Sys.AccessNetwork on the node (the narrower grant) instead
            // of Sys.Audit and Sys.Modify on / (API2/Storage/Status.pm download_url).
            alternatives: vec![
                vec![(format!("/nodes/{node}"), "Sys.AccessNetwork".to_string())],
                vec![
                    ("/".to_string(), "Sys.Audit".to_string()),
                    ("/".to_string(), "Sys.Modify".to_string()),
                ],
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
    let mut datastores = needs.datastores.clone();
    datastores.sort();
    datastores.dedup();
    for ds in datastores {
        out.push(Requirement::one(
            format!("/storage/{ds}"),
            "Datastore.AllocateSpace",
            format!("allocate VM disks on storage {ds}"),
        ));
    }
    if let Some(pool) = &needs.pool {
        out.push(Requirement::one(
            format!("/pool/{pool}"),
            "Pool.Audit",
            format!("read pool {pool}"),
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
    vm_requirements(needs, &mut out);
    if needs.ha {
        out.push(Requirement::one(
            "/",
            "Sys.Audit",
            "read the HA resources and rules",
        ));
        out.push(Requirement::one(
            "/",
            "Sys.Console",
            "write the HA resources and rules (ha, proxmox.spread)",
        ));
    }
    out.dedup();
    out
}

/// What managing the VMs needs: each VM's privileges (on it, or its pool),
/// the PCI mappings and the NICs' bridges.
fn vm_requirements(needs: &Needs, out: &mut Vec<Requirement>) {
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
    if !managed.is_empty() {
        out.push(Requirement::one(
            "/mapping/pci",
            "Mapping.Audit",
            "read the PCI mappings",
        ));
    }
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
    let mut nics = needs.nics.clone();
    nics.sort();
    nics.dedup();
    for (bridge, tag) in nics {
        let (path, what) = match tag {
            Some(tag) if needs.pve_major >= 9 => (
                format!("/sdn/zones/localnetwork/{bridge}/{tag}"),
                format!("connect VMs to bridge {bridge} with VLAN {tag}"),
            ),
            _ => (
                format!("/sdn/zones/localnetwork/{bridge}"),
                format!("connect VMs to bridge {bridge}"),
            ),
        };
        out.push(Requirement::one(path, "SDN.Use", what));
    }
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
    if needs == &Needs::default() {
        return Ok(());
    }
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
        Err(ProxmoxError::MissingPrivileges {
            missing,
            grantee: client.grantee(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs() -> Needs {
        Needs {
            pve_major: 9,
            downloads: vec![("pve1".into(), "local".into())],
            image_storage: Some("local".into()),
            datastores: vec!["local-lvm".into()],
            vms: vec![123],
            pool: Some("TALOS".into()),
            create_pool: true,
            mappings_used: vec!["gpu".into()],
            mappings_managed: vec![],
            nics: vec![("vmbr0".into(), None)],
            ha: false,
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
        grant(&mut held, "/pool/TALOS", &["Pool.Allocate", "Pool.Audit"]);
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
            &"Sys.AccessNetwork on /nodes/pve1, or Sys.Audit and Sys.Modify on / (to download images to storage local on node pve1)"
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
    fn a_tagged_nic_needs_sdn_use_on_its_vlan_on_pve9_only() {
        let tagged = |major| Needs {
            pve_major: major,
            nics: vec![("vmbr1".into(), Some(40)), ("vmbr0".into(), None)],
            ..Needs::default()
        };
        let paths = |n: &Needs| -> Vec<String> {
            requirements(n)
                .iter()
                .map(|r| r.alternatives[0][0].0.clone())
                .collect()
        };
        assert_eq!(
            paths(&tagged(9)),
            [
                "/sdn/zones/localnetwork/vmbr0",
                "/sdn/zones/localnetwork/vmbr1/40"
            ]
        );
        assert_eq!(
            paths(&tagged(8)),
            [
                "/sdn/zones/localnetwork/vmbr0",
                "/sdn/zones/localnetwork/vmbr1"
            ]
        );
    }

    #[test]
    fn the_role_holds_every_privilege_asked_for_and_exists_on_pve8_and_pve9() {
        let mut all = needs();
        all.mappings_managed = vec!["gpu".into()];
        all.nics.push(("vmbr1".into(), Some(40)));
        all.ha = true;
        let asked: BTreeSet<String> = requirements(&all)
            .iter()
            .flat_map(|r| r.alternatives[0].iter().map(|(_, p)| p.clone()))
            .collect();
        let role: BTreeSet<String> = role_privileges().iter().map(|p| p.to_string()).collect();
        assert_eq!(asked, role);
        for p in role_privileges() {
            assert!(privilege_exists(p, 8) && privilege_exists(p, 9), "{p}");
        }
        assert!(privilege_exists("VM.Monitor", 8) && !privilege_exists("VM.Monitor", 9));
        assert!(!privilege_exists("VM.GuestAgent.Audit", 8));
    }

    #[test]
    fn missing_privileges_say_how_to_grant_them() {
        let e = ProxmoxError::MissingPrivileges {
            missing: missing(&requirements(&needs()), &BTreeMap::new())
                .into_iter()
                .filter(|m| m.purpose.contains("local-lvm"))
                .collect(),
            grantee: "--users ci@pve --tokens 'ci@pve!talos'".into(),
        };
        assert_eq!(
            e.to_string(),
            "the Proxmox credentials lack 1 privilege(s) the plan needs (nothing was changed):\n  \
             - Datastore.AllocateSpace on /storage/local-lvm (to allocate VM disks on storage \
             local-lvm)\n    grant it: pveum acl modify /storage/local-lvm --users ci@pve \
             --tokens 'ci@pve!talos' --roles Talosprov"
        );
    }

    #[test]
    fn privileges_are_the_keys_of_every_entry() {
        let answer = serde_json::json!({"/": {"Sys.Audit": 1}, "/storage": {"Datastore.Audit": 0}});
        let p = privileges_of(&answer);
        assert!(p.contains("Sys.Audit") && p.contains("Datastore.Audit"));
    }
}
