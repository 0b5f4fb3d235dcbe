//! Ownership in planning, a pure function: what the state records or names
//! in a create intent is talosprov's; anything else found at a declared ID is
//! a conflict that holds back what depends on it; a half-made VM named by an
//! intent is adopted; the pool and the mappings are compared with what
//! Proxmox holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use talosprov_base::sensitive::Sensitive;
use talosprov_plan as plan;
use talosprov_plan::change::Action;
use talosprov_plan::desired::RenderedConfig;
use talosprov_plan::diff::PlanInput;
use talosprov_plan::model::{DriftKind, Plan};
use talosprov_plan::observed::{Observed, ObservedVm};
use talosprov_plan::view::ChangeView;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{Bootstrap, Output, PciMapEntry, PciMapping, Pool, State};
use talosprov_statefile::intent::CreateIntent;
use talosprov_topology as topology;
use talosprov_topology::model::{Environment, Topology};

const TOPOLOGY: &str = "
cluster: { name: lab, talos_version: v1.13.8, gateway: 10.0.0.1 }
proxmox: { endpoint: https://pve.example:8006, node: pve, datastore: local-lvm, pool: TALOS }
pci_mappings:
  gpu: { path: \"0000:01:00\", id: \"10de:2507\", iommu_group: 10, subsystem_id: \"10de:2507\", comment: GPU }
nodes:
  - { hostname: cp-01, ip: 10.0.0.121, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: worker-01, ip: 10.0.0.122, role: worker, cores: 4, memory: 8192, disk_size: 100 }
  - { hostname: gpu-01, ip: 10.0.0.123, role: worker, cores: 4, memory: 12288, disk_size: 100,
      hostpci: [ { device: hostpci0, mapping: gpu } ] }
";

fn topology() -> Topology {
    let loaded = topology::parse(
        TOPOLOGY,
        Path::new("/lab/cluster.yaml"),
        &Environment::default(),
    );
    loaded
        .topology
        .unwrap_or_else(|| panic!("valid topology: {:#?}", loaded.diagnostics))
}

fn desired() -> plan::desired::Desired {
    let t = topology();
    let configs: Vec<RenderedConfig> = t
        .nodes
        .iter()
        .map(|n| {
            let kind = if n.hostname.starts_with("cp") {
                "controlplane"
            } else {
                "worker"
            };
            let yaml = format!("version: v1alpha1\nmachine:\n    type: {kind}\n");
            RenderedConfig {
                hostname: n.hostname.clone(),
                schematic_id: plan::desired::schematic_id(None),
                installer_image: "factory.talos.dev/nocloud-installer/x:v1.13.8".into(),
                talos_version: "v1.13.8".into(),
                sha256: format!("{:x}", yaml.len()),
                yaml: Sensitive::new(yaml),
            }
        })
        .collect();
    plan::desired::desired(&t, &configs, true).expect("desired")
}

/// The state a finished apply leaves.
fn applied(d: &plan::desired::Desired) -> State {
    let mut s = State::new(uuid::Uuid::from_u128(7));
    s.serial = 4;
    let r = &mut s.resources;
    for (name, i) in &d.images {
        r.images.insert(name.clone(), i.record.clone());
    }
    r.pools.insert("TALOS".into(), Pool { comment: None });
    r.pci_mappings = d.pci_mappings.clone();
    for (h, vm) in &d.vms {
        r.vms.insert(h.clone(), vm.record.clone());
    }
    for (h, c) in &d.configs {
        r.configs.insert(h.clone(), c.record.clone());
        s.outputs
            .machineconfigs
            .insert(h.clone(), Output::sensitive(c.yaml.expose().clone()));
    }
    r.bootstrap = Some(Bootstrap {
        done: true,
        node: "cp-01".into(),
        at: "2026-01-01T00:00:00Z".into(),
    });
    s.outputs.kubeconfig = Some(Output::sensitive("kubeconfig"));
    s
}

fn seen_vm(vmid: u32, name: &str, disk_gib: u64) -> ObservedVm {
    ObservedVm {
        vmid,
        node: "pve".into(),
        name: Some(name.into()),
        status: "stopped".into(),
        cores: Some(1),
        memory_mib: Some(2048),
        disk_gib: Some(disk_gib),
        hostpci: None,
        tags: BTreeSet::new(),
        net: None,
        disks: None,
        agent: None,
        running: BTreeMap::new(),
        ha: None,
    }
}

/// What refresh sees of `state` as it records it, pools and mappings included.
fn observed(state: Option<&State>) -> Observed {
    let mut o = Observed {
        refreshed: true,
        image_storage_shared: Some(true),
        pools: Some(BTreeMap::new()),
        pci_mappings: Some(BTreeMap::new()),
        ..Observed::default()
    };
    let Some(s) = state else {
        return o;
    };
    for (h, vm) in &s.resources.vms {
        o.vms.insert(
            vm.vmid,
            ObservedVm {
                vmid: vm.vmid,
                node: vm.node.clone(),
                name: Some(vm.name.clone()),
                status: "running".into(),
                cores: Some(vm.cores),
                memory_mib: Some(vm.memory_mib),
                disk_gib: Some(vm.disk_gib),
                hostpci: Some(vm.hostpci.clone()),
                tags: vm.tags.iter().cloned().collect(),
                net: Some(vm.net.clone()),
                disks: Some(vm.disks.clone()),
                agent: Some(vm.agent),
                running: BTreeMap::new(),
                ha: None,
            },
        );
        o.talos_versions.insert(h.clone(), "v1.13.8".into());
    }
    o.pools = Some(s.resources.pools.clone());
    o.pci_mappings = Some(s.resources.pci_mappings.clone());
    o
}

fn other_host_gpu() -> PciMapping {
    PciMapping {
        description: Some("made by hand".into()),
        map: vec![PciMapEntry {
            node: "pve2".into(),
            path: "0000:02:00".into(),
            id: "10de:1111".into(),
            subsystem_id: None,
            iommu_group: Some(3),
        }],
    }
}

fn run(d: &plan::desired::Desired, state: Option<&State>, obs: &Observed) -> Plan {
    plan::diff::plan(PlanInput {
        desired: d,
        state,
        observed: obs,
        // A fixed clock: the plans do not depend on the day they run.
        renewal: plan::renewal::Renewal::at(time::macros::datetime!(2026-06-01 00:00 UTC)),
        etcd: plan::kind::resource::EtcdRecovery::Refuse,
    })
    .expect("plan")
}

fn addresses(p: &Plan) -> Vec<String> {
    p.changes.iter().map(|c| c.address().to_string()).collect()
}

#[test]
fn objects_talosprov_did_not_create_are_conflicts_that_hold_back_their_dependants() {
    let d = desired();
    let mut obs = observed(None);
    obs.pci_mappings
        .as_mut()
        .unwrap()
        .insert("gpu".into(), other_host_gpu());
    obs.vms.insert(122, seen_vm(122, "legacy-db", 32));
    let p = run(&d, None, &obs);
    let conflicts: Vec<String> = p.conflicts.iter().map(|c| c.address.to_string()).collect();
    assert_eq!(conflicts, ["pci_mapping/gpu", "vm/worker-01"]);
    let planned = addresses(&p);
    for held in [
        "pci_mapping/gpu",
        "vm/gpu-01",
        "config/gpu-01",
        "vm/worker-01",
        "config/worker-01",
    ] {
        assert!(!planned.contains(&held.to_owned()), "{held} is held back");
    }
    for made in ["pool/TALOS", "vm/cp-01", "config/cp-01", "bootstrap"] {
        assert!(planned.contains(&made.to_owned()), "{made} goes ahead");
    }
    for c in &p.changes {
        for dep in &c.depends_on {
            assert!(planned.contains(&dep.to_string()), "{dep} was held back");
        }
    }
    insta::assert_snapshot!(talosprov::ui::plan::render(&p));
    insta::assert_json_snapshot!("conflicts_json", p.conflicts);
}

#[test]
fn half_made_vm_named_by_a_create_intent_is_adopted_and_brought_to_its_spec() {
    let d = desired();
    let mut s = applied(&d);
    s.resources.vms.remove("worker-01");
    s.resources.configs.remove("worker-01");
    s.set_intent(
        &Address::Vm("worker-01".into()),
        CreateIntent::vm(122, "pve", "worker-01"),
    );
    let mut obs = observed(Some(&s));
    // Created, then killed before the resize: the disk has the image's size.
    obs.vms.insert(122, seen_vm(122, "worker-01", 0));
    let p = run(&d, Some(&s), &obs);
    assert!(p.conflicts.is_empty(), "{:?}", p.conflicts);
    let c = p
        .change(&Address::Vm("worker-01".into()))
        .expect("a change for the half-made VM");
    assert_eq!(c.action(), Action::Create);
    insta::assert_json_snapshot!(ChangeView::of(c));
    assert!(p.change(&Address::Config("worker-01".into())).is_some());
}

#[test]
fn vm_at_the_vmid_of_an_intent_but_with_another_name_is_a_conflict() {
    let d = desired();
    let mut s = applied(&d);
    s.resources.vms.remove("worker-01");
    s.set_intent(
        &Address::Vm("worker-01".into()),
        CreateIntent::vm(122, "pve", "worker-01"),
    );
    let mut obs = observed(Some(&s));
    obs.vms.insert(122, seen_vm(122, "legacy-db", 32));
    let p = run(&d, Some(&s), &obs);
    assert_eq!(p.conflicts.len(), 1);
    assert_eq!(p.conflicts[0].address, Address::Vm("worker-01".into()));
    assert!(p.change(&Address::Vm("worker-01".into())).is_none());
}

#[test]
fn recorded_vm_whose_vmid_another_vm_took_is_drift_and_a_conflict() {
    let d = desired();
    let s = applied(&d);
    let mut obs = observed(Some(&s));
    obs.vms.insert(122, seen_vm(122, "legacy-db", 32));
    let p = run(&d, Some(&s), &obs);
    assert!(p.change(&Address::Vm("worker-01".into())).is_none());
    assert!(
        p.drift
            .iter()
            .any(|d| d.address == Address::Vm("worker-01".into()) && d.kind == DriftKind::Deleted)
    );
    assert_eq!(
        p.conflicts[0].commands,
        [
            "talosprov state rm vm/worker-01",
            "talosprov import vm/worker-01 122"
        ]
    );
}

#[test]
fn what_an_interrupted_apply_was_creating_for_a_removed_node_is_deleted() {
    let d = desired();
    let mut s = applied(&d);
    let old = Address::Vm("old-01".into());
    s.set_intent(&old, CreateIntent::vm(130, "pve", "old-01"));
    let mut obs = observed(Some(&s));
    obs.vms.insert(130, seen_vm(130, "old-01", 0));
    let p = run(&d, Some(&s), &obs);
    let c = p.change(&old).expect("a delete");
    assert_eq!(c.action(), Action::Delete);
    assert!(c.reason.contains("interrupted apply"), "{}", c.reason);
    // Never created: only the intent goes.
    obs.vms.remove(&130);
    let p = run(&d, Some(&s), &obs);
    assert!(p.change(&old).unwrap().reason.contains("was not created"));
    // Destroy deletes it too.
    let p = plan::diff::destroy_plan(Some(&s), &Observed::default(), false);
    assert_eq!(p.change(&old).map(|c| c.action()), Some(Action::Delete));
}

#[test]
fn mapping_changed_by_hand_is_drift_set_back_and_a_pool_deleted_by_hand_is_created_again() {
    let d = desired();
    let s = applied(&d);
    let mut obs = observed(Some(&s));
    obs.pci_mappings
        .as_mut()
        .unwrap()
        .insert("gpu".into(), other_host_gpu());
    obs.pools.as_mut().unwrap().clear();
    let p = run(&d, Some(&s), &obs);
    assert!(p.conflicts.is_empty());
    let kinds: Vec<(String, DriftKind)> = p
        .drift
        .iter()
        .map(|d| (d.address.to_string(), d.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("pool/TALOS".to_owned(), DriftKind::Deleted),
            ("pci_mapping/gpu".to_owned(), DriftKind::Changed)
        ]
    );
    assert_eq!(
        p.change(&Address::Pool("TALOS".into())).map(|c| c.action()),
        Some(Action::Create)
    );
    let m = p.change(&Address::PciMapping("gpu".into())).unwrap();
    assert_eq!(m.action(), Action::Update);
    insta::assert_json_snapshot!(ChangeView::of(m));
}

#[test]
fn imported_mapping_is_updated_to_the_topology_and_the_same_mapping_spelled_otherwise_is_not() {
    let d = desired();
    let mut s = applied(&d);
    s.resources
        .pci_mappings
        .insert("gpu".into(), other_host_gpu());
    let p = run(&d, Some(&s), &plan::observed::Observed::default());
    let m = p.change(&Address::PciMapping("gpu".into())).unwrap();
    assert_eq!(m.action(), Action::Update);
    // As Proxmox returns it: lower case, an empty description read as none.
    let mut same = d.pci_mappings["gpu"].clone();
    same.map[0].id = same.map[0].id.to_uppercase();
    s.resources.pci_mappings.insert("gpu".into(), same);
    let p = run(&d, Some(&s), &plan::observed::Observed::default());
    assert!(p.change(&Address::PciMapping("gpu".into())).is_none());
}

#[test]
fn a_target_keeps_only_the_conflicts_it_waits_for() {
    let d = desired();
    let mut obs = observed(None);
    obs.pci_mappings
        .as_mut()
        .unwrap()
        .insert("gpu".into(), other_host_gpu());
    obs.vms.insert(122, seen_vm(122, "legacy-db", 32));
    let mut p = run(&d, None, &obs);
    plan::order::target(&mut p, &[Address::Config("gpu-01".into())], &d);
    let conflicts: Vec<String> = p.conflicts.iter().map(|c| c.address.to_string()).collect();
    assert_eq!(conflicts, ["pci_mapping/gpu"]);
    let mut p = run(&d, None, &obs);
    plan::order::target(&mut p, &[Address::Vm("cp-01".into())], &d);
    assert!(p.conflicts.is_empty());
}
