//! Planning as a pure function: topology, state and observations in, plan out.
//! Each test checks one behaviour and snapshots the plan it gives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use talosprov_plan::field::{ConfigField, VmField};

use talosprov_base::sensitive::Sensitive;
use talosprov_plan as plan;
use talosprov_plan::change::Action;
use talosprov_plan::desired::RenderedConfig;
use talosprov_plan::diff::PlanInput;
use talosprov_plan::model::{Plan, PlanError};
use talosprov_plan::observed::{Observed, ObservedVm};
use talosprov_plan::saved::{InputDigests, SAVED_PLAN_FORMAT_VERSION, SavedPlan};
use talosprov_plan::view::PlanView;
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{Bootstrap, Output, Pool, State};
use talosprov_topology as topology;
use talosprov_topology::model::{Environment, Topology};

const TOPOLOGY: &str = "
cluster:
  name: lab
  talos_version: v1.13.8
  kubernetes_version: v1.36.2
  vip: 10.0.0.120
  gateway: 10.0.0.1
  prefix_length: 24
  nameservers: [10.0.0.1]
proxmox:
  endpoint: https://pve.example:8006
  node: pve
  datastore: local-lvm
  image_storage: local
  bridge: vmbr0
  pool: TALOS
schematics:
  base: { extensions: [siderolabs/qemu-guest-agent] }
default_schematic: base
pci_mappings:
  gpu: { path: \"0000:01:00\", id: \"10de:2507\", iommu_group: 10, subsystem_id: \"10de:2507\", comment: GPU }
nodes:
  - { hostname: cp-01, ip: 10.0.0.121, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: worker-01, ip: 10.0.0.122, role: worker, cores: 4, memory: 8192, disk_size: 100 }
  - { hostname: gpu-01, ip: 10.0.0.123, role: worker, cores: 4, memory: 12288, disk_size: 100,
      hostpci: [ { device: hostpci0, mapping: gpu } ] }
";

/// A secret that must never reach a plan.
const TOKEN: &str = "q7x9zk.0123456789abcdef";

fn topology(text: &str) -> Topology {
    let loaded = topology::parse(
        text,
        Path::new("/lab/cluster.yaml"),
        &Environment::default(),
    );
    loaded
        .topology
        .unwrap_or_else(|| panic!("valid topology: {:#?}", loaded.diagnostics))
}

fn config_text(host: &str, extra: &str) -> String {
    let kind = if host.starts_with("cp") {
        "controlplane"
    } else {
        "worker"
    };
    format!(
        "version: v1alpha1\nmachine:\n    type: {kind}\n    token: {TOKEN}\n    install:\n        image: factory.talos.dev/nocloud-installer/x:v1.13.8\n{extra}cluster:\n    secret: c2VjcmV0LXZhbHVl\n    network:\n        cni:\n            name: flannel\n"
    )
}

fn rendered(t: &Topology, extra: &BTreeMap<&str, &str>) -> Vec<RenderedConfig> {
    t.nodes
        .iter()
        .map(|n| {
            let yaml = config_text(&n.hostname, extra.get(n.hostname.as_str()).unwrap_or(&""));
            RenderedConfig {
                hostname: n.hostname.clone(),
                schematic_id: plan::desired::schematic_id(t.schematics.get("base")),
                installer_image: "factory.talos.dev/nocloud-installer/x:v1.13.8".into(),
                talos_version: "v1.13.8".into(),
                sha256: format!("{:x}", yaml.len()),
                yaml: Sensitive::new(yaml),
            }
        })
        .collect()
}

/// The state an apply of `t` with `configs` leaves.
fn applied(t: &Topology, configs: &[RenderedConfig]) -> State {
    let d = plan::desired::desired(t, configs, true).expect("desired");
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

fn observed_from(s: &State) -> Observed {
    let mut o = Observed {
        refreshed: true,
        image_storage_shared: Some(true),
        ..Observed::default()
    };
    for (h, vm) in &s.resources.vms {
        o.vms.insert(
            vm.vmid,
            ObservedVm {
                vmid: vm.vmid,
                node: vm.node.clone(),
                name: Some(h.clone()),
                status: "running".into(),
                cores: Some(vm.cores),
                memory_mib: Some(vm.memory_mib),
                disk_gib: Some(vm.disk_gib),
                hostpci: Some(vm.hostpci.clone()),
                tags: vm.tags.iter().cloned().collect::<BTreeSet<_>>(),
                net: Some(vm.net.clone()),
                disks: Some(vm.disks.clone()),
                agent: Some(vm.agent),
                running: BTreeMap::new(),
                ha: None,
            },
        );
        o.talos_versions.insert(h.clone(), "v1.13.8".into());
    }
    o
}

fn run(
    t: &Topology,
    configs: &[RenderedConfig],
    state: Option<&State>,
    obs: &Observed,
) -> Result<Plan, Vec<PlanError>> {
    let d = plan::desired::desired(t, configs, obs.image_storage_shared.unwrap_or(true))
        .expect("desired");
    plan::diff::plan(PlanInput {
        desired: &d,
        state,
        observed: obs,
        // A fixed clock: the plans do not depend on the day they run.
        renewal: plan::renewal::Renewal::at(time::macros::datetime!(2026-06-01 00:00 UTC)),
        etcd: plan::kind::resource::EtcdRecovery::Refuse,
    })
}

fn assert_no_secret(p: &Plan) {
    let json = PlanView::of(p).to_json();
    assert!(!json.contains(TOKEN), "token in plan");
    assert!(!json.contains("c2VjcmV0LXZhbHVl"), "cluster secret in plan");
}

#[test]
fn first_plan_creates_everything_in_dependency_order() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let p = run(&t, &c, None, &Observed::default()).expect("plan");
    assert_no_secret(&p);
    let s = p.summary();
    assert_eq!(
        (s.add, s.change, s.destroy, s.apply_config, s.bootstrap),
        (7, 0, 0, 3, 1)
    );
    insta::assert_json_snapshot!(PlanView::of(&p));
}

#[test]
fn applied_cluster_plans_no_changes() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let p = run(&t, &c, Some(&s), &observed_from(&s)).expect("plan");
    assert!(p.is_empty(), "{:#?}", p.changes);
    assert!(p.drift.is_empty());
    assert_eq!((p.lineage, p.serial), (Some(s.lineage), Some(4)));
}

