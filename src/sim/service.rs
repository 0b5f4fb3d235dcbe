//! The gRPC handlers of a simulated node: MachineService, and in Talos 1.13+
//! ImageService and LifecycleService. Each checks the caller's roles as apid does,
//! behaves as machined does (talos.md §1, §9), and logs the RPC it served.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use super::certs;
use super::config::{self, MachineType};
use super::server::{Peer, ServeMode};
use super::state::{Node, Phase, ServedRpc, Shared, cluster_key, minor_version};
use crate::talos::api::common::{Data, Metadata};
use crate::talos::api::machine::{self as pb, apply_configuration_request::Mode};
use crate::talos::roles;

const MACHINE: &str = "machine.MachineService";
const IMAGE: &str = "machine.ImageService";
const LIFECYCLE: &str = "machine.LifecycleService";

type Reply<T> = Result<Response<T>, Status>;

/// The handlers of one node.
#[derive(Clone)]
pub(crate) struct Api {
    shared: Arc<Shared>,
    node: Arc<Node>,
}

impl Api {
    pub fn new(shared: Arc<Shared>, node: Arc<Node>) -> Api {
        Api { shared, node }
    }

    /// apid's authorizer: the caller needs one of the roles the RPC allows. In
    /// maintenance mode every caller is a reader; ApplyConfiguration still passes
    /// because machined accepts readers while unconfigured. Talos before 1.13 did not
    /// serve secure-only RPCs in maintenance mode at all (Unimplemented).
    fn authorize<T>(&self, request: &Request<T>, service: &str, rpc: &str) -> Result<Peer, Status> {
        let peer = request
            .extensions()
            .get::<Peer>()
            .cloned()
            .ok_or_else(|| Status::internal("connection without peer information"))?;
        if peer.mode == ServeMode::Maintenance && rpc == "ApplyConfiguration" {
            return Ok(peer);
        }
        let allowed = roles::allowed_roles(&format!("/{service}/{rpc}"));
        if peer.roles.iter().any(|r| allowed.contains(r)) {
            return Ok(peer);
        }
        let old = minor_version(&self.node.lock().tag).is_some_and(|v| v < (1, 13));
        if peer.mode == ServeMode::Maintenance && old {
            return Err(Status::unimplemented(format!(
                "method {rpc} not implemented"
            )));
        }
        Err(Status::permission_denied("not authorized"))
    }

    /// Logs the RPC and records it for tests, then returns the result.
    fn done<T>(&self, rpc: &str, result: Result<T, Status>) -> Reply<T> {
        let code = result
            .as_ref()
            .map_or_else(|s| s.code(), |_| tonic::Code::Ok);
        match &result {
            Ok(_) => tracing::info!(target: "talos_sim", node = %self.node.ip, rpc, "served"),
            Err(s) => {
                tracing::info!(target: "talos_sim", node = %self.node.ip, rpc, code = ?s.code(), message = s.message(), "refused")
            }
        }
        self.node.lock().served.push(ServedRpc {
            rpc: rpc.to_string(),
            code,
        });
        result.map(Response::new)
    }

    fn config(&self) -> Result<config::NodeConfig, Status> {
        let state = self.node.lock();
        match (&state.phase, &state.config) {
            (Phase::Secure, Some(cfg)) => Ok(cfg.clone()),
            _ => Err(Status::failed_precondition(
                "the node has no machine config",
            )),
        }
    }

    fn is_member(&self, cfg: &config::NodeConfig) -> bool {
        self.shared
            .clusters()
            .get(&cluster_key(cfg))
            .is_some_and(|c| c.members.iter().any(|m| m.ip == self.node.ip))
    }

    /// Starts a reboot after the reply: the server loop closes the port at once and the
    /// in-flight reply still completes (graceful HTTP/2 shutdown).
    fn reboot_now(&self) {
        {
            let mut state = self.node.lock();
            let delay = self.shared.options.reboot_delay;
            self.node.reboot(&mut state, delay);
        }
        self.node.bump();
        self.shared.notify_changed();
    }

