//! `talosprov import` below the command line, as OpenTofu's import: which
//! addresses can be imported and with which ID (pure: only those the topology
//! declares, at the ID it declares, and none already in the state), reading
//! the object from Proxmox, and the record that makes it talosprov's own, as
//! it was seen.

use anyhow::Context as _;

use talosprov_proxmox::{self as proxmox, mapping, observe, pool, vm};
use talosprov_statefile::address::Address;
use talosprov_statefile::format::{self, State};
use talosprov_topology::model::Topology;

use super::create_step::{mapping_record, vm_record};

/// What an import takes over, as the topology declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `vm/<host>`: the VM at `vmid` on `node`.
    Vm {
        /// The node's hostname.
        host: String,
        /// The topology's `vm_id`.
        vmid: u32,
        /// The Proxmox node the topology puts it on.
        node: String,
    },
    /// `pool/<name>`: the topology's `proxmox.pool`.
    Pool(String),
    /// `pci_mapping/<name>`: one of the topology's `pci_mappings`.
    PciMapping(String),
}

impl Target {
    /// The address it is recorded at.
    pub fn address(&self) -> Address {
        match self {
            Target::Vm { host, .. } => Address::Vm(host.clone()),
            Target::Pool(n) => Address::Pool(n.clone()),
            Target::PciMapping(n) => Address::PciMapping(n.clone()),
        }
    }
}

/// An import talosprov refuses before reading anything from Proxmox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportRefused {
    /// Images, configs, the bootstrap and the kubeconfig are made by apply.
    #[error(
        "{0} cannot be imported: only vm/HOSTNAME, pool/NAME and pci_mapping/NAME can \
         (images, machine configs, the bootstrap and the kubeconfig are made by apply)"
    )]
    NotImportable(Address),
    /// The topology does not declare the address.
    #[error("{address} is not in the topology {file}: {hint}")]
    NotDeclared {
        /// The address given to `import` (`vm/HOSTNAME`, `pool/NAME`, ...).
        address: Address,
        /// The topology file's path, as given.
        file: String,
        /// What to declare first.
        hint: String,
    },
    /// The ID is not the one the topology declares for the address.
    #[error("{address} is imported by its ID in the topology, {declared}, not {given}: {hint}")]
    OtherId {
        /// The address given to `import`.
        address: Address,
        /// The ID given.
        given: String,
        /// The ID the topology declares.
        declared: String,
        /// What to do.
        hint: String,
    },
    /// The state has a record at the address.
    #[error(
        "{0} is already in the state: talosprov manages it already (`talosprov state rm {0}` \
         forgets it, without touching it)"
    )]
    AlreadyManaged(Address),
    /// An interrupted apply was creating it.
    #[error(
        "an interrupted apply was creating {0}: run `talosprov apply`, which adopts it and \
         brings it to the topology"
    )]
    BeingCreated(Address),
    /// Another address of the state holds the same VM.
    #[error("VM {vmid} is already in the state as {other}")]
    VmRecorded {
        /// The VM ID given to `import`.
        vmid: u32,
        /// The state's address that already records this VM.
        other: Address,
    },
}

/// What `talosprov import ADDRESS ID` takes over, checked against the
/// topology: the address must be declared, and the ID must be the one
/// declared for it (another ID would make the next plan replace the object).
///
/// # Errors
/// [`ImportRefused`] naming the address and what to do.
pub fn target(topology: &Topology, address: &Address, id: &str) -> Result<Target, ImportRefused> {
    let file = topology.file.display().to_string();
    let other_id = |declared: String, hint: String| ImportRefused::OtherId {
        address: address.clone(),
        given: id.to_owned(),
        declared,
        hint,
    };
    match address {
        Address::Vm(host) => {
            let node = topology
                .node(host)
                .ok_or_else(|| ImportRefused::NotDeclared {
                    address: address.clone(),
                    file,
                    hint: "add the node to nodes: first, with the VM's vm_id".into(),
                })?;
            let vmid = node.vm_id.0;
            match id.parse::<u32>() {
                Ok(given) if given == vmid => {}
                Ok(given) => {
                    return Err(other_id(
                        vmid.to_string(),
                        format!(
                            "set vm_id: {given} on node {host} first to take over VM {given}, \
                             or run `talosprov import {address} {vmid}`"
                        ),
                    ));
                }
                Err(_) => {
                    return Err(other_id(
                        vmid.to_string(),
                        format!(
                            "a VM is imported by its vmid: run `talosprov import {address} {vmid}`"
                        ),
                    ));
                }
            }
            Ok(Target::Vm {
                host: host.clone(),
                vmid,
                node: node.proxmox_node.clone(),
            })
        }
        Address::Pool(name) => {
            if topology.proxmox.pool.as_ref() != Some(name) {
                let hint = match &topology.proxmox.pool {
                    Some(p) => format!("its proxmox.pool is {p}"),
                    None => "set proxmox.pool first".to_owned(),
                };
                return Err(ImportRefused::NotDeclared {
                    address: address.clone(),
                    file,
                    hint,
                });
            }
            if id != name {
                return Err(other_id(
                    name.clone(),
                    format!("run `talosprov import {address} {name}`"),
                ));
            }
            Ok(Target::Pool(name.clone()))
        }
        Address::PciMapping(name) => {
            if !topology.pci_mappings.contains_key(name) {
                return Err(ImportRefused::NotDeclared {
                    address: address.clone(),
                    file,
                    hint: format!("declare it under pci_mappings: first, as {name}"),
                });
            }
            if id != name {
                return Err(other_id(
                    name.clone(),
                    format!("run `talosprov import {address} {name}`"),
                ));
            }
            Ok(Target::PciMapping(name.clone()))
        }
        Address::Image(_)
        | Address::HaRule(_)
        | Address::Config(_)
        | Address::Bootstrap
        | Address::Kubeconfig
        | Address::Talosconfig
        | Address::Object(_) => Err(ImportRefused::NotImportable(address.clone())),
    }
}