#[test]
fn raised_memory_is_one_in_place_update_with_restart() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let t2 = topology(&TOPOLOGY.replace("memory: 8192", "memory: 12288"));
    let p = run(&t2, &c, Some(&s), &observed_from(&s)).expect("plan");
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.changes[0].action(), Action::Update);
    assert_eq!(*p.changes[0].address(), Address::Vm("worker-01".into()));
    insta::assert_json_snapshot!(PlanView::of(&p).changes);
}

#[test]
fn memory_set_by_hand_and_pending_is_drift_set_back_without_a_restart() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let mut o = observed_from(&s);
    let worker = o.vms.get_mut(&122).expect("worker");
    worker.memory_mib = Some(6144);
    worker
        .running
        .insert(VmField::MemoryMib, Some("8192".into()));
    let p = run(&t, &c, Some(&s), &o).expect("plan");
    assert_eq!(p.drift.len(), 1);
    assert!(p.drift[0].fields[0].pending);
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.changes[0].reboot, Some(false));
    insta::assert_snapshot!(talosprov::ui::plan::render(&p));
    insta::assert_json_snapshot!((&p.drift, PlanView::of(&p).changes));
}

#[test]
fn memory_left_pending_by_an_interrupted_apply_restarts_the_vm() {
    let t = topology(&TOPOLOGY.replace("memory: 8192", "memory: 12288"));
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let mut o = observed_from(&s);
    o.vms
        .get_mut(&122)
        .expect("worker")
        .running
        .insert(VmField::MemoryMib, Some("8192".into()));
    let p = run(&t, &c, Some(&s), &o).expect("plan");
    assert!(p.drift.is_empty(), "{:?}", p.drift);
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.changes[0].reboot, Some(true));
    insta::assert_snapshot!(talosprov::ui::plan::render(&p));
    insta::assert_json_snapshot!(PlanView::of(&p).changes);
}

