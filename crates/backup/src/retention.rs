//! Which archives a `backup:` section keeps: the newest `keep_last`, and the
//! newest of each of the last `keep_daily` UTC days (today included). The
//! newest archive is always kept, so retention never deletes the only backup
//! left. Pure: the caller lists and deletes.

use std::collections::BTreeSet;

use time::OffsetDateTime;

use crate::name::ArchiveName;

/// A `backup:` section's retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Keep the newest N archives.
    pub keep_last: u32,
    /// Keep the newest archive of each of the last D days (UTC), today included.
    pub keep_daily: u32,
}

/// What to keep and what to delete among `archives` (one cluster's), at `now`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Kept, newest first.
    pub keep: Vec<ArchiveName>,
    /// To delete, newest first.
    pub delete: Vec<ArchiveName>,
}

/// Decide which of `archives` to keep at `now`. Archives dated after `now`
/// (a clock behind the store's) count as today's.
pub fn decide(archives: &[ArchiveName], retention: Retention, now: OffsetDateTime) -> Verdict {
    let mut sorted: Vec<&ArchiveName> = archives.iter().collect();
    sorted.sort_by(|a, b| b.cmp(a));
    sorted.dedup();
    let today = now.to_offset(time::UtcOffset::UTC).date();
    let mut days_kept = BTreeSet::new();
    let mut verdict = Verdict::default();
    for (i, archive) in sorted.iter().enumerate() {
        let day = archive.time.date().min(today);
        let age_days = (today - day).whole_days();
        let daily = age_days < i64::from(retention.keep_daily) && days_kept.insert(day);
        if i == 0 || i < retention.keep_last as usize || daily {
            verdict.keep.push((*archive).clone());
        } else {
            verdict.delete.push((*archive).clone());
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    fn at(t: OffsetDateTime) -> ArchiveName {
        ArchiveName::new(t, "lab", 1)
    }

    #[test]
    fn keeps_the_last_n_and_one_per_day_for_d_days() {
        let now = datetime!(2026-12-05 12:00 UTC);
        let archives = vec![
            at(datetime!(2026-12-05 11:00 UTC)),
            at(datetime!(2026-12-05 10:00 UTC)),
            at(datetime!(2026-12-05 09:00 UTC)),
            at(datetime!(2026-12-04 23:00 UTC)),
            at(datetime!(2026-12-04 08:00 UTC)),
            at(datetime!(2026-12-03 08:00 UTC)),
            at(datetime!(2026-12-01 08:00 UTC)),
        ];
        let v = decide(
            &archives,
            Retention {
                keep_last: 2,
                keep_daily: 3,
            },
            now,
        );
        let kept: Vec<_> = v.keep.iter().map(|a| a.time).collect();
        assert_eq!(
            kept,
            [
                datetime!(2026-12-05 11:00 UTC),
                datetime!(2026-12-05 10:00 UTC),
                datetime!(2026-12-04 23:00 UTC),
                datetime!(2026-12-03 08:00 UTC),
            ]
        );
        assert_eq!(v.delete.len(), 3);
    }

    #[test]
    fn never_deletes_the_only_backup_left() {
        let now = datetime!(2026-12-05 12:00 UTC);
        let old = vec![
            at(datetime!(2025-01-01 00:00 UTC)),
            at(datetime!(2024-01-01 00:00 UTC)),
        ];
        let v = decide(
            &old,
            Retention {
                keep_last: 0,
                keep_daily: 0,
            },
            now,
        );
        assert_eq!(v.keep, [old[0].clone()]);
        assert_eq!(v.delete, [old[1].clone()]);
        assert_eq!(
            decide(
                &[],
                Retention {
                    keep_last: 0,
                    keep_daily: 0
                },
                now
            ),
            Verdict::default()
        );
    }
}
