//! What machined does behind each RPC of a simulated node: apply a config (install and
//! reboot from maintenance mode), bootstrap etcd once per cluster, list and change etcd
//! members, report services, stage upgrades (talos.md §1.3, §9).

use tokio::time::Instant;
use tonic::Status;

use super::immediate::can_apply_immediate;
use super::kube_store;
use super::peer::{Peer, ServeMode};
use super::service::Api;
use super::state::{Phase, RebootRecord, UpgradeRecord, cluster_key};
use crate::config;
use talosprov_base::role::Role;
use talosprov_talos::api::machine::{self as pb, apply_configuration_request::Mode};

impl Api {
    pub(super) fn config(&self) -> Result<config::NodeConfig, Status> {
        let state = self.node.lock();
        match (&state.phase, &state.config) {
            (Phase::Secure, Some(cfg)) => Ok(cfg.clone()),
            _ => Err(Status::failed_precondition(
                "the node has no machine config",
            )),
        }
    }

    pub(super) fn is_member(&self, cfg: &config::NodeConfig) -> bool {
        self.shared
            .clusters()
            .get(&cluster_key(cfg))
            .is_some_and(|c| c.members.iter().any(|m| m.ip == self.node.ip))
    }

    /// Starts a reboot after the reply: the server loop closes the port at once and the
    /// in-flight reply still completes (graceful HTTP/2 shutdown).
    pub(super) fn reboot_now(&self) {
        let cfg = self.node.lock().config.clone();
        self.shared.log_reboot(RebootRecord {
            node: self.node.ip,
            control_plane: cfg
                .as_ref()
                .is_some_and(|c| c.machine_type == Role::Controlplane),
            etcd_healthy: cfg
                .as_ref()
                .is_some_and(|c| self.shared.etcd_healthy(&cluster_key(c))),
        });
        {
            let mut state = self.node.lock();
            let delay = self.shared.options.reboot_delay;
            self.node.reboot(&mut state, delay);
        }
        self.node.bump();
        self.shared.notify_changed();
    }

    pub(super) fn apply(
        &self,
        peer: &Peer,
        request: pb::ApplyConfigurationRequest,
    ) -> Result<pb::ApplyConfigurationResponse, Status> {
        let reply = |mode: Mode, details: &str| pb::ApplyConfigurationResponse {
            messages: vec![pb::ApplyConfiguration {
                metadata: None,
                warnings: Vec::new(),
                mode: mode as i32,
                mode_details: details.to_string(),
            }],
        };
        if let Some((code, message)) = self.node.lock().faults.fail_next_apply.take() {
            return Err(Status::new(code, message));
        }
        if !request.dry_run {
            let faults = &mut self.node.lock().faults;
            if let Some((n, code, message)) = faults.fail_apply_at.take() {
                if n <= 1 {
                    return Err(Status::new(code, message));
                }
                faults.fail_apply_at = Some((n - 1, code, message));
            }
        }
        // Talos's decoder refuses an unknown document kind before anything is validated.
        let tag = self.node.lock().tag.clone();
        config::check_kinds(&request.data, &tag).map_err(Status::invalid_argument)?;
        let cfg = config::load(&request.data).map_err(Status::invalid_argument)?;
        let requested = Mode::try_from(request.mode).unwrap_or(Mode::Reboot);
        let mut state = self.node.lock();
        // A running node resolves AUTO by whether the change applies at once
        // (Talos's CanApplyImmediate); NO_REBOOT is refused when it does not.
        let immediate = state
            .config
            .as_ref()
            .is_none_or(|c| can_apply_immediate(&c.raw, &cfg.raw));
        let resolved = match requested {
            Mode::Auto if immediate => Mode::NoReboot,
            Mode::Auto => Mode::Reboot,
            m => m,
        };
        if request.dry_run {
            drop(state);
            if peer.mode == ServeMode::Maintenance {
                return Ok(reply(
                    requested,
                    "Dry run summary:\nNode is running in maintenance mode and does not have a config yet.",
                ));
            }
            return Ok(reply(
                resolved,
                &format!(
                    "Dry run summary:\n{} (skipped in dry-run).",
                    mode_details(resolved)
                ),
            ));
        }
        if peer.mode == ServeMode::Maintenance {
            // Maintenance mode rewrites REBOOT and AUTO to NO_REBOOT, then installs and
            // reboots by itself when Talos is not on disk yet.
            state.installed_image = cfg.install_image.clone().or(state.installed_image.take());
            state.installed = true;
            state.etcd_data = false;
            state.etcd_lost = false;
            state.persisted = Some(cfg.clone());
            state.config = Some(cfg);
            drop(state);
            self.reboot_now();
            return Ok(reply(Mode::NoReboot, mode_details(Mode::NoReboot)));
        }
        let current = state.config.as_ref().map(|c| c.machine_type);
        if current.is_some_and(|t| t != cfg.machine_type) {
            return Err(Status::invalid_argument(
                "1 error occurred:\n\t* machine type can't be changed\n\n",
            ));
        }
        // TRY goes the NO_REBOOT way in machined, refusals included.
        if matches!(requested, Mode::NoReboot | Mode::Try) && !immediate {
            return Err(Status::invalid_argument(
                "configuration cannot be applied without a reboot",
            ));
        }
        // As machined does: NO_REBOOT writes the config to the STATE partition and
        // runs it; STAGED and REBOOT only write it, so the node runs it from its next
        // boot (REBOOT starts that boot); TRY runs it without writing it.
        match resolved {
            Mode::Staged | Mode::Reboot => state.persisted = Some(cfg),
            Mode::Try => state.config = Some(cfg),
            Mode::Auto | Mode::NoReboot => {
                state.persisted = Some(cfg.clone());
                state.config = Some(cfg);
            }
        }
        drop(state);
        self.shared.notify_changed();
        if resolved == Mode::Reboot {
            self.reboot_now();
        }
        Ok(reply(resolved, mode_details(resolved)))
    }