/// Refuse an address the state already has: a record, a create intent, or
/// (for a VM) the same vmid recorded at another address.
///
/// # Errors
/// [`ImportRefused`].
pub fn check_state(state: &State, target: &Target) -> Result<(), ImportRefused> {
    let address = target.address();
    if state.has_record(&address) {
        return Err(ImportRefused::AlreadyManaged(address));
    }
    if state.intent(&address).is_some() {
        return Err(ImportRefused::BeingCreated(address));
    }
    if let Target::Vm { vmid, node, .. } = target
        && let Some((other, _)) = state
            .resources
            .vms
            .iter()
            .find(|(_, v)| v.vmid == *vmid && v.node == *node)
    {
        return Err(ImportRefused::VmRecorded {
            vmid: *vmid,
            other: Address::Vm(other.clone()),
        });
    }
    Ok(())
}

/// An object read from Proxmox, as its state record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Imported {
    /// A VM's record.
    Vm(String, format::Vm),
    /// A pool's record.
    Pool(String, format::Pool),
    /// A PCI mapping's record.
    PciMapping(String, format::PciMapping),
}

impl Imported {
    /// What was imported, in the operator's words, e.g. `VM 122 "legacy-db"
    /// on pve1 (2 cores, 2048 MiB, disk 32 GiB)`.
    pub fn describe(&self) -> String {
        match self {
            Imported::Vm(_, v) => format!(
                "VM {} {:?} on {} ({} cores, {} MiB, disk {} GiB)",
                v.vmid, v.name, v.node, v.cores, v.memory_mib, v.disk_gib
            ),
            Imported::Pool(name, p) => match &p.comment {
                Some(c) => format!("pool {name} (comment {c:?})"),
                None => format!("pool {name}"),
            },
            Imported::PciMapping(name, m) => {
                let entries: Vec<String> = m
                    .map
                    .iter()
                    .map(|e| format!("{}:{}={}", e.node, e.path, e.id))
                    .collect();
                format!("PCI mapping {name} ({})", entries.join(", "))
            }
        }
    }

    /// Record it in the state, as it was seen.
    pub fn record(self, state: &mut State) {
        let r = &mut state.resources;
        match self {
            Imported::Vm(host, v) => {
                r.vms.insert(host, v);
            }
            Imported::Pool(name, p) => {
                r.pools.insert(name, p);
            }
            Imported::PciMapping(name, m) => {
                r.pci_mappings.insert(name, m);
            }
        }
    }
}

