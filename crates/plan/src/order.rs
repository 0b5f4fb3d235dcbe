//! Dependency order (pure): images, PCI mappings and the pool, then VMs, then
//! configs, then the bootstrap, then the kubeconfig, then the add-ons'
//! objects (namespaces, then CRDs, then the rest, each add-on after those it
//! `depends_on`; prunes the other way round); deletes run the other way
//! (VMs before the pool and mappings they use). Each change lists the changes
//! it waits for; `-target` keeps a change and what it depends on.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;

use talosprov_statefile::address::{Address, ObjectAddress};

use super::desired::Desired;
use crate::change::{Action, Change};
use crate::model::Plan;

/// An object's tier: namespaces, then CRDs, then the rest; a prune runs the
/// tiers the other way round.
fn object_tier(c: &Change) -> u8 {
    let Address::Object(o) = c.address() else {
        return 0;
    };
    let tier = match o.kind.as_str() {
        "Namespace" => 0,
        "CustomResourceDefinition.apiextensions.k8s.io" => 1,
        _ => 2,
    };
    if c.action() == Action::Delete {
        5 - tier
    } else {
        tier
    }
}

/// Within the configs: other changes first, then control-plane upgrades, then
/// worker upgrades (the rollout order).
fn rank(c: &Change, desired: &Desired) -> u8 {
    match (c.address(), in_rollout(c)) {
        (Address::Config(host), true) => {
            if is_control_plane(desired, host) {
                1
            } else {
                2
            }
        }
        (Address::Object(_), _) => object_tier(c),
        _ => 0,
    }
}

/// A Talos upgrade, a Kubernetes version change, or a config change on a
/// running node (one with a config diff) that reboots it, or may (its dry run
/// was not read): all roll node by node, so control planes never reboot
/// together.
fn in_rollout(c: &Change) -> bool {
    c.action() == Action::Upgrade
        || (c.action() == Action::ApplyConfig
            && (c.kubernetes().is_some() || (c.config_diff.is_some() && c.reboot != Some(false))))
}

fn is_control_plane(desired: &Desired, host: &str) -> bool {
    desired
        .configs
        .get(host)
        .is_some_and(|c| c.role == talosprov_base::role::Role::Controlplane)
}

fn sort(plan: &mut Plan, desired: &Desired) {
    plan.changes.sort_by(|a, b| {
        (a.op().phase(), rank(a, desired), &a.address()).cmp(&(
            b.op().phase(),
            rank(b, desired),
            &b.address(),
        ))
    });
}

/// VM updates that restart the VM run one at a time (pure): each waits for
/// the one before it, so at most one node is down for its restart.
fn chain_restarts(plan: &mut Plan) {
    let mut previous: Option<Address> = None;
    for c in &mut plan.changes {
        if matches!(c.address(), Address::Vm(_))
            && c.action() == Action::Update
            && c.reboot == Some(true)
            && let Some(p) = previous.replace(c.address().clone())
            && !c.depends_on.contains(&p)
        {
            c.depends_on.push(p);
            c.depends_on.sort();
        }
    }
}

/// Chain the Talos upgrades and Kubernetes version changes into a rollout
/// (pure): each control plane alone
/// and after the one before it, then the workers in waves of at most
/// `max_parallel` (`--max-parallel-upgrades`), each wave after the previous
/// one. Dependencies
/// between upgrades set by an earlier call are replaced.
pub fn chain_upgrades(plan: &mut Plan, desired: &Desired, max_parallel: NonZeroUsize) {
    sort(plan, desired);
    let upgrades: BTreeSet<Address> = plan
        .changes
        .iter()
        .filter(|c| in_rollout(c))
        .map(|c| c.address().clone())
        .collect();
    chain_restarts(plan);
    let mut waves: Vec<Vec<Address>> = Vec::new();
    let mut workers: Vec<Address> = Vec::new();
    for c in plan.changes.iter().filter(|c| in_rollout(c)) {
        match c.address() {
            Address::Config(host) if is_control_plane(desired, host) => {
                waves.push(vec![c.address().clone()]);
            }
            a @ Address::Image(_)
            | a @ Address::PciMapping(_)
            | a @ Address::Pool(_)
            | a @ Address::Vm(_)
            | a @ Address::HaRule(_)
            | a @ Address::Config(_)
            | a @ Address::Bootstrap
            | a @ Address::Kubeconfig
            | a @ Address::Talosconfig
            | a @ Address::Object(_) => workers.push((*a).clone()),
        }
    }
    waves.extend(workers.chunks(max_parallel.get()).map(<[Address]>::to_vec));
    let mut wave_of: BTreeMap<Address, usize> = BTreeMap::new();
    for (i, w) in waves.iter().enumerate() {
        for a in w {
            wave_of.insert(a.clone(), i);
        }
    }
    for c in &mut plan.changes {
        let Some(&i) = wave_of.get(c.address()) else {
            continue;
        };
        c.depends_on.retain(|d| !upgrades.contains(d));
        if i > 0 {
            c.depends_on.extend(waves[i - 1].iter().cloned());
        }
        c.depends_on.sort();
        c.depends_on.dedup();
    }
    assign_control_plane_components(plan, desired);
}

