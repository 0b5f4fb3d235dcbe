//! Where archives live: a local folder, or an S3-compatible bucket and prefix
//! (`s3://bucket/prefix`), both through `object_store`. S3's endpoint, region
//! and credentials come from the usual variables: `AWS_ENDPOINT_URL_S3`,
//! `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`; `AWS_REGION` or `AWS_DEFAULT_REGION`
//! (default `us-east-1`); `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`; `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true` for
//! virtual-hosted addressing (path style otherwise, as MinIO and Garage
//! serve). An `http://` endpoint is allowed as given. Without the key
//! variables no request is made at all, unless [`S3Access`] allows the cloud
//! instance's metadata service (`backup.s3.instance_credentials`).
//!
//! Uploads are multipart in parts of [`PART_BYTES`] with at most
//! [`UPLOAD_CONCURRENCY`] parts in flight, so an upload holds at most about
//! `PART_BYTES * (UPLOAD_CONCURRENCY + 1)` bytes whatever the snapshot's size.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt as _;
use futures::stream::BoxStream;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use talosprov_base::backup::Location;

use crate::error::BackupError;
use crate::manifest::{MAX_MANIFEST_BYTES, Manifest};
use crate::name::{ARCHIVE_SUFFIX, ArchiveName, MANIFEST_SUFFIX};
use crate::upload::{FolderUpload, Upload};

/// The size of one multipart part, bytes (S3's minimum part size).
pub const PART_BYTES: usize = 5 * 1024 * 1024;
/// The most parts uploading at once.
pub const UPLOAD_CONCURRENCY: usize = 2;

/// An opened destination.
#[derive(Debug, Clone)]
pub struct Destination {
    location: Location,
    /// The store, or why there is none: a folder that does not exist (it
    /// lists as empty), or an S3 destination without credentials.
    store: Result<Arc<dyn ObjectStore>, Unavailable>,
    prefix: ObjectPath,
}

/// Why a destination has no store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unavailable {
    /// A folder that does not exist.
    NoFolder,
    /// S3 without `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, and
    /// without leave to ask the instance metadata service.
    NoCredentials,
}