#[test]
fn disk_shrink_is_refused() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let t2 = topology(&TOPOLOGY.replace(
        "memory: 8192, disk_size: 100",
        "memory: 8192, disk_size: 60",
    ));
    let errors = run(&t2, &c, Some(&s), &observed_from(&s)).expect_err("refused");
    insta::assert_snapshot!(
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn patched_node_gets_one_apply_config_with_a_redacted_diff() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let extra = BTreeMap::from([("worker-01", "    nodeLabels:\n        zone: a\n")]);
    let c2 = rendered(&t, &extra);
    // The node did not answer the dry run: whether it reboots is unknown.
    let p = run(&t, &c2, Some(&s), &observed_from(&s)).expect("plan");
    assert_eq!(p.changes[0].reboot, None);
    // It answered that auto mode applies the change without a reboot.
    let mut o = observed_from(&s);
    o.apply_reboots.insert("worker-01".into(), false);
    let p = run(&t, &c2, Some(&s), &o).expect("plan");
    assert_eq!(p.changes.len(), 1);
    let ch = &p.changes[0];
    assert_eq!(ch.action(), Action::ApplyConfig);
    assert_eq!(ch.reboot, Some(false));
    assert_no_secret(&p);
    insta::assert_snapshot!(ch.config_diff.clone().unwrap_or_default());
}

#[test]
fn cni_change_on_a_bootstrapped_cluster_warns() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let mut c2 = c.clone();
    for r in &mut c2 {
        let y = r.yaml.expose().replace("flannel", "none");
        r.sha256 = format!("cni-{}", r.hostname);
        r.yaml = Sensitive::new(y);
    }
    let p = run(&t, &c2, Some(&s), &observed_from(&s)).expect("plan");
    assert_eq!(p.summary().apply_config, 3);
    assert_eq!(p.warnings.len(), 3);
    insta::assert_json_snapshot!(p.warnings);
}

#[test]
fn vm_deleted_outside_is_drift_and_created_again() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let mut o = observed_from(&s);
    o.vms.remove(&122);
    o.vms.get_mut(&121).expect("cp").cores = Some(8);
    let p = run(&t, &c, Some(&s), &o).expect("plan");
    insta::assert_json_snapshot!(PlanView::of(&p));
}

#[test]
fn removed_node_is_deleted_and_version_change_is_an_upgrade() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let t2 = topology(&TOPOLOGY.replace(
        "  - { hostname: gpu-01, ip: 10.0.0.123, role: worker, cores: 4, memory: 12288, disk_size: 100,\n      hostpci: [ { device: hostpci0, mapping: gpu } ] }\n",
        "",
    ));
    let mut c2: Vec<RenderedConfig> = c
        .iter()
        .filter(|r| r.hostname != "gpu-01")
        .cloned()
        .collect();
    c2[0].talos_version = "v1.13.9".into();
    let p = run(&t2, &c2, Some(&s), &observed_from(&s)).expect("plan");
    let actions: Vec<(String, Action)> = p
        .changes
        .iter()
        .map(|c| (c.address().to_string(), c.action()))
        .collect();
    assert_eq!(
        actions,
        vec![
            // Upgraded in place: no new disk image until a node is created.
            ("config/cp-01".to_owned(), Action::Upgrade),
            ("vm/gpu-01".to_owned(), Action::Delete),
        ]
    );
    insta::assert_json_snapshot!(PlanView::of(&p).changes);
}

#[test]
fn target_keeps_the_change_and_its_dependencies() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let mut p = run(&t, &c, None, &Observed::default()).expect("plan");
    let d = plan::desired::desired(&t, &c, true).expect("desired");
    plan::order::target(&mut p, &[Address::Config("worker-01".into())], &d);
    let kept: Vec<String> = p.changes.iter().map(|c| c.address().to_string()).collect();
    assert_eq!(kept.len(), 4, "{kept:?}");
    assert!(kept.contains(&"vm/worker-01".to_owned()));
    assert!(kept.contains(&"pool/TALOS".to_owned()));
    assert_eq!(kept.last().map(String::as_str), Some("config/worker-01"));
}

#[test]
fn unshared_image_storage_downloads_per_host() {
    let text = TOPOLOGY.replace(
        "memory: 8192, disk_size: 100 }",
        "memory: 8192, disk_size: 100, proxmox_node: pve2 }",
    );
    let t = topology(&text);
    let c = rendered(&t, &BTreeMap::new());
    let d = plan::desired::desired(&t, &c, false).expect("desired");
    let names: Vec<&String> = d.images.keys().collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.ends_with("-pve") || n.ends_with("-pve2"))
    );
    let shared = plan::desired::desired(&t, &c, true).expect("desired");
    assert_eq!(shared.images.len(), 1);
}

