//! Typed methods for each Talos RPC talosprov uses, on [`TalosClient`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::api::common::{ContainerDriver, ContainerdInstance, ContainerdNamespace, Metadata};
use super::api::machine::image_service_client::ImageServiceClient;
use super::api::machine::lifecycle_service_client::LifecycleServiceClient;
use super::api::machine::machine_service_client::MachineServiceClient;
use super::api::machine::{self as pb, apply_configuration_request::Mode};
use super::client::{MAX_MESSAGE_BYTES, TalosClient};
use super::error::TalosError;
use super::kubeconfig::extract_kubeconfig;
use super::types::*;

const MACHINE: &str = "machine.MachineService";
const COSI_STATE: &str = "cosi.resource.State";

/// machined's resource holding the machine config (Talos `config.MachineConfigType`), in
/// the `config` namespace; `v1alpha1` is the active one (`config.ActiveID`).
pub const MACHINE_CONFIG_TYPE: &str = "MachineConfigs.config.talos.dev";
/// The namespace of [`MACHINE_CONFIG_TYPE`].
pub const CONFIG_NAMESPACE: &str = "config";
/// The ID of the machine config the node runs.
pub const ACTIVE_CONFIG_ID: &str = "v1alpha1";
const IMAGE: &str = "machine.ImageService";
const LIFECYCLE: &str = "machine.LifecycleService";

/// The largest `common.Data` chunk [`TalosClient::etcd_recover`] sends, in bytes
/// (1 MiB, as talosctl's chunker reads).
pub const ETCD_RECOVER_CHUNK_BYTES: usize = 1 << 20;

