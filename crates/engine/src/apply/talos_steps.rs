//! The Talos steps: reset before a delete, machine configs (a node found in
//! maintenance mode gets its config and is waited for in secure mode; one
//! found configured is checked against the record), the bootstrap and the
//! kubeconfig (through the Talos API, else signed offline).

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context as _;

use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;
use talosprov_plan::planned::{ApplyMode as PlanMode, PlannedConfig};
use talosprov_statefile::address::Address;
use talosprov_statefile::format;
use talosprov_talos as talos;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::{ApplyMode, ApplyOptions};

use super::context::{ConfigChange, Context, credentials, planned_config};
use super::gate::gated_restart;
use super::record::Record;
use super::reporter::Reporter;

/// Reset a node through the Talos API if it answers (graceful for control
/// planes, so it leaves etcd); a node that does not answer is left as is.
/// Used when the whole cluster goes (destroy); a node leaving a cluster that
/// stays goes through `remove_step`.
pub(super) async fn reset_node(ctx: &Context, host: &str, role: Option<Role>, r: &Reporter) {
    let Some(credentials) = &ctx.credentials else {
        r.warn("no talosconfig in the state: not reset through the Talos API");
        return;
    };
    let Some(ip) = node_address(ctx, host).await else {
        r.warn("no address known for this node: not reset through the Talos API");
        return;
    };
    let connect = tokio::time::timeout(ctx.waits.probe, async {
        let c = TalosClient::connect_secure(ip, credentials).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, talos::error::TalosError>(c)
    })
    .await;
    let Ok(Ok(client)) = connect else {
        r.warn("the Talos API does not answer: the VM is deleted without a reset");
        return;
    };
    let graceful = role == Some(Role::Controlplane);
    r.progress(if graceful {
        "resetting Talos (graceful: leaving etcd)"
    } else {
        "resetting Talos"
    });
    let options = talos::types::ResetOptions {
        graceful,
        reboot: false,
        system_partitions: Vec::new(),
    };
    if let Err(e) = client.reset(&options).await {
        r.warn(format!("Talos reset failed ({e}); deleting the VM anyway"));
    }
}

/// The node's Talos API address: the topology's, else (a node no longer in it)
/// its VM's cloud-init `ipconfig0`.
pub(super) async fn node_address(ctx: &Context, host: &str) -> Option<IpAddr> {
    match ctx.ips.get(host) {
        Some(ip) => Some(*ip),
        None => address_from_proxmox(ctx, host).await,
    }
}

/// The address of a node no longer in the topology, from its VM's cloud-init
/// `ipconfig0`.
async fn address_from_proxmox(ctx: &Context, host: &str) -> Option<IpAddr> {
    let vm = ctx.recorded_vms.get(host)?;
    let config = talosprov_proxmox::observe::vm_config(&ctx.proxmox, &vm.node, vm.vmid)
        .await
        .ok()?;
    config
        .raw
        .get("ipconfig0")
        .and_then(|v| ipconfig_address(v))
}

/// The address in a cloud-init `ipconfigN` value: `ip=192.168.1.122/24,gw=...`.
pub fn ipconfig_address(value: &str) -> Option<IpAddr> {
    value
        .split(',')
        .find_map(|part| part.strip_prefix("ip="))
        .and_then(|cidr| cidr.split('/').next())
        .and_then(|ip| ip.parse().ok())
}

/// A secure-mode client if the node answers Version with mutual TLS within
/// the probe time.
async fn probe_secure(
    ip: IpAddr,
    host: &str,
    credentials: &ClientCredentials,
    probe: Duration,
) -> Result<TalosClient, TalosError> {
    let answer = tokio::time::timeout(probe, async {
        let c = TalosClient::connect_secure(ip, credentials).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, TalosError>(c)
    })
    .await;
    match answer {
        Ok(answer) => answer.map_err(|e| e.with_hostname(Some(host))),
        Err(_) => Err(no_answer(ip, host, probe)),
    }
}

/// A maintenance-mode client if the node answers Version without a client
/// certificate within the probe time.
async fn probe_maintenance(
    ip: IpAddr,
    host: &str,
    probe: Duration,
) -> Result<TalosClient, TalosError> {
    let answer = tokio::time::timeout(probe, async {
        let c = TalosClient::connect_maintenance(ip).await?;
        let c = c.with_hostname(host);
        c.version().await?;
        Ok::<_, TalosError>(c)
    })
    .await;
    match answer {
        Ok(answer) => answer.map_err(|e| e.with_hostname(Some(host))),
        Err(_) => Err(no_answer(ip, host, probe)),
    }
}

