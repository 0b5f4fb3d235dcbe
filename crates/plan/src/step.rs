//! A change as apply's step takes it: one variant per resource kind, the
//! address's name beside the kind's op with the typed values it sends
//! ([`Change::step`]). A change always carries them (it is made per kind,
//! and reading a plan refuses one that does not: [`super::StepError`]).

use talosprov_statefile::address::{Address, ObjectAddress};

use super::change::{Change, ConfigOp, HaRuleOp, ImageOp, MappingOp, ObjectOp, Op, PoolOp, VmOp};

/// What apply does for one change: its kind, the address's name and the
/// kind's op, with the values it sends. Each kind's step in the engine
/// (`apply::kind::<kind>`) takes its own variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// `image/<name>`: download or delete a Talos image.
    Image {
        /// The name part of the address.
        name: &'a str,
        /// What happens to it.
        op: &'a ImageOp,
    },
    /// `pool/<name>`: create or delete the resource pool.
    Pool {
        /// The pool.
        name: &'a str,
        /// What happens to it.
        op: &'a PoolOp,
    },
    /// `pci_mapping/<name>`: write or delete a PCI mapping.
    Mapping {
        /// The mapping's name.
        name: &'a str,
        /// What happens to it.
        op: &'a MappingOp,
    },
    /// `vm/<host>`: create, update, replace or delete a node's VM.
    Vm {
        /// The node's hostname.
        host: &'a str,
        /// What happens to it.
        op: &'a VmOp,
    },
    /// `ha_rule/<entry>`: write or delete a spread group's HA rule.
    HaRule {
        /// The `proxmox.spread` entry.
        entry: &'a str,
        /// What happens to it.
        op: &'a HaRuleOp,
    },
    /// `config/<host>`: send a machine config, roll Kubernetes, or upgrade
    /// Talos.
    Config {
        /// The node's hostname.
        host: &'a str,
        /// What happens to it.
        op: &'a ConfigOp,
    },
    /// Bootstrap etcd on the first control plane.
    Bootstrap,
    /// Fetch the admin kubeconfig (the first time, or again to renew it).
    Kubeconfig,
    /// Issue the talosconfig again from the OS CA.
    Talosconfig,
    /// An add-on's object: server-side applied, or pruned.
    Object {
        /// The object.
        object: &'a ObjectAddress,
        /// What happens to it.
        op: &'a ObjectOp,
    },
}

impl Change {
    /// This change as its step takes it: the address's name beside the
    /// kind's op. Every change has one ([`Change`] is made per kind).
    pub fn step(&self) -> Step<'_> {
        match (self.address(), self.op()) {
            (Address::Image(name), Op::Image(op)) => Step::Image { name, op },
            (Address::Pool(name), Op::Pool(op)) => Step::Pool { name, op },
            (Address::PciMapping(name), Op::PciMapping(op)) => Step::Mapping { name, op },
            (Address::Vm(host), Op::Vm(op)) => Step::Vm { host, op },
            (Address::HaRule(entry), Op::HaRule(op)) => Step::HaRule { entry, op },
            (Address::Config(host), Op::Config(op)) => Step::Config { host, op },
            (Address::Bootstrap, Op::Bootstrap) => Step::Bootstrap,
            (Address::Kubeconfig, Op::Kubeconfig(_)) => Step::Kubeconfig,
            (Address::Talosconfig, Op::Talosconfig) => Step::Talosconfig,
            (Address::Object(object), Op::Object(op)) => Step::Object { object, op },
            (
                Address::Image(_)
                | Address::Pool(_)
                | Address::PciMapping(_)
                | Address::Vm(_)
                | Address::HaRule(_)
                | Address::Config(_)
                | Address::Bootstrap
                | Address::Kubeconfig
                | Address::Talosconfig
                | Address::Object(_),
                _,
            ) => unreachable!("a change's address is of its op's kind (made per kind)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Plan, PlanFormatError};
    use talosprov_base::role::Role;

    fn read(change: serde_json::Value) -> Result<Plan, PlanFormatError> {
        let mut plan = serde_json::to_value(Plan::of_changes(Vec::new())).unwrap();
        plan["changes"] = serde_json::json!([change]);
        Plan::from_json(plan.to_string().as_bytes())
    }

    #[test]
    fn a_change_without_the_values_its_step_sends_is_refused_naming_them() {
        let e = read(serde_json::json!({
            "address": "vm/wk-1", "action": "create", "reason": "new", "role": "worker"
        }))
        .expect_err("no VM");
        assert!(
            e.to_string().contains(
                "vm/wk-1: the plan does not carry the VM to create it (made by another \
                 talosprov?); run `talosprov plan` again"
            ),
            "{e}"
        );
        let e = read(serde_json::json!({
            "address": "config/wk-1", "action": "upgrade", "reason": "v1.14", "role": "worker"
        }))
        .unwrap_err();
        assert!(e.to_string().contains("machine config"), "{e}");
        // A delete needs nothing but the address.
        let p = read(serde_json::json!({
            "address": "vm/wk-1", "action": "delete", "reason": "gone"
        }))
        .unwrap();
        assert_eq!(
            p.changes[0].step(),
            Step::Vm {
                host: "wk-1",
                op: &VmOp::Delete { role: None }
            }
        );
    }

    #[test]
    fn an_action_the_kind_does_not_have_or_a_payload_it_does_not_send_is_refused() {
        let e = read(serde_json::json!({
            "address": "pool/talos", "action": "upgrade", "reason": "?"
        }))
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "pool/talos: `upgrade` is not an action apply takes on it; run `talosprov plan` again"
            ),
            "{e}"
        );
        let e = read(serde_json::json!({
            "address": "pool/talos", "action": "delete", "reason": "?",
            "object": {"api_version": "v1", "digest": "ab"}
        }))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("the plan carries a object, which `delete` does not send"),
            "{e}"
        );
        assert_eq!(Change::bootstrap("").step(), Step::Bootstrap);
    }

    #[test]
    fn each_op_reads_back_as_it_was_written() {
        let changes = vec![
            Change::pool("talos", PoolOp::Create, "new"),
            Change::pci_mapping("gpu", MappingOp::Delete, "gone"),
            Change::vm(
                "wk-1",
                VmOp::Delete {
                    role: Some(Role::Worker),
                },
                "gone",
            ),
            Change::bootstrap("etcd"),
            Change::kubeconfig(crate::change::KubeconfigOp::Fetch, "admin"),
            Change::kubeconfig(crate::change::KubeconfigOp::Renew, "expires soon"),
            Change::talosconfig("expires soon"),
        ];
        let plan = Plan::of_changes(changes);
        assert_eq!(Plan::from_json(plan.to_json().as_bytes()).unwrap(), plan);
    }
}
