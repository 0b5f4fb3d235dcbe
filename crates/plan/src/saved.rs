//! A saved plan (`plan -out FILE`, pure): the plan with every value apply
//! sends (see [`super::planned`]), the digests of every input file it read,
//! and, when it was made before any state existed, the secrets bundle its
//! configs were rendered with. `apply FILE` plans again and applies only when
//! the new plan is the saved one ([`check_same`]); the first difference is
//! named otherwise. It holds secrets: the CLI writes it with mode 0600, sealed
//! like the state when state encryption is on. OpenTofu's local backend
//! refuses a stale saved plan the same way (`backend_local.go`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::address::Address;

use super::field::{ConfigField, Field, VmField};
use crate::change::{Change, FieldChange};
use crate::model::Plan;

/// The version of the saved plan file's format (`plan -out`), read by the
/// engine only. A reader refuses any other: version 4 holds each change as
/// its op (the kind named once), where 3 and before held `plan -json`'s
/// view of it.
pub const SAVED_PLAN_FORMAT_VERSION: u32 = 4;

/// Digests of the files a plan was made from: the topology and each patch
/// file its nodes read (files the patch tree ignores, such as a README, are
/// not inputs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDigests {
    /// The topology file's path, as given (`-f`), e.g. `cluster.yaml`.
    pub topology: String,
    /// Hex SHA-256 of each file's bytes, by path (the topology's included).
    pub files: BTreeMap<String, String>,
    /// Each node's patch files in merge order, by hostname.
    pub nodes: BTreeMap<String, Vec<String>>,
}

impl InputDigests {
    /// The files whose content differs between `self` (when the plan was
    /// saved) and `now`, among the topology and `host`'s patch files (all
    /// nodes' files when `host` is `None`), in merge order: changed, added
    /// or removed, each with what happened to it.
    fn changed_for(&self, now: &InputDigests, host: Option<&str>) -> Vec<(String, FileChange)> {
        let mut paths: Vec<&String> = vec![&self.topology];
        let lists: Vec<&Vec<String>> = match host {
            Some(h) => [self.nodes.get(h), now.nodes.get(h)]
                .into_iter()
                .flatten()
                .collect(),
            None => self.nodes.values().chain(now.nodes.values()).collect(),
        };
        for p in lists.into_iter().flatten() {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        paths
            .into_iter()
            .filter_map(|p| {
                let what = match (self.files.get(p), now.files.get(p)) {
                    (Some(a), Some(b)) if a == b => return None,
                    (Some(_), Some(_)) => FileChange::Changed,
                    (None, Some(_)) => FileChange::Added,
                    (Some(_), None) => FileChange::Removed,
                    (None, None) => return None,
                };
                Some((p.clone(), what))
            })
            .collect()
    }
}

/// What happened to an input file since the plan was saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileChange {
    Changed,
    Added,
    Removed,
}

impl FileChange {
    fn says(self) -> &'static str {
        match self {
            FileChange::Changed => "changed",
            FileChange::Added => "is new",
            FileChange::Removed => "was removed",
        }
    }
}

/// The saved plan file's content (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedPlan {
    /// [`SAVED_PLAN_FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    /// The plan (lineage and serial inside say which state it was made from).
    pub plan: Plan,
    /// The secrets bundle (talosctl `secrets.yaml` text) generated for this
    /// plan when there was no state; `None` when the state holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Sensitive>,
    /// The `-target` addresses the plan was made with (apply plans with the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// Whether the plan was made with `--staged` (apply sends its config
    /// changes in staged mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staged: bool,
    /// Whether the plan was made with `-allow-new-etcd` (apply plans with it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_new_etcd: bool,
    /// The digests of the files the plan was made from.
    pub inputs: InputDigests,
    /// The Helm add-ons' renderings the plan was made with, by add-on name:
    /// apply uses them while their inputs are unchanged, so it needs no
    /// `helm` and applies the manifests the plan showed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub renderings: std::collections::BTreeMap<String, talosprov_statefile::format::Rendering>,
    /// The clock and renewal window the plan was made with: apply plans again with them,
    /// so that the certificates it renews are the ones the plan showed. `None` in a plan
    /// saved before talosprov renewed certificates (apply then uses its own clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewal: Option<super::renewal::Renewal>,
}