    fn apply(
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
        let cfg = config::load(&request.data).map_err(Status::invalid_argument)?;
        let requested = Mode::try_from(request.mode).unwrap_or(Mode::Reboot);
        if request.dry_run {
            return Ok(reply(
                requested,
                "Dry run summary:\nNode is running in maintenance mode and does not have a config yet.",
            ));
        }
        let mut state = self.node.lock();
        if peer.mode == ServeMode::Maintenance {
            // Maintenance mode rewrites REBOOT and AUTO to NO_REBOOT, then installs and
            // reboots by itself when Talos is not on disk yet.
            state.installed_image = cfg.install_image.clone().or(state.installed_image.take());
            state.installed = true;
            state.etcd_data = false;
            state.etcd_lost = false;
            state.config = Some(cfg);
            drop(state);
            self.reboot_now();
            return Ok(reply(
                Mode::NoReboot,
                "Applied configuration without a reboot",
            ));
        }
        let current = state.config.as_ref().map(|c| c.machine_type);
        if current.is_some_and(|t| t != cfg.machine_type) {
            return Err(Status::invalid_argument(
                "1 error occurred:\n\t* machine type can't be changed\n\n",
            ));
        }
        state.config = Some(cfg);
        drop(state);
        self.shared.notify_changed();
        Ok(match requested {
            Mode::Reboot => {
                self.reboot_now();
                reply(Mode::Reboot, "Applied configuration with a reboot")
            }
            Mode::Staged => reply(
                Mode::Staged,
                "Staged configuration to be applied after a reboot",
            ),
            Mode::Try => reply(Mode::Try, "Applied configuration in try mode"),
            Mode::Auto | Mode::NoReboot => {
                reply(Mode::NoReboot, "Applied configuration without a reboot")
            }
        })
    }

    fn bootstrap_etcd(&self) -> Result<pb::BootstrapResponse, Status> {
        let cfg = self.config()?;
        if cfg.machine_type != MachineType::ControlPlane {
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
        let key = cluster_key(&cfg);
        {
            let mut clusters = self.shared.clusters();
            let cluster = clusters.entry(key.clone()).or_default();
            if cluster.bootstrapped {
                return Err(Status::already_exists("etcd data directory is not empty"));
            }
            cluster.bootstrapped = true;
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
                        c.machine_type == MachineType::ControlPlane && cluster_key(c) == key
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
        Ok(pb::BootstrapResponse {
            messages: vec![pb::Bootstrap { metadata: None }],
        })
    }

    fn members(&self) -> Result<pb::EtcdMemberListResponse, Status> {
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

    fn control_plane_member(&self) -> Result<config::NodeConfig, Status> {
        let cfg = self.config()?;
        if cfg.machine_type != MachineType::ControlPlane {
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

    fn services(&self) -> pb::ServiceListResponse {
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
            if cfg.machine_type == MachineType::ControlPlane {
                list.push(service(
                    "trustd",
                    "Running",
                    Some(true),
                    "Health check successful",
                ));
                list.push(if lost {
                    service("etcd", "Failed", Some(false), "etcd member was removed from the cluster")
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

    fn stage_upgrade(&self, image: &str) -> Result<(), Status> {
        if image.is_empty() {
            return Err(Status::invalid_argument("image reference is required"));
        }
        let mut state = self.node.lock();
        if !state.installed {
            return Err(Status::failed_precondition("Talos is not installed"));
        }
        state.staged_image = Some(image.to_string());
        state.upgrades.push(image.to_string());
        Ok(())
    }
}

fn data_stream(chunks: Vec<Vec<u8>>) -> BoxStream<'static, Result<Data, Status>> {
    futures::stream::iter(chunks.into_iter().map(|bytes| {
        Ok(Data {
            metadata: None::<Metadata>,
            bytes,
        })
    }))
    .boxed()
}

#[tonic::async_trait]
impl pb::machine_service_server::MachineService for Api {
    async fn apply_configuration(
        &self,
        request: Request<pb::ApplyConfigurationRequest>,
    ) -> Reply<pb::ApplyConfigurationResponse> {
        const RPC: &str = "ApplyConfiguration";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .and_then(|peer| self.apply(&peer, request.into_inner()));
        self.done(RPC, result)
    }

    async fn bootstrap(
        &self,
        request: Request<pb::BootstrapRequest>,
    ) -> Reply<pb::BootstrapResponse> {
        const RPC: &str = "Bootstrap";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .and_then(|_| self.bootstrap_etcd());
        self.done(RPC, result)
    }

    async fn etcd_member_list(
        &self,
        request: Request<pb::EtcdMemberListRequest>,
    ) -> Reply<pb::EtcdMemberListResponse> {
        const RPC: &str = "EtcdMemberList";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .and_then(|_| self.members());
        self.done(RPC, result)
    }

    async fn etcd_remove_member_by_id(
        &self,
        request: Request<pb::EtcdRemoveMemberByIdRequest>,
    ) -> Reply<pb::EtcdRemoveMemberByIdResponse> {
        const RPC: &str = "EtcdRemoveMemberByID";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            let cfg = self.control_plane_member()?;
            let id = request.get_ref().member_id;
            let removed = {
                let mut clusters = self.shared.clusters();
                let cluster = clusters.entry(cluster_key(&cfg)).or_default();
                let member = cluster.members.iter().find(|m| m.id == id).cloned();
                if let Some(m) = &member {
                    cluster.leave(m.ip);
                }
                member.ok_or_else(|| Status::not_found(format!("etcd member {id:x} not found")))?
            };
            if let Some(node) = self.shared.nodes.iter().find(|n| n.ip == removed.ip) {
                node.lock().etcd_lost = true;
            }
            Ok(pb::EtcdRemoveMemberByIdResponse {
                messages: vec![pb::EtcdRemoveMemberById { metadata: None }],
            })
        });
        self.done(RPC, result)
    }

    async fn etcd_leave_cluster(
        &self,
        request: Request<pb::EtcdLeaveClusterRequest>,
    ) -> Reply<pb::EtcdLeaveClusterResponse> {
        const RPC: &str = "EtcdLeaveCluster";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            let cfg = self.control_plane_member()?;
            self.shared
                .clusters()
                .entry(cluster_key(&cfg))
                .or_default()
                .leave(self.node.ip);
            let mut state = self.node.lock();
            state.etcd_data = false;
            state.etcd_lost = true;
            Ok(pb::EtcdLeaveClusterResponse {
                messages: vec![pb::EtcdLeaveCluster { metadata: None }],
            })
        });
        self.done(RPC, result)
    }

    type EtcdSnapshotStream = BoxStream<'static, Result<Data, Status>>;

    async fn etcd_snapshot(
        &self,
        request: Request<pb::EtcdSnapshotRequest>,
    ) -> Reply<Self::EtcdSnapshotStream> {
        const RPC: &str = "EtcdSnapshot";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            let cfg = self.control_plane_member()?;
            // A recognisable, deterministic payload in two chunks; not a real bbolt file.
            let body =
                format!("talos-sim etcd snapshot of cluster {}\n", cfg.cluster_name).repeat(512);
            let bytes = body.into_bytes();
            let (a, b) = bytes.split_at(bytes.len() / 2);
            Ok(data_stream(vec![a.to_vec(), b.to_vec()]))
        });
        self.done(RPC, result)
    }

    type KubeconfigStream = BoxStream<'static, Result<Data, Status>>;

    async fn kubeconfig(&self, request: Request<()>) -> Reply<Self::KubeconfigStream> {
        const RPC: &str = "Kubeconfig";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            let cfg = self.config()?;
            if cfg.machine_type != MachineType::ControlPlane {
                return Err(Status::unimplemented(
                    "kubeconfig is only available on control plane nodes",
                ));
            }
            let yaml = certs::admin_kubeconfig(&cfg)
                .map_err(|e| Status::internal(format!("failed to generate kubeconfig: {e}")))?;
            let tarball = crate::talos::talos_style_tarball("kubeconfig", yaml.as_bytes())
                .map_err(|e| Status::internal(e.to_string()))?;
            Ok(data_stream(vec![tarball]))
        });
        self.done(RPC, result)
    }

