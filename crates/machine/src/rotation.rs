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
use time::OffsetDateTime;

use super::keys::PrivateKey;
use super::pki::{CaSpec, PkiError, self_signed_ca};
use super::secrets::{CA_VALIDITY, SecretsBundle};
use talosprov_base::pem::CertAndKey;
use talosprov_statefile::rotation::{Authority, CaRotation, Stage};

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
/// rotation is in progress, else those of the rotation's stage.
pub fn effective(
    bundle: &SecretsBundle,
    rotation: Option<&CaRotation>,
) -> (SecretsBundle, AcceptedCas) {
    match rotation {
        Some(r) => stage_effective(r, bundle),
        None => (bundle.clone(), AcceptedCas::default()),
    }
}

/// The secrets the configs are rendered with at this stage, and the CAs
/// accepted beside them. `bundle` is the state's: the old CA until the swap
/// is recorded, the new one at [`Stage::Drop`].
fn stage_effective(r: &CaRotation, bundle: &SecretsBundle) -> (SecretsBundle, AcceptedCas) {
    let mut out = bundle.clone();
    let mut accepted = AcceptedCas::default();
    let list = match r.authority {
        Authority::Os => &mut accepted.os,
        Authority::Kubernetes => &mut accepted.kubernetes,
    };
    match r.stage {
        Stage::Accept => list.push(r.new_crt.clone()),
        Stage::Swap => {
            *ca_of(&mut out, r.authority) = r.new_ca();
            list.push(r.old_crt.clone());
        }
        Stage::Drop => {}
    }
    (out, accepted)
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
    use talosprov_base::sensitive::Sensitive;

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
        let (s, a) = stage_effective(&r, &b);
        assert_eq!(s.certs.os.crt, b.certs.os.crt, "the old CA still issues");
        assert_eq!(a.os, vec![r.new_crt.clone()]);
        assert!(a.kubernetes.is_empty());

        let r = CaRotation {
            stage: Stage::Swap,
            ..r
        };
        let (s, a) = stage_effective(&r, &b);
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
        let (s, a) = stage_effective(&r, &b);
        assert_eq!(s.certs.os.crt, b.certs.os.crt, "the bundle as recorded");
        assert_eq!(a, AcceptedCas::default());
    }

    #[test]
    fn a_kubernetes_rotation_touches_the_kubernetes_ca_only() {
        let b = bundle();
        let r = rotation(Authority::Kubernetes, Stage::Swap, &b.certs.k8s);
        let (s, a) = stage_effective(&r, &b);
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
