//! A CA rotation in three stages, the way `talosctl rotate-ca` does it
//! (Talos `pkg/rotate/pki/talos` and `pkg/rotate/pki/kubernetes`, talos#8440):
//!
//! 1. [`Stage::Accept`]: every node accepts the new CA beside the old one
//!    (`machine.acceptedCAs` for the OS CA, `cluster.acceptedCAs` for the
//!    Kubernetes CA); the old CA still issues;
//! 2. [`Stage::Swap`]: the new CA issues (`machine.ca` / `cluster.ca`, with its
//!    key on control planes), the old one is still accepted;
//! 3. [`Stage::Drop`]: the old CA is no longer accepted.
//!
//! Talos applies `machine.ca`, `machine.acceptedCAs` and the whole `cluster`
//! section without a reboot, so no stage reboots a node. The state records the
//! rotation ([`CaRotation`]) with the stage being applied: a stage that was
//! interrupted is applied again, and nodes already at it are left as they are.
//! The secrets bundle in the state keeps the old CA until every node has
//! swapped; from then on it holds the new one.

use rand::{CryptoRng, RngCore};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::keys::PrivateKey;
use super::pki::{CaSpec, CertAndKey, PkiError, self_signed_ca};
use super::secrets::{CA_VALIDITY, SecretsBundle};
use crate::sensitive::Sensitive;

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

/// CA certificates (PEM) accepted beside the issuing ones: `machine.acceptedCAs`
/// and `cluster.acceptedCAs`, before any a patch adds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcceptedCas {
    /// `machine.acceptedCAs[].crt`, PEM.
    pub os: Vec<String>,
    /// `cluster.acceptedCAs[].crt`, PEM.
    pub kubernetes: Vec<String>,
}

/// No accepted CAs beside the issuing ones: the configs outside a rotation.
pub static NO_ACCEPTED_CAS: AcceptedCas = AcceptedCas {
    os: Vec::new(),
    kubernetes: Vec::new(),
};

impl CaRotation {
    /// The new CA as a pair.
    pub fn new_ca(&self) -> CertAndKey {
        CertAndKey {
            crt: self.new_crt.clone(),
            key: Sensitive::new(self.new_key.expose().clone()),
        }
    }

    /// The secrets the configs are rendered with at this stage, and the CAs
    /// accepted beside them. `bundle` is the state's: the old CA until the swap
    /// is recorded, the new one at [`Stage::Drop`].
    pub fn effective(&self, bundle: &SecretsBundle) -> (SecretsBundle, AcceptedCas) {
        let mut out = bundle.clone();
        let mut accepted = AcceptedCas::default();
        let list = match self.authority {
            Authority::Os => &mut accepted.os,
            Authority::Kubernetes => &mut accepted.kubernetes,
        };
        match self.stage {
            Stage::Accept => list.push(self.new_crt.clone()),
            Stage::Swap => {
                *ca_of(&mut out, self.authority) = self.new_ca();
                list.push(self.old_crt.clone());
            }
            Stage::Drop => {}
        }
        (out, accepted)
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

/// What `rotate-ca` is about to do, shown before it asks: every stage, the
/// client configs and secrets each one changes, and the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationPlan {
    /// The CA rotated.
    pub authority: Authority,
    /// The cluster's name.
    pub cluster: String,
    /// The first stage to apply: [`Stage::Accept`] for a new rotation, the
    /// recorded stage when one is resumed.
    pub from: Stage,
    /// A rotation recorded in the state is resumed.
    pub resuming: bool,
    /// The nodes each stage re-configures, by hostname, in topology order.
    pub nodes: Vec<String>,
}

impl RotationPlan {
    /// The plan as text, one stage per item, finished stages marked `(done)`.
    pub fn render(&self) -> String {
        let a = self.authority;
        let mut out = if self.resuming {
            format!(
                "talosprov will resume the rotation of the {} of cluster {:?} at stage {} of 3.\n",
                a.title(),
                self.cluster,
                self.from.number()
            )
        } else {
            format!(
                "talosprov will rotate the {} of cluster {:?} in 3 stages.\n",
                a.title(),
                self.cluster
            )
        };
        out.push_str(
            "Each stage re-configures every node without a reboot, then checks that every node \
             answers before the next one.\n\n",
        );
        for stage in Stage::ALL {
            let done = if stage < self.from { " (done)" } else { "" };
            out.push_str(&format!(
                "  {}. {}{done}\n     then: {}\n",
                stage.number(),
                stage.describe(a),
                Self::then(a, stage)
            ));
        }
        out.push_str(&format!("\nNodes: {}\n", self.nodes.join(", ")));
        out
    }

    /// What follows a stage once every node took it.
    fn then(a: Authority, stage: Stage) -> &'static str {
        match (a, stage) {
            (Authority::Os, Stage::Accept) => {
                "the state's talosconfig gets a client certificate from the new CA, trusting both CAs"
            }
            (Authority::Kubernetes, Stage::Accept) => {
                "the state's kubeconfig gets a client certificate from the new CA, trusting both CAs"
            }
            (_, Stage::Swap) => {
                "the state's secrets bundle holds the new CA instead of the old one"
            }
            (Authority::Os, Stage::Drop) => {
                "the talosconfig trusts the new CA only; talosconfigs from the old CA are refused"
            }
            (Authority::Kubernetes, Stage::Drop) => {
                "the kubeconfig trusts the new CA only; kubeconfigs from the old CA are refused"
            }
        }
    }
}

/// The CA `authority` names in `bundle`.
pub fn ca_of(bundle: &mut SecretsBundle, authority: Authority) -> &mut CertAndKey {
    match authority {
        Authority::Os => &mut bundle.certs.os,
        Authority::Kubernetes => &mut bundle.certs.k8s,
    }
}

