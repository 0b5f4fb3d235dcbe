//! Changes of any kind and action with stand-in payloads, for tests of
//! what reads a plan (views, ordering, the executor's scheduling) that do
//! not care what apply would send. Built with the `test-support` feature
//! (and in this crate's own tests); planning never uses it.

use std::net::{IpAddr, Ipv4Addr};

use talosprov_base::role::Role;
use talosprov_base::vm::VmSpec;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{Image, PciMapEntry, PciMapping};

use crate::change::{
    Action, Change, ConfigOp, HaRuleOp, ImageOp, KubeconfigOp, MappingOp, ObjectOp, PoolOp, VmOp,
};
use crate::planned::{ApplyMode, PlannedConfig, PlannedImage, PlannedObject, PlannedVm};

/// A VM spec for `host`: vmid 100 on `pve1`, 2 cores, 4096 MiB, 20 GiB on
/// `local-lvm`, 10.0.0.10/24 on `vmbr0`.
pub fn vm_spec(host: &str) -> VmSpec {
    VmSpec {
        vmid: 100,
        name: host.to_owned(),
        node: "pve1".into(),
        cores: 2,
        memory_mib: 4096,
        disk_gib: 20,
        datastore: "local-lvm".into(),
        image_volid: "local:import/talos.qcow2".into(),
        networks: vec![talosprov_base::vm::Nic::on_bridge("vmbr0")],
        disks: Vec::new(),
        agent: true,
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10)),
        prefix: 24,
        gateway: None,
        nameservers: Vec::new(),
        pool: None,
        tags: Vec::new(),
        hostpci: Vec::new(),
        ha: None,
    }
}

/// The machine config `host` is sent in `mode`: Talos v1.13.8, a digest of
/// `ab` repeated.
pub fn planned_config(host: &str, mode: ApplyMode) -> PlannedConfig {
    PlannedConfig {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 10)),
        config_sha256: "ab".repeat(32),
        talos_version: "v1.13.8".into(),
        installer_image: format!("factory.talos.dev/nocloud-installer/{host}:v1.13.8"),
        mode,
        kubernetes: None,
    }
}

/// The object an add-on applies: `v1`, digest `ab`, without force.
pub fn planned_object() -> PlannedObject {
    PlannedObject {
        api_version: "v1".into(),
        digest: "ab".into(),
        force: false,
    }
}

/// A mapping of one device on `pve1`.
pub fn pci_mapping() -> PciMapping {
    PciMapping {
        description: None,
        map: vec![PciMapEntry {
            node: "pve1".into(),
            path: "0000:01:00.0".into(),
            id: "10de:2204".into(),
            subsystem_id: None,
            iommu_group: Some(1),
        }],
    }
}

/// The image `name` on `pve1`'s `local` storage.
pub fn planned_image(name: &str) -> PlannedImage {
    PlannedImage {
        record: Image {
            volid: format!("local:import/{name}.qcow2"),
            node: "pve1".into(),
            storage: "local".into(),
            schematic_id: "ab".repeat(32),
            talos_version: "v1.13.8".into(),
        },
        factory_url: "https://factory.talos.dev".into(),
    }
}

