//! The flags every state command shares (`-f`, `--state`, `--backend-config`)
//! and those of the commands that lock (`-lock-timeout`), and the edge that
//! reads the environment, opens the backend, builds the lock info (ID, who,
//! pid, time) for a command and takes the lock, waiting for it when asked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use super::CommandError;
use talosprov_state::config::{self, StateSection};
use talosprov_state::encrypt::{self, StateKeys};
use talosprov_state::{Backend, BackendError, LockInfo, StateBackend, StateStore, StoreError};

/// The topology file `-f` names when it is not given: `cluster.yaml` in the
/// current folder.
pub const DEFAULT_TOPOLOGY: &str = "cluster.yaml";

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

/// The environment variables the state reads (`TF_HTTP_*`,
/// `TALOSPROV_STATE_*`), and no others.
pub fn state_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("TF_HTTP_") || k.starts_with("TALOSPROV_STATE_"))
        .collect()
}

impl StateOptions {
    /// Open the state store these flags and the environment name.
    ///
    /// # Errors
    /// A backend setting or key file that is missing or wrong.
    pub fn open(&self) -> anyhow::Result<StateStore<StateBackend>> {
        let env = state_env();
        let overrides = config::parse_overrides(&self.backend_config)?;
        let dir = folder_of(&self.file);
        let section = state_section(&self.file)?;
        let resolved = config::resolve(&section, &env, &overrides, dir, self.state.as_deref())
            .context("cannot configure the state backend")?;
        let keys = StateKeys::load(&encrypt::key_source(&env)?)?;
        let backend = StateBackend::open(resolved)?;
        if let StateBackend::Http(h) = &backend
            && !h.locks()
        {
            crate::ui::warn(
                "state locking is off: set TF_HTTP_LOCK_ADDRESS (GitLab: <address>/lock)",
            );
        }
        Ok(StateStore::new(backend, keys))
    }
}

/// The topology file's `state:` section; the default (local, or whatever
/// `TF_HTTP_*` and `--backend-config` say) when the file does not exist, so a
/// laptop can reach a GitLab-managed state with the environment alone. Read
/// by the topology's own reader ([`talosprov_core::topology::read::read`]), so the
/// section means the same here as in `validate`; the rest of the file is left
/// to the topology loader (a state command works while a node is invalid).
///
/// # Errors
/// A file that cannot be read or is not YAML, or a `state:` section with an
/// unknown key or a wrong type, with its file:line:col diagnostics.
pub fn state_section(file: &Path) -> anyhow::Result<StateSection> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StateSection::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let (raw, diagnostics) = talosprov_core::topology::read::read(&text, file);
    let in_state = |d: &talosprov_core::topology::Diagnostic| {
        d.is_error()
            && (raw.is_none()
                || d.field
                    .as_deref()
                    .is_some_and(|f| f == "state" || f.starts_with("state.")))
    };
    let errors: Vec<talosprov_core::topology::Diagnostic> =
        diagnostics.into_iter().filter(in_state).collect();
    if !errors.is_empty() {
        anyhow::bail!(
            "{}: the state: section is invalid:\n{}",
            file.display(),
            crate::ui::diagnostics::render_all(&errors, false).trim_end()
        );
    }
    let Some(state) = raw.and_then(|r| r.state).map(|s| s.value) else {
        return Ok(StateSection::default());
    };
    let text = |v: Option<talosprov_core::topology::raw::Spanned<String>>| v.map(|s| s.value);
    Ok(StateSection {
        backend: text(state.backend),
        path: text(state.path),
        address: text(state.address),
        lock_address: text(state.lock_address),
        unlock_address: text(state.unlock_address),
        lock_method: text(state.lock_method),
        unlock_method: text(state.unlock_method),
    })
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
        value_parser = talosprov_core::duration::parse
    )]
    pub lock_timeout: Duration,
}

/// A new lock info for `operation`: a fresh UUID, `user@host`, this pid and
/// its start time, and the current time (RFC 3339 UTC).
pub fn new_lock_info(operation: &str, store: &StateStore<StateBackend>) -> LockInfo {
    let user = talosprov_state::holder::user_name();
    let created = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    LockInfo {
        id: uuid::Uuid::new_v4().to_string(),
        operation: operation.to_owned(),
        info: String::new(),
        who: format!("{user}@{}", talosprov_state::holder::host_name()),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        created,
        path: store.backend().describe(),
        pid: Some(std::process::id()),
        process_start: talosprov_state::holder::process_start(std::process::id()),
    }
}

/// Take the state lock for `operation`, retrying while another run holds it
/// until `-lock-timeout` has passed (the store's [`StateStore::lock_waiting`]),
/// and saying once per holder whom it waits for. A lock taken over from a dead
/// holder is reported with a warning; on the http backend the lock ID is
/// printed once taken.
///
/// # Errors
/// [`CommandError::Locked`] (exit 3) naming the holder when the lock is still
/// held at the deadline; a backend failure.
pub async fn acquire(
    store: &StateStore<StateBackend>,
    lock: &LockOptions,
    operation: &str,
) -> Result<LockInfo, CommandError> {
    let info = new_lock_info(operation, store);
    let waiting = |held: &talosprov_state::LockHeld| {
        crate::ui::write_stderr(&format!(
            "Waiting for the state lock, held by {}; trying again for up to {}.\n",
            held.holder_summary(),
            humantime::format_duration(lock.lock_timeout)
        ));
    };
    match store.lock_waiting(&info, lock.lock_timeout, waiting).await {
        Ok(taken_over) => {
            if let Some(t) = taken_over {
                crate::ui::warn(&t.to_string());
            }
            announce_lock(store, &info.id);
            Ok(info)
        }
        Err(StoreError::Backend(e @ BackendError::Locked(_))) => {
            let error = anyhow::Error::new(e);
            let error = if lock.lock_timeout.is_zero() {
                error.context("cannot lock the state")
            } else {
                error.context(format!(
                    "cannot lock the state: still held after -lock-timeout={}",
                    humantime::format_duration(lock.lock_timeout)
                ))
            };
            Err(CommandError::Locked(error))
        }
        Err(e) => Err(anyhow::Error::new(e)
            .context("cannot lock the state")
            .into()),
    }
}

