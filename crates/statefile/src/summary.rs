//! What a stored state document holds, at a glance (pure): its lineage, its
//! serial and whether it has the cluster's secrets, read from the raw bytes
//! of a plain state or an encrypted envelope. The local backend uses it to
//! never replace a `.backup` with a state that holds less.

use std::fmt;

use uuid::Uuid;

/// The identity of a stored state document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The state's lineage.
    pub lineage: Uuid,
    /// The state's serial.
    pub serial: u64,
    /// Whether it holds a secrets bundle; `None` for an encrypted envelope,
    /// which shows only `version`, `lineage` and `serial` in clear.
    pub secrets: Option<bool>,
}

impl Summary {
    /// Read a stored document; `None` when it is empty, not JSON, or lacks a
    /// lineage or an integer serial (not a state).
    pub fn of(bytes: &[u8]) -> Option<Summary> {
        super::format::check_bounds(bytes).ok()?;
        let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let lineage = value.get("lineage")?.as_str()?.parse().ok()?;
        let serial = value.get("serial")?.as_u64()?;
        let secrets = if value.get("encrypted_state").is_some() {
            None
        } else {
            Some(value.get("secrets").is_some_and(|s| !s.is_null()))
        };
        Some(Summary {
            lineage,
            serial,
            secrets,
        })
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "serial {} of lineage {}", self.serial, self.lineage)?;
        match self.secrets {
            Some(true) => f.write_str(", with the cluster's secrets"),
            Some(false) => f.write_str(", without secrets"),
            None => f.write_str(", encrypted"),
        }
    }
}

/// Why a backup was kept rather than replaced by the state a run started from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepReason {
    /// The state is empty or not a state at all.
    Unreadable,
    /// The state belongs to another cluster.
    OtherLineage {
        /// The state's lineage.
        state: Uuid,
    },
    /// The state is older than the backup.
    OlderSerial {
        /// The state's serial.
        state: u64,
    },
    /// The backup holds the secrets and the state does not.
    NoSecrets,
}

impl fmt::Display for KeepReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepReason::Unreadable => f.write_str("the state it would back up is not readable"),
            KeepReason::OtherLineage { state } => write!(
                f,
                "the state it would back up has lineage {state}, another cluster"
            ),
            KeepReason::OlderSerial { state } => write!(
                f,
                "the state it would back up has an older serial ({state})"
            ),
            KeepReason::NoSecrets => {
                f.write_str("the state it would back up has no secrets bundle")
            }
        }
    }
}

/// Whether a backup holding `backup` must be kept rather than replaced by
/// `candidate` (the state as it was before this run; `None` when that is not
/// a readable state). A backup that is not a readable state itself holds
/// nothing to lose, and is replaced.
pub fn keep_backup(backup: Option<&Summary>, candidate: Option<&Summary>) -> Option<KeepReason> {
    let backup = backup?;
    let Some(candidate) = candidate else {
        return Some(KeepReason::Unreadable);
    };
    if candidate.lineage != backup.lineage {
        return Some(KeepReason::OtherLineage {
            state: candidate.lineage,
        });
    }
    if candidate.serial < backup.serial {
        return Some(KeepReason::OlderSerial {
            state: candidate.serial,
        });
    }
    if backup.secrets == Some(true) && candidate.secrets == Some(false) {
        return Some(KeepReason::NoSecrets);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::sample;

    fn summary(serial: u64, lineage: u128, secrets: bool) -> Summary {
        Summary {
            lineage: Uuid::from_u128(lineage),
            serial,
            secrets: Some(secrets),
        }
    }

    #[test]
    fn summary_reads_plain_states_and_envelopes() {
        let s = Summary::of(&sample().to_json()).unwrap();
        assert_eq!((s.serial, s.secrets), (7, Some(true)));
        assert_eq!(s.lineage, sample().lineage);
        let envelope = br#"{"version":1,"lineage":"00000000-0000-0000-0000-000000000007","serial":3,"encryption":"age","encrypted_state":"x"}"#;
        let e = Summary::of(envelope).unwrap();
        assert_eq!((e.serial, e.secrets), (3, None));
        for not_a_state in [&b""[..], b"  \n", b"<html>", b"{}", br#"{"serial":1}"#] {
            assert_eq!(Summary::of(not_a_state), None);
        }
    }

    #[test]
    fn a_backup_is_kept_against_less() {
        let backup = summary(9, 1, true);
        assert_eq!(
            keep_backup(Some(&backup), None),
            Some(KeepReason::Unreadable)
        );
        assert!(matches!(
            keep_backup(Some(&backup), Some(&summary(12, 2, true))),
            Some(KeepReason::OtherLineage { .. })
        ));
        assert_eq!(
            keep_backup(Some(&backup), Some(&summary(8, 1, true))),
            Some(KeepReason::OlderSerial { state: 8 })
        );
        assert_eq!(
            keep_backup(Some(&backup), Some(&summary(10, 1, false))),
            Some(KeepReason::NoSecrets)
        );
    }

    #[test]
    fn a_backup_is_replaced_by_as_much_or_more() {
        let backup = summary(9, 1, true);
        assert_eq!(keep_backup(Some(&backup), Some(&summary(9, 1, true))), None);
        assert_eq!(
            keep_backup(Some(&backup), Some(&summary(10, 1, true))),
            None
        );
        let encrypted = Summary {
            secrets: None,
            ..summary(10, 1, true)
        };
        assert_eq!(keep_backup(Some(&backup), Some(&encrypted)), None);
        assert_eq!(
            keep_backup(Some(&summary(3, 1, false)), Some(&summary(4, 1, false))),
            None
        );
        assert_eq!(
            keep_backup(None, None),
            None,
            "an unreadable backup has nothing to lose"
        );
    }
}
