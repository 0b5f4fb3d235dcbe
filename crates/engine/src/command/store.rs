//! Where the state is and how a command holds it: the settings every state
//! command shares (`-f`, `--state`, `--backend-config`, `-lock-timeout`),
//! opening the backend from them and the environment, the lock info (ID,
//! who, pid, time), taking the lock (waiting for it when asked), and running
//! a command's body with the lock held until every way out, a signal
//! included.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

use talosprov_backend::StateBackend;
use talosprov_backend::backend::{Backend, BackendError};
use talosprov_backend::encrypt::{self, StateKeys};
use talosprov_backend::store::{StateStore, StoreError};
use talosprov_statefile::config::{self, StateSection};
use talosprov_statefile::lock::LockInfo;

use super::{CommandError, Ui};

/// The topology file `-f` names when it is not given: `cluster.yaml` in the
/// current folder.
pub const DEFAULT_TOPOLOGY: &str = "cluster.yaml";

/// The state store every command opens: the local file or the http backend.
pub type Store = StateStore<StateBackend>;

/// Where the state is: next to the topology file, at `--state`, or behind the
/// http backend (`TF_HTTP_ADDRESS`, `--backend-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSettings {
    /// The topology file (`-f`); the local state is `talosprov.tfstate` in
    /// its folder.
    pub file: PathBuf,
    /// `--state PATH`: the local state file, instead of the one next to the
    /// topology file.
    pub state: Option<PathBuf>,
    /// `--backend-config KEY=VALUE`, in order.
    pub backend_config: Vec<String>,
}

/// The environment variables the state reads (`TF_HTTP_*`,
/// `TALOSPROV_STATE_*`), and no others.
pub fn state_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("TF_HTTP_") || k.starts_with("TALOSPROV_STATE_"))
        .collect()
}

impl StateSettings {
    /// Open the state store these settings and the environment name. On the
    /// http backend without a lock address, warns that locking is off.
    ///
    /// # Errors
    /// A backend setting or key file that is missing or wrong; an invalid
    /// `state:` section ([`state_section`]).
    pub fn open(&self, ui: &Ui) -> anyhow::Result<Store> {
        let env = state_env();
        let overrides = config::parse_overrides(&self.backend_config)?;
        let dir = talosprov_base::paths::folder_of(&self.file);
        let section = state_section(&self.file)?;
        let resolved = config::resolve(&section, &env, &overrides, dir, self.state.as_deref())
            .context("cannot configure the state backend")?;
        let keys = StateKeys::load(&encrypt::key_source(&env)?)?;
        let backend = StateBackend::open(resolved)?;
        if let StateBackend::Http(h) = &backend
            && !h.locks()
        {
            ui.warn("state locking is off: set TF_HTTP_LOCK_ADDRESS (GitLab: <address>/lock)");
        }
        Ok(StateStore::new(backend, keys))
    }

    /// The folder etcd snapshots go to: the local state file's, else the
    /// topology's.
    pub fn snapshot_folder(&self) -> PathBuf {
        let next_to = self.state.as_deref().unwrap_or(&self.file);
        talosprov_base::paths::folder_of(next_to).to_path_buf()
    }
}

