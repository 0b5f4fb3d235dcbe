//! Where an archive's bytes go while it is written, and what is left when a
//! writer never finished:
//! - to S3, object_store's multipart writer: nothing is visible until the
//!   upload completes, and an abort deletes its parts;
//! - to a folder, `<archive>.partial` beside it, held under an exclusive
//!   lock (`flock`) while it is written, renamed to the archive once synced.
//!   The kernel drops the lock when the process ends however it ends, so a
//!   partial file whose lock can be taken is one a killed run left behind
//!   ([`abandoned_in`]), and one whose lock is held is another run's upload
//!   in flight, never touched.
//!
//! object_store's own folder writer stages into `<archive>#<n>` without a
//! lock; such files from earlier versions are abandoned by definition now
//! and removed by [`abandoned_in`]'s caller as well.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, AsyncWriteExt as _};

/// The suffix of an archive being written to a folder.
pub const PARTIAL_SUFFIX: &str = ".partial";

/// An upload in progress.
pub(crate) enum Upload {
    /// To an object store (S3).
    Store(object_store::buffered::BufWriter),
    /// To a folder.
    Folder(FolderUpload),
}

impl Upload {
    /// Complete it: the object exists once this returns.
    pub(crate) async fn finish(&mut self) -> io::Result<()> {
        match self {
            Upload::Store(w) => w.shutdown().await,
            Upload::Folder(f) => f.finish().await,
        }
    }

    /// Give up: nothing is left (the multipart upload is aborted, the
    /// partial file removed).
    pub(crate) async fn abort(&mut self) {
        match self {
            Upload::Store(w) => {
                let _ = w.abort().await;
            }
            Upload::Folder(f) => f.abort(),
        }
    }
}

impl AsyncWrite for Upload {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upload::Store(w) => Pin::new(w).poll_write(cx, buf),
            Upload::Folder(f) => Pin::new(&mut f.file).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upload::Store(w) => Pin::new(w).poll_flush(cx),
            Upload::Folder(f) => Pin::new(&mut f.file).poll_flush(cx),
        }
    }

    /// Only flushes: [`Upload::finish`] completes an upload.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// An archive being written to `<archive>.partial` in a folder, under its
/// lock. Dropped unfinished, it removes the partial file.
pub(crate) struct FolderUpload {
    file: tokio::fs::File,
    /// The same open file, holding the lock until it is closed.
    _lock: std::fs::File,
    partial: PathBuf,
    target: PathBuf,
    done: bool,
}

impl FolderUpload {
    /// Start `object` in `dir`: `<object>.partial` created (mode 0600; an
    /// existing one is an error, never overwritten) and locked.
    pub(crate) fn start(dir: &Path, object: &str) -> io::Result<FolderUpload> {
        let partial = dir.join(format!("{object}{PARTIAL_SUFFIX}"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let lock = options.open(&partial)?;
        if let Err(e) = lock.try_lock() {
            let _ = std::fs::remove_file(&partial);
            return Err(io::Error::other(format!(
                "cannot lock {}: {e}",
                partial.display()
            )));
        }
        let file = tokio::fs::File::from_std(lock.try_clone()?);
        Ok(FolderUpload {
            file,
            _lock: lock,
            target: dir.join(object),
            partial,
            done: false,
        })
    }

    /// Sync the partial file, rename it to the archive, sync the folder.
    async fn finish(&mut self) -> io::Result<()> {
        self.file.flush().await?;
        self.file.sync_all().await?;
        tokio::fs::rename(&self.partial, &self.target).await?;
        self.done = true;
        if let Some(dir) = self.target.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }

    fn abort(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.partial);
            self.done = true;
        }
    }
}

impl Drop for FolderUpload {
    fn drop(&mut self) {
        self.abort();
    }
}

/// What a killed run left in the folder `dir` for `cluster`'s archives:
/// partial files whose lock is free, and object_store's staging files
/// (`<archive>#<n>`). A partial file whose lock another process holds is
/// an upload in flight and is not listed. A folder that cannot be read
/// lists as empty (retention's listing then says why).
pub fn abandoned_in(dir: &Path, cluster: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(archive) = left_behind(name) else {
            continue;
        };
        let ours = crate::name::ArchiveName::parse(archive).is_some_and(|n| n.cluster == cluster);
        if !ours || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if name.ends_with(PARTIAL_SUFFIX) && !unlocked(&path) {
            continue;
        }
        out.push(path);
    }
    out.sort();
    out
}

/// The archive name a partial or staging file name is for.
fn left_behind(name: &str) -> Option<&str> {
    if let Some(archive) = name.strip_suffix(PARTIAL_SUFFIX) {
        return archive
            .ends_with(crate::name::ARCHIVE_SUFFIX)
            .then_some(archive);
    }
    let (archive, n) = name.rsplit_once('#')?;
    (archive.ends_with(crate::name::ARCHIVE_SUFFIX)
        && !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit()))
    .then_some(archive)
}

/// Whether nobody holds the lock of the partial file at `path`.
fn unlocked(path: &Path) -> bool {
    match std::fs::OpenOptions::new().read(true).open(path) {
        Ok(f) => f.try_lock().is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARCHIVE: &str = "etcd-20261205T191500.123Z-lab-r7.snapshot.age";

    #[test]
    fn a_partial_file_is_abandoned_only_once_its_writer_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let upload = FolderUpload::start(dir.path(), ARCHIVE).unwrap();
        let partial = dir.path().join(format!("{ARCHIVE}.partial"));
        assert!(partial.exists());
        assert!(
            abandoned_in(dir.path(), "lab").is_empty(),
            "in flight: locked"
        );
        // Forgotten, the upload still holds its lock (its file stays open):
        // still in flight. A partial file nobody holds stands for the one a
        // killed run left.
        std::mem::forget(upload);
        let killed = dir
            .path()
            .join("etcd-20261205T191400.000Z-lab-r6.snapshot.age.partial");
        std::fs::write(&killed, b"half").unwrap();
        let staged = dir
            .path()
            .join("etcd-20261205T191300.000Z-lab-r5.snapshot.age#1");
        std::fs::write(&staged, b"half").unwrap();
        let other = dir
            .path()
            .join("etcd-20261205T191300.000Z-other-r5.snapshot.age#1");
        std::fs::write(&other, b"half").unwrap();
        std::fs::write(dir.path().join("notes.partial"), b"mine").unwrap();
        assert_eq!(abandoned_in(dir.path(), "lab"), vec![staged, killed]);
        assert!(partial.exists());
    }

    #[test]
    fn a_dropped_upload_leaves_nothing_and_a_finished_one_is_the_archive() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut up = Upload::Folder(FolderUpload::start(dir.path(), ARCHIVE).unwrap());
            up.write_all(b"sealed").await.unwrap();
            drop(up);
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
            let mut up = Upload::Folder(FolderUpload::start(dir.path(), ARCHIVE).unwrap());
            up.write_all(b"sealed").await.unwrap();
            up.finish().await.unwrap();
            drop(up);
            assert_eq!(std::fs::read(dir.path().join(ARCHIVE)).unwrap(), b"sealed");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        });
    }
}
