//! Talos API gRPC client over our own `proto/` definitions: maintenance mode (TLS, no
//! verification) and secure mode (mTLS against the OS CA and the node's IP SAN), typed
//! methods per RPC, the lifecycle waits, and the mapping of Talos errors.
//! Only this module (and the simulator) knows proto types.

pub mod api;
mod calls;
mod client;
mod credentials;
mod error;
mod kubeconfig;
mod probe;
pub mod roles;
pub mod tls;
mod types;
mod wait;

pub use calls::{
    ACTIVE_CONFIG_ID, CONFIG_NAMESPACE, ETCD_RECOVER_CHUNK_BYTES, MACHINE_CONFIG_TYPE,
};
pub use client::{ConnectionMode, TALOS_API_PORT, TalosClient};
pub use credentials::{ClientCredentials, relabel_ed25519};
pub use error::{Explained, NodeName, TalosError};
pub use kubeconfig::{KubeconfigArchiveError, extract_kubeconfig, talos_style_tarball};
pub use probe::{NodeAnswer, probe_node};
pub use types::{
    ApplyMode, ApplyOptions, ApplyOutcome, BootstrapOutcome, EtcdMember, Kubeconfig, NodeVersion,
    RebootMode, ResetOptions, RunningConfig, ServiceStatus, UpgradeOptions, UpgradePath,
};
pub use wait::{
    Backoff, CauseTracker, InMaintenance, MAINTENANCE_GRACE, SAME_CAUSE_AFTER, SecureWait,
    bootstrap_when_ready, bootstrap_when_ready_explained, retry_explained, retry_until,
    wait_etcd_ready, wait_etcd_ready_explained, wait_maintenance, wait_secure, wait_secure_with,
};
