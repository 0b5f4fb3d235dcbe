//! Creating what talosprov owns so that a run killed at any instant converges,
//! and touching nothing else. Each create looks first: an object already at
//! the ID is adopted only when the state named it when the run started (a
//! record, or a create intent an interrupted run left), and refused otherwise.
//! When the ID is free, the intent (address and ID) is saved before the create
//! request is sent. An adopted object is brought to its spec (settings, disk
//! size, started), and the record that replaces the intent holds what Proxmox
//! reports after the change, never the wanted values.

use anyhow::Context as _;

use talosprov_plan::model::Conflict;
use talosprov_proxmox::{self as proxmox, ha, lifecycle, mapping, observe, pool, vm};
use talosprov_statefile::address::Address;
use talosprov_statefile::format;
use talosprov_statefile::intent::CreateIntent;

use super::context::Context;
use super::record::Record;
use super::reporter::Reporter;

/// The error for an object talosprov does not own, found where it was to
/// create one (made since the plan, or planned without a refresh).
fn refused(address: &Address, id: &str, found: String) -> anyhow::Error {
    anyhow::anyhow!("{}", Conflict::at(address, id, found).reason())
}

/// Make sure `pool/<name>` exists and record it: create it, or adopt the one
/// an interrupted run created.
///
/// # Errors
/// A pool talosprov does not own is there; Proxmox errors.
pub(super) async fn pool(ctx: &Context, name: &str, r: &Reporter) -> anyhow::Result<()> {
    let client = &ctx.proxmox;
    let address = Address::Pool(name.to_owned());
    let owned =
        ctx.owned.pools.contains(name) || ctx.owned.intent(&address).is_some_and(|i| i.id == name);
    match pool::read(client, name).await? {
        Some(found) if !owned => {
            let text = match found.comment.filter(|c| !c.is_empty()) {
                Some(c) => format!("pool {name} (comment {c:?})"),
                None => format!("pool {name}"),
            };
            return Err(refused(&address, name, text));
        }
        Some(_) if ctx.owned.pools.contains(name) => r.progress("the pool is there already"),
        Some(_) => r.progress("adopting the pool an interrupted apply created"),
        None => {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::named(name),
            })
            .await?;
            r.progress("creating the pool");
            match client.send(&pool::create_request(name, None)).await {
                Ok(_) => {}
                // Our create went through and its answer was lost: the retry finds it.
                Err(e) if e.message().is_some_and(|m| m.contains("already exists")) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    pool::read(client, name)
        .await?
        .with_context(|| format!("pool {name} is not in Proxmox after its create"))?;
    r.record(Record::Pool(name.to_owned()));
    Ok(())
}

/// The state record of a mapping as Proxmox returns it.
pub(super) fn mapping_record(found: &mapping::PciMapping) -> format::PciMapping {
    format::PciMapping {
        description: found.description.clone().filter(|d| !d.is_empty()),
        map: found
            .map
            .iter()
            .map(|m| {
                let e = mapping::PciMapEntry::parse(m);
                format::PciMapEntry {
                    node: e.node,
                    path: e.path,
                    id: e.id,
                    subsystem_id: e.subsystem_id,
                    iommu_group: e.iommu_group,
                }
            })
            .collect(),
    }
}

/// Make `pci_mapping/<name>` as the plan says (`want`) and record what
/// Proxmox then holds: create it, update one talosprov owns, or adopt the one
/// an interrupted run created.
///
/// # Errors
/// A mapping talosprov does not own is there; Proxmox errors.
pub(super) async fn pci_mapping(
    ctx: &Context,
    name: &str,
    want: &format::PciMapping,
    r: &Reporter,
) -> anyhow::Result<()> {
    let client = &ctx.proxmox;
    let spec = mapping::PciMappingSpec {
        id: name.to_owned(),
        description: want.description.clone(),
        entries: want
            .map
            .iter()
            .map(|e| mapping::PciMapEntry {
                node: e.node.clone(),
                path: e.path.clone(),
                id: e.id.clone(),
                iommu_group: e.iommu_group,
                subsystem_id: e.subsystem_id.clone(),
            })
            .collect(),
    };
    let address = Address::PciMapping(name.to_owned());
    let owned = ctx.owned.pci_mappings.contains(name)
        || ctx.owned.intent(&address).is_some_and(|i| i.id == name);
    let text = |m: &mapping::PciMapping| {
        let entries: Vec<String> = mapping_record(m)
            .map
            .iter()
            .map(|e| format!("{}:{}={}", e.node, e.path, e.id))
            .collect();
        format!("PCI mapping {name} ({})", entries.join(", "))
    };
    let created = match mapping::read(client, name).await? {
        Some(found) if !owned => return Err(refused(&address, name, text(&found))),
        Some(found) if mapping::matches(&spec, &found) => false,
        Some(_) => {
            r.progress("updating the PCI mapping");
            client.send(&mapping::update_request(&spec)).await?;
            false
        }
        None => {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::named(name),
            })
            .await?;
            r.progress("creating the PCI mapping");
            match client.send(&mapping::create_request(&spec)).await {
                Ok(_) => {}
                // Ours, its answer lost (checked below), or someone else's.
                Err(e) if e.message().is_some_and(|m| m.contains("already defined")) => {}
                Err(e) => return Err(e.into()),
            }
            true
        }
    };
    let confirmed = mapping::read(client, name)
        .await?
        .with_context(|| format!("PCI mapping {name} is not in Proxmox after its create"))?;
    if created && !owned && !mapping::matches(&spec, &confirmed) {
        // Another one was made between the look and the create: not ours.
        r.record(Record::MappingGone(name.to_owned()));
        return Err(refused(&address, name, text(&confirmed)));
    }
    r.record(Record::Mapping {
        name: name.to_owned(),
        mapping: mapping_record(&confirmed),
    });
    Ok(())
}

