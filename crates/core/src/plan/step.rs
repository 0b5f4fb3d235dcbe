//! A change as apply's step takes it: one variant per resource kind and
//! action, holding the typed values that step needs. [`Change::step`] is the
//! one place that checks a change carries them, so that an executor step
//! cannot receive the wrong payload, and reading a plan refuses one that
//! does not carry them.

use crate::state::format::PciMapping;
use crate::state::{Address, ObjectAddress};
use crate::topology::Role;

use super::model::{Action, Change};
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
        role: Option<Role>,
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
        role: Option<Role>,
    },
    /// Upgrade Talos on a node (then its config, if it changed too).
    Upgrade {
        /// The node's hostname.
        host: &'a str,
        /// The config and the installer.
        config: &'a PlannedConfig,
        /// The node's role.
        role: Option<Role>,
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

/// A change apply cannot run: an action its kind does not have, or the
/// values its step needs missing (a plan not made by planning).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address}: {problem}; run `talosprov plan` again")]
pub struct StepError {
    /// The change's address.
    pub address: Address,
    /// What is wrong.
    pub problem: String,
}

impl Change {
    /// This change as its step takes it.
    ///
    /// # Errors
    /// [`StepError`] for an action the address's kind does not have, or a
    /// change that does not carry the values its step sends.
    pub fn step(&self) -> Result<Step<'_>, StepError> {
        let missing = |what: &str| StepError {
            address: self.address.clone(),
            problem: format!(
                "the plan does not carry the {what} to {} it (made by another talosprov?)",
                self.action.as_str()
            ),
        };
        let vm = || self.vm.as_ref().ok_or_else(|| missing("VM"));
        let config = || {
            self.config
                .as_ref()
                .ok_or_else(|| missing("machine config"))
        };
        let object = || self.object.as_ref().ok_or_else(|| missing("object"));
        let role = self.role;
        Ok(match (&self.address, self.action) {
            (Address::Image(name), Action::Create) => Step::CreateImage {
                name,
                image: self.image.as_ref().ok_or_else(|| missing("image"))?,
            },
            (Address::Image(name), Action::Delete) => Step::DeleteImage { name },
            (Address::Pool(name), Action::Create) => Step::CreatePool { name },
            (Address::Pool(name), Action::Delete) => Step::DeletePool { name },
            (Address::PciMapping(name), Action::Create | Action::Update) => Step::WriteMapping {
                name,
                mapping: self
                    .pci_mapping
                    .as_ref()
                    .ok_or_else(|| missing("PCI mapping"))?,
            },
            (Address::PciMapping(name), Action::Delete) => Step::DeleteMapping { name },
            (Address::Vm(host), Action::Create) => Step::CreateVm { host, vm: vm()? },
            (Address::Vm(host), Action::Update) => Step::UpdateVm { host, vm: vm()? },
            (Address::Vm(host), Action::Replace) => Step::ReplaceVm {
                host,
                vm: vm()?,
                role,
            },
            (Address::Vm(host), Action::Delete) => Step::DeleteVm { host, role },
            (Address::Config(host), Action::ApplyConfig) => Step::ApplyConfig {
                host,
                config: config()?,
                role,
            },
            (Address::Config(host), Action::Upgrade) => Step::Upgrade {
                host,
                config: config()?,
                role,
            },
            (Address::Bootstrap, Action::Bootstrap) => Step::Bootstrap,
            (Address::Kubeconfig, Action::Create) => Step::Kubeconfig,
            (Address::Object(o), Action::Create | Action::Update) => Step::ApplyObject {
                object: o,
                planned: object()?,
            },
            (Address::Object(o), Action::Delete) => Step::PruneObject {
                object: o,
                planned: object()?,
            },
            (
                Address::Image(_) | Address::Pool(_),
                Action::Update
                | Action::Replace
                | Action::ApplyConfig
                | Action::Upgrade
                | Action::Bootstrap,
            )
            | (
                Address::PciMapping(_),
                Action::Replace | Action::ApplyConfig | Action::Upgrade | Action::Bootstrap,
            )
            | (Address::Vm(_), Action::ApplyConfig | Action::Upgrade | Action::Bootstrap)
            | (
                Address::Config(_),
                Action::Create
                | Action::Update
                | Action::Replace
                | Action::Delete
                | Action::Bootstrap,
            )
            | (
                Address::Bootstrap,
                Action::Create
                | Action::Update
                | Action::Replace
                | Action::Delete
                | Action::ApplyConfig
                | Action::Upgrade,
            )
            | (
                Address::Kubeconfig,
                Action::Update
                | Action::Replace
                | Action::Delete
                | Action::ApplyConfig
                | Action::Upgrade
                | Action::Bootstrap,
            )
            | (
                Address::Object(_),
                Action::Replace | Action::ApplyConfig | Action::Upgrade | Action::Bootstrap,
            ) => {
                return Err(StepError {
                    address: self.address.clone(),
                    problem: format!(
                        "`{}` is not an action apply takes on it",
                        self.action.as_str()
                    ),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_without_the_values_its_step_sends_is_refused_naming_them() {
        let c = Change::new(Address::Vm("wk-1".into()), Action::Create, "new");
        let e = c.step().expect_err("no VM");
        assert_eq!(
            e.to_string(),
            "vm/wk-1: the plan does not carry the VM to create it (made by another \
             talosprov?); run `talosprov plan` again"
        );
        let c = Change::new(Address::Config("wk-1".into()), Action::Upgrade, "v1.14");
        assert!(c.step().unwrap_err().problem.contains("machine config"));
        // A delete needs nothing but the address.
        let c = Change::new(Address::Vm("wk-1".into()), Action::Delete, "gone");
        assert_eq!(
            c.step(),
            Ok(Step::DeleteVm {
                host: "wk-1",
                role: None
            })
        );
    }

    #[test]
    fn an_action_the_kind_does_not_have_is_refused() {
        let c = Change::new(Address::Pool("talos".into()), Action::Upgrade, "?");
        assert_eq!(
            c.step().unwrap_err().to_string(),
            "pool/talos: `upgrade` is not an action apply takes on it; run `talosprov plan` again"
        );
        assert_eq!(
            Change::new(Address::Bootstrap, Action::Bootstrap, "").step(),
            Ok(Step::Bootstrap)
        );
    }
}