    /// When the node booted, in seconds since the Unix epoch, as SystemStat
    /// reports it; it moves forward at every boot.
    pub(super) fn system_stat(&self) -> pb::SystemStatResponse {
        pb::SystemStatResponse {
            messages: vec![pb::SystemStat {
                metadata: None,
                boot_time: self.node.lock().boot_time,
            }],
        }
    }

    /// Bootstrap: etcd starts on this control plane, every control plane of the cluster
    /// that is up joins it, and the Kubernetes API starts. With `recover_etcd` the
    /// cluster's store starts as the uploaded snapshot's (see
    /// [`Api::recovered_store`]) and the upload is consumed, as Talos deletes
    /// `/var/lib/etcd.snapshot` once etcd restored it.
    pub(super) fn bootstrap_etcd(
        &self,
        request: &pb::BootstrapRequest,
    ) -> Result<pb::BootstrapResponse, Status> {
        let cfg = self.config()?;
        if cfg.machine_type != Role::Controlplane {
            return Err(Status::unimplemented(
                "bootstrap is only available on control plane nodes",
            ));
        }
        {
            let state = self.node.lock();
            if Instant::now() < state.services_ready_at {
                return Err(Status::failed_precondition(
                    "bootstrap is not available yet",
                ));
            }
            if state.etcd_data {
                return Err(Status::already_exists("etcd data directory is not empty"));
            }
        }
        let recovered = self.recovered_store(request)?;
        let recovering = recovered.is_some();
        let key = cluster_key(&cfg);
        {
            let mut clusters = self.shared.clusters();
            let cluster = clusters.entry(key.clone()).or_default();
            if cluster.bootstrapped {
                return Err(Status::already_exists("etcd data directory is not empty"));
            }
            cluster.bootstrapped = true;
            if let Some(store) = recovered {
                cluster.store = store;
            }
        }
        if recovering {
            self.node.lock().etcd_upload = None;
        }
        // This node starts etcd; every control plane that is up and waiting joins it.
        let mut joining = vec![self.node.clone()];
        joining.extend(
            self.shared
                .nodes
                .iter()
                .filter(|n| n.ip != self.node.ip)
                .cloned(),
        );
        for node in joining {
            let hostname = {
                let state = node.lock();
                let eligible = state.phase == Phase::Secure
                    && !state.etcd_lost
                    && state.config.as_ref().is_some_and(|c| {
                        c.machine_type == Role::Controlplane && cluster_key(c) == key
                    });
                if !eligible {
                    continue;
                }
                node.hostname(&state)
            };
            self.shared
                .clusters()
                .entry(key.clone())
                .or_default()
                .join(node.ip, hostname);
            self.shared.after_join(&node, &key);
        }
        // Talos then starts the control plane, which applies the inline manifests.
        tokio::spawn(super::kube::start(self.shared.clone(), cfg, recovering));
        Ok(pb::BootstrapResponse {
            messages: vec![pb::Bootstrap { metadata: None }],
        })
    }

