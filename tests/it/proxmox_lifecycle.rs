//! Operations on what exists: pool and mapping updates, VM update in place (with a
//! reboot reported where Proxmox keeps the change pending), disk growth, the refusal
//! to shrink, and removal, each read back through the API.

use crate::support::examples;
use crate::support::factory::Factory;
use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::json;
use talosprov_base::vm::HostPci;
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::lifecycle::{self, DestroyOutcome, VmUpdate};
use talosprov_proxmox::{mapping, pool, storage, vm};

/// A fake with the example controlplane and worker created and running.
async fn cluster() -> (FakePve, Factory) {
    let fake = FakePve::start(FakeOptions::default()).await;
    let factory = Factory::start().await;
    let client = fake.client();
    storage::ensure_images(
        &client,
        "local",
        &factory.url,
        &[("pve1".into(), examples::image(examples::BASE))],
    )
    .await
    .expect("image");
    pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    mapping::ensure_mapping(&client, &examples::gpu_mapping(&["pve1"]))
        .await
        .expect("mapping");
    for spec in examples::nodes().into_iter().take(2) {
        vm::ensure_vm(&client, &spec).await.expect("create");
    }
    (fake, factory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_is_created_once_and_bad_names_are_reported() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let client = fake.client();
    assert_eq!(
        pool::ensure_pool(&client, "TALOS", Some("talos"))
            .await
            .expect("pool"),
        pool::PoolOutcome::Created
    );
    assert_eq!(
        pool::ensure_pool(&client, "TALOS", Some("talos"))
            .await
            .expect("pool"),
        pool::PoolOutcome::Present
    );
    assert_eq!(fake.count("POST", "/pools").await, 1);
    assert_eq!(
        pool::members(&client, "TALOS").await.expect("read"),
        Some(Vec::new())
    );
    assert_eq!(pool::members(&client, "OTHER").await.expect("read"), None);
    let e = pool::ensure_pool(&client, "1bad", None)
        .await
        .expect_err("bad name");
    assert_eq!(
        e.to_string(),
        "create pool 1bad: HTTP 500: create pool failed: pool name must start with a letter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapping_is_updated_when_it_differs() {
    let fake = FakePve::start(FakeOptions {
        nodes: vec!["pve2".into()],
        ..FakeOptions::default()
    })
    .await;
    let client = fake.client();
    let mut spec = examples::gpu_mapping(&["pve1"]);
    assert_eq!(
        mapping::ensure_mapping(&client, &spec)
            .await
            .expect("create"),
        mapping::MappingOutcome::Created
    );
    spec = examples::gpu_mapping(&["pve1", "pve2"]);
    spec.entries[1].iommu_group = Some(14);
    spec.description = None;
    assert_eq!(
        mapping::ensure_mapping(&client, &spec)
            .await
            .expect("update"),
        mapping::MappingOutcome::Updated
    );
    let gpu = fake.get("/cluster/mapping/pci/gpu").await;
    assert_eq!(
        gpu["map"],
        json!([
            "node=pve1,path=0000:01:00,id=10de:2507,iommugroup=10,subsystem-id=10de:2507",
            "node=pve2,path=0000:01:00,id=10de:2507,iommugroup=14,subsystem-id=10de:2507"
        ])
    );
    assert!(
        gpu.get("description").is_none(),
        "description removed: {gpu}"
    );
    assert_eq!(
        mapping::ensure_mapping(&client, &spec).await.expect("same"),
        mapping::MappingOutcome::Present
    );
    assert_eq!(fake.count("PUT", "/cluster/mapping/pci/gpu").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_vm_update_is_pending_until_a_reboot_and_the_disk_grows() {
    let (fake, _factory) = cluster().await;
    let client = fake.client();
    let want = VmUpdate {
        cores: Some(6),
        memory_mib: Some(6144),
        hostpci: None,
        disk_gib: Some(64),
        tags: Some(vec!["talos".into(), "controlplane".into(), "etcd".into()]),
        name: None,
        networks: None,
        disks: None,
        agent: None,
    };
    let outcome = lifecycle::update_vm(&client, "pve1", 121, &want)
        .await
        .expect("update");
    assert_eq!(
        outcome.changed,
        vec![
            "cores".to_string(),
            "memory".to_string(),
            "tags".to_string()
        ]
    );
    assert_eq!(
        outcome.pending,
        vec!["cores".to_string(), "memory".to_string()],
        "tags apply at once; cores and memory wait for a restart"
    );
    assert!(outcome.needs_reboot());
    assert!(outcome.resized);
    let cfg = fake.get("/nodes/pve1/qemu/121/config").await;
    assert!(
        cfg["scsi0"].as_str().expect("scsi0").contains("size=64G"),
        "{cfg}"
    );
    assert_eq!(cfg["tags"], "controlplane;etcd;talos");

    lifecycle::reboot(&client, "pve1", 121)
        .await
        .expect("reboot");
    let cfg = fake.get("/nodes/pve1/qemu/121/config").await;
    assert_eq!(cfg["cores"], "6");
    assert_eq!(cfg["memory"], "6144");
    assert_eq!(
        lifecycle::pending_keys(&client, "pve1", 121)
            .await
            .expect("pending"),
        Vec::<String>::new()
    );

    let same = lifecycle::update_vm(&client, "pve1", 121, &want)
        .await
        .expect("no change");
    assert!(same.changed.is_empty() && !same.resized);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_shrink_is_refused_and_nothing_changes() {
    let (fake, _factory) = cluster().await;
    let want = VmUpdate {
        cores: Some(8),
        disk_gib: Some(20),
        ..VmUpdate::default()
    };
    let e = lifecycle::update_vm(&fake.client(), "pve1", 121, &want)
        .await
        .expect_err("shrink");
    assert!(
        matches!(
            e,
            ProxmoxError::DiskShrink {
                current_gib: 50,
                wanted_gib: 20,
                ..
            }
        ),
        "{e:?}"
    );
    insta::assert_snapshot!(e.to_string(), @"vm 121 on node pve1: scsi0 is 50 GiB; shrinking it to 20 GiB is refused (Proxmox cannot shrink a disk without losing data)");
    assert_eq!(fake.count("PUT", "/qemu/121/config").await, 0);
    assert_eq!(
        fake.count("PUT", "/qemu/121/resize").await,
        1,
        "only the create's resize"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostpci_devices_are_added_and_removed() {
    let (fake, _factory) = cluster().await;
    let client = fake.client();
    let gpu = HostPci {
        index: 0,
        mapping: "gpu".into(),
        pcie: true,
        rombar: false,
        x_vga: true,
    };
    let add = VmUpdate {
        hostpci: Some(vec![gpu]),
        ..VmUpdate::default()
    };
    let outcome = lifecycle::update_vm(&client, "pve1", 122, &add)
        .await
        .expect("add");
    assert_eq!(outcome.changed, vec!["hostpci0".to_string()]);
    assert!(outcome.needs_reboot(), "a PCI device needs a restart");
    lifecycle::reboot(&client, "pve1", 122)
        .await
        .expect("reboot");
    let cfg = fake.get("/nodes/pve1/qemu/122/config").await;
    assert_eq!(cfg["hostpci0"], "mapping=gpu,pcie=1,rombar=0,x-vga=1");

    let remove = VmUpdate {
        hostpci: Some(Vec::new()),
        ..VmUpdate::default()
    };
    let outcome = lifecycle::update_vm(&client, "pve1", 122, &remove)
        .await
        .expect("remove");
    assert_eq!(outcome.changed, vec!["hostpci0".to_string()]);
    let body = fake
        .requests()
        .await
        .into_iter()
        .rfind(|(m, p, _)| m == "PUT" && p.ends_with("/qemu/122/config"))
        .expect("sent")
        .2;
    assert!(body.contains("delete=hostpci0"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_shuts_down_then_deletes_and_keeps_the_image() {
    let (fake, _factory) = cluster().await;
    let client = fake.client();
    let outcome = lifecycle::destroy_vm(&client, "pve1", 121, 30)
        .await
        .expect("destroy");
    assert_eq!(outcome, DestroyOutcome::Destroyed { forced: false });
    let shutdown = fake
        .requests()
        .await
        .into_iter()
        .find(|(m, p, _)| m == "POST" && p.ends_with("/qemu/121/status/shutdown"))
        .expect("shutdown sent");
    assert_eq!(shutdown.2, "timeout=30&forceStop=1");
    let deletes = fake.count("DELETE", "/nodes/pve1/qemu/121").await;
    assert_eq!(deletes, 1);
    let resources = fake.get("/cluster/resources?type=vm").await;
    assert!(
        resources
            .as_array()
            .expect("list")
            .iter()
            .all(|r| r["vmid"] != 121)
    );
    let content = fake
        .get("/nodes/pve1/storage/local/content?content=import")
        .await;
    assert_eq!(
        content.as_array().map(Vec::len),
        Some(1),
        "the downloaded image is kept"
    );
    let disks = fake.get("/nodes/pve1/storage/local-lvm/content").await;
    assert!(
        disks
            .as_array()
            .expect("list")
            .iter()
            .all(|d| d["vmid"] != 121),
        "its disks are gone: {disks}"
    );
    assert_eq!(
        lifecycle::destroy_vm(&client, "pve1", 121, 30)
            .await
            .expect("again"),
        DestroyOutcome::Absent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_hand_edit_set_back_needs_no_reboot_and_a_pending_change_left_behind_does() {
    let (fake, _factory) = cluster().await;
    let client = fake.client();
    let memory = |mib: u64| VmUpdate {
        memory_mib: Some(mib),
        ..VmUpdate::default()
    };
    // By hand on the running VM: pending, the VM still runs with 4096.
    let edit = lifecycle::update_vm(&client, "pve1", 121, &memory(6144))
        .await
        .expect("edit");
    assert_eq!(edit.pending, vec!["memory".to_string()]);

    // Set back: compared with the next-start value (6144), so it is sent;
    // the pending entry then equals the running value and is not pending.
    let before = fake.request_total().await;
    let back = lifecycle::update_vm(&client, "pve1", 121, &memory(4096))
        .await
        .expect("set back");
    assert_eq!(back.changed, vec!["memory".to_string()]);
    assert!(back.pending.is_empty() && !back.needs_reboot(), "{back:?}");
    assert_eq!(
        fake.request_total().await - before,
        3,
        "GET pending, PUT config, GET pending"
    );

    // A change left pending (an apply stopped before its restart): nothing to
    // set, yet the VM needs its restart.
    lifecycle::update_vm(&client, "pve1", 121, &memory(8192))
        .await
        .expect("left pending");
    let before = fake.request_total().await;
    let left = lifecycle::update_vm(&client, "pve1", 121, &memory(8192))
        .await
        .expect("again");
    assert!(left.changed.is_empty(), "{left:?}");
    assert_eq!(left.pending, vec!["memory".to_string()]);
    assert!(left.needs_reboot());
    assert_eq!(
        fake.request_total().await - before,
        2,
        "GET pending, status/current"
    );
}