impl TalosClient {
    fn machine(&self) -> MachineServiceClient<tonic::transport::Channel> {
        MachineServiceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn err(&self, rpc: &'static str, status: tonic::Status) -> TalosError {
        self.status_error(MACHINE, rpc, status)
    }

    /// A per-node error carried in reply metadata (one-to-many replies) as an error.
    fn check_metadata(&self, rpc: &'static str, md: Option<&Metadata>) -> Result<(), TalosError> {
        match md {
            Some(md) if !md.error.is_empty() => {
                let code = md
                    .status
                    .as_ref()
                    .map(|s| tonic::Code::from_i32(s.code))
                    .unwrap_or(tonic::Code::Unknown);
                Err(self.err(rpc, tonic::Status::new(code, md.error.clone())))
            }
            _ => Ok(()),
        }
    }

    /// Sends a machine config (YAML, several documents allowed) with ApplyConfiguration.
    ///
    /// In maintenance mode the node always answers with mode NoReboot and then installs
    /// and reboots by itself when Talos is not installed yet.
    /// Errors: [`TalosError::InvalidConfig`] with the node's message when the node
    /// rejects the config; [`TalosError::NotReady`] while another apply runs.
    pub async fn apply_configuration(
        &self,
        config: &[u8],
        options: &ApplyOptions,
    ) -> Result<ApplyOutcome, TalosError> {
        const RPC: &str = "ApplyConfiguration";
        let request = pb::ApplyConfigurationRequest {
            data: config.to_vec(),
            mode: mode_to_proto(options.mode) as i32,
            dry_run: options.dry_run,
            try_mode_timeout: options.try_mode_timeout.map(|d| prost_types::Duration {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
        };
        let reply = self
            .machine()
            .apply_configuration(request)
            .await
            .map_err(|s| match self.err(RPC, s) {
                // Name the node by the hostname it was given when the caller did not.
                TalosError::InvalidConfig { mut node, message } => {
                    if node.hostname.is_none() {
                        node.hostname = hostname_in_config(config);
                    }
                    TalosError::InvalidConfig { node, message }
                }
                other => other,
            })?
            .into_inner();
        let message = reply.messages.into_iter().next().unwrap_or_default();
        self.check_metadata(RPC, message.metadata.as_ref())?;
        Ok(ApplyOutcome {
            mode: mode_from_proto(message.mode),
            warnings: message.warnings,
            mode_details: message.mode_details,
        })
    }

    /// Bootstraps etcd on this control-plane node.
    ///
    /// AlreadyExists ("etcd data directory is not empty") counts as success when etcd
    /// reports members and this node's etcd service is healthy; otherwise it is an error.
    /// Errors: [`TalosError::NotReady`] (retry), [`TalosError::MaintenanceMode`].
    pub async fn bootstrap(&self) -> Result<BootstrapOutcome, TalosError> {
        const RPC: &str = "Bootstrap";
        match self
            .machine()
            .bootstrap(pb::BootstrapRequest::default())
            .await
        {
            Ok(reply) => {
                let reply = reply.into_inner();
                if let Some(m) = reply.messages.first() {
                    self.check_metadata(RPC, m.metadata.as_ref())?;
                }
                Ok(BootstrapOutcome::Bootstrapped)
            }
            Err(status) if status.code() == tonic::Code::AlreadyExists => {
                let members = self.etcd_member_list().await?;
                let etcd_healthy = self
                    .service_list()
                    .await?
                    .iter()
                    .any(|s| s.id == "etcd" && s.state == "Running" && s.healthy == Some(true));
                if members.is_empty() || !etcd_healthy {
                    return Err(self.err(RPC, status));
                }
                Ok(BootstrapOutcome::AlreadyBootstrapped { members })
            }
            Err(status) => Err(self.err(RPC, status)),
        }
    }

    /// Fetches the admin kubeconfig: joins the streamed chunks, gunzips them and reads
    /// the first tar entry (Talos leaves out the end-of-archive blocks).
    ///
    /// Errors: Unimplemented on a worker ([`TalosError::Rpc`]); [`TalosError::Kubeconfig`].
    pub async fn kubeconfig(&self) -> Result<Kubeconfig, TalosError> {
        const RPC: &str = "Kubeconfig";
        let mut stream = self
            .machine()
            .kubeconfig(())
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let mut tarball = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|s| self.err(RPC, s))?;
            self.check_metadata(RPC, chunk.metadata.as_ref())?;
            tarball.extend_from_slice(&chunk.bytes);
        }
        extract_kubeconfig(&tarball)
            .map(Kubeconfig::new)
            .map_err(|e| TalosError::Kubeconfig {
                node: self.node.clone(),
                reason: e.to_string(),
            })
    }

    /// The machine config the node runs: machined's [`MACHINE_CONFIG_TYPE`] resource
    /// [`ACTIVE_CONFIG_ID`], read with the COSI `State.Get` RPC as `talosctl get
    /// machineconfig` does. Its spec (`resource.config.MachineConfigSpec`) keeps the config
    /// byte for byte as it was submitted, so its digest is the applied config's. `None`
    /// when the node has no active config (NotFound). Needs the `os:admin` role: the
    /// resource is sensitive.
    ///
    /// Errors: the RPC's ([`TalosError::PermissionDenied`] below `os:admin`), or
    /// [`TalosError::Rpc`] when the answer holds no spec.
    pub async fn running_config(&self) -> Result<Option<RunningConfig>, TalosError> {
        use super::api::cosi::resource as cosi;
        use prost::Message as _;
        const RPC: &str = "Get";
        let mut client = cosi::state_client::StateClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let request = cosi::GetRequest {
            namespace: CONFIG_NAMESPACE.to_owned(),
            r#type: MACHINE_CONFIG_TYPE.to_owned(),
            id: ACTIVE_CONFIG_ID.to_owned(),
            options: Some(cosi::GetOptions {}),
        };
        let reply = match client.get(request).await {
            Ok(r) => r.into_inner(),
            Err(status) if status.code() == tonic::Code::NotFound => return Ok(None),
            Err(status) => return Err(self.status_error(COSI_STATE, RPC, status)),
        };
        let spec = reply
            .resource
            .and_then(|r| r.spec)
            .filter(|s| !s.proto_spec.is_empty())
            .ok_or_else(|| {
                self.status_error(
                    COSI_STATE,
                    RPC,
                    tonic::Status::internal("the MachineConfig resource came without a spec"),
                )
            })?;
        let decoded =
            super::api::resource::config::MachineConfigSpec::decode(spec.proto_spec.as_slice())
                .map_err(|e| {
                    self.status_error(
                        COSI_STATE,
                        RPC,
                        tonic::Status::internal(format!(
                            "the MachineConfig spec does not decode: {e}"
                        )),
                    )
                })?;
        Ok(Some(RunningConfig::new(decoded.yaml_marshalled)))
    }

    /// The node's Talos version and platform.
    pub async fn version(&self) -> Result<NodeVersion, TalosError> {
        const RPC: &str = "Version";
        let reply = self
            .machine()
            .version(())
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let message = reply.messages.into_iter().next().unwrap_or_default();
        self.check_metadata(RPC, message.metadata.as_ref())?;
        let version = message.version.unwrap_or_default();
        let platform = message.platform.unwrap_or_default();
        Ok(NodeVersion {
            tag: version.tag,
            sha: version.sha,
            arch: version.arch,
            platform: platform.name,
            platform_mode: platform.mode,
        })
    }

    /// etcd members as this node sees them.
    pub async fn etcd_member_list(&self) -> Result<Vec<EtcdMember>, TalosError> {
        const RPC: &str = "EtcdMemberList";
        let reply = self
            .machine()
            .etcd_member_list(pb::EtcdMemberListRequest { query_local: false })
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let message = reply.messages.into_iter().next().unwrap_or_default();
        self.check_metadata(RPC, message.metadata.as_ref())?;
        Ok(message
            .members
            .into_iter()
            .map(|m| EtcdMember {
                id: m.id,
                hostname: m.hostname,
                peer_urls: m.peer_urls,
                client_urls: m.client_urls,
                is_learner: m.is_learner,
            })
            .collect())
    }

    /// Makes this node leave etcd (call it on the node that is leaving).
    pub async fn etcd_leave_cluster(&self) -> Result<(), TalosError> {
        const RPC: &str = "EtcdLeaveCluster";
        self.machine()
            .etcd_leave_cluster(pb::EtcdLeaveClusterRequest {})
            .await
            .map_err(|s| self.err(RPC, s))?;
        Ok(())
    }

    /// Removes the etcd member `member_id` (for members whose node is gone).
    pub async fn etcd_remove_member_by_id(&self, member_id: u64) -> Result<(), TalosError> {
        const RPC: &str = "EtcdRemoveMemberByID";
        self.machine()
            .etcd_remove_member_by_id(pb::EtcdRemoveMemberByIdRequest { member_id })
            .await
            .map_err(|s| self.err(RPC, s))?;
        Ok(())
    }

    /// Streams an etcd snapshot into `out`; returns the number of bytes written.
    pub async fn etcd_snapshot(
        &self,
        out: &mut (impl AsyncWrite + Unpin),
    ) -> Result<u64, TalosError> {
        const RPC: &str = "EtcdSnapshot";
        let mut stream = self
            .machine()
            .etcd_snapshot(pb::EtcdSnapshotRequest {})
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|s| self.err(RPC, s))?;
            self.check_metadata(RPC, chunk.metadata.as_ref())?;
            out.write_all(&chunk.bytes)
                .await
                .map_err(|e| TalosError::Rpc {
                    node: self.node.clone(),
                    rpc: RPC,
                    code: tonic::Code::Internal,
                    message: format!("writing the snapshot: {e}"),
                })?;
            written += chunk.bytes.len() as u64;
        }
        Ok(written)
    }

    /// Uploads an etcd snapshot for recovery (`talosctl etcd recover` / MachineService
    /// EtcdRecover): `snapshot` is read one chunk of at most
    /// [`ETCD_RECOVER_CHUNK_BYTES`] at a time and sent as a client stream of
    /// `common.Data`, so memory stays bounded whatever the snapshot's size. The node
    /// keeps the upload (Talos: `/var/lib/etcd.snapshot`) for a later
    /// [`TalosClient::bootstrap_recover`]; a later upload replaces it. Returns the number
    /// of bytes sent.
    ///
    /// Talos accepts it on a control plane whose etcd is waiting for bootstrap.
    /// Errors: the RPC's ([`TalosError::NotReady`] when etcd is already running or not
    /// ready for recovery, Unimplemented on a worker as [`TalosError::Rpc`]); an I/O
    /// error reading `snapshot` is a [`TalosError::Rpc`] (code Internal) whose message
    /// starts with "reading the snapshot", and cancels the upload so the node does
    /// not keep a truncated snapshot.
    pub async fn etcd_recover<R>(&self, snapshot: R) -> Result<u64, TalosError>
    where
        R: AsyncRead + Send + Unpin + 'static,
    {
        const RPC: &str = "EtcdRecover";
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<std::io::Error>();
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let chunks = futures::stream::unfold(
            (snapshot, Some(failed_tx)),
            move |(mut reader, mut failed_tx)| {
                let counter = counter.clone();
                async move {
                    match read_chunk(&mut reader).await {
                        Ok(bytes) if bytes.is_empty() => None,
                        Ok(bytes) => {
                            counter.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                            let chunk = super::api::common::Data {
                                metadata: None,
                                bytes,
                            };
                            Some((chunk, (reader, failed_tx)))
                        }
                        Err(e) => {
                            if let Some(tx) = failed_tx.take() {
                                let _ = tx.send(e);
                            }
                            // Never end the stream: the call is dropped (and the
                            // upload cancelled) rather than completed truncated.
                            futures::future::pending::<()>().await;
                            None
                        }
                    }
                }
            },
        );
        let mut machine = self.machine();
        let reply = tokio::select! {
            biased;
            Ok(e) = failed_rx => {
                return Err(TalosError::Rpc {
                    node: self.node.clone(),
                    rpc: RPC,
                    code: tonic::Code::Internal,
                    message: format!("reading the snapshot: {e}"),
                });
            }
            reply = machine.etcd_recover(chunks) => reply,
        };
        let reply = reply.map_err(|s| self.err(RPC, s))?.into_inner();
        if let Some(m) = reply.messages.first() {
            self.check_metadata(RPC, m.metadata.as_ref())?;
        }
        Ok(sent.load(Ordering::Relaxed))
    }

    /// Bootstraps etcd on this control-plane node from the snapshot uploaded with
    /// [`TalosClient::etcd_recover`] (Bootstrap with `recover_etcd: true`, as
    /// `talosctl bootstrap --recover-from`): etcd starts as a one-member cluster holding
    /// the snapshot's data; the other control planes join it. `skip_hash_check` sets
    /// `recover_skip_hash_check`, needed for a snapshot without etcd's trailing SHA-256
    /// (one copied from an etcd data directory rather than saved by a snapshot).
    ///
    /// Unlike [`TalosClient::bootstrap`], AlreadyExists ("etcd data directory is not
    /// empty") is an error here: etcd already has data, and recovering would lose it.
    /// Errors: the RPC's; FailedPrecondition (no uploaded snapshot, bootstrap not
    /// available yet) is [`TalosError::NotReady`].
    pub async fn bootstrap_recover(&self, skip_hash_check: bool) -> Result<(), TalosError> {
        const RPC: &str = "Bootstrap";
        let request = pb::BootstrapRequest {
            recover_etcd: true,
            recover_skip_hash_check: skip_hash_check,
        };
        let reply = self
            .machine()
            .bootstrap(request)
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        if let Some(m) = reply.messages.first() {
            self.check_metadata(RPC, m.metadata.as_ref())?;
        }
        Ok(())
    }

    /// The node's services and their states.
    pub async fn service_list(&self) -> Result<Vec<ServiceStatus>, TalosError> {
        const RPC: &str = "ServiceList";
        let reply = self
            .machine()
            .service_list(())
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let message = reply.messages.into_iter().next().unwrap_or_default();
        self.check_metadata(RPC, message.metadata.as_ref())?;
        Ok(message
            .services
            .into_iter()
            .map(|s| {
                let health = s.health.unwrap_or_default();
                ServiceStatus {
                    id: s.id,
                    state: s.state,
                    healthy: (!health.unknown).then_some(health.healthy),
                    last_message: health.last_message,
                }
            })
            .collect())
    }

    /// When the node booted, in seconds since the Unix epoch (SystemStat's
    /// `boot_time`, the kernel's `/proc/stat` btime): it changes at every boot,
    /// which tells whether the node rebooted since an earlier reading. 0 when
    /// the node's answer carries none.
    ///
    /// Errors: the RPC's [`TalosError`]; the `os:reader` role suffices.
    pub async fn boot_time(&self) -> Result<u64, TalosError> {
        const RPC: &str = "SystemStat";
        let reply = self
            .machine()
            .system_stat(())
            .await
            .map_err(|s| self.err(RPC, s))?
            .into_inner();
        let message = reply.messages.into_iter().next().unwrap_or_default();
        self.check_metadata(RPC, message.metadata.as_ref())?;
        Ok(message.boot_time)
    }

    /// Reboots the node. The connection drops; use a wait to see it come back.
    pub async fn reboot(&self, mode: RebootMode) -> Result<(), TalosError> {
        let mode = match mode {
            RebootMode::Default => pb::reboot_request::Mode::Default,
            RebootMode::Powercycle => pb::reboot_request::Mode::Powercycle,
            RebootMode::Force => pb::reboot_request::Mode::Force,
        };
        self.machine()
            .reboot(pb::RebootRequest { mode: mode as i32 })
            .await
            .map_err(|s| self.err("Reboot", s))?;
        Ok(())
    }

    /// Resets the node: wipes it and (by default) reboots into maintenance mode.
    pub async fn reset(&self, options: &ResetOptions) -> Result<(), TalosError> {
        let request = pb::ResetRequest {
            graceful: options.graceful,
            reboot: options.reboot,
            system_partitions_to_wipe: options
                .system_partitions
                .iter()
                .map(|label| pb::ResetPartitionSpec {
                    label: label.clone(),
                    wipe: true,
                })
                .collect(),
            user_disks_to_wipe: Vec::new(),
            mode: pb::reset_request::WipeMode::All as i32,
        };
        self.machine()
            .reset(request)
            .await
            .map_err(|s| self.err("Reset", s))?;
        Ok(())
    }

    /// Upgrades the node: the Talos 1.13 path (image pull, lifecycle upgrade, reboot),
    /// falling back to the legacy Upgrade RPC when the node does not know it
    /// (Unimplemented), as talosctl does.
    pub async fn upgrade(&self, options: &UpgradeOptions) -> Result<UpgradePath, TalosError> {
        match self.image_pull(&options.image).await {
            Ok(()) => {
                self.lifecycle_upgrade(&options.image).await?;
                self.reboot(RebootMode::Default).await?;
                Ok(UpgradePath::Lifecycle)
            }
            Err(TalosError::Rpc {
                code: tonic::Code::Unimplemented,
                ..
            }) => {
                self.upgrade_legacy(options).await?;
                Ok(UpgradePath::Legacy)
            }
            Err(e) => Err(e),
        }
    }

    /// ImageService/Pull into the system containerd namespace; drains the progress stream.
    pub async fn image_pull(&self, image: &str) -> Result<(), TalosError> {
        const RPC: &str = "Pull";
        let mut client = ImageServiceClient::new(self.channel.clone());
        let request = pb::ImageServicePullRequest {
            containerd: Some(system_containerd()),
            image_ref: image.to_string(),
        };
        let mut stream = client
            .pull(request)
            .await
            .map_err(|s| self.status_error(IMAGE, RPC, s))?
            .into_inner();
        while let Some(item) = stream.next().await {
            item.map_err(|s| self.status_error(IMAGE, RPC, s))?;
        }
        Ok(())
    }

    /// LifecycleService/Upgrade with `image`; does not reboot.
    ///
    /// Errors: [`TalosError::UpgradeFailed`] when the installer exits non-zero.
    pub async fn lifecycle_upgrade(&self, image: &str) -> Result<(), TalosError> {
        use pb::lifecycle_service_install_progress::Response;
        const RPC: &str = "Upgrade";
        let mut client = LifecycleServiceClient::new(self.channel.clone());
        let request = pb::LifecycleServiceUpgradeRequest {
            containerd: Some(system_containerd()),
            source: Some(pb::InstallArtifactsSource {
                image_name: image.to_string(),
            }),
        };
        let mut stream = client
            .upgrade(request)
            .await
            .map_err(|s| self.status_error(LIFECYCLE, RPC, s))?
            .into_inner();
        let mut last_message = String::new();
        while let Some(item) = stream.next().await {
            let item = item.map_err(|s| self.status_error(LIFECYCLE, RPC, s))?;
            match item.progress.and_then(|p| p.response) {
                Some(Response::Message(m)) => last_message = m,
                Some(Response::ExitCode(0)) | None => {}
                Some(Response::ExitCode(exit_code)) => {
                    return Err(TalosError::UpgradeFailed {
                        node: self.node.clone(),
                        exit_code,
                        last_message,
                    });
                }
            }
        }
        Ok(())
    }

    /// The legacy MachineService/Upgrade RPC; the node reboots by itself.
    pub async fn upgrade_legacy(&self, options: &UpgradeOptions) -> Result<(), TalosError> {
        let request = pb::UpgradeRequest {
            image: options.image.clone(),
            preserve: false,
            stage: options.stage,
            force: options.force,
            reboot_mode: pb::upgrade_request::RebootMode::Default as i32,
        };
        self.machine()
            .upgrade(request)
            .await
            .map_err(|s| self.err("Upgrade", s))?;
        Ok(())
    }
}

