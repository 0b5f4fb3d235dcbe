//! Plain values the client returns and takes, so that callers never see proto types.

use std::time::Duration;

/// How the node should apply a machine config (ApplyConfigurationRequest.Mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyMode {
    /// Apply and reboot (the proto default; deprecated upstream in favour of AUTO).
    Reboot,
    /// Let the node choose: no reboot when the change allows it. talosctl's default.
    Auto,
    /// Apply without rebooting, or fail if that is impossible.
    NoReboot,
    /// Store the config and apply it at the next reboot.
    Staged,
    /// Apply, and roll back after the timeout unless confirmed.
    Try,
}

/// The answer to ApplyConfiguration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// The mode the node actually used (maintenance mode always answers NoReboot).
    pub mode: ApplyMode,
    /// Validation warnings from the node.
    pub warnings: Vec<String>,
    /// The node's explanation; for a dry run it starts "Dry run summary:".
    pub mode_details: String,
}

/// Options of ApplyConfiguration besides the config itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOptions {
    /// The apply mode.
    pub mode: ApplyMode,
    /// Validate and diff only.
    pub dry_run: bool,
    /// For [`ApplyMode::Try`]: how long before the node rolls back (Talos default 1 min).
    pub try_mode_timeout: Option<Duration>,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            mode: ApplyMode::Auto,
            dry_run: false,
            try_mode_timeout: None,
        }
    }
}

/// What Bootstrap achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapOutcome {
    /// This call bootstrapped etcd.
    Bootstrapped,
    /// etcd was already bootstrapped (AlreadyExists "etcd data directory is not empty")
    /// and reports these members; treated as success.
    AlreadyBootstrapped {
        /// The members etcd reports.
        members: Vec<EtcdMember>,
    },
}

/// The node's Talos version and platform (Version RPC).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeVersion {
    /// Release tag, e.g. `v1.13.8`.
    pub tag: String,
    /// Git commit.
    pub sha: String,
    /// CPU architecture, e.g. `amd64`.
    pub arch: String,
    /// Platform name, e.g. `nocloud` or `metal`.
    pub platform: String,
    /// Platform mode, e.g. `cloud` or `metal`.
    pub platform_mode: String,
}

/// One etcd member (EtcdMember).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdMember {
    /// Member ID.
    pub id: u64,
    /// Hostname of the control-plane node.
    pub hostname: String,
    /// Peer URLs, e.g. `https://10.0.0.5:2380`.
    pub peer_urls: Vec<String>,
    /// Client URLs, e.g. `https://10.0.0.5:2379`.
    pub client_urls: Vec<String>,
    /// True while the member is a learner.
    pub is_learner: bool,
}

/// One Talos service as ServiceList reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceStatus {
    /// Service ID, e.g. `etcd`, `cri`, `apid`, `kubelet`.
    pub id: String,
    /// State string: Initialized, Preparing, Waiting, Running, Stopping, Finished,
    /// Failed, Skipped or Starting.
    pub state: String,
    /// Health: `None` when the service has no health check or it is unknown yet.
    pub healthy: Option<bool>,
    /// Last health message.
    pub last_message: String,
}

/// Reboot mode (RebootRequest.Mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RebootMode {
    /// kexec when possible.
    #[default]
    Default,
    /// Full power cycle.
    Powercycle,
    /// Skip graceful shutdown (Talos 1.12+).
    Force,
}

/// Options of the Reset RPC. Defaults: leave etcd gracefully, reboot afterwards (back
/// into maintenance mode), wipe the whole system disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetOptions {
    /// Leave etcd first (with etcd checks).
    pub graceful: bool,
    /// Reboot after the wipe instead of powering off.
    pub reboot: bool,
    /// System partition labels to wipe (`STATE`, `EPHEMERAL`, ...); empty = whole disk.
    pub system_partitions: Vec<String>,
}

impl Default for ResetOptions {
    fn default() -> Self {
        ResetOptions {
            graceful: true,
            reboot: true,
            system_partitions: Vec::new(),
        }
    }
}

/// Which upgrade path a node took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradePath {
    /// Talos 1.13+: ImageService/Pull, LifecycleService/Upgrade, then Reboot.
    Lifecycle,
    /// The legacy MachineService/Upgrade RPC, which reboots by itself.
    Legacy,
}

/// Options of an upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeOptions {
    /// Installer image reference, e.g. `factory.talos.dev/installer/<schematic>:v1.13.9`.
    pub image: String,
    /// Legacy path only: stage the upgrade and apply it on the next reboot.
    pub stage: bool,
    /// Legacy path only: skip the etcd health check and upgrade lock.
    pub force: bool,
}

/// The machine config a node runs, byte for byte as it was submitted (YAML, one or more
/// documents). It holds the cluster's secrets: `Debug` redacts it.
#[derive(Clone, PartialEq, Eq)]
pub struct RunningConfig(Vec<u8>);

impl RunningConfig {
    /// Wraps config bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        RunningConfig(bytes)
    }

    /// The YAML bytes; never print them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for RunningConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunningConfig((sensitive), {} bytes)", self.0.len())
    }
}

/// The admin kubeconfig (YAML). It holds a client key: `Debug` and `Display` redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct Kubeconfig(Vec<u8>);

impl Kubeconfig {
    /// Wraps kubeconfig bytes.
    pub fn new(bytes: Vec<u8>) -> Self {
        Kubeconfig(bytes)
    }

    /// The YAML bytes. Callers write them to a 0600 file; never print them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Kubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kubeconfig((sensitive), {} bytes)", self.0.len())
    }
}
