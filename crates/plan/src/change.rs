//! A [`Change`]: what happens to one resource ([`Op`]: one variant per
//! resource kind, each holding the resource's name and its own action with
//! the typed values apply sends), and how the plan shows it (reason,
//! fields, diff, dependencies).
//!
//! The kind is named once, by the op: the change's address is derived from
//! it, and each kind's step in the engine takes its own variant, so the
//! executor cannot receive another kind's payload. The saved plan file
//! holds changes as serde writes them; `plan -json` prints the documented
//! view of them ([`super::view`]).

use serde::{Deserialize, Serialize};

use talosprov_base::role::Role;
use talosprov_statefile::address::{Address, ObjectAddress};
use talosprov_statefile::format::{HaRule, PciMapping};

use super::field::Field;
use super::planned::{
    ApplyMode, KubernetesChange, PlannedConfig, PlannedImage, PlannedObject, PlannedVm,
};

/// The small vocabulary of what a change does (OpenTofu's `plans.Action`, plus
/// the Talos operations); [`Op::action`] gives it for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Make a resource that does not exist (`+`).
    Create,
    /// Change a resource in place (`~`).
    Update,
    /// Delete and create again (`-/+`): a VM moved to another vmid or host.
    Replace,
    /// Remove a resource (`-`).
    Delete,
    /// Send a machine config with ApplyConfiguration (`~`).
    ApplyConfig,
    /// Upgrade Talos on a node to another version or schematic (`~`).
    Upgrade,
    /// Bootstrap etcd on the first control plane (`+`), once per cluster.
    Bootstrap,
}

impl Action {
    /// OpenTofu's mark: `+`, `~`, `-`, `-/+`.
    pub fn mark(self) -> &'static str {
        match self {
            Action::Create | Action::Bootstrap => "+",
            Action::Update | Action::ApplyConfig | Action::Upgrade => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }

    /// The action's name as the JSON format spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Replace => "replace",
            Action::Delete => "delete",
            Action::ApplyConfig => "apply-config",
            Action::Upgrade => "upgrade",
            Action::Bootstrap => "bootstrap",
        }
    }
}

/// What a change does to its resource, by kind: the resource's name and
/// the kind's action with the values apply sends. The change's address is
/// derived from it ([`Op::address`]), so the kind is named once.
///
/// The saved plan file holds it as serde writes it (`{"vm": {"host": …,
/// "op": {"create": {…}}}}`), so reading a file back gives each kind only
/// the actions and payloads it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// `image/<name>`: a Talos image on a Proxmox storage.
    Image {
        /// `<schematic8>-<version>`, with `-<node>` on a local storage.
        name: String,
        /// What happens to it.
        op: ImageOp,
    },
    /// `pool/<name>`: the resource pool.
    Pool {
        /// The pool's ID.
        name: String,
        /// What happens to it.
        op: PoolOp,
    },
    /// `pci_mapping/<name>`: a cluster-wide PCI hardware mapping.
    PciMapping {
        /// The mapping's ID.
        name: String,
        /// What happens to it.
        op: MappingOp,
    },
    /// `vm/<host>`: a node's VM.
    Vm {
        /// The node's hostname.
        host: String,
        /// What happens to it.
        op: VmOp,
    },
    /// `ha_rule/<entry>`: the HA rule keeping a spread group's VMs apart.
    HaRule {
        /// The `proxmox.spread` entry.
        entry: String,
        /// What happens to it.
        op: HaRuleOp,
    },
    /// `config/<host>`: a node's machine config or Talos version.
    Config {
        /// The node's hostname.
        host: String,
        /// What happens to it.
        op: ConfigOp,
    },
    /// `bootstrap`: etcd bootstrapped on the first control plane (Talos
    /// `Bootstrap`), once per cluster.
    Bootstrap,
    /// `kubeconfig`: the admin kubeconfig fetched through the Talos API
    /// (created), or fetched again before its client certificate expires.
    Kubeconfig {
        /// Fetched or renewed.
        op: KubeconfigOp,
    },
    /// `talosconfig`: the state's talosconfig issued again from the OS CA
    /// before its admin client certificate expires.
    Talosconfig,
    /// `addon/<addon>/<kind>/<namespace>/<name>`: an add-on's object.
    Object {
        /// Which object of which add-on (its key text in the file).
        #[serde(with = "super::address_serde::object")]
        object: Box<ObjectAddress>,
        /// What happens to it.
        op: ObjectOp,
    },
}

