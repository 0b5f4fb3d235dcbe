//! The plan's documented JSON view, as `plan -json` and `show -json` print
//! it (format version [`PLAN_JSON_VERSION`], described under "Plan JSON" in
//! the README): OpenTofu's flat `resource_changes` shape, each change's
//! `address` and `action` as text beside the payload of its kind in a member
//! of its own (`vm`, `image`, `pci_mapping`, `ha_rule`, `config`, `object`,
//! `role`). It is written only: the saved plan file is the plan's own
//! format ([`super::saved`]), read back by the engine.

use serde::Serialize;
use uuid::Uuid;

use talosprov_base::role::Role;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{HaRule, PciMapping};

use super::change::{
    Action, Change, FieldChange, HaRuleOp, ImageOp, MappingOp, ObjectOp, Op, VmOp,
};
use super::model::{AddonValues, Conflict, Drift, Plan, PlanWarning, PoolChange};
use super::planned::{PlannedConfig, PlannedImage, PlannedObject, PlannedVm};

/// The version of the JSON view. It is 3 since each change's payload sits in
/// the member of its kind.
pub const PLAN_JSON_VERSION: u32 = 3;

/// A plan as `plan -json` prints it: [`Plan`]'s members in its order, with
/// `format_version` first and each change as a [`ChangeView`].
#[derive(Debug, Serialize)]
pub struct PlanView<'a> {
    /// [`PLAN_JSON_VERSION`].
    pub format_version: u32,
    /// [`Plan::lineage`].
    pub lineage: Option<Uuid>,
    /// [`Plan::serial`].
    pub serial: Option<u64>,
    /// [`Plan::refreshed`].
    pub refreshed: bool,
    /// [`Plan::destroy`].
    pub destroy: bool,
    /// [`Plan::changes`], in dependency order.
    pub changes: Vec<ChangeView<'a>>,
    /// [`Plan::drift`].
    pub drift: &'a [Drift],
    /// [`Plan::warnings`].
    pub warnings: &'a [PlanWarning],
    /// [`Plan::conflicts`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub conflicts: &'a [Conflict],
    /// [`Plan::addons`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub addons: &'a [AddonValues],
    /// [`Plan::pools`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub pools: &'a [PoolChange],
    /// [`Plan::unknown`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub unknown: &'a [PlanWarning],
    /// [`Plan::broken`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub broken: &'a [PlanWarning],
    /// [`Plan::unfinished`]; absent when empty.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub unfinished: &'a [PlanWarning],
}

impl<'a> PlanView<'a> {
    /// The view of `plan`.
    pub fn of(plan: &'a Plan) -> PlanView<'a> {
        PlanView {
            format_version: PLAN_JSON_VERSION,
            lineage: plan.lineage,
            serial: plan.serial,
            refreshed: plan.refreshed,
            destroy: plan.destroy,
            changes: plan.changes.iter().map(ChangeView::of).collect(),
            drift: &plan.drift,
            warnings: &plan.warnings,
            conflicts: &plan.conflicts,
            addons: &plan.addons,
            pools: &plan.pools,
            unknown: &plan.unknown,
            broken: &plan.broken,
            unfinished: &plan.unfinished,
        }
    }

    /// Pretty JSON, as `plan -json` prints it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// One change in the view: its address and action as text, how the plan
/// shows it, and the payload of its kind in the member named after it.
#[derive(Debug, Serialize)]
pub struct ChangeView<'a> {
    /// The resource, e.g. `vm/talos-worker-01`.
    pub address: String,
    /// What happens to it.
    pub action: Action,
    /// Why, in the operator's words.
    pub reason: &'a str,
    /// Field-level before and after.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub fields: &'a [FieldChange],
    /// For apply-config: the redacted machine config's unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_diff: Option<&'a str>,
    /// For apply-config, update and upgrade: whether the node reboots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot: Option<bool>,
    /// Addresses of other changes in this plan that must finish first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// For `vm/` and `config/` changes: the node's role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// For a VM create, replace or update: the VM apply makes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm: Option<&'a PlannedVm>,
    /// For an image create: the image apply downloads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<&'a PlannedImage>,
    /// For a PCI mapping create or update: the mapping apply writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_mapping: Option<&'a PciMapping>,
    /// For an HA rule create or update: the rule apply writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_rule: Option<&'a HaRule>,
    /// For an apply-config or upgrade: the config apply sends, and how.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<&'a PlannedConfig>,
    /// For an add-on object's change: what apply sends (or deletes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<&'a PlannedObject>,
}

impl<'a> ChangeView<'a> {
    /// The view of `c`.
    pub fn of(c: &'a Change) -> ChangeView<'a> {
        let mut v = ChangeView {
            address: c.address().to_string(),
            action: c.action(),
            reason: &c.reason,
            fields: &c.fields,
            config_diff: c.config_diff.as_deref(),
            reboot: c.reboot,
            depends_on: c.depends_on.iter().map(Address::to_string).collect(),
            role: c.role(),
            vm: None,
            image: None,
            pci_mapping: None,
            ha_rule: None,
            config: None,
            object: None,
        };
        v.payload(c.op());
        v
    }

    /// Set the member of `op`'s kind to the payload it sends, if any.
    fn payload(&mut self, op: &'a Op) {
        match op {
            Op::Image {
                op: ImageOp::Create(i),
                ..
            } => self.image = Some(i),
            Op::PciMapping {
                op: MappingOp::Create(m) | MappingOp::Update(m),
                ..
            } => self.pci_mapping = Some(m),
            Op::HaRule {
                op: HaRuleOp::Create(r) | HaRuleOp::Update(r),
                ..
            } => self.ha_rule = Some(r),
            Op::Vm {
                op: VmOp::Create { vm, .. } | VmOp::Update { vm, .. } | VmOp::Replace { vm, .. },
                ..
            } => self.vm = Some(vm),
            Op::Config { op, .. } => self.config = Some(op.config()),
            Op::Object {
                op: ObjectOp::Create(o) | ObjectOp::Update(o) | ObjectOp::Delete(o),
                ..
            } => self.object = Some(o),
            Op::Image {
                op: ImageOp::Delete,
                ..
            }
            | Op::Pool { .. }
            | Op::PciMapping {
                op: MappingOp::Delete,
                ..
            }
            | Op::HaRule {
                op: HaRuleOp::Delete,
                ..
            }
            | Op::Vm {
                op: VmOp::Delete { .. },
                ..
            }
            | Op::Bootstrap
            | Op::Kubeconfig { .. }
            | Op::Talosconfig => {}
        }
    }
}
