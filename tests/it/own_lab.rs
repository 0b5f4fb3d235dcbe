//! Ownership end to end against fakepve and the Talos simulator: a PCI
//! mapping, a pool and a VM that talosprov did not create, at the IDs the
//! topology declares, are conflicts in the plan and stay exactly as they were
//! through apply and destroy; once imported, the plan shows the update, apply
//! makes it, and destroy deletes them.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;
use serde_json::{Value, json};
use talosprov_proxmox::mapping::{PciMapEntry, PciMappingSpec};
use talosprov_proxmox::request::Request;

/// The foreign VM at the worker's vmid.
const VMID: u32 = 122;

/// Make, by hand, a mapping `gpu` with an entry for another host, a pool
/// `TALOS` with a comment, and VM 122 `legacy-db`.
async fn make_foreign_objects(lab: &Lab, mapping: bool, pool: bool, vm: bool) {
    let client = lab.pve.client();
    if mapping {
        let spec = PciMappingSpec {
            id: "gpu".into(),
            description: Some("made by hand".into()),
            entries: vec![PciMapEntry {
                node: "pve2".into(),
                path: "0000:02:00".into(),
                id: "10de:1111".into(),
                iommu_group: Some(3),
                subsystem_id: None,
            }],
        };
        client
            .send(&talosprov_proxmox::mapping::create_request(&spec))
            .await
            .expect("create the foreign mapping");
    }
    if pool {
        client
            .send(&talosprov_proxmox::pool::create_request(
                "TALOS",
                Some("made by hand"),
            ))
            .await
            .expect("create the foreign pool");
    }
    if vm {
        lab.pve
            .cmd(json!({
                "cmd": "add_vm", "vmid": VMID, "name": "legacy-db", "status": "stopped",
                "config": {
                    "cores": 1, "memory": "2048", "tags": "db",
                    "scsi0": "local-lvm:vm-122-disk-0,size=32G",
                },
            }))
            .await;
    }
}

