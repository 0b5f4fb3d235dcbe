//! The `backup:` section's meaning, without I/O: where etcd snapshot archives
//! go ([`Location`]) and how many are kept ([`BackupSettings`]). The archives
//! themselves are `talosprov_backup`'s.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

/// Archives kept by default: the newest 7 ...
pub const DEFAULT_KEEP_LAST: u32 = 7;
/// ... and the newest of each of the last 14 days.
pub const DEFAULT_KEEP_DAILY: u32 = 14;
/// The most archives `keep_last` may keep.
pub const MAX_KEEP_LAST: u64 = 10_000;
/// The most days `keep_daily` may cover (ten years).
pub const MAX_KEEP_DAILY: u64 = 3_650;

/// A destination as written in `backup.destination` or `--to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Location {
    /// A local folder (absolute, or relative to the topology's folder).
    Folder(PathBuf),
    /// An S3-compatible bucket and key prefix (no slash at either end; empty
    /// for the bucket's root).
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix.
        prefix: String,
    },
}

impl Location {
    /// Read `text`: `s3://bucket[/prefix]`, or a folder, relative to `base`.
    ///
    /// # Errors
    /// Why it is not a destination: an empty text, another URL scheme, an S3
    /// URL without a bucket, or a prefix with empty, `.` or `..` segments.
    pub fn parse(text: &str, base: &Path) -> Result<Location, String> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err("it is empty".to_owned());
        }
        if let Some(rest) = trimmed.strip_prefix("s3://") {
            let rest = rest.trim_end_matches('/');
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err("an s3:// URL needs a bucket: s3://bucket/prefix".to_owned());
            }
            if !prefix.is_empty()
                && prefix
                    .split('/')
                    .any(|s| s.is_empty() || s == "." || s == "..")
            {
                return Err("the prefix has an empty, . or .. segment".to_owned());
            }
            return Ok(Location::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
        if let Some((scheme, _)) = trimmed.split_once("://") {
            return Err(format!(
                "{scheme}:// is not a backup destination: use a folder or s3://bucket/prefix"
            ));
        }
        Ok(Location::Folder(base.join(trimmed)))
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Folder(p) => write!(f, "{}", p.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// `backup:`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupSettings {
    /// `destination`.
    pub destination: Location,
    /// `keep_last`, default [`DEFAULT_KEEP_LAST`].
    pub keep_last: u32,
    /// `keep_daily`, default [`DEFAULT_KEEP_DAILY`].
    pub keep_daily: u32,
    /// `max_age`: plan warns when the newest archive is older. `None`: never.
    pub max_age: Option<Duration>,
    /// `s3.instance_credentials`: an `s3://` destination may take its
    /// credentials from the cloud instance's metadata service when the
    /// `AWS_*` variables give none. Default false: it is never asked.
    pub instance_credentials: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_folders_or_s3_urls() {
        let base = Path::new("/topo");
        assert_eq!(
            Location::parse("backups", base).unwrap(),
            Location::Folder(PathBuf::from("/topo/backups"))
        );
        assert_eq!(
            Location::parse("/var/b", base).unwrap(),
            Location::Folder(PathBuf::from("/var/b"))
        );
        let s3 = Location::parse("s3://bkt/clusters/lab/", base).unwrap();
        assert_eq!(
            s3,
            Location::S3 {
                bucket: "bkt".into(),
                prefix: "clusters/lab".into()
            }
        );
        assert_eq!(s3.to_string(), "s3://bkt/clusters/lab");
        assert_eq!(
            Location::parse("s3://bkt", base).unwrap().to_string(),
            "s3://bkt"
        );
        for bad in [
            "",
            " ",
            "s3://",
            "s3:///x",
            "s3://b/a//c",
            "s3://b/../c",
            "gs://b/p",
        ] {
            assert!(Location::parse(bad, base).is_err(), "{bad}");
        }
    }
}
