//! Archive names: `etcd-<UTC time>-<cluster>-r<revision>`, then
//! `.snapshot.age` for the archive and `.json` for its manifest. The time
//! (`20261205T191500.123Z`, to the millisecond, so two snapshots of one
//! second keep apart) comes first, so the names of a destination sort by
//! time; the cluster and the etcd revision follow.

use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

/// The archive's suffix.
pub const ARCHIVE_SUFFIX: &str = ".snapshot.age";
/// The manifest's suffix.
pub const MANIFEST_SUFFIX: &str = ".json";

const STAMP: &[FormatItem<'static>] =
    format_description!("[year][month][day]T[hour][minute][second].[subsecond digits:3]Z");

/// The stamp's length in bytes.
const STAMP_BYTES: usize = 20;

/// One archive's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArchiveName {
    /// When the snapshot was taken, UTC, whole milliseconds.
    pub time: OffsetDateTime,
    /// The cluster's name (`cluster.name`).
    pub cluster: String,
    /// The etcd revision at the snapshot (0 when it could not be read).
    pub revision: u64,
}

impl ArchiveName {
    /// A name for `cluster` at `time` (truncated to whole milliseconds, in UTC).
    pub fn new(time: OffsetDateTime, cluster: &str, revision: u64) -> ArchiveName {
        let time = time
            .to_offset(time::UtcOffset::UTC)
            .replace_millisecond(time.millisecond())
            .expect("a millisecond of a valid time is valid");
        ArchiveName {
            time,
            cluster: cluster.to_owned(),
            revision,
        }
    }

    /// `etcd-20261205T191500.123Z-homelab-r1234`.
    pub fn stem(&self) -> String {
        format!(
            "etcd-{}-{}-r{}",
            self.time.format(STAMP).expect("a UTC time formats"),
            self.cluster,
            self.revision
        )
    }

    /// The archive's object name.
    pub fn archive(&self) -> String {
        format!("{}{ARCHIVE_SUFFIX}", self.stem())
    }

    /// The manifest's object name.
    pub fn manifest(&self) -> String {
        format!("{}{MANIFEST_SUFFIX}", self.stem())
    }

    /// The name a stem, an archive or a manifest object name carries, or `None`
    /// for any other name (which talosprov never lists, keeps or deletes).
    pub fn parse(object: &str) -> Option<ArchiveName> {
        let stem = object
            .strip_suffix(ARCHIVE_SUFFIX)
            .or_else(|| object.strip_suffix(MANIFEST_SUFFIX))
            .unwrap_or(object);
        let rest = stem.strip_prefix("etcd-")?;
        let (stamp, rest) = rest.split_at_checked(STAMP_BYTES)?;
        let time = time::PrimitiveDateTime::parse(stamp, STAMP)
            .ok()?
            .assume_utc();
        let rest = rest.strip_prefix('-')?;
        let (cluster, revision) = rest.rsplit_once("-r")?;
        if cluster.is_empty()
            || revision.is_empty()
            || !revision.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(ArchiveName {
            time,
            cluster: cluster.to_owned(),
            revision: revision.parse().ok()?,
        })
    }
}

impl std::fmt::Display for ArchiveName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.stem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn names_sort_by_time_and_carry_the_cluster_and_revision() {
        let a = ArchiveName::new(datetime!(2026-12-05 19:15:00.7 UTC), "home-lab", 1234);
        assert_eq!(
            a.archive(),
            "etcd-20261205T191500.700Z-home-lab-r1234.snapshot.age"
        );
        assert_eq!(
            a.manifest(),
            "etcd-20261205T191500.700Z-home-lab-r1234.json"
        );
        let same_second =
            ArchiveName::new(datetime!(2026-12-05 19:15:00.701999 UTC), "home-lab", 1234);
        assert!(
            a.archive() < same_second.archive(),
            "{}",
            same_second.archive()
        );
        assert_eq!(
            ArchiveName::parse(&same_second.stem()),
            Some(same_second.clone())
        );
        assert_eq!(ArchiveName::parse(&a.archive()), Some(a.clone()));
        assert_eq!(ArchiveName::parse(&a.manifest()), Some(a.clone()));
        let earlier = ArchiveName::new(datetime!(2026-12-04 23:00:00 +02:00), "zzz", 1);
        assert!(earlier.archive() < a.archive(), "time comes first");
        for other in [
            "notes.txt",
            "etcd-20261205T191500.000Z-r12.json",
            "etcd-20261205T191500.000Z-lab-rx.json",
            "etcd-2026120XT191500.000Z-lab-r1.json",
            "etcd-20261205T191500.000Zlab-r1.json",
            "etcd-20261205T191500Z-lab-r1.json",
            "etcd-",
        ] {
            assert_eq!(ArchiveName::parse(other), None, "{other}");
        }
    }
}
