//! Refresh: read back what planning compares with. One cluster-wide VM
//! listing (plus the config of each recorded VM with its pending values, for
//! its PCI devices and what it runs with), the pool and PCI mapping listings
//! (one request each), the image storage's `shared` flag and the images it
//! holds on each host the VMs go to, and the Talos version of each configured node that answers within a short
//! probe (with the boot time of a node whose config is staged, to tell whether
//! it rebooted since).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use talosprov_plan::field::VmField;

use anyhow::Context as _;

use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;
use talosprov_plan::observed::{Observed, ObservedVm};
use talosprov_proxmox::{self as proxmox, mapping, observe, pending, pool, storage};
use talosprov_statefile::format::{NodeConfig, State};
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::types::{ApplyMode, ApplyOptions};

/// What refresh needs to know beyond the state.
#[derive(Debug)]
pub struct RefreshInput<'a> {
    /// Proxmox host whose view of the image storage is read.
    pub image_node: &'a str,
    /// The image storage.
    pub image_storage: &'a str,
    /// The Proxmox hosts the topology's VMs go to, whose image listings are
    /// read (only `image_node`'s when the storage is shared).
    pub image_hosts: &'a [String],
    /// Node addresses by hostname, for the Talos API.
    pub ips: &'a BTreeMap<String, IpAddr>,
    /// Talos client credentials, when the state has a talosconfig.
    pub credentials: Option<&'a ClientCredentials>,
    /// How long to wait for each node's answer.
    pub probe: Duration,
    /// The desired machine configs by hostname (with their SHA-256): a
    /// configured node whose recorded digest differs is asked, with a dry run,
    /// whether applying it reboots the node.
    pub configs: &'a BTreeMap<String, (String, Sensitive<String>)>,
}

/// Whether the node would reboot to apply `yaml` in auto mode, by its answer
/// to a dry run (the mode it resolves AUTO to); `None` when it refuses.
async fn dry_run_reboots(client: &TalosClient, yaml: &Sensitive<String>) -> Option<bool> {
    let options = ApplyOptions {
        dry_run: true,
        ..ApplyOptions::default()
    };
    match client
        .apply_configuration(yaml.expose().as_bytes(), &options)
        .await
    {
        Ok(outcome) => Some(outcome.mode == ApplyMode::Reboot),
        Err(e) => {
            tracing::debug!(error = %e, "the dry run of the machine config was refused");
            None
        }
    }
}

/// The plan's view of what a running VM does not run with yet: for each
/// setting whose next-start value differs from the one it was started with,
/// the VM field and the running value. A `hostpci` key Proxmox gives that
/// is not `hostpciN` is no device of the plan's, and is left out.
fn running_values(
    current: &talosprov_proxmox::vm_config::VmConfig,
    next: &talosprov_proxmox::vm_config::VmConfig,
) -> BTreeMap<VmField, Option<String>> {
    pending::awaiting_restart(current, next)
        .into_iter()
        .filter_map(|s| match s {
            pending::RestartSetting::Cores => {
                Some((VmField::Cores, current.cores.map(|c| c.to_string())))
            }
            pending::RestartSetting::Memory => Some((
                VmField::MemoryMib,
                current.memory_mib.map(|m| m.to_string()),
            )),
            pending::RestartSetting::HostPci(key) => {
                let value = current.hostpci.get(&key).cloned();
                VmField::parse(&key).map(|device| (device, value))
            }
        })
        .collect()
}

/// When the node booted (SystemStat), read for a node whose config is
/// staged; `None` when it refuses or gives none, and its staged record then
/// stays.
async fn staged_boot_time(client: &TalosClient) -> Option<u64> {
    match client.boot_time().await {
        Ok(t) => (t > 0).then_some(t),
        Err(e) => {
            tracing::debug!(error = %e, "the node's boot time was not read");
            None
        }
    }
}

/// Observe the cluster for a plan.
///
/// # Errors
/// Proxmox request errors (the Talos API is best effort: a node that does not
/// answer is left out).
pub async fn refresh(
    client: &proxmox::client::Client,
    state: Option<&State>,
    input: &RefreshInput<'_>,
) -> anyhow::Result<Observed> {
    let mut out = Observed {
        refreshed: true,
        ..Observed::default()
    };
    observe_vms(client, state, &mut out).await?;
    observe_pools_and_mappings(client, &mut out).await?;
    observe_ha_rules(client, &mut out).await;
    observe_image_sizes(client, input, &mut out).await;
    observe_bridges(client, input, &mut out).await;
    if let (Some(state), Some(creds)) = (state, input.credentials) {
        probe_nodes(state, creds, input, &mut out).await;
    }
    Ok(out)
}

