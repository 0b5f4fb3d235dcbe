//! [`Op`]'s per-kind answers, each from its kind's [`ResourceKind`]
//! implementation.

use crate::change::{Action, Op};

use super::bootstrap::Bootstrap;
use super::config::Config;
use super::ha_rule::HaRule;
use super::image::Image;
use super::kubeconfig::Kubeconfig;
use super::mapping::Mapping;
use super::object::Object;
use super::pool::Pool;
use super::resource::{Phase, ResourceKind};
use super::talosconfig::Talosconfig;
use super::vm::Vm;

impl Op {
    /// The action of this op ([`ResourceKind::action`] of its kind).
    pub fn action(&self) -> Action {
        match self {
            Op::Image { op, .. } => Image::action(op),
            Op::Pool { op, .. } => Pool::action(op),
            Op::PciMapping { op, .. } => Mapping::action(op),
            Op::HaRule { op, .. } => HaRule::action(op),
            Op::Vm { op, .. } => Vm::action(op),
            Op::Config { op, .. } => Config::action(op),
            Op::Bootstrap => Bootstrap::action(&()),
            Op::Kubeconfig { op, .. } => Kubeconfig::action(op),
            Op::Talosconfig => Talosconfig::action(&()),
            Op::Object { op, .. } => Object::action(op),
        }
    }

    /// Where this op runs in an apply ([`ResourceKind::phase`] of its
    /// kind).
    pub fn phase(&self) -> Phase {
        match self {
            Op::Image { op, .. } => Image::phase(op),
            Op::Pool { op, .. } => Pool::phase(op),
            Op::PciMapping { op, .. } => Mapping::phase(op),
            Op::HaRule { op, .. } => HaRule::phase(op),
            Op::Vm { op, .. } => Vm::phase(op),
            Op::Config { op, .. } => Config::phase(op),
            Op::Bootstrap => Bootstrap::phase(&()),
            Op::Kubeconfig { op, .. } => Kubeconfig::phase(op),
            Op::Talosconfig => Talosconfig::phase(&()),
            Op::Object { op, .. } => Object::phase(op),
        }
    }
}