#[test]
fn destroy_plan_deletes_vms_before_pool_and_keeps_images() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let s = applied(&t, &c);
    let p = plan::diff::destroy_plan(Some(&s), &Observed::default(), false);
    let order: Vec<String> = p.changes.iter().map(|c| c.address().to_string()).collect();
    assert_eq!(
        order,
        vec![
            "vm/cp-01",
            "vm/gpu-01",
            "vm/worker-01",
            "pci_mapping/gpu",
            "pool/TALOS"
        ]
    );
    let purge = plan::diff::destroy_plan(Some(&s), &Observed::default(), true);
    assert_eq!(purge.summary().destroy, 6);
}

#[test]
fn a_saved_plan_round_trips_and_other_versions_or_payloads_are_refused() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let p = run(&t, &c, None, &Observed::default()).expect("plan");
    let json = String::from_utf8(SavedPlan::of(p.clone(), InputDigests::default()).to_json())
        .expect("UTF-8");
    let back = SavedPlan::from_json(json.as_bytes()).expect("reads");
    assert_eq!(back.plan, p);
    // `plan -json` prints the view, whose version is its own.
    let view = PlanView::of(&p).to_json();
    assert!(view.contains("\"format_version\": 3,"), "{view}");
    assert!(
        !json.contains("\"address\""),
        "the file names each kind once: {json}"
    );
    let version = format!("\"format_version\": {SAVED_PLAN_FORMAT_VERSION}");
    let with_version = |v: u32| json.replacen(&version, &format!("\"format_version\": {v}"), 1);
    let newer = SavedPlan::from_json(with_version(9).as_bytes()).unwrap_err();
    assert!(
        newer.to_string().contains("this talosprov reads version 4"),
        "{newer}"
    );
    let older = |v: u64| {
        format!(
            "the plan file has format version {v}, from an older talosprov, which this one \
             (version 4) does not read; run `talosprov plan` again"
        )
    };
    for v in [1, 2, 3] {
        let e = SavedPlan::from_json(with_version(v).as_bytes()).unwrap_err();
        assert_eq!(e.to_string(), older(u64::from(v)));
    }
    // A file as version 3 wrote it: the version inside the plan.
    let mut value: serde_json::Value = serde_json::from_str(&json).expect("json");
    value
        .as_object_mut()
        .expect("object")
        .remove("format_version");
    value["plan"]["format_version"] = 3.into();
    let e = SavedPlan::from_json(value.to_string().as_bytes()).unwrap_err();
    assert_eq!(e.to_string(), older(3));
    refused_payloads(&json);
}

/// A change in a saved plan whose op carries another kind's payload, or an
/// action its kind does not have, is refused as the file is read.
fn refused_payloads(json: &str) {
    let value: serde_json::Value = serde_json::from_str(json).expect("json");
    let changes = value["plan"]["changes"].as_array().expect("changes");
    let op = |kind: &str| {
        changes
            .iter()
            .position(|c| c["op"].get(kind).is_some())
            .unwrap_or_else(|| panic!("a {kind} change"))
    };
    let (vm, config) = (op("vm"), op("config"));
    let sent = changes[config]["op"]["config"]["op"]["apply_config"]["config"].clone();
    assert!(sent.is_object(), "{json}");
    let mut carrying = value.clone();
    carrying["plan"]["changes"][vm]["op"]["vm"]["op"]["create"]["config"] = sent;
    let e = SavedPlan::from_json(carrying.to_string().as_bytes()).unwrap_err();
    assert!(e.to_string().contains("unknown field `config`"), "{e}");
    let mut upgrade = value;
    upgrade["plan"]["changes"][vm]["op"]["vm"]["op"] = serde_json::json!("upgrade");
    let e = SavedPlan::from_json(upgrade.to_string().as_bytes()).unwrap_err();
    assert!(e.to_string().contains("unknown variant `upgrade`"), "{e}");
}

