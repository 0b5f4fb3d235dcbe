//! The gRPC handlers of a simulated node: MachineService, and in Talos 1.13+
//! ImageService and LifecycleService. Each checks the caller's roles as apid does,
//! runs the machined behaviour (`machined.rs`), and logs the RPC it served.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tonic::{Request, Response, Status};

use super::certs;
use super::peer::{Peer, ServeMode};
use super::state::{LoggedRpc, Node, Phase, ServedRpc, Shared, cluster_key, minor_version};
use talosprov_base::role::Role;
use talosprov_talos::api::common::{Data, Metadata};
use talosprov_talos::api::machine as pb;
use talosprov_talos::roles;

const MACHINE: &str = "machine.MachineService";
const IMAGE: &str = "machine.ImageService";
const LIFECYCLE: &str = "machine.LifecycleService";

type Reply<T> = Result<Response<T>, Status>;

/// The handlers of one node.
#[derive(Clone)]
pub(crate) struct Api {
    pub(super) shared: Arc<Shared>,
    pub(super) node: Arc<Node>,
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
        self.shared.log_rpc(LoggedRpc {
            node: self.node.ip,
            rpc: rpc.to_string(),
            code,
        });
        result.map(Response::new)
    }
}

/// The largest chunk of an EtcdSnapshot stream, in bytes (1 MiB, as Talos's chunker).
const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// The largest etcd snapshot EtcdRecover keeps, in bytes (256 MiB); beyond,
/// ResourceExhausted.
const MAX_RECOVER_BYTES: usize = 256 << 20;

