//! Talos API gRPC client over our own `proto/` definitions: maintenance mode (TLS, no
//! verification) and secure mode (mTLS against the OS CA and the node's IP SAN), typed
//! methods per RPC, the lifecycle waits, and the mapping of Talos errors.
//! Only this module (and the simulator) knows proto types.

pub mod api;
pub mod calls;
pub mod client;
pub mod credentials;
pub mod error;
pub mod kubeconfig;
pub mod probe;
pub mod roles;
pub mod tls;
pub mod types;
pub mod wait;