/// Reads the next chunk of `reader`: up to [`ETCD_RECOVER_CHUNK_BYTES`], fewer only at
/// the end of the input; empty at its end.
async fn read_chunk(reader: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let mut chunk = vec![0u8; ETCD_RECOVER_CHUNK_BYTES];
    let mut filled = 0;
    while filled < chunk.len() {
        match reader.read(&mut chunk[filled..]).await {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    chunk.truncate(filled);
    Ok(chunk)
}

/// The containerd instance Talos uses for system images: `{driver: CRI, namespace: NS_SYSTEM}`.
fn system_containerd() -> ContainerdInstance {
    ContainerdInstance {
        driver: ContainerDriver::Cri as i32,
        namespace: ContainerdNamespace::NsSystem as i32,
    }
}

/// The hostname a machine config sets: `machine.network.hostname`, else the
/// `hostname` of a HostnameConfig document. None when unset or not YAML.
fn hostname_in_config(config: &[u8]) -> Option<String> {
    use serde::Deserialize as _;
    let mut from_hostname_config = None;
    for document in serde_yaml_ng::Deserializer::from_slice(config) {
        let doc = serde_yaml_ng::Value::deserialize(document).ok()?;
        if let Some(h) = doc["machine"]["network"]["hostname"].as_str() {
            return Some(h.to_string());
        }
        if doc["kind"].as_str() == Some("HostnameConfig") {
            from_hostname_config = doc["hostname"].as_str().map(str::to_string);
        }
    }
    from_hostname_config
}

fn mode_to_proto(mode: ApplyMode) -> Mode {
    match mode {
        ApplyMode::Reboot => Mode::Reboot,
        ApplyMode::Auto => Mode::Auto,
        ApplyMode::NoReboot => Mode::NoReboot,
        ApplyMode::Staged => Mode::Staged,
        ApplyMode::Try => Mode::Try,
    }
}

fn mode_from_proto(mode: i32) -> ApplyMode {
    match Mode::try_from(mode).unwrap_or(Mode::Reboot) {
        Mode::Reboot => ApplyMode::Reboot,
        Mode::Auto => ApplyMode::Auto,
        Mode::NoReboot => ApplyMode::NoReboot,
        Mode::Staged => ApplyMode::Staged,
        Mode::Try => ApplyMode::Try,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn snapshot_chunks_are_full_mebibytes_whatever_the_reads() {
        use tokio::io::AsyncReadExt as _;
        let data: Vec<u8> = (0..(5 * ETCD_RECOVER_CHUNK_BYTES / 2))
            .map(|i| i as u8)
            .collect();
        let (a, rest) = data.split_at(1000);
        let (b, c) = rest.split_at(ETCD_RECOVER_CHUNK_BYTES);
        let mut reader = a.chain(b).chain(c);
        let mut sizes = Vec::new();
        let mut joined = Vec::new();
        loop {
            let chunk = read_chunk(&mut reader).await.unwrap();
            if chunk.is_empty() {
                break;
            }
            sizes.push(chunk.len());
            joined.extend_from_slice(&chunk);
        }
        let mib = ETCD_RECOVER_CHUNK_BYTES;
        assert_eq!(sizes, [mib, mib, mib / 2]);
        assert_eq!(joined, data);
    }

    #[test]
    fn hostname_comes_from_the_v1alpha1_document_or_hostname_config() {
        let v1 = b"machine:\n  network:\n    hostname: cp-1\n";
        assert_eq!(hostname_in_config(v1).as_deref(), Some("cp-1"));
        let hc = b"machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: w-9\n";
        assert_eq!(hostname_in_config(hc).as_deref(), Some("w-9"));
        assert_eq!(hostname_in_config(b"machine: {}\n"), None);
        assert_eq!(hostname_in_config(b"machine: ["), None);
    }
}