/// How an S3 destination is reached: the `AWS_*` variables (and no others)
/// and whether the cloud instance's metadata service may give the
/// credentials when they give none (`backup.s3.instance_credentials`).
#[derive(Debug, Clone, Default)]
pub struct S3Access {
    /// The `AWS_*` variables.
    pub env: BTreeMap<String, String>,
    /// Ask the instance metadata service (169.254.169.254, or
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT`) for credentials when the
    /// variables hold none. Off by default: without it, no request is made
    /// without credentials, and none goes to that address.
    pub instance_credentials: bool,
}

/// The refusal of an S3 destination without credentials.
pub const NO_CREDENTIALS: &str = "no S3 credentials: set AWS_ACCESS_KEY_ID and \
    AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones); talosprov asks the \
    cloud's instance metadata service for the instance's role only with \
    backup.s3.instance_credentials: true";

/// One cluster's archives in a destination.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listed {
    /// Archives with their manifest, oldest first.
    pub complete: Vec<ArchiveName>,
    /// Archives whose manifest is missing (an interrupted upload), oldest first.
    pub incomplete: Vec<ArchiveName>,
}

impl Listed {
    /// The newest complete archive.
    pub fn newest(&self) -> Option<&ArchiveName> {
        self.complete.last()
    }
}

fn env_first<'a>(env: &'a BTreeMap<String, String>, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| env.get(*n).map(String::as_str).filter(|v| !v.is_empty()))
}

/// The S3 client for `bucket`, or `None` when `access` gives no
/// credentials and no leave to ask the instance metadata service
/// (object_store would ask it: its credential chain ends there).
fn s3_store(
    bucket: &str,
    access: &S3Access,
) -> Result<Option<Arc<dyn ObjectStore>>, object_store::Error> {
    let env = &access.env;
    let key = env_first(env, &["AWS_ACCESS_KEY_ID"]);
    let secret = env_first(env, &["AWS_SECRET_ACCESS_KEY"]);
    if key.is_none() && secret.is_none() && !access.instance_credentials {
        return Ok(None);
    }
    let mut builder = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(env_first(env, &["AWS_REGION", "AWS_DEFAULT_REGION"]).unwrap_or("us-east-1"))
        .with_retry(object_store::RetryConfig {
            backoff: object_store::BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(60),
        })
        .with_client_options(
            object_store::ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(10))
                .with_timeout(Duration::from_secs(300)),
        );
    if let Some(endpoint) = env_first(
        env,
        &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"],
    ) {
        builder = builder
            .with_allow_http(endpoint.starts_with("http://"))
            .with_endpoint(endpoint);
    }
    if access.instance_credentials
        && let Some(endpoint) = env_first(env, &["AWS_EC2_METADATA_SERVICE_ENDPOINT"])
    {
        // The AWS SDKs' variable for where the metadata service answers.
        builder = builder.with_metadata_endpoint(endpoint);
    }
    if let Some(v) = key {
        builder = builder.with_access_key_id(v);
    }
    if let Some(v) = secret {
        builder = builder.with_secret_access_key(v);
    }
    if let Some(v) = env_first(env, &["AWS_SESSION_TOKEN"]) {
        builder = builder.with_token(v);
    }
    let virtual_hosted = env_first(env, &["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"])
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    builder = builder.with_virtual_hosted_style_request(virtual_hosted);
    Ok(Some(Arc::new(builder.build()?)))
}

impl Destination {
    /// Open `location`. A folder is created (mode 0700) when `create` is set;
    /// otherwise a missing folder lists as empty. No request is made.
    ///
    /// # Errors
    /// [`BackupError::Store`]: a folder that cannot be created or opened, or
    /// S3 settings object_store refuses (a malformed endpoint).
    pub fn open(
        location: Location,
        access: &S3Access,
        create: bool,
    ) -> Result<Destination, BackupError> {
        let failed = |action: &str, location: &Location| {
            let location = location.to_string();
            let action = action.to_owned();
            move |cause| BackupError::Store {
                action,
                location,
                cause,
            }
        };
        let (store, prefix) = match &location {
            Location::Folder(dir) => {
                if create && !dir.is_dir() {
                    create_private_dir(dir).map_err(|e| BackupError::Store {
                        action: "cannot create".to_owned(),
                        location: location.to_string(),
                        cause: object_store::Error::Generic {
                            store: "LocalFileSystem",
                            source: Box::new(e),
                        },
                    })?;
                }
                let store = if dir.is_dir() {
                    let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                        .map_err(failed("cannot open", &location))?;
                    Ok(Arc::new(fs) as Arc<dyn ObjectStore>)
                } else {
                    Err(Unavailable::NoFolder)
                };
                (store, ObjectPath::default())
            }
            Location::S3 { bucket, prefix } => (
                s3_store(bucket, access)
                    .map_err(failed("cannot use", &location))?
                    .ok_or(Unavailable::NoCredentials),
                ObjectPath::from(prefix.as_str()),
            ),
        };
        Ok(Destination {
            location,
            store,
            prefix,
        })
    }

    /// Where this is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    pub(crate) fn path(&self, object: &str) -> ObjectPath {
        self.prefix.child(object)
    }

    fn err(&self, action: String) -> impl FnOnce(object_store::Error) -> BackupError + '_ {
        move |cause| BackupError::Store {
            action,
            location: self.location.to_string(),
            cause,
        }
    }

    pub(crate) fn store(&self) -> Result<&Arc<dyn ObjectStore>, BackupError> {
        let reason = match &self.store {
            Ok(store) => return Ok(store),
            Err(Unavailable::NoFolder) => "the folder does not exist",
            Err(Unavailable::NoCredentials) => NO_CREDENTIALS,
        };
        Err(BackupError::Unusable {
            location: self.location.to_string(),
            reason,
        })
    }

    /// `cluster`'s archives (names that are not archive names of this cluster
    /// are ignored: never listed, kept or deleted).
    ///
    /// # Errors
    /// [`BackupError::Store`] when the listing fails (S3 403 or 500 after its
    /// retries, an unreachable endpoint).
    pub async fn list(&self, cluster: &str) -> Result<Listed, BackupError> {
        let store = match &self.store {
            Err(Unavailable::NoFolder) => return Ok(Listed::default()),
            _ => self.store()?,
        };
        let listing = store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(self.err("cannot list".to_owned()))?;
        let mut archives = BTreeMap::<ArchiveName, (bool, bool)>::new();
        for meta in listing.objects {
            let Some(file) = meta.location.filename() else {
                continue;
            };
            let Some(name) = ArchiveName::parse(file).filter(|n| n.cluster == cluster) else {
                continue;
            };
            let entry = archives.entry(name).or_default();
            if file.ends_with(ARCHIVE_SUFFIX) {
                entry.0 = true;
            } else if file.ends_with(MANIFEST_SUFFIX) {
                entry.1 = true;
            }
        }
        let mut listed = Listed::default();
        for (name, (archive, manifest)) in archives {
            match (archive, manifest) {
                (true, true) => listed.complete.push(name),
                (true, false) => listed.incomplete.push(name),
                (false, _) => {}
            }
        }
        Ok(listed)
    }

    /// Refuse, before it is opened, an `object` of a folder that is not a
    /// regular file (a FIFO would block the read, a device such as
    /// `/dev/zero` never end); an object that does not exist is left to the
    /// read that follows.
    ///
    /// # Errors
    /// [`BackupError::NotAFile`].
    fn regular(&self, object: &str) -> Result<(), BackupError> {
        let Location::Folder(dir) = &self.location else {
            return Ok(());
        };
        let path = dir.join(object);
        let what = match talosprov_files::special_kind(&path) {
            Some(what) => what,
            None if path.is_dir() => "a folder",
            None => return Ok(()),
        };
        Err(BackupError::NotAFile {
            path: path.display().to_string(),
            what,
        })
    }

    /// The manifest of `name`.
    ///
    /// # Errors
    /// [`BackupError::Store`] when it cannot be read, [`BackupError::NotAFile`]
    /// when it is not a regular file, [`BackupError::Manifest`] when it is
    /// larger than [`MAX_MANIFEST_BYTES`] or not a manifest.
    pub async fn read_manifest(&self, name: &ArchiveName) -> Result<Manifest, BackupError> {
        let object = name.manifest();
        self.regular(&object)?;
        let bad = |reason: String| BackupError::Manifest {
            name: object.clone(),
            location: self.location.to_string(),
            reason,
        };
        let got = self
            .store()?
            .get(&self.path(&object))
            .await
            .map_err(self.err(format!("cannot read {object} from")))?;
        if got.meta.size > MAX_MANIFEST_BYTES {
            return Err(bad(format!("it is larger than {MAX_MANIFEST_BYTES} bytes")));
        }
        let bytes = got
            .bytes()
            .await
            .map_err(self.err(format!("cannot read {object} from")))?;
        Manifest::from_json(&bytes).map_err(bad)
    }

    /// Write the manifest of `name` (after its archive).
    ///
    /// # Errors
    /// [`BackupError::Store`].
    pub async fn write_manifest(
        &self,
        name: &ArchiveName,
        manifest: &Manifest,
    ) -> Result<(), BackupError> {
        let object = name.manifest();
        self.store()?
            .put(&self.path(&object), manifest.to_json().into())
            .await
            .map_err(self.err(format!("cannot write {object} to")))?;
        Ok(())
    }

    /// A writer uploading `object`: multipart past [`PART_BYTES`] to S3; to
    /// a folder, `<object>.partial` under its lock, renamed once complete
    /// ([`crate::upload`]).
    pub(crate) fn upload(&self, object: &str) -> Result<Upload, BackupError> {
        let store = self.store()?;
        if let Location::Folder(dir) = &self.location {
            return FolderUpload::start(dir, object)
                .map(Upload::Folder)
                .map_err(|e| BackupError::Store {
                    action: format!("cannot write {object} to"),
                    location: self.location.to_string(),
                    cause: object_store::Error::Generic {
                        store: "LocalFileSystem",
                        source: Box::new(e),
                    },
                });
        }
        Ok(Upload::Store(
            object_store::buffered::BufWriter::with_capacity(
                store.clone(),
                self.path(object),
                PART_BYTES,
            )
            .with_max_concurrency(UPLOAD_CONCURRENCY),
        ))
    }

    /// Remove what killed runs left of `cluster`'s archives: in a folder,
    /// partial files no run holds and object_store's staging files
    /// ([`crate::upload::abandoned_in`]); returns their names. An S3
    /// multipart upload a killed run left is invisible to listing and is
    /// not here: SIGINT and SIGTERM abort it, and a bucket lifecycle rule
    /// (`AbortIncompleteMultipartUpload`) removes one left by `kill -9`.
    ///
    /// # Errors
    /// [`BackupError::Store`] naming a file that cannot be removed.
    pub fn remove_abandoned(&self, cluster: &str) -> Result<Vec<String>, BackupError> {
        let Location::Folder(dir) = &self.location else {
            return Ok(Vec::new());
        };
        let mut removed = Vec::new();
        for path in crate::upload::abandoned_in(dir, cluster) {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match std::fs::remove_file(&path) {
                Ok(()) => removed.push(name),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(BackupError::Store {
                        action: format!("cannot remove the interrupted upload {name} from"),
                        location: self.location.to_string(),
                        cause: object_store::Error::Generic {
                            store: "LocalFileSystem",
                            source: Box::new(e),
                        },
                    });
                }
            }
        }
        Ok(removed)
    }

    /// The size of `object` and its bytes, as a stream of chunks.
    ///
    /// # Errors
    /// [`BackupError::NotAFile`] for a folder's object that is not a
    /// regular file; [`BackupError::Store`] when it cannot be read.
    pub(crate) async fn download(
        &self,
        object: &str,
    ) -> Result<(u64, BoxStream<'static, std::io::Result<bytes::Bytes>>), BackupError> {
        self.regular(object)?;
        let got = self
            .store()?
            .get(&self.path(object))
            .await
            .map_err(self.err(format!("cannot read {object} from")))?;
        let size = got.meta.size;
        Ok((
            size,
            Box::pin(got.into_stream().map_err(std::io::Error::other)),
        ))
    }

    /// Delete the archive `name`: its manifest first, so a half-deleted
    /// archive lists as incomplete, never as a backup.
    ///
    /// # Errors
    /// [`BackupError::Store`] (a missing object is not an error).
    pub async fn delete(&self, name: &ArchiveName) -> Result<(), BackupError> {
        for object in [name.manifest(), name.archive()] {
            match self.store()?.delete(&self.path(&object)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err(format!("cannot delete {object} from"))(e)),
            }
        }
        Ok(())
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// [`Location::parse`], with its refusal as a [`BackupError::Location`].
///
/// # Errors
/// [`BackupError::Location`].
pub fn parse_location(text: &str, base: &Path) -> Result<Location, BackupError> {
    Location::parse(text, base).map_err(|reason| BackupError::Location {
        text: text.to_owned(),
        reason,
    })
}
