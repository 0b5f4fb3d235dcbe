//! The plan's own types: a [`Plan`] of [`Change`]s with their field changes,
//! drift, conflicts and warnings, and its JSON format. The modules beside it
//! compute a plan ([`super::diff`]), order it ([`super::order`]) and save it
//! ([`super::saved`]).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use talosprov_statefile::address::Address;

use super::change::{Action, Change, FieldChange};
use super::field::Field;
use super::removal::RemovalRefused;

/// A plan: what apply will do, and why, computed from one state snapshot.
///
/// Serde gives its form in the saved plan file ([`super::saved`]);
/// `plan -json` prints [`super::view::PlanView`]. `changes` are in
/// dependency order (a change comes after every change it depends on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Lineage of the state the plan was made from; `None` when there was no
    /// state yet. Apply refuses a saved plan whose lineage differs.
    pub lineage: Option<Uuid>,
    /// Serial of that state; `None` when there was none. Apply refuses a saved
    /// plan once the state's serial has moved on (a stale plan).
    pub serial: Option<u64>,
    /// Whether Proxmox and Talos were read back (`false` with `--offline`):
    /// without it, drift is unknown and the changes compare with the state only.
    pub refreshed: bool,
    /// True for a destroy plan: every change is a delete.
    pub destroy: bool,
    /// The changes, in dependency order.
    pub changes: Vec<Change>,
    /// Differences between the state and what was observed, made outside
    /// talosprov. Shown apart; the changes already account for them.
    pub drift: Vec<Drift>,
    /// Things the operator should know that are not changes.
    pub warnings: Vec<PlanWarning>,
    /// Objects in Proxmox at IDs the topology declares that talosprov did not
    /// create and was not asked to adopt: never changed or deleted; the
    /// changes that depend on them are held back (not in `changes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Conflict>,
    /// Each Helm add-on's effective values, secrets redacted, as `helm
    /// template` gets them, and whether the plan rendered it anew.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addons: Vec<AddonValues>,
    /// Each pool whose size changes: `pool workers: 3 -> 2 (removes
    /// lab-wk-3)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolChange>,
    /// What refresh could not read, so that its state is unknown: a node
    /// that answers neither in secure nor in maintenance mode, the
    /// Kubernetes API. A plan with any is not "no changes": `plan
    /// -detailed-exitcode` exits 1. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<PlanWarning>,
    /// What is broken beyond what a change can mend without an explicit
    /// choice: etcd gone on every control plane (recover it with `etcd
    /// restore`, or bootstrap a new one with `-allow-new-etcd`). `apply`
    /// refuses a plan with any, and `plan -detailed-exitcode` exits 1.
    /// Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub broken: Vec<PlanWarning>,
    /// An operation the state records as under way and that only its own
    /// command finishes: a CA rotation (`rotate-ca`), an etcd restore
    /// (`etcd restore`). Each names the command. A plan with any is not
    /// "no changes": `plan -detailed-exitcode` exits 1. Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished: Vec<PlanWarning>,
}

/// A pool scaled up or down, as the plan says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolChange {
    /// The pool's name.
    pub pool: String,
    /// Members recorded before.
    pub from: usize,
    /// Members after.
    pub to: usize,
    /// Hostnames of the members added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adds: Vec<String>,
    /// Hostnames of the members removed (the highest indexes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removes: Vec<String>,
}

impl std::fmt::Display for PoolChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pool {}: {} -> {}", self.pool, self.from, self.to)?;
        let mut parts = Vec::new();
        if !self.adds.is_empty() {
            parts.push(format!("adds {}", self.adds.join(", ")));
        }
        if !self.removes.is_empty() {
            parts.push(format!("removes {}", self.removes.join(", ")));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join("; "))?;
        }
        Ok(())
    }
}

