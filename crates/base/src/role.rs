//! The node role, shared by the topology, machine configs and the simulator.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A node's role, the one type for it in the workspace: the topology's
/// `role`, a machine config's `machine.type` (Talos's legacy `init` reads as
/// a control plane, see [`Role::from_machine_type`]), the patch folder name.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[schemars(
    description = "A node's role: a control plane runs etcd and the Kubernetes control plane, a worker runs workloads only."
)]
pub enum Role {
    /// Runs etcd and the Kubernetes control plane.
    Controlplane,
    /// Runs workloads only.
    Worker,
}

impl Role {
    /// The name used in the file, in Talos (`controlplane`, `worker`) and as the
    /// patch folder name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controlplane => "controlplane",
            Role::Worker => "worker",
        }
    }

    /// Parse `controlplane` or `worker`.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "controlplane" => Some(Role::Controlplane),
            "worker" => Some(Role::Worker),
            _ => None,
        }
    }

    /// The role a machine config's `machine.type` gives: `controlplane`, the
    /// legacy `init` (a control plane that bootstraps, Talos v1alpha1
    /// `MachineType`), or `worker`.
    pub fn from_machine_type(s: &str) -> Option<Role> {
        match s {
            "init" => Some(Role::Controlplane),
            other => Role::parse(other),
        }
    }

    /// Talos's minimum memory for the role, MiB (Talos system requirements:
    /// 2 GiB for a control plane, 1 GiB for a worker).
    pub fn min_memory_mib(self) -> u32 {
        match self {
            Role::Controlplane => 2048,
            Role::Worker => 1024,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
