//! Images and hosts: the capability check of the image storage, one download per
//! host on local storage and one in all on shared storage, VMs created on the
//! host that holds their image, and a disk smaller than an image already in
//! storage refused at plan time.

use crate::support::examples;
use crate::support::factory::Factory;
use crate::support::fakepve::{FakeOptions, FakePve};
use serde_json::json;
use talosprov_base::vm::Image;
use talosprov_base::vm::VmSpec;
use talosprov_proxmox::error::ProxmoxError;
use talosprov_proxmox::storage;
use talosprov_proxmox::{pool, task, vm};

fn three_hosts(storages: serde_json::Value) -> FakeOptions {
    FakeOptions {
        nodes: vec!["pve2".into(), "pve3".into()],
        storages,
        ..FakeOptions::default()
    }
}

/// Three control planes, one per host, importing from `image_storage`.
fn control_planes(image_storage: &str) -> Vec<VmSpec> {
    (1..=3)
        .map(|i| {
            let mut spec = examples::nodes().remove(0);
            spec.vmid = 120 + i;
            spec.name = format!("talos-controlplane-0{i}");
            spec.node = format!("pve{i}");
            spec.ip = format!("192.168.1.{}", 120 + i).parse().expect("ip");
            spec.image_volid = examples::image(examples::BASE).volid(image_storage);
            spec
        })
        .collect()
}

