//! The local backend: `talosprov.tfstate` next to the topology file (or
//! `--state PATH`), written atomically with mode 0600, a `.backup` of the state
//! as it was before this run (never replaced by a state that holds less), and
//! a lock file whose OS lock the kernel releases when its holder dies. Follows
//! OpenTofu `internal/states/statemgr/filesystem.go`.

use std::fs::{self, File};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use fs4::fs_std::FileExt;

use super::backend::{Backend, BackendError};
use super::bounded::{
    FileError, MAX_LOCK_INFO_BYTES, MAX_STATE_BYTES, check_regular, nonblocking, read_file,
    read_open,
};
use super::holder::{host_name, liveness};
use crate::backend::LocalError;
use talosprov_base::paths::folder_of;
use talosprov_statefile::lock::{HolderProcess, LockHeld, LockInfo, TakenOver};
use talosprov_statefile::summary::{KeepReason, Summary, keep_backup};

use talosprov_statefile::config::DEFAULT_STATE_FILE;

/// The state file's role in messages.
const STATE: &str = "the state file";
/// The backup's role in messages.
const BACKUP: &str = "the state backup";
/// The lock file's role in messages.
const LOCK: &str = "the lock file";

/// A `.backup` kept as it was by this run, rather than replaced by a state
/// holding less than it (see [`keep_backup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptBackup {
    /// The backup file.
    pub path: PathBuf,
    /// What the backup holds.
    pub backup: Summary,
    /// Why it was kept.
    pub reason: KeepReason,
}

impl std::fmt::Display for KeptBackup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kept {} as it was ({}): {}. Move it elsewhere if you still need it; the next \
             run then backs up the current state",
            self.path.display(),
            self.backup,
            self.reason
        )
    }
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
    kept: Mutex<Option<KeptBackup>>,
}

impl LocalBackend {
    /// A backend for the state file at `path` (it need not exist yet).
    pub fn new(path: PathBuf) -> Self {
        LocalBackend {
            path,
            held: Mutex::new(None),
            backed_up: AtomicBool::new(false),
            kept: Mutex::new(None),
        }
    }

    /// The backup this run kept rather than replace with a state that holds
    /// less (another lineage, an older serial, no secrets, or not a state), if
    /// it did: the command warns with it.
    pub fn kept_backup(&self) -> Option<KeptBackup> {
        self.kept.lock().expect("backup state poisoned").clone()
    }