/// GET a path as root; `None` when Proxmox says it does not exist.
async fn read(lab: &Lab, path: &str) -> Option<Value> {
    let req = Request::get(
        &path.trim_start_matches('/').split('/').collect::<Vec<_>>(),
        talosprov_proxmox::request::Operation::new(format!("test GET {path}")),
    );
    match lab.pve.client().send(&req).await {
        Ok(v) => Some(v),
        Err(e) if e.is_not_found() || e.message().is_some_and(|m| m.contains("not found")) => None,
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// What fakepve holds of the three objects: the mapping, the pool (with its
/// comment and members) and VM 122 (config and power state), without the
/// config digest.
async fn foreign_objects(lab: &Lab) -> Value {
    let pools = read(lab, "/pools").await.unwrap_or_default();
    let pool = pools
        .as_array()
        .and_then(|p| p.iter().find(|p| p["poolid"] == "TALOS").cloned());
    let members = match &pool {
        Some(_) => lab
            .pve
            .client()
            .send_as::<Value>(&talosprov_proxmox::pool::read_request("TALOS"))
            .await
            .ok(),
        None => None,
    };
    let mut config = read(lab, &format!("/nodes/pve1/qemu/{VMID}/config")).await;
    if let Some(c) = config.as_mut().and_then(Value::as_object_mut) {
        c.remove("digest");
    }
    let status = read(lab, &format!("/nodes/pve1/qemu/{VMID}/status/current"))
        .await
        .map(|s| s["status"].clone());
    json!({
        "mapping": read(lab, "/cluster/mapping/pci/gpu").await,
        "pool": pool,
        "pool_members": members,
        "vm_config": config,
        "vm_status": status,
    })
}

/// The lines of `text` from the first that starts with `from` to the end.
fn from_line(text: &str, from: &str) -> String {
    let start = text
        .lines()
        .position(|l| l.starts_with(from))
        .unwrap_or_else(|| panic!("no line starting with {from:?} in:\n{text}"));
    text.lines().skip(start).collect::<Vec<_>>().join("\n")
}

/// The block of the change at `address` in a plan's text (its `# ...` line to
/// the blank line after it).
fn change_block(text: &str, address: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(&format!("  # {address} ")))
        .unwrap_or_else(|| panic!("no change at {address} in:\n{text}"));
    lines[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_mapping_pool_and_vm_are_untouched_until_imported_then_managed() {
    let lab = Lab::start("7.1", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    make_foreign_objects(&lab, true, true, true).await;
    let before = foreign_objects(&lab).await;
    assert!(
        before["mapping"].is_object() && before["pool"].is_object(),
        "{before}"
    );

    // The plan names each one as a conflict, with the command that takes it over.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2), "conflicts wait for an import");
    insta::assert_snapshot!(
        "three_foreign_objects_plan",
        from_line(&stdout(&out), "No changes talosprov can make")
    );

    // Apply and destroy leave them exactly as they were.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(
        "three_foreign_objects_apply_error",
        from_line(&stderr(&out), "Error")
    );
    assert_eq!(foreign_objects(&lab).await, before, "apply touched them");
    let out = lab.run(&["destroy", "-auto-approve"]).await;
    assert!(out.status.success());
    assert_eq!(foreign_objects(&lab).await, before, "destroy touched them");

    // Imported, they are managed: the plan shows the update.
    for (address, id) in [
        ("pci_mapping/gpu", "gpu"),
        ("pool/TALOS", "TALOS"),
        ("vm/talos-worker-01", "122"),
    ] {
        let out = lab.run(&["import", address, id]).await;
        assert!(out.status.success(), "import {address} failed");
        assert!(stdout(&out).contains("Import successful!"));
    }
    let out = lab.run(&["import", "pool/TALOS", "TALOS"]).await;
    assert!(
        !out.status.success(),
        "a second import of the pool is refused"
    );
    assert!(stderr(&out).contains("pool/TALOS is already in the state"));
    let state = lab.state();
    assert_eq!(state.resources.vms["talos-worker-01"].name, "legacy-db");
    assert_eq!(state.resources.vms["talos-worker-01"].disk_gib, 32);
    assert_eq!(state.resources.pci_mappings["gpu"].map[0].node, "pve2");

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(!text.contains("Conflict"), "{text}");
    insta::assert_snapshot!(
        "imported_objects_plan_updates",
        format!(
            "{}\n\n{}",
            change_block(&text, "pci_mapping/gpu"),
            change_block(&text, "vm/talos-worker-01")
        )
    );
    assert!(
        !text.contains("pool/TALOS"),
        "the pool needs no change:\n{text}"
    );

    // Apply makes the update.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply after the import failed");
    let now = foreign_objects(&lab).await;
    assert_eq!(
        now["mapping"]["map"],
        json!(["node=pve1,path=0000:01:00,id=10de:2507,iommugroup=10,subsystem-id=10de:2507"]),
        "{now}"
    );
    assert_eq!(now["mapping"]["description"], "GeForce RTX 3050");
    assert_eq!(now["vm_config"]["name"], "talos-worker-01");
    assert_eq!(now["vm_config"]["cores"].to_string().trim_matches('"'), "4");
    assert_eq!(
        now["pool"]["comment"], "made by hand",
        "the comment is not managed"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // Destroy deletes them.
    let out = lab.run(&["destroy", "-auto-approve"]).await;
    assert!(out.status.success(), "destroy failed");
    let gone = foreign_objects(&lab).await;
    assert!(gone["mapping"].is_null(), "{gone}");
    assert!(gone["pool"].is_null(), "{gone}");
    assert!(gone["vm_config"].is_null(), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_vm_at_a_vmid_is_left_alone_while_the_rest_is_applied_and_destroyed() {
    let lab = Lab::start("7.2", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    make_foreign_objects(&lab, false, false, true).await;
    let before = foreign_objects(&lab).await;

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1), "the conflict fails the apply");
    let err = stderr(&out);
    assert!(
        err.contains("talosprov import vm/talos-worker-01 122"),
        "{err}"
    );
    let text = stdout(&out);
    assert!(
        text.contains("Held back until then: config/talos-worker-01"),
        "{text}"
    );
    // The rest of the cluster is made.
    let state = lab.state();
    for host in ["talos-controlplane-01", "talos-gpu-01"] {
        assert!(state.resources.configs[host].secure_mode, "{host}");
    }
    assert!(state.resources.bootstrap.is_some_and(|b| b.done));
    assert!(!state.resources.vms.contains_key("talos-worker-01"));
    assert_eq!(
        foreign_objects(&lab).await["vm_config"],
        before["vm_config"]
    );

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stdout(&out).contains("Conflict: vm/talos-worker-01: VM 122 \"legacy-db\" on pve1"));

    let out = lab.run(&["destroy", "-auto-approve"]).await;
    assert!(out.status.success(), "destroy failed");
    let vms = lab.vms().await;
    assert_eq!(vms.len(), 1, "{vms:?}");
    assert_eq!(vms[0]["name"], "legacy-db");
    let after = foreign_objects(&lab).await;
    assert_eq!(after["vm_config"], before["vm_config"]);
    assert_eq!(after["vm_status"], before["vm_status"]);
    assert!(after["pool"].is_null(), "talosprov's own pool is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_without_refresh_refuses_a_pool_talosprov_did_not_create() {
    let lab = Lab::start("7.3", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    make_foreign_objects(&lab, false, true, false).await;
    let before = foreign_objects(&lab).await;
    // Planned from the state alone, the pool is to be created; the create step
    // looks first and refuses it.
    let out = lab.run(&["apply", "-refresh=false", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    let topology = lab.topology().display().to_string();
    insta::assert_snapshot!(from_line(&stderr(&out), "Error").replace(&topology, "cluster.yaml"));
    let after = foreign_objects(&lab).await;
    assert_eq!(after["pool"], before["pool"]);
    assert_eq!(after["pool_members"], before["pool_members"]);
    assert!(lab.vms().await.is_empty(), "the VMs wait for the pool");
    let state = lab.state();
    assert!(!state.resources.pools.contains_key("TALOS"));
    assert!(
        state.resources.creating.is_empty(),
        "{:?}",
        state.resources.creating
    );
}