impl Api {
    /// Reads an EtcdRecover upload and keeps it on the node, replacing an earlier one.
    /// As Talos truncates `/var/lib/etcd.snapshot` when the upload starts and removes it
    /// when the upload fails, a failed upload leaves no snapshot.
    ///
    /// Errors: the stream's status; ResourceExhausted beyond [`MAX_RECOVER_BYTES`].
    async fn receive_snapshot(
        &self,
        mut stream: tonic::Streaming<Data>,
    ) -> Result<pb::EtcdRecoverResponse, Status> {
        self.node.lock().etcd_upload = None;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await? {
            if bytes.len() + chunk.bytes.len() > MAX_RECOVER_BYTES {
                return Err(Status::resource_exhausted(format!(
                    "error writing snapshot: the etcd snapshot is larger than {} MiB",
                    MAX_RECOVER_BYTES >> 20
                )));
            }
            bytes.extend_from_slice(&chunk.bytes);
        }
        tracing::info!(target: "talos_sim", node = %self.node.ip, bytes = bytes.len(), "etcd snapshot uploaded for recovery");
        self.node.lock().etcd_upload = Some(Arc::new(bytes));
        Ok(pb::EtcdRecoverResponse {
            messages: vec![pb::EtcdRecover { metadata: None }],
        })
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
            .and_then(|_| self.bootstrap_etcd(request.get_ref()));
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
            // The cluster's store as a snapshot (see `kube_store`'s snapshot layout),
            // its padding generated chunk by chunk as the stream is read.
            let chunks = {
                let clusters = self.shared.clusters();
                let cluster = clusters.get(&cluster_key(&cfg)).ok_or_else(|| {
                    Status::failed_precondition("etcd is not running on this node")
                })?;
                cluster
                    .store
                    .snapshot_chunks(cluster.snapshot_padding, SNAPSHOT_CHUNK_BYTES)
            };
            let delay = self.node.lock().faults.snapshot_chunk_delay;
            let stream = futures::stream::iter(chunks).then(move |bytes| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok(Data {
                    metadata: None,
                    bytes,
                })
            });
            Ok(stream.boxed())
        });
        self.done(RPC, result)
    }

    async fn etcd_recover(
        &self,
        request: Request<tonic::Streaming<Data>>,
    ) -> Reply<pb::EtcdRecoverResponse> {
        const RPC: &str = "EtcdRecover";
        let result = match self
            .authorize(&request, MACHINE, RPC)
            .and_then(|_| self.check_recover())
        {
            Ok(()) => self.receive_snapshot(request.into_inner()).await,
            Err(status) => Err(status),
        };
        self.done(RPC, result)
    }

    type KubeconfigStream = BoxStream<'static, Result<Data, Status>>;

    async fn kubeconfig(&self, request: Request<()>) -> Reply<Self::KubeconfigStream> {
        const RPC: &str = "Kubeconfig";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            let cfg = self.config()?;
            if cfg.machine_type != Role::Controlplane {
                return Err(Status::unimplemented(
                    "kubeconfig is only available on control plane nodes",
                ));
            }
            let yaml = certs::admin_kubeconfig(&cfg)
                .map_err(|e| Status::internal(format!("failed to generate kubeconfig: {e}")))?;
            let tarball =
                talosprov_talos::kubeconfig::talos_style_tarball("kubeconfig", yaml.as_bytes())
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
        let fault = self.node.lock().faults.fail_next_reset.take();
        let result = self
            .authorize(&request, MACHINE, RPC)
            .and_then(|peer| match fault {
                Some(message) => Err(Status::internal(message)),
                None => Ok(peer),
            });
        let result = result.map(|_| {
            let request = request.into_inner();
            let key = self.node.lock().config.as_ref().map(cluster_key);
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
                state.persisted = None;
                state.installed = false;
                state.etcd_data = false;
                state.etcd_lost = false;
                state.etcd_upload = None;
                state.staged_image = None;
                state.registered_at = None;
                if request.reboot {
                    let delay = self.shared.options.reboot_delay;
                    self.node.reboot(&mut state, delay);
                } else {
                    state.phase = Phase::Halted;
                }
            }
            self.node.bump();
            self.shared.notify_changed();
            // Resetting the last control plane holding etcd data loses etcd.
            if let Some(key) = key {
                self.shared.forget_etcd_if_gone(&key);
            }
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

    async fn system_stat(&self, request: Request<()>) -> Reply<pb::SystemStatResponse> {
        const RPC: &str = "SystemStat";
        let result = self
            .authorize(&request, MACHINE, RPC)
            .map(|_| self.system_stat());
        self.done(RPC, result)
    }

    async fn upgrade(&self, request: Request<pb::UpgradeRequest>) -> Reply<pb::UpgradeResponse> {
        const RPC: &str = "Upgrade";
        let result = self.authorize(&request, MACHINE, RPC).and_then(|_| {
            if let Some(message) = self.take_upgrade_fault() {
                return Err(Status::internal(message));
            }
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
                let item = |r: R| {
                    Ok(pb::LifecycleServiceUpgradeResponse {
                        progress: Some(pb::LifecycleServiceInstallProgress { response: Some(r) }),
                    })
                };
                if let Some(message) = self.take_upgrade_fault() {
                    // The installer's failure travels in the stream, not as a gRPC error.
                    let items = vec![
                        item(R::Message(format!(
                            "running installer {image} in upgrade mode"
                        ))),
                        item(R::Message(message)),
                        item(R::ExitCode(1)),
                    ];
                    return Ok(futures::stream::iter(items).boxed());
                }
                self.stage_upgrade(&image)?;
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

const COSI_STATE: &str = "cosi.resource.State";

#[tonic::async_trait]
impl talosprov_talos::api::cosi::resource::state_server::State for Api {
    /// machined's resource API, for the one resource the simulator keeps: the machine
    /// config (`MachineConfigs.config.talos.dev`, `v1alpha1` the active one, `persistent`
    /// the one the next boot loads), its spec the config byte for byte as it was applied.
    /// The resource is sensitive, so only `os:admin` reads it, as machined filters it.
    async fn get(
        &self,
        request: Request<talosprov_talos::api::cosi::resource::GetRequest>,
    ) -> Reply<talosprov_talos::api::cosi::resource::GetResponse> {
        use prost::Message as _;
        use talosprov_talos::api::cosi::resource as cosi;
        const RPC: &str = "Get";
        let result = self.authorize(&request, COSI_STATE, RPC).and_then(|_| {
            let r = request.get_ref();
            if r.namespace != talosprov_talos::calls::CONFIG_NAMESPACE
                || r.r#type != talosprov_talos::calls::MACHINE_CONFIG_TYPE
            {
                return Err(Status::not_found(format!(
                    "resource {}({}/{}) doesn't exist",
                    r.r#type, r.namespace, r.id
                )));
            }
            let state = self.node.lock();
            let config = match r.id.as_str() {
                talosprov_talos::calls::ACTIVE_CONFIG_ID => state.config.as_ref(),
                "persistent" => state.persisted.as_ref(),
                _ => None,
            };
            let Some(config) = config else {
                return Err(Status::not_found(format!(
                    "resource {}({}/{}@undefined) doesn't exist",
                    r.r#type, r.namespace, r.id
                )));
            };
            let spec = talosprov_talos::api::resource::config::MachineConfigSpec {
                yaml_marshalled: config.raw.clone(),
            };
            Ok(cosi::GetResponse {
                resource: Some(cosi::Resource {
                    metadata: Some(cosi::Metadata {
                        namespace: r.namespace.clone(),
                        r#type: r.r#type.clone(),
                        id: r.id.clone(),
                        version: "1".to_owned(),
                        owner: "config.MachineConfigController".to_owned(),
                        phase: "running".to_owned(),
                        ..cosi::Metadata::default()
                    }),
                    spec: Some(cosi::Spec {
                        proto_spec: spec.encode_to_vec(),
                        yaml_spec: String::new(),
                    }),
                }),
            })
        });
        self.done(RPC, result)
    }
}
