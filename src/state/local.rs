//! The local backend: `talosprov.tfstate` next to the topology file (or
//! `--state PATH`), written atomically with mode 0600, a `.backup` of the state
//! as it was before this run, and a lock file. Follows OpenTofu
//! `internal/states/statemgr/filesystem.go`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use fs4::fs_std::FileExt;

use super::{Backend, BackendError, HolderProcess, LockHeld, LockInfo};

/// The state file name used next to the topology file.
pub const DEFAULT_STATE_FILE: &str = "talosprov.tfstate";

/// A local backend operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file operation failed.
    #[error("cannot {action} {}", path.display())]
    Io {
        /// What was being done, e.g. `write the state file`.
        action: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `unlock` named another lock than the one recorded.
    #[error(
        "lock ID {requested} does not match the lock on {} (held with ID {held})",
        path.display()
    )]
    LockMismatch {
        /// The state file.
        path: PathBuf,
        /// The ID given.
        requested: String,
        /// The ID recorded in the lock file.
        held: String,
    },
    /// `unlock` when there is no lock.
    #[error("the state {} is not locked", path.display())]
    NotLocked {
        /// The state file.
        path: PathBuf,
    },
}

/// A lock this process holds: the locked lock-info file stays open.
#[derive(Debug)]
struct HeldLock {
    id: String,
    _file: File,
}

/// The state in a local file. One value per state path; it remembers the lock
/// it holds and whether it already wrote this run's `.backup`.
#[derive(Debug)]
pub struct LocalBackend {
    path: PathBuf,
    held: Mutex<Option<HeldLock>>,
    backed_up: AtomicBool,
}

impl LocalBackend {
    /// A backend for the state file at `path` (it need not exist yet).
    pub fn new(path: PathBuf) -> Self {
        LocalBackend {
            path,
            held: Mutex::new(None),
            backed_up: AtomicBool::new(false),
        }
    }

    /// The state file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<state>.backup`: the state as it was before this run's first write.
    pub fn backup_path(&self) -> PathBuf {
        sibling(&self.path, "", ".backup")
    }

    /// `.<state>.lock.info`: the lock file, holding the holder's [`LockInfo`].
    pub fn lock_path(&self) -> PathBuf {
        sibling(&self.path, ".", ".lock.info")
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> BackendError {
        let path = path.to_path_buf();
        move |source| {
            BackendError::Local(LocalError::Io {
                action,
                path,
                source,
            })
        }
    }

    fn read_lock_info(&self) -> Result<Option<LockInfo>, BackendError> {
        let lock_path = self.lock_path();
        match fs::read(&lock_path) {
            Ok(bytes) if bytes.is_empty() => Ok(None),
            // An unreadable lock file still means locked: report what we can.
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).unwrap_or_default())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("read the lock file", &lock_path)(e)),
        }
    }

    /// Open the lock file and take its OS lock, making sure the file we locked
    /// is still the one at the path (another process may have removed it while
    /// we waited). `None` when another live process holds the OS lock.
    fn open_and_lock(&self) -> Result<Option<File>, BackendError> {
        let lock_path = self.lock_path();
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock_path)
                .map_err(self.io("open the lock file", &lock_path))?;
            set_private(&file).map_err(self.io("set the mode of", &lock_path))?;
            if !file
                .try_lock_exclusive()
                .map_err(self.io("lock", &lock_path))?
            {
                return Ok(None);
            }
            if same_file(&file, &lock_path) {
                return Ok(Some(file));
            }
        }
    }

    fn write_document(&self, document: &[u8]) -> Result<(), BackendError> {
        write_atomically(&self.path, document, |f, b| f.write_all(b))
            .map_err(self.io("write the state file", &self.path))
    }
}

