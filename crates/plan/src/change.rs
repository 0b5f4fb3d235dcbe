//! A [`Change`]: one resource's address, what happens to it ([`Op`]: one
//! variant per resource kind, each holding its own action and the typed
//! values apply sends), and how the plan shows it (reason, fields, diff,
//! dependencies).
//!
//! A change is only made through its kind's constructor ([`Change::vm`],
//! [`Change::config`], ...), so its address always names the kind of its
//! op, and a step always has its payload: the executor cannot receive the
//! wrong one. The JSON format (`plan -json`, `plan -out`) keeps the flat
//! shape of OpenTofu's `resource_changes`: `address`, `action`, and the
//! payload of the kind (`vm`, `image`, `pci_mapping`, `config`, `object`,
//! `role`), read back through [`ChangeWire`], which refuses a change whose
//! payload does not fit its address and action.

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

/// What a change does to its resource, by kind, with the values apply
/// sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `image/<name>`: a Talos image on a Proxmox storage.
    Image(ImageOp),
    /// `pool/<name>`: the resource pool.
    Pool(PoolOp),
    /// `pci_mapping/<name>`: a cluster-wide PCI hardware mapping.
    PciMapping(MappingOp),
    /// `vm/<host>`: a node's VM.
    Vm(VmOp),
    /// `ha_rule/<entry>`: the HA rule keeping a spread group's VMs apart.
    HaRule(HaRuleOp),
    /// `config/<host>`: a node's machine config or Talos version.
    Config(ConfigOp),
    /// `bootstrap`: etcd bootstrapped on the first control plane (Talos
    /// `Bootstrap`), once per cluster.
    Bootstrap,
    /// `kubeconfig`: the admin kubeconfig fetched through the Talos API
    /// (created), or fetched again before its client certificate expires.
    Kubeconfig(KubeconfigOp),
    /// `talosconfig`: the state's talosconfig issued again from the OS CA
    /// before its admin client certificate expires.
    Talosconfig,
    /// `addon/<addon>/<kind>/<namespace>/<name>`: an add-on's object.
    Object(ObjectOp),
}

/// The admin kubeconfig's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOp {
    /// Downloaded by Proxmox (`download-url`) from the Image Factory.
    Create(PlannedImage),
    /// Its volume deleted.
    Delete,
}

/// The resource pool's change (its comment is not managed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp {
    /// Created, or adopted when an interrupted apply made it.
    Create,
    /// Deleted.
    Delete,
}

/// A PCI mapping's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingOp {
    /// Created with these entries.
    Create(PciMapping),
    /// Its entries set to these.
    Update(PciMapping),
    /// Deleted.
    Delete,
}

/// An HA rule's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaRuleOp {
    /// Created with these VMs.
    Create(HaRule),
    /// Its VMs or comment set to these.
    Update(HaRule),
    /// Deleted.
    Delete,
}

/// A VM's change. `role` is the node's role in the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
        match address {
            Address::Image(_) => Some(Op::Image(ImageOp::Delete)),
            Address::Pool(_) => Some(Op::Pool(PoolOp::Delete)),
            Address::PciMapping(_) => Some(Op::PciMapping(MappingOp::Delete)),
            Address::Vm(_) => Some(Op::Vm(VmOp::Delete { role: None })),
            Address::HaRule(_) => Some(Op::HaRule(HaRuleOp::Delete)),
            Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
            | Address::Talosconfig
            | Address::Object(_) => None,
        }
    }

    /// Whether `address` is of this op's kind.
    fn fits(&self, address: &Address) -> bool {
        matches!(
            (self, address),
            (Op::Image(_), Address::Image(_))
                | (Op::Pool(_), Address::Pool(_))
                | (Op::PciMapping(_), Address::PciMapping(_))
                | (Op::Vm(_), Address::Vm(_))
                | (Op::HaRule(_), Address::HaRule(_))
                | (Op::Config(_), Address::Config(_))
                | (Op::Bootstrap, Address::Bootstrap)
                | (Op::Kubeconfig(_), Address::Kubeconfig)
                | (Op::Talosconfig, Address::Talosconfig)
                | (Op::Object(_), Address::Object(_))
        )
    }
}