/// The pools whose members change between `state`'s allocation and
/// `pools` (pure).
pub fn pool_changes(
    state: Option<&talosprov_statefile::format::State>,
    pools: &[talosprov_topology::pools::Pool],
) -> Vec<PoolChange> {
    let empty = std::collections::BTreeMap::new();
    let recorded = state.map_or(&empty, |s| &s.pools);
    let mut names: Vec<&String> = pools.iter().map(|p| &p.name).collect();
    names.extend(
        recorded
            .keys()
            .filter(|k| !pools.iter().any(|p| &&p.name == k)),
    );
    names
        .into_iter()
        .filter_map(|name| {
            let before: Vec<&str> = recorded
                .get(name)
                .map(|m| m.iter().map(|m| m.hostname.as_str()).collect())
                .unwrap_or_default();
            let after: Vec<&str> = pools
                .iter()
                .find(|p| &p.name == name)
                .map(|p| p.members.iter().map(|m| m.hostname.as_str()).collect())
                .unwrap_or_default();
            let adds: Vec<String> = after
                .iter()
                .filter(|h| !before.contains(h))
                .map(|h| (*h).to_owned())
                .collect();
            let removes: Vec<String> = before
                .iter()
                .filter(|h| !after.contains(h))
                .map(|h| (*h).to_owned())
                .collect();
            (!adds.is_empty() || !removes.is_empty()).then(|| PoolChange {
                pool: name.clone(),
                from: before.len(),
                to: after.len(),
                adds,
                removes,
            })
        })
        .collect()
}

/// A Helm add-on's effective values in a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddonValues {
    /// The add-on's name.
    pub name: String,
    /// `<chart> <version>` (the OCI reference for an `oci://` chart).
    pub chart: String,
    /// Whether this plan ran `helm template` (the inputs changed, or nothing
    /// was recorded), rather than using the recorded rendering.
    pub rendered: bool,
    /// The preset's values under the user's, with the value of every key
    /// that names a secret (a password, token, secret or private key)
    /// shown as `(sensitive)`.
    pub values: serde_json::Value,
}

impl Plan {
    /// Only the drift of this plan: what `-refresh-only` shows and records
    /// (no changes, warnings, conflicts, add-on values or pool changes).
    pub fn drift_only(&self) -> Plan {
        Plan {
            changes: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
            ..self.clone()
        }
    }

    /// A plan of `changes` made after a refresh, with no lineage or serial
    /// yet, no drift and no warnings (the pure planner's output before the
    /// state is known; tests build on it).
    pub fn of_changes(changes: Vec<Change>) -> Plan {
        Plan {
            lineage: None,
            serial: None,
            refreshed: true,
            destroy: false,
            changes,
            drift: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
            unknown: Vec::new(),
            broken: Vec::new(),
            unfinished: Vec::new(),
        }
    }

    /// True when applying would change nothing.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Counts per kind of change, for the summary line.
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for c in &self.changes {
            match c.action() {
                Action::Create => s.add += 1,
                Action::Update => s.change += 1,
                Action::Replace => {
                    s.add += 1;
                    s.destroy += 1;
                }
                Action::Delete => s.destroy += 1,
                Action::ApplyConfig => s.apply_config += 1,
                Action::Upgrade => s.upgrade += 1,
                Action::Bootstrap => s.bootstrap += 1,
            }
        }
        s
    }

    /// The data disks this plan deletes with their volumes, by VM address:
    /// each in-place VM update's `scsiN` (N ≥ 1) that goes from a value to
    /// none, as `(key, value now)`. Apply makes these only for the addresses
    /// given `-allow-data-loss`; a VM deleted or replaced whole is not here
    /// (its change says so itself).
    pub fn data_losses(&self) -> Vec<(&Address, Vec<(String, &str)>)> {
        self.changes
            .iter()
            .filter(|c| c.action() == Action::Update)
            .filter_map(|c| {
                let disks: Vec<(String, &str)> = c
                    .fields
                    .iter()
                    .filter_map(|f| match (&f.name, &f.before, &f.after) {
                        (Field::Vm(v @ super::field::VmField::Scsi(_)), Some(b), None) => {
                            Some((v.to_string(), b.as_str()))
                        }
                        _ => None,
                    })
                    .collect();
                (!disks.is_empty()).then_some((c.address(), disks))
            })
            .collect()
    }

    /// The change at `address`, if any.
    pub fn change(&self, address: &Address) -> Option<&Change> {
        self.changes.iter().find(|c| c.address() == address)
    }

    /// Give each drift field read from JSON the kind of its address
    /// (`name` is a VM's field at `vm/…`, an object's path at `addon/…`);
    /// a change's fields are settled as it is read.
    ///
    /// # Errors
    /// The first field its address's kind does not have, in words.
    pub fn settle_fields(&mut self) -> Result<(), String> {
        for d in &mut self.drift {
            let (address, fields) = (&d.address, &mut d.fields);
            for f in fields {
                let text = f.name.to_string();
                f.name = Field::of(address, &text)
                    .ok_or_else(|| format!("{address} has no field {text:?}"))?;
            }
        }
        Ok(())
    }
}

