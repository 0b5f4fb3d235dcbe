//! Each resource kind's step, one module per kind: the engine's half of the
//! kind whose plan side is `talosprov_plan::kind::<kind>`. Each
//! module's `run` takes the kind's op, with the values it sends.

pub(super) mod bootstrap;
pub(super) mod config;
pub(super) mod ha_rule;
pub(super) mod image;
pub(super) mod kubeconfig;
pub(super) mod mapping;
pub(super) mod object;
pub(super) mod pool;
pub(super) mod talosconfig;
pub(super) mod vm;
