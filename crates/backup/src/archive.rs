//! Streaming an archive in and out without holding it whole:
//! - [`ArchiveWriter`] takes the plaintext as an `AsyncWrite` (what Talos's
//!   `EtcdSnapshot` stream is copied into), digests it (SHA-256), encrypts it
//!   with age in 64 KiB chunks and uploads it through a 64 KiB pipe to the
//!   destination's multipart writer. Nothing is uploaded as complete until
//!   [`ArchiveWriter::finish`]: a writer dropped or aborted leaves no object.
//! - [`ArchiveReader`] downloads, decrypts and digests an archive as an
//!   `AsyncRead` (what Talos's `EtcdRecover` upload reads), and
//!   [`verify`] reads one through to check it against its manifest.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, DuplexStream, ReadBuf};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::compat::{
    Compat, FuturesAsyncReadCompatExt as _, FuturesAsyncWriteCompatExt as _,
    TokioAsyncWriteCompatExt as _,
};

use crate::destination::Destination;
use crate::error::BackupError;
use crate::keys::Keys;
use crate::manifest::Manifest;
use crate::name::ArchiveName;

/// The pipe between age and the upload, bytes.
const PIPE_BYTES: usize = 64 * 1024;

/// A running digest of plaintext: SHA-256 and a byte count, shared between a
/// reader and whoever checks it after the reader was consumed.
#[derive(Debug, Clone, Default)]
pub struct Tally(Arc<Mutex<(Sha256, u64)>>);

impl Tally {
    fn update(&self, bytes: &[u8]) {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        t.0.update(bytes);
        t.1 += bytes.len() as u64;
    }

    /// The size of what went through so far, bytes (without finishing the
    /// digest).
    fn len(&self) -> u64 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// The SHA-256 (hex) and size of what went through so far.
    pub fn digest(&self) -> (String, u64) {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (hex::encode(t.0.clone().finalize()), t.1)
    }

    /// Whether what went through is what `manifest` describes.
    ///
    /// # Errors
    /// [`BackupError::Checksum`] naming both digests.
    pub fn check(&self, manifest: &Manifest, name: &str) -> Result<(), BackupError> {
        let (found, found_bytes) = self.digest();
        if found == manifest.plaintext_sha256 && found_bytes == manifest.plaintext_bytes {
            return Ok(());
        }
        Err(BackupError::Checksum {
            name: name.to_owned(),
            expected: manifest.plaintext_sha256.clone(),
            expected_bytes: manifest.plaintext_bytes,
            found,
            found_bytes,
        })
    }
}

/// A finished archive's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// SHA-256 (hex) of the plaintext.
    pub plaintext_sha256: String,
    /// The plaintext's size, bytes.
    pub plaintext_bytes: u64,
    /// The archive's size, bytes.
    pub encrypted_bytes: u64,
}

type Upload = JoinHandle<std::io::Result<u64>>;

/// Encrypts and uploads what is written to it (see the module's docs).
pub struct ArchiveWriter {
    object: String,
    location: String,
    inner: Option<Compat<age::stream::StreamWriter<Compat<DuplexStream>>>>,
    tally: Tally,
    commit: Option<oneshot::Sender<()>>,
    upload: Option<Upload>,
}

impl std::fmt::Debug for ArchiveWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArchiveWriter({} in {})", self.object, self.location)
    }
}

fn io_error(what: &str, e: impl std::fmt::Display) -> BackupError {
    BackupError::Io(format!("{what}: {e}"))
}

