//! etcd snapshot archives as the engine takes them: where they go (`--to`,
//! else `backup.destination`, else [`DEFAULT_FOLDER`] beside the state), which
//! key seals them, and [`Archiver::take`], which streams a snapshot from a
//! control plane through `talosprov_backup` into the destination, writes its
//! manifest and then applies the `backup:` section's retention.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use talosprov_backend::encrypt::{self, KeySource, StateKeys};
use talosprov_backup::archive::ArchiveWriter;
use talosprov_backup::destination::Destination;
use talosprov_backup::destination::S3Access;
use talosprov_backup::keys::{KeyKind, Keys};
use talosprov_backup::manifest::Manifest;
use talosprov_backup::name::ArchiveName;
use talosprov_backup::retention::{self, Retention};
use talosprov_base::backup::Location;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_statefile::format::State;
use talosprov_talos::client::TalosClient;
use talosprov_topology::model::Topology;

/// The folder, beside the local state file (else the topology file), that
/// holds the archives when the topology has no `backup:` section.
pub const DEFAULT_FOLDER: &str = "etcd-snapshots";

/// How the S3 client reaches a destination: the `AWS_*` variables and no
/// others, and the instance metadata service only when the topology's
/// `backup.s3.instance_credentials` says so (`topology`: `None` when there is
/// none to say).
pub fn s3_access(topology: Option<&Topology>) -> S3Access {
    S3Access {
        env: std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .collect::<BTreeMap<String, String>>(),
        instance_credentials: topology
            .and_then(|t| t.backup.as_ref())
            .is_some_and(|b| b.instance_credentials),
    }
}

/// Where a run's archives go, and the retention applied there: `to`
/// (relative to the current folder; the `backup:` section's retention only
/// when it is that section's destination), else the topology's
/// `backup.destination` with its retention, else [`DEFAULT_FOLDER`] in
/// `beside` (the local state's folder, else the topology's) with the
/// default retention (the newest 7, and one a day for 14 days).
///
/// # Errors
/// A `to` that is not a destination.
pub fn target(
    to: Option<&str>,
    topology: &Topology,
    beside: &Path,
) -> anyhow::Result<(Location, Option<Retention>)> {
    let configured = topology.backup.as_ref().map(|b| {
        (
            b.destination.clone(),
            Retention {
                keep_last: b.keep_last,
                keep_daily: b.keep_daily,
            },
        )
    });
    if let Some(text) = to {
        let location = talosprov_backup::destination::parse_location(text, Path::new(""))?;
        let retention = configured.filter(|(l, _)| *l == location).map(|(_, r)| r);
        return Ok((location, retention));
    }
    Ok(match configured {
        Some((l, r)) => (l, Some(r)),
        None => (
            Location::Folder(beside.join(DEFAULT_FOLDER)),
            Some(Retention {
                keep_last: talosprov_base::backup::DEFAULT_KEEP_LAST,
                keep_daily: talosprov_base::backup::DEFAULT_KEEP_DAILY,
            }),
        ),
    })
}

/// The keys new archives are sealed with: `recipients` (`--recipient`), else
/// the state's keys (`state`: `TALOSPROV_STATE_PASSPHRASE`, or its age
/// recipients), else the cluster's own key, derived from its secrets-at-rest
/// key.
///
/// # Errors
/// A recipient that is not one.
pub fn seal_keys(
    recipients: &[String],
    state: Option<StateKeys>,
    secrets: &SecretsBundle,
) -> anyhow::Result<Keys> {
    if !recipients.is_empty() {
        return Ok(Keys::recipients(recipients)?);
    }
    Ok(match state {
        Some(StateKeys::Passphrase(p)) => Keys::passphrase(p),
        Some(StateKeys::Age {
            recipients,
            identities,
        }) => Keys::age(recipients, identities),
        None => Keys::cluster(secrets.encryption.value()),
    })
}

