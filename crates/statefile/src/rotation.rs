//! A CA rotation as the state records it (`ca_rotation`): which CA, the stage
//! being applied, and the new and old CAs. What each stage does to the
//! machine configs is `machine::rotation`'s.

use serde::{Deserialize, Serialize};

use talosprov_base::pem::CertAndKey;
use talosprov_base::sensitive::Sensitive;

/// Which CA a rotation replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Authority {
    /// The Talos API CA (`certs.os` in the secrets; `machine.ca` in configs):
    /// apid's server certificates and the talosconfig's client certificate.
    Os,
    /// The Kubernetes CA (`certs.k8s`; `cluster.ca`): the API server, the
    /// kubelets and the admin kubeconfig.
    Kubernetes,
}

impl Authority {
    /// How the CLI names it: the flag `--os` / `--kubernetes` without dashes.
    pub fn flag(self) -> &'static str {
        match self {
            Authority::Os => "os",
            Authority::Kubernetes => "kubernetes",
        }
    }

    /// Its name in messages: `Talos API (OS) CA`, `Kubernetes CA`.
    pub fn title(self) -> &'static str {
        match self {
            Authority::Os => "Talos API (OS) CA",
            Authority::Kubernetes => "Kubernetes CA",
        }
    }

    /// The machine-config fields a stage changes (`machine.ca`, `machine.acceptedCAs`
    /// or their `cluster` counterparts).
    pub fn fields(self) -> (&'static str, &'static str) {
        match self {
            Authority::Os => ("machine.ca", "machine.acceptedCAs"),
            Authority::Kubernetes => ("cluster.ca", "cluster.acceptedCAs"),
        }
    }
}

/// A stage of a rotation, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The new CA accepted beside the old one.
    Accept,
    /// The new CA issuing, the old one still accepted.
    Swap,
    /// The old CA dropped.
    Drop,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 3] = [Stage::Accept, Stage::Swap, Stage::Drop];

    /// 1, 2 or 3.
    pub fn number(self) -> usize {
        match self {
            Stage::Accept => 1,
            Stage::Swap => 2,
            Stage::Drop => 3,
        }
    }

    /// The stage after this one; `None` after [`Stage::Drop`].
    pub fn next(self) -> Option<Stage> {
        match self {
            Stage::Accept => Some(Stage::Swap),
            Stage::Swap => Some(Stage::Drop),
            Stage::Drop => None,
        }
    }

    /// What the stage does to every node, for plans and progress.
    pub fn describe(self, authority: Authority) -> String {
        let (issuing, accepted) = authority.fields();
        match self {
            Stage::Accept => format!("accept the new CA beside the old one ({accepted})"),
            Stage::Swap => {
                format!(
                    "make the new CA the issuing one ({issuing}); the old one is still accepted"
                )
            }
            Stage::Drop => format!("drop the old CA from {accepted}"),
        }
    }
}

/// A rotation in progress, as the state records it (`ca_rotation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaRotation {
    /// The CA being replaced.
    pub authority: Authority,
    /// The stage being applied: nodes may be before it (an interrupted run),
    /// never after it.
    pub stage: Stage,
    /// The new CA's certificate, PEM.
    pub new_crt: String,
    /// The new CA's private key, PEM.
    pub new_key: Sensitive,
    /// The old CA's certificate, PEM: accepted until [`Stage::Drop`], and
    /// trusted by the client configs until every node dropped it.
    pub old_crt: String,
    /// When the rotation started (RFC 3339, UTC).
    pub started_at: String,
}

impl CaRotation {
    /// The new CA as a pair.
    pub fn new_ca(&self) -> CertAndKey {
        CertAndKey {
            crt: self.new_crt.clone(),
            key: Sensitive::new(self.new_key.expose().clone()),
        }
    }

    /// The CA certificates a client trusts during this rotation: old and new (PEM, joined).
    pub fn trusted(&self) -> String {
        let mut out = self.old_crt.trim_end().to_owned();
        out.push('\n');
        out.push_str(self.new_crt.trim_end());
        out.push('\n');
        out
    }
}