/// Give the first control plane of a Kubernetes roll (in plan order) the list
/// of every control plane of the roll, whose new control-plane component
/// images its step applies first (talosctl `upgrade-k8s`'s phase 1); every
/// other change's list is cleared (pure).
fn assign_control_plane_components(plan: &mut Plan, desired: &Desired) {
    let rolled: Vec<String> = plan
        .changes
        .iter()
        .filter(|c| c.kubernetes().is_some_and(|k| k.rolled))
        .filter_map(|c| match c.address() {
            Address::Config(host) if is_control_plane(desired, host) => Some(host.clone()),
            Address::Image(_)
            | Address::PciMapping(_)
            | Address::Pool(_)
            | Address::Vm(_)
            | Address::HaRule(_)
            | Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
            | Address::Talosconfig
            | Address::Object(_) => None,
        })
        .collect();
    let mut first = true;
    for c in &mut plan.changes {
        let rolled_first = matches!(c.address(), Address::Config(h) if rolled.first() == Some(h));
        let Some(k) = c.config_payload_mut().and_then(|p| p.kubernetes.as_mut()) else {
            continue;
        };
        k.control_plane_components.clear();
        if first && rolled_first {
            k.control_plane_components = rolled.clone();
            first = false;
        }
    }
}

/// What an object's change waits for: the cluster (bootstrap, kubeconfig,
/// the control planes' configs); for an apply, the objects of lower tiers of
/// its own add-on (namespaces, then CRDs) and every object of the add-ons its
/// add-on depends on (`depends_on`, acyclic by validation, so the order is
/// too); for a prune, the prunes of higher tiers of its add-on.
fn object_deps(
    o: &ObjectAddress,
    action: Action,
    c: &Change,
    tiers: &[(Address, u8, bool)],
    desired: &Desired,
) -> Vec<Address> {
    let mut deps = vec![Address::Bootstrap, Address::Kubeconfig];
    for (host, cfg) in &desired.configs {
        if cfg.role == talosprov_base::role::Role::Controlplane {
            deps.push(Address::Config(host.clone()));
        }
    }
    let tier = object_tier(c);
    let deleting = action == Action::Delete;
    let after: &[String] = desired.objects.get(o).map_or(&[], |d| d.after.as_slice());
    for (a, t, d) in tiers {
        let Address::Object(other) = a else { continue };
        let earlier_tier = *d == deleting && *t < tier && other.addon == o.addon;
        let depended_on = !deleting && !*d && after.contains(&other.addon);
        if earlier_tier || depended_on {
            deps.push(a.clone());
        }
    }
    deps
}