/// The keys that open an archive sealed with `kind`: `identity` (an age
/// identity file, as `age -d -i` takes) or the state's identities (`state`)
/// for recipients; the state's passphrase; the cluster's own key.
///
/// # Errors
/// No key of that kind, or a key file that cannot be read.
pub fn open_keys(
    kind: KeyKind,
    identity: Option<&Path>,
    state: Option<StateKeys>,
    secrets: &SecretsBundle,
) -> anyhow::Result<Keys> {
    let from_file = |path: &Path| -> anyhow::Result<Keys> {
        let source = KeySource::Files {
            recipients: None,
            identities: Some(path.to_path_buf()),
        };
        match StateKeys::load(&source)? {
            Some(StateKeys::Age { identities, .. }) => Ok(Keys::age(Vec::new(), identities)),
            Some(StateKeys::Passphrase(_)) | None => {
                Err(anyhow!("{} holds no age identity", path.display()))
            }
        }
    };
    match (kind, identity, state) {
        (KeyKind::Cluster, _, _) => Ok(Keys::cluster(secrets.encryption.value())),
        (KeyKind::Recipients, Some(path), _) => from_file(path),
        (KeyKind::Recipients, None, Some(StateKeys::Age { identities, .. }))
            if !identities.is_empty() =>
        {
            Ok(Keys::age(Vec::new(), identities))
        }
        (KeyKind::Recipients, None, _) => Err(anyhow!(
            "the snapshot is encrypted to age recipients: give the identity file with --identity \
             FILE (or set TALOSPROV_STATE_AGE_IDENTITY_FILE)"
        )),
        (KeyKind::Passphrase, _, Some(StateKeys::Passphrase(p))) => Ok(Keys::passphrase(p)),
        (KeyKind::Passphrase, _, _) => Err(anyhow!(
            "the snapshot is encrypted with a passphrase: set {} to the passphrase in use when \
             it was taken",
            encrypt::PASSPHRASE_VAR
        )),
    }
}

/// SHA-256 (hex) of the etcd CA certificate's PEM, as manifests record it.
pub fn etcd_ca_sha256(secrets: &SecretsBundle) -> String {
    hex::encode(Sha256::digest(secrets.certs.etcd.crt.trim().as_bytes()))
}

/// The archiver of apply's automatic snapshots: into the `backup:`
/// destination (else [`DEFAULT_FOLDER`] in `beside`), sealed with the
/// state's keys (`state_keys`) or the cluster's own key.
///
/// # Errors
/// A destination that cannot be opened.
pub fn for_apply(
    topology: &Topology,
    state: &State,
    secrets: &SecretsBundle,
    beside: &Path,
    state_keys: Option<StateKeys>,
) -> anyhow::Result<Archiver> {
    let (location, retention) = target(None, topology, beside)?;
    let keys = seal_keys(&[], state_keys, secrets)?;
    Archiver::new(location, retention, keys, topology, state, secrets)
}

/// A snapshot saved.
#[derive(Debug, Clone)]
pub struct Taken {
    /// Its name.
    pub name: ArchiveName,
    /// Its manifest, as written.
    pub manifest: Manifest,
    /// Where it went.
    pub location: String,
    /// Archives retention deleted, newest first.
    pub pruned: Vec<ArchiveName>,
    /// The partial and staging files of interrupted snapshots that
    /// retention removed (file names).
    pub abandoned: Vec<String>,
    /// Why retention could not finish (the snapshot itself is saved).
    pub prune_error: Option<String>,
}

/// What a manifest says of the cluster its snapshot is of.
#[derive(Debug, Clone)]
pub struct ArchivedCluster {
    /// `cluster.name`.
    pub name: String,
    /// The state's lineage.
    pub lineage: uuid::Uuid,
    /// [`etcd_ca_sha256`] of its secrets.
    pub etcd_ca_sha256: String,
    /// Its Kubernetes version (`v1.36.2`).
    pub kubernetes_version: String,
    /// The state's admin kubeconfig (YAML), to read etcd's revision from the
    /// Kubernetes API ([`Archiver::live`]); `None` names snapshots `r0`.
    pub kubeconfig: Option<Sensitive>,
    /// How an S3 destination is reached ([`s3_access`]).
    pub access: S3Access,
}

/// Takes snapshots of one cluster into one destination.
#[derive(Debug)]
pub struct Archiver {
    destination: Destination,
    keys: Keys,
    retention: Option<Retention>,
    cluster: String,
    lineage: uuid::Uuid,
    etcd_ca_sha256: String,
    kubernetes_version: String,
    kubeconfig: Option<Sensitive>,
    access: S3Access,
}

/// What the Kubernetes API says of the cluster at a snapshot
/// ([`Archiver::live`]). The default is "not known": revision 0, no version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// etcd's revision; 0 when not known (the archive is named `r0`).
    pub revision: u64,
    /// The API server's `gitVersion` (`v1.36.2`); `None` when not known,
    /// and the manifest carries the topology's.
    pub kubernetes_version: Option<String>,
}

/// How long etcd's revision may take to read from the Kubernetes API.
const REVISION_WAIT: Duration = Duration::from_secs(10);