/// The topology file's `state:` section; the default (local, or whatever
/// `TF_HTTP_*` and `--backend-config` say) when the file does not exist, so a
/// laptop can reach a GitLab-managed state with the environment alone. Read
/// by the topology's own reader ([`talosprov_topology::read::read`]), so
/// the section means the same here as in `validate`; the rest of the file is
/// left to the topology loader (a state command works while a node is
/// invalid).
///
/// # Errors
/// A file that cannot be read or is not YAML, or a `state:` section with an
/// unknown key or a wrong type, each problem with its `file:line:col`, code
/// and field.
pub fn state_section(file: &Path) -> anyhow::Result<StateSection> {
    let text = match talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, file) {
        Ok(t) => t,
        Err(talosprov_base::limits::ReadError::Io(e))
            if e.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(StateSection::default());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let (raw, diagnostics) = talosprov_topology::read::read(&text, file);
    let in_state = |d: &talosprov_base::diagnostics::Diagnostic| {
        d.is_error()
            && (raw.is_none()
                || d.field
                    .as_deref()
                    .is_some_and(|f| f == "state" || f.starts_with("state.")))
    };
    let errors: Vec<talosprov_base::diagnostics::Diagnostic> =
        diagnostics.into_iter().filter(in_state).collect();
    if !errors.is_empty() {
        let lines: Vec<String> = errors
            .iter()
            .map(|d| {
                let at = match d.pos {
                    Some(p) => format!("{}:{}:{}", d.file.display(), p.line, p.column),
                    None => d.file.display().to_string(),
                };
                let field = d
                    .field
                    .as_deref()
                    .map(|f| format!(" (field {f})"))
                    .unwrap_or_default();
                format!(
                    "  {at}: {}[{} {}]: {}{field}",
                    d.severity,
                    d.code.code(),
                    d.code.name(),
                    d.message
                )
            })
            .collect();
        anyhow::bail!(
            "{}: the state: section is invalid:\n{}",
            file.display(),
            lines.join("\n")
        );
    }
    let Some(state) = raw.and_then(|r| r.state).map(|s| s.value) else {
        return Ok(StateSection::default());
    };
    let text = |v: Option<talosprov_topology::raw::Spanned<String>>| v.map(|s| s.value);
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

/// A new lock info for `operation`: a fresh UUID, `user@host`, this pid and
/// its start time, and the current time (RFC 3339 UTC).
pub fn new_lock_info(operation: &str, store: &Store) -> LockInfo {
    let user = talosprov_backend::holder::user_name();
    let created = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    LockInfo {
        id: uuid::Uuid::new_v4().to_string(),
        operation: operation.to_owned(),
        info: String::new(),
        who: format!("{user}@{}", talosprov_backend::holder::host_name()),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        created,
        path: store.backend().describe(),
        pid: Some(std::process::id()),
        process_start: talosprov_backend::holder::process_start(std::process::id()),
    }
}

/// Take the state lock for `operation`, retrying while another run holds it
/// until `timeout` (`-lock-timeout`) has passed (the store's
/// [`StateStore::lock_waiting`]), and saying once per holder whom it waits
/// for. A lock taken over from a dead holder is reported with a warning; on
/// the http backend the lock ID is said once taken.
///
/// # Errors
/// [`CommandError::Locked`] naming the holder when the lock is still held at
/// the deadline; a backend failure.
pub async fn acquire(
    store: &Store,
    timeout: Duration,
    operation: &str,
    ui: &Ui,
) -> Result<LockInfo, CommandError> {
    let info = new_lock_info(operation, store);
    let waiting = |held: &talosprov_statefile::lock::LockHeld| {
        ui.note(&format!(
            "Waiting for the state lock, held by {}; trying again for up to {}.",
            held.holder_summary(),
            humantime::format_duration(timeout)
        ));
    };
    match store.lock_waiting(&info, timeout, waiting).await {
        Ok(taken_over) => {
            if let Some(t) = taken_over {
                ui.warn(&t.to_string());
            }
            announce_lock(store, &info.id, ui);
            Ok(info)
        }
        Err(StoreError::Backend(e @ BackendError::Locked(_))) => {
            let error = anyhow::Error::new(e);
            let error = if timeout.is_zero() {
                error.context("cannot lock the state")
            } else {
                error.context(format!(
                    "cannot lock the state: still held after -lock-timeout={}",
                    humantime::format_duration(timeout)
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
pub fn report_kept_backup(store: &Store, ui: &Ui) {
    if let StateBackend::Local(local) = store.backend()
        && let Some(kept) = local.kept_backup()
    {
        ui.warn(&kept.to_string());
    }
}

/// On the http backend, say the lock ID as `State lock ID: <uuid>` (one line,
/// a fixed prefix a CI job can grep), so that a cleanup job can release a
/// lock left by a run killed outright (`force-unlock -force ID`). A local
/// lock dies with its process's lock file and is not announced.
pub fn announce_lock(store: &Store, id: &str, ui: &Ui) {
    if matches!(store.backend(), StateBackend::Http(_)) {
        ui.note(&format!(
            "{LOCK_ID_PREFIX}{id} (if this run is killed, release it with \
             `talosprov force-unlock -force {id}`)"
        ));
    }
}

/// The start of the line [`announce_lock`] says, before the lock ID.
pub const LOCK_ID_PREFIX: &str = "State lock ID: ";

/// The error for a command that needs a state when there is none.
pub fn no_state(store: &Store) -> anyhow::Error {
    anyhow::anyhow!(
        "no state found in {}: run `talosprov apply` first",
        store.backend().describe()
    )
}

/// How long a run stopped by a second signal may take to release its lock.
const UNLOCK_AFTER_SECOND_SIGNAL: Duration = Duration::from_secs(5);

/// Run `body` with a receiver that turns true on the first Ctrl-C or
/// SIGTERM the frontend delivers; the body decides how to stop. A second
/// signal ends the body at once (`again` says so, with the signal's name):
/// the result is then [`CommandError::Interrupted`] and `true`.
pub(crate) async fn interruptible<T>(
    ui: &Ui,
    body: impl AsyncFnOnce(watch::Receiver<bool>) -> Result<T, CommandError>,
    again: impl FnOnce(&str),
) -> (Result<T, CommandError>, bool) {
    let (tx, rx) = watch::channel(false);
    let mut interrupts = ui.interrupts();
    let next_signal = async |interrupts: &mut Option<super::Interrupts>| match interrupts {
        Some(i) => i.next().await,
        None => std::future::pending().await,
    };
    let body = body(rx);
    tokio::pin!(body);
    loop {
        tokio::select! {
            result = &mut body => return (result, false),
            signal = next_signal(&mut interrupts) => {
                if !*tx.borrow() {
                    let _ = tx.send(true);
                    continue;
                }
                again(signal);
                return (Err(CommandError::Interrupted), true);
            }
        }
    }
}

/// `talosprov <words>` with the flags that find the topology and the state
/// as these settings give them (`-f` unless it is the default
/// `cluster.yaml`, `--state`, each `--backend-config`), so that the command
/// runs from the same folder; each word quoted for a POSIX shell where it
/// needs it. What a message gives as the command to run next.
pub fn command_line(settings: &StateSettings, words: &[&str]) -> String {
    let mut args: Vec<String> = vec!["talosprov".into()];
    let (verb, rest) = words.split_at(words.len().min(verb_words(words)));
    args.extend(verb.iter().map(|w| (*w).to_owned()));
    if settings.file != Path::new(DEFAULT_TOPOLOGY) {
        args.extend(["-f".into(), settings.file.display().to_string()]);
    }
    if let Some(path) = &settings.state {
        args.extend(["--state".into(), path.display().to_string()]);
    }
    for setting in &settings.backend_config {
        args.extend(["--backend-config".into(), setting.clone()]);
    }
    args.extend(rest.iter().map(|w| (*w).to_owned()));
    args.iter()
        .map(|a| shell_quoted(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many of `words` name the command (`etcd restore` is two), before
/// its flags and arguments.
fn verb_words(words: &[&str]) -> usize {
    match words.first() {
        Some(&("etcd" | "state" | "secrets" | "output")) => 2,
        Some(_) => 1,
        None => 0,
    }
}

/// `text` as one word of a POSIX shell: as it is when it holds only
/// characters no shell reads specially, else in single quotes.
pub fn shell_quoted(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,~".contains(c))
        && !text.starts_with('~');
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Take the lock on `store` (waiting for it up to `timeout`), and run `body`
/// with a receiver that turns true on the first Ctrl-C or SIGTERM the
/// frontend delivers. The body decides how to stop (the executor finishes the
/// Proxmox work in flight and saves first). A second signal ends the body at
/// once: what it was doing is dropped (the state holds every record saved so
/// far), and the lock is released within a few seconds. The lock is released
/// on every way out.
///
/// # Errors
/// The lock conflict (naming the holder; [`CommandError::Locked`]), `body`'s
/// error, [`CommandError::Interrupted`] on a second signal, or the unlock
/// failure.
pub async fn locked<T>(
    store: &Store,
    timeout: Duration,
    operation: &str,
    ui: &Ui,
    body: impl AsyncFnOnce(watch::Receiver<bool>) -> Result<T, CommandError>,
) -> Result<T, CommandError> {
    let info = acquire(store, timeout, operation, ui).await?;
    let (result, at_once) = interruptible(ui, body, |signal| {
        ui.warn(&format!(
            "{signal} received again: exiting at once. Steps in flight were abandoned; \
             Proxmox may still be running their tasks, and the next run reads back what they did"
        ));
    })
    .await;
    report_kept_backup(store, ui);
    let unlocked = if at_once {
        match tokio::time::timeout(UNLOCK_AFTER_SECOND_SIGNAL, store.unlock(&info.id)).await {
            Ok(done) => done.map_err(|u| u.to_string()),
            Err(_) => Err(format!(
                "no answer within {} s",
                UNLOCK_AFTER_SECOND_SIGNAL.as_secs()
            )),
        }
    } else {
        store.unlock(&info.id).await.map_err(|u| u.to_string())
    };
    match unlocked {
        Ok(()) => result,
        Err(u) => {
            let hint = format!(
                "cannot release the state lock ({u}); release it with `talosprov force-unlock {}`",
                info.id
            );
            match result {
                Ok(_) => Err(anyhow::anyhow!(hint).into()),
                Err(e) => {
                    ui.warn(&hint);
                    Err(e)
                }
            }
        }
    }
}

/// [`locked`] for a short body that reads and writes the state only: the
/// first signal stops it at once (nothing it does is left half-done, since a
/// save is one write).
///
/// # Errors
/// As [`locked`].
pub async fn with_lock<T>(
    store: &Store,
    timeout: Duration,
    operation: &str,
    ui: &Ui,
    body: impl AsyncFnOnce() -> Result<T, CommandError>,
) -> Result<T, CommandError> {
    locked(store, timeout, operation, ui, async |mut cancel| {
        tokio::select! {
            r = body() => r,
            _ = cancel.wait_for(|c| *c) => Err(CommandError::Interrupted),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(file: &str, state: Option<&str>, backend_config: &[&str]) -> StateSettings {
        StateSettings {
            file: file.into(),
            state: state.map(PathBuf::from),
            backend_config: backend_config.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_command_line_repeats_the_flags_that_find_the_topology_and_the_state() {
        assert_eq!(
            command_line(
                &settings("cluster.yaml", None, &[]),
                &["apply", "/tmp/x.plan"]
            ),
            "talosprov apply /tmp/x.plan"
        );
        assert_eq!(
            command_line(
                &settings("examples/lab/cluster.yaml", None, &[]),
                &["etcd", "restore", "--from", "/b/etcd-x.snapshot.age"]
            ),
            "talosprov etcd restore -f examples/lab/cluster.yaml --from /b/etcd-x.snapshot.age"
        );
        assert_eq!(
            command_line(
                &settings(
                    "my lab/cluster.yaml",
                    Some("/var/lib/it's.tfstate"),
                    &["address=https://gitlab.example/state", "retry_max=3"]
                ),
                &["rotate-ca", "--kubernetes"]
            ),
            "talosprov rotate-ca -f 'my lab/cluster.yaml' --state '/var/lib/it'\\''s.tfstate' \
             --backend-config address=https://gitlab.example/state \
             --backend-config retry_max=3 --kubernetes"
        );
    }

    #[test]
    fn shell_words_are_quoted_only_when_a_shell_would_read_them_otherwise() {
        assert_eq!(shell_quoted("a/b-c_d.yaml"), "a/b-c_d.yaml");
        assert_eq!(shell_quoted("a b"), "'a b'");
        assert_eq!(shell_quoted("$HOME"), "'$HOME'");
        assert_eq!(shell_quoted("~/x"), "'~/x'");
        assert_eq!(shell_quoted(""), "''");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
    }

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