    /// For a Bootstrap with `recover_etcd`: the store the uploaded snapshot holds, after
    /// checking its trailing SHA-256 unless `recover_skip_hash_check`; `None` for a
    /// plain bootstrap. Nothing changes when it fails.
    ///
    /// Errors: FailedPrecondition "error finding etcd snapshot" without an upload (as
    /// Talos's Bootstrap answers when `/var/lib/etcd.snapshot` is missing); Internal
    /// "failed to recover etcd from snapshot: ..." when the hash does not match or the
    /// snapshot does not parse. Talos accepts that Bootstrap and its etcd service then
    /// fails restoring the snapshot (etcdutl's "snapshot file integrity check failed"
    /// / "expected sha256"); the simulator answers at once, and with Internal rather
    /// than FailedPrecondition because retrying does not help: another snapshot must
    /// be uploaded.
    pub(super) fn recovered_store(
        &self,
        request: &pb::BootstrapRequest,
    ) -> Result<Option<kube_store::Store>, Status> {
        if !request.recover_etcd {
            return Ok(None);
        }
        let upload = self.node.lock().etcd_upload.clone().ok_or_else(|| {
            Status::failed_precondition(
                "error finding etcd snapshot: stat /var/lib/etcd.snapshot: no such file or directory",
            )
        })?;
        let failed =
            |e: String| Status::internal(format!("failed to recover etcd from snapshot: {e}"));
        if !request.recover_skip_hash_check {
            kube_store::snapshot::check_snapshot_hash(&upload).map_err(failed)?;
        }
        kube_store::Store::from_snapshot(&upload)
            .map(Some)
            .map_err(failed)
    }

    /// EtcdRecover's preconditions, before the upload is read: a control plane (Talos:
    /// Unimplemented "etcd recover is only available on control plane nodes") whose
    /// services started and whose etcd is not running: the cluster is not
    /// bootstrapped and the node holds no etcd data (FailedPrecondition).
    pub(super) fn check_recover(&self) -> Result<(), Status> {
        let cfg = self.config()?;
        if cfg.machine_type != Role::Controlplane {
            return Err(Status::unimplemented(
                "etcd recover is only available on control plane nodes",
            ));
        }
        let (ready, data) = {
            let state = self.node.lock();
            (Instant::now() >= state.services_ready_at, state.etcd_data)
        };
        if !ready {
            return Err(Status::failed_precondition(
                "etcd service is not ready for recovery yet",
            ));
        }
        let bootstrapped = self
            .shared
            .clusters()
            .get(&cluster_key(&cfg))
            .is_some_and(|c| c.bootstrapped);
        if data || bootstrapped || self.is_member(&cfg) {
            return Err(Status::failed_precondition(
                "etcd is already running: recovery is only available on control plane nodes waiting for bootstrap",
            ));
        }
        Ok(())
    }

    pub(super) fn members(&self) -> Result<pb::EtcdMemberListResponse, Status> {
        let cfg = self
            .config()
            .map_err(|_| Status::failed_precondition("etcd is not running in maintenance mode"))?;
        let clusters = self.shared.clusters();
        let cluster = clusters
            .get(&cluster_key(&cfg))
            .filter(|c| c.bootstrapped)
            .ok_or_else(|| {
                Status::failed_precondition(
                    "etcd is not running yet: the cluster is not bootstrapped",
                )
            })?;
        let members = cluster
            .members
            .iter()
            .map(|m| pb::EtcdMember {
                id: m.id,
                hostname: m.hostname.clone(),
                peer_urls: vec![format!("https://{}:2380", m.ip)],
                client_urls: vec![format!("https://{}:2379", m.ip)],
                is_learner: false,
            })
            .collect();
        Ok(pb::EtcdMemberListResponse {
            messages: vec![pb::EtcdMembers {
                metadata: None,
                legacy_members: Vec::new(),
                members,
            }],
        })
    }