/// The state record of VM `vmid` on `node` from its config as Proxmox
/// reports it (the values of its next start), with PVE's defaults where a key
/// is absent (1 core, 512 MiB).
pub(super) fn vm_record(
    vmid: u32,
    node: &str,
    config: &talosprov_proxmox::vm_config::VmConfig,
) -> format::Vm {
    format::Vm {
        vmid,
        node: node.to_owned(),
        name: config.raw.get("name").cloned().unwrap_or_default(),
        cores: config
            .cores
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(1),
        memory_mib: config.memory_mib.unwrap_or(512),
        disk_gib: config.disk_gib.unwrap_or(0),
        hostpci: config.hostpci.clone(),
        tags: config.tags.iter().cloned().collect(),
        net: config.net.clone(),
        disks: disk_records(config),
        agent: config.agent,
        // Not in the VM config: the caller sets it from /cluster/ha/resources.
        ha: None,
    }
}

/// The data disks of a config in the form the state records
/// (`vm::disk_record_string`), by key.
pub(super) fn disk_records(
    config: &talosprov_proxmox::vm_config::VmConfig,
) -> std::collections::BTreeMap<String, String> {
    config
        .data_disks
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), talosprov_base::vm::disk_record_string(v)?)))
        .collect()
}

/// Make `vm/<host>` as the plan's `spec` says and record what Proxmox then
/// reports: create, resize and start it; or adopt the VM an interrupted run
/// left at the vmid (with its name, on its node) and bring it to its spec
/// first.
///
/// # Errors
/// A VM talosprov does not own holds the vmid; Proxmox errors.
pub(super) async fn vm(
    ctx: &Context,
    host: &str,
    spec: &talosprov_base::vm::VmSpec,
    r: &Reporter,
) -> anyhow::Result<()> {
    let client = &ctx.proxmox;
    let address = Address::Vm(host.to_owned());
    let made_before = ctx
        .owned
        .intent(&address)
        .is_some_and(|i| i.is_vm(spec.vmid, &spec.node, &spec.name))
        || ctx
            .recorded_vms
            .get(host)
            .is_some_and(|v| v.vmid == spec.vmid && v.node == spec.node && v.name == spec.name);
    let found = vm::find(client, spec.vmid)
        .await
        .with_context(|| format!("cannot look for VM {}", spec.vmid))?;
    let created = match found {
        None => {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::vm(spec.vmid, &spec.node, &spec.name),
            })
            .await?;
            r.progress(format!("creating VM {} on {}", spec.vmid, spec.node));
            let warnings = vm::create(client, spec)
                .await
                .with_context(|| format!("cannot create VM {} for {host}", spec.vmid))?;
            for w in warnings {
                r.warn(w);
            }
            true
        }
        Some(existing) if made_before && vm::is_ours(&existing, spec) => {
            r.progress(format!(
                "adopting VM {}, left half-made by an interrupted apply",
                spec.vmid
            ));
            adopt(client, spec, r)
                .await
                .with_context(|| format!("cannot bring VM {} ({host}) to its spec", spec.vmid))?;
            false
        }
        Some(existing) => {
            let text = match &existing.name {
                Some(name) => format!("VM {} {name:?} on {}", existing.vmid, existing.node),
                None => format!("VM {} on {}", existing.vmid, existing.node),
            };
            return Err(refused(&address, &spec.vmid.to_string(), text));
        }
    };
    let config = observe::vm_config(client, &spec.node, spec.vmid)
        .await
        .with_context(|| format!("cannot read VM {} back", spec.vmid))?;
    let mut record = vm_record(spec.vmid, &spec.node, &config);
    if let Some(want) = &spec.ha {
        r.progress(format!("making VM {} an HA resource", spec.vmid));
        record.ha = ha::set_resource(client, spec.vmid, Some(want))
            .await
            .with_context(|| format!("cannot make VM {} ({host}) an HA resource", spec.vmid))?;
    }
    r.record(Record::Vm {
        host: host.to_owned(),
        vm: record,
        fresh: created || !ctx.recorded_vms.contains_key(host),
    });
    Ok(())
}