/// A change of `action` at `address`, with stand-in payloads (a worker's,
/// for a node; a config sent in maintenance mode).
///
/// # Errors
/// An action the address's kind does not have, in words.
pub fn change(
    address: Address,
    action: Action,
    reason: impl Into<String>,
) -> Result<Change, String> {
    let role = Role::Worker;
    let refused = |address: &Address| {
        format!(
            "{address}: `{}` is not an action apply takes on it",
            action.as_str()
        )
    };
    let vm = |host: &str| PlannedVm {
        spec: vm_spec(host),
        restart: false,
    };
    let config = |host: &str| planned_config(host, ApplyMode::Maintenance);
    Ok(match (&address, action) {
        (Address::Image(n), Action::Create) => {
            Change::image(n.clone(), ImageOp::Create(planned_image(n)), reason)
        }
        (Address::Image(n), Action::Delete) => Change::image(n.clone(), ImageOp::Delete, reason),
        (Address::Pool(n), Action::Create) => Change::pool(n.clone(), PoolOp::Create, reason),
        (Address::Pool(n), Action::Delete) => Change::pool(n.clone(), PoolOp::Delete, reason),
        (Address::PciMapping(n), Action::Create) => {
            Change::pci_mapping(n.clone(), MappingOp::Create(pci_mapping()), reason)
        }
        (Address::PciMapping(n), Action::Update) => {
            Change::pci_mapping(n.clone(), MappingOp::Update(pci_mapping()), reason)
        }
        (Address::PciMapping(n), Action::Delete) => {
            Change::pci_mapping(n.clone(), MappingOp::Delete, reason)
        }
        (Address::HaRule(e), Action::Create | Action::Update) => {
            let rule = talosprov_statefile::format::HaRule {
                rule: format!("talosprov-lab-{e}"),
                vmids: vec![100, 101],
                comment: None,
                groups: std::collections::BTreeMap::new(),
            };
            let op = if action == Action::Create {
                HaRuleOp::Create(rule)
            } else {
                HaRuleOp::Update(rule)
            };
            Change::ha_rule(e.clone(), op, reason)
        }
        (Address::HaRule(e), Action::Delete) => {
            Change::ha_rule(e.clone(), HaRuleOp::Delete, reason)
        }
        (Address::Vm(h), Action::Create) => {
            Change::vm(h.clone(), VmOp::Create { vm: vm(h), role }, reason)
        }
        (Address::Vm(h), Action::Update) => {
            Change::vm(h.clone(), VmOp::Update { vm: vm(h), role }, reason)
        }
        (Address::Vm(h), Action::Replace) => {
            Change::vm(h.clone(), VmOp::Replace { vm: vm(h), role }, reason)
        }
        (Address::Vm(h), Action::Delete) => {
            Change::vm(h.clone(), VmOp::Delete { role: Some(role) }, reason)
        }
        (Address::Config(h), Action::ApplyConfig) => {
            let op = ConfigOp::ApplyConfig {
                config: config(h),
                role,
            };
            Change::config(h.clone(), op, reason)
        }
        (Address::Config(h), Action::Upgrade) => {
            let op = ConfigOp::Upgrade {
                config: config(h),
                role,
            };
            Change::config(h.clone(), op, reason)
        }
        (Address::Bootstrap, Action::Bootstrap) => Change::bootstrap(reason),
        (Address::Kubeconfig, Action::Create) => Change::kubeconfig(KubeconfigOp::Fetch, reason),
        (Address::Kubeconfig, Action::Update) => Change::kubeconfig(KubeconfigOp::Renew, reason),
        (Address::Talosconfig, Action::Update) => Change::talosconfig(reason),
        (Address::Object(o), Action::Create) => {
            Change::object((**o).clone(), ObjectOp::Create(planned_object()), reason)
        }
        (Address::Object(o), Action::Update) => {
            Change::object((**o).clone(), ObjectOp::Update(planned_object()), reason)
        }
        (Address::Object(o), Action::Delete) => {
            Change::object((**o).clone(), ObjectOp::Delete(planned_object()), reason)
        }
        (
            Address::Image(_)
            | Address::Pool(_)
            | Address::PciMapping(_)
            | Address::HaRule(_)
            | Address::Vm(_)
            | Address::Config(_)
            | Address::Bootstrap
            | Address::Kubeconfig
            | Address::Talosconfig
            | Address::Object(_),
            Action::Create
            | Action::Update
            | Action::Replace
            | Action::Delete
            | Action::ApplyConfig
            | Action::Upgrade
            | Action::Bootstrap,
        ) => return Err(refused(&address)),
    })
}