    /// How to restore the state file from its backup, naming both files and
    /// what the backup holds; or, without a usable backup, what else to do.
    pub fn restore_hint(&self) -> String {
        let (path, backup) = (self.path.display(), self.backup_path());
        match read_file(&backup, BACKUP, MAX_STATE_BYTES) {
            Ok(bytes) => match Summary::of(&bytes) {
                Some(summary) => format!(
                    "restore it from {} ({summary}: the state before the last run that \
                     changed it) with `cp {} {path}`, then run the command again; what that \
                     run created is not in the backup, and the next plan lists it as \
                     conflicts, each with its `talosprov import` command",
                    backup.display(),
                    backup.display()
                ),
                None => format!(
                    "{} is not a readable state either: restore {path} from your own copy of \
                     the state, or import the cluster's secrets into a new state with \
                     `talosprov secrets import`",
                    backup.display()
                ),
            },
            Err(_) if self.path.exists() => format!(
                "there is no readable {} to restore it from: restore {path} from your own copy \
                 of the state; if no cluster was ever applied from it, delete {path}",
                backup.display()
            ),
            Err(_) => format!(
                "there is no readable {} to restore it from: restore {path} from your own copy \
                 of the state",
                backup.display()
            ),
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
        match read_file(&lock_path, LOCK, MAX_LOCK_INFO_BYTES) {
            Ok(bytes) if bytes.is_empty() => Ok(None),
            // An unreadable lock file still means locked: report what we can.
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).unwrap_or_default())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Open the lock file and take its OS lock, making sure the file we locked
    /// is still the one at the path (another process may have removed it while
    /// we waited). `None` when another live process holds the OS lock.
    fn open_and_lock(&self) -> Result<Option<File>, BackendError> {
        let lock_path = self.lock_path();
        let not_a_file = |meta: &fs::Metadata| -> Result<(), BackendError> {
            check_regular(meta, MAX_LOCK_INFO_BYTES).map_err(|problem| {
                FileError {
                    file: LOCK,
                    path: lock_path.clone(),
                    problem,
                }
                .into()
            })
        };
        loop {
            // Judged before it is opened (opening a FIFO for writing would
            // wait for a reader), and again once open.
            match fs::metadata(&lock_path) {
                Ok(meta) => not_a_file(&meta)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io("open the lock file", &lock_path)(e)),
            }
            let file = nonblocking()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock_path)
                .map_err(self.io("open the lock file", &lock_path))?;
            not_a_file(
                &file
                    .metadata()
                    .map_err(self.io("open the lock file", &lock_path))?,
            )?;
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

    fn restore_hint(&self) -> Option<String> {
        Some(LocalBackend::restore_hint(self))
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, BackendError> {
        match read_file(&self.path, STATE, MAX_STATE_BYTES) {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
                Err(BackendError::Local(LocalError::EmptyState {
                    path: self.path.clone(),
                    restore: self.restore_hint(),
                }))
            }
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn put(&self, document: &[u8]) -> Result<(), BackendError> {
        if !self.backed_up.load(Ordering::SeqCst) {
            match read_file(&self.path, STATE, MAX_STATE_BYTES) {
                Ok(previous) => {
                    let backup = self.backup_path();
                    let held = match read_file(&backup, BACKUP, MAX_STATE_BYTES) {
                        Ok(bytes) => Summary::of(&bytes),
                        Err(e) if e.is_not_found() => None,
                        Err(e) => return Err(e.into()),
                    };
                    let reason = keep_backup(held.as_ref(), Summary::of(&previous).as_ref());
                    match (reason, held) {
                        (Some(reason), Some(summary)) => {
                            *self.kept.lock().expect("backup state poisoned") = Some(KeptBackup {
                                path: backup,
                                backup: summary,
                                reason,
                            });
                        }
                        _ => write_atomically(&backup, &previous, |f, b| f.write_all(b))
                            .map_err(self.io("write the state backup", &backup))?,
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            self.backed_up.store(true, Ordering::SeqCst);
        }
        self.write_document(document)
    }

    async fn lock(&self, info: &LockInfo) -> Result<Option<TakenOver>, BackendError> {
        let Some(mut file) = self.open_and_lock()? else {
            // Another open file holds the OS lock: its process runs, here or on
            // a host sharing this folder.
            let holder = self.read_lock_info()?.unwrap_or_default();
            return Err(BackendError::Locked(Box::new(LockHeld {
                process: running_or_unknown(&holder),
                holder,
            })));
        };
        let lock_path = self.lock_path();
        let recorded = read_open(&mut file, MAX_LOCK_INFO_BYTES).map_err(|problem| {
            BackendError::from(FileError {
                file: LOCK,
                path: lock_path.clone(),
                problem,
            })
        })?;
        let mut taken_over = None;
        if !recorded.iter().all(u8::is_ascii_whitespace) {
            // Our OS lock succeeded, so the recorded holder ended without
            // unlocking, or runs on another host sharing this folder. A holder
            // of this host whose process is gone (the kernel released its OS
            // lock) is taken over; any other keeps the lock until
            // `force-unlock`, as in OpenTofu.
            let holder: LockInfo = serde_json::from_slice(&recorded).unwrap_or_default();
            let process = liveness(&holder);
            if process != HolderProcess::Gone {
                let _ = FileExt::unlock(&file);
                return Err(BackendError::Locked(Box::new(LockHeld { holder, process })));
            }
            taken_over = Some(TakenOver { holder });
        }
        if !recorded.is_empty() {
            file.set_len(0)
                .and_then(|()| file.rewind())
                .map_err(self.io("rewrite the lock file", &lock_path))?;
        }
        let mut body = info.to_json();
        body.push(b'\n');
        file.write_all(&body)
            .and_then(|()| file.sync_all())
            .map_err(self.io("write the lock file", &lock_path))?;
        // A bare file name (`--state s.tfstate`) lives in `.`.
        sync_dir(folder_of(&lock_path)).map_err(self.io("sync the folder of", &lock_path))?;
        *self.held.lock().expect("lock state poisoned") = Some(HeldLock {
            id: info.id.clone(),
            _file: file,
        });
        Ok(taken_over)
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
            Some(r) => {
                if held.as_ref().is_none_or(|h| h.id != id) {
                    // Another run's lock (`force-unlock`): only while no live
                    // process holds its OS lock, which is held for the whole run.
                    let Some(file) = self.open_and_lock()? else {
                        return Err(BackendError::HolderRunning(Box::new(LockHeld {
                            process: running_or_unknown(&r),
                            holder: r,
                        })));
                    };
                    let removed = fs::remove_file(&lock_path);
                    drop(file);
                    return match removed {
                        Ok(()) => Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                        Err(e) => Err(self.io("remove the lock file", &lock_path)(e)),
                    };
                }
            }
        }
        match fs::remove_file(&lock_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(self.io("remove the lock file", &lock_path)(e)),
        }
        // Dropping the open file releases the OS lock.
        *held = None;
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
    let dir = folder_of(path);
    remove_stale_temporaries(dir);
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)?;
    // Held while it is written: a temporary file whose lock is free was
    // left by a killed run (the kernel drops the lock with the process).
    let _ = tmp.as_file().try_lock();
    set_private(tmp.as_file())?;
    write(tmp.as_file_mut(), bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// The name of a temporary file [`write_atomically`] makes: `.talosprov-`,
/// random letters, `.tmp`.
const TEMP_PREFIX: &str = ".talosprov-";
const TEMP_SUFFIX: &str = ".tmp";

/// Remove from `dir` the temporary files of writes a killed run left: those
/// whose lock nobody holds (a write in flight holds its own). Best effort: a
/// file that cannot be read or removed stays.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(TEMP_PREFIX)
            || !name.ends_with(TEMP_SUFFIX)
            || !entry.file_type().is_ok_and(|t| t.is_file())
        {
            continue;
        }
        let free = File::open(entry.path()).is_ok_and(|f| f.try_lock().is_ok());
        if free {
            let _ = std::fs::remove_file(entry.path());
        }
    }
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

/// A holder whose OS lock is held runs: on this host when its lock info says
/// so (or says nothing yet: it is being written), else somewhere not known.
fn running_or_unknown(holder: &LockInfo) -> HolderProcess {
    if holder.who.is_empty() || holder.host() == Some(host_name().as_str()) {
        HolderProcess::Running
    } else {
        HolderProcess::Unknown
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

    #[test]
    fn a_write_removes_the_temporary_files_killed_runs_left_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".talosprov-AbC123.tmp");
        std::fs::write(&stale, b"half a state").unwrap();
        let live = dir.path().join(".talosprov-XyZ789.tmp");
        std::fs::write(&live, b"being written").unwrap();
        let held = File::open(&live).unwrap();
        held.try_lock().unwrap();
        let other = dir.path().join("notes.tmp");
        std::fs::write(&other, b"mine").unwrap();
        let path = dir.path().join("talosprov.tfstate");
        write_atomically(&path, b"{}", |f, b| f.write_all(b)).unwrap();
        assert!(!stale.exists(), "left by a killed run");
        assert!(live.exists(), "another write in flight");
        assert!(other.exists());
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 3, "no temporary file of its own left");
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
    async fn lock_of_a_dead_process_on_this_host_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        // What a killed holder leaves: the lock file, and no OS lock.
        let dead_pid = u32::MAX - 7;
        fs::write(b.lock_path(), info("dead-id", dead_pid).to_json()).unwrap();
        let taken = b
            .lock(&info("new-id", std::process::id()))
            .await
            .unwrap()
            .expect("taken over");
        assert_eq!(taken.holder.id, "dead-id");
        assert!(taken.to_string().contains(&format!("process {dead_pid}")));
        let recorded: LockInfo = serde_json::from_slice(&fs::read(b.lock_path()).unwrap()).unwrap();
        assert_eq!(
            recorded.id, "new-id",
            "the lock file names the new holder only"
        );
        b.unlock("new-id").await.unwrap();
        assert!(!b.lock_path().exists());
    }

    #[tokio::test]
    async fn lock_left_on_another_host_still_needs_force_unlock() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        let mut elsewhere = info("far-id", 4242);
        elsewhere.who = "bob@elsewhere.invalid".to_owned();
        fs::write(b.lock_path(), elsewhere.to_json()).unwrap();
        let err = b
            .lock(&info("new-id", std::process::id()))
            .await
            .unwrap_err();
        let held = err.lock_held().expect("a lock conflict");
        assert_eq!(held.holder.id, "far-id");
        assert_eq!(held.process, HolderProcess::Unknown);
        assert!(
            err.to_string().contains("talosprov force-unlock far-id"),
            "{err}"
        );

        let wrong = backend(&dir).unlock("other-id").await.unwrap_err();
        assert!(matches!(
            wrong,
            BackendError::Local(LocalError::LockMismatch { .. })
        ));
        backend(&dir).unlock("far-id").await.unwrap();
        b.lock(&info("new-id", std::process::id())).await.unwrap();
    }

    #[tokio::test]
    async fn force_unlock_refuses_a_lock_whose_holder_runs() {
        let dir = tempfile::tempdir().unwrap();
        let holder = backend(&dir);
        holder
            .lock(&info("live-id", std::process::id()))
            .await
            .unwrap();
        let before = fs::read(holder.lock_path()).unwrap();
        let err = backend(&dir).unlock("live-id").await.unwrap_err();
        let BackendError::HolderRunning(held) = &err else {
            panic!("expected a refusal, got {err}");
        };
        assert_eq!(held.process, HolderProcess::Running);
        assert!(err.to_string().contains("still running"), "{err}");
        assert_eq!(fs::read(holder.lock_path()).unwrap(), before);
        // The holder itself releases it.
        holder.unlock("live-id").await.unwrap();
        assert!(!holder.lock_path().exists());
    }

    /// A plain state document of `lineage` at `serial`, with or without secrets.
    fn doc(lineage: u128, serial: u64, secrets: bool) -> Vec<u8> {
        let mut s = talosprov_statefile::format::State::new(uuid::Uuid::from_u128(lineage));
        s.serial = serial;
        if secrets {
            s.secrets = Some(talosprov_base::sensitive::Sensitive::new("cluster: {}\n"));
        }
        s.to_json()
    }

    #[tokio::test]
    async fn backup_is_never_replaced_by_a_state_that_holds_less() {
        let good = doc(1, 9, true);
        for (what, previous) in [
            ("empty", b"".to_vec()),
            ("not a state", b"<html>".to_vec()),
            ("another lineage", doc(2, 30, true)),
            ("an older serial", doc(1, 8, true)),
            ("no secrets", doc(1, 10, false)),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let b = backend(&dir);
            fs::write(b.backup_path(), &good).unwrap();
            fs::write(b.path(), &previous).unwrap();
            b.put(&doc(1, 11, true)).await.unwrap();
            assert_eq!(fs::read(b.backup_path()).unwrap(), good, "{what}");
            let kept = b
                .kept_backup()
                .unwrap_or_else(|| panic!("{what}: not reported"));
            assert_eq!(kept.backup.serial, 9, "{what}");
            assert!(kept.to_string().contains("kept "), "{what}: {kept}");
        }
    }

    #[tokio::test]
    async fn backup_follows_a_state_that_holds_as_much_or_more() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        fs::write(b.backup_path(), doc(1, 9, true)).unwrap();
        fs::write(b.path(), doc(1, 10, true)).unwrap();
        b.put(&doc(1, 11, true)).await.unwrap();
        assert_eq!(fs::read(b.backup_path()).unwrap(), doc(1, 10, true));
        assert_eq!(b.kept_backup(), None);
    }

    #[tokio::test]
    async fn empty_state_file_is_an_error_naming_it_and_its_backup() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        fs::write(b.backup_path(), doc(1, 9, true)).unwrap();
        for blank in [&b""[..], b"  \n\n"] {
            fs::write(b.path(), blank).unwrap();
            let err = b.get().await.unwrap_err();
            assert!(
                matches!(err, BackendError::Local(LocalError::EmptyState { .. })),
                "{err}"
            );
            let text = err.to_string();
            assert!(text.contains("talosprov.tfstate is empty"), "{text}");
            assert!(
                text.contains("talosprov.tfstate.backup (serial 9"),
                "{text}"
            );
            assert!(text.contains("`cp "), "{text}");
        }
        fs::remove_file(b.backup_path()).unwrap();
        let text = b.get().await.unwrap_err().to_string();
        assert!(text.contains("there is no readable"), "{text}");
    }

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo");
        assert!(made.success());
    }

