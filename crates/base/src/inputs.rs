//! Where the core's input files come from. The core reads no file itself: the
//! caller passes an [`Inputs`], the disk in the binary (`talosprov-files`) or
//! [`MemoryInputs`] in tests, and the core only decides what the bytes mean.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::limits::{MAX_INPUT_BYTES, ReadError};

/// One entry of a listed folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The file name.
    pub name: OsString,
    /// Its size in bytes (0 for a folder).
    pub len: u64,
    /// Whether it is a folder.
    pub is_dir: bool,
    /// What it is when it is neither a regular file nor a folder (a
    /// dangling symlink, a FIFO, ...); reading it as a patch then fails
    /// with a message that says so.
    pub special: Option<&'static str>,
}

impl Listed {
    /// A regular file of `len` bytes.
    pub fn file(name: &str, len: u64) -> Self {
        Listed {
            name: name.into(),
            len,
            is_dir: false,
            special: None,
        }
    }

    /// A folder entry named `name` (its size counts as 0).
    pub fn dir(name: &str) -> Self {
        Listed {
            name: name.into(),
            len: 0,
            is_dir: true,
            special: None,
        }
    }
}

/// The input files the core reads: the topology file and the patch tree.
///
/// An implementation follows symlinks (as a shell glob over a folder would)
/// and bounds every read to [`MAX_INPUT_BYTES`]; [`decode_input`] does the
/// size and UTF-8 checks on the bytes it got.
pub trait Inputs {
    /// The text of the file at `path`.
    ///
    /// # Errors
    /// [`ReadError`]: not a regular file (without opening a FIFO, which could
    /// block), over [`MAX_INPUT_BYTES`], not UTF-8 (with the line and byte
    /// offset), or an I/O error such as a missing file.
    fn read(&self, path: &Path) -> Result<String, ReadError>;

    /// The entries of the folder `dir`, in any order; a folder that does not
    /// exist lists as empty.
    ///
    /// # Errors
    /// An I/O error listing a folder that exists (permissions, say).
    fn list(&self, dir: &Path) -> io::Result<Vec<Listed>>;

    /// What `path` is when it exists and is not a folder, following
    /// symlinks: `Some("a regular file")`, `Some("a FIFO")`, `Some("a device
    /// file")`, `Some("a dangling symlink")`, ...; `None` for a folder or a
    /// path that does not exist. Nothing is opened. The default knows no
    /// path (every one reads as absent).
    fn kind(&self, path: &Path) -> Option<&'static str> {
        let _ = path;
        None
    }
}

/// Check read bytes against the input limits and decode them: over
/// [`MAX_INPUT_BYTES`] is [`ReadError::TooLarge`] (a reader need read at most
/// one byte past the limit to know), invalid UTF-8 is [`ReadError::NotUtf8`]
/// with the 1-based line and 0-based byte offset of the first bad byte.
///
/// # Errors
/// As above.
pub fn decode_input(bytes: Vec<u8>) -> Result<String, ReadError> {
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(ReadError::TooLarge {
            bytes: bytes.len() as u64,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..offset];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        ReadError::NotUtf8 {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            offset,
        }
    })
}

/// Input files held in memory, by path: for tests, and for callers that
/// already have the text. Folders are implied by the files below them.
#[derive(Debug, Clone, Default)]
pub struct MemoryInputs {
    files: BTreeMap<PathBuf, Vec<u8>>,
}

impl MemoryInputs {
    /// No files.
    pub fn new() -> Self {
        MemoryInputs::default()
    }

    /// Add (or replace) the file at `path`.
    pub fn with(mut self, path: impl Into<PathBuf>, bytes: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.into(), bytes.into());
        self
    }
}

impl Inputs for MemoryInputs {
    fn read(&self, path: &Path) -> Result<String, ReadError> {
        match self.files.get(path) {
            Some(bytes) => decode_input(bytes.clone()),
            None if self.files.keys().any(|f| f.starts_with(path)) => {
                Err(ReadError::NotAFile { what: "a folder" })
            }
            None => Err(ReadError::Io(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", path.display()),
            ))),
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<Listed>> {
        let mut out: BTreeMap<OsString, Listed> = BTreeMap::new();
        for (path, bytes) in &self.files {
            let Ok(rest) = path.strip_prefix(dir) else {
                continue;
            };
            let mut parts = rest.components();
            let (Some(first), more) = (parts.next(), parts.next().is_some()) else {
                continue;
            };
            let name = first.as_os_str().to_owned();
            let entry = Listed {
                name: name.clone(),
                len: if more { 0 } else { bytes.len() as u64 },
                is_dir: more,
                special: None,
            };
            out.insert(name, entry);
        }
        Ok(out.into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_utf8_are_checked_on_the_bytes() {
        let big = vec![b'a'; (MAX_INPUT_BYTES + 1) as usize];
        assert!(matches!(
            decode_input(big),
            Err(ReadError::TooLarge { bytes }) if bytes == MAX_INPUT_BYTES + 1
        ));
        let e = decode_input(b"a: 1\nb: \xff\n".to_vec()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is not UTF-8 text: invalid byte at line 2 (byte offset 8)"
        );
        assert_eq!(decode_input(b"a: 1\n".to_vec()).unwrap(), "a: 1\n");
    }

    #[test]
    fn memory_inputs_list_files_and_implied_folders() {
        let m = MemoryInputs::new()
            .with("p/common/10-a.yaml", "x: 1\n")
            .with("p/nodes/n1/10-b.yaml", "")
            .with("p/README.md", "hi");
        let names: Vec<(String, bool, u64)> = m
            .list(Path::new("p"))
            .unwrap()
            .into_iter()
            .map(|l| (l.name.to_string_lossy().into_owned(), l.is_dir, l.len))
            .collect();
        assert_eq!(
            names,
            [
                ("README.md".to_owned(), false, 2),
                ("common".to_owned(), true, 0),
                ("nodes".to_owned(), true, 0)
            ]
        );
        assert!(m.list(Path::new("missing")).unwrap().is_empty());
        assert_eq!(m.read(Path::new("p/common/10-a.yaml")).unwrap(), "x: 1\n");
        assert!(matches!(
            m.read(Path::new("p/common")),
            Err(ReadError::NotAFile { .. })
        ));
        assert!(matches!(m.read(Path::new("p/none")), Err(ReadError::Io(_))));
    }
}
