//! The one bounded reader of the files the state crate (and the engine, for a
//! saved plan) reads: the local state, its backup, its lock file, an age key
//! file. A path that is not a regular file (a FIFO, a device such as
//! `/dev/zero`, a socket, a folder) is refused from its metadata before it is
//! opened, the file is opened with `O_NONBLOCK` (so a FIFO swapped in between
//! cannot block either) and judged again by `fstat`, and at most one byte past
//! the limit is read. The same limits bound the http backend's response
//! bodies ([`crate::http`]).

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

/// The largest state document talosprov reads, from a file or an http
/// backend, and the largest saved plan (which holds what a state holds):
/// 256 MiB. A 1000-node state (the most nodes a topology may have) records
/// each node's machine config, some 20 to 60 KiB each with its certificates,
/// plus the add-ons' renderings; encryption adds a third. A larger one is
/// refused before it is read.
pub const MAX_STATE_BYTES: u64 = 256 * 1024 * 1024;

/// The largest lock file (`.<state>.lock.info`, one [`crate::LockInfo`] in
/// JSON, a few hundred bytes) talosprov reads: 64 KiB.
pub const MAX_LOCK_INFO_BYTES: u64 = 64 * 1024;

/// The largest age key file (`TALOSPROV_STATE_AGE_IDENTITY_FILE`,
/// `TALOSPROV_STATE_AGE_RECIPIENTS_FILE`: one key of about 74 bytes a line)
/// talosprov reads: 1 MiB.
pub const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

/// What is wrong with a file that could not be read within its bounds.
#[derive(Debug)]
pub enum Problem {
    /// The path is not a regular file (after following symlinks): `what`
    /// says what it is, e.g. "a FIFO" or "a character device".
    NotAFile {
        /// What the path is.
        what: &'static str,
    },
    /// Larger than the limit; nothing (or only the limit plus one byte) was
    /// read.
    TooLarge {
        /// The size seen, in bytes: the size the file system gives, or the
        /// limit plus one when the file grew while it was read.
        bytes: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// Any other I/O error (not found, permission denied, ...).
    Io(io::Error),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NotAFile { what } => write!(f, "it is {what}, not a regular file"),
            Problem::TooLarge { bytes, limit } => write!(
                f,
                "it is {bytes} bytes or more, over talosprov's limit of {}",
                size_text(*limit)
            ),
            Problem::Io(e) => write!(f, "{e}"),
        }
    }
}

/// A file could not be read within its bounds: which one, and why. The
/// message names the file's role and path, e.g. `cannot read the state file
/// /dev/zero: it is a character device, not a regular file`.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {file} {}: {problem}", path.display())]
pub struct FileError {
    /// What the file is to talosprov, e.g. "the state file".
    pub file: &'static str,
    /// The path given.
    pub path: PathBuf,
    /// Why it could not be read.
    pub problem: Problem,
}