/// How many changes of each kind a plan holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Creates, plus replaces (which create anew).
    pub add: usize,
    /// In-place updates.
    pub change: usize,
    /// Deletes, plus replaces (which delete first).
    pub destroy: usize,
    /// Machine configs to apply.
    pub apply_config: usize,
    /// Talos upgrades.
    pub upgrade: usize,
    /// The cluster bootstrap (0 or 1).
    pub bootstrap: usize,
}

/// A difference between the state and what was observed: something changed
/// or deleted outside talosprov.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drift {
    /// The resource that drifted, e.g. `vm/wk-1` (shown as text in JSON).
    #[serde(with = "super::address_serde::text")]
    pub address: Address,
    /// `changed` or `deleted`.
    pub kind: DriftKind,
    /// Recorded (before) and observed (after) values of each field that differs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldChange>,
    /// A unified diff of what changed, secrets redacted, when the fields alone do not say
    /// it: a machine config talosprov will not set back (another cluster's), from the
    /// running config to the topology's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// What happened outside talosprov.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftKind {
    /// The resource exists with other settings than recorded.
    Changed,
    /// The resource is gone.
    Deleted,
}

/// An object in Proxmox at the ID the topology declares for an address, that
/// talosprov did not create (no record and no create intent in the state) and
/// was not asked to adopt with `talosprov import`: talosprov never changes or
/// deletes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conflict {
    /// The address the topology declares, e.g. `pci_mapping/gpu`.
    #[serde(with = "super::address_serde::text")]
    pub address: Address,
    /// The Proxmox ID the object was found at: the vmid, or the pool or
    /// mapping name (what `talosprov import` takes).
    pub id: String,
    /// What was found, in the operator's words, e.g. `VM 122 "legacy-db" on
    /// pve1`.
    pub found: String,
    /// The commands that take it over, in order (`talosprov import ADDRESS
    /// ID`, after `talosprov state rm ADDRESS` when a stale record is there).
    pub commands: Vec<String>,
    /// The planned changes held back because they depend on it.
    #[serde(
        default,
        with = "super::address_serde::list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub blocked: Vec<Address>,
}

impl Conflict {
    /// The conflict at `address` with an object found at Proxmox ID `id`,
    /// taken over with `talosprov import ADDRESS ID`.
    pub fn at(address: &Address, id: &str, found: String) -> Conflict {
        Conflict {
            address: address.clone(),
            id: id.to_owned(),
            found,
            commands: vec![format!("talosprov import {address} {id}")],
            blocked: Vec::new(),
        }
    }
}

impl Conflict {
    /// What was found, that it is left untouched, and the commands that take
    /// it over, in one sentence (without the address).
    pub fn reason(&self) -> String {
        format!(
            "{} already exists in Proxmox and talosprov did not create it, so it is left \
             untouched; to manage it with talosprov, run `{}`",
            self.found,
            self.commands.join("` then `")
        )
    }
}

impl std::fmt::Display for Conflict {
    /// `ADDRESS: ` and the [`Conflict::reason`].
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.address, self.reason())
    }
}

/// A warning attached to a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanWarning {
    /// The resource it concerns, if one.
    #[serde(
        default,
        with = "super::address_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub address: Option<Address>,
    /// The warning, for the operator.
    pub message: String,
}