/// Every VM of the cluster-wide listing, with the settings of the recorded
/// ones read from their config, and what a running one does not run with
/// yet.
async fn observe_vms(
    client: &proxmox::client::Client,
    state: Option<&State>,
    out: &mut Observed,
) -> anyhow::Result<()> {
    let recorded: Vec<observe::ExpectedVm> = state
        .map(|s| {
            s.resources
                .vms
                .values()
                .map(|vm| observe::ExpectedVm {
                    vmid: vm.vmid,
                    node: Some(vm.node.clone()),
                    name: Some(vm.name.clone()),
                    cores: None,
                    memory_mib: None,
                    disk_gib: None,
                    tags: None,
                    pool: None,
                    want_config: true,
                })
                .collect()
        })
        .unwrap_or_default();
    let seen = observe::observe(client, &recorded)
        .await
        .context("cannot read the cluster's VMs from Proxmox")?;
    // Best effort: a token without Sys.Audit on / leaves the records' HA
    // resources as they are (the privilege check names it when a change needs it).
    let ha_resources = match talosprov_proxmox::ha::list_resources(client).await {
        Ok(list) => Some(list),
        Err(e) => {
            tracing::debug!(error = %e, "HA resources not read");
            None
        }
    };
    for (vmid, vm) in &seen.all {
        if !vm.is_vm() {
            continue;
        }
        let read = seen.expected.get(vmid).and_then(|o| o.as_ref());
        let config = read.and_then(|o| o.config.as_ref());
        let running = match read.and_then(|o| o.current.as_ref()).zip(config) {
            Some((current, next)) if vm.status == "running" => running_values(current, next),
            _ => BTreeMap::new(),
        };
        out.vms.insert(
            *vmid,
            ObservedVm {
                vmid: *vmid,
                node: vm.node.clone(),
                name: vm.name.clone(),
                status: vm.status.clone(),
                cores: config
                    .and_then(|c| c.cores)
                    .or(vm.maxcpu)
                    .and_then(|c| u32::try_from(c).ok()),
                memory_mib: config.and_then(|c| c.memory_mib).or(vm.memory_mib()),
                disk_gib: config.and_then(|c| c.disk_gib).or(vm.disk_gib()),
                hostpci: config.map(|c| c.hostpci.clone()),
                tags: config.map_or_else(|| vm.tag_set(), |c| c.tags.clone()),
                net: config.map(|c| c.net.clone()),
                disks: config.map(super::create_step::disk_records),
                agent: config.map(|c| c.agent),
                ha: ha_resources.as_ref().map(|l| l.get(vmid).cloned()),
                running,
            },
        );
    }
    Ok(())
}

/// The pool and PCI mapping listings, one request each.
async fn observe_pools_and_mappings(
    client: &proxmox::client::Client,
    out: &mut Observed,
) -> anyhow::Result<()> {
    let pools = pool::list(client)
        .await
        .context("cannot read the pools from Proxmox")?;
    out.pools = Some(
        pools
            .into_iter()
            .map(|p| {
                let comment = p.comment.filter(|c| !c.is_empty());
                (p.poolid, talosprov_statefile::format::Pool { comment })
            })
            .collect(),
    );
    let mappings = mapping::list(client)
        .await
        .context("cannot read the PCI mappings from Proxmox")?;
    out.pci_mappings = Some(
        mappings
            .iter()
            .map(|m| (m.id.clone(), super::create_step::mapping_record(m)))
            .collect(),
    );
    Ok(())
}

