//! The one way talosprov reads a duration, wherever a user gives one: a flag
//! (`-lock-timeout`, `health --wait`), a variable (`TALOSPROV_INTERRUPT_GRACE`,
//! `TALOSPROV_ROLLOUT_WAIT`, `TALOSPROV_READY_WAIT`) or an http backend
//! setting (`retry_wait_min`, `retry_wait_max`). Each accepts the same forms
//! and refuses with the same words.

use std::time::Duration;

/// What a duration must look like, as the refusals say it.
pub const EXPECTED: &str = "not a number of seconds nor a duration such as 30s, 5m or 1h30m";

/// A bare number of seconds (`300`, `0`), or a duration in humantime's forms
/// (`30s`, `5m`, `1h30m`, `500ms`, `2h 5m`); surrounding blanks are ignored.
///
/// # Errors
/// Any other text, with [`EXPECTED`] as the message (a `String`, as clap's
/// value parsers take).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    humantime::parse_duration(text).map_err(|_| EXPECTED.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_humantime_durations_are_read_alike() {
        let secs = Duration::from_secs;
        for (text, want) in [
            ("0", secs(0)),
            ("300", secs(300)),
            (" 20 ", secs(20)),
            ("0s", secs(0)),
            ("30s", secs(30)),
            ("5m", secs(300)),
            ("1h30m", secs(5400)),
            ("2h 5m", secs(7500)),
            ("500ms", Duration::from_millis(500)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn anything_else_is_refused_with_one_wording() {
        for text in ["", "soon", "5x", "-5", "1.5", "5 minutes ago", "m5"] {
            assert_eq!(parse(text), Err(EXPECTED.to_owned()), "{text:?}");
        }
    }
}
