//! The plan-time rule for removing nodes: the last control plane is never removed,
//! and an even count of remaining control planes is warned about (etcd needs a
//! majority). The removal itself runs in the engine.

use std::fmt;

/// A removal that would break the cluster (checked at plan time).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemovalRefused {
    /// Every control plane would be gone: etcd and the Kubernetes API with them.
    #[error(
        "refusing to remove {}: no control plane would remain, and etcd with all of the cluster's \
         data would be lost; keep at least one control plane (to delete the whole cluster, use \
         `talosprov destroy`)",
        .removing.join(", ")
    )]
    LastControlPlane {
        /// The control planes being removed.
        removing: Vec<String>,
    },
}

/// Something the plan should show about a removal that is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovalWarning {
    /// An even number of control planes would remain: etcd needs a majority, so
    /// it tolerates no more failures than with one control plane fewer.
    EvenControlPlanes {
        /// How many would remain.
        remaining: usize,
    },
}

impl fmt::Display for RemovalWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemovalWarning::EvenControlPlanes { remaining } => write!(
                f,
                "{remaining} control planes will remain: etcd needs a majority ({}), so an even \
                 number tolerates no more failures than {} control plane{}; keep an odd number",
                remaining / 2 + 1,
                remaining - 1,
                if *remaining == 2 { "" } else { "s" }
            ),
        }
    }
}

/// Checks removing `removing` (hostnames) from a cluster whose control planes are
/// `control_planes` (hostnames). Pure; workers in `removing` are ignored.
///
/// Errors: [`RemovalRefused::LastControlPlane`] when none would remain.
pub fn check_removal(
    control_planes: &[&str],
    removing: &[&str],
) -> Result<Vec<RemovalWarning>, RemovalRefused> {
    let leaving: Vec<String> = control_planes
        .iter()
        .filter(|cp| removing.contains(cp))
        .map(|cp| cp.to_string())
        .collect();
    if leaving.is_empty() {
        return Ok(Vec::new());
    }
    let remaining = control_planes.len() - leaving.len();
    if remaining == 0 {
        return Err(RemovalRefused::LastControlPlane { removing: leaving });
    }
    Ok(if remaining.is_multiple_of(2) {
        vec![RemovalWarning::EvenControlPlanes { remaining }]
    } else {
        Vec::new()
    })
}