/// Fill each change's `depends_on` with the planned changes it waits for, and
/// sort the changes so that each comes after those.
pub fn order(plan: &mut Plan, desired: &Desired) {
    let planned: BTreeSet<Address> = plan.changes.iter().map(|c| c.address().clone()).collect();
    let vm_deletes: Vec<Address> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.address(), Address::Vm(_)) && c.action() == Action::Delete)
        .map(|c| c.address().clone())
        .collect();
    // HA rules that let go of VMs: a VM leaves its rule before it is deleted.
    let rule_releases: Vec<Address> = plan
        .changes
        .iter()
        .filter(|c| {
            matches!(c.address(), Address::HaRule(_))
                && matches!(c.action(), Action::Update | Action::Delete)
        })
        .map(|c| c.address().clone())
        .collect();
    // The VMs a create may wait for: deleted, or replaced at another vmid.
    let vm_frees: BTreeSet<Address> = plan
        .changes
        .iter()
        .filter(|c| {
            matches!(c.address(), Address::Vm(_))
                && matches!(c.action(), Action::Delete | Action::Replace)
        })
        .map(|c| c.address().clone())
        .collect();
    let tiers: Vec<(Address, u8, bool)> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.address(), Address::Object(_)))
        .map(|c| {
            (
                c.address().clone(),
                object_tier(c),
                c.action() == Action::Delete,
            )
        })
        .collect();
    for c in &mut plan.changes {
        let mut deps: Vec<Address> = Vec::new();
        match (c.address(), c.action()) {
            (Address::Vm(host), Action::Create | Action::Replace | Action::Update) => {
                // A VM created at a vmid another VM of the plan frees waits for
                // it (set by the diff, kept here).
                if c.action() != Action::Update {
                    deps.extend(
                        c.depends_on
                            .iter()
                            .filter(|a| vm_frees.contains(a))
                            .cloned(),
                    );
                }
                if let Some(vm) = desired.vms.get(host) {
                    deps.push(Address::Image(vm.image.clone()));
                    if let Some(pool) = &vm.spec.pool {
                        deps.push(Address::Pool(pool.clone()));
                    }
                    for d in &vm.spec.hostpci {
                        deps.push(Address::PciMapping(d.mapping.clone()));
                    }
                }
            }
            (Address::Vm(_), Action::Delete) => deps.extend(rule_releases.iter().cloned()),
            (Address::HaRule(entry), Action::Create | Action::Update) => {
                if let Some(rule) = desired.ha_rules.get(entry) {
                    deps.extend(rule.hosts.iter().map(|h| Address::Vm(h.clone())));
                }
            }
            (Address::Config(host), _) => deps.push(Address::Vm(host.clone())),
            (Address::Bootstrap, _) => {
                if let Some(node) = &desired.bootstrap_node {
                    deps.push(Address::Config(node.clone()));
                }
            }
            (Address::Kubeconfig, _) => {
                deps.push(Address::Bootstrap);
                // The kubeconfig is fetched once the control planes are up.
                for (host, cfg) in &desired.configs {
                    if cfg.role == talosprov_base::role::Role::Controlplane {
                        deps.push(Address::Config(host.clone()));
                    }
                }
            }
            (Address::Pool(_) | Address::PciMapping(_), Action::Delete) => {
                deps.extend(vm_deletes.iter().cloned());
            }
            (Address::Object(o), action) => {
                deps.extend(object_deps(o, action, c, &tiers, desired));
            }
            _ => {}
        }
        deps.retain(|a| planned.contains(a) && a != c.address());
        deps.sort();
        deps.dedup();
        c.depends_on = deps;
    }
    chain_upgrades(plan, desired, NonZeroUsize::MIN);
}

/// Order a destroy plan: VMs first, then the pool, mappings and images.
pub fn order_destroy(plan: &mut Plan) {
    let vms: Vec<Address> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.address(), Address::Vm(_)))
        .map(|c| c.address().clone())
        .collect();
    for c in &mut plan.changes {
        if !matches!(c.address(), Address::Vm(_)) {
            c.depends_on = vms.clone();
        }
    }
    sort(plan, &Desired::default());
}

/// A Kubernetes version change (a machine config change that carries one).
fn is_kubernetes_change(c: &Change) -> bool {
    c.action() == Action::ApplyConfig && c.kubernetes().is_some()
}

/// The addresses of the Kubernetes version changes of control planes (or,
/// with `control_planes` false, of workers).
fn kubernetes_changes(plan: &Plan, desired: &Desired, control_planes: bool) -> Vec<Address> {
    plan.changes
        .iter()
        .filter(|c| is_kubernetes_change(c))
        .filter(|c| {
            matches!(c.address(), Address::Config(h) if is_control_plane(desired, h) == control_planes)
        })
        .map(|c| c.address().clone())
        .collect()
}