/// A change read from a plan that apply cannot run: an action its kind does
/// not have, the values its step needs missing, or values it does not send
/// (a plan not made by planning).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address}: {problem}; run `talosprov plan` again")]
pub struct StepError {
    /// The change's address.
    pub address: Address,
    /// What is wrong.
    pub problem: String,
}

/// One change to one resource.
///
/// JSON: see the module's documentation and [`ChangeWire`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ChangeWire", try_from = "ChangeWire")]
pub struct Change {
    /// The resource, e.g. `vm/talos-worker-01`: always of `op`'s kind.
    address: Address,
    /// What happens to it, with the values apply sends.
    op: Op,
    /// Why, in the operator's words, e.g. `memory 8192 -> 12288 MiB`.
    pub reason: String,
    /// Field-level before and after; secrets show as `(sensitive)`.
    pub fields: Vec<FieldChange>,
    /// For apply-config: unified diff of the redacted machine config (recorded
    /// -> desired); empty for a first apply.
    pub config_diff: Option<String>,
    /// For apply-config, update and upgrade: whether the node reboots.
    pub reboot: Option<bool>,
    /// Addresses of other changes in this plan that must finish first.
    pub depends_on: Vec<Address>,
}

impl Change {
    fn of(address: Address, op: Op, reason: impl Into<String>) -> Change {
        debug_assert!(op.fits(&address));
        Change {
            address,
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
        Change::of(Address::Image(name.into()), Op::Image(op), reason)
    }

    /// A change of `pool/<name>`.
    pub fn pool(name: impl Into<String>, op: PoolOp, reason: impl Into<String>) -> Change {
        Change::of(Address::Pool(name.into()), Op::Pool(op), reason)
    }

    /// A change of `pci_mapping/<name>`.
    pub fn pci_mapping(
        name: impl Into<String>,
        op: MappingOp,
        reason: impl Into<String>,
    ) -> Change {
        Change::of(Address::PciMapping(name.into()), Op::PciMapping(op), reason)
    }

    /// A change of `ha_rule/<entry>`.
    pub fn ha_rule(entry: impl Into<String>, op: HaRuleOp, reason: impl Into<String>) -> Change {
        Change::of(Address::HaRule(entry.into()), Op::HaRule(op), reason)
    }

    /// A change of `vm/<host>`.
    pub fn vm(host: impl Into<String>, op: VmOp, reason: impl Into<String>) -> Change {
        Change::of(Address::Vm(host.into()), Op::Vm(op), reason)
    }

    /// A change of `config/<host>`; `reboot` starts as the mode's
    /// ([`ApplyMode::reboots`]).
    pub fn config(host: impl Into<String>, op: ConfigOp, reason: impl Into<String>) -> Change {
        let reboot = op.config().mode.reboots();
        Change {
            reboot,
            ..Change::of(Address::Config(host.into()), Op::Config(op), reason)
        }
    }

    /// The etcd bootstrap.
    pub fn bootstrap(reason: impl Into<String>) -> Change {
        Change::of(Address::Bootstrap, Op::Bootstrap, reason)
    }

    /// The admin kubeconfig's fetch, or its renewal.
    pub fn kubeconfig(op: KubeconfigOp, reason: impl Into<String>) -> Change {
        Change::of(Address::Kubeconfig, Op::Kubeconfig(op), reason)
    }

    /// The talosconfig's renewal.
    pub fn talosconfig(reason: impl Into<String>) -> Change {
        Change::of(Address::Talosconfig, Op::Talosconfig, reason)
    }

    /// A change of an add-on's object.
    pub fn object(object: ObjectAddress, op: ObjectOp, reason: impl Into<String>) -> Change {
        Change::of(Address::Object(Box::new(object)), Op::Object(op), reason)
    }

    /// The payload-free delete of `address` ([`Op::delete_of`]); `None`
    /// for a kind whose delete needs one, or that has none.
    pub fn delete(address: Address, reason: impl Into<String>) -> Option<Change> {
        let op = Op::delete_of(&address)?;
        Some(Change::of(address, op, reason))
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
            Op::Vm(
                VmOp::Create { role, .. } | VmOp::Update { role, .. } | VmOp::Replace { role, .. },
            ) => Some(*role),
            Op::Vm(VmOp::Delete { role }) => *role,
            Op::Config(c) => Some(c.role()),
            Op::Image(_)
            | Op::Pool(_)
            | Op::PciMapping(_)
            | Op::HaRule(_)
            | Op::Bootstrap
            | Op::Kubeconfig(_)
            | Op::Talosconfig
            | Op::Object(_) => None,
        }
    }

