//! NICs and data disks end to end, against fakepve (which checks each `netN`
//! and `scsiN` against PVE's schema) and the Talos simulator: the VM Proxmox
//! makes and the machine config the node runs agree on every MAC and disk; a
//! NIC's VLAN changes in place; a data disk grows in place and is never
//! shrunk or dropped by a plan.

use std::time::Duration;

use serde::Deserialize as _;
use serde_yaml_ng::Value;

use crate::config_drift_lab::{client_files, running_config};
use crate::support::cli::stdout;
use crate::support::lab::Lab;

const WORKER: &str = "talos-worker-01";

/// The lab topology with `devices` (indented YAML keys) added to the
/// worker's entry.
fn with_devices(text: &str, devices: &str) -> String {
    let at = text.find("hostname: talos-worker-01").expect("the worker");
    let end = at + text[at..].find("disk_size: 100\n").expect("its disk_size") + 15;
    format!("{}{devices}{}", &text[..end], &text[end..])
}

const DEVICES: &str = "    networks:
      - { vlan: 30 }
      - { bridge: vmbr1, vlan: 40, mtu: 9000, mac: \"BC:24:11:AA:00:02\", firewall: true }
    disks:
      - { size: 20, mount: /var/mnt/data }
      - { size: 10, datastore: local-lvm, cache: writeback }
";

fn documents(config: &[u8]) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_slice(config)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .collect()
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// The MAC of a `netN` value (`virtio=<MAC>,bridge=…`), lower-cased.
fn mac_of(net: &str) -> String {
    net.split(',')
        .next()
        .and_then(|m| m.strip_prefix("virtio="))
        .unwrap_or_default()
        .to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nics_and_data_disks_agree_between_the_vm_and_the_machine_config() {
    let lab = Lab::start("20.3", Duration::from_millis(100)).await;
    lab.write_topology(|t| with_devices(&t, DEVICES));
    let topology = std::fs::read_to_string(lab.topology()).expect("topology");
    assert!(
        topology.contains("networks:"),
        "the worker entry was edited"
    );
    lab.import_secrets().await;
    // A bridge the host lacks is refused at plan time, naming the host's bridges.
    let only = serde_json::json!({"cmd": "set_bridges", "node": "pve1", "names": ["vmbr0"]});
    lab.pve.cmd(only).await;
    let out = lab.run(&["plan"]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(
        err.contains(
            "vm/talos-worker-01: net1's bridge vmbr1 does not exist on pve1 (its bridges: vmbr0)"
        ),
        "{err}"
    );
    let both =
        serde_json::json!({"cmd": "set_bridges", "node": "pve1", "names": ["vmbr0", "vmbr1"]});
    lab.pve.cmd(both).await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply: {}", stdout(&out));

    let vm = lab.state().resources.vms[WORKER].clone();
    let config = lab
        .pve
        .get(&format!("/nodes/{}/qemu/{}/config", vm.node, vm.vmid))
        .await;
    let net0 = text(&config["net0"]);
    let net1 = text(&config["net1"]);
    assert!(
        net0.contains("bridge=vmbr0") && net0.contains("tag=30"),
        "{net0}"
    );
    assert!(
        net1.contains("bridge=vmbr1")
            && net1.contains("tag=40")
            && net1.contains("mtu=9000")
            && net1.contains("firewall=1"),
        "{net1}"
    );
    assert_eq!(mac_of(&net1), "bc:24:11:aa:00:02");
    assert!(mac_of(&net0).starts_with("02:"), "a derived MAC: {net0}");
    let scsi1 = text(&config["scsi1"]);
    let scsi2 = text(&config["scsi2"]);
    assert!(
        scsi1.contains("size=20G") && scsi1.contains("serial=scsi1"),
        "{scsi1}"
    );
    assert!(
        scsi2.contains("cache=writeback") && scsi2.contains("serial=scsi2"),
        "{scsi2}"
    );
    // The GPU worker has the default: one NIC, no data disk.
    let gpu = lab.state().resources.vms["talos-gpu-01"].clone();
    let gpu_config = lab
        .pve
        .get(&format!("/nodes/{}/qemu/{}/config", gpu.node, gpu.vmid))
        .await;
    assert!(gpu_config.get("net1").is_none() && gpu_config.get("scsi1").is_none());

    // What the node runs: a link per NIC by its MAC, net0 with the address;
    // a user volume on the disk with a mount, found by the serial Proxmox set.
    let files = client_files(&lab);
    let ip = lab.ips[1].as_str();
    let docs = documents(&running_config(files.path(), ip));
    let v1 = docs
        .iter()
        .find(|d| d.get("kind").is_none())
        .expect("v1alpha1");
    let interfaces = v1["machine"]["network"]["interfaces"]
        .as_sequence()
        .expect("interfaces");
    let selected: Vec<String> = interfaces
        .iter()
        .filter_map(|i| {
            i["deviceSelector"]["hardwareAddr"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(selected, [mac_of(&net0), mac_of(&net1)]);
    let first = interfaces
        .iter()
        .find(|i| i["deviceSelector"]["hardwareAddr"].as_str() == Some(mac_of(&net0).as_str()))
        .expect("net0's link");
    assert_eq!(
        first["addresses"][0].as_str(),
        Some(format!("{ip}/8").as_str())
    );
    let second = &interfaces[1];
    assert_eq!(second["mtu"].as_u64(), Some(9000));
    assert!(second.get("addresses").is_none());
    let volumes: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("UserVolumeConfig"))
        .collect();
    assert_eq!(volumes.len(), 1, "only the disk with a mount: {volumes:?}");
    assert_eq!(volumes[0]["name"].as_str(), Some("data"));
    assert_eq!(volumes[0]["volumeType"].as_str(), Some("disk"));
    assert_eq!(
        volumes[0]["provisioning"]["diskSelector"]["match"].as_str(),
        Some("disk.serial == \"scsi1\"")
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stdout(&out));

    // A VLAN change and a grown disk: in place, no restart, no new VM.
    let grown = DEVICES
        .replace("vlan: 30", "vlan: 31")
        .replace("size: 20,", "size: 25,");
    lab.write_topology(|t| with_devices(&t, &grown));
    let plan = lab.plan_text().await;
    assert!(
        plan.contains("# vm/talos-worker-01 will be updated in place"),
        "{plan}"
    );
    assert!(plan.contains("~ net0 = "), "{plan}");
    assert!(
        plan.contains("~ scsi1 = local-lvm:20G,serial=scsi1"),
        "{plan}"
    );
    assert!(!plan.contains("restarts"), "{plan}");
    lab.apply_text().await;
    // Real PVE hot-plugs a NIC change; fakepve keeps it pending: its next
    // start's value is the one to check.
    let next = talosprov_proxmox::pending::vm_pending(&lab.pve.client(), &vm.node, vm.vmid)
        .await
        .expect("GET pending")
        .next_start;
    assert!(next.net["net0"].contains("tag=31"), "{:?}", next.net);
    assert_eq!(mac_of(&next.net["net0"]), mac_of(&net0), "same NIC");
    assert_eq!(lab.state().resources.vms[WORKER].vmid, vm.vmid);
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stdout(&out));

    // Shrinking or moving a data disk loses its data: refused at plan time.
    for (edit, why) in [
        (
            grown.replace("size: 25,", "size: 5,"),
            "would shrink from 25 GiB to 5 GiB",
        ),
        (
            grown.replace("datastore: local-lvm, cache", "datastore: local, cache"),
            "would move from storage local-lvm to local",
        ),
    ] {
        lab.write_topology(|t| with_devices(&t, &edit));
        let out = lab.run(&["plan"]).await;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "refused: {}", stdout(&out));
        assert!(
            err.contains(why) && err.contains("vm/talos-worker-01"),
            "{err}"
        );
    }
    drop_a_data_disk(&lab, &vm, &grown).await;
}

/// The volumes on `storage` of `node` (`GET .../content`), by volid.
async fn volumes(lab: &Lab, node: &str, storage: &str) -> Vec<String> {
    let list = lab
        .pve
        .get(&format!("/nodes/{node}/storage/{storage}/content"))
        .await;
    list.as_array()
        .expect("a list")
        .iter()
        .filter_map(|v| v["volid"].as_str().map(str::to_owned))
        .collect()
}

/// A data disk that leaves the topology is shown as deleted with its data,
/// refused by apply until `-allow-data-loss` names the VM, then deleted with
/// its volume; a disk talosprov did not make is never deleted.
async fn drop_a_data_disk(lab: &Lab, vm: &talosprov_statefile::format::Vm, grown: &str) {
    let config = lab
        .pve
        .get(&format!("/nodes/{}/qemu/{}/config", vm.node, vm.vmid))
        .await;
    let scsi2 = text(&config["scsi2"]);
    let volume = scsi2.split(',').next().expect("a volid").to_owned();
    assert!(
        volumes(lab, &vm.node, "local-lvm").await.contains(&volume),
        "{volume} is on the storage"
    );
    let dropped = grown.replace(
        "      - { size: 10, datastore: local-lvm, cache: writeback }\n",
        "",
    );
    lab.write_topology(|t| with_devices(&t, &dropped));
    let plan = lab.plan_text().await;
    assert!(
        plan.contains(
            "- scsi2 = local-lvm:10G,serial=scsi2,cache=writeback,discard=on,iothread=1,ssd=1 \
             (deleted with its volume and data: needs -allow-data-loss)"
        ),
        "{plan}"
    );
    assert!(
        plan.contains(
            "Warning: vm/talos-worker-01: scsi2 (local-lvm:10G,serial=scsi2,cache=writeback,\
             discard=on,iothread=1,ssd=1) left the topology's disks: apply deletes its volume \
             and the data on it, and only with -allow-data-loss=vm/talos-worker-01"
        ),
        "the warning: {plan}"
    );
    // Without the flag (a saved plan too): refused before any change.
    let saved = lab.dir.path().join("drop.tfplan");
    let out = lab
        .run(&["plan", "-out", saved.to_str().expect("utf-8")])
        .await;
    assert!(out.status.success(), "{}", stdout(&out));
    let before = lab.pve.request_total().await;
    for args in [
        vec!["apply", "-auto-approve"],
        vec!["apply", saved.to_str().expect("utf-8")],
        vec![
            "apply",
            "-auto-approve",
            "-allow-data-loss=vm/talos-controlplane-01",
        ],
    ] {
        let out = lab.run(&args).await;
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
        assert!(
            err.contains("nothing was changed")
                && err.contains("-allow-data-loss=vm/talos-worker-01"),
            "{args:?}: {err}"
        );
    }
    let writes = lab
        .pve
        .requests()
        .await
        .into_iter()
        .skip(before)
        .filter(|(m, _, _)| m != "GET")
        .count();
    assert_eq!(writes, 0, "nothing changed in Proxmox");
    // The saved plan, with the flag: the disk and its volume are gone.
    let out = lab
        .run(&[
            "apply",
            "-allow-data-loss=vm/talos-worker-01",
            saved.to_str().expect("utf-8"),
        ])
        .await;
    assert!(
        out.status.success(),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let config = lab
        .pve
        .get(&format!("/nodes/{}/qemu/{}/config", vm.node, vm.vmid))
        .await;
    assert!(config.get("scsi2").is_none(), "{config}");
    assert!(
        !config
            .as_object()
            .expect("an object")
            .keys()
            .any(|k| k.starts_with("unused")),
        "no detached volume left behind: {config}"
    );
    assert!(config.get("scsi1").is_some(), "the other disk stays");
    assert!(
        !volumes(lab, &vm.node, "local-lvm").await.contains(&volume),
        "{volume} is deleted"
    );
    assert!(
        !lab.state().resources.vms[WORKER]
            .disks
            .contains_key("scsi2")
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stdout(&out));

    // A disk added by hand is not talosprov's: never deleted, plan refused.
    let mut set = std::collections::BTreeMap::new();
    set.insert("scsi3".to_owned(), "local-lvm:4".to_owned());
    let put = talosprov_proxmox::lifecycle::config_request(&vm.node, vm.vmid, &set, &[], None);
    lab.pve.client().send(&put).await.expect("PUT config");
    let out = lab.run(&["plan"]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        err.contains("scsi3 is not in the topology's disks, and the state does not record it"),
        "{err}"
    );
}