impl ArchiveWriter {
    /// Start the archive `name` in `destination`, sealed to `keys`.
    ///
    /// # Errors
    /// [`BackupError::Key`] without a recipient; [`BackupError::Store`] for a
    /// folder that does not exist; [`BackupError::Io`] when age cannot start.
    pub async fn start(
        destination: &Destination,
        name: &ArchiveName,
        keys: &Keys,
    ) -> Result<ArchiveWriter, BackupError> {
        let object = name.archive();
        let mut upload = destination.upload(&object)?;
        let encryptor = keys.encryptor()?;
        let (ours, mut theirs) = tokio::io::duplex(PIPE_BYTES);
        let (commit, committed) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let copied = tokio::io::copy(&mut theirs, &mut upload).await;
            let failed = match (copied, committed.await) {
                // A failed completion cleans up after itself (a single PUT
                // leaves nothing; object_store aborts a multipart upload whose
                // completion fails), and the writer may not be aborted after it.
                (Ok(n), Ok(())) => return upload.finish().await.map(|()| n),
                (Ok(_), Err(_)) => std::io::Error::other("the snapshot was not finished"),
                (Err(e), _) => e,
            };
            let _ = upload.abort().await;
            Err(failed)
        });
        let writer = match encryptor.wrap_async_output(ours.compat_write()).await {
            Ok(w) => w,
            Err(e) => {
                task.abort();
                return Err(io_error("cannot start age", e));
            }
        };
        Ok(ArchiveWriter {
            object,
            location: destination.location().to_string(),
            inner: Some(writer.compat_write()),
            tally: Tally::default(),
            commit: Some(commit),
            upload: Some(task),
        })
    }

    async fn join(&mut self) -> Result<u64, BackupError> {
        let Some(task) = self.upload.take() else {
            return Err(BackupError::Io("the upload was already joined".to_owned()));
        };
        match task.await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(BackupError::Io(format!(
                "cannot write {} to {}: {}",
                self.object,
                self.location,
                crate::error::chain(&e)
            ))),
            Err(e) => Err(io_error("the upload stopped", e)),
        }
    }

    /// End the age stream and complete the upload.
    ///
    /// # Errors
    /// The upload's error (S3 403 or 500, a full disk), or age's.
    pub async fn finish(mut self) -> Result<Sealed, BackupError> {
        let mut inner = self.inner.take().expect("finish is called once");
        let closed = inner.shutdown().await;
        drop(inner);
        if let Err(e) = closed {
            return Err(self
                .abort()
                .await
                .unwrap_or_else(|| io_error("cannot end age", e)));
        }
        if let Some(commit) = self.commit.take() {
            let _ = commit.send(());
        }
        let encrypted_bytes = self.join().await?;
        let (plaintext_sha256, plaintext_bytes) = self.tally.digest();
        Ok(Sealed {
            plaintext_sha256,
            plaintext_bytes,
            encrypted_bytes,
        })
    }

    /// Give up: nothing is left in the destination. Returns the upload's own
    /// error, if it failed first (the cause of a broken pipe seen by the writer).
    pub async fn abort(mut self) -> Option<BackupError> {
        self.inner = None;
        self.commit = None;
        match self.join().await {
            Ok(_) => None,
            Err(BackupError::Io(m)) if m.contains("was not finished") => None,
            Err(e) => Some(e),
        }
    }
}

impl AsyncWrite for ArchiveWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(Err(std::io::Error::other("the archive is closed")));
        };
        let n = ready!(Pin::new(inner).poll_write(cx, buf))?;
        this.tally.update(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    /// Does nothing: only [`ArchiveWriter::finish`] completes an archive.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

type Download = futures::stream::IntoAsyncRead<
    futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
>;

/// The most an archive may hold, bytes: more than etcd's largest database
/// (its quota is at most 8 GiB) sealed by age. A manifest that says more is
/// refused before anything is read.
pub const MAX_ARCHIVE_BYTES: u64 = 16 << 30;

/// The most of an archive read to find its age header, bytes: a header is
/// its version line, a stanza of about 150 bytes per key, and its MAC line.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// age's version line, which every binary age file starts with.
const AGE_MAGIC: &[u8] = b"age-encryption.org/v1\n";

/// Downloads and decrypts an archive as plaintext (see the module's docs).
pub struct ArchiveReader {
    inner: Compat<age::stream::StreamReader<Download>>,
    tally: Tally,
    /// The plaintext the manifest allows; more is refused as it comes.
    budget: u64,
}

impl std::fmt::Debug for ArchiveReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArchiveReader")
    }
}

impl ArchiveReader {
    /// Open the archive `name` in `destination` with `keys`, bounded by its
    /// `manifest`: the archive must be as large as the manifest says (at
    /// most [`MAX_ARCHIVE_BYTES`]), start with an age header found within
    /// [`MAX_HEADER_BYTES`], and decrypt to no more than the manifest's
    /// plaintext; nothing past those bounds is read or held.
    ///
    /// # Errors
    /// [`BackupError::Store`] when it cannot be read, [`BackupError::NotAFile`]
    /// for a folder's archive that is not a regular file,
    /// [`BackupError::Damaged`] when it is not an age file of the manifest's
    /// size, [`BackupError::Key`] for keys that do not open it.
    pub async fn open(
        destination: &Destination,
        name: &ArchiveName,
        manifest: &Manifest,
        keys: &Keys,
    ) -> Result<ArchiveReader, BackupError> {
        let object = name.archive();
        let damaged = |reason: String| BackupError::Damaged {
            name: object.clone(),
            reason,
        };
        if manifest.encrypted_bytes > MAX_ARCHIVE_BYTES {
            return Err(damaged(format!(
                "its manifest says {} bytes, more than an etcd snapshot archive can be ({} bytes)",
                manifest.encrypted_bytes, MAX_ARCHIVE_BYTES
            )));
        }
        let (size, stream) = destination.download(&object).await?;
        if size != manifest.encrypted_bytes {
            return Err(damaged(format!(
                "it is {size} bytes, and its manifest says {}",
                manifest.encrypted_bytes
            )));
        }
        let stream = with_header(stream).await.map_err(damaged)?;
        let decryptor = age::Decryptor::new_async_buffered(stream.into_async_read())
            .await
            .map_err(|e| damaged(e.to_string()))?;
        let reader = keys.open(decryptor, &object)?;
        Ok(ArchiveReader {
            inner: reader.compat(),
            tally: Tally::default(),
            budget: manifest.plaintext_bytes,
        })
    }