impl SavedPlan {
    /// `plan` made from `inputs`, in this build's format, with no secrets,
    /// targets, flags, renderings or clock of its own.
    pub fn of(plan: Plan, inputs: InputDigests) -> SavedPlan {
        SavedPlan {
            format_version: SAVED_PLAN_FORMAT_VERSION,
            plan,
            secrets: None,
            targets: Vec::new(),
            staged: false,
            allow_new_etcd: false,
            inputs,
            renderings: BTreeMap::new(),
            renewal: None,
        }
    }

    /// JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Read the JSON bytes, refusing a format version other than this
    /// build's (a file of version 3 or before has its version in `plan`).
    ///
    /// # Errors
    /// [`PlanFormatError`].
    pub fn from_json(bytes: &[u8]) -> Result<SavedPlan, PlanFormatError> {
        let syntax = |e: &dyn std::fmt::Display| PlanFormatError::Syntax(e.to_string());
        talosprov_base::load::check_json_bytes(bytes, talosprov_base::load::Budget::STATE)
            .map_err(|e| syntax(&e))?;
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| syntax(&e))?;
        let version = value
            .get("format_version")
            .or_else(|| value.get("plan").and_then(|p| p.get("format_version")))
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| PlanFormatError::Syntax("no format_version".into()))?;
        let supported = SAVED_PLAN_FORMAT_VERSION;
        if version > u64::from(supported) {
            return Err(PlanFormatError::Newer {
                found: version,
                supported,
            });
        }
        if version < u64::from(supported) {
            return Err(PlanFormatError::Older {
                found: version,
                supported,
            });
        }
        let mut saved: SavedPlan = serde_json::from_value(value).map_err(|e| syntax(&e))?;
        saved
            .plan
            .settle_fields()
            .map_err(PlanFormatError::Syntax)?;
        Ok(saved)
    }
}

/// Why a saved plan could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanFormatError {
    /// Not JSON, or not the shape of a plan.
    #[error("not a talosprov plan: {0}")]
    Syntax(String),
    /// Written by a newer talosprov.
    #[error(
        "the plan file has format version {found}; this talosprov reads version {supported}: \
         apply it with the talosprov that made it, or run `talosprov plan` again"
    )]
    Newer {
        /// The version in the file.
        found: u64,
        /// [`SAVED_PLAN_FORMAT_VERSION`].
        supported: u32,
    },
    /// Written by an older talosprov, in a format this one does not read:
    /// applying it could send values nobody reviewed.
    #[error(
        "the plan file has format version {found}, from an older talosprov, which this one \
         (version {supported}) does not read; run `talosprov plan` again"
    )]
    Older {
        /// The version in the file.
        found: u64,
        /// [`SAVED_PLAN_FORMAT_VERSION`].
        supported: u32,
    },
}

/// Why `apply FILE` refuses a saved plan that is not what planning gives now:
/// the first difference, and what it affects. Values are the plan's display
/// values, already redacted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanMismatch {
    /// An input file changed (or appeared, or went) and changes a resource.
    #[error(
        "{file} {what} since the plan was saved (it changes {}): run `talosprov plan` again",
        list(.affects)
    )]
    Input {
        /// The file, as the plan names it.
        file: String,
        /// `changed`, `is new`, `was removed`.
        what: &'static str,
        /// The resources whose change it makes differ, the first first.
        affects: Vec<Address>,
    },
    /// The topology now asks for another value than the plan shows.
    #[error(
        "{address}: {field} is {now} in {file}, the plan says {planned}: run `talosprov plan` again"
    )]
    Value {
        /// The resource whose value differs from the plan's, e.g. `vm/wk-1`.
        address: Address,
        /// The field, as the topology names it (`memory`, `disk_size`).
        field: String,
        /// The value now.
        now: String,
        /// The value in the plan.
        planned: String,
        /// The topology file.
        file: String,
    },
    /// The cluster changed since the plan was saved (drift, a node that
    /// answers now, a resource deleted by hand).
    #[error(
        "{address}: the cluster changed since the plan was saved ({detail}): run `talosprov \
         plan` again"
    )]
    Cluster {
        /// The resource the cluster no longer matches the plan on.
        address: Address,
        /// What differs.
        detail: String,
    },
}