/// The admin kubeconfig's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum KubeconfigOp {
    /// Fetched for the first time, or again after a bootstrap (`create`).
    Fetch,
    /// Fetched again (`update`): its client certificate expires within the renewal
    /// window, or has expired. Talos issues a new admin certificate at each fetch
    /// (machined's `Kubeconfig`); when no control plane gives one, it is signed offline
    /// by the Kubernetes CA in the secrets.
    Renew,
}

/// An image's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ImageOp {
    /// Downloaded by Proxmox (`download-url`) from the Image Factory.
    Create(PlannedImage),
    /// Its volume deleted.
    Delete,
}

/// The resource pool's change (its comment is not managed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PoolOp {
    /// Created, or adopted when an interrupted apply made it.
    Create,
    /// Deleted.
    Delete,
}

/// A PCI mapping's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MappingOp {
    /// Created with these entries.
    Create(PciMapping),
    /// Its entries set to these.
    Update(PciMapping),
    /// Deleted.
    Delete,
}

/// An HA rule's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum HaRuleOp {
    /// Created with these VMs.
    Create(HaRule),
    /// Its VMs or comment set to these.
    Update(HaRule),
    /// Deleted.
    Delete,
}

/// A VM's change. `role` is the node's role in the topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum VmOp {
    /// Created (or adopted half-made) and started.
    Create {
        /// The VM apply makes.
        vm: PlannedVm,
        /// The node's role.
        role: Role,
    },
    /// Changed in place, restarted through Proxmox when `vm.restart`.
    Update {
        /// The VM as it should be.
        vm: PlannedVm,
        /// The node's role.
        role: Role,
    },
    /// Deleted (a control plane leaves etcd first) and created anew at
    /// another vmid or host.
    Replace {
        /// The VM apply makes.
        vm: PlannedVm,
        /// The node's role.
        role: Role,
    },
    /// Deleted: the node leaves the cluster.
    Delete {
        /// The role the state records (`None`: no config was ever
        /// applied, or a VM an interrupted apply left half-made).
        role: Option<Role>,
    },
}

/// A machine config's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ConfigOp {
    /// The config sent with Talos `ApplyConfiguration` (or, for a
    /// Kubernetes roll, in talosctl `upgrade-k8s`'s phases).
    ApplyConfig {
        /// The config and how it is sent.
        config: PlannedConfig,
        /// The node's role.
        role: Role,
    },
    /// Talos upgraded with the installer image (then the config applied, if
    /// it changed too).
    Upgrade {
        /// The config and the installer.
        config: PlannedConfig,
        /// The node's role.
        role: Role,
    },
}

impl ConfigOp {
    /// The config either op sends.
    pub fn config(&self) -> &PlannedConfig {
        match self {
            ConfigOp::ApplyConfig { config, .. } | ConfigOp::Upgrade { config, .. } => config,
        }
    }

    /// The node's role.
    pub fn role(&self) -> Role {
        match self {
            ConfigOp::ApplyConfig { role, .. } | ConfigOp::Upgrade { role, .. } => *role,
        }
    }
}

/// An add-on object's change: each carries what apply sends or deletes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ObjectOp {
    /// Server-side applied: the object is new to talosprov.
    Create(PlannedObject),
    /// Server-side applied again: it differs from the add-on.
    Update(PlannedObject),
    /// Deleted: it left its add-on (prune); the payload is what was
    /// applied, to find it.
    Delete(PlannedObject),
}

impl Op {
    /// The delete of the resource at `address` when it needs no payload
    /// (an image, the pool, a PCI mapping, a VM whose role is not known):
    /// what is left by an interrupted apply is deleted this way. `None` for
    /// the other kinds.
    pub fn delete_of(address: &Address) -> Option<Op> {
        Some(match address {
            Address::Image(name) => Op::Image {
                name: name.clone(),
                op: ImageOp::Delete,
            },
            Address::Pool(name) => Op::Pool {
                name: name.clone(),
                op: PoolOp::Delete,
            },
            Address::PciMapping(name) => Op::PciMapping {
                name: name.clone(),
                op: MappingOp::Delete,
            },
            Address::Vm(host) => Op::Vm {
                host: host.clone(),
                op: VmOp::Delete { role: None },
            },
            Address::HaRule(entry) => Op::HaRule {
                entry: entry.clone(),
                op: HaRuleOp::Delete,
            },
            Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
            | Address::Talosconfig
            | Address::Object(_) => return None,
        })
    }

