//! [`ResourceKind`], the trait each kind's module implements, and what
//! planning hands each kind ([`Planning`], [`Destroying`]).

use std::collections::BTreeSet;

use talosprov_statefile::format::State;

use crate::change::{Action, Change};
use crate::desired::Desired;
use crate::model::{Conflict, Drift, PlanError, PlanWarning};
use crate::observed::Observed;
use crate::ownership::Found;
use crate::renewal::Renewal;

/// Where a change runs in an apply, earliest first (OpenTofu orders by
/// the dependency graph; talosprov's kinds have a fixed one): what VMs use,
/// then VMs, then what runs on the nodes, then the add-ons; deletes run the
/// other way round, VMs before the pool and mappings they use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// The talosconfig renewed (locally, from the OS CA).
    Credentials,
    /// Images, PCI mappings and the pool made or changed.
    Provision,
    /// VMs made, changed or replaced.
    Vms,
    /// Machine configs applied and Talos upgraded.
    Configs,
    /// etcd bootstrapped.
    Bootstrap,
    /// The admin kubeconfig fetched.
    Kubeconfig,
    /// The add-ons' objects applied or pruned.
    Objects,
    /// VMs deleted.
    VmDeletes,
    /// Images, PCI mappings and the pool deleted.
    ProvisionDeletes,
}

/// What planning reads (the desired cluster, the state, what refresh saw)
/// and collects, kind after kind: each kind reads what the kinds planned
/// before it found (the VMs made afresh, the changes so far).
pub struct Planning<'a> {
    /// What the topology asks for.
    pub(crate) desired: &'a Desired,
    /// The state (an empty one before the first apply).
    pub(crate) state: &'a State,
    /// What refresh saw (`Observed::default()` offline).
    pub(crate) observed: &'a Observed,
    /// The plan's clock and certificate renewal window.
    pub(crate) renewal: Renewal,
    /// The changes found so far, in the order found (`order` sorts them).
    pub(crate) changes: Vec<Change>,
    /// Drift: what Proxmox, Talos or Kubernetes hold differs from the record.
    pub(crate) drift: Vec<Drift>,
    /// Warnings for the plan's view.
    pub(crate) warnings: Vec<PlanWarning>,
    /// Objects found at a declared ID that talosprov does not own.
    pub(crate) conflicts: Vec<Conflict>,
    /// Changes refused: the plan fails with all of them.
    pub(crate) errors: Vec<PlanError>,
    /// Hosts whose VM this plan creates or replaces: their disk, and so
    /// their machine config, starts fresh, and their image is downloaded.
    pub(crate) fresh_vms: BTreeSet<String>,
    /// The first Kubernetes version change seen (from, to), for one
    /// plan-wide warning about the bootstrap manifests.
    pub(crate) kubernetes_change: Option<(String, String)>,
    /// What to plan when etcd is gone on every control plane.
    pub(crate) etcd: EtcdRecovery,
    /// What is broken beyond a change (see `Plan::broken`).
    pub(crate) broken: Vec<PlanWarning>,
}

impl<'a> Planning<'a> {
    /// Nothing planned yet.
    pub(crate) fn new(
        desired: &'a Desired,
        state: &'a State,
        observed: &'a Observed,
        renewal: Renewal,
    ) -> Self {
        Planning {
            desired,
            state,
            observed,
            renewal,
            changes: Vec::new(),
            drift: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            errors: Vec::new(),
            fresh_vms: BTreeSet::new(),
            kubernetes_change: None,
            etcd: EtcdRecovery::default(),
            broken: Vec::new(),
        }
    }

    /// The changes, and the drift and conflicts as the ownership checks
    /// take them, borrowed together.
    pub(crate) fn changes_and_found(&mut self) -> (&mut Vec<Change>, Found<'_>) {
        (
            &mut self.changes,
            Found {
                drift: &mut self.drift,
                conflicts: &mut self.conflicts,
            },
        )
    }

    /// Whether a change of this plan so far takes `action`.
    pub(crate) fn planned(&self, action: Action) -> bool {
        self.changes.iter().any(|c| c.action() == action)
    }
}

/// What a destroy reads: the state, and whether images go too
/// (`--purge-images`).
#[derive(Debug, Clone, Copy)]
pub struct Destroying<'a> {
    /// The state.
    pub(crate) state: &'a State,
    /// `--purge-images`: the downloaded images are deleted too.
    pub(crate) purge_images: bool,
}

/// One kind of resource talosprov manages (OpenTofu's resource type, with
/// its provider's plan and read folded in).
pub trait ResourceKind {
    /// What a change does to one resource of the kind, with the values apply
    /// sends: the kind's variant of [`crate::plan::Op`].
    type Op;

    /// The change's action, in OpenTofu's vocabulary plus Talos's.
    fn action(op: &Self::Op) -> Action;

    /// Where a change of the kind runs in an apply.
    fn phase(op: &Self::Op) -> Phase;

    /// The kind's changes for an apply: each desired resource against its
    /// record and what refresh observed, with the drift, the conflicts (an
    /// object talosprov does not own at a declared ID), the refusals, and
    /// what an interrupted apply left (adopted when wanted, deleted when
    /// not). Pushed onto `p`.
    fn plan(p: &mut Planning<'_>);

    /// The kind's deletes when the cluster is destroyed: what the state
    /// records, and what an interrupted apply was making.
    fn destroy(d: &Destroying<'_>, changes: &mut Vec<Change>);
}

/// What a plan does when etcd is gone on every control plane (each one has
/// no VM, is in maintenance mode, or has an etcd that waits for a
/// bootstrap) although the state records the cluster bootstrapped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EtcdRecovery {
    /// Plan nothing for etcd: the plan is broken ([`crate::plan::Plan::broken`])
    /// and names both ways out.
    #[default]
    Refuse,
    /// `-allow-new-etcd`: bootstrap a new, empty etcd (the Kubernetes objects
    /// are lost).
    NewEtcd,
    /// `etcd restore`: bootstrap recovering etcd from a snapshot, which the
    /// apply uploads first.
    Restore,
}
