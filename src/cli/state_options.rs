//! The flags every state command shares (`-f`, `--state`, `--backend-config`)
//! and those of the commands that lock (`-lock-timeout`), turned into the
//! engine's [`StateSettings`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use talosprov_engine::command::store::{DEFAULT_TOPOLOGY, StateSettings};

/// Where the state is: next to the topology file, at `--state`, or behind the
/// http backend (`TF_HTTP_ADDRESS`, `--backend-config`).
#[derive(Debug, Clone, Args)]
pub struct StateOptions {
    /// The topology file; the local state is `talosprov.tfstate` in its folder.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        default_value = DEFAULT_TOPOLOGY
    )]
    pub file: PathBuf,

    /// The local state file, instead of the one next to the topology file.
    #[arg(long = "state", value_name = "PATH")]
    pub state: Option<PathBuf>,

    /// Override one backend setting (address, lock_address, unlock_address,
    /// lock_method, unlock_method, backend, path, retry_*); repeatable.
    /// Credentials come only from TF_HTTP_USERNAME and TF_HTTP_PASSWORD.
    #[arg(long = "backend-config", value_name = "KEY=VALUE")]
    pub backend_config: Vec<String>,
}

impl StateOptions {
    /// The engine's settings for these flags.
    pub fn settings(&self) -> StateSettings {
        StateSettings {
            file: self.file.clone(),
            state: self.state.clone(),
            backend_config: self.backend_config.clone(),
        }
    }
}

/// How long a command that locks the state waits for a lock another run
/// holds: OpenTofu's `-lock-timeout`.
#[derive(Debug, Clone, Args)]
pub struct LockOptions {
    /// Keep trying to take the state lock for this long while another run
    /// holds it, e.g. `30s` or `5m` (0s: fail at once). A lock still held then
    /// exits with code 3.
    #[arg(
        long = "lock-timeout",
        value_name = "DURATION",
        default_value = "0s",
        value_parser = talosprov_base::duration::parse
    )]
    pub lock_timeout: Duration,
}
