//! What a plan says about a machine config staged on a node (`apply --staged`,
//! pure): Talos runs it only from the node's next boot, so until refresh sees
//! the node's boot time move on the plan warns that it waits for a reboot, and
//! once it has, the state's staged record is drift for `apply -refresh-only`.

use std::net::IpAddr;

use talosprov_statefile::address::Address;
use talosprov_statefile::format::Staged;

use super::field::ConfigField;
use super::model::field;
use crate::change::Action;
use crate::model::{Drift, DriftKind, Plan, PlanWarning};
use crate::planned::ApplyMode;

/// What the plan notes about one node's staged config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StagedNote {
    /// The node rebooted since, and runs the staged config: drift (the state
    /// still records it staged).
    Taken(Drift),
    /// The node still runs its previous config: a warning naming the reboot
    /// that would take the staged one.
    Waiting(PlanWarning),
}

/// What the plan does to the node besides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Planned {
    /// A Talos upgrade (which reboots the node).
    pub upgrade: bool,
    /// A new machine config.
    pub config_changed: bool,
}

/// The note for `address` (a `config/<host>` at `ip`) whose config is
/// `staged`, given the boot time refresh read (`None`: not read), whether
/// refresh ran, and whether the plan upgrades the node (whose reboot takes
/// the staged config) or changes its config again.
pub(super) fn staged_note(
    address: &Address,
    ip: IpAddr,
    staged: Staged,
    boot_time: Option<u64>,
    refreshed: bool,
    planned: Planned,
) -> StagedNote {
    if boot_time.is_some_and(|t| staged.taken_at(t)) {
        return StagedNote::Taken(Drift {
            address: address.clone(),
            kind: DriftKind::Changed,
            diff: None,
            fields: vec![field(
                ConfigField::Staged,
                Some("waiting for a reboot"),
                Some("taken: the node rebooted"),
            )],
        });
    }
    let mut message = format!(
        "the machine config was applied in staged mode and waits for the node's next reboot: \
         the node runs its previous config until then. To take it, reboot the node: \
         `talosctl --nodes {ip} reboot`"
    );
    if !refreshed {
        message.push_str(" (whether it rebooted since is not known offline)");
    } else if staged.boot_time.is_none() {
        message.push_str(
            " (its boot time was not read when the config was staged, so talosprov cannot tell \
             whether it rebooted since: applying the config without --staged clears this)",
        );
    }
    if planned.upgrade {
        message.push_str("; the upgrade planned here reboots the node, which takes it");
    } else if planned.config_changed {
        message.push_str("; the config change planned here replaces the staged config");
    }
    StagedNote::Waiting(PlanWarning {
        address: Some(address.clone()),
        message,
    })
}

/// How a change's reason ends once [`stage_config_changes`] made it staged.
const STAGED_REASON: &str = "staged (--staged): the node runs it from its next reboot";

