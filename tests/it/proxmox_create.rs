//! The full create sequence for the three example nodes against fakepve, asserted
//! by reading everything back through the API.

use crate::support::examples;
use crate::support::factory::Factory;
use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::Value;
use talosprov_proxmox::{mapping, pool, storage, vm};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_sequence_leaves_images_pool_mapping_and_vm_configs() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let factory = Factory::start().await;
    let client = fake.client();
    let specs = examples::nodes();

    storage::check_version(&client)
        .await
        .expect("PVE 9 is recent enough");
    let wanted: Vec<(String, talosprov_base::vm::Image)> = vec![
        ("pve1".into(), examples::image(examples::BASE)),
        ("pve1".into(), examples::image(examples::BASE)),
        ("pve1".into(), examples::image(examples::NVIDIA)),
    ];
    let images = storage::ensure_images(&client, "local", &factory.url, &wanted)
        .await
        .expect("images");
    assert_eq!(images.downloaded.len(), 2, "one download per schematic");
    assert_eq!(
        pool::ensure_pool(&client, "TALOS", Some("talos cluster"))
            .await
            .expect("pool"),
        pool::PoolOutcome::Created
    );
    assert_eq!(
        mapping::ensure_mapping(&client, &examples::gpu_mapping(&["pve1"]))
            .await
            .expect("mapping"),
        mapping::MappingOutcome::Created
    );
    for spec in &specs {
        let outcome = vm::ensure_vm(&client, spec).await.expect("create VM");
        assert!(
            matches!(outcome, vm::VmOutcome::Created { .. }),
            "{outcome:?}"
        );
    }

    // Images in the storage content, fetched from the loopback factory.
    let content = fake
        .get("/nodes/pve1/storage/local/content?content=import")
        .await;
    let volids: Vec<&str> = content
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|v| v["volid"].as_str())
        .collect();
    assert!(
        volids.contains(&"local:import/talos-v1.13.8-37656798-nocloud-amd64.qcow2"),
        "{volids:?}"
    );
    assert!(
        volids.contains(&"local:import/talos-v1.13.8-9c1d1b44-nocloud-amd64.qcow2"),
        "{volids:?}"
    );
    let mut fetched = factory.paths();
    fetched.sort();
    assert_eq!(
        fetched,
        vec![
            format!("/image/{}/v1.13.8/nocloud-amd64.qcow2", examples::BASE),
            format!("/image/{}/v1.13.8/nocloud-amd64.qcow2", examples::NVIDIA),
        ]
    );

    // The pool with its three members.
    let pools = fake.get("/pools?poolid=TALOS").await;
    let mut members: Vec<u64> = pools[0]["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["vmid"].as_u64())
        .collect();
    members.sort_unstable();
    assert_eq!(members, vec![121, 122, 123]);

    // The mapping as declared.
    let gpu = fake.get("/cluster/mapping/pci/gpu").await;
    assert_eq!(
        gpu["map"],
        serde_json::json!([
            "node=pve1,path=0000:01:00,id=10de:2507,iommugroup=10,subsystem-id=10de:2507"
        ])
    );

    // Each VM's config.
    for spec in &specs {
        let cfg = fake
            .get(&format!("/nodes/pve1/qemu/{}/config", spec.vmid))
            .await;
        let s = |k: &str| {
            cfg[k]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| cfg[k].to_string())
        };
        assert_eq!(s("machine"), "q35");
        assert_eq!(s("bios"), "ovmf");
        assert_eq!(cfg["balloon"], Value::from(0));
        assert_eq!(s("memory"), spec.memory_mib.to_string());
        assert_eq!(cfg["cores"], Value::from(spec.cores));
        assert!(
            s("efidisk0").starts_with("local-lvm:vm-"),
            "{}",
            s("efidisk0")
        );
        assert!(
            s("efidisk0").contains("efitype=4m") && s("efidisk0").contains("pre-enrolled-keys=0")
        );
        assert!(
            s("ide2").contains("media=cdrom"),
            "cloud-init drive: {}",
            s("ide2")
        );
        assert_eq!(
            s("ipconfig0"),
            format!("ip=192.168.1.{}/24,gw=192.168.1.1", spec.vmid)
        );
        assert!(
            !s("scsi0").contains("import-from"),
            "import-from is dropped after import"
        );
        assert!(
            s("scsi0").contains(&format!("size={}G", spec.disk_gib)),
            "resized: {}",
            s("scsi0")
        );
        assert_eq!(s("boot"), "order=scsi0");
        assert_eq!(s("scsihw"), "virtio-scsi-single");
        let hostpci = cfg.get("hostpci0").and_then(Value::as_str);
        if spec.name == "talos-gpu-01" {
            assert_eq!(hostpci, Some("mapping=gpu,pcie=1"));
        } else {
            assert_eq!(hostpci, None, "{} has no PCI device", spec.name);
        }
        let status = fake
            .get(&format!("/nodes/pve1/qemu/{}/status/current", spec.vmid))
            .await;
        assert_eq!(status["status"], "running");
    }

    // Idempotent: a second run changes nothing and downloads nothing.
    let before = fake.count("POST", "/download-url").await;
    let again = storage::ensure_images(&client, "local", &factory.url, &wanted)
        .await
        .expect("images");
    assert!(again.downloaded.is_empty());
    assert_eq!(again.present.len(), 2);
    assert_eq!(fake.count("POST", "/download-url").await, before);
    for spec in &specs {
        assert_eq!(
            vm::ensure_vm(&client, spec).await.expect("look"),
            vm::VmOutcome::Present
        );
    }
    assert_eq!(
        pool::ensure_pool(&client, "TALOS", None)
            .await
            .expect("pool"),
        pool::PoolOutcome::Present
    );
    assert_eq!(
        mapping::ensure_mapping(&client, &examples::gpu_mapping(&["pve1"]))
            .await
            .expect("mapping"),
        mapping::MappingOutcome::Present
    );
    assert_eq!(fake.count("POST", "/qemu").await, 3, "three creates in all");
}