    pub(super) fn control_plane_member(&self) -> Result<config::NodeConfig, Status> {
        let cfg = self.config()?;
        if cfg.machine_type != Role::Controlplane {
            return Err(Status::unimplemented(
                "etcd is only available on control plane nodes",
            ));
        }
        if !self.is_member(&cfg) {
            return Err(Status::failed_precondition(
                "etcd is not running on this node",
            ));
        }
        Ok(cfg)
    }

    pub(super) fn services(&self) -> pb::ServiceListResponse {
        let (phase, cfg, ready, lost) = {
            let state = self.node.lock();
            (
                state.phase,
                state.config.clone(),
                Instant::now() >= state.services_ready_at,
                state.etcd_lost,
            )
        };
        let service =
            |id: &str, state: &str, healthy: Option<bool>, message: &str| pb::ServiceInfo {
                id: id.to_string(),
                state: state.to_string(),
                events: Some(pb::ServiceEvents {
                    events: vec![pb::ServiceEvent {
                        msg: message.to_string(),
                        state: state.to_string(),
                        ts: None,
                    }],
                }),
                health: Some(pb::ServiceHealth {
                    unknown: healthy.is_none(),
                    healthy: healthy.unwrap_or(false),
                    last_message: message.to_string(),
                    last_change: None,
                }),
            };
        let mut list = vec![
            service("apid", "Running", Some(true), "Health check successful"),
            service("machined", "Running", Some(true), "Health check successful"),
        ];
        if let (Phase::Secure, Some(cfg)) = (phase, cfg) {
            let waiting = "Waiting for volume EPHEMERAL to be mounted";
            list.push(if ready {
                service("cri", "Running", Some(true), "Health check successful")
            } else {
                service("cri", "Waiting", None, waiting)
            });
            if cfg.machine_type == Role::Controlplane {
                list.push(service(
                    "trustd",
                    "Running",
                    Some(true),
                    "Health check successful",
                ));
                // After a boot etcd waits for CRI like every other service, member or not.
                list.push(if lost {
                    service("etcd", "Failed", Some(false), "etcd member was removed from the cluster")
                } else if !ready {
                    service("etcd", "Waiting", None, "Waiting for service \"cri\" to be \"up\"")
                } else if self.is_member(&cfg) {
                    service("etcd", "Running", Some(true), "Health check successful")
                } else if ready {
                    service("etcd", "Preparing", None, "etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap`")
                } else {
                    service("etcd", "Waiting", None, "Waiting for service \"cri\" to be \"up\"")
                });
            }
            list.push(if ready {
                service("kubelet", "Running", Some(true), "Health check successful")
            } else {
                service(
                    "kubelet",
                    "Waiting",
                    None,
                    "Waiting for service \"cri\" to be \"up\"",
                )
            });
        }
        pb::ServiceListResponse {
            messages: vec![pb::ServiceList {
                metadata: None,
                services: list,
            }],
        }
    }

    pub(super) fn stage_upgrade(&self, image: &str) -> Result<(), Status> {
        if image.is_empty() {
            return Err(Status::invalid_argument("image reference is required"));
        }
        let mut state = self.node.lock();
        if !state.installed {
            return Err(Status::failed_precondition("Talos is not installed"));
        }
        state.staged_image = Some(image.to_string());
        state.upgrades.push(image.to_string());
        let cfg = state.config.clone();
        drop(state);
        let (control_plane, etcd_healthy) = match &cfg {
            Some(cfg) => (
                cfg.machine_type == Role::Controlplane,
                self.shared.etcd_healthy(&cluster_key(cfg)),
            ),
            None => (false, false),
        };
        self.shared.log_upgrade(UpgradeRecord {
            node: self.node.ip,
            image: image.to_string(),
            control_plane,
            etcd_healthy,
        });
        Ok(())
    }

    /// Takes the fail-next-upgrade fault, when set.
    pub(super) fn take_upgrade_fault(&self) -> Option<String> {
        self.node.lock().faults.fail_next_upgrade.take()
    }
}

/// ApplyConfiguration's `mode_details` for the mode the node used, in machined's
/// words (v1alpha1_server.go, Talos 1.13).
fn mode_details(mode: Mode) -> &'static str {
    match mode {
        Mode::Reboot => "Applied configuration with a reboot",
        Mode::Staged => "Staged configuration to be applied after the next reboot",
        Mode::Try => "Applied configuration in try mode",
        Mode::Auto | Mode::NoReboot => "Applied configuration without a reboot",
    }
}
