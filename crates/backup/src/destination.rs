//! Where archives live: a local folder, or an S3-compatible bucket and prefix
//! (`s3://bucket/prefix`), both through `object_store`. S3's endpoint, region
//! and credentials come from the usual variables: `AWS_ENDPOINT_URL_S3`,
//! `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`; `AWS_REGION` or `AWS_DEFAULT_REGION`
//! (default `us-east-1`); `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`; `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true` for
//! virtual-hosted addressing (path style otherwise, as MinIO and Garage
//! serve). An `http://` endpoint is allowed as given.
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

pub use talosprov_core::backup::Location;

use crate::error::BackupError;
use crate::manifest::{MAX_MANIFEST_BYTES, Manifest};
use crate::name::{ARCHIVE_SUFFIX, ArchiveName, MANIFEST_SUFFIX};

/// The size of one multipart part, bytes (S3's minimum part size).
pub const PART_BYTES: usize = 5 * 1024 * 1024;
/// The most parts uploading at once.
pub const UPLOAD_CONCURRENCY: usize = 2;

/// An opened destination.
#[derive(Debug, Clone)]
pub struct Destination {
    location: Location,
    /// `None` for a folder that does not exist (it lists as empty).
    store: Option<Arc<dyn ObjectStore>>,
    prefix: ObjectPath,
}

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

fn s3_store(
    bucket: &str,
    env: &BTreeMap<String, String>,
) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
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
    if let Some(v) = env_first(env, &["AWS_ACCESS_KEY_ID"]) {
        builder = builder.with_access_key_id(v);
    }
    if let Some(v) = env_first(env, &["AWS_SECRET_ACCESS_KEY"]) {
        builder = builder.with_secret_access_key(v);
    }
    if let Some(v) = env_first(env, &["AWS_SESSION_TOKEN"]) {
        builder = builder.with_token(v);
    }
    let virtual_hosted = env_first(env, &["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"])
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    builder = builder.with_virtual_hosted_style_request(virtual_hosted);
    Ok(Arc::new(builder.build()?))
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
        env: &BTreeMap<String, String>,
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
        let (store, prefix): (Option<Arc<dyn ObjectStore>>, ObjectPath) = match &location {
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
                    Some(Arc::new(fs) as Arc<dyn ObjectStore>)
                } else {
                    None
                };
                (store, ObjectPath::default())
            }
            Location::S3 { bucket, prefix } => (
                Some(s3_store(bucket, env).map_err(failed("cannot use", &location))?),
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
        self.store.as_ref().ok_or_else(|| BackupError::Store {
            action: "cannot use".to_owned(),
            location: self.location.to_string(),
            cause: object_store::Error::NotFound {
                path: self.location.to_string(),
                source: "the folder does not exist".into(),
            },
        })
    }

    /// `cluster`'s archives (names that are not archive names of this cluster
    /// are ignored: never listed, kept or deleted).
    ///
    /// # Errors
    /// [`BackupError::Store`] when the listing fails (S3 403 or 500 after its
    /// retries, an unreachable endpoint).
    pub async fn list(&self, cluster: &str) -> Result<Listed, BackupError> {
        let Some(store) = &self.store else {
            return Ok(Listed::default());
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

    /// The manifest of `name`.
    ///
    /// # Errors
    /// [`BackupError::Store`] when it cannot be read, [`BackupError::Manifest`]
    /// when it is larger than [`MAX_MANIFEST_BYTES`] or not a manifest.
    pub async fn read_manifest(&self, name: &ArchiveName) -> Result<Manifest, BackupError> {
        let object = name.manifest();
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

    /// A writer uploading `object` (multipart past [`PART_BYTES`]).
    pub(crate) fn upload(
        &self,
        object: &str,
    ) -> Result<object_store::buffered::BufWriter, BackupError> {
        Ok(object_store::buffered::BufWriter::with_capacity(
            self.store()?.clone(),
            self.path(object),
            PART_BYTES,
        )
        .with_max_concurrency(UPLOAD_CONCURRENCY))
    }

    /// The bytes of `object`, as a stream of chunks.
    pub(crate) async fn download(
        &self,
        object: &str,
    ) -> Result<BoxStream<'static, std::io::Result<bytes::Bytes>>, BackupError> {
        let got = self
            .store()?
            .get(&self.path(object))
            .await
            .map_err(self.err(format!("cannot read {object} from")))?;
        Ok(Box::pin(got.into_stream().map_err(std::io::Error::other)))
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