/// Read what `target` names from Proxmox (the VM's config as of its next
/// start, pending values included).
///
/// # Errors
/// Nothing at the ID, a VM on another Proxmox node than the topology's, and
/// Proxmox errors.
pub async fn read(client: &proxmox::client::Client, target: &Target) -> anyhow::Result<Imported> {
    match target {
        Target::Vm { host, vmid, node } => {
            let listed = vm::find(client, *vmid)
                .await
                .with_context(|| format!("cannot look for VM {vmid} in Proxmox"))?
                .with_context(|| format!("there is no VM {vmid} in Proxmox to import"))?;
            if listed.node != *node {
                anyhow::bail!(
                    "VM {vmid} is on {}, but the topology puts vm/{host} on {node}: importing it \
                     would replace it; set proxmox_node: {} on node {host} first",
                    listed.node,
                    listed.node
                );
            }
            let config = observe::vm_config(client, node, *vmid)
                .await
                .with_context(|| format!("cannot read the config of VM {vmid}"))?;
            Ok(Imported::Vm(host.clone(), vm_record(*vmid, node, &config)))
        }
        Target::Pool(name) => {
            let found = pool::read(client, name)
                .await
                .with_context(|| format!("cannot read pool {name} from Proxmox"))?
                .with_context(|| format!("there is no pool {name} in Proxmox to import"))?;
            let comment = found.comment.filter(|c| !c.is_empty());
            Ok(Imported::Pool(name.clone(), format::Pool { comment }))
        }
        Target::PciMapping(name) => {
            let found = mapping::read(client, name)
                .await
                .with_context(|| format!("cannot read PCI mapping {name} from Proxmox"))?
                .with_context(|| format!("there is no PCI mapping {name} in Proxmox to import"))?;
            Ok(Imported::PciMapping(name.clone(), mapping_record(&found)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TOPOLOGY: &str = "
cluster: { name: lab, talos_version: v1.13.8, gateway: 10.0.0.1 }
proxmox: { endpoint: https://pve.example:8006, node: pve1, datastore: local-lvm, pool: TALOS }
pci_mappings:
  gpu: { path: \"0000:01:00\", id: \"10de:2507\", iommu_group: 10, subsystem_id: \"10de:2507\" }
nodes:
  - { hostname: cp-01, ip: 10.0.0.121, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: wk-1, ip: 10.0.0.122, role: worker, cores: 4, memory: 8192, disk_size: 100 }
";

    fn topology() -> Topology {
        let loaded = talosprov_topology::parse(
            TOPOLOGY,
            Path::new("/lab/cluster.yaml"),
            &talosprov_topology::model::Environment::default(),
        );
        loaded
            .topology
            .unwrap_or_else(|| panic!("{:#?}", loaded.diagnostics))
    }

    fn refusal(address: &str, id: &str) -> String {
        target(&topology(), &address.parse().unwrap(), id)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn declared_addresses_at_their_ids_are_importable() {
        let t = topology();
        let vm = target(&t, &"vm/wk-1".parse().unwrap(), "122").unwrap();
        assert_eq!(
            vm,
            Target::Vm {
                host: "wk-1".into(),
                vmid: 122,
                node: "pve1".into()
            }
        );
        assert_eq!(
            target(&t, &"pool/TALOS".parse().unwrap(), "TALOS").unwrap(),
            Target::Pool("TALOS".into())
        );
        assert_eq!(
            target(&t, &"pci_mapping/gpu".parse().unwrap(), "gpu").unwrap(),
            Target::PciMapping("gpu".into())
        );
    }

    #[test]
    fn imports_the_topology_does_not_declare_are_refused() {
        let all = [
            ("vm/wk-9", "129"),
            ("vm/wk-1", "130"),
            ("vm/wk-1", "wk-1"),
            ("pool/OTHER", "OTHER"),
            ("pool/TALOS", "talos"),
            ("pci_mapping/nic", "nic"),
            ("pci_mapping/gpu", "gpu2"),
            ("config/wk-1", "wk-1"),
            ("kubeconfig", "x"),
        ];
        let text: Vec<String> = all
            .iter()
            .map(|(a, id)| format!("$ talosprov import {a} {id}\n{}", refusal(a, id)))
            .collect();
        insta::assert_snapshot!(text.join("\n\n"));
    }

    #[test]
    fn addresses_already_in_the_state_are_refused() {
        let t = topology();
        let wk = target(&t, &"vm/wk-1".parse().unwrap(), "122").unwrap();
        let mut s = State::new(uuid::Uuid::nil());
        assert_eq!(check_state(&s, &wk), Ok(()));
        let record = format::Vm {
            vmid: 122,
            node: "pve1".into(),
            name: "wk-1".into(),
            cores: 4,
            memory_mib: 8192,
            disk_gib: 100,
            hostpci: Default::default(),
            tags: vec![],
            net: Default::default(),
            disks: Default::default(),
            agent: true,
            ha: None,
        };
        s.resources.vms.insert("old-name".into(), record.clone());
        let mut text = vec![check_state(&s, &wk).unwrap_err().to_string()];
        s.resources.vms.clear();
        s.set_intent(
            &Address::Vm("wk-1".into()),
            talosprov_statefile::intent::CreateIntent::vm(122, "pve1", "wk-1"),
        );
        text.push(check_state(&s, &wk).unwrap_err().to_string());
        s.resources.creating.clear();
        s.resources.vms.insert("wk-1".into(), record);
        text.push(check_state(&s, &wk).unwrap_err().to_string());
        insta::assert_snapshot!(text.join("\n"));
    }
}
