//! Machine configs (pure): the secrets bundle, base configs per role, the checks Talos makes on
//! a final config (strict decoding against each contract's field set, then validation), the
//! check that a node keeps its address, the talosconfig and the offline admin kubeconfig.
//! Randomness and the clock are parameters; nothing here does I/O.

pub mod config;
mod config_parts;
mod config_v114;
pub mod conflicts;
pub mod decode;
pub mod deprecated;
pub mod devices;
pub mod effective;
pub mod expiry;
pub mod fields;
pub mod immediate;
pub mod inline;
pub mod keys;
pub mod kubeconfig;
pub mod link;
pub mod managed;
pub mod migrate;
pub mod node;
pub mod pki;
pub mod redact;
pub mod rotation;
pub mod secrets;
pub mod secrets_file;
pub mod talosconfig;
pub mod validate;

pub use crate::sensitive::Sensitive;
pub use crate::version::{
    Contract, ContractChoice, TalosVersion, VersionError, contract_for, default_kubernetes_version,
};
pub use config::{
    BaseConfig, BaseConfigInput, ConfigError, Role, base_config, base_config_for,
    machine_config_yaml,
};
pub use decode::decode_config;
pub use keys::{KeyAlgorithm, KeyError, PrivateKey};
pub use kubeconfig::{AdminKubeconfig, KubeconfigInput};
pub use link::{NodeLink, check_node_link};
pub use node::{NodeConfig, node_configs, node_configs_with};
pub use pki::{CertAndKey, PkiError};
pub use redact::redact_secrets;
pub use secrets::{Certs, ClusterIdentity, EncryptionSecret, SecretsBundle, SecretsError};
pub use secrets_file::{SecretsFileError, parse_secrets_yaml, secrets_yaml};
pub use talosconfig::{Talosconfig, TalosconfigInput};
pub use validate::{ConfigProblem, ProblemKind, Severity, check_config};