fn wanted(specs: &[VmSpec]) -> Vec<(String, Image)> {
    specs
        .iter()
        .map(|s| (s.node.clone(), examples::image(examples::BASE)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_without_import_content_says_how_to_add_it() {
    let fake = FakePve::start(FakeOptions {
        storages: json!({"local": {"content": "iso,vztmpl,backup"}}),
        ..FakeOptions::default()
    })
    .await;
    let e = storage::check_image_storage(&fake.client(), "pve1", "local")
        .await
        .expect_err("no import content");
    assert!(matches!(e, ProxmoxError::ImportContentMissing { .. }));
    insta::assert_snapshot!(e.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_storage_downloads_once_per_host_and_vms_land_on_their_hosts() {
    let fake = FakePve::start(three_hosts(
        json!({"local": {"content": "iso,vztmpl,backup,import"}}),
    ))
    .await;
    let factory = Factory::start().await;
    let client = fake.client();
    let specs = control_planes("local");

    let done = storage::ensure_images(&client, "local", &factory.url, &wanted(&specs))
        .await
        .expect("images");
    assert_eq!(done.downloaded.len(), 3);
    for n in 1..=3 {
        assert_eq!(
            fake.count("POST", &format!("/nodes/pve{n}/storage/local/download-url"))
                .await,
            1,
            "one download on pve{n}"
        );
        let content = fake
            .get(&format!(
                "/nodes/pve{n}/storage/local/content?content=import"
            ))
            .await;
        assert_eq!(
            content.as_array().map(Vec::len),
            Some(1),
            "pve{n}: {content}"
        );
    }
    assert_eq!(factory.paths().len(), 3);

    pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    for spec in &specs {
        vm::ensure_vm(&client, spec).await.expect("create");
    }
    let resources = fake.get("/cluster/resources?type=vm").await;
    for spec in &specs {
        let entry = resources
            .as_array()
            .expect("list")
            .iter()
            .find(|r| r["vmid"] == spec.vmid)
            .expect("listed");
        assert_eq!(
            entry["node"],
            spec.node.as_str(),
            "{} on its host",
            spec.name
        );
        assert_eq!(entry["status"], "running");
    }

    let again = storage::ensure_images(&client, "local", &factory.url, &wanted(&specs))
        .await
        .expect("images");
    assert!(again.downloaded.is_empty());
    assert_eq!(
        fake.count("POST", "/download-url").await,
        3,
        "nothing downloaded twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_downloads_once_for_the_whole_cluster() {
    let fake = FakePve::start(three_hosts(json!({
        "nfs": {"type": "nfs", "server": "192.0.2.5", "export": "/srv/pve", "path": "/mnt/pve/nfs",
                "content": "import,images", "shared": 1}
    })))
    .await;
    let factory = Factory::start().await;
    let client = fake.client();
    let specs = control_planes("nfs");

    let done = storage::ensure_images(&client, "nfs", &factory.url, &wanted(&specs))
        .await
        .expect("images");
    assert_eq!(done.downloaded.len(), 1);
    assert_eq!(fake.count("POST", "/download-url").await, 1);
    assert_eq!(
        fake.count("POST", "/nodes/pve1/storage/nfs/download-url")
            .await,
        1
    );

    pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    for spec in &specs {
        vm::ensure_vm(&client, spec)
            .await
            .expect("create from the shared image");
    }
    for spec in &specs {
        let cfg = fake
            .get(&format!("/nodes/{}/qemu/{}/config", spec.node, spec.vmid))
            .await;
        assert!(
            cfg["scsi0"].as_str().expect("scsi0").contains("size=50G"),
            "{cfg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_on_a_host_without_the_image_fails_with_the_task_text() {
    let fake = FakePve::start(three_hosts(
        json!({"local": {"content": "iso,vztmpl,backup,import"}}),
    ))
    .await;
    let factory = Factory::start().await;
    let client = fake.client();
    let specs = control_planes("local");
    storage::ensure_images(&client, "local", &factory.url, &wanted(&specs[..1]))
        .await
        .expect("pve1 only");
    pool::ensure_pool(&client, "TALOS", None)
        .await
        .expect("pool");
    let e = task::run(&client, &vm::create_request(&specs[1]))
        .await
        .expect_err("no image on pve2");
    let text = e.to_string();
    assert!(
        text.starts_with("create VM (node pve2, vmid 122): task UPID:pve2:"),
        "{text}"
    );
    assert!(text.contains("volume does not exist"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_already_in_storage_is_not_downloaded() {
    let fake = FakePve::start(FakeOptions::default()).await;
    let factory = Factory::start().await;
    let image = examples::image(examples::BASE);
    fake.cmd(
        json!({"cmd": "add_file", "storage": "local", "node": "pve1", "name": image.filename()}),
    )
    .await;
    let done = storage::ensure_images(
        &fake.client(),
        "local",
        &factory.url,
        &[("pve1".into(), image.clone())],
    )
    .await
    .expect("images");
    assert!(done.downloaded.is_empty());
    assert_eq!(done.present.len(), 1);
    assert_eq!(fake.count("POST", "/download-url").await, 0);
    assert!(factory.paths().is_empty());

    storage::delete_image(&fake.client(), "pve1", "local", &image)
        .await
        .expect("delete");
    let content = fake
        .get("/nodes/pve1/storage/local/content?content=import")
        .await;
    assert_eq!(content, json!([]));
}

/// The lab's image of the `base` schematic (qemu-guest-agent) on Talos v1.13.8.
fn lab_base_image() -> Image {
    let base = talosprov_base::schematic::Schematic {
        extensions: vec!["siderolabs/qemu-guest-agent".into()],
        kernel_args: Vec::new(),
    };
    Image {
        talos_version: "v1.13.8".into(),
        schematic: base.id().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_smaller_than_the_image_in_storage_is_refused_at_plan_time() {
    use crate::support::cli::stderr;
    use crate::support::lab::Lab;
    let lab = Lab::start("8.1", std::time::Duration::from_millis(100)).await;
    lab.import_secrets().await;
    // The image is already in the storage of pve1, where every lab VM goes,
    // with a virtual size of 12.5 GiB: above the control plane's 10 GiB disk,
    // below the workers' 100 GiB.
    lab.write_topology(|t| t.replace("disk_size: 50", "disk_size: 10"));
    let image = lab_base_image();
    lab.pve
        .cmd(
            json!({"cmd": "add_file", "storage": "local", "node": "pve1",
                    "name": image.filename(), "size": 25u64 << 29}),
        )
        .await;

    for args in [&["plan"][..], &["apply", "-auto-approve"]] {
        let out = lab.run(args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let text = stderr(&out);
        insta::assert_snapshot!(
            "disk_below_image",
            text.lines()
                .find(|l| l.contains("disk_size"))
                .unwrap_or(&text)
                .to_owned()
        );
    }
    // Refused before anything was made.
    assert!(lab.vms().await.is_empty());
    assert_eq!(
        lab.pve
            .requests()
            .await
            .iter()
            .filter(|(method, _, _)| method != "GET")
            .count(),
        0,
        "nothing written to Proxmox"
    );

    // A disk as large as the image, rounded up to whole GiB, plans.
    lab.write_topology(|t| t.replace("disk_size: 50", "disk_size: 13"));
    let out = lab.run(&["plan"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
}
