//! What a finished step (or part of one) records in the state (pure): each
//! record is applied to the in-memory state, which the executor then saves, so
//! a crash loses at most the step that was running.

use talosprov_base::sensitive::Sensitive;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{self, Output, State};
use talosprov_statefile::intent::CreateIntent;

/// One fact to record. A record of a VM, pool or PCI mapping (made or gone)
/// replaces the create intent at its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// talosprov is about to create the object at `address` (saved before the
    /// create request is sent).
    Intent {
        /// `vm/<hostname>`, `pool/<name>` or `pci_mapping/<name>`.
        address: Address,
        /// The ID it is created at.
        intent: CreateIntent,
    },
    /// An image is in storage (`image/<name>`).
    Image {
        /// Address name.
        name: String,
        /// Where it is.
        image: format::Image,
    },
    /// An image was deleted.
    ImageGone(String),
    /// The pool exists.
    Pool(String),
    /// The pool was deleted.
    PoolGone(String),
    /// A PCI mapping exists as declared.
    Mapping {
        /// Mapping name.
        name: String,
        /// Its record: the per-host entries (device path, IDs, IOMMU group).
        mapping: format::PciMapping,
    },
    /// A PCI mapping was deleted.
    MappingGone(String),
    /// A spread group's HA rule exists as Proxmox holds it.
    HaRule {
        /// The `proxmox.spread` entry.
        entry: String,
        /// Its record.
        rule: format::HaRule,
    },
    /// A spread group's HA rule was deleted.
    HaRuleGone(String),
    /// A VM exists with these settings; `fresh` when just created (any
    /// config recorded for the hostname belonged to an older VM).
    Vm {
        /// Hostname.
        host: String,
        /// Settings applied.
        vm: format::Vm,
        /// Just created.
        fresh: bool,
    },
    /// A VM was deleted: its config and machine config output go too.
    VmGone(String),
    /// A machine config was sent (`secure_mode` says whether the node was
    /// then seen in secure mode).
    Config {
        /// Hostname.
        host: String,
        /// What was applied.
        config: format::NodeConfig,
        /// The config text sent.
        yaml: Sensitive,
    },
    /// The node answered in secure mode with the recorded config.
    SecureMode(String),
    /// The node was found out of secure mode (reset outside talosprov): a
    /// config staged on it was wiped too.
    NotSecure(String),
    /// The node rebooted since its config was staged, and so runs it.
    StagedTaken(String),
    /// The node was upgraded and runs this Talos version from this installer
    /// image (its machine config record is otherwise kept; a staged config was
    /// taken at the upgrade's reboot).
    Upgraded {
        /// Hostname.
        host: String,
        /// The Talos version it reports, e.g. `v1.13.8`.
        talos_version: String,
        /// The installer image it was upgraded with.
        installer_image: String,
    },
    /// The cluster was bootstrapped.
    Bootstrap(format::Bootstrap),
    /// The admin kubeconfig.
    Kubeconfig(Sensitive),
    /// The talosconfig (YAML) with the admin client certificate the Talos
    /// steps authenticate with.
    Talosconfig(Sensitive),
    /// An add-on's object the API server accepted (server-side apply), keyed
    /// by [`talosprov_backend::ObjectAddress::key`].
    Object {
        /// The object's key.
        key: String,
        /// How it was applied.
        object: format::KubeObject,
    },
    /// An add-on's object pruned (or found gone): forgotten.
    ObjectGone(String),
}