    /// The machine config a `config/` change sends.
    pub fn config_payload(&self) -> Option<&PlannedConfig> {
        let Op::Config(c) = &self.op else {
            return None;
        };
        Some(c.config())
    }

    /// The machine config a `config/` change sends, to refine at plan time
    /// (its mode, its Kubernetes roll); the kind and action stay.
    pub fn config_payload_mut(&mut self) -> Option<&mut PlannedConfig> {
        let Op::Config(ConfigOp::ApplyConfig { config, .. } | ConfigOp::Upgrade { config, .. }) =
            &mut self.op
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

/// A [`Change`] as the plan's JSON holds it: the address and action as
/// text, and the payload of the kind in its own optional member. Reading
/// refuses an action the kind does not have, a missing payload, and a
/// payload of another kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeWire {
    /// The resource, e.g. `vm/talos-worker-01`.
    #[serde(with = "super::address_serde::text")]
    pub address: Address,
    /// What happens to it.
    pub action: Action,
    /// Why, in the operator's words.
    pub reason: String,
    /// Field-level before and after.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// For apply-config: the redacted machine config's unified diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_diff: Option<String>,
    /// For apply-config, update and upgrade: whether the node reboots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<bool>,
    /// Addresses of other changes in this plan that must finish first.
    #[serde(
        default,
        with = "super::address_serde::list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub depends_on: Vec<Address>,
    /// For `vm/` and `config/` changes: the node's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// For a VM create, replace or update: the VM apply makes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<PlannedVm>,
    /// For an image create: the image apply downloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<PlannedImage>,
    /// For a PCI mapping create or update: the mapping apply writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_mapping: Option<PciMapping>,
    /// For an HA rule create or update: the rule apply writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ha_rule: Option<HaRule>,
    /// For an apply-config or upgrade: the config apply sends, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PlannedConfig>,
    /// For an add-on object's change: what apply sends (or deletes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<PlannedObject>,
}

impl From<Change> for ChangeWire {
    fn from(c: Change) -> ChangeWire {
        let action = c.action();
        let role = c.role();
        let mut w = ChangeWire {
            address: c.address,
            action,
            reason: c.reason,
            fields: c.fields,
            config_diff: c.config_diff,
            reboot: c.reboot,
            depends_on: c.depends_on,
            role,
            vm: None,
            image: None,
            pci_mapping: None,
            ha_rule: None,
            config: None,
            object: None,
        };
        match c.op {
            Op::Image(ImageOp::Create(i)) => w.image = Some(i),
            Op::PciMapping(MappingOp::Create(m) | MappingOp::Update(m)) => w.pci_mapping = Some(m),
            Op::HaRule(HaRuleOp::Create(r) | HaRuleOp::Update(r)) => w.ha_rule = Some(r),
            Op::Vm(
                VmOp::Create { vm, .. } | VmOp::Update { vm, .. } | VmOp::Replace { vm, .. },
            ) => w.vm = Some(vm),
            Op::Config(ConfigOp::ApplyConfig { config, .. } | ConfigOp::Upgrade { config, .. }) => {
                w.config = Some(config);
            }
            Op::Object(ObjectOp::Create(o) | ObjectOp::Update(o) | ObjectOp::Delete(o)) => {
                w.object = Some(o);
            }
            Op::Image(ImageOp::Delete)
            | Op::Pool(_)
            | Op::PciMapping(MappingOp::Delete)
            | Op::HaRule(HaRuleOp::Delete)
            | Op::Vm(VmOp::Delete { .. })
            | Op::Bootstrap
            | Op::Kubeconfig(_)
            | Op::Talosconfig => {}
        }
        w
    }
}

/// The refusal of a change whose plan lacks the `what` its `action` needs.
fn missing_member(what: &str, action: Action) -> String {
    format!(
        "the plan does not carry the {what} to {} it (made by another talosprov?)",
        action.as_str()
    )
}

/// The typed members of a [`ChangeWire`], taken out to make its op.
struct Payload {
    role: Option<Role>,
    vm: Option<PlannedVm>,
    image: Option<PlannedImage>,
    pci_mapping: Option<PciMapping>,
    ha_rule: Option<HaRule>,
    config: Option<PlannedConfig>,
    object: Option<PlannedObject>,
}

impl Payload {
    fn take(w: &mut ChangeWire) -> Payload {
        Payload {
            role: w.role.take(),
            vm: w.vm.take(),
            image: w.image.take(),
            pci_mapping: w.pci_mapping.take(),
            ha_rule: w.ha_rule.take(),
            config: w.config.take(),
            object: w.object.take(),
        }
    }

