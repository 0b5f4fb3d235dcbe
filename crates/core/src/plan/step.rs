//! A change as apply's step takes it: one variant per resource kind and
//! action, the address's name beside the typed values that step needs
//! ([`Change::step`]). A change always carries them (it is made per kind,
//! and reading a plan refuses one that does not: [`super::StepError`]).

use crate::state::format::PciMapping;
use crate::state::{Address, ObjectAddress};
use crate::topology::Role;

use super::change::{Change, ConfigOp, ImageOp, MappingOp, ObjectOp, Op, PoolOp, VmOp};
use super::planned::{PlannedConfig, PlannedImage, PlannedObject, PlannedVm};

/// What apply does for one change, with the values it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// Download a Talos image (`image/<name>` create).
    CreateImage {
        /// The name part of the address.
        name: &'a str,
        /// The image and where it goes.
        image: &'a PlannedImage,
    },
    /// Delete a downloaded image.
    DeleteImage {
        /// The name part of the address.
        name: &'a str,
    },
    /// Create the resource pool.
    CreatePool {
        /// The pool.
        name: &'a str,
    },
    /// Delete the resource pool.
    DeletePool {
        /// The pool.
        name: &'a str,
    },
    /// Create or update a PCI mapping.
    WriteMapping {
        /// The mapping's name.
        name: &'a str,
        /// Its entries as apply writes them.
        mapping: &'a PciMapping,
    },
    /// Delete a PCI mapping.
    DeleteMapping {
        /// The mapping's name.
        name: &'a str,
    },
    /// Create and start a VM.
    CreateVm {
        /// The node's hostname.
        host: &'a str,
        /// The VM apply makes.
        vm: &'a PlannedVm,
    },
    /// Change a VM in place (restarting it through Proxmox when a field
    /// needs it).
    UpdateVm {
        /// The node's hostname.
        host: &'a str,
        /// The VM as it should be.
        vm: &'a PlannedVm,
    },
    /// Delete a VM and create it again (another vmid or host).
    ReplaceVm {
        /// The node's hostname.
        host: &'a str,
        /// The VM apply makes.
        vm: &'a PlannedVm,
        /// The node's role (a control plane leaves etcd first).
        role: Role,
    },
    /// Delete a VM (its node leaves the cluster).
    DeleteVm {
        /// The node's hostname.
        host: &'a str,
        /// The node's role, from the state (a control plane leaves etcd).
        role: Option<Role>,
    },
    /// Send a machine config (or roll the node's Kubernetes version).
    ApplyConfig {
        /// The node's hostname.
        host: &'a str,
        /// The config and how it is sent.
        config: &'a PlannedConfig,
        /// The node's role.
        role: Role,
    },
    /// Upgrade Talos on a node (then its config, if it changed too).
    Upgrade {
        /// The node's hostname.
        host: &'a str,
        /// The config and the installer.
        config: &'a PlannedConfig,
        /// The node's role.
        role: Role,
    },
    /// Bootstrap etcd on the first control plane.
    Bootstrap,
    /// Fetch the admin kubeconfig.
    Kubeconfig,
    /// Server-side apply an add-on's object (create or update).
    ApplyObject {
        /// The object.
        object: &'a ObjectAddress,
        /// What apply sends.
        planned: &'a PlannedObject,
    },
    /// Delete an add-on's object that left its add-on (prune).
    PruneObject {
        /// The object.
        object: &'a ObjectAddress,
        /// What was applied, to find it.
        planned: &'a PlannedObject,
    },
}