    /// The address of the resource this op changes.
    pub fn address(&self) -> Address {
        match self {
            Op::Image { name, .. } => Address::Image(name.clone()),
            Op::Pool { name, .. } => Address::Pool(name.clone()),
            Op::PciMapping { name, .. } => Address::PciMapping(name.clone()),
            Op::Vm { host, .. } => Address::Vm(host.clone()),
            Op::HaRule { entry, .. } => Address::HaRule(entry.clone()),
            Op::Config { host, .. } => Address::Config(host.clone()),
            Op::Bootstrap => Address::Bootstrap,
            Op::Kubeconfig { .. } => Address::Kubeconfig,
            Op::Talosconfig => Address::Talosconfig,
            Op::Object { object, .. } => Address::Object(object.clone()),
        }
    }
}

/// One change to one resource.
///
/// The saved plan file holds it as serde writes it: its [`Op`] and how the
/// plan shows it (the address is the op's, not written twice); `plan -json`
/// prints [`super::view::ChangeView`] instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ChangeRecord")]
pub struct Change {
    /// The op's address, kept so that it is derived once.
    #[serde(skip_serializing)]
    address: Address,
    /// What happens to it, with the values apply sends.
    op: Op,
    /// Why, in the operator's words, e.g. `memory 8192 -> 12288 MiB`.
    pub reason: String,
    /// Field-level before and after; secrets show as `(sensitive)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// For apply-config: unified diff of the redacted machine config (recorded
    /// -> desired); empty for a first apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_diff: Option<String>,
    /// For apply-config, update and upgrade: whether the node reboots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot: Option<bool>,
    /// Addresses of other changes in this plan that must finish first.
    #[serde(
        with = "super::address_serde::list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub depends_on: Vec<Address>,
}

/// A [`Change`] as the saved plan file holds it, read back: every member
/// but the address, which the op gives.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeRecord {
    op: Op,
    reason: String,
    #[serde(default)]
    fields: Vec<FieldChange>,
    #[serde(default)]
    config_diff: Option<String>,
    #[serde(default)]
    reboot: Option<bool>,
    #[serde(default, with = "super::address_serde::list")]
    depends_on: Vec<Address>,
}

impl TryFrom<ChangeRecord> for Change {
    type Error = String;

    /// The change, each field read as a field of its address's kind.
    fn try_from(r: ChangeRecord) -> Result<Change, String> {
        let mut c = Change::of(r.op, r.reason);
        for mut f in r.fields {
            let text = f.name.to_string();
            f.name = Field::of(&c.address, &text)
                .ok_or_else(|| format!("{} has no field {text:?}", c.address))?;
            c.fields.push(f);
        }
        c.config_diff = r.config_diff;
        c.reboot = r.reboot;
        c.depends_on = r.depends_on;
        Ok(c)
    }
}

impl Change {
    /// A change of `op`, at the op's address.
    fn of(op: Op, reason: impl Into<String>) -> Change {
        Change {
            address: op.address(),
            op,
            reason: reason.into(),
            fields: Vec::new(),
            config_diff: None,
            reboot: None,
            depends_on: Vec::new(),
        }
    }

    /// A change of `image/<name>`.
    pub fn image(name: impl Into<String>, op: ImageOp, reason: impl Into<String>) -> Change {
        let name = name.into();
        Change::of(Op::Image { name, op }, reason)
    }

    /// A change of `pool/<name>`.
    pub fn pool(name: impl Into<String>, op: PoolOp, reason: impl Into<String>) -> Change {
        let name = name.into();
        Change::of(Op::Pool { name, op }, reason)
    }

    /// A change of `pci_mapping/<name>`.
    pub fn pci_mapping(
        name: impl Into<String>,
        op: MappingOp,
        reason: impl Into<String>,
    ) -> Change {
        let name = name.into();
        Change::of(Op::PciMapping { name, op }, reason)
    }

    /// A change of `ha_rule/<entry>`.
    pub fn ha_rule(entry: impl Into<String>, op: HaRuleOp, reason: impl Into<String>) -> Change {
        let entry = entry.into();
        Change::of(Op::HaRule { entry, op }, reason)
    }

    /// A change of `vm/<host>`.
    pub fn vm(host: impl Into<String>, op: VmOp, reason: impl Into<String>) -> Change {
        let host = host.into();
        Change::of(Op::Vm { host, op }, reason)
    }