    /// Which members are given, by the name a refusal uses.
    fn given(&self) -> [(&'static str, bool); 7] {
        [
            ("role", self.role.is_some()),
            ("VM", self.vm.is_some()),
            ("image", self.image.is_some()),
            ("PCI mapping", self.pci_mapping.is_some()),
            ("HA rule", self.ha_rule.is_some()),
            ("machine config", self.config.is_some()),
            ("object", self.object.is_some()),
        ]
    }

    /// The op of `action` at `address`, from these members; the problem,
    /// in the operator's words, when the kind has no such action or a
    /// member it needs is missing.
    fn op(self, address: &Address, action: Action) -> Result<Op, String> {
        let missing = |what: &str| missing_member(what, action);
        let Payload {
            role,
            vm,
            image,
            pci_mapping,
            ha_rule,
            config,
            object,
        } = self;
        let role_or = || role.ok_or_else(|| missing("node's role"));
        let vm = || vm.ok_or_else(|| missing("VM"));
        let config = || config.ok_or_else(|| missing("machine config"));
        let object = || object.ok_or_else(|| missing("object"));
        let mapping = || pci_mapping.ok_or_else(|| missing("PCI mapping"));
        let rule = || ha_rule.ok_or_else(|| missing("HA rule"));
        Ok(match (address, action) {
            (Address::Image(_), Action::Create) => {
                Op::Image(ImageOp::Create(image.ok_or_else(|| missing("image"))?))
            }
            (Address::Image(_), Action::Delete) => Op::Image(ImageOp::Delete),
            (Address::Pool(_), Action::Create) => Op::Pool(PoolOp::Create),
            (Address::Pool(_), Action::Delete) => Op::Pool(PoolOp::Delete),
            (Address::PciMapping(_), Action::Create) => {
                Op::PciMapping(MappingOp::Create(mapping()?))
            }
            (Address::PciMapping(_), Action::Update) => {
                Op::PciMapping(MappingOp::Update(mapping()?))
            }
            (Address::PciMapping(_), Action::Delete) => Op::PciMapping(MappingOp::Delete),
            (Address::HaRule(_), Action::Create) => Op::HaRule(HaRuleOp::Create(rule()?)),
            (Address::HaRule(_), Action::Update) => Op::HaRule(HaRuleOp::Update(rule()?)),
            (Address::HaRule(_), Action::Delete) => Op::HaRule(HaRuleOp::Delete),
            (Address::Vm(_), Action::Create) => Op::Vm(VmOp::Create {
                vm: vm()?,
                role: role_or()?,
            }),
            (Address::Vm(_), Action::Update) => Op::Vm(VmOp::Update {
                vm: vm()?,
                role: role_or()?,
            }),
            (Address::Vm(_), Action::Replace) => Op::Vm(VmOp::Replace {
                vm: vm()?,
                role: role_or()?,
            }),
            (Address::Vm(_), Action::Delete) => Op::Vm(VmOp::Delete { role }),
            (Address::Config(_), Action::ApplyConfig) => Op::Config(ConfigOp::ApplyConfig {
                config: config()?,
                role: role_or()?,
            }),
            (Address::Config(_), Action::Upgrade) => Op::Config(ConfigOp::Upgrade {
                config: config()?,
                role: role_or()?,
            }),
            (Address::Bootstrap, Action::Bootstrap) => Op::Bootstrap,
            (Address::Kubeconfig, Action::Create) => Op::Kubeconfig(KubeconfigOp::Fetch),
            (Address::Kubeconfig, Action::Update) => Op::Kubeconfig(KubeconfigOp::Renew),
            (Address::Talosconfig, Action::Update) => Op::Talosconfig,
            (Address::Object(_), Action::Create) => Op::Object(ObjectOp::Create(object()?)),
            (Address::Object(_), Action::Update) => Op::Object(ObjectOp::Update(object()?)),
            (Address::Object(_), Action::Delete) => Op::Object(ObjectOp::Delete(object()?)),
            (
                Address::Image(_) | Address::Pool(_),
                Action::Update
                | Action::Replace
                | Action::ApplyConfig
                | Action::Upgrade
                | Action::Bootstrap,
            )
            | (
                Address::PciMapping(_) | Address::HaRule(_) | Address::Object(_),
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
                Action::Replace
                | Action::Delete
                | Action::ApplyConfig
                | Action::Upgrade
                | Action::Bootstrap,
            )
            | (
                Address::Talosconfig,
                Action::Create
                | Action::Replace
                | Action::Delete
                | Action::ApplyConfig
                | Action::Upgrade
                | Action::Bootstrap,
            ) => {
                return Err(format!(
                    "`{}` is not an action apply takes on it",
                    action.as_str()
                ));
            }
        })
    }
}

impl TryFrom<ChangeWire> for Change {
    type Error = StepError;