    /// `fut`, failing the test when it takes longer than 20 s.
    async fn soon<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(std::time::Duration::from_secs(20), fut)
            .await
            .expect("finished within 20 s")
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn special_state_backup_and_lock_files_are_refused_naming_them() {
        let zero = LocalBackend::new(PathBuf::from("/dev/zero"));
        let text = soon(zero.get()).await.unwrap_err().to_string();
        assert_eq!(
            text,
            "cannot read the state file /dev/zero: it is a character device, not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        mkfifo(b.path());
        let text = soon(b.get()).await.unwrap_err().to_string();
        assert!(text.contains(&b.path().display().to_string()), "{text}");
        assert!(text.ends_with("it is a FIFO, not a regular file"), "{text}");

        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        mkfifo(&b.lock_path());
        let e = soon(b.lock(&info("l1", std::process::id())))
            .await
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("cannot read the lock file"), "{text}");
        assert!(
            text.contains(&b.lock_path().display().to_string()),
            "{text}"
        );
        let e = soon(b.unlock("l1")).await.unwrap_err();
        assert!(e.to_string().contains("it is a FIFO"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        fs::write(b.path(), doc(1, 1, true)).unwrap();
        mkfifo(&b.backup_path());
        let text = soon(b.put(&doc(1, 2, true))).await.unwrap_err().to_string();
        assert!(text.contains("cannot read the state backup"), "{text}");
        assert_eq!(fs::read(b.path()).unwrap(), doc(1, 1, true));
    }

    #[tokio::test]
    async fn a_folder_or_an_oversized_state_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        fs::create_dir(b.path()).unwrap();
        let text = soon(b.get()).await.unwrap_err().to_string();
        assert!(
            text.ends_with("it is a folder, not a regular file"),
            "{text}"
        );

        let dir = tempfile::tempdir().unwrap();
        let b = backend(&dir);
        File::create(b.path())
            .unwrap()
            .set_len(MAX_STATE_BYTES + 1)
            .unwrap();
        let text = soon(b.get()).await.unwrap_err().to_string();
        assert!(text.contains(&b.path().display().to_string()), "{text}");
        assert!(
            text.contains(&format!("{} bytes or more", MAX_STATE_BYTES + 1)),
            "{text}"
        );
        assert!(text.contains("limit of 256 MiB"), "{text}");
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