/// Keep only the changes at `targets` and the changes they depend on
/// (transitively), as OpenTofu's `-target` does. An empty `targets` keeps all.
/// When the targets keep a worker's Kubernetes version change but leave out a
/// control plane's, a warning says the kubelet would be newer than an API
/// server (Kubernetes version skew policy).
pub fn target(plan: &mut Plan, targets: &[Address], desired: &Desired) {
    if targets.is_empty() {
        return;
    }
    let kubernetes_control_planes = kubernetes_changes(plan, desired, true);
    let mut keep: BTreeSet<Address> = targets.iter().cloned().collect();
    // Changes are in dependency order, so one pass from the end closes the set.
    for c in plan.changes.iter().rev() {
        if keep.contains(c.address()) {
            keep.extend(c.depends_on.iter().cloned());
        }
    }
    plan.changes.retain(|c| keep.contains(c.address()));
    plan.drift.retain(|d| keep.contains(&d.address));
    assign_control_plane_components(plan, desired);
    plan.conflicts
        .retain(|c| targets.contains(&c.address) || c.blocked.iter().any(|b| targets.contains(b)));
    let left_out: Vec<String> = kubernetes_control_planes
        .iter()
        .filter(|a| !keep.contains(*a))
        .map(ToString::to_string)
        .collect();
    if left_out.is_empty() {
        return;
    }
    for worker in kubernetes_changes(plan, desired, false) {
        plan.warnings.push(crate::model::PlanWarning {
            address: Some(worker),
            message: format!(
                "the targets leave out the Kubernetes version change of {}: this node's \
                 kubelet would be newer than their API servers, which Kubernetes does not \
                 support; target the control planes too, or apply them first",
                left_out.join(", ")
            ),
        });
    }
}