impl Change {
    /// This change as its step takes it: the address's name beside the
    /// op's payload. Every change has one ([`Change`] is made per kind).
    pub fn step(&self) -> Step<'_> {
        match (self.address(), self.op()) {
            (Address::Image(name), Op::Image(ImageOp::Create(image))) => {
                Step::CreateImage { name, image }
            }
            (Address::Image(name), Op::Image(ImageOp::Delete)) => Step::DeleteImage { name },
            (Address::Pool(name), Op::Pool(PoolOp::Create)) => Step::CreatePool { name },
            (Address::Pool(name), Op::Pool(PoolOp::Delete)) => Step::DeletePool { name },
            (
                Address::PciMapping(name),
                Op::PciMapping(MappingOp::Create(mapping) | MappingOp::Update(mapping)),
            ) => Step::WriteMapping { name, mapping },
            (Address::PciMapping(name), Op::PciMapping(MappingOp::Delete)) => {
                Step::DeleteMapping { name }
            }
            (Address::Vm(host), Op::Vm(VmOp::Create { vm, .. })) => Step::CreateVm { host, vm },
            (Address::Vm(host), Op::Vm(VmOp::Update { vm, .. })) => Step::UpdateVm { host, vm },
            (Address::Vm(host), Op::Vm(VmOp::Replace { vm, role })) => Step::ReplaceVm {
                host,
                vm,
                role: *role,
            },
            (Address::Vm(host), Op::Vm(VmOp::Delete { role })) => {
                Step::DeleteVm { host, role: *role }
            }
            (Address::Config(host), Op::Config(ConfigOp::ApplyConfig { config, role })) => {
                Step::ApplyConfig {
                    host,
                    config,
                    role: *role,
                }
            }
            (Address::Config(host), Op::Config(ConfigOp::Upgrade { config, role })) => {
                Step::Upgrade {
                    host,
                    config,
                    role: *role,
                }
            }
            (Address::Bootstrap, Op::Bootstrap) => Step::Bootstrap,
            (Address::Kubeconfig, Op::Kubeconfig) => Step::Kubeconfig,
            (
                Address::Object(object),
                Op::Object(ObjectOp::Create(planned) | ObjectOp::Update(planned)),
            ) => Step::ApplyObject { object, planned },
            (Address::Object(object), Op::Object(ObjectOp::Delete(planned))) => {
                Step::PruneObject { object, planned }
            }
            (
                Address::Image(_)
                | Address::Pool(_)
                | Address::PciMapping(_)
                | Address::Vm(_)
                | Address::Config(_)
                | Address::Bootstrap
                | Address::Kubeconfig
                | Address::Object(_),
                _,
            ) => unreachable!("a change's address is of its op's kind (made per kind)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, PlanFormatError};

    fn read(change: serde_json::Value) -> Result<Plan, PlanFormatError> {
        let mut plan = serde_json::to_value(Plan::of_changes(Vec::new())).unwrap();
        plan["changes"] = serde_json::json!([change]);
        Plan::from_json(plan.to_string().as_bytes())
    }

    #[test]
    fn a_change_without_the_values_its_step_sends_is_refused_naming_them() {
        let e = read(serde_json::json!({
            "address": "vm/wk-1", "action": "create", "reason": "new", "role": "worker"
        }))
        .expect_err("no VM");
        assert!(
            e.to_string().contains(
                "vm/wk-1: the plan does not carry the VM to create it (made by another \
                 talosprov?); run `talosprov plan` again"
            ),
            "{e}"
        );
        let e = read(serde_json::json!({
            "address": "config/wk-1", "action": "upgrade", "reason": "v1.14", "role": "worker"
        }))
        .unwrap_err();
        assert!(e.to_string().contains("machine config"), "{e}");
        // A delete needs nothing but the address.
        let p = read(serde_json::json!({
            "address": "vm/wk-1", "action": "delete", "reason": "gone"
        }))
        .unwrap();
        assert_eq!(
            p.changes[0].step(),
            Step::DeleteVm {
                host: "wk-1",
                role: None
            }
        );
    }

    #[test]
    fn an_action_the_kind_does_not_have_or_a_payload_it_does_not_send_is_refused() {
        let e = read(serde_json::json!({
            "address": "pool/talos", "action": "upgrade", "reason": "?"
        }))
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "pool/talos: `upgrade` is not an action apply takes on it; run `talosprov plan` again"
            ),
            "{e}"
        );
        let e = read(serde_json::json!({
            "address": "pool/talos", "action": "delete", "reason": "?",
            "object": {"api_version": "v1", "digest": "ab"}
        }))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("the plan carries a object, which `delete` does not send"),
            "{e}"
        );
        assert_eq!(Change::bootstrap("").step(), Step::Bootstrap);
    }

    #[test]
    fn each_op_reads_back_as_it_was_written() {
        let changes = vec![
            Change::pool("talos", PoolOp::Create, "new"),
            Change::pci_mapping("gpu", MappingOp::Delete, "gone"),
            Change::vm(
                "wk-1",
                VmOp::Delete {
                    role: Some(Role::Worker),
                },
                "gone",
            ),
            Change::bootstrap("etcd"),
            Change::kubeconfig("admin"),
        ];
        let plan = Plan::of_changes(changes);
        assert_eq!(Plan::from_json(plan.to_json().as_bytes()).unwrap(), plan);
    }
}
