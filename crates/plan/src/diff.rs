//! Planning (pure): the desired resources against the recorded state and
//! the observed cluster give the changes, kind after kind (each kind's
//! module in [`super::kind`]), with drift listed apart and refusals
//! collected; `order` then sorts the result.

use talosprov_statefile::format::State;

use super::desired::Desired;
use super::field::{ConfigField, Field};
use super::model::PlanError;
use super::observed::Observed;
use super::ownership;
use super::renewal::Renewal;
use crate::kind::bootstrap::Bootstrap;
use crate::kind::config::Config;
use crate::kind::ha_rule::HaRule;
use crate::kind::image::Image;
use crate::kind::kubeconfig::Kubeconfig;
use crate::kind::mapping::Mapping;
use crate::kind::object::Object;
use crate::kind::pool::Pool;
use crate::kind::resource::EtcdRecovery;
use crate::kind::resource::{Destroying, Planning, ResourceKind};
use crate::kind::talosconfig::Talosconfig;
use crate::kind::vm::Vm;
use crate::model::Plan;

/// What planning reads: all plain data.
#[derive(Debug, Clone, Copy)]
pub struct PlanInput<'a> {
    /// What the topology asks for.
    pub desired: &'a Desired,
    /// The state, `None` before the first apply.
    pub state: Option<&'a State>,
    /// What refresh saw (`Observed::default()` offline).
    pub observed: &'a Observed,
    /// The plan's clock and certificate renewal window (the talosconfig's and the
    /// kubeconfig's client certificates due within it are renewed).
    pub renewal: Renewal,
    /// What to plan when etcd is gone on every control plane.
    pub etcd: EtcdRecovery,
}

/// What a plan shows for a value computed only during the apply, as OpenTofu
/// does.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// Show the machine config digests as [`KNOWN_AFTER_APPLY`] (pure): for a plan
/// rendered with cluster secrets generated only for it (no state yet), whose
/// configs, and so digests, are made again with the secrets the apply keeps.
pub fn digests_known_after_apply(plan: &mut Plan) {
    for f in plan
        .changes
        .iter_mut()
        .flat_map(|c| c.fields.iter_mut())
        .filter(|f| f.name == Field::Config(ConfigField::ConfigSha256) && f.after.is_some())
    {
        f.after = Some(KNOWN_AFTER_APPLY.to_owned());
    }
}

/// What refresh could not read (see [`Plan::unknown`]).
fn unknown(observed: &crate::observed::Observed) -> Vec<crate::model::PlanWarning> {
    let mut out: Vec<crate::model::PlanWarning> = observed
        .unreachable
        .iter()
        .map(|(host, why)| crate::model::PlanWarning {
            address: Some(talosprov_statefile::address::Address::Config(host.clone())),
            message: format!(
                "the node answers neither in secure mode nor in maintenance mode ({why}): its \
                 config, version and etcd are unknown; it is down, unreachable, or lost (see \
                 `talosprov health`)"
            ),
        })
        .collect();
    if let Some(why) = &observed.kubernetes_unread {
        out.push(crate::model::PlanWarning {
            address: None,
            message: format!(
                "the Kubernetes API was not read ({why}): the add-ons' objects are unknown, and \
                 compared with the state only"
            ),
        });
    }
    out
}