fn no_answer(ip: IpAddr, host: &str, probe: Duration) -> TalosError {
    TalosError::Unreachable {
        node: talos::error::NodeName {
            ip,
            hostname: Some(host.to_owned()),
        },
        reason: format!("no answer within {} s (timed out)", probe.as_secs()),
    }
}

/// Where a node stands: configured (secure mode) or waiting for a config.
enum NodeMode {
    Secure(TalosClient),
    Maintenance(TalosClient),
}

/// Wait until the node serves either mode. A node can be in either after a
/// run that stopped mid-step, so both are probed on every attempt. A cause
/// that keeps it from answering is shown in the progress line.
async fn wait_either(
    ctx: &Context,
    ip: IpAddr,
    host: &str,
    credentials: &ClientCredentials,
    r: &Reporter,
) -> anyhow::Result<NodeMode> {
    let w = &ctx.waits;
    let deadline = tokio::time::Instant::now() + w.maintenance;
    let mut attempt = 0;
    let on_cause = |cause: &str| r.progress(format!("waiting for maintenance mode: {cause}"));
    let mut causes = talos::wait::CauseTracker::new(&on_cause);
    loop {
        let secure = probe_secure(ip, host, credentials, w.probe).await;
        if let Ok(c) = secure {
            return Ok(NodeMode::Secure(c));
        }
        let maintenance = probe_maintenance(ip, host, w.probe).await;
        match maintenance {
            Ok(c) => return Ok(NodeMode::Maintenance(c)),
            Err(last) => {
                causes.failed(&last);
                let delay = w.backoff.delay(attempt);
                if tokio::time::Instant::now() + delay > deadline {
                    let cause = causes.persisting().unwrap_or_else(|| last.explain().text);
                    return Err(anyhow::Error::new(last).context(format!(
                        "node {ip} ({host}) reached neither maintenance mode nor secure mode \
                         within {} s: {cause}",
                        w.maintenance.as_secs()
                    )));
                }
                if attempt == 0 {
                    r.progress("waiting for maintenance mode");
                }
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// The control planes a worker's certificate can come from in this run: it
/// gets it from a configured control plane of its cluster (trustd). When one
/// is recorded up in secure mode already, none need this run (empty);
/// otherwise every control plane's config change, all of which failing means
/// the worker's secure-mode wait cannot succeed.
fn certificate_issuers(ctx: &Context, host: &str) -> Vec<Address> {
    let Some(me) = ctx.desired.configs.get(host) else {
        return Vec::new();
    };
    if me.role != Role::Worker {
        return Vec::new();
    }
    let controlplanes: Vec<&String> = ctx
        .desired
        .configs
        .iter()
        .filter(|(_, c)| c.role == Role::Controlplane)
        .map(|(h, _)| h)
        .collect();
    let one_up = controlplanes.iter().any(|h| {
        ctx.recorded_configs
            .get(h.as_str())
            .is_some_and(|c| c.secure_mode)
    });
    if one_up {
        return Vec::new();
    }
    controlplanes
        .into_iter()
        .map(|h| Address::Config(h.clone()))
        .collect()
}

/// Wait for `host` to come up in secure mode after its config was applied in
/// maintenance mode (`after_apply`) or for a node recorded configured: the
/// progress line names a cause that persists; a worker's wait stops as soon
/// as no control plane can issue its certificate.
pub(super) async fn secure_mode(
    ctx: &Context,
    host: &str,
    ip: IpAddr,
    timeout: Duration,
    after_apply: bool,
    r: &Reporter,
) -> anyhow::Result<TalosClient> {
    let credentials = credentials(ctx)?;
    let on_cause = |cause: &str| r.progress(format!("waiting for secure mode: {cause}"));
    let options = talos::wait::SecureWait {
        timeout,
        backoff: ctx.waits.backoff,
        in_maintenance: if after_apply {
            talos::wait::InMaintenance::AfterApply {
                grace: talos::wait::MAINTENANCE_GRACE,
            }
        } else {
            talos::wait::InMaintenance::Fails
        },
        on_cause: &on_cause,
    };
    let wait =
        async { Ok(talos::wait::wait_secure_with(ip, Some(host), credentials, &options).await?) };
    let issuers = certificate_issuers(ctx, host);
    r.waiting(r.unless_all_fail(&issuers, &no_issuer(host), wait))
        .await
}

/// Why a worker's wait stops when no control plane can be configured.
fn no_issuer(host: &str) -> String {
    format!(
        "{host} cannot come up in secure mode: a worker gets its certificate from a configured \
         control plane of its cluster (trustd), and no control plane could be configured in this \
         run"
    )
}

/// Whether the node says it runs a machine config other than the one `recorded` as applied
/// (its COSI `MachineConfig`); false when it does not say.
async fn runs_other_config(client: &TalosClient, recorded: &format::NodeConfig) -> bool {
    use sha2::Digest as _;
    client
        .running_config()
        .await
        .ok()
        .flatten()
        .is_some_and(|c| !recorded.runs(&hex::encode(sha2::Sha256::digest(c.expose()))))
}

/// Apply `change`'s machine config to `host`: a node in maintenance mode gets
/// it and is waited for in secure mode; a configured node whose recorded
/// config is the plan's is only recorded (a re-run after a stop); one with
/// another config gets the change in the plan's apply mode.
pub(super) async fn apply_config(
    ctx: &Context,
    host: &str,
    change: &ConfigChange<'_>,
    r: &Reporter,
) -> anyhow::Result<()> {
    let (want, yaml) = planned_config(ctx, host, change)?;
    let ip = want.ip;
    let w = &ctx.waits;
    let recorded = ctx.recorded_configs.get(host);
    let credentials = credentials(ctx)?;
    let config_record = |secure_mode: bool| config_record(host, change, want, yaml, secure_mode);
    r.progress("checking the Talos API");
    // A worker given its config by an earlier run answers only once a control
    // plane issued its certificate: that wait needs one to be configured.
    let issuers = if recorded.is_some() {
        certificate_issuers(ctx, host)
    } else {
        Vec::new()
    };
    let either = wait_either(ctx, ip, host, credentials, r);
    let either = r
        .waiting(r.unless_all_fail(&issuers, &no_issuer(host), either))
        .await?;
    let client = match either {
        NodeMode::Maintenance(c) => c,
        // A configured node: either its config is the recorded one (a re-run
        // after a stop), or this is a change to apply to the running node, or
        // the node runs a config changed outside talosprov, set back here.
        NodeMode::Secure(client) => {
            match recorded {
                Some(rec)
                    if rec.config_sha256 == want.config_sha256
                        && !runs_other_config(&client, rec).await =>
                {
                    r.record(Record::SecureMode(host.to_owned()));
                }
                Some(_) => apply_change(ctx, host, change, &client, r).await?,
                None => {
                    // Sent by a run that stopped before recording it.
                    r.warn("the node is configured already; recording the config as applied");
                    r.record(config_record(true));
                }
            }
            return Ok(());
        }
    };
    r.progress("applying the machine config");
    let outcome = client
        .apply_configuration(yaml.expose().as_bytes(), &ApplyOptions::default())
        .await
        .with_context(|| format!("{host} refused the machine config"))?;
    for warning in outcome.warnings {
        r.warn(warning);
    }
    r.record(config_record(false));
    r.progress("waiting for secure mode");
    secure_mode(ctx, host, ip, w.secure, true, r).await?;
    r.record(Record::SecureMode(host.to_owned()));
    Ok(())
}

/// Apply a changed config to a running node in the plan's mode. One that
/// reboots the node goes through the health gate of a restart (for a control
/// plane etcd healthy first; afterwards the node healthy again, and etcd), so
/// a config change never takes etcd's quorum down; a staged one is recorded
/// as staged.
async fn apply_change(
    ctx: &Context,
    host: &str,
    change: &ConfigChange<'_>,
    client: &TalosClient,
    r: &Reporter,
) -> anyhow::Result<()> {
    let (want, yaml) = planned_config(ctx, host, change)?;
    let (ip, w) = (want.ip, &ctx.waits);
    let config_record = |secure_mode: bool| config_record(host, change, want, yaml, secure_mode);
    let mode = planned_mode(want.mode, client, yaml.expose(), r).await?;
    let send = async {
        let options = ApplyOptions {
            mode,
            ..ApplyOptions::default()
        };
        let outcome = client
            .apply_configuration(yaml.expose().as_bytes(), &options)
            .await
            .with_context(|| format!("{host} refused the machine config"))?;
        for warning in outcome.warnings {
            r.warn(warning);
        }
        Ok::<_, anyhow::Error>(outcome.mode)
    };
    if mode == ApplyMode::Reboot {
        gated_restart(ctx, host, r, async {
            send.await?;
            r.record(config_record(false));
            r.progress("waiting for the node to reboot into secure mode");
            secure_mode(ctx, host, ip, w.secure, false, r).await?;
            Ok(())
        })
        .await?;
    } else if send.await? == ApplyMode::Staged {
        r.record(staged_record(client, host, ip, config_record(true), r).await);
        return Ok(());
    }
    r.record(config_record(true));
    Ok(())
}

/// The record of a config the node staged (`applied`, its record as
/// applied, marked staged): it keeps running its previous config until its
/// next boot, which refresh then tells by the node's boot time moving on
/// (read after staging, so a reboot in between can only keep the record
/// staged a while longer, never clear it early).
async fn staged_record(
    client: &TalosClient,
    host: &str,
    ip: IpAddr,
    applied: Record,
    r: &Reporter,
) -> Record {
    let boot_time = match client.boot_time().await {
        Ok(t) if t > 0 => Some(t),
        answer => {
            let why = answer
                .err()
                .map_or_else(|| "none given".to_owned(), |e| e.to_string());
            r.warn(format!(
                "the node's boot time could not be read ({why}): the state keeps the config \
                 marked staged until a config is applied without --staged"
            ));
            None
        }
    };
    r.warn(format!(
        "staged: the node runs its previous machine config until its next reboot \
         (`talosctl --nodes {ip} reboot`)"
    ));
    match applied {
        Record::Config { config, yaml, .. } => Record::Config {
            host: host.to_owned(),
            config: format::NodeConfig {
                staged: Some(format::Staged { boot_time }),
                ..config
            },
            yaml,
        },
        other @ Record::Intent { .. }
        | other @ Record::Image { .. }
        | other @ Record::ImageGone(_)
        | other @ Record::Pool(_)
        | other @ Record::PoolGone(_)
        | other @ Record::Mapping { .. }
        | other @ Record::MappingGone(_)
        | other @ Record::HaRule { .. }
        | other @ Record::HaRuleGone(_)
        | other @ Record::Vm { .. }
        | other @ Record::VmGone(_)
        | other @ Record::SecureMode(_)
        | other @ Record::NotSecure(_)
        | other @ Record::StagedTaken(_)
        | other @ Record::Upgraded { .. }
        | other @ Record::Bootstrap(_)
        | other @ Record::Kubeconfig(_)
        | other @ Record::Talosconfig(_)
        | other @ Record::Object { .. }
        | other @ Record::ObjectGone(_) => other,
    }
}

/// The record of `change`'s config (`want`, the bytes `yaml`) as applied to
/// `host`, in secure mode or not yet, with no staged mark.
pub(super) fn config_record(
    host: &str,
    change: &ConfigChange<'_>,
    want: &PlannedConfig,
    yaml: &talosprov_base::sensitive::Sensitive<String>,
    secure_mode: bool,
) -> Record {
    Record::Config {
        host: host.to_owned(),
        config: format::NodeConfig {
            config_sha256: want.config_sha256.clone(),
            talos_version: want.talos_version.clone(),
            installer_image: want.installer_image.clone(),
            secure_mode,
            staged: None,
            role: Some(change.role),
            running_sha256: None,
        },
        yaml: Sensitive::new(yaml.expose().clone()),
    }
}

/// The Talos mode to send a changed config to a running node in: the plan's
/// (no-reboot, reboot, staged), sent as such, so that a node that would now
/// reboot for a change planned without one refuses it instead. When the plan
/// could not ask the node (unknown until apply), the node is asked now in a
/// dry run and the least disruptive mode it allows is sent.
async fn planned_mode(
    mode: PlanMode,
    client: &TalosClient,
    yaml: &str,
    r: &Reporter,
) -> anyhow::Result<ApplyMode> {
    match mode {
        PlanMode::Staged => {
            r.progress("staging the machine config for the next reboot");
            return Ok(ApplyMode::Staged);
        }
        PlanMode::NoReboot => {
            r.progress("applying the machine config without a reboot");
            return Ok(ApplyMode::NoReboot);
        }
        PlanMode::Reboot => {
            r.progress("applying the machine config (the node reboots for it)");
            return Ok(ApplyMode::Reboot);
        }
        PlanMode::UnknownUntilApply | PlanMode::Maintenance => {}
    }
    let dry_run = ApplyOptions {
        dry_run: true,
        ..ApplyOptions::default()
    };
    let answer = client
        .apply_configuration(yaml.as_bytes(), &dry_run)
        .await
        .context("the node refused a dry run of the machine config")?;
    Ok(if answer.mode == ApplyMode::Reboot {
        r.progress("applying the machine config (the node reboots for it)");
        ApplyMode::Reboot
    } else {
        r.progress("applying the machine config without a reboot");
        ApplyMode::NoReboot
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipconfig_gives_the_node_address() {
        assert_eq!(
            ipconfig_address("ip=192.168.1.122/24,gw=192.168.1.1"),
            Some("192.168.1.122".parse().expect("ip"))
        );
        assert_eq!(ipconfig_address("ip=dhcp"), None);
    }
}