/// After a run that saved the local state: warn when its `.backup` was kept
/// rather than replaced by a state that holds less.
pub fn report_kept_backup(store: &StateStore<StateBackend>) {
    if let StateBackend::Local(local) = store.backend()
        && let Some(kept) = local.kept_backup()
    {
        crate::ui::warn(&kept.to_string());
    }
}

/// Run `body` holding the state lock (waiting for it up to `-lock-timeout`),
/// and release the lock on every way out: success, error, Ctrl-C and SIGTERM
/// (how a cancelled GitLab job stops). On the http backend the lock ID is
/// printed first, for a cleanup job's `force-unlock`.
///
/// # Errors
/// The lock conflict ([`CommandError::Locked`]), `body`'s error,
/// [`CommandError::Interrupted`], or the unlock failure.
pub async fn with_lock<T>(
    store: &StateStore<StateBackend>,
    lock: &LockOptions,
    operation: &str,
    body: impl AsyncFnOnce(&StateStore<StateBackend>) -> anyhow::Result<T>,
) -> Result<T, CommandError> {
    let info = acquire(store, lock, operation).await?;
    let result = tokio::select! {
        r = body(store) => r.map_err(CommandError::Failed),
        () = interrupted() => Err(CommandError::Interrupted),
    };
    report_kept_backup(store);
    let unlocked = store.unlock(&info.id).await;
    match (result, unlocked) {
        (r, Ok(())) => r,
        (Ok(_), Err(e)) => Err(anyhow::Error::new(e)
            .context(format!(
                "cannot release the state lock; release it with `talosprov force-unlock {}`",
                info.id
            ))
            .into()),
        (Err(e), Err(u)) => {
            crate::ui::warn(&format!(
                "cannot release the state lock ({u}); release it with `talosprov force-unlock {}`",
                info.id
            ));
            Err(e)
        }
    }
}

/// On the http backend, print the lock ID on stderr as `State lock ID: <uuid>`
/// (one line, a fixed prefix a CI job can grep), so that a cleanup job can
/// release a lock left by a run killed outright (`force-unlock -force ID`).
/// A local lock dies with its process's lock file and is not announced.
pub fn announce_lock(store: &StateStore<StateBackend>, id: &str) {
    if matches!(store.backend(), StateBackend::Http(_)) {
        crate::ui::write_stderr(&format!(
            "{LOCK_ID_PREFIX}{id} (if this run is killed, release it with \
             `talosprov force-unlock -force {id}`)\n"
        ));
    }
}

/// The start of the line [`announce_lock`] prints, before the lock ID.
pub const LOCK_ID_PREFIX: &str = "State lock ID: ";

/// Resolves on Ctrl-C or SIGTERM (remembering which, for the exit code). If
/// the handlers cannot be installed it never resolves, and the default signal
/// behaviour stays.
pub(super) async fn interrupted() {
    match super::signals::Signals::install() {
        Some(mut signals) => {
            signals.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// The error for a command that needs a state when there is none.
pub fn no_state(store: &StateStore<StateBackend>) -> anyhow::Error {
    anyhow::anyhow!(
        "no state found in {}: run `talosprov apply` first",
        store.backend().describe()
    )
}

pub use talosprov_core::paths::folder_of;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_section_is_read_from_the_topology_and_other_keys_are_ignored() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cluster.yaml");
        std::fs::write(
            &file,
            "cluster:\n  name: lab\nstate:\n  backend: http\n  address: https://gitlab.example/s\n  \
             lock_method: POST\n",
        )
        .expect("write");
        let section = state_section(&file).expect("reads");
        assert_eq!(section.backend.as_deref(), Some("http"));
        assert_eq!(section.address.as_deref(), Some("https://gitlab.example/s"));
        assert_eq!(section.lock_method.as_deref(), Some("POST"));
    }

    #[test]
    fn missing_topology_or_section_gives_the_default() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cluster.yaml");
        assert_eq!(
            state_section(&file).expect("no file"),
            StateSection::default()
        );
        std::fs::write(&file, "cluster:\n  name: lab\n").expect("write");
        assert_eq!(
            state_section(&file).expect("no section"),
            StateSection::default()
        );
    }

    #[test]
    fn unknown_state_setting_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("cluster.yaml");
        std::fs::write(&file, "state:\n  password: hunter2\n").expect("write");
        let e = format!("{:#}", state_section(&file).unwrap_err());
        assert!(e.contains("cluster.yaml") && e.contains("state:"), "{e}");
        assert!(e.contains("state.password") && e.contains("2:3"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        // A problem elsewhere is the topology loader's, not the state's.
        std::fs::write(&file, "nodes: 3\nstate:\n  backend: local\n").expect("write");
        assert_eq!(
            state_section(&file).expect("reads").backend.as_deref(),
            Some("local")
        );
        std::fs::write(&file, "state:\n  lock_method: [POST]\n").expect("write");
        let e = format!("{:#}", state_section(&file).unwrap_err());
        assert!(e.contains("state.lock_method"), "{e}");
    }
}