/// The negative resource-affinity HA rules (PVE 9), or on a Proxmox that
/// has none (PVE 8) talosprov's HA groups gathered by rule. Best effort: a token without `Sys.Audit` on `/` leaves the
/// records as they are.
async fn observe_ha_rules(client: &proxmox::client::Client, out: &mut Observed) {
    match talosprov_proxmox::ha::list_rules(client).await {
        Ok(Some(rules)) => {
            out.ha_rules = Some(
                rules
                    .into_values()
                    .map(|r| {
                        let record = talosprov_statefile::format::HaRule {
                            rule: r.id.clone(),
                            vmids: r.vmids,
                            comment: r.comment,
                            groups: std::collections::BTreeMap::new(),
                        };
                        (r.id, record)
                    })
                    .collect(),
            );
        }
        Ok(None) => {
            out.no_ha_rules = true;
            match talosprov_proxmox::ha::list_grouped(client).await {
                Ok(grouped) => {
                    out.ha_rules = Some(
                        grouped
                            .into_values()
                            .map(|g| {
                                let record = talosprov_statefile::format::HaRule {
                                    rule: g.id.clone(),
                                    vmids: g.vmids,
                                    comment: g.comment,
                                    groups: g.groups,
                                };
                                (g.id, record)
                            })
                            .collect(),
                    );
                }
                Err(e) => tracing::debug!(error = %e, "HA groups not read"),
            }
        }
        Err(e) => tracing::debug!(error = %e, "HA rules not read"),
    }
}

/// The image storage's `shared` flag and the import volumes with their
/// virtual sizes on each host the VMs go to (one host when the storage is
/// shared), for the plan's disk-below-image check. Best effort: a listing
/// not read leaves the check to the create.
async fn observe_image_sizes(
    client: &proxmox::client::Client,
    input: &RefreshInput<'_>,
    out: &mut Observed,
) {
    match storage::storage_status(client, input.image_node, input.image_storage).await {
        Ok(s) => out.image_storage_shared = Some(s.shared),
        Err(e) => tracing::debug!(error = %e, "image storage status not read"),
    }
    let hosts: Vec<&str> = if out.image_storage_shared == Some(true) {
        vec![input.image_node]
    } else {
        input.image_hosts.iter().map(String::as_str).collect()
    };
    for host in hosts {
        match storage::import_volumes(client, host, input.image_storage).await {
            Ok(volumes) => {
                let sizes = volumes
                    .into_iter()
                    .filter_map(|v| Some((v.volid, v.size?)))
                    .collect();
                out.image_sizes.insert(host.to_owned(), sizes);
            }
            Err(e) => tracing::debug!(error = %e, host, "image listing not read"),
        }
    }
}

/// The bridges of every host the VMs go to (a host whose list cannot be read is
/// left out, and its NICs unchecked).
async fn observe_bridges(
    client: &proxmox::client::Client,
    input: &RefreshInput<'_>,
    out: &mut Observed,
) {
    for host in input.image_hosts {
        match observe::bridges(client, host).await {
            Ok(list) => {
                out.bridges.insert(host.clone(), list);
            }
            Err(e) => tracing::debug!(error = %e, host, "bridges not read"),
        }
    }
}

/// What one configured node answered within the probe.
struct NodeAnswer {
    host: String,
    /// The Talos version tag in secure mode; `None` when the node answers
    /// only in maintenance mode.
    tag: Option<String>,
    /// The dry run's answer, when the node was asked (see
    /// [`dry_run_reboots`]).
    reboot: Option<Option<bool>>,
    /// The boot time of a node whose config is staged.
    boot_time: Option<u64>,
    /// The machine config it runs, when it is not the one recorded as applied.
    running: Option<talosprov_plan::observed::RunningConfig>,
    /// A control plane whose etcd waits for a bootstrap (no etcd data).
    etcd_waiting: bool,
}

/// Ask every node configured in secure mode, all at once, for its version
/// (and, as needed, a dry run and its boot time); a node that answers only
/// in maintenance mode was reset.
async fn probe_nodes(
    state: &State,
    creds: &ClientCredentials,
    input: &RefreshInput<'_>,
    out: &mut Observed,
) {
    let probes = state
        .resources
        .configs
        .iter()
        .filter(|(_, c)| c.secure_mode)
        .filter_map(|(host, c)| input.ips.get(host).map(|ip| (host.clone(), *ip, c)))
        .map(|(host, ip, recorded)| probe_node(host, ip, recorded, creds, input));
    for answer in futures::future::join_all(probes).await {
        let answer = match answer {
            Ok(a) => a,
            Err((host, why)) => {
                out.unreachable.insert(host, why);
                continue;
            }
        };
        let host = answer.host;
        if let Some(Some(reboot)) = answer.reboot {
            out.apply_reboots.insert(host.clone(), reboot);
        }
        if let Some(t) = answer.boot_time {
            out.boot_times.insert(host.clone(), t);
        }
        if let Some(r) = answer.running {
            out.running_configs.insert(host.clone(), r);
        }
        if answer.etcd_waiting {
            out.etcd_waiting.insert(host.clone());
        }
        match answer.tag {
            Some(tag) => {
                out.talos_versions.insert(host, tag);
            }
            None => {
                out.in_maintenance.insert(host);
            }
        }
    }
}