/// Plan an apply: every change that brings the cluster to `desired`, kind
/// after kind ([`ResourceKind::plan`]; a kind reads what those before it
/// planned), then ordered with the changes a conflict holds back.
///
/// # Errors
/// Every [`PlanError`] found (each a change refused).
pub fn plan(input: PlanInput<'_>) -> Result<Plan, Vec<PlanError>> {
    let empty = State::new(uuid::Uuid::nil());
    let state = input.state.unwrap_or(&empty);
    let mut p = Planning::new(input.desired, state, input.observed, input.renewal);
    p.etcd = input.etcd;
    Pool::plan(&mut p);
    Mapping::plan(&mut p);
    Vm::plan(&mut p);
    HaRule::plan(&mut p);
    Image::plan(&mut p);
    Config::plan(&mut p);
    Bootstrap::plan(&mut p);
    Kubeconfig::plan(&mut p);
    Talosconfig::plan(&mut p);
    Object::plan(&mut p);

    p.warnings.extend(
        super::renewal::ca_warnings(state, input.renewal.now)
            .into_iter()
            .map(|message| crate::model::PlanWarning {
                address: None,
                message,
            }),
    );

    if !p.errors.is_empty() {
        return Err(p.errors);
    }
    let mut plan = Plan {
        lineage: input.state.map(|s| s.lineage),
        serial: input.state.map(|s| s.serial),
        refreshed: input.observed.refreshed,
        destroy: false,
        changes: p.changes,
        drift: p.drift,
        warnings: p.warnings,
        conflicts: p.conflicts,
        addons: Vec::new(),
        pools: Vec::new(),
        unknown: unknown(input.observed),
        broken: p.broken,
        unfinished: unfinished(state),
    };
    ownership::order_holding_back(&mut plan, input.desired);
    let losses: Vec<crate::model::PlanWarning> = plan
        .data_losses()
        .into_iter()
        .map(|(address, disks)| {
            let named: Vec<String> = disks.iter().map(|(k, v)| format!("{k} ({v})")).collect();
            crate::model::PlanWarning {
                address: Some(address.clone()),
                message: format!(
                    "{} left the topology's disks: apply deletes {} and the data on {}, and \
                     only with -allow-data-loss={address}",
                    named.join(", "),
                    if disks.len() == 1 {
                        "its volume"
                    } else {
                        "their volumes"
                    },
                    if disks.len() == 1 { "it" } else { "them" },
                ),
            }
        })
        .collect();
    plan.warnings.extend(losses);
    Ok(plan)
}

/// What the state records as under way that only its own command finishes:
/// a CA rotation, an etcd restore.
fn unfinished(state: &State) -> Vec<crate::model::PlanWarning> {
    let mut out = Vec::new();
    if let Some(r) = &state.ca_rotation {
        out.push(crate::model::PlanWarning {
            address: None,
            message: format!(
                "a rotation of the {} is in progress (stage {} of 3: {}): the configs carry \
                 that stage's CAs; run `talosprov rotate-ca --{}` to finish it",
                r.authority.title(),
                r.stage.number(),
                r.stage.describe(r.authority),
                r.authority.flag()
            ),
        });
    }
    if let Some(r) = &state.etcd_restore {
        out.push(crate::model::PlanWarning {
            address: Some(talosprov_statefile::address::Address::Bootstrap),
            message: format!(
                "an etcd restore from {} (begun {}) has not recovered etcd yet: run `talosprov \
                 {}` to finish it",
                r.from,
                r.started,
                r.command_words().join(" ")
            ),
        });
    }
    out
}