impl Backend for LocalBackend {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        match fs::read(&self.path) {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(None),
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("read the state file", &self.path)(e)),
        }
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        if !self.backed_up.load(Ordering::SeqCst) {
            match fs::read(&self.path) {
                Ok(previous) => {
                    let backup = self.backup_path();
                    write_atomically(&backup, &previous, |f, b| f.write_all(b))
                        .map_err(self.io("write the state backup", &backup))?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io("read the state file", &self.path)(e)),
            }
            self.backed_up.store(true, Ordering::SeqCst);
        }
        self.write_document(document)
    }

    async fn lock(&self, info: &LockInfo) -> Result<(), BackendError> {
        let Some(mut file) = self.open_and_lock()? else {
            let holder = self.read_lock_info()?.unwrap_or_default();
            return Err(BackendError::Locked(Box::new(LockHeld {
                process: holder_process(&holder),
                holder,
            })));
        };
        let mut recorded = Vec::new();
        file.read_to_end(&mut recorded)
            .map_err(self.io("read the lock file", &self.lock_path()))?;
        if !recorded.is_empty() {
            // Our OS lock succeeded, so the holder's process ended without
            // unlocking (or runs on another host sharing this folder): the lock
            // stays until `force-unlock`, as in OpenTofu.
            let holder: LockInfo = serde_json::from_slice(&recorded).unwrap_or_default();
            let _ = FileExt::unlock(&file);
            return Err(BackendError::Locked(Box::new(LockHeld {
                process: holder_process(&holder),
                holder,
            })));
        }
        let lock_path = self.lock_path();
        let mut body = info.to_json();
        body.push(b'\n');
        file.write_all(&body)
            .and_then(|()| file.sync_all())
            .map_err(self.io("write the lock file", &lock_path))?;
        // A bare file name (`--state s.tfstate`) has an empty parent: its folder is `.`.
        let dir = match lock_path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        sync_dir(dir).map_err(self.io("sync the folder of", &lock_path))?;
        *self.held.lock().expect("lock state poisoned") = Some(HeldLock {
            id: info.id.clone(),
            _file: file,
        });
        Ok(())
    }

    async fn unlock(&self, id: &str) -> Result<(), BackendError> {
        let lock_path = self.lock_path();
        let recorded = self.read_lock_info()?;
        let mut held = self.held.lock().expect("lock state poisoned");
        match recorded {
            None => {
                *held = None;
                return Err(LocalError::NotLocked {
                    path: self.path.clone(),
                }
                .into());
            }
            Some(r) if r.id != id => {
                return Err(LocalError::LockMismatch {
                    path: self.path.clone(),
                    requested: id.to_owned(),
                    held: r.id,
                }
                .into());
            }
            Some(_) => {}
        }
        match fs::remove_file(&lock_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io("remove the lock file", &lock_path)(e)),
        }
        // Dropping the open file releases the OS lock.
        if held.as_ref().is_some_and(|h| h.id == id) {
            *held = None;
        }
        Ok(())
    }
}

/// `<dir>/<prefix><file name><suffix>` for a path's sibling file.
fn sibling(path: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_STATE_FILE.to_owned());
    path.with_file_name(format!("{prefix}{name}{suffix}"))
}

/// Write `bytes` to `path` so that a crash at any point leaves either the old
/// or the new content: a temporary file in the same folder (mode 0600), fsync,
/// rename over `path`, fsync the folder. `write` fills the temporary file (the
/// tests pass one that fails halfway).
///
/// # Errors
/// Any I/O error; the temporary file is removed and `path` is untouched.
pub(crate) fn write_atomically(
    path: &Path,
    bytes: &[u8],
    write: impl FnOnce(&mut File, &[u8]) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".talosprov-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    set_private(tmp.as_file())?;
    write(tmp.as_file_mut(), bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Write a file with mode 0600, atomically (for `output --out-file`).
///
/// # Errors
/// Any I/O error, with `path` untouched.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically(path, bytes, |f, b| f.write_all(b))
}

#[cfg(unix)]
fn set_private(file: &File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(fs::Permissions::from_mode(0o600))
}

#[cfg(not(unix))]
fn set_private(_file: &File) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, path: &Path) -> bool {
    path.exists()
}