impl Archiver {
    /// An archiver for `topology`'s cluster into `location` (a folder is
    /// created by the first snapshot), applying `retention` after each one.
    ///
    /// # Errors
    /// A destination that cannot be opened.
    pub fn new(
        location: Location,
        retention: Option<Retention>,
        keys: Keys,
        topology: &Topology,
        state: &State,
        secrets: &SecretsBundle,
    ) -> anyhow::Result<Archiver> {
        Archiver::from_parts(
            location,
            retention,
            keys,
            ArchivedCluster {
                name: topology.cluster.name.clone(),
                lineage: state.lineage,
                etcd_ca_sha256: etcd_ca_sha256(secrets),
                kubernetes_version: talosprov_addon::manifests::kubernetes_version(topology),
                kubeconfig: state.outputs.kubeconfig.as_ref().map(|k| k.value.clone()),
                access: s3_access(Some(topology)),
            },
        )
    }

    /// An archiver for `cluster` into `location` (a folder is created by the
    /// first snapshot, not here).
    ///
    /// # Errors
    /// A destination that cannot be opened.
    pub fn from_parts(
        location: Location,
        retention: Option<Retention>,
        keys: Keys,
        cluster: ArchivedCluster,
    ) -> anyhow::Result<Archiver> {
        // A folder is created by the first snapshot ([`Archiver::take`]),
        // not by every run that might take one.
        Ok(Archiver {
            destination: Destination::open(location, &cluster.access, false)?,
            keys,
            retention,
            cluster: cluster.name,
            lineage: cluster.lineage,
            etcd_ca_sha256: cluster.etcd_ca_sha256,
            kubernetes_version: cluster.kubernetes_version,
            kubeconfig: cluster.kubeconfig,
            access: cluster.access,
        })
    }

    /// What the Kubernetes API says of the cluster now: etcd's revision
    /// (the resourceVersion of a list, which kube-apiserver takes from etcd's
    /// store) and the API server's `gitVersion`, read with the cluster's
    /// kubeconfig within 10 s.
    ///
    /// # Errors
    /// Why it is not known: no kubeconfig, an API that does not answer in
    /// time or refuses.
    pub async fn live(&self) -> Result<Live, String> {
        let kubeconfig = self
            .kubeconfig
            .as_ref()
            .ok_or("the state has no kubeconfig")?;
        let read = async {
            let client = talosprov_kube::client::KubeClient::from_kubeconfig(kubeconfig.expose())
                .await
                .map_err(|e| e.to_string())?;
            let revision = client.revision().await.map_err(|e| e.to_string())?;
            let version = client.server_version().await.ok();
            Ok(Live {
                revision,
                kubernetes_version: version,
            })
        };
        tokio::time::timeout(REVISION_WAIT, read)
            .await
            .map_err(|_| {
                format!(
                    "the Kubernetes API did not answer in {}s",
                    REVISION_WAIT.as_secs()
                )
            })?
    }

    /// Where the archives go.
    pub fn location(&self) -> &Location {
        self.destination.location()
    }

    /// The kind of key that seals the archives.
    pub fn key_kind(&self) -> KeyKind {
        self.keys.kind()
    }

    /// Stream a snapshot from `client` (the control plane `node`, running
    /// `talos_version`) into the destination, then its manifest, then apply
    /// retention. `live` is what the Kubernetes API said just before
    /// ([`Archiver::live`]; its default when unknown: revision 0, the
    /// topology's Kubernetes version); `reason` goes into the manifest.
    ///
    /// # Errors
    /// The node's stream failing (nothing is left in the destination), the
    /// destination refusing the archive or its manifest.
    pub async fn take(
        &self,
        client: &TalosClient,
        node: &str,
        talos_version: &str,
        live: &Live,
        reason: &str,
    ) -> anyhow::Result<Taken> {
        let source = Source {
            client,
            node,
            talos_version,
        };
        match self
            .take_until(&source, live, reason, std::future::pending())
            .await?
        {
            Some(taken) => Ok(taken),
            None => Err(anyhow!("the snapshot of {node} was stopped")),
        }
    }