    async fn reboot(&self, request: Request<pb::RebootRequest>) -> Reply<pb::RebootResponse> {
        const RPC: &str = "Reboot";
        let result = self.authorize(&request, MACHINE, RPC).map(|_| {
            self.reboot_now();
            pb::RebootResponse {
                messages: vec![pb::Reboot {
                    metadata: None,
                    actor_id: format!("reboot-{}", self.node.ip),
                }],
            }
        });
        self.done(RPC, result)
    }

    async fn reset(&self, request: Request<pb::ResetRequest>) -> Reply<pb::ResetResponse> {
        const RPC: &str = "Reset";
        let result = self.authorize(&request, MACHINE, RPC).map(|_| {
            let request = request.into_inner();
            if let Ok(cfg) = self.config()
                && request.graceful
            {
                self.shared
                    .clusters()
                    .entry(cluster_key(&cfg))
                    .or_default()
                    .leave(self.node.ip);
            }
            {
                let mut state = self.node.lock();
                state.config = None;
                state.installed = false;
                state.etcd_data = false;
                state.etcd_lost = false;
                state.staged_image = None;
                if request.reboot {
                    let delay = self.shared.options.reboot_delay;
                    self.node.reboot(&mut state, delay);
                } else {
                    state.phase = Phase::Halted;
                }
            }
            self.node.bump();
            self.shared.notify_changed();
            pb::ResetResponse {
                messages: vec![pb::Reset {
                    metadata: None,
                    actor_id: format!("reset-{}", self.node.ip),
                }],
            }
        });
        self.done(RPC, result)
    }