/// Bring a VM an interrupted create left (its create task done, or not
/// started, resized or given its settings) to `spec`: wait for the create
/// lock to clear, set its settings and grow its disk, then start it, or
/// restart it through Proxmox when it runs without them.
async fn adopt(
    client: &proxmox::client::Client,
    spec: &talosprov_base::vm::VmSpec,
    r: &Reporter,
) -> anyhow::Result<()> {
    let listed = vm::wait_unlocked(client, spec).await?;
    if let Some(lock) = &listed.lock {
        anyhow::bail!(
            "VM {} is still locked ({lock}); wait for its task to end in Proxmox, then apply again",
            spec.vmid
        );
    }
    let update = lifecycle::VmUpdate {
        name: Some(spec.name.clone()),
        cores: Some(spec.cores),
        memory_mib: Some(spec.memory_mib),
        hostpci: Some(spec.hostpci.clone()),
        tags: Some(spec.tags.clone()),
        disk_gib: Some(spec.disk_gib),
        networks: Some(spec.networks.clone()),
        disks: Some(spec.disks.clone()),
        agent: Some(spec.agent),
    };
    let outcome = lifecycle::update_vm(client, &spec.node, spec.vmid, &update).await?;
    if outcome.needs_reboot() {
        r.progress(format!(
            "restarting through Proxmox to apply {}",
            outcome.pending.join(", ")
        ));
        lifecycle::reboot(client, &spec.node, spec.vmid).await?;
    }
    for w in vm::start(client, &spec.node, spec.vmid).await? {
        r.warn(w);
    }
    Ok(())
}

/// The VM `vm/<host>` talosprov made, as (vmid, node, name): its record, else
/// the create intent an interrupted run left.
pub(super) fn made_vm(ctx: &Context, host: &str) -> Option<(u32, String, String)> {
    if let Some(rec) = ctx.recorded_vms.get(host) {
        return Some((rec.vmid, rec.node.clone(), rec.name.clone()));
    }
    let intent = ctx.owned.intent(&Address::Vm(host.to_owned()))?;
    Some((intent.vmid()?, intent.node.clone()?, intent.name.clone()?))
}

/// Whether the VM talosprov made is still at its vmid: a VM with its name on
/// its node. `Ok(false)` when the vmid is free, or held by another guest
/// (which is then left untouched, with a warning).
///
/// # Errors
/// Proxmox errors.
pub(super) async fn still_there(
    ctx: &Context,
    (vmid, node, name): (u32, &str, &str),
    r: &Reporter,
) -> anyhow::Result<bool> {
    match vm::find(&ctx.proxmox, vmid).await? {
        None => Ok(false),
        Some(found)
            if found.is_vm() && found.node == node && found.name.as_deref() == Some(name) =>
        {
            Ok(true)
        }
        Some(found) => {
            r.warn(format!(
                "VM {vmid} is now {} on {}, not the VM talosprov made: left untouched",
                found.name.as_deref().unwrap_or("a guest without a name"),
                found.node
            ));
            Ok(false)
        }
    }
}