impl FileError {
    /// Whether the file does not exist (which a caller may take as "no state
    /// yet").
    pub fn is_not_found(&self) -> bool {
        matches!(&self.problem, Problem::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// `limit` in words: "256 MiB", "64 KiB" or "100 bytes".
pub fn size_text(limit: u64) -> String {
    if limit >= 1024 * 1024 && limit.is_multiple_of(1024 * 1024) {
        format!("{} MiB", limit / (1024 * 1024))
    } else if limit >= 1024 && limit.is_multiple_of(1024) {
        format!("{} KiB", limit / 1024)
    } else {
        format!("{limit} bytes")
    }
}

/// What a file that is not a regular one is, in words.
pub fn kind_of(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    "not a regular file"
}

/// `Ok` when `meta` is a regular file of at most `limit` bytes.
///
/// # Errors
/// [`Problem::NotAFile`] or [`Problem::TooLarge`].
pub fn check_regular(meta: &Metadata, limit: u64) -> Result<(), Problem> {
    if !meta.is_file() {
        return Err(Problem::NotAFile {
            what: kind_of(meta),
        });
    }
    if meta.len() > limit {
        return Err(Problem::TooLarge {
            bytes: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// Open options that never block on a FIFO (`O_NONBLOCK` on Unix).
pub fn nonblocking() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options
}

/// Read at most `limit` bytes from an open `file`, already judged a regular
/// file; [`Problem::TooLarge`] when there is more (it grew since).
///
/// # Errors
/// [`Problem::TooLarge`] or [`Problem::Io`].
pub fn read_open(file: &mut File, limit: u64) -> Result<Vec<u8>, Problem> {
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(Problem::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Problem::TooLarge {
            bytes: limit + 1,
            limit,
        });
    }
    Ok(bytes)
}

/// The bytes of the regular file at `path`, at most `limit` of them; `file`
/// names its role in the error ("the state file"). Nothing is opened unless
/// the path's metadata says it is a regular file no larger than `limit`, and
/// it is opened without blocking and checked again once open.
///
/// # Errors
/// [`FileError`] naming `file` and `path`: not a regular file, larger than
/// `limit` (its size given), or an I/O error ([`FileError::is_not_found`]
/// when it does not exist).
pub fn read_file(path: &Path, file: &'static str, limit: u64) -> Result<Vec<u8>, FileError> {
    let fail = |problem| FileError {
        file,
        path: path.to_path_buf(),
        problem,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(Problem::Io(e)))?;
    check_regular(&meta, limit).map_err(fail)?;
    let mut opened = nonblocking()
        .read(true)
        .open(path)
        .map_err(|e| fail(Problem::Io(e)))?;
    let meta = opened.metadata().map_err(|e| fail(Problem::Io(e)))?;
    check_regular(&meta, limit).map_err(fail)?;
    read_open(&mut opened, limit).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// `read_file` of `path` in a thread, failing the test when it takes
    /// longer than 20 s (a FIFO would block forever).
    fn read_soon(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
        let path = path.to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        let start = Instant::now();
        std::thread::spawn(move || {
            let _ = tx.send(read_file(&path, "the state file", limit));
        });
        let result = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the read returned");
        assert!(start.elapsed() < Duration::from_secs(20));
        result
    }

    fn refused(path: &Path, limit: u64) -> String {
        let e = read_soon(path, limit).expect_err("refused");
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("the state file"), "{text}");
        text
    }

    #[cfg(unix)]
    #[test]
    fn dev_zero_is_refused_as_a_character_device() {
        let text = refused(Path::new("/dev/zero"), MAX_STATE_BYTES);
        assert_eq!(
            text,
            "cannot read the state file /dev/zero: it is a character device, not a regular file"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("dir");
        let fifo = dir.path().join("state.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let text = refused(&fifo, MAX_STATE_BYTES);
        assert!(text.ends_with("it is a FIFO, not a regular file"), "{text}");
    }

    #[test]
    fn a_folder_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let text = refused(dir.path(), MAX_STATE_BYTES);
        assert!(
            text.ends_with("it is a folder, not a regular file"),
            "{text}"
        );
    }

    #[test]
    fn an_oversized_sparse_file_is_refused_with_its_size_unread() {
        let dir = tempfile::tempdir().expect("dir");
        let big = dir.path().join("big.tfstate");
        let f = File::create(&big).expect("create");
        f.set_len(MAX_STATE_BYTES + 1).expect("set_len");
        let text = refused(&big, MAX_STATE_BYTES);
        assert!(
            text.ends_with(&format!(
                "it is {} bytes or more, over talosprov's limit of 256 MiB",
                MAX_STATE_BYTES + 1
            )),
            "{text}"
        );
    }

    #[test]
    fn a_file_within_the_limit_is_read_and_a_missing_one_is_told_apart() {
        let dir = tempfile::tempdir().expect("dir");
        let small = dir.path().join("s");
        std::fs::write(&small, b"0123456789").expect("write");
        assert_eq!(read_soon(&small, 10).expect("read"), b"0123456789");
        let e = read_soon(&small, 9).expect_err("over");
        assert!(matches!(
            e.problem,
            Problem::TooLarge {
                bytes: 10,
                limit: 9
            }
        ));
        let e = read_soon(&dir.path().join("missing"), 9).expect_err("missing");
        assert!(e.is_not_found(), "{e}");
    }

    #[test]
    fn limits_are_named_in_their_unit() {
        assert_eq!(size_text(MAX_STATE_BYTES), "256 MiB");
        assert_eq!(size_text(MAX_LOCK_INFO_BYTES), "64 KiB");
        assert_eq!(size_text(100), "100 bytes");
    }
}