/// Apply one record to the state.
pub fn apply(state: &mut State, record: Record) {
    if let Some(address) = made_address(&record) {
        state.clear_intent(&address);
    }
    let r = &mut state.resources;
    match record {
        Record::Intent { address, intent } => state.set_intent(&address, intent),
        Record::Image { name, image } => {
            r.images.insert(name, image);
        }
        Record::ImageGone(name) => {
            r.images.remove(&name);
        }
        Record::Pool(name) => {
            r.pools.insert(name, format::Pool { comment: None });
        }
        Record::PoolGone(name) => {
            r.pools.remove(&name);
        }
        Record::Mapping { name, mapping } => {
            r.pci_mappings.insert(name, mapping);
        }
        Record::MappingGone(name) => {
            r.pci_mappings.remove(&name);
        }
        Record::HaRule { entry, rule } => {
            r.ha_rules.insert(entry, rule);
        }
        Record::HaRuleGone(entry) => {
            r.ha_rules.remove(&entry);
        }
        Record::Vm { host, vm, fresh } => record_vm(state, host, vm, fresh),
        Record::VmGone(host) => record_vm_gone(state, &host),
        Record::Config { host, config, yaml } => {
            r.configs.insert(host.clone(), config);
            state.outputs.machineconfigs.insert(
                host,
                Output {
                    value: yaml,
                    sensitive: true,
                },
            );
        }
        Record::SecureMode(host) => update_config(state, &host, |c| c.secure_mode = true),
        Record::NotSecure(host) => update_config(state, &host, |c| {
            c.secure_mode = false;
            c.staged = None;
        }),
        Record::StagedTaken(host) => update_config(state, &host, |c| c.staged = None),
        Record::Upgraded {
            host,
            talos_version,
            installer_image,
        } => update_config(state, &host, |c| {
            c.talos_version = talos_version;
            c.installer_image = installer_image;
            c.staged = None;
        }),
        Record::Bootstrap(b) => {
            // etcd runs again: a restore that was under way is over.
            r.bootstrap = Some(b);
            state.etcd_restore = None;
        }
        Record::Kubeconfig(k) => {
            state.outputs.kubeconfig = Some(Output {
                value: k,
                sensitive: true,
            });
        }
        Record::Talosconfig(t) => {
            state.outputs.talosconfig = Some(Output {
                value: t,
                sensitive: true,
            });
        }
        Record::Object { key, object } => {
            r.objects.insert(key, object);
        }
        Record::ObjectGone(key) => {
            r.objects.remove(&key);
        }
    }
}

/// The Proxmox object a record says was made or deleted: its create intent
/// is then done with.
fn made_address(record: &Record) -> Option<Address> {
    match record {
        Record::Pool(name) | Record::PoolGone(name) => Some(Address::Pool(name.clone())),
        Record::Mapping { name, .. } | Record::MappingGone(name) => {
            Some(Address::PciMapping(name.clone()))
        }
        Record::Vm { host, .. } | Record::VmGone(host) => Some(Address::Vm(host.clone())),
        Record::HaRule { entry, .. } | Record::HaRuleGone(entry) => {
            Some(Address::HaRule(entry.clone()))
        }
        Record::Image { name, .. } | Record::ImageGone(name) => Some(Address::Image(name.clone())),
        Record::Intent { .. }
        | Record::Config { .. }
        | Record::SecureMode(_)
        | Record::NotSecure(_)
        | Record::StagedTaken(_)
        | Record::Upgraded { .. }
        | Record::Bootstrap(_)
        | Record::Kubeconfig(_)
        | Record::Talosconfig(_)
        | Record::Object { .. }
        | Record::ObjectGone(_) => None,
    }
}

/// Record `host`'s VM; a `fresh` one (created or replaced) starts with no
/// machine config.
fn record_vm(state: &mut State, host: String, vm: format::Vm, fresh: bool) {
    if fresh {
        state.resources.configs.remove(&host);
        state.outputs.machineconfigs.remove(&host);
    }
    state.resources.vms.insert(host, vm);
}

/// Forget `host`'s VM and machine config; with no node left the cluster is
/// gone, and so are its bootstrap and kubeconfig.
fn record_vm_gone(state: &mut State, host: &str) {
    let r = &mut state.resources;
    r.vms.remove(host);
    r.configs.remove(host);
    state.outputs.machineconfigs.remove(host);
    if r.vms.is_empty() {
        // The cluster is gone, and with it every object its API held.
        r.bootstrap = None;
        r.objects.clear();
        state.outputs.kubeconfig = None;
    }
}