    /// [`Archiver::take`], stopped when `stop` resolves first: the upload is
    /// then aborted (nothing is left in the destination: no archive, no
    /// partial file, no multipart upload) and the result is `None`.
    ///
    /// # Errors
    /// As [`Archiver::take`].
    pub async fn take_until(
        &self,
        source: &Source<'_>,
        live: &Live,
        reason: &str,
        stop: impl Future<Output = ()>,
    ) -> anyhow::Result<Option<Taken>> {
        let now = OffsetDateTime::now_utc();
        let name = ArchiveName::new(now, &self.cluster, live.revision);
        // A folder is (re)opened with create: two snapshots of one apply may
        // run at once (two control planes removed), and the first to create
        // it must not leave the other with the destination opened before.
        let destination = match self.destination.location() {
            Location::Folder(_) => {
                Destination::open(self.destination.location().clone(), &self.access, true)?
            }
            Location::S3 { .. } => self.destination.clone(),
        };
        let node = source.node;
        let mut writer = ArchiveWriter::start(&destination, &name, &self.keys).await?;
        let streamed = tokio::select! {
            streamed = source.client.etcd_snapshot(&mut writer) => streamed,
            () = stop => {
                if let Some(cause) = writer.abort().await {
                    tracing::debug!("aborting the stopped upload: {cause}");
                }
                return Ok(None);
            }
        };
        match streamed {
            Ok(0) => {
                let _ = writer.abort().await;
                return Err(anyhow!("{node} sent an empty etcd snapshot"));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(match writer.abort().await {
                    Some(cause) => anyhow::Error::new(cause),
                    None => anyhow::Error::new(e),
                })
                .with_context(|| format!("cannot save the etcd snapshot of {node}"));
            }
        }
        let sealed = writer.finish().await?;
        let manifest = self.manifest(&name, source, live, reason, sealed);
        destination.write_manifest(&name, &manifest).await?;
        let (pruned, prune_error) = match self.prune(&destination, now).await {
            Ok(p) => (p, None),
            Err(e) => (Pruned::default(), Some(format!("{e:#}"))),
        };
        Ok(Some(Taken {
            name,
            manifest,
            location: destination.location().to_string(),
            pruned: pruned.archives,
            abandoned: pruned.abandoned,
            prune_error,
        }))
    }

    /// The manifest of the archive `name` just sealed.
    fn manifest(
        &self,
        name: &ArchiveName,
        source: &Source<'_>,
        live: &Live,
        reason: &str,
        sealed: talosprov_backup::archive::Sealed,
    ) -> Manifest {
        Manifest {
            format: talosprov_backup::manifest::MANIFEST_FORMAT,
            cluster: self.cluster.clone(),
            lineage: self.lineage,
            etcd_ca_sha256: self.etcd_ca_sha256.clone(),
            time: name
                .time
                .format(&time::format_description::well_known::Rfc3339)
                .expect("a UTC time formats"),
            revision: live.revision,
            node: source.node.to_owned(),
            reason: reason.to_owned(),
            plaintext_sha256: sealed.plaintext_sha256,
            plaintext_bytes: sealed.plaintext_bytes,
            encrypted_bytes: sealed.encrypted_bytes,
            key: self.keys.kind(),
            talos_version: source.talos_version.to_owned(),
            kubernetes_version: live
                .kubernetes_version
                .clone()
                .unwrap_or_else(|| self.kubernetes_version.clone()),
        }
    }

    /// Apply retention: delete what [`retention::decide`] does not keep,
    /// then what killed runs left ([`Destination::remove_abandoned`]).
    async fn prune(
        &self,
        destination: &Destination,
        now: OffsetDateTime,
    ) -> anyhow::Result<Pruned> {
        let Some(retention) = self.retention else {
            return Ok(Pruned::default());
        };
        let listed = destination.list(&self.cluster).await?;
        let verdict = retention::decide(&listed.complete, retention, now);
        // An archive without its manifest, older than the newest complete
        // one: an upload that stopped before its manifest. Never restored.
        let interrupted: Vec<ArchiveName> = listed
            .incomplete
            .iter()
            .filter(|n| listed.newest().is_some_and(|newest| *n < newest))
            .cloned()
            .collect();
        for name in verdict.delete.iter().chain(&interrupted) {
            destination.delete(name).await?;
        }
        let mut archives = verdict.delete;
        archives.extend(interrupted);
        let abandoned = destination.remove_abandoned(&self.cluster)?;
        Ok(Pruned {
            archives,
            abandoned,
        })
    }
}

/// What a snapshot's retention removed.
#[derive(Debug, Default)]
struct Pruned {
    /// Archives, newest first.
    archives: Vec<ArchiveName>,
    /// Partial and staging files killed runs left (file names).
    abandoned: Vec<String>,
}

/// The control plane a snapshot is streamed from.
#[derive(Debug)]
pub struct Source<'a> {
    /// Connected to it.
    pub client: &'a TalosClient,
    /// Its hostname.
    pub node: &'a str,
    /// The Talos version it runs (`v1.13.8`), for the manifest.
    pub talos_version: &'a str,
}