/// Check that `now` (planned again at apply, from the same state serial) is
/// the saved plan, and name the first difference otherwise: in plan order,
/// the first change that differs in any value, explained by the input file
/// that changed for it, else by the field whose value differs. A file that
/// changed without changing the plan (a comment) does not block. Drift seen
/// now and not when the plan was made blocks too.
///
/// # Errors
/// [`PlanMismatch`] (boxed: it is large).
pub fn check_same(
    saved: &SavedPlan,
    now: &Plan,
    inputs_now: &InputDigests,
) -> Result<(), Box<PlanMismatch>> {
    let planned: BTreeMap<&Address, &Change> = saved
        .plan
        .changes
        .iter()
        .map(|c| (c.address(), c))
        .collect();
    let fresh: BTreeMap<&Address, &Change> = now.changes.iter().map(|c| (c.address(), c)).collect();
    let mut order: Vec<&Address> = saved.plan.changes.iter().map(|c| c.address()).collect();
    let known: BTreeSet<&Address> = order.iter().copied().collect();
    order.extend(
        now.changes
            .iter()
            .map(|c| c.address())
            .filter(|a| !known.contains(a)),
    );
    let differing: Vec<&Address> = order
        .into_iter()
        .filter(|a| planned.get(*a) != fresh.get(*a))
        .collect();
    if let Some(first) = differing.first() {
        let mut mismatch = explain(
            first,
            planned.get(*first).copied(),
            fresh.get(*first).copied(),
            saved,
            inputs_now,
        );
        // A file names every change it makes differ, not only the first.
        if let PlanMismatch::Input { file, affects, .. } = &mut mismatch {
            let reads = |a: &Address| match a {
                Address::Config(h) => [&saved.inputs, inputs_now]
                    .iter()
                    .any(|i| i.nodes.get(h).is_some_and(|l| l.contains(file))),
                Address::Image(_)
                | Address::PciMapping(_)
                | Address::HaRule(_)
                | Address::Pool(_)
                | Address::Vm(_)
                | Address::Bootstrap
                | Address::Kubeconfig
                | Address::Talosconfig
                | Address::Object(_) => false,
            };
            affects.extend(
                differing[1..]
                    .iter()
                    .filter(|a| *file != saved.inputs.topology && reads(a))
                    .map(|a| (*a).clone()),
            );
        }
        return Err(Box::new(mismatch));
    }
    if let Some(c) = now
        .conflicts
        .iter()
        .find(|c| !saved.plan.conflicts.contains(c))
    {
        return Err(Box::new(PlanMismatch::Cluster {
            address: c.address.clone(),
            detail: format!("{} is there now, which talosprov does not own", c.found),
        }));
    }
    let drift = |plan: &Plan| -> Vec<(Address, Vec<FieldChange>)> {
        plan.drift
            .iter()
            .map(|d| (d.address.clone(), d.fields.clone()))
            .collect()
    };
    if let Some((address, fields)) = drift(now)
        .into_iter()
        .find(|d| !drift(&saved.plan).contains(d))
    {
        let detail = fields.first().map_or_else(
            || "it was deleted".to_owned(),
            |f| {
                format!(
                    "{} is {}, was {}",
                    f.name,
                    shown(f.after.as_deref()),
                    shown(f.before.as_deref())
                )
            },
        );
        return Err(Box::new(PlanMismatch::Cluster { address, detail }));
    }
    Ok(())
}

/// The mismatch for one address whose change differs (`None`: no change).
fn explain(
    address: &Address,
    planned: Option<&Change>,
    now: Option<&Change>,
    saved: &SavedPlan,
    inputs_now: &InputDigests,
) -> PlanMismatch {
    let host = match address {
        Address::Config(h) | Address::Vm(h) => Some(h.as_str()),
        Address::Image(_)
        | Address::PciMapping(_)
        | Address::HaRule(_)
        | Address::Pool(_)
        | Address::Bootstrap
        | Address::Kubeconfig
        | Address::Talosconfig
        | Address::Object(_) => None,
    };
    let changed = saved.inputs.changed_for(inputs_now, host);
    let topology_changed = changed.iter().any(|(f, _)| *f == saved.inputs.topology);
    // A patch file of the node explains a config change first.
    if matches!(address, Address::Config(_))
        && let Some((file, what)) = changed.iter().find(|(f, _)| *f != saved.inputs.topology)
    {
        return PlanMismatch::Input {
            file: file.clone(),
            what: what.says(),
            affects: vec![address.clone()],
        };
    }
    if let (Some(p), Some(n)) = (planned, now) {
        let field_of =
            |c: &Change, name: &Field| c.fields.iter().find(|f| &f.name == name).cloned();
        let names: Vec<&Field> = p.fields.iter().chain(&n.fields).map(|f| &f.name).collect();
        for name in names {
            let (pf, nf) = (field_of(p, name), field_of(n, name));
            if pf == nf {
                continue;
            }
            let after = |f: &Option<FieldChange>| f.as_ref().and_then(|f| f.after.clone());
            let before = |f: &Option<FieldChange>| f.as_ref().and_then(|f| f.before.clone());
            if before(&pf) != before(&nf) && !topology_changed {
                return PlanMismatch::Cluster {
                    address: address.clone(),
                    detail: format!(
                        "{} is {} now, was {} when the plan was made",
                        name,
                        shown(before(&nf).as_deref()),
                        shown(before(&pf).as_deref())
                    ),
                };
            }
            let digest = name == &Field::Config(ConfigField::ConfigSha256);
            if after(&pf) != after(&nf) && topology_changed && !digest {
                return PlanMismatch::Value {
                    address: address.clone(),
                    field: topology_field(name),
                    now: shown(after(&nf).as_deref()),
                    planned: shown(after(&pf).as_deref()),
                    file: saved.inputs.topology.clone(),
                };
            }
        }
    }
    if let Some((file, what)) = changed.first() {
        return PlanMismatch::Input {
            file: file.clone(),
            what: what.says(),
            affects: vec![address.clone()],
        };
    }
    PlanMismatch::Cluster {
        address: address.clone(),
        detail: difference(planned, now),
    }
}