    /// The digest of what was read so far, still readable after the reader is
    /// consumed.
    pub fn tally(&self) -> Tally {
        self.tally.clone()
    }
}

/// `stream` again, once its start is seen to be an age header: age's version
/// line, and the header's end (its `---` MAC line) within
/// [`MAX_HEADER_BYTES`]. What was read to see it is put back in front.
///
/// # Errors
/// Why it is not an age file (the stream's own error included).
async fn with_header(
    mut stream: BoxStream<'static, std::io::Result<bytes::Bytes>>,
) -> Result<BoxStream<'static, std::io::Result<bytes::Bytes>>, String> {
    let mut head = Vec::new();
    loop {
        if head.len() >= AGE_MAGIC.len() && !head.starts_with(AGE_MAGIC) {
            return Err("it is not an age file (no age-encryption.org/v1 header)".to_owned());
        }
        if header_ends(&head) {
            break;
        }
        if head.len() > MAX_HEADER_BYTES {
            return Err(format!(
                "no end of an age header in its first {MAX_HEADER_BYTES} bytes"
            ));
        }
        match stream.try_next().await.map_err(|e| e.to_string())? {
            Some(chunk) => head.extend_from_slice(&chunk),
            None if head.is_empty() => return Err("it is empty".to_owned()),
            None => break,
        }
    }
    let first = futures::stream::iter([Ok(bytes::Bytes::from(head))]);
    Ok(Box::pin(first.chain(stream)))
}

/// Whether `head` holds the end of an age header: a line that starts with
/// `---`, ended by a newline.
fn header_ends(head: &[u8]) -> bool {
    head.windows(4)
        .position(|w| w == b"\n---")
        .is_some_and(|at| head[at + 1..].contains(&b'\n'))
}

impl AsyncRead for ArchiveReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        this.tally.update(read);
        if this.tally.len() > this.budget {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "it decrypts to more than the {} bytes its manifest says",
                this.budget
            ))));
        }
        Poll::Ready(Ok(()))
    }
}