    fn try_from(mut w: ChangeWire) -> Result<Change, StepError> {
        let payload = Payload::take(&mut w);
        let address = w.address.clone();
        let refuse = |problem: String| StepError {
            address: address.clone(),
            problem,
        };
        let given = payload.given();
        let op = payload.op(&w.address, w.action).map_err(refuse)?;
        // A member the op does not hold is refused, not dropped: the plan
        // would show what apply does not send.
        let held = Payload::take(&mut ChangeWire::from(Change::of(
            w.address.clone(),
            op.clone(),
            "",
        )))
        .given();
        if let Some(((what, _), _)) = given
            .into_iter()
            .zip(held)
            .find(|((_, given), (_, held))| *given && !held)
        {
            return Err(refuse(format!(
                "the plan carries a {what}, which `{}` does not send (made by another talosprov?)",
                w.action.as_str()
            )));
        }
        let mut c = Change::of(w.address, op, w.reason);
        c.fields = w.fields;
        c.config_diff = w.config_diff;
        c.reboot = w.reboot;
        c.depends_on = w.depends_on;
        for f in &mut c.fields {
            let text = f.name.to_string();
            f.name = Field::of(&c.address, &text).ok_or_else(|| StepError {
                address: c.address.clone(),
                problem: format!("it has no field {text:?}"),
            })?;
        }
        Ok(c)
    }
}