/// Addresses as `a, b, c`.
fn list(addresses: &[Address]) -> String {
    addresses
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A display value, or `(none)`.
fn shown(v: Option<&str>) -> String {
    v.unwrap_or("(none)").to_owned()
}

/// The topology's name for a plan field: `memory_mib` is `memory`, and so on.
fn topology_field(name: &Field) -> String {
    match name {
        Field::Vm(VmField::MemoryMib) => "memory".into(),
        Field::Vm(VmField::DiskGib) => "disk_size".into(),
        Field::Vm(VmField::Vmid) => "vm_id".into(),
        Field::Vm(VmField::Node) => "proxmox_node".into(),
        Field::Vm(device @ VmField::HostPci(_)) => format!("hostpci ({device})"),
        Field::Vm(nic @ VmField::Net(n)) => format!("networks[{n}] ({nic})"),
        Field::Vm(disk @ VmField::Scsi(n)) => format!("disks[{}] ({disk})", n - 1),
        Field::Vm(VmField::Agent) => "schematic (agent)".into(),
        Field::Vm(VmField::Ha) => "ha (or proxmox.spread)".into(),
        Field::Vm(VmField::Cores | VmField::Name | VmField::Tags)
        | Field::Volid
        | Field::Mapping(_)
        | Field::HaRule(_)
        | Field::Config(_)
        | Field::Object(_) => name.to_string(),
    }
}

/// What differs between two versions of one change, beyond their fields.
fn difference(planned: Option<&Change>, now: Option<&Change>) -> String {
    match (planned, now) {
        (None, Some(n)) => format!(
            "the plan has no change for it, now it would {}: {}",
            n.action().as_str(),
            n.reason
        ),
        (Some(p), None) => format!(
            "the plan would {} it, now there is nothing to do",
            p.action().as_str()
        ),
        (Some(p), Some(n)) if p.action() != n.action() => format!(
            "the plan would {} it, now it would {}",
            p.action().as_str(),
            n.action().as_str()
        ),
        (Some(p), Some(n)) if p.apply_mode() != n.apply_mode() => format!(
            "the plan sends its config in mode {}, now it would be {}",
            p.apply_mode().map_or("(none)", |m| m.as_str()),
            n.apply_mode().map_or("(none)", |m| m.as_str())
        ),
        (Some(p), Some(n)) if p.reason != n.reason => {
            format!("the plan says \"{}\", now \"{}\"", p.reason, n.reason)
        }
        _ => "its planned values differ".to_owned(),
    }
}

/// Why a saved plan cannot be applied to the state as it is now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StalePlan {
    /// The state belongs to another cluster.
    #[error(
        "the saved plan was made for state lineage {planned}, but the state has lineage {current}"
    )]
    Lineage {
        /// The plan's lineage.
        planned: String,
        /// The state's lineage.
        current: String,
    },
    /// The state was written since the plan was made.
    #[error(
        "the saved plan is stale: it was made from state serial {planned}, and the state is now \
         at serial {current}; run `talosprov plan` again"
    )]
    Serial {
        /// The plan's serial (`none` when made before any state).
        planned: String,
        /// The state's serial (`none` when there is none).
        current: String,
    },
}