/// The secrets and accepted CAs configs are rendered with: `bundle` as it is when no
/// rotation is in progress, else what [`CaRotation::effective`] gives.
pub fn effective(
    bundle: &SecretsBundle,
    rotation: Option<&CaRotation>,
) -> (SecretsBundle, AcceptedCas) {
    match rotation {
        Some(r) => r.effective(bundle),
        None => (bundle.clone(), AcceptedCas::default()),
    }
}

/// `kubeconfig` (YAML text) with every cluster's `certificate-authority-data` set to
/// `trusted` (PEM, one certificate or several), so that a client trusts the old and
/// the new Kubernetes CA while the API servers swap. `None` when the text is not a
/// kubeconfig with clusters.
pub fn kubeconfig_trusting(kubeconfig: &str, trusted: &str) -> Option<String> {
    use base64::Engine as _;
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(kubeconfig).ok()?;
    let clusters = doc.get_mut("clusters")?.as_sequence_mut()?;
    let data = base64::engine::general_purpose::STANDARD.encode(trusted.as_bytes());
    for entry in clusters.iter_mut() {
        let cluster = entry.get_mut("cluster")?.as_mapping_mut()?;
        cluster.insert(
            "certificate-authority-data".into(),
            serde_yaml_ng::Value::String(data.clone()),
        );
    }
    serde_yaml_ng::to_string(&doc).ok()
}

/// A new CA for `authority`, as `talosctl gen secrets` makes it: Ed25519 with
/// `O=talos` for the OS CA, ECDSA P-256 with `O=kubernetes` for Kubernetes, valid
/// from `now` for [`CA_VALIDITY`] (ten years).
///
/// # Errors
/// [`PkiError`] when the certificate cannot be made (not expected).
pub fn new_ca<R: RngCore + CryptoRng>(
    authority: Authority,
    rng: &mut R,
    now: OffsetDateTime,
) -> Result<CertAndKey, PkiError> {
    let now = now.replace_nanosecond(0).unwrap_or(now);
    let (key, organization) = match authority {
        Authority::Os => (PrivateKey::generate_ed25519(rng), "talos"),
        Authority::Kubernetes => (PrivateKey::generate_p256(rng), "kubernetes"),
    };
    let spec = CaSpec {
        organization: Some(organization),
        not_before: now,
        not_after: now + CA_VALIDITY,
    };
    self_signed_ca(&key, &spec, rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng as _;

    fn bundle() -> SecretsBundle {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        SecretsBundle::generate_for_checks(&mut rng, OffsetDateTime::UNIX_EPOCH).expect("bundle")
    }

    fn rotation(authority: Authority, stage: Stage, old: &CertAndKey) -> CaRotation {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(8);
        let new = new_ca(authority, &mut rng, OffsetDateTime::UNIX_EPOCH).expect("ca");
        CaRotation {
            authority,
            stage,
            new_crt: new.crt,
            new_key: Sensitive::new(new.key.expose().clone()),
            old_crt: old.crt.clone(),
            started_at: "1970-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn each_stage_renders_its_issuing_and_accepted_cas() {
        let b = bundle();
        let r = rotation(Authority::Os, Stage::Accept, &b.certs.os);
        let (s, a) = r.effective(&b);
        assert_eq!(s.certs.os.crt, b.certs.os.crt, "the old CA still issues");
        assert_eq!(a.os, vec![r.new_crt.clone()]);
        assert!(a.kubernetes.is_empty());

        let r = CaRotation {
            stage: Stage::Swap,
            ..r
        };
        let (s, a) = r.effective(&b);
        assert_eq!(s.certs.os.crt, r.new_crt, "the new CA issues");
        assert_eq!(s.certs.os.key.expose(), r.new_key.expose());
        assert_eq!(
            a.os,
            vec![b.certs.os.crt.clone()],
            "the old one is accepted"
        );
        assert_eq!(s.certs.k8s.crt, b.certs.k8s.crt, "the other CAs stay");

        let r = CaRotation {
            stage: Stage::Drop,
            ..r
        };
        let (s, a) = r.effective(&b);
        assert_eq!(s.certs.os.crt, b.certs.os.crt, "the bundle as recorded");
        assert_eq!(a, AcceptedCas::default());
    }

    #[test]
    fn a_kubernetes_rotation_touches_the_kubernetes_ca_only() {
        let b = bundle();
        let r = rotation(Authority::Kubernetes, Stage::Swap, &b.certs.k8s);
        let (s, a) = r.effective(&b);
        assert_eq!(s.certs.k8s.crt, r.new_crt);
        assert_eq!(s.certs.os.crt, b.certs.os.crt);
        assert_eq!(a.kubernetes, vec![b.certs.k8s.crt.clone()]);
        assert!(a.os.is_empty());
        assert!(r.trusted().contains(&r.old_crt) && r.trusted().contains(&r.new_crt));
    }

    #[test]
    fn new_cas_have_the_key_types_talos_generates() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(9);
        let os = new_ca(Authority::Os, &mut rng, OffsetDateTime::UNIX_EPOCH).expect("os");
        assert!(
            os.key.expose().contains("ED25519 PRIVATE KEY"),
            "Talos labels Ed25519 keys so"
        );
        let k8s = new_ca(Authority::Kubernetes, &mut rng, OffsetDateTime::UNIX_EPOCH).expect("k8s");
        assert!(k8s.key.expose().contains("EC PRIVATE KEY"));
        let stages: Vec<usize> = Stage::ALL.iter().map(|s| s.number()).collect();
        assert_eq!(stages, [1, 2, 3]);
        assert_eq!(Stage::Drop.next(), None);
    }
}