/// This machine's host name (as `Who` records it), or `localhost`.
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether a lock holder still runs: only known for a pid on this host, and
/// only where `/proc` exists.
fn holder_process(holder: &LockInfo) -> HolderProcess {
    let (Some(pid), Some(host)) = (holder.pid, holder.host()) else {
        return HolderProcess::Unknown;
    };
    if host != host_name() || !Path::new("/proc/self").exists() {
        return HolderProcess::Unknown;
    }
    if Path::new(&format!("/proc/{pid}")).exists() {
        HolderProcess::Running
    } else {
        HolderProcess::Gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str, pid: u32) -> LockInfo {
        LockInfo {
            id: id.to_owned(),
            operation: "apply".to_owned(),
            who: format!("alice@{}", host_name()),
            version: "0.1.0".to_owned(),
            created: "2026-01-02T03:04:05Z".to_owned(),
            pid: Some(pid),
            ..LockInfo::default()
        }
    }

    fn backend(dir: &tempfile::TempDir) -> LocalBackend {
        LocalBackend::new(dir.path().join(DEFAULT_STATE_FILE))
    }

    #[tokio::test]
    async fn failed_write_leaves_the_old_state_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        b.put(b"{\"serial\":1}").await.unwrap();
        let err = write_atomically(b.path(), b"{\"serial\":2, \"half", |f, bytes| {
            f.write_all(&bytes[..8])?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(b.get().await.unwrap().unwrap(), b"{\"serial\":1}");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [DEFAULT_STATE_FILE]);
    }

    #[tokio::test]
    async fn first_write_of_a_run_keeps_the_previous_state_as_backup() {
        let dir = tempfile::tempdir().unwrap();
        backend(&dir).put(b"run 1").await.unwrap();
        let b = backend(&dir);
        b.put(b"run 2, step 1").await.unwrap();
        b.put(b"run 2, step 2").await.unwrap();
        assert_eq!(fs::read(b.backup_path()).unwrap(), b"run 1");
        assert_eq!(b.get().await.unwrap().unwrap(), b"run 2, step 2");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn state_backup_and_lock_files_have_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        backend(&dir).put(b"one").await.unwrap();
        let b = backend(&dir);
        b.put(b"two").await.unwrap();
        b.lock(&info("l1", std::process::id())).await.unwrap();
        for p in [b.path().to_path_buf(), b.backup_path(), b.lock_path()] {
            let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
    }

    #[tokio::test]
    async fn second_locker_is_told_who_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let first = backend(&dir);
        first
            .lock(&info("first-id", std::process::id()))
            .await
            .unwrap();
        let second = backend(&dir);
        let err = second.lock(&info("second-id", 1)).await.unwrap_err();
        let held = err.lock_held().expect("a lock conflict");
        assert_eq!(held.holder.id, "first-id");
        assert_eq!(held.holder.operation, "apply");
        assert_eq!(held.process, HolderProcess::Running);
        first.unlock("first-id").await.unwrap();
        second.lock(&info("second-id", 1)).await.unwrap();
    }

    #[tokio::test]
    async fn lock_of_a_dead_process_is_reported_stale_and_needs_force_unlock() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        // What a killed holder leaves: the lock file, and no OS lock.
        let dead_pid = u32::MAX - 7;
        fs::write(b.lock_path(), info("dead-id", dead_pid).to_json()).unwrap();
        let err = b
            .lock(&info("new-id", std::process::id()))
            .await
            .unwrap_err();
        let held = err.lock_held().expect("a lock conflict");
        assert_eq!(held.holder.id, "dead-id");
        assert_eq!(held.process, HolderProcess::Gone);
        assert!(
            err.to_string().contains("talosprov force-unlock dead-id"),
            "{err}"
        );

        let wrong = backend(&dir).unlock("other-id").await.unwrap_err();
        assert!(matches!(
            wrong,
            BackendError::Local(LocalError::LockMismatch { .. })
        ));
        backend(&dir).unlock("dead-id").await.unwrap();
        b.lock(&info("new-id", std::process::id())).await.unwrap();
    }

    #[tokio::test]
    async fn unlock_without_a_lock_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = backend(&dir).unlock("nope").await.unwrap_err();
        assert!(matches!(
            err,
            BackendError::Local(LocalError::NotLocked { .. })
        ));
    }
}