/// Check that `plan` was made from the state identified by `current`
/// (lineage and serial; `None` when there is no state), as OpenTofu's local
/// backend does before applying a saved plan.
///
/// # Errors
/// [`StalePlan`].
pub fn check_fresh(plan: &Plan, current: Option<(uuid::Uuid, u64)>) -> Result<(), StalePlan> {
    let text = |v: Option<u64>| v.map_or_else(|| "none".to_owned(), |s| s.to_string());
    match (plan.lineage.zip(plan.serial), current) {
        (None, None) => Ok(()),
        (Some((pl, ps)), Some((cl, cs))) => {
            if pl != cl {
                Err(StalePlan::Lineage {
                    planned: pl.to_string(),
                    current: cl.to_string(),
                })
            } else if ps != cs {
                Err(StalePlan::Serial {
                    planned: ps.to_string(),
                    current: cs.to_string(),
                })
            } else {
                Ok(())
            }
        }
        (p, c) => Err(StalePlan::Serial {
            planned: text(p.map(|x| x.1)),
            current: text(c.map(|x| x.1)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(at: Option<(uuid::Uuid, u64)>) -> Plan {
        Plan {
            lineage: at.map(|a| a.0),
            serial: at.map(|a| a.1),
            refreshed: false,
            destroy: false,
            changes: vec![],
            drift: vec![],
            warnings: vec![],
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
            unknown: Vec::new(),
            broken: Vec::new(),
            unfinished: Vec::new(),
        }
    }

    #[test]
    fn plan_from_an_older_serial_is_stale() {
        let l = uuid::Uuid::from_u128(1);
        assert!(check_fresh(&plan(Some((l, 3))), Some((l, 3))).is_ok());
        let e = check_fresh(&plan(Some((l, 3))), Some((l, 5))).unwrap_err();
        assert!(e.to_string().contains("serial 3"), "{e}");
        assert!(check_fresh(&plan(None), Some((l, 1))).is_err());
        assert!(check_fresh(&plan(None), None).is_ok());
        let other = uuid::Uuid::from_u128(2);
        assert!(matches!(
            check_fresh(&plan(Some((l, 3))), Some((other, 3))),
            Err(StalePlan::Lineage { .. })
        ));
    }

    #[test]
    fn every_kind_and_action_reads_back_as_it_was_saved_and_no_other() {
        use crate::change::Action;
        let addresses: Vec<Address> = [
            "image/abcdef12-v1.13.8",
            "pool/TALOS",
            "pci_mapping/gpu",
            "vm/wk-1",
            "ha_rule/worker",
            "config/wk-1",
            "bootstrap",
            "kubeconfig",
            "talosconfig",
            "addon/cilium/DaemonSet.apps/kube-system/cilium",
        ]
        .iter()
        .map(|a| a.parse().expect("an address"))
        .collect();
        let actions = [
            Action::Create,
            Action::Update,
            Action::Replace,
            Action::Delete,
            Action::ApplyConfig,
            Action::Upgrade,
            Action::Bootstrap,
        ];
        let mut changes = Vec::new();
        for a in &addresses {
            let made: Vec<_> = actions
                .iter()
                .filter_map(|&action| crate::example::change(a.clone(), action, "why").ok())
                .collect();
            assert!(!made.is_empty(), "{a} has an action");
            changes.extend(made);
        }
        assert_eq!(changes.len(), 23);
        let saved = SavedPlan::of(Plan::of_changes(changes), InputDigests::default());
        let back = SavedPlan::from_json(&saved.to_json()).expect("reads back");
        assert_eq!(back, saved);
        for (c, d) in saved.plan.changes.iter().zip(&back.plan.changes) {
            assert_eq!((c.address(), c.action()), (d.address(), d.action()));
        }
        // An action the kind does not have is not read.
        let text = String::from_utf8(saved.to_json()).expect("UTF-8");
        let bad = text.replacen("\"op\": \"create\"", "\"op\": \"upgrade\"", 1);
        assert_ne!(bad, text);
        let e = SavedPlan::from_json(bad.as_bytes()).expect_err("refused");
        assert!(e.to_string().contains("unknown variant `upgrade`"), "{e}");
    }

    #[test]
    fn saved_plan_round_trips_without_showing_secrets_in_debug() {
        let s = SavedPlan {
            format_version: SAVED_PLAN_FORMAT_VERSION,
            plan: plan(None),
            secrets: Some(Sensitive::new("cluster: secret")),
            targets: vec!["vm/cp-01".into()],
            staged: false,
            allow_new_etcd: false,
            inputs: InputDigests::default(),
            renderings: BTreeMap::from([(
                "cilium".to_owned(),
                talosprov_statefile::format::Rendering {
                    digest: "ab".repeat(32),
                    manifests: Sensitive::new("kind: Secret\ndata: {ca.key: c2VjcmV0}\n"),
                },
            )]),
            renewal: Some(crate::renewal::Renewal::at(
                time::macros::datetime!(2027-11-18 09:00 UTC),
            )),
        };
        assert_eq!(SavedPlan::from_json(&s.to_json()).expect("reads"), s);
        assert!(!format!("{s:?}").contains("cluster: secret"));
        assert!(
            !format!("{s:?}").contains("c2VjcmV0"),
            "renderings are sensitive"
        );
    }

    /// A saved plan updating `vm/w` memory to `memory`, a config change on
    /// `w` with digest `digest`, made from inputs `files`.
    fn saved(memory: &str, digest: &str, files: &[(&str, &str)]) -> (SavedPlan, Plan) {
        let mut vm = crate::example::change(
            Address::Vm("w".into()),
            crate::change::Action::Update,
            "memory",
        )
        .expect("a change of that kind");
        vm.fields.push(FieldChange::new(
            VmField::MemoryMib,
            Some("8192".into()),
            Some(memory.into()),
        ));
        let mut config = crate::example::change(
            Address::Config("w".into()),
            crate::change::Action::ApplyConfig,
            "machine config changed",
        )
        .expect("a change of that kind");
        config.fields.push(FieldChange::new(
            ConfigField::ConfigSha256,
            Some("aa".into()),
            Some(digest.into()),
        ));
        let p = Plan {
            changes: vec![vm, config],
            ..plan(Some((uuid::Uuid::from_u128(1), 4)))
        };
        let inputs = InputDigests {
            topology: "cluster.yaml".into(),
            files: files
                .iter()
                .map(|(f, d)| ((*f).to_owned(), (*d).to_owned()))
                .collect(),
            nodes: BTreeMap::from([("w".to_owned(), vec!["patches/worker/10.yaml".to_owned()])]),
        };
        let s = SavedPlan::of(p.clone(), inputs);
        (s, p)
    }

    const FILES: [(&str, &str); 2] = [("cluster.yaml", "t1"), ("patches/worker/10.yaml", "p1")];

    #[test]
    fn same_plan_passes_even_when_a_file_changed_without_effect() {
        let (s, p) = saved("9000", "bb", &FILES);
        assert_eq!(check_same(&s, &p, &s.inputs), Ok(()));
        let mut commented = s.inputs.clone();
        commented
            .files
            .insert("patches/worker/10.yaml".into(), "p2".into());
        assert_eq!(check_same(&s, &p, &commented), Ok(()));
    }

    #[test]
    fn first_difference_is_named_with_its_cause() {
        let (s, _) = saved("9000", "bb", &FILES);
        // The topology asks for other memory: the value is named.
        let (_, now) = saved("65536", "bb", &[("cluster.yaml", "t2"), FILES[1]]);
        let mut inputs = s.inputs.clone();
        inputs.files.insert("cluster.yaml".into(), "t2".into());
        let e = check_same(&s, &now, &inputs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "vm/w: memory is 65536 in cluster.yaml, the plan says 9000: run `talosprov plan` again"
        );
        // A patch file changed the config: the file is named.
        let (_, now) = saved("9000", "cc", &FILES);
        let mut inputs = s.inputs.clone();
        inputs
            .files
            .insert("patches/worker/10.yaml".into(), "p2".into());
        let e = check_same(&s, &now, &inputs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "patches/worker/10.yaml changed since the plan was saved (it changes config/w): run \
             `talosprov plan` again"
        );
        // No input changed: the cluster did.
        let (_, mut now) = saved("9000", "bb", &FILES);
        now.changes[0].fields[0].before = Some("6144".into());
        let e = check_same(&s, &now, &s.inputs).unwrap_err();
        assert!(
            matches!(*e, PlanMismatch::Cluster { .. }),
            "{e}: a drifted value is the cluster's"
        );
        // A change the plan did not have.
        let (_, mut now) = saved("9000", "bb", &FILES);
        now.changes.push(
            crate::example::change(
                Address::Vm("x".into()),
                crate::change::Action::Create,
                "new",
            )
            .expect("a change of that kind"),
        );
        let e = check_same(&s, &now, &s.inputs).unwrap_err();
        assert!(
            e.to_string().starts_with("vm/x: the cluster changed"),
            "{e}"
        );
    }
}