/// The snapshot `etcd restore` recovers etcd from, checked (its manifest
/// matches the cluster, its key opens it and its checksum holds) before the
/// apply that uses it starts.
pub struct Recovery {
    /// Where the archive is.
    pub destination: Destination,
    /// The archive.
    pub name: ArchiveName,
    /// Its manifest.
    pub manifest: Manifest,
    /// The keys that open it.
    pub keys: Keys,
    /// Bootstrap with `recover_skip_hash_check` (`--skip-hash-check`): for a
    /// database copied from a data directory, which has no hash.
    pub skip_hash_check: bool,
}

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recovery")
            .field("location", &self.destination.location().to_string())
            .field("name", &self.name.archive())
            .field("skip_hash_check", &self.skip_hash_check)
            .finish_non_exhaustive()
    }
}

impl Recovery {
    /// Upload the snapshot to `client` (Talos `EtcdRecover`), decrypting as
    /// it streams, then check what went up against the manifest. Returns the
    /// bytes sent.
    ///
    /// # Errors
    /// The archive cannot be read or decrypted, the node refuses the upload,
    /// or what was sent fails the manifest's checksum (the node must then
    /// not be bootstrapped from it).
    pub async fn upload(&self, client: &TalosClient) -> anyhow::Result<u64> {
        let reader = talosprov_backup::archive::ArchiveReader::open(
            &self.destination,
            &self.name,
            &self.manifest,
            &self.keys,
        )
        .await?;
        let tally = reader.tally();
        let sent = client
            .etcd_recover(reader)
            .await
            .with_context(|| format!("cannot upload the snapshot {}", self.name.archive()))?;
        tally.check(&self.manifest, &self.name.archive())?;
        Ok(sent)
    }
}

/// How long listing the destination may take for [`plan_warnings`].
const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a plan warns about the cluster's backups, at `now`:
/// - a remote state (`remote`) with no `backup:` section: apply's snapshots
///   would go to the machine it runs on, and be lost with a CI job;
/// - with `backup.max_age` (and `online`): the newest snapshot in the
///   destination older than that, none there, or a destination that cannot
///   be listed.
pub async fn plan_warnings(
    topology: &Topology,
    remote: bool,
    beside: &Path,
    online: bool,
    now: OffsetDateTime,
) -> Vec<String> {
    if let Some(section) = &topology.backup
        && remote
        && let Location::Folder(dir) = &section.destination
    {
        return vec![format!(
            "the state is remote, but backup.destination is a folder ({}): the snapshots \
             would be lost with the CI job; set it to an S3 bucket (s3://bucket/prefix)",
            dir.display()
        )];
    }
    let Some(section) = &topology.backup else {
        return if remote {
            vec![format!(
                "the state is remote, but the topology has no backup: section: apply's etcd \
                 snapshots go to {} on the machine that runs it, so snapshots would be lost with \
                 the CI job; set backup.destination to an S3 bucket (s3://bucket/prefix)",
                beside.join(DEFAULT_FOLDER).display()
            )]
        } else {
            Vec::new()
        };
    };
    let (Some(max_age), true) = (section.max_age, online) else {
        return Vec::new();
    };
    let location = section.destination.to_string();
    let age_text = humantime::format_duration(max_age).to_string();
    let listed = async {
        let destination = Destination::open(
            section.destination.clone(),
            &s3_access(Some(topology)),
            false,
        )?;
        destination.list(&topology.cluster.name).await
    };
    let newest = match tokio::time::timeout(LIST_WAIT, listed).await {
        Ok(Ok(listed)) => listed.newest().cloned(),
        Ok(Err(e)) => {
            return vec![format!(
                "cannot list {location} to check backup.max_age ({age_text}): {e}"
            )];
        }
        Err(_) => {
            return vec![format!(
                "{location} did not answer in {} s: backup.max_age ({age_text}) is not checked",
                LIST_WAIT.as_secs()
            )];
        }
    };
    match newest {
        None => vec![format!(
            "there is no etcd snapshot of cluster {} in {location} (backup.max_age is \
             {age_text}): take one with `talosprov etcd snapshot`",
            topology.cluster.name
        )],
        Some(name) => {
            let age = now - name.time;
            let age = std::time::Duration::try_from(age).unwrap_or_default();
            (age > max_age)
                .then(|| {
                    format!(
                        "the newest etcd snapshot in {location}, {}, is {} old: older than \
                         backup.max_age ({age_text}); take one with `talosprov etcd snapshot` \
                         (the GitLab component's scheduled backup job does)",
                        name.archive(),
                        humantime::format_duration(std::time::Duration::from_secs(age.as_secs()))
                    )
                })
                .into_iter()
                .collect()
        }
    }
}
