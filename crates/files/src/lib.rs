//! The core's input files read from the disk, and its environment read from
//! the process: the I/O half of [`talosprov_base::inputs`]. [`Disk`] follows
//! symlinks (as a shell glob over a folder would), names what a path is when
//! it is not a regular file (a dangling symlink, a loop, a FIFO, a socket, a
//! device) without opening it, and reads at most one byte past
//! [`MAX_INPUT_BYTES`] of any file.

#![warn(missing_docs)]

use std::io::{self, Read as _};
use std::path::Path;

use talosprov_base::diagnostics::Diagnostic;
use talosprov_base::inputs::{Inputs, Listed, decode_input};
use talosprov_base::limits::{MAX_INPUT_BYTES, ReadError};
use talosprov_patch::set::PatchSet;
use talosprov_topology as topology;
use talosprov_topology::model::{Environment, PROXMOX_ENDPOINT_ENV, Topology};
use talosprov_topology::{LoadError, Loaded};

/// The local file system as the core's [`Inputs`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Disk;

/// `ELOOP`: too many levels of symbolic links.
#[cfg(unix)]
const ELOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const ELOOP: i32 = -1;

/// What a path is when it is not a regular file or a folder, following
/// symlinks: `Some("a dangling symlink")`, `Some("a symlink loop")`,
/// `Some("a FIFO")`, `Some("a socket")`, `Some("a device file")`; `None` for a
/// regular file, a folder, or a path that does not exist (which the caller
/// reports as missing). Nothing is opened, so a FIFO cannot block.
pub fn special_kind(path: &Path) -> Option<&'static str> {
    let link = std::fs::symlink_metadata(path).ok()?;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if link.file_type().is_symlink() => {
            return Some(if e.raw_os_error() == Some(ELOOP) {
                "a symlink loop"
            } else {
                "a dangling symlink"
            });
        }
        Err(_) => return None,
    };
    let t = meta.file_type();
    if t.is_file() || t.is_dir() {
        return None;
    }
    Some(kind_of(t))
}

/// What a file that is neither a regular file nor a folder is, in words.
fn kind_of(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device file";
        }
    }
    let _ = t;
    "not a regular file"
}

impl Inputs for Disk {
    fn read(&self, path: &Path) -> Result<String, ReadError> {
        // Opened without blocking (a FIFO would wait for a writer), then
        // judged by what was opened: one open and one fstat for a plain file.
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.custom_flags(libc::O_NONBLOCK);
        }
        let file = match options.open(path) {
            Ok(f) => f,
            Err(e) => {
                return Err(match special_kind(path) {
                    Some(what) => ReadError::NotAFile { what },
                    None => ReadError::Io(e),
                });
            }
        };
        let meta = file.metadata().map_err(ReadError::Io)?;
        if meta.is_dir() {
            return Err(ReadError::NotAFile { what: "a folder" });
        }
        if !meta.is_file() {
            return Err(ReadError::NotAFile {
                what: kind_of(meta.file_type()),
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).min(1 << 16));
        file.take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(ReadError::Io)?;
        decode_input(bytes)
    }

    fn kind(&self, path: &Path) -> Option<&'static str> {
        if let Some(what) = special_kind(path) {
            return Some(what);
        }
        std::fs::metadata(path)
            .ok()
            .filter(std::fs::Metadata::is_file)
            .map(|_| "a regular file")
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<Listed>> {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            // The folder listing says what a plain file or folder is; only a
            // symlink or something stranger needs a look of its own.
            let kind = entry.file_type()?;
            if kind.is_file() || kind.is_dir() {
                out.push(Listed {
                    name: entry.file_name(),
                    len: if kind.is_dir() {
                        0
                    } else {
                        entry.metadata()?.len()
                    },
                    is_dir: kind.is_dir(),
                    special: None,
                });
                continue;
            }
            // What is neither a file nor a folder is kept, to be named when read.
            if let Some(what) = special_kind(&path) {
                out.push(Listed {
                    name: entry.file_name(),
                    len: 0,
                    is_dir: false,
                    special: Some(what),
                });
                continue;
            }
            let meta = std::fs::metadata(&path)?;
            out.push(Listed {
                name: entry.file_name(),
                len: if meta.is_dir() { 0 } else { meta.len() },
                is_dir: meta.is_dir(),
                special: None,
            });
        }
        Ok(out)
    }
}

/// The topology's [`Environment`] from the process: `PROXMOX_VE_ENDPOINT`
/// when set and not blank.
pub fn environment() -> Environment {
    Environment {
        proxmox_endpoint: std::env::var(PROXMOX_ENDPOINT_ENV)
            .ok()
            .filter(|s| !s.trim().is_empty()),
        recorded_pools: Default::default(),
        host_capacity: Default::default(),
    }
}

/// Read and validate the topology file at `file` from the disk, with the
/// process environment ([`topology::load`] over [`Disk`] and [`environment`]).
///
/// # Errors
/// [`LoadError::Read`] when the file cannot be read; problems in its content
/// are diagnostics in the result.
pub fn load_topology(file: &Path) -> Result<Loaded, LoadError> {
    topology::load(file, &Disk, &environment())
}

