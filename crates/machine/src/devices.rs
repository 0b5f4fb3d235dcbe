//! A node's VM devices in its machine config: each NIC the topology lists
//! (`networks`) as a link selected by its MAC address, `net0` carrying the
//! node's address and default route; each data disk with a `mount` as a
//! Talos user volume on that disk, found by its serial. They join the base
//! config before the patches, so a patch can still change them. Pure.
//!
//! Forms (Talos `pkg/machinery/config/types`, v1.14.0-rc.1):
//! - before the v1.14 contract, `machine.network.interfaces[]` entries with
//!   `deviceSelector.hardwareAddr` (v1alpha1 `Device`);
//! - from v1.14, where those fields are deprecated, a `LinkAliasConfig`
//!   `net<N>` whose selector is `mac(link.permanent_addr) == "<mac>"`, and a
//!   `LinkConfig` of that name (`network/link_alias.go`, `network/link.go`);
//! - for disks, in every contract (Talos 1.12 has it), a `UserVolumeConfig`
//!   with `volumeType: disk` and `provisioning.diskSelector.match:
//!   disk.serial == "<serial>"` (`block/user_volume_config.go`), which Talos
//!   mounts at `/var/mnt/<name>`.
//!
//! Talos prints MAC addresses in lower case (Go's `net.HardwareAddr`), and
//! `hardwareAddr` is matched as a glob on that text, so the configs carry
//! the MACs lower-cased.

use serde_yaml_ng::{Mapping, Value};
use std::net::Ipv4Addr;

use talosprov_base::version::Contract;
use talosprov_topology::model::{Node, Topology};

/// The filesystem talosprov formats a data disk with (Talos's default for
/// user volumes).
pub const DATA_FILESYSTEM: &str = "xfs";

/// The link alias of NIC `index`: `net<index>`, as Proxmox names the NIC.
pub fn link_alias(index: usize) -> String {
    format!("net{index}")
}

/// Add `node`'s links and user volumes to its `documents` (the base config,
/// v1alpha1 first). Nothing for a node with the default NIC and no mounted
/// disk.
pub fn add_node_devices(
    documents: &mut Vec<Value>,
    topology: &Topology,
    node: &Node,
    contract: Contract,
) {
    let cluster = &topology.cluster;
    let route = (cluster.gateway, cluster.prefix_length);
    if !node.networks.is_empty() {
        if contract >= Contract::V1_14 {
            for (i, nic) in node.networks.iter().enumerate() {
                let mac = nic.mac.as_deref().unwrap_or_default().to_ascii_lowercase();
                documents.push(link_alias_document(i, &mac));
                let address = (i == 0).then_some((node.ip, route));
                documents.push(link_document(i, nic.mtu, address));
            }
        } else if let Some(v1) = documents.first_mut() {
            let entries: Vec<Value> = node
                .networks
                .iter()
                .enumerate()
                .map(|(i, nic)| {
                    let mac = nic.mac.as_deref().unwrap_or_default().to_ascii_lowercase();
                    let address = (i == 0).then_some((node.ip, route));
                    interface_entry(&mac, nic.mtu, address)
                })
                .collect();
            append_interfaces(v1, entries);
        }
    }
    for disk in &node.disks {
        if let Some(name) = &disk.volume {
            documents.push(user_volume_document(
                name,
                &talosprov_base::vm::disk_serial(disk.index),
            ));
        }
    }
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::from(k), v);
    }
    Value::Mapping(m)
}

/// The address `ip/prefix` and the default route through `gateway`.
type Address = (Ipv4Addr, (Ipv4Addr, u8));

fn interface_entry(mac: &str, mtu: Option<u16>, address: Option<Address>) -> Value {
    let mut pairs = vec![(
        "deviceSelector",
        map(vec![("hardwareAddr", Value::from(mac))]),
    )];
    if let Some((ip, (gateway, prefix))) = address {
        pairs.push((
            "addresses",
            Value::Sequence(vec![Value::from(format!("{ip}/{prefix}"))]),
        ));
        pairs.push((
            "routes",
            Value::Sequence(vec![map(vec![
                ("network", Value::from("0.0.0.0/0")),
                ("gateway", Value::from(gateway.to_string())),
            ])]),
        ));
    }
    if let Some(mtu) = mtu {
        pairs.push(("mtu", Value::from(u64::from(mtu))));
    }
    map(pairs)
}

fn append_interfaces(v1: &mut Value, entries: Vec<Value>) {
    let Value::Mapping(root) = v1 else {
        return;
    };
    let machine = root
        .entry(Value::from("machine"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(machine) = machine else {
        return;
    };
    let network = machine
        .entry(Value::from("network"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    let Value::Mapping(network) = network else {
        return;
    };
    let interfaces = network
        .entry(Value::from("interfaces"))
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if let Value::Sequence(list) = interfaces {
        list.extend(entries);
    }
}

fn header(kind: &str, name: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("apiVersion", Value::from("v1alpha1")),
        ("kind", Value::from(kind)),
        ("name", Value::from(name)),
    ]
}

fn link_alias_document(index: usize, mac: &str) -> Value {
    let mut pairs = header("LinkAliasConfig", &link_alias(index));
    pairs.push((
        "selector",
        map(vec![(
            "match",
            Value::from(format!("mac(link.permanent_addr) == \"{mac}\"")),
        )]),
    ));
    map(pairs)
}

fn link_document(index: usize, mtu: Option<u16>, address: Option<Address>) -> Value {
    let mut pairs = header("LinkConfig", &link_alias(index));
    if let Some(mtu) = mtu {
        pairs.push(("mtu", Value::from(u64::from(mtu))));
    }
    if let Some((ip, (gateway, prefix))) = address {
        pairs.push((
            "addresses",
            Value::Sequence(vec![map(vec![(
                "address",
                Value::from(format!("{ip}/{prefix}")),
            )])]),
        ));
        pairs.push((
            "routes",
            Value::Sequence(vec![map(vec![(
                "gateway",
                Value::from(gateway.to_string()),
            )])]),
        ));
    }
    map(pairs)
}

fn user_volume_document(name: &str, serial: &str) -> Value {
    let mut pairs = header("UserVolumeConfig", name);
    pairs.push(("volumeType", Value::from("disk")));
    pairs.push((
        "provisioning",
        map(vec![(
            "diskSelector",
            map(vec![(
                "match",
                Value::from(format!("disk.serial == \"{serial}\"")),
            )]),
        )]),
    ));
    pairs.push((
        "filesystem",
        map(vec![("type", Value::from(DATA_FILESYSTEM))]),
    ));
    map(pairs)
}