    /// A change of `config/<host>`; `reboot` starts as the mode's
    /// ([`ApplyMode::reboots`]).
    pub fn config(host: impl Into<String>, op: ConfigOp, reason: impl Into<String>) -> Change {
        let reboot = op.config().mode.reboots();
        let host = host.into();
        Change {
            reboot,
            ..Change::of(Op::Config { host, op }, reason)
        }
    }

    /// The etcd bootstrap.
    pub fn bootstrap(reason: impl Into<String>) -> Change {
        Change::of(Op::Bootstrap, reason)
    }

    /// The admin kubeconfig's fetch, or its renewal.
    pub fn kubeconfig(op: KubeconfigOp, reason: impl Into<String>) -> Change {
        Change::of(Op::Kubeconfig { op }, reason)
    }

    /// The talosconfig's renewal.
    pub fn talosconfig(reason: impl Into<String>) -> Change {
        Change::of(Op::Talosconfig, reason)
    }

    /// A change of an add-on's object.
    pub fn object(object: ObjectAddress, op: ObjectOp, reason: impl Into<String>) -> Change {
        let object = Box::new(object);
        Change::of(Op::Object { object, op }, reason)
    }

    /// The payload-free delete of `address` ([`Op::delete_of`]); `None`
    /// for a kind whose delete needs one, or that has none.
    pub fn delete(address: &Address, reason: impl Into<String>) -> Option<Change> {
        Some(Change::of(Op::delete_of(address)?, reason))
    }

    /// This change with `fields`.
    #[must_use]
    pub fn with_fields(mut self, fields: Vec<FieldChange>) -> Change {
        self.fields = fields;
        self
    }

    /// The resource, e.g. `vm/talos-worker-01`.
    pub fn address(&self) -> &Address {
        &self.address
    }

    /// What happens to the resource, with the values apply sends.
    pub fn op(&self) -> &Op {
        &self.op
    }

    /// The change's action (`create`, `update`, ...).
    pub fn action(&self) -> Action {
        self.op.action()
    }

    /// The node's role, for a `vm/` or `config/` change that knows it.
    pub fn role(&self) -> Option<Role> {
        match &self.op {
            Op::Vm {
                op:
                    VmOp::Create { role, .. } | VmOp::Update { role, .. } | VmOp::Replace { role, .. },
                ..
            } => Some(*role),
            Op::Vm {
                op: VmOp::Delete { role },
                ..
            } => *role,
            Op::Config { op, .. } => Some(op.role()),
            Op::Image { .. }
            | Op::Pool { .. }
            | Op::PciMapping { .. }
            | Op::HaRule { .. }
            | Op::Bootstrap
            | Op::Kubeconfig { .. }
            | Op::Talosconfig
            | Op::Object { .. } => None,
        }
    }

    /// The machine config a `config/` change sends.
    pub fn config_payload(&self) -> Option<&PlannedConfig> {
        let Op::Config { op, .. } = &self.op else {
            return None;
        };
        Some(op.config())
    }

    /// The machine config a `config/` change sends, to refine at plan time
    /// (its mode, its Kubernetes roll); the kind and action stay.
    pub fn config_payload_mut(&mut self) -> Option<&mut PlannedConfig> {
        let Op::Config {
            op: ConfigOp::ApplyConfig { config, .. } | ConfigOp::Upgrade { config, .. },
            ..
        } = &mut self.op
        else {
            return None;
        };
        Some(config)
    }

    /// The Kubernetes version change this config change carries, if any.
    pub fn kubernetes(&self) -> Option<&KubernetesChange> {
        self.config_payload().and_then(|c| c.kubernetes.as_ref())
    }

    /// The apply mode of a config change (`None` for other changes).
    pub fn apply_mode(&self) -> Option<ApplyMode> {
        self.config_payload().map(|c| c.mode)
    }
}

/// One field of a change. Values are display text, already redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldChange {
    /// The field, typed by kind; its text (`memory_mib`, `hostpci0`,
    /// `talos_version`) is what the plan shows and its JSON holds.
    pub name: Field,
    /// The value now (`None`: not set).
    pub before: Option<String>,
    /// The value wanted (`None`: removed).
    pub after: Option<String>,
    /// `after` is a value Proxmox holds pending for a running VM: the VM
    /// takes it at its next start (drift set by hand, or a change an
    /// interrupted apply left before the restart).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

impl FieldChange {
    /// A field from `before` to `after`.
    pub fn new(name: impl Into<Field>, before: Option<String>, after: Option<String>) -> Self {
        FieldChange {
            name: name.into(),
            before,
            after,
            pending: false,
        }
    }
}
