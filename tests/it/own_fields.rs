//! Every topology field that describes a Proxmox object reaches the requests
//! fakepve receives. The test walks the validated topology's fields (the
//! node, each hostpci device, `proxmox:`, `cluster:`, each PCI mapping and
//! the top level): each one is either checked against what fakepve received
//! when apply created the VM, its pool, its mappings and its image, or named
//! as not sent to Proxmox, with the reason. A field added later fails the test
//! until it is wired into a request and checked here.

use std::collections::BTreeMap;

use crate::support::factory::Factory;
use crate::support::fakepve::{FakeOptions, FakePve};
use crate::support::lab::Lab;
use serde_json::Value;

/// What fakepve received and holds after the apply.
struct Received {
    /// The path of the VM create request.
    create_path: String,
    /// The VM create request's form.
    create: BTreeMap<String, String>,
    /// The VM's config afterwards.
    config: Value,
    /// Each PCI mapping create request's form, as pairs (`map` repeats).
    mappings: Vec<Vec<(String, String)>>,
    /// The pool create request's form.
    pool: BTreeMap<String, String>,
    /// The path and form of the image download.
    download: (String, BTreeMap<String, String>),
    /// The HA resource create request's form.
    ha: BTreeMap<String, String>,
}

fn form(body: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The map entries of the mapping `id` was created with, as key-value maps.
fn mapping_entries(r: &Received, id: &str) -> (Vec<BTreeMap<String, String>>, Option<String>) {
    let sent = r
        .mappings
        .iter()
        .find(|m| m.iter().any(|(k, v)| k == "id" && v == id))
        .unwrap_or_else(|| panic!("no create request for mapping {id}"));
    let entries = sent
        .iter()
        .filter(|(k, _)| k == "map")
        .map(|(_, v)| {
            v.split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect();
    let description = sent
        .iter()
        .find(|(k, _)| k == "description")
        .map(|(_, v)| v.clone());
    (entries, description)
}

fn config_text(r: &Received, key: &str) -> String {
    r.config[key].to_string().trim_matches('"').to_owned()
}

/// How a topology field is covered: checked (the checks run here and panic
/// when the request differs), or not sent to Proxmox, for the reason given.
/// `None`: the field is unknown to this test.
fn covered(field: &str, r: &Received) -> Option<Result<(), &'static str>> {
    let c = &r.create;
    let hostpci = |n: u8| c.get(&format!("hostpci{n}")).cloned().unwrap_or_default();
    let checked = Some(Ok(()));
    match field {
        "node.hostname" => assert_eq!(c["name"], "edge-node-7"),
        "node.ip" => assert!(c["ipconfig0"].starts_with("ip=127.77.3.4/"), "{c:?}"),
        "node.cores" => assert_eq!(c["cores"], "3"),
        "node.memory" => assert_eq!(c["memory"], "3072"),
        "node.disk_size" => {
            let scsi0 = config_text(r, "scsi0");
            assert!(scsi0.contains("size=21G"), "{scsi0}");
        }
        "node.vm_id" => assert_eq!(c["vmid"], "4321"),
        "node.proxmox_node" => assert_eq!(r.create_path, "/api2/json/nodes/pve2/qemu"),
        "node.schematic" => {
            // The node's schematic, not the default one, names the image.
            let (path, download) = &r.download;
            assert!(path.contains("/nodes/pve2/"), "{path}");
            let id = talosprov_base::schematic::Schematic {
                extensions: vec![
                    "siderolabs/qemu-guest-agent".into(),
                    "siderolabs/nvidia-container-toolkit-production".into(),
                ],
                kernel_args: vec!["talos.dashboard.disabled=1".into()],
            }
            .id()
            .to_string();
            assert!(download["url"].contains(&id), "{download:?}");
            assert!(c["scsi0"].contains(&id[..8]), "{c:?}");
        }
        "node.tags" => assert_eq!(c["tags"], "edge;fields"),
        "node.hostpci" => assert!(c.contains_key("hostpci0"), "{c:?}"),
        "node.role" => return Some(Err("Talos only: the machine config's type")),
        "hostpci.index" => {
            let keys: Vec<&String> = c.keys().filter(|k| k.starts_with("hostpci")).collect();
            assert_eq!(keys, ["hostpci0", "hostpci3", "hostpci5"]);
        }
        "hostpci.mapping" => {
            assert!(hostpci(0).contains("mapping=gpu0"));
            assert!(hostpci(3).contains("mapping=gpu1"));
            assert!(hostpci(5).contains("mapping=gpu2"));
        }
        "hostpci.pcie" => {
            assert!(!hostpci(0).contains("pcie"), "pcie: false: {}", hostpci(0));
            assert!(hostpci(3).contains("pcie=1"), "{}", hostpci(3));
        }
        "hostpci.rombar" => {
            assert!(hostpci(3).contains("rombar=0"), "{}", hostpci(3));
            assert!(!hostpci(0).contains("rombar"), "{}", hostpci(0));
        }
        "hostpci.xvga" => {
            assert!(hostpci(5).contains("x-vga=1"), "{}", hostpci(5));
            assert!(!hostpci(3).contains("x-vga"), "{}", hostpci(3));
        }
        "proxmox.node" => {
            // The default host: a mapping without a node of its own is on it.
            let (entries, _) = mapping_entries(r, "spare");
            assert_eq!(entries[0]["node"], "pve1");
        }
        "proxmox.datastore" => {
            for key in ["efidisk0", "scsi0", "ide2"] {
                assert!(c[key].starts_with("vmdata:"), "{key}={}", c[key]);
            }
        }
        "proxmox.image_storage" => {
            assert!(
                r.download.0.ends_with("/storage/isos/download-url"),
                "{}",
                r.download.0
            );
            assert!(
                c["scsi0"].contains("import-from=isos:import/"),
                "{}",
                c["scsi0"]
            );
        }
        "proxmox.bridge" => assert!(c["net0"].contains(",bridge=vmbr7"), "{c:?}"),
        "proxmox.networks" | "proxmox.disks" => return checked, // the node's, which has none of its own
        "node.networks" => {
            let nics: Vec<&String> = c.keys().filter(|k| k.starts_with("net")).collect();
            assert_eq!(nics, ["net0", "net1"]);
        }
        "network.bridge" => assert!(c["net1"].contains(",bridge=vmbr8"), "{c:?}"),
        "network.vlan" => {
            assert!(c["net1"].contains(",tag=20"), "{c:?}");
            assert!(!c["net0"].contains("tag="), "{c:?}");
        }
        "network.mtu" => assert!(c["net1"].contains(",mtu=9000"), "{c:?}"),
        "network.mac" => {
            let derived =
                talosprov_topology::validate_devices::derived_mac("fields", "edge-node-7", 0);
            assert!(
                c["net0"].starts_with(&format!("virtio={derived},")),
                "{c:?}"
            );
            assert!(c["net1"].starts_with("virtio=BC:24:11:00:00:42,"), "{c:?}");
        }
        "network.firewall" => {
            assert!(c["net1"].contains(",firewall=1"), "{c:?}");
            assert!(!c["net0"].contains("firewall"), "{c:?}");
        }
        "node.disks" | "disk.index" => {
            let disks: Vec<&String> = c
                .keys()
                .filter(|k| {
                    k.starts_with("scsi") && k.as_str() != "scsi0" && k.as_str() != "scsihw"
                })
                .collect();
            assert_eq!(disks, ["scsi1", "scsi2"]);
        }
        "disk.size_gib" => {
            assert!(c["scsi1"].starts_with("vmdata:5,"), "{c:?}");
            assert!(
                config_text(r, "scsi2").contains("size=7G"),
                "{}",
                config_text(r, "scsi2")
            );
        }
        "disk.datastore" => assert!(c["scsi2"].starts_with("fast:7,"), "{c:?}"),
        "disk.ssd" => {
            assert!(c["scsi1"].contains(",ssd=1"), "{c:?}");
            assert!(!c["scsi2"].contains("ssd"), "{c:?}");
        }
        "disk.iothread" => {
            assert!(c["scsi1"].contains(",iothread=1"), "{c:?}");
            assert!(!c["scsi2"].contains("iothread"), "{c:?}");
        }
        "disk.discard" => {
            assert!(c["scsi1"].contains(",discard=on"), "{c:?}");
            assert!(!c["scsi2"].contains("discard"), "{c:?}");
        }
        "disk.cache" => {
            assert!(c["scsi2"].contains(",cache=writeback"), "{c:?}");
            assert!(!c["scsi1"].contains("cache"), "{c:?}");
        }
        "disk.volume" => return Some(Err("Talos only: the machine config's UserVolumeConfig")),
        "node.ha" | "proxmox.ha" => {
            // The node takes proxmox.ha: its VM's HA resource.
            assert_eq!(r.ha["sid"], "vm:4321", "{:?}", r.ha);
            assert_eq!(r.ha["state"], "started");
            assert_eq!(r.ha["max_restart"], "3");
            assert_eq!(r.ha["max_relocate"], "0");
        }
        "proxmox.spread" => {
            return Some(Err(
                "an HA rule over several VMs: tests/it/ha_lab.rs checks the rule Proxmox holds",
            ));
        }
        "proxmox.pool" => {
            assert_eq!(c["pool"], "FIELDS");
            assert_eq!(r.pool["poolid"], "FIELDS");
        }
        "proxmox.endpoint" | "proxmox.insecure" | "proxmox.ca_file" | "proxmox.fingerprint" => {
            return Some(Err("how talosprov reaches Proxmox, not an object in it"));
        }
        "cluster.gateway" => assert!(c["ipconfig0"].ends_with(",gw=127.77.0.1"), "{c:?}"),
        "cluster.prefix_length" => assert!(c["ipconfig0"].contains("/16,"), "{c:?}"),
        "cluster.nameservers" => assert_eq!(c["nameserver"], "127.77.0.53 127.77.0.54"),
        "cluster.talos_version" => {
            assert!(r.download.1["url"].ends_with("/v1.13.7/nocloud-amd64.qcow2"));
            assert!(c["scsi0"].contains("v1.13.7"), "{}", c["scsi0"]);
        }
        "cluster.name"
        | "cluster.kubernetes_version"
        | "cluster.vip"
        | "cluster.endpoint"
        | "cluster.install_disk" => return Some(Err("Talos only: the machine config")),
        "pci_mapping.path" => {
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries[0]["path"], "0000:02:00");
        }
        "pci_mapping.id" => {
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries[0]["id"], "10de:2507");
        }
        "pci_mapping.iommu_group" => {
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries[0]["iommugroup"], "12");
        }
        "pci_mapping.subsystem_id" => {
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries[0]["subsystem-id"], "1458:4088");
        }
        "pci_mapping.comment" => {
            assert_eq!(mapping_entries(r, "gpu1").1.as_deref(), Some("Second GPU"));
            assert_eq!(mapping_entries(r, "spare").1, None);
        }
        "pci_mapping.other_hosts" => {
            // A mapping given per host (`map`): every host's device in the one mapping.
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries.len(), 2, "{entries:?}");
            assert_eq!(entries[1]["node"], "pve1");
            assert_eq!(entries[1]["path"], "0000:05:00");
            assert_eq!(entries[1]["iommugroup"], "15");
            assert_eq!(entries[1]["id"], "10de:2507");
            assert_eq!(entries[1]["subsystem-id"], "1458:4089");
        }
        "pci_mapping.node" => {
            let (entries, _) = mapping_entries(r, "gpu1");
            assert_eq!(entries[0]["node"], "pve2");
        }
        "image_factory_url" => {
            assert!(
                r.download.1["url"].starts_with("http://127.0.0.1:"),
                "{:?}",
                r.download
            );
        }
        "schematics" => return checked, // through node.schematic: its ID names the image
        "cluster" | "proxmox" | "nodes" | "pci_mappings" => return checked, // walked field by field
        "pools" => return checked,      // each member is a node, walked as the nodes are
        "node.pool" => {
            return Some(Err(
                "which pool a member is of: its patches (pools/<pool>/) and templates",
            ));
        }
        "file" | "patches_dir" | "patches_dirs" | "state" => {
            return Some(Err(
                "talosprov's own files: the topology, the patches, the state",
            ));
        }
        "addons" => {
            return Some(Err(
                "Kubernetes objects: control planes' inline manifests, and the Kubernetes API",
            ));
        }
        "backup" => {
            return Some(Err(
                "etcd snapshots: a folder or an S3 bucket, never Proxmox",
            ));
        }
        _ => return None,
    }
    checked
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_topology_field_of_a_vm_reaches_what_proxmox_receives() {
    let pve = FakePve::start(FakeOptions {
        nodes: vec!["pve2".into()],
        storages: serde_json::json!({
            "local": {"content": "iso,vztmpl,backup"},
            "isos": {"content": "import"},
            "vmdata": {"content": "images,rootdir"},
            "fast": {"content": "images"},
        }),
        ..FakeOptions::default()
    })
    .await;
    pve.cmd(serde_json::json!({"cmd": "set_bridges", "node": "pve2", "names": ["vmbr7", "vmbr8"]}))
        .await;
    let factory = Factory::start().await;
    let lab = Lab {
        pve,
        factory,
        sim: None,
        dir: tempfile::tempdir().expect("temp dir"),
        ips: Vec::new(),
        env: Vec::new(),
        ha: false,
    };
    let text = format!(
        "cluster:
  name: fields
  talos_version: v1.13.7
  gateway: 127.77.0.1
  prefix_length: 16
  nameservers: [127.77.0.53, 127.77.0.54]
proxmox:
  node: pve1
  datastore: vmdata
  image_storage: isos
  bridge: vmbr7
  pool: FIELDS
  ca_file: {ca}
  networks:
    - {{ mtu: 1500 }}
    - {{ bridge: vmbr8, vlan: 20, mtu: 9000, mac: \"bc:24:11:00:00:42\", firewall: true }}
  ha: {{ max_restart: 3, max_relocate: 0 }}
  disks:
    - {{ size: 5, mount: /var/mnt/data }}
    - {{ size: 7, datastore: fast, ssd: false, iothread: false, discard: false, cache: writeback }}
image_factory:
  url: {factory}
schematics:
  base:
    extensions: [siderolabs/qemu-guest-agent]
  gpu:
    extensions: [siderolabs/qemu-guest-agent, siderolabs/nvidia-container-toolkit-production]
    kernel_args: [talos.dashboard.disabled=1]
default_schematic: base
pci_mappings:
  gpu0: {{ path: \"0000:01:00\", id: \"10de:2507\", iommu_group: 11, subsystem_id: \"1458:4088\", comment: First GPU, node: pve2 }}
  gpu1:
    id: \"10de:2507\"
    subsystem_id: \"1458:4088\"
    comment: Second GPU
    map:
      - {{ node: pve2, path: \"0000:02:00\", iommu_group: 12 }}
      - {{ node: pve1, path: \"0000:05:00\", iommu_group: 15, subsystem_id: \"1458:4089\" }}
  gpu2: {{ path: \"0000:03:00\", id: \"10de:2507\", iommu_group: 13, subsystem_id: \"1458:4088\", node: pve2 }}
  spare: {{ path: \"0000:04:00\", id: \"10de:2507\", iommu_group: 14, subsystem_id: \"1458:4088\" }}
nodes:
  - hostname: edge-node-7
    ip: 127.77.3.4
    role: controlplane
    cores: 3
    memory: 3072
    disk_size: 21
    vm_id: 4321
    proxmox_node: pve2
    schematic: gpu
    tags: [Edge, fields]
    hostpci:
      - {{ device: hostpci0, mapping: gpu0, pcie: false }}
      - {{ device: hostpci3, mapping: gpu1, rombar: false }}
      - {{ device: hostpci5, mapping: gpu2, xvga: true }}
",
        ca = lab.pve.ca_file.display(),
        factory = lab.factory.url,
    );
    std::fs::write(lab.topology(), &text).expect("write topology");
    lab.import_secrets().await;
    let out = lab
        .run(&[
            "apply",
            "-auto-approve",
            "-target",
            "vm/edge-node-7",
            "-target",
            "pci_mapping/spare",
        ])
        .await;
    assert!(out.status.success(), "apply failed");

    let requests = lab.pve.requests().await;
    let sent = |method: &str, suffix: &str| -> Vec<(String, String)> {
        requests
            .iter()
            .filter(|(m, p, _)| m == method && p.ends_with(suffix))
            .map(|(_, p, b)| (p.clone(), b.clone()))
            .collect()
    };
    let (create_path, create_body) = sent("POST", "/qemu").pop().expect("a VM create");
    let (download_path, download_body) = sent("POST", "/download-url").pop().expect("a download");
    let received = Received {
        create_path,
        create: form(&create_body).into_iter().collect(),
        config: lab.pve.get("/nodes/pve2/qemu/4321/config").await,
        mappings: sent("POST", "/cluster/mapping/pci")
            .iter()
            .map(|(_, b)| form(b))
            .collect(),
        pool: form(&sent("POST", "/pools").pop().expect("a pool create").1)
            .into_iter()
            .collect(),
        download: (download_path, form(&download_body).into_iter().collect()),
        ha: form(
            &sent("POST", "/cluster/ha/resources")
                .pop()
                .expect("an HA resource create")
                .1,
        )
        .into_iter()
        .collect(),
    };

    let loaded = talosprov_topology::parse(
        &text,
        &lab.topology(),
        &talosprov_topology::model::Environment {
            proxmox_endpoint: Some(lab.pve.url.clone()),
            ..Default::default()
        },
    );
    let topology = serde_json::to_value(loaded.topology.expect("valid topology")).expect("JSON");
    let mut fields: Vec<String> = keys(&topology);
    let sections = [
        ("node", &topology["nodes"][0]),
        ("hostpci", &topology["nodes"][0]["hostpci"][0]),
        ("network", &topology["nodes"][0]["networks"][1]),
        ("disk", &topology["nodes"][0]["disks"][0]),
        ("proxmox", &topology["proxmox"]),
        ("cluster", &topology["cluster"]),
        ("pci_mapping", &topology["pci_mappings"]["gpu1"]),
    ];
    for (section, value) in sections {
        fields.extend(keys(value).into_iter().map(|k| format!("{section}.{k}")));
    }
    let mut not_sent = Vec::new();
    for field in &fields {
        match covered(field, &received) {
            Some(Ok(())) => {}
            Some(Err(why)) => not_sent.push(format!("{field}: {why}")),
            None => panic!(
                "topology field {field} is neither checked against what Proxmox receives nor \
                 named as not sent to it: wire it into its request and check it in covered()"
            ),
        }
    }
    eprintln!("not sent to Proxmox:\n  {}", not_sent.join("\n  "));
}
