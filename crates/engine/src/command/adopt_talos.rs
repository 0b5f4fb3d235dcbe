//! `talosprov adopt --from-talos secrets.yaml --node IP...`: a cluster made
//! with talosctl. The bundle authenticates; each node's running machine
//! config (COSI `MachineConfig`) and Talos version are read over the Talos
//! API, and etcd's members on a control plane tell whether it was
//! bootstrapped. The VMs are read from Proxmox and matched to the nodes by
//! their cloud-init address (`ipconfig0`), else by name, else by the
//! addresses the QEMU guest agent reports. Reads only.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context as _, anyhow};

use super::Ui;
use talosprov_adopt::proxmox::{ProxmoxSide, StateMapping, StateVm};
use talosprov_adopt::proxmox::{StateMapEntry, VmDisk, VmNic, VmPci};
use talosprov_adopt::talos::ClusterFacts;
use talosprov_adopt::topology::{NodeSource, Settings};
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_proxmox::client::Client;
use talosprov_proxmox::request::Operation;
use talosprov_proxmox::request::Request;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;

/// What the nodes say.
pub(super) struct FromNodes {
    /// Each node's running config.
    pub nodes: Vec<NodeSource>,
    /// The Talos version the first node runs.
    pub facts: ClusterFacts,
    /// etcd has members on a control plane.
    pub bootstrapped: bool,
}

/// Read each node's running config and version, and whether etcd runs.
pub(super) async fn read_nodes(
    nodes: &[String],
    creds: &ClientCredentials,
    probe: Duration,
) -> anyhow::Result<FromNodes> {
    let mut out = FromNodes {
        nodes: Vec::new(),
        facts: ClusterFacts::default(),
        bootstrapped: false,
    };
    for node in nodes {
        let ip: IpAddr = node
            .parse()
            .with_context(|| format!("--node {node:?} is not an IP address"))?;
        let read = async {
            let c = TalosClient::connect_secure(ip, creds).await?;
            let version = c.version().await?;
            let config = c.running_config().await?;
            let members = c.etcd_member_list().await.unwrap_or_default();
            Ok::<_, talosprov_talos::error::TalosError>((version, config, members))
        };
        let (version, config, members) = tokio::time::timeout(probe, read)
            .await
            .map_err(|_| anyhow!("node {node} did not answer within {probe:?}"))?
            .with_context(|| {
                format!(
                    "cannot read node {node} over the Talos API with the bundle's OS CA (is it \
                     this cluster's secrets.yaml?)"
                )
            })?;
        let config = config
            .ok_or_else(|| anyhow!("node {node} does not say which machine config it runs"))?;
        out.facts.talos_version.get_or_insert(version.tag);
        out.bootstrapped |= !members.is_empty();
        out.facts.sources.push(format!("node {node}"));
        out.nodes.push(NodeSource {
            source: format!("node {node}"),
            node: node.clone(),
            running: Sensitive::new(String::from_utf8_lossy(config.expose()).into_owned()),
            input: None,
            patches: Vec::new(),
        });
    }
    Ok(out)
}

/// A `key=value` of a Proxmox property string.
fn prop<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split(',').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    })
}