/// A change planning refuses to make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Proxmox cannot shrink a disk, and talosprov never loses data to do it.
    #[error(
        "vm/{hostname} (vmid {vmid}): disk_size {wanted_gib} GiB is smaller than the disk's \
         {current_gib} GiB; disks only grow (raise disk_size back, or replace the node)"
    )]
    DiskShrink {
        /// Hostname of the node whose VM disk would shrink.
        hostname: String,
        /// Its Proxmox VM ID.
        vmid: u32,
        /// Size now, GiB.
        current_gib: u64,
        /// Size asked for, GiB.
        wanted_gib: u64,
    },
    /// A data disk (`scsiN`, N ≥ 1) would shrink, move to another storage or
    /// leave the topology: refused, since none of them keeps its data in place.
    #[error(
        "vm/{hostname} (vmid {vmid}): {disk} {what}; talosprov never loses a data disk's \
         data on its own (put the disk back as it was in `disks`, or replace the node)"
    )]
    DataDiskLoss {
        /// Hostname of the node.
        hostname: String,
        /// Its Proxmox VM ID.
        vmid: u32,
        /// The disk's key, `scsiN`.
        disk: String,
        /// What the topology asks: `would shrink from 100 GiB to 50 GiB`,
        /// `is no longer in the topology's disks`.
        what: String,
    },
    /// A NIC's bridge that its VM's Proxmox host does not have.
    #[error(
        "vm/{hostname}: {nic}'s bridge {bridge} does not exist on {host} (its bridges: {}); \
         create it on the host, or name one of those in `networks` (or `proxmox.bridge`)",
        if bridges.is_empty() { "none".to_owned() } else { bridges.join(", ") }
    )]
    UnknownBridge {
        /// The node's hostname.
        hostname: String,
        /// The NIC, `netN`.
        nic: String,
        /// The bridge asked for.
        bridge: String,
        /// The Proxmox host.
        host: String,
        /// The bridges the host has, sorted.
        bridges: Vec<String>,
    },
    /// A new VM's disk would be smaller than the image it is imported from:
    /// Proxmox imports the image at its virtual size, and the resize to
    /// `disk_size` that follows cannot shrink it, so the create would fail
    /// half-way, after the VM was made.
    #[error(
        "vm/{hostname} (vmid {vmid}): disk_size {disk_gib} GiB is smaller than its image \
         {volid} on {host}, whose virtual size is {} ({image_bytes} bytes); raise disk_size \
         to {} GiB or more",
        gib_text(*image_bytes),
        image_bytes.div_ceil(GIB)
    )]
    DiskBelowImage {
        /// The node's hostname.
        hostname: String,
        /// Its Proxmox VM ID.
        vmid: u32,
        /// Its `disk_size`, GiB.
        disk_gib: u64,
        /// The image volume it imports.
        volid: String,
        /// The Proxmox host whose storage listing gave the size.
        host: String,
        /// The image's virtual size, bytes.
        image_bytes: u64,
    },
    /// The topology removes every control plane the cluster has (see
    /// [`super::removal::check_removal`]).
    #[error(transparent)]
    Removal(#[from] RemovalRefused),
    /// The Kubernetes API server refuses an add-on's object (its server-side
    /// apply dry run failed for another reason than a conflict): the
    /// object's address and the server's message.
    #[error("{0}")]
    Refused(String),
}

pub(super) fn field<T: ToString>(
    name: impl Into<Field>,
    before: Option<T>,
    after: Option<T>,
) -> FieldChange {
    FieldChange::new(
        name,
        before.map(|v| v.to_string()),
        after.map(|v| v.to_string()),
    )
}

/// Bytes in a GiB (Proxmox's `G` in disk sizes).
pub(super) const GIB: u64 = 1 << 30;

/// A size in bytes as GiB with two decimals, such as `1.50 GiB`.
fn gib_text(bytes: u64) -> String {
    // Exact in f64 up to 2^53 bytes (8 PiB), beyond any disk image.
    format!("{:.2} GiB", bytes as f64 / GIB as f64)
}