#[test]
fn staged_config_warns_until_the_node_reboots_then_is_drift() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let mut s = applied(&t, &c);
    s.resources
        .configs
        .get_mut("worker-01")
        .expect("config")
        .staged = Some(talosprov_statefile::format::Staged {
        boot_time: Some(1_764_400_000),
    });
    let mut o = observed_from(&s);
    o.boot_times.insert("worker-01".into(), 1_764_400_000);
    let waiting = run(&t, &c, Some(&s), &o).expect("plan");
    assert!(waiting.is_empty() && waiting.drift.is_empty());
    insta::assert_snapshot!("staged_waiting", talosprov::ui::plan::render(&waiting));

    o.boot_times.insert("worker-01".into(), 1_764_403_600);
    let taken = run(&t, &c, Some(&s), &o).expect("plan");
    assert!(taken.is_empty() && taken.warnings.is_empty());
    insta::assert_snapshot!("staged_taken", talosprov::ui::plan::render(&taken));
}

#[test]
fn kubernetes_change_rolls_without_a_reboot_unless_the_node_says_it_needs_one() {
    let t = topology(TOPOLOGY);
    let kubelet =
        |v: &str| format!("    kubelet:\n        image: ghcr.io/siderolabs/kubelet:{v}\n");
    // The digests here are the text lengths: the versions differ in length.
    let (old, new) = (kubelet("v1.36.2"), kubelet("v1.36.10"));
    let c = rendered(&t, &BTreeMap::from([("worker-01", old.as_str())]));
    let s = applied(&t, &c);
    let c2 = rendered(&t, &BTreeMap::from([("worker-01", new.as_str())]));
    let mut o = observed_from(&s);
    o.apply_reboots.insert("worker-01".into(), false);
    let p = run(&t, &c2, Some(&s), &o).expect("plan");
    let ch = &p.changes[0];
    assert_eq!(ch.fields[0].name, ConfigField::KubernetesVersion.into());
    assert_eq!(ch.reboot, Some(false));
    assert!(
        ch.reason.contains("the kubelet, after the control planes"),
        "{}",
        ch.reason
    );
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(
        p.warnings[0]
            .message
            .contains("bootstrap manifests (kube-proxy, CoreDNS)")
            && p.warnings[0].message.contains("upgrade-k8s --to v1.36.10"),
        "{:?}",
        p.warnings
    );
    o.apply_reboots.insert("worker-01".into(), true);
    let p = run(&t, &c2, Some(&s), &o).expect("plan");
    let ch = &p.changes[0];
    assert_eq!(ch.fields[0].name, ConfigField::KubernetesVersion.into());
    assert_eq!(ch.reboot, Some(true));
    assert!(
        ch.reason.contains(
            "with other settings the node reboots for: the whole config applied with a reboot"
        ),
        "{}",
        ch.reason
    );
}

#[test]
fn a_new_disk_smaller_than_its_image_on_shared_storage_is_refused() {
    let t = topology(TOPOLOGY);
    let c = rendered(&t, &BTreeMap::new());
    let d = plan::desired::desired(&t, &c, true).expect("desired");
    let volid = d.vms["cp-01"].spec.image_volid.clone();
    // Shared storage, listed on another host than the VMs'.
    let mut o = Observed {
        refreshed: true,
        image_storage_shared: Some(true),
        ..Observed::default()
    };
    o.image_sizes.insert(
        "pve-other".into(),
        BTreeMap::from([(volid.clone(), 60 << 30)]),
    );
    let errors = run(&t, &c, None, &o).expect_err("refused");
    assert_eq!(errors.len(), 1, "only cp-01's 50 GiB disk: {errors:?}");
    insta::assert_snapshot!(errors[0].to_string(), @"vm/cp-01 (vmid 121): disk_size 50 GiB is smaller than its image local:import/talos-v1.13.8-ce4c9805-nocloud-amd64.qcow2 on pve-other, whose virtual size is 60.00 GiB (64424509440 bytes); raise disk_size to 60 GiB or more");
    // Not shared: another host's listing says nothing about this host's copy.
    o.image_storage_shared = Some(false);
    assert!(run(&t, &c, None, &o).is_ok());
    // An image exactly the disk's size fits.
    o.image_storage_shared = Some(true);
    o.image_sizes
        .insert("pve".into(), BTreeMap::from([(volid, 50 << 30)]));
    assert!(run(&t, &c, None, &o).is_ok());
}