/// [`load_topology`], with the pools' members a state records kept where
/// they are ([`topology::pools`]).
///
/// # Errors
/// As [`load_topology`].
pub fn load_topology_with(
    file: &Path,
    recorded_pools: std::collections::BTreeMap<
        String,
        Vec<talosprov_statefile::format::RecordedMember>,
    >,
) -> Result<Loaded, LoadError> {
    load_topology_placed(file, recorded_pools, Default::default())
}

/// [`load_topology_with`], with new pool members placed by what each Proxmox
/// host has free (`capacity`, read by a plan; see [`topology::pools`]).
///
/// # Errors
/// As [`load_topology`].
pub fn load_topology_placed(
    file: &Path,
    recorded_pools: std::collections::BTreeMap<
        String,
        Vec<talosprov_statefile::format::RecordedMember>,
    >,
    capacity: std::collections::BTreeMap<String, topology::pools::HostCapacity>,
) -> Result<Loaded, LoadError> {
    let env = Environment {
        recorded_pools,
        host_capacity: capacity,
        ..environment()
    };
    topology::load(file, &Disk, &env)
}

/// List and read a topology's patch tree from the disk ([`PatchSet::load`]
/// over [`Disk`]).
///
/// # Errors
/// A `P003 unreadable-patch-tree` diagnostic when a folder cannot be listed;
/// problems with single files are kept in the set.
pub fn load_patches(topology: &Topology) -> Result<PatchSet, Vec<Diagnostic>> {
    PatchSet::load(topology, &Disk)
}

/// Write a file that holds secrets (a machine config, a saved plan): its
/// folder created if missing, mode 0600 on Unix (an existing file's mode is
/// tightened too, since `open` keeps it), then synced to disk.
///
/// # Errors
/// Any I/O error creating the folder, opening, writing or syncing.
pub fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    std::fs::create_dir_all(talosprov_base::paths::folder_of(path))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(contents)?;
    file.sync_all()
}

/// Replace the contents of an existing file (a patch file rewritten by `patches migrate`),
/// keeping its permissions: the new text goes to a temporary file beside it, is synced, and
/// is renamed over the original, so a crash leaves either the old file or the new one.
///
/// # Errors
/// Any I/O error reading the file's metadata, writing or syncing the temporary file, or
/// renaming it (the temporary file is then removed).
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    let permissions = std::fs::metadata(path)?.permissions();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.talosprov-{}", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.set_permissions(permissions)?;
        file.write_all(contents)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Render the `manifests` add-ons of `topology` from the disk (see
/// [`talosprov_addon::render_manifests`]): the add-ons that rendered,
/// and every problem.
pub fn render_addons(
    topology: &Topology,
) -> (
    Vec<talosprov_addon::manifests::RenderedAddon>,
    Vec<Diagnostic>,
) {
    let kubernetes = talosprov_addon::manifests::kubernetes_version(topology);
    talosprov_addon::manifests::render_manifests(topology, &Disk, &kubernetes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_files_are_bounded_and_located() {
        let dir = tempfile::tempdir().expect("dir");
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'a'; (MAX_INPUT_BYTES + 10) as usize]).expect("write");
        assert!(matches!(
            Disk.read(&big),
            Err(ReadError::TooLarge { bytes }) if bytes == MAX_INPUT_BYTES + 1
        ));
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, b"a: 1\nb: \xff\n").expect("write");
        let e = Disk.read(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is not UTF-8 text: invalid byte at line 2 (byte offset 8)"
        );
        assert!(matches!(
            Disk.read(dir.path()),
            Err(ReadError::NotAFile { what: "a folder" })
        ));
        #[cfg(unix)]
        {
            let dangling = dir.path().join("dangling.yaml");
            std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).expect("symlink");
            assert_eq!(special_kind(&dangling), Some("a dangling symlink"));
            let looping = dir.path().join("loop.yaml");
            std::os::unix::fs::symlink(&looping, &looping).expect("symlink");
            assert_eq!(special_kind(&looping), Some("a symlink loop"));
            assert_eq!(special_kind(Path::new("/dev/null")), Some("a device file"));
            assert_eq!(special_kind(&bad), None);
            let listed = Disk.list(dir.path()).expect("list");
            let dangling = listed
                .iter()
                .find(|l| l.name == "dangling.yaml")
                .expect("listed");
            assert_eq!(dangling.special, Some("a dangling symlink"));
        }
        assert!(
            Disk.list(&dir.path().join("missing"))
                .expect("list")
                .is_empty()
        );
    }

    #[cfg(unix)]
    #[test]
    fn private_files_are_0600_even_over_an_open_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("out/sub/cp-1.yaml");
        write_private(&path, b"machine: {}\n").expect("write");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write_private(&path, b"x").expect("write again");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).expect("read"), b"x");
    }

    #[test]
    fn the_environment_ignores_a_blank_endpoint() {
        // Only read here; the variable is not set by this test.
        let env = environment();
        if let Some(e) = env.proxmox_endpoint {
            assert!(!e.trim().is_empty());
        }
    }
}