/// A VM as adopt reads it, from its config.
fn state_vm(
    vm: &talosprov_proxmox::observe::ClusterVm,
    raw: &std::collections::BTreeMap<String, String>,
) -> StateVm {
    let ipconfig = raw.get("ipconfig0").map(String::as_str).unwrap_or_default();
    let num = |k: &str| raw.get(k).and_then(|v| v.parse::<u64>().ok());
    let nics = (0..8)
        .filter_map(|i| raw.get(&format!("net{i}")))
        .map(|n| VmNic {
            bridge: prop(n, "bridge").map(str::to_owned),
            vlan: prop(n, "tag").and_then(|t| t.parse().ok()),
            mac: n
                .split(',')
                .next()
                .and_then(|m| m.split_once('='))
                .map(|(_, mac)| mac.to_owned()),
            mtu: prop(n, "mtu").and_then(|t| t.parse().ok()),
        })
        .collect();
    let hostpci = (0..16)
        .filter_map(|i| raw.get(&format!("hostpci{i}")).map(|v| (i, v)))
        .map(|(i, v)| VmPci {
            device: format!("hostpci{i}"),
            mapping: prop(v, "mapping").map(str::to_owned),
            id: (!v.contains("mapping="))
                .then(|| v.split(',').next().unwrap_or_default().to_owned()),
            pcie: prop(v, "pcie") == Some("1"),
            rombar: prop(v, "rombar") != Some("0"),
        })
        .collect();
    let disks = ["scsi0", "virtio0", "sata0"]
        .iter()
        .filter_map(|k| raw.get(*k).map(|v| (*k, v)))
        .take(1)
        .map(|(k, v)| VmDisk {
            interface: k.to_owned(),
            datastore: v.split(':').next().map(str::to_owned),
            size_gib: talosprov_proxmox::vm_config::drive_size(v).map(|b| b >> 30),
            source: None,
        })
        .collect();
    StateVm {
        address: format!("VM {} on {}", vm.vmid, vm.node),
        vmid: Some(vm.vmid),
        node: Some(vm.node.clone()),
        name: vm.name.clone(),
        tags: raw
            .get("tags")
            .map(|t| {
                talosprov_proxmox::vm_config::tag_set(t)
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default(),
        pool: vm.pool.clone(),
        cores: num("cores").and_then(|c| u32::try_from(c).ok()),
        memory_mib: num("memory"),
        disks,
        efi_disk: raw.contains_key("efidisk0"),
        hostpci,
        nics,
        addresses: prop(ipconfig, "ip")
            .filter(|ip| ip.contains('/'))
            .map(|ip| vec![ip.to_owned()])
            .unwrap_or_default(),
        gateway: prop(ipconfig, "gw").map(str::to_owned),
        nameservers: raw
            .get("nameserver")
            .map(|n| n.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default(),
    }
}

/// The IPv4 addresses the QEMU guest agent reports for a VM, with their
/// prefix (`10.0.0.5/24`); empty when it does not answer.
async fn agent_addresses(client: &Client, node: &str, vmid: u32) -> Vec<String> {
    let req = Request::get(
        &[
            "nodes",
            node,
            "qemu",
            &vmid.to_string(),
            "agent",
            "network-get-interfaces",
        ],
        Operation::new("read the guest agent's addresses")
            .node(node)
            .vmid(vmid),
    );
    let Ok(data) = client.send(&req).await else {
        return Vec::new();
    };
    data["result"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["ip-addresses"].as_array().into_iter().flatten())
        .filter(|a| a["ip-address-type"] == "ipv4")
        .filter_map(|a| {
            Some(format!(
                "{}/{}",
                a["ip-address"].as_str()?,
                a["prefix"].as_u64()?
            ))
        })
        .collect()
}

/// The VMs of the nodes (by cloud-init address, name, or guest agent
/// address) and the PCI mappings they use, read from Proxmox.
pub(super) async fn read_proxmox(
    settings: &Settings,
    nodes: &[NodeSource],
    ui: &Ui,
) -> anyhow::Result<ProxmoxSide> {
    let px = talosprov_proxmox::settings::Settings::from_env(
        settings.proxmox_endpoint.as_deref(),
        settings
            .proxmox_ca_file
            .as_deref()
            .map(std::path::Path::new),
        None,
        false,
    )?;
    if let Some(w) = px.warning() {
        ui.warn(w);
    }
    let client = Client::new(px)?;
    let listed = talosprov_proxmox::observe::cluster_vms(&client)
        .await
        .context("cannot list the VMs in Proxmox")?;
    let mut side = ProxmoxSide::default();
    for vm in listed.iter().filter(|v| v.is_vm() && !v.template) {
        let config = talosprov_proxmox::observe::vm_config(&client, &vm.node, vm.vmid)
            .await
            .with_context(|| format!("cannot read VM {} on {}", vm.vmid, vm.node))?;
        let mut v = state_vm(vm, &config.raw);
        if v.addresses.is_empty() && config.agent {
            v.addresses = agent_addresses(&client, &vm.node, vm.vmid).await;
        }
        side.vms.push(v);
    }
    let mut wanted: Vec<String> = Vec::new();
    for n in nodes {
        let Some(vm) = side.vm_of(&n.node, None) else {
            continue;
        };
        for name in vm.hostpci.iter().filter_map(|p| p.mapping.clone()) {
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
    }
    for name in wanted {
        let Some(m) = talosprov_proxmox::mapping::read(&client, &name).await? else {
            continue;
        };
        side.mappings.push(StateMapping {
            address: format!("PCI mapping {name}"),
            name,
            comment: m.description,
            map: m
                .map
                .iter()
                .map(|e| {
                    let e = talosprov_proxmox::mapping::PciMapEntry::parse(e);
                    StateMapEntry {
                        node: Some(e.node),
                        path: Some(e.path),
                        id: Some(e.id),
                        subsystem_id: e.subsystem_id,
                        iommu_group: e.iommu_group,
                        comment: None,
                    }
                })
                .collect(),
        });
    }
    Ok(side)
}

/// The bundle's client credentials, for `nodes`.
pub(super) fn credentials(
    secrets: &SecretsBundle,
    nodes: &[String],
) -> anyhow::Result<ClientCredentials> {
    let input = talosprov_machine::talosconfig::TalosconfigInput {
        context: "adopt".into(),
        endpoints: nodes.to_vec(),
        nodes: nodes.to_vec(),
        secrets,
        now: time::OffsetDateTime::now_utc(),
        lifetime: time::Duration::hours(1),
    };
    let tc = talosprov_machine::talosconfig::generate(&input, &mut rand::rngs::OsRng)
        .context("cannot issue a client certificate from the adopted OS CA")?;
    Ok(ClientCredentials::from_talosconfig(&tc))
}