/// Make the plan say what `apply --staged` does (pure): each machine config
/// change on a running node (one with a config diff) is sent in staged mode
/// ([`ApplyMode::Staged`]), so the node does not reboot now and runs the
/// config from its next boot. A Kubernetes version change keeps its rollout
/// (applied with no reboot).
pub fn stage_config_changes(plan: &mut Plan) {
    for c in plan.changes.iter_mut().filter(|c| {
        c.action() == Action::ApplyConfig && c.config_diff.is_some() && c.kubernetes().is_none()
    }) {
        if let Some(p) = c.config_payload_mut() {
            p.mode = ApplyMode::Staged;
        }
        c.reboot = Some(false);
        c.reason = format!("{}; {STAGED_REASON}", c.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> Address {
        Address::Config("talos-worker-01".into())
    }

    fn ip() -> IpAddr {
        "10.0.0.22".parse().expect("ip")
    }

    const STAGED: Staged = Staged {
        boot_time: Some(1_764_400_000),
    };

    #[test]
    fn staged_config_waits_for_a_reboot_until_the_boot_time_moves() {
        let planned = Planned::default();
        let note = staged_note(&address(), ip(), STAGED, Some(1_764_400_000), true, planned);
        let StagedNote::Waiting(w) = note else {
            panic!("expected a warning, got {note:?}")
        };
        insta::assert_snapshot!(w.message, @"the machine config was applied in staged mode and waits for the node's next reboot: the node runs its previous config until then. To take it, reboot the node: `talosctl --nodes 10.0.0.22 reboot`");
        assert_eq!(w.address, Some(address()));
    }

    #[test]
    fn staged_config_taken_at_a_reboot_is_drift() {
        let planned = Planned::default();
        let note = staged_note(&address(), ip(), STAGED, Some(1_764_400_300), true, planned);
        let StagedNote::Taken(d) = note else {
            panic!("expected drift, got {note:?}")
        };
        assert_eq!(d.kind, DriftKind::Changed);
        assert_eq!(d.fields[0].name, ConfigField::Staged.into());
        assert_eq!(
            d.fields[0].after.as_deref(),
            Some("taken: the node rebooted")
        );
    }

    #[test]
    fn unknown_boot_time_keeps_the_warning_and_says_why() {
        let unread = Staged { boot_time: None };
        for (staged, boot_time, refreshed, says) in [
            (STAGED, None, false, "not known offline"),
            (unread, Some(1_764_409_999), true, "cannot tell"),
        ] {
            let planned = Planned {
                upgrade: false,
                config_changed: true,
            };
            let note = staged_note(&address(), ip(), staged, boot_time, refreshed, planned);
            let StagedNote::Waiting(w) = note else {
                panic!("expected a warning, got {note:?}")
            };
            assert!(w.message.contains(says), "{}", w.message);
            assert!(
                w.message.ends_with("replaces the staged config"),
                "{}",
                w.message
            );
        }
    }

    #[test]
    fn staged_apply_plans_no_reboot_for_changes_on_running_nodes() {
        let change = |host: &str, diff: Option<&str>, reboot: Option<bool>| {
            let mut c = crate::example::change(
                Address::Config(host.into()),
                Action::ApplyConfig,
                "machine config changed",
            )
            .expect("a change of that kind");
            c.config_diff = diff.map(str::to_owned);
            c.reboot = reboot;
            *c.config_payload_mut().expect("a config change") = crate::planned::PlannedConfig {
                ip: ip(),
                config_sha256: "ab".repeat(32),
                talos_version: "v1.13.8".into(),
                installer_image: "factory.talos.dev/nocloud-installer/ab:v1.13.8".into(),
                mode: if diff.is_some() {
                    ApplyMode::Reboot
                } else {
                    ApplyMode::Maintenance
                },
                kubernetes: None,
            };
            c
        };
        let mut plan = Plan {
            lineage: None,
            serial: None,
            refreshed: true,
            destroy: false,
            changes: vec![
                change("running", Some("+ env"), Some(true)),
                change("new", None, None),
            ],
            drift: Vec::new(),
            warnings: Vec::new(),
            conflicts: Vec::new(),
            addons: Vec::new(),
            pools: Vec::new(),
            unknown: Vec::new(),
            broken: Vec::new(),
            unfinished: Vec::new(),
        };
        stage_config_changes(&mut plan);
        assert_eq!(plan.changes[0].reboot, Some(false));
        assert_eq!(plan.changes[0].apply_mode(), Some(ApplyMode::Staged));
        assert_eq!(
            plan.changes[0].reason,
            "machine config changed; staged (--staged): the node runs it from its next reboot"
        );
        assert_eq!(
            plan.changes[1],
            change("new", None, None),
            "a first apply is not staged"
        );
    }

    #[test]
    fn planned_upgrade_is_the_reboot_that_takes_the_staged_config() {
        let planned = Planned {
            upgrade: true,
            config_changed: true,
        };
        let note = staged_note(&address(), ip(), STAGED, Some(1_764_400_000), true, planned);
        let StagedNote::Waiting(w) = note else {
            panic!("expected a warning, got {note:?}")
        };
        assert!(
            w.message
                .ends_with("the upgrade planned here reboots the node, which takes it"),
            "{}",
            w.message
        );
    }
}