/// Change `host`'s config record, if it has one.
fn update_config(state: &mut State, host: &str, change: impl FnOnce(&mut format::NodeConfig)) {
    if let Some(c) = state.resources.configs.get_mut(host) {
        change(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm() -> format::Vm {
        format::Vm {
            vmid: 121,
            node: "pve".into(),
            name: "cp-01".into(),
            cores: 2,
            memory_mib: 4096,
            disk_gib: 50,
            hostpci: Default::default(),
            tags: vec![],
            net: Default::default(),
            disks: Default::default(),
            agent: true,
            ha: None,
        }
    }

    fn config() -> format::NodeConfig {
        format::NodeConfig {
            config_sha256: "ab".into(),
            talos_version: "v1.13.8".into(),
            installer_image: "i".into(),
            secure_mode: false,
            staged: None,
            role: None,
            running_sha256: None,
        }
    }

    #[test]
    fn fresh_vm_forgets_the_old_config() {
        let mut s = State::new(uuid::Uuid::nil());
        apply(
            &mut s,
            Record::Config {
                host: "cp-01".into(),
                config: config(),
                yaml: Sensitive::new("x"),
            },
        );
        apply(&mut s, Record::SecureMode("cp-01".into()));
        assert!(s.resources.configs["cp-01"].secure_mode);
        apply(
            &mut s,
            Record::Vm {
                host: "cp-01".into(),
                vm: vm(),
                fresh: true,
            },
        );
        assert!(s.resources.configs.is_empty());
        assert!(s.outputs.machineconfigs.is_empty());
    }

    #[test]
    fn a_record_replaces_the_create_intent_at_its_address() {
        let mut s = State::new(uuid::Uuid::nil());
        let cases = [
            (
                Address::Vm("cp-01".into()),
                CreateIntent::vm(121, "pve", "cp-01"),
                Record::Vm {
                    host: "cp-01".into(),
                    vm: vm(),
                    fresh: true,
                },
            ),
            (
                Address::Pool("TALOS".into()),
                CreateIntent::named("TALOS"),
                Record::PoolGone("TALOS".into()),
            ),
            (
                Address::PciMapping("gpu".into()),
                CreateIntent::named("gpu"),
                Record::MappingGone("gpu".into()),
            ),
        ];
        for (address, intent, made) in cases {
            apply(
                &mut s,
                Record::Intent {
                    address: address.clone(),
                    intent: intent.clone(),
                },
            );
            assert_eq!(s.intent(&address), Some(&intent));
            apply(&mut s, made);
            assert_eq!(s.intent(&address), None, "{address}");
        }
        assert!(s.resources.creating.is_empty());
    }

    #[test]
    fn last_vm_gone_forgets_bootstrap_and_kubeconfig() {
        let mut s = State::new(uuid::Uuid::nil());
        apply(
            &mut s,
            Record::Vm {
                host: "cp-01".into(),
                vm: vm(),
                fresh: true,
            },
        );
        apply(
            &mut s,
            Record::Bootstrap(format::Bootstrap {
                done: true,
                node: "cp-01".into(),
                at: "t".into(),
            }),
        );
        apply(&mut s, Record::Kubeconfig(Sensitive::new("k")));
        apply(
            &mut s,
            Record::Object {
                key: "cni/DaemonSet.apps/kube-system/cni".into(),
                object: format::KubeObject {
                    api_version: "apps/v1".into(),
                    digest: "d".into(),
                },
            },
        );
        assert_eq!(s.resources.objects.len(), 1);
        apply(&mut s, Record::VmGone("cp-01".into()));
        assert!(s.resources.bootstrap.is_none());
        assert!(s.outputs.kubeconfig.is_none());
        assert!(
            s.resources.objects.is_empty(),
            "the cluster's objects went with it"
        );
    }

    #[test]
    fn a_reboot_an_upgrade_or_a_reset_ends_a_staged_config() {
        let staged = format::NodeConfig {
            staged: Some(format::Staged {
                boot_time: Some(1_000),
            }),
            secure_mode: true,
            ..config()
        };
        let records = [
            Record::StagedTaken("cp-01".into()),
            Record::Upgraded {
                host: "cp-01".into(),
                talos_version: "v1.13.9".into(),
                installer_image: "i:v1.13.9".into(),
            },
            Record::NotSecure("cp-01".into()),
        ];
        for record in records {
            let mut s = State::new(uuid::Uuid::nil());
            apply(
                &mut s,
                Record::Config {
                    host: "cp-01".into(),
                    config: staged.clone(),
                    yaml: Sensitive::new("x"),
                },
            );
            apply(&mut s, Record::SecureMode("cp-01".into()));
            assert!(s.resources.configs["cp-01"].staged.is_some());
            let what = format!("{record:?}");
            apply(&mut s, record);
            assert_eq!(s.resources.configs["cp-01"].staged, None, "{what}");
        }
    }
}