/// Read the archive `name` through, decrypting it, and check it against its
/// manifest, writing nothing anywhere.
///
/// # Errors
/// As [`ArchiveReader::open`]; [`BackupError::Damaged`] when the ciphertext
/// fails age's authentication midway; [`BackupError::Checksum`].
pub async fn verify(
    destination: &Destination,
    name: &ArchiveName,
    manifest: &Manifest,
    keys: &Keys,
) -> Result<(), BackupError> {
    let mut reader = ArchiveReader::open(destination, name, manifest, keys).await?;
    let tally = reader.tally();
    tokio::io::copy(&mut reader, &mut tokio::io::sink())
        .await
        .map_err(|e| BackupError::Damaged {
            name: name.archive(),
            reason: e.to_string(),
        })?;
    tally.check(manifest, &name.archive())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::destination::S3Access;
    use crate::keys::KeyKind;
    use talosprov_base::backup::Location;
    use talosprov_base::sensitive::Sensitive;
    use time::macros::datetime;

    fn plaintext() -> Vec<u8> {
        // Several age chunks (64 KiB) and a recognisable pattern.
        (0..300_000u32).map(|i| (i % 251) as u8).collect()
    }

    async fn seal(dest: &Destination, name: &ArchiveName, keys: &Keys, data: &[u8]) -> Manifest {
        let mut w = ArchiveWriter::start(dest, name, keys).await.unwrap();
        for chunk in data.chunks(10_000) {
            w.write_all(chunk).await.unwrap();
        }
        let sealed = w.finish().await.unwrap();
        let mut m = crate::manifest::sample();
        m.plaintext_sha256 = sealed.plaintext_sha256;
        m.plaintext_bytes = sealed.plaintext_bytes;
        m.encrypted_bytes = sealed.encrypted_bytes;
        m.key = keys.kind();
        dest.write_manifest(name, &m).await.unwrap();
        m
    }

    #[tokio::test]
    async fn an_archive_round_trips_encrypted_at_rest_and_checks_its_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let env = S3Access::default();
        let dest = Destination::open(Location::Folder(dir.path().join("b")), &env, true).unwrap();
        let keys = Keys::cluster(&Sensitive::new("secret-at-rest".to_owned()));
        let name = ArchiveName::new(datetime!(2026-12-05 19:00 UTC), "lab", 7);
        let data = plaintext();
        let manifest = seal(&dest, &name, &keys, &data).await;
        assert_eq!(manifest.plaintext_bytes, data.len() as u64);
        assert!(manifest.encrypted_bytes > manifest.plaintext_bytes);
        assert_eq!(
            dest.list("lab").await.unwrap().complete,
            std::slice::from_ref(&name)
        );
        assert!(dest.list("other").await.unwrap().complete.is_empty());
        // At rest: no 64-byte window of the plaintext is in the archive.
        let stored = std::fs::read(dir.path().join("b").join(name.archive())).unwrap();
        assert!(!stored.windows(64).any(|w| w == &data[1000..1064]));
        assert_eq!(dest.read_manifest(&name).await.unwrap(), manifest);
        verify(&dest, &name, &manifest, &keys).await.unwrap();
        let mut r = ArchiveReader::open(&dest, &name, &manifest, &keys)
            .await
            .unwrap();
        let mut back = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut r, &mut back)
            .await
            .unwrap();
        assert_eq!(back, data);

        // Another cluster's key, a manifest that lies, a damaged archive.
        let other = Keys::cluster(&Sensitive::new("another".to_owned()));
        let e = verify(&dest, &name, &manifest, &other).await.unwrap_err();
        assert!(matches!(e, BackupError::Key(_)), "{e}");
        let mut lying = manifest.clone();
        lying.plaintext_sha256 = "11".repeat(32);
        let e = verify(&dest, &name, &lying, &keys).await.unwrap_err();
        assert!(matches!(e, BackupError::Checksum { .. }), "{e}");
        let mut damaged = stored.clone();
        let mid = damaged.len() / 2;
        damaged[mid] ^= 0xff;
        std::fs::write(dir.path().join("b").join(name.archive()), &damaged).unwrap();
        let e = verify(&dest, &name, &manifest, &keys).await.unwrap_err();
        assert!(matches!(e, BackupError::Damaged { .. }), "{e}");
        std::fs::write(dir.path().join("b").join(name.archive()), b"not age").unwrap();
        let e = verify(&dest, &name, &manifest, &keys).await.unwrap_err();
        assert!(matches!(e, BackupError::Damaged { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_passphrase_archive_opens_with_its_passphrase_and_names_a_wrong_one() {
        let dir = tempfile::tempdir().unwrap();
        let env = S3Access::default();
        let dest = Destination::open(Location::Folder(dir.path().to_owned()), &env, true).unwrap();
        let name = ArchiveName::new(datetime!(2026-12-05 19:00 UTC), "lab", 3);
        let sealing = Keys::passphrase(Sensitive::new("correct horse".to_owned()));
        let m = seal(&dest, &name, &sealing, b"etcd data").await;
        assert_eq!(m.key, KeyKind::Passphrase);
        let wrong = Keys::passphrase(Sensitive::new("battery staple".to_owned()));
        let e = verify(&dest, &name, &m, &wrong).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("the passphrase is not the one it was sealed with"),
            "{text}"
        );
        assert!(
            !text.contains("battery") && !text.contains("correct"),
            "{text}"
        );
        // Nor does the cluster's own key open it: it names the variable.
        let cluster = Keys::cluster(&Sensitive::new("k".to_owned()));
        let e = verify(&dest, &name, &m, &cluster).await.unwrap_err();
        assert!(e.to_string().contains("TALOSPROV_STATE_PASSPHRASE"), "{e}");
        verify(&dest, &name, &m, &sealing).await.unwrap();
    }

    #[tokio::test]
    async fn an_abandoned_archive_leaves_nothing_and_keys_of_each_kind_work() {
        let dir = tempfile::tempdir().unwrap();
        let env = S3Access::default();
        let dest = Destination::open(Location::Folder(dir.path().to_owned()), &env, true).unwrap();
        let name = ArchiveName::new(datetime!(2026-12-05 19:00 UTC), "lab", 1);
        let keys = Keys::cluster(&Sensitive::new("k".to_owned()));
        let mut w = ArchiveWriter::start(&dest, &name, &keys).await.unwrap();
        w.write_all(&plaintext()).await.unwrap();
        assert!(w.abort().await.is_none());
        let mut w = ArchiveWriter::start(&dest, &name, &keys).await.unwrap();
        w.write_all(b"partial").await.unwrap();
        drop(w);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");

        let id = age::x25519::Identity::generate();
        let writing = Keys::age(vec![id.to_public()], Vec::new());
        let m = seal(&dest, &name, &writing, b"data").await;
        assert_eq!(m.key, KeyKind::Recipients);
        let e = verify(&dest, &name, &m, &writing).await.unwrap_err();
        assert!(e.to_string().contains("--identity"), "{e}");
        verify(&dest, &name, &m, &Keys::age(Vec::new(), vec![id]))
            .await
            .unwrap();
        let e = verify(
            &dest,
            &name,
            &m,
            &Keys::passphrase(Sensitive::new("p".to_owned())),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("not with a passphrase"), "{e}");
        dest.delete(&name).await.unwrap();
        assert_eq!(
            dest.list("lab").await.unwrap(),
            crate::destination::Listed::default()
        );
    }

    fn mkfifo(path: &std::path::Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo");
        assert!(made.success());
    }

    #[tokio::test]
    async fn a_restore_reads_only_regular_files_within_the_manifests_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let env = S3Access::default();
        let dest = Destination::open(Location::Folder(dir.path().to_owned()), &env, true).unwrap();
        let keys = Keys::cluster(&Sensitive::new("k".to_owned()));
        let name = ArchiveName::new(datetime!(2026-12-05 19:00 UTC), "lab", 1);
        let manifest = seal(&dest, &name, &keys, &plaintext()).await;
        let archive = dir.path().join(name.archive());
        let sealed = std::fs::read(&archive).unwrap();
        // Each refusal comes at once: never after a read that blocks or runs on.
        let refused = async |m: &Manifest| -> String {
            let checked = verify(&dest, &name, m, &keys);
            tokio::time::timeout(std::time::Duration::from_secs(5), checked)
                .await
                .expect("refused at once")
                .unwrap_err()
                .to_string()
        };

        // A FIFO as the manifest or the archive is named, never opened.
        let fifo_name = ArchiveName::new(datetime!(2026-12-05 20:00 UTC), "lab", 2);
        mkfifo(&dir.path().join(fifo_name.manifest()));
        let e = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            dest.read_manifest(&fifo_name),
        )
        .await
        .unwrap()
        .unwrap_err();
        assert!(
            e.to_string().contains("it is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(&archive).unwrap();
        mkfifo(&archive);
        let e = refused(&manifest).await;
        assert!(
            e.to_string().contains("it is a FIFO, not a regular file"),
            "{e}"
        );
        std::fs::remove_file(&archive).unwrap();

        // 1 GiB of zero bytes (sparse): refused by its size, or, when the
        // manifest agrees, by its first bytes; nothing near it is read.
        let zeros = std::fs::File::create(&archive).unwrap();
        zeros.set_len(1 << 30).unwrap();
        let e = refused(&manifest).await;
        assert!(e.to_string().contains("and its manifest says"), "{e}");
        let mut lying = manifest.clone();
        lying.encrypted_bytes = 1 << 30;
        let e = refused(&lying).await;
        assert!(e.to_string().contains("not an age file"), "{e}");
        // An age version line, then no end of its header.
        let mut endless = b"age-encryption.org/v1\n-> X25519 ".to_vec();
        endless.resize(1 << 20, b'a');
        std::fs::write(&archive, &endless).unwrap();
        lying.encrypted_bytes = endless.len() as u64;
        let e = refused(&lying).await;
        assert!(e.to_string().contains("no end of an age header"), "{e}");
        lying.encrypted_bytes = MAX_ARCHIVE_BYTES + 1;
        let e = verify(&dest, &name, &lying, &keys).await.unwrap_err();
        assert!(
            e.to_string().contains("more than an etcd snapshot archive"),
            "{e}"
        );

        // The real archive again, under a manifest that says less plaintext:
        // the reader stops past it.
        std::fs::write(&archive, &sealed).unwrap();
        verify(&dest, &name, &manifest, &keys).await.unwrap();
        let mut short = manifest.clone();
        short.plaintext_bytes = 1000;
        let e = verify(&dest, &name, &short, &keys).await.unwrap_err();
        assert!(
            e.to_string()
                .contains("decrypts to more than the 1000 bytes"),
            "{e}"
        );
    }
}