    async fn service_list(&self, request: Request<()>) -> Reply<pb::ServiceListResponse> {
        const RPC: &str = "ServiceList";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .map(|_| self.services());
        self.done(RPC, result)
    }

    async fn upgrade(&self, request: Request<pb::UpgradeRequest>) -> Reply<pb::UpgradeResponse> {
        const RPC: &str = "Upgrade";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            self.stage_upgrade(&request.get_ref().image)?;
            // Without `stage` Talos upgrades and then reboots by itself; with it, the
            // upgrade is written to META and applied during the reboot. Both end rebooted.
            self.reboot_now();
            Ok(pb::UpgradeResponse {
                messages: vec![pb::Upgrade {
                    metadata: None,
                    ack: "Upgrade request received".to_string(),
                    actor_id: format!("upgrade-{}", self.node.ip),
                }],
            })
        });
        self.done(RPC, result)
    }

    async fn version(&self, request: Request<()>) -> Reply<pb::VersionResponse> {
        const RPC: &str = "Version";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .map(|_| pb::VersionResponse {
                messages: vec![pb::Version {
                    metadata: None,
                    version: Some(pb::VersionInfo {
                        tag: self.node.lock().tag.clone(),
                        sha: "talos-sim".to_string(),
                        built: String::new(),
                        go_version: String::new(),
                        os: "linux".to_string(),
                        arch: "amd64".to_string(),
                    }),
                    platform: Some(pb::PlatformInfo {
                        name: "nocloud".to_string(),
                        mode: "cloud".to_string(),
                    }),
                    features: Some(pb::FeaturesInfo { rbac: true }),
                }],
            });
        self.done(RPC, result)
    }
}

#[tonic::async_trait]
impl pb::image_service_server::ImageService for Api {
    type PullStream = BoxStream<'static, Result<pb::ImageServicePullResponse, Status>>;

    async fn pull(&self, request: Request<pb::ImageServicePullRequest>) -> Reply<Self::PullStream> {
        use pb::image_service_pull_response::Response as R;
        const RPC: &str = "ImageService/Pull";
        let result = self.authorize(&request, IMAGE, "Pull").and_then(|_| {
            let image = request.get_ref().image_ref.clone();
            if image.is_empty() {
                return Err(Status::invalid_argument("image reference is required"));
            }
            let progress = pb::ImageServicePullProgress {
                layer_id: "sha256:0000".to_string(),
                progress: Some(pb::ImageServicePullLayerProgress {
                    status: pb::image_service_pull_layer_progress::Status::DownloadComplete as i32,
                    elapsed: None,
                    offset: 1,
                    total: 1,
                }),
            };
            let items = vec![
                Ok(pb::ImageServicePullResponse {
                    response: Some(R::PullProgress(progress)),
                }),
                Ok(pb::ImageServicePullResponse {
                    response: Some(R::Name(image)),
                }),
            ];
            Ok(futures::stream::iter(items).boxed())
        });
        self.done(RPC, result)
    }
}

#[tonic::async_trait]
impl pb::lifecycle_service_server::LifecycleService for Api {
    type UpgradeStream = BoxStream<'static, Result<pb::LifecycleServiceUpgradeResponse, Status>>;

    async fn upgrade(
        &self,
        request: Request<pb::LifecycleServiceUpgradeRequest>,
    ) -> Reply<Self::UpgradeStream> {
        use pb::lifecycle_service_install_progress::Response as R;
        const RPC: &str = "LifecycleService/Upgrade";
        let result = self
            .authorize(&request, LIFECYCLE, "Upgrade")
            .and_then(|_| {
                let image = request
                    .get_ref()
                    .source
                    .as_ref()
                    .map(|s| s.image_name.clone())
                    .unwrap_or_default();
                self.stage_upgrade(&image)?;
                let item = |r: R| {
                    Ok(pb::LifecycleServiceUpgradeResponse {
                        progress: Some(pb::LifecycleServiceInstallProgress { response: Some(r) }),
                    })
                };
                let items = vec![
                    item(R::Message(format!(
                        "running installer {image} in upgrade mode"
                    ))),
                    item(R::Message(
                        "upgrade written to the inactive boot entry".to_string(),
                    )),
                    item(R::ExitCode(0)),
                ];
                Ok(futures::stream::iter(items).boxed())
            });
        self.done(RPC, result)
    }
}