/// Plan a destroy: every recorded VM, the pool and the PCI mappings are
/// deleted, and what an interrupted apply was creating (each only if it is
/// the object talosprov was making); images too when `purge_images`
/// ([`ResourceKind::destroy`] of each kind).
pub fn destroy_plan(state: Option<&State>, observed: &Observed, purge_images: bool) -> Plan {
    let mut changes = Vec::new();
    if let Some(state) = state {
        let d = Destroying {
            state,
            purge_images,
        };
        Vm::destroy(&d, &mut changes);
        HaRule::destroy(&d, &mut changes);
        Pool::destroy(&d, &mut changes);
        Mapping::destroy(&d, &mut changes);
        Image::destroy(&d, &mut changes);
        Config::destroy(&d, &mut changes);
        Bootstrap::destroy(&d, &mut changes);
        Kubeconfig::destroy(&d, &mut changes);
        Object::destroy(&d, &mut changes);
    }
    let mut plan = Plan {
        lineage: state.map(|s| s.lineage),
        serial: state.map(|s| s.serial),
        refreshed: observed.refreshed,
        destroy: true,
        changes,
        drift: Vec::new(),
        warnings: Vec::new(),
        conflicts: Vec::new(),
        addons: Vec::new(),
        pools: Vec::new(),
        unknown: Vec::new(),
        broken: Vec::new(),
        unfinished: Vec::new(),
    };
    super::order::order_destroy(&mut plan);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::{Change, ConfigOp};
    use crate::model::field;
    use crate::planned::{ApplyMode, PlannedConfig};
    use talosprov_base::role::Role;

    #[test]
    fn what_refresh_could_not_read_is_unknown_in_the_plan() {
        let mut observed = Observed::default();
        assert!(unknown(&observed).is_empty());
        observed
            .unreachable
            .insert("w-1".into(), "connection refused".into());
        observed.kubernetes_unread = Some("no answer within 30 s".into());
        let found = unknown(&observed);
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].address,
            Some(talosprov_statefile::address::Address::Config("w-1".into()))
        );
        assert!(found[0].message.contains("(connection refused)"));
        assert_eq!(found[1].address, None);
        assert!(
            found[1]
                .message
                .contains("the Kubernetes API was not read (no answer")
        );
    }

    #[test]
    fn digests_of_configs_from_new_secrets_are_known_after_apply() {
        let config = PlannedConfig {
            ip: "10.0.0.1".parse().unwrap(),
            config_sha256: "ab12".into(),
            talos_version: "v1.13.8".into(),
            installer_image: "installer".into(),
            mode: ApplyMode::Maintenance,
            kubernetes: None,
        };
        let op = ConfigOp::ApplyConfig {
            config,
            role: Role::Controlplane,
        };
        let c = Change::config("cp-01", op, "new").with_fields(vec![
            field(ConfigField::ConfigSha256, None, Some("ab12")),
            field(ConfigField::TalosVersion, None, Some("v1.13.8")),
        ]);
        let mut p = Plan {
            lineage: None,
            serial: None,
            refreshed: true,
            destroy: false,
            changes: vec![c],
            drift: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
            unknown: Vec::new(),
            broken: Vec::new(),
            unfinished: Vec::new(),
        };
        digests_known_after_apply(&mut p);
        let fields = &p.changes[0].fields;
        assert_eq!(fields[0].after.as_deref(), Some(KNOWN_AFTER_APPLY));
        assert_eq!(fields[1].after.as_deref(), Some("v1.13.8"));
    }

    #[test]
    fn an_operation_the_state_records_under_way_is_unfinished_even_with_no_change() {
        use talosprov_statefile::rotation::{Authority, CaRotation, Stage};
        let mut state = State::new(uuid::Uuid::nil());
        let (desired, observed) = (Desired::default(), Observed::default());
        let planned = |state: &State| {
            plan(PlanInput {
                desired: &desired,
                state: Some(state),
                observed: &observed,
                renewal: Renewal {
                    now: time::OffsetDateTime::UNIX_EPOCH,
                    within: time::Duration::days(30),
                },
                etcd: EtcdRecovery::Refuse,
            })
            .expect("plan")
        };
        assert!(planned(&state).unfinished.is_empty());
        // Between the last stage's configs and its record: nothing to apply.
        state.ca_rotation = Some(CaRotation {
            authority: Authority::Kubernetes,
            stage: Stage::Drop,
            new_crt: String::new(),
            new_key: talosprov_base::sensitive::Sensitive::new(String::new()),
            old_crt: String::new(),
            started_at: "2026-12-07T00:00:00Z".into(),
        });
        state.etcd_restore = Some(talosprov_statefile::format::EtcdRestore {
            from: "s3://b/etcd-x.snapshot.age".into(),
            started: "2026-12-07T00:00:00Z".into(),
            identity: None,
            skip_hash_check: true,
            resetting: false,
        });
        let p = planned(&state);
        assert!(p.changes.is_empty());
        let said: Vec<&str> = p.unfinished.iter().map(|u| u.message.as_str()).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("run `talosprov rotate-ca --kubernetes` to finish it"),
            "{said:?}"
        );
        assert!(
            said[1].contains(
                "run `talosprov etcd restore --from s3://b/etcd-x.snapshot.age --skip-hash-check`"
            ),
            "{said:?}"
        );
    }
}