/// The machine config the node runs (COSI `MachineConfig`), when its digest is not the
/// one `recorded` as applied: a change made outside talosprov (`talosctl edit mc`,
/// `talosctl patch mc`, a config applied by hand). `None` when it is the recorded one, or
/// when the node does not say (an older Talos, a role below `os:admin`).
async fn running_drift(
    c: &TalosClient,
    recorded: &NodeConfig,
) -> Option<talosprov_plan::observed::RunningConfig> {
    use sha2::Digest as _;
    let running = c.running_config().await.ok().flatten()?;
    let sha256 = hex::encode(sha2::Sha256::digest(running.expose()));
    if recorded.runs(&sha256) {
        return None;
    }
    Some(talosprov_plan::observed::RunningConfig {
        sha256,
        yaml: talosprov_base::sensitive::Sensitive::new(
            String::from_utf8_lossy(running.expose()).into_owned(),
        ),
    })
}

/// Whether the node's etcd service waits for a bootstrap: `Preparing`,
/// "etcd is waiting to join the cluster, if this node is the first node in
/// the cluster, please run `talosctl bootstrap`" (Talos's etcd service). A
/// node that does not list its services is not taken for one.
async fn etcd_waits(c: &TalosClient) -> bool {
    c.service_list().await.is_ok_and(|services| {
        services.iter().any(|s| {
            s.id == "etcd"
                && s.state == "Preparing"
                && s.last_message.contains("talosctl bootstrap")
        })
    })
}

/// Probe one node at `ip` in secure mode, else in maintenance mode; its
/// hostname and what the secure attempt said when it answers neither within
/// the probe.
async fn probe_node(
    host: String,
    ip: IpAddr,
    recorded: &NodeConfig,
    creds: &ClientCredentials,
    input: &RefreshInput<'_>,
) -> Result<NodeAnswer, (String, String)> {
    let answer = tokio::time::timeout(input.probe, async {
        let c = TalosClient::connect_secure(ip, creds).await?;
        let version = c.version().await?;
        // A staged config runs from the next boot: until then the node runs another.
        let running = if recorded.staged.is_none() {
            running_drift(&c, recorded).await
        } else {
            None
        };
        let reboot = match input.configs.get(&host) {
            Some((sha, yaml)) if *sha != recorded.config_sha256 || running.is_some() => {
                Some(dry_run_reboots(&c, yaml).await)
            }
            _ => None,
        };
        let boot_time = if recorded.staged.is_some() {
            staged_boot_time(&c).await
        } else {
            None
        };
        let etcd_waiting = recorded.role == Some(Role::Controlplane) && etcd_waits(&c).await;
        Ok::<_, talosprov_talos::error::TalosError>((
            version,
            reboot,
            boot_time,
            running,
            etcd_waiting,
        ))
    })
    .await;
    match answer {
        Ok(Ok((v, reboot, boot_time, running, etcd_waiting))) => Ok(NodeAnswer {
            host,
            tag: Some(v.tag),
            reboot,
            boot_time,
            running,
            etcd_waiting,
        }),
        secure => {
            let why = match secure {
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) | Err(_) => format!(
                    "{ip}:50000: no answer within {} s",
                    input.probe.as_secs_f32()
                ),
            };
            // Not in secure mode: reset by hand, back in maintenance mode?
            let maintenance = tokio::time::timeout(input.probe, async {
                TalosClient::connect_maintenance(ip).await?.version().await
            })
            .await;
            if matches!(maintenance, Ok(Ok(_))) {
                Ok(NodeAnswer {
                    host,
                    tag: None,
                    reboot: None,
                    boot_time: None,
                    running: None,
                    etcd_waiting: false,
                })
            } else {
                Err((host, why))
            }
        }
    }
}