/// The `targets` that name nothing: no resource the topology asks for
/// (`desired`) and none the state records. OpenTofu plans nothing for such a
/// target and does not fail; the caller warns, naming each. In the order
/// given, each once.
pub fn unmatched_targets(
    targets: &[Address],
    desired: &Desired,
    state: Option<&talosprov_statefile::format::State>,
) -> Vec<Address> {
    let mut known: BTreeSet<Address> = desired.addresses().into_iter().collect();
    known.extend(state.map(|s| s.addresses()).unwrap_or_default());
    let mut unmatched: Vec<Address> = Vec::new();
    for t in targets {
        if !known.contains(t) && !unmatched.contains(t) {
            unmatched.push(t.clone());
        }
    }
    unmatched
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(host: &str, reboot: Option<bool>) -> Change {
        let mut c =
            crate::example::change(Address::Vm(host.into()), Action::Update, "cores 2 -> 4")
                .expect("a change of that kind");
        c.reboot = reboot;
        c
    }

    fn upgrade(host: &str) -> Change {
        let mut c = crate::example::change(
            Address::Config(host.into()),
            Action::Upgrade,
            "Talos v1.13.7 -> v1.13.8",
        )
        .expect("a change of that kind");
        c.reboot = Some(true);
        c
    }

    fn config(host: &str, mode: crate::planned::ApplyMode) -> crate::planned::PlannedConfig {
        crate::planned::PlannedConfig {
            ip: "10.0.0.1".parse().expect("ip"),
            config_sha256: "ab".repeat(32),
            talos_version: "v1.13.8".into(),
            installer_image: format!("factory.talos.dev/nocloud-installer/{host}:v1.13.8"),
            mode,
            kubernetes: None,
        }
    }

    /// Each change's address and what it waits for.
    fn rows(plan: &Plan) -> Vec<(String, Vec<String>)> {
        plan.changes
            .iter()
            .map(|c| {
                (
                    c.address().to_string(),
                    c.depends_on.iter().map(ToString::to_string).collect(),
                )
            })
            .collect()
    }

    fn row(address: &str, deps: &[&str]) -> (String, Vec<String>) {
        (
            address.to_owned(),
            deps.iter().map(|d| (*d).to_owned()).collect(),
        )
    }

    fn desired(nodes: &[(&str, talosprov_base::role::Role)]) -> Desired {
        let mut d = Desired::default();
        for (host, role) in nodes {
            d.configs.insert(
                (*host).into(),
                super::super::desired::DesiredConfig {
                    role: *role,
                    ip: "10.0.0.1".parse().expect("ip"),
                    record: talosprov_statefile::format::NodeConfig {
                        config_sha256: String::new(),
                        talos_version: "v1.13.8".into(),
                        installer_image: String::new(),
                        secure_mode: true,
                        staged: None,
                        role: Some(*role),
                        running_sha256: None,
                    },
                    yaml: talosprov_base::sensitive::Sensitive::new(String::new()),
                },
            );
        }
        d
    }

    #[test]
    fn upgrades_roll_control_planes_alone_first_then_workers_in_waves() {
        use talosprov_base::role::Role::{Controlplane, Worker};
        let d = desired(&[
            ("cp-1", Controlplane),
            ("cp-2", Controlplane),
            ("w-1", Worker),
            ("w-2", Worker),
            ("w-3", Worker),
        ]);
        let mut plan = Plan::of_changes(
            ["w-3", "w-1", "cp-2", "w-2", "cp-1"]
                .into_iter()
                .map(upgrade)
                .collect(),
        );
        let two = NonZeroUsize::new(2).expect("two");
        chain_upgrades(&mut plan, &d, two);
        let rows = rows(&plan);
        assert_eq!(
            rows,
            vec![
                row("config/cp-1", &[]),
                row("config/cp-2", &["config/cp-1"]),
                row("config/w-1", &["config/cp-2"]),
                row("config/w-2", &["config/cp-2"]),
                row("config/w-3", &["config/w-1", "config/w-2"]),
            ]
        );
        // Made again with one at a time (the default), the waves are replaced.
        chain_upgrades(&mut plan, &d, NonZeroUsize::MIN);
        assert_eq!(
            plan.changes[3].depends_on,
            vec![Address::Config("w-1".into())]
        );
    }

    #[test]
    fn targeting_a_worker_kubelet_without_the_control_planes_warns_of_version_skew() {
        use talosprov_base::role::Role::{Controlplane, Worker};
        let d = desired(&[("cp-1", Controlplane), ("w-1", Worker)]);
        let kubernetes = |host: &str| {
            let mut c = crate::example::change(
                Address::Config(host.into()),
                Action::ApplyConfig,
                "Kubernetes v1.36.2 -> v1.37.0",
            )
            .expect("a change of that kind");
            c.reboot = Some(false);
            let mut p = config(host, crate::planned::ApplyMode::NoReboot);
            p.kubernetes = Some(crate::planned::KubernetesChange {
                from: "v1.36.2".into(),
                to: "v1.37.0".into(),
                rolled: true,
                control_plane_components: Vec::new(),
            });
            *c.config_payload_mut().expect("a config change") = p;
            c
        };
        let plan_of = || Plan::of_changes(vec![kubernetes("cp-1"), kubernetes("w-1")]);
        let mut only_worker = plan_of();
        target(&mut only_worker, &[Address::Config("w-1".into())], &d);
        assert_eq!(only_worker.changes.len(), 1);
        assert_eq!(only_worker.warnings.len(), 1);
        assert!(
            only_worker.warnings[0].message.contains("config/cp-1"),
            "{:?}",
            only_worker.warnings
        );
        let mut both = plan_of();
        target(
            &mut both,
            &[
                Address::Config("w-1".into()),
                Address::Config("cp-1".into()),
            ],
            &d,
        );
        assert!(both.warnings.is_empty());
        let mut only_cp = plan_of();
        target(&mut only_cp, &[Address::Config("cp-1".into())], &d);
        assert!(only_cp.warnings.is_empty());
    }

    #[test]
    fn a_target_matching_nothing_in_the_topology_or_the_state_is_unmatched() {
        use talosprov_base::role::Role::{Controlplane, Worker};
        let mut d = desired(&[("cp-1", Controlplane), ("w-1", Worker)]);
        d.bootstrap_node = Some("cp-1".into());
        let mut state = talosprov_statefile::format::State::new(uuid::Uuid::nil());
        let removed = d.configs["w-1"].record.clone();
        state.resources.configs.insert("old-1".into(), removed);
        let targets: Vec<Address> = [
            "config/w-1",
            "vm/nosuch",
            "bootstrap",
            "config/old-1",
            "vm/nosuch",
            "pool/none",
        ]
        .iter()
        .map(|t| t.parse().expect("address"))
        .collect();
        // Known: in the topology (config/w-1, bootstrap), or only in the
        // state (config/old-1, a node removed from the topology).
        assert_eq!(
            unmatched_targets(&targets, &d, Some(&state)),
            vec![Address::Vm("nosuch".into()), Address::Pool("none".into())]
        );
        assert_eq!(
            unmatched_targets(&targets[3..4], &d, None),
            vec![Address::Config("old-1".into())]
        );
        assert!(unmatched_targets(&[], &d, Some(&state)).is_empty());
    }

    #[test]
    fn first_control_plane_of_a_kubernetes_roll_carries_phase_one_for_all() {
        use talosprov_base::role::Role::{Controlplane, Worker};
        let d = desired(&[
            ("cp-1", Controlplane),
            ("cp-2", Controlplane),
            ("w-1", Worker),
        ]);
        let kubernetes = |host: &str, rolled: bool| {
            let mut c = crate::example::change(
                Address::Config(host.into()),
                Action::ApplyConfig,
                "Kubernetes v1.36.2 -> v1.37.0",
            )
            .expect("a change of that kind");
            let mut p = config(host, crate::planned::ApplyMode::NoReboot);
            p.kubernetes = Some(crate::planned::KubernetesChange {
                from: "v1.36.2".into(),
                to: "v1.37.0".into(),
                rolled,
                control_plane_components: vec!["stale".into()],
            });
            *c.config_payload_mut().expect("a config change") = p;
            c
        };
        let phase_one = |plan: &Plan| -> Vec<(String, Vec<String>)> {
            plan.changes
                .iter()
                .map(|c| {
                    let k = c.kubernetes().expect("kubernetes");
                    (c.address().to_string(), k.control_plane_components.clone())
                })
                .collect()
        };
        let mut plan = Plan::of_changes(vec![
            kubernetes("w-1", true),
            kubernetes("cp-2", true),
            kubernetes("cp-1", true),
        ]);
        chain_upgrades(&mut plan, &d, NonZeroUsize::MIN);
        let both = vec!["cp-1".to_owned(), "cp-2".to_owned()];
        assert_eq!(
            phase_one(&plan),
            vec![
                ("config/cp-1".to_owned(), both),
                ("config/cp-2".to_owned(), vec![]),
                ("config/w-1".to_owned(), vec![]),
            ]
        );
        // A control plane applied whole with its reboot is not in phase one.
        let mut plan = Plan::of_changes(vec![kubernetes("cp-1", false), kubernetes("cp-2", true)]);
        chain_upgrades(&mut plan, &d, NonZeroUsize::MIN);
        assert_eq!(
            phase_one(&plan),
            vec![
                ("config/cp-1".to_owned(), vec![]),
                ("config/cp-2".to_owned(), vec!["cp-2".to_owned()]),
            ]
        );
    }

    #[test]
    fn config_changes_that_reboot_roll_one_node_at_a_time() {
        use talosprov_base::role::Role::{Controlplane, Worker};
        let d = desired(&[
            ("cp-1", Controlplane),
            ("cp-2", Controlplane),
            ("w-1", Worker),
            ("w-2", Worker),
        ]);
        let config = |host: &str, reboot: Option<bool>| {
            let mut c = crate::example::change(
                Address::Config(host.into()),
                Action::ApplyConfig,
                "machine config changed",
            )
            .expect("a change of that kind");
            c.config_diff = Some("+ env".into());
            c.reboot = reboot;
            *c.config_payload_mut().expect("a config change") = config(
                host,
                match reboot {
                    Some(true) => crate::planned::ApplyMode::Reboot,
                    Some(false) => crate::planned::ApplyMode::NoReboot,
                    None => crate::planned::ApplyMode::UnknownUntilApply,
                },
            );
            c
        };
        let mut plan = Plan::of_changes(vec![
            config("w-2", Some(true)),
            config("cp-2", None),
            config("w-1", Some(false)),
            config("cp-1", Some(true)),
        ]);
        chain_upgrades(&mut plan, &d, NonZeroUsize::MIN);
        let rows = rows(&plan);
        assert_eq!(
            rows,
            vec![
                row("config/w-1", &[]),
                row("config/cp-1", &[]),
                row("config/cp-2", &["config/cp-1"]),
                row("config/w-2", &["config/cp-2"]),
            ],
            "a change applied without a reboot does not wait"
        );
    }

    #[test]
    fn vm_restarts_run_one_at_a_time_and_live_updates_do_not_wait() {
        let mut plan = Plan::of_changes(vec![
            update("a", Some(true)),
            update("b", Some(false)),
            update("c", Some(true)),
            update("d", Some(true)),
        ]);
        chain_upgrades(&mut plan, &Desired::default(), NonZeroUsize::MIN);
        let deps: Vec<Vec<String>> = plan
            .changes
            .iter()
            .map(|c| c.depends_on.iter().map(ToString::to_string).collect())
            .collect();
        assert_eq!(
            deps,
            [
                vec![],
                vec![],
                vec!["vm/a".to_owned()],
                vec!["vm/c".to_owned()]
            ]
        );
    }

    #[test]
    fn objects_go_namespaces_then_crds_then_the_rest_each_addon_after_its_dependencies() {
        use talosprov_addon::object::DesiredObject;
        let obj = |addon: &str, api: &str, kind: &str, ns: Option<&str>, name: &str| {
            ObjectAddress::new(addon, api, kind, ns, name)
        };
        let cni_ds = obj("cni", "apps/v1", "DaemonSet", Some("kube-system"), "cni");
        let gpu_ns = obj("gpu", "v1", "Namespace", None, "gpu");
        let gpu_crd = obj(
            "gpu",
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "policies.nvidia.com",
        );
        let gpu_policy = obj("gpu", "nvidia.com/v1", "ClusterPolicy", None, "policy");
        let old_ns = obj("old", "v1", "Namespace", None, "old");
        let old_cm = obj("old", "v1", "ConfigMap", Some("old"), "cm");
        let mut d = desired(&[("cp-01", talosprov_base::role::Role::Controlplane)]);
        for (a, api, after) in [
            (&cni_ds, "apps/v1", vec![]),
            (&gpu_ns, "v1", vec!["cni".to_owned()]),
            (&gpu_crd, "apiextensions.k8s.io/v1", vec!["cni".to_owned()]),
            (&gpu_policy, "nvidia.com/v1", vec!["cni".to_owned()]),
        ] {
            d.objects.insert(
                a.clone(),
                DesiredObject::new(api, serde_json::json!({}), after),
            );
        }
        let mut plan = Plan::of_changes(
            [&gpu_policy, &gpu_crd, &gpu_ns, &cni_ds]
                .into_iter()
                .map(|a| {
                    crate::example::change(
                        Address::Object(Box::new(a.clone())),
                        Action::Create,
                        "apply",
                    )
                    .expect("a change of that kind")
                })
                .chain([&old_ns, &old_cm].into_iter().map(|a| {
                    crate::example::change(
                        Address::Object(Box::new(a.clone())),
                        Action::Delete,
                        "prune",
                    )
                    .expect("a change of that kind")
                }))
                .collect(),
        );
        order(&mut plan, &d);
        let t = |a: &ObjectAddress| Address::Object(Box::new(a.clone())).to_string();
        assert_eq!(
            rows(&plan),
            vec![
                row(&t(&gpu_ns), &[&t(&cni_ds)]),
                row(&t(&gpu_crd), &[&t(&cni_ds), &t(&gpu_ns)]),
                row(&t(&cni_ds), &[]),
                row(&t(&gpu_policy), &[&t(&cni_ds), &t(&gpu_crd), &t(&gpu_ns)]),
                row(&t(&old_cm), &[]),
                row(&t(&old_ns), &[&t(&old_cm)]),
            ]
        );
    }
}
