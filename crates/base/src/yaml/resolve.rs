//! go-yaml's scalar resolution: which plain strings would read back as another type (null,
//! bool, int, float, timestamp, merge key) and so must be quoted when written.
//! Source: go-yaml v4.0.0-rc.4 `internal/libyaml/resolver.go` and `representer.go`.

/// Whether go-yaml's `resolve("", s)` reads `s` back as a string (not null, bool, int, float,
/// timestamp or merge key). Source: go-yaml v4 `internal/libyaml/resolver.go`.
pub fn resolves_to_string(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "true", "True", "TRUE", "false", "False", "FALSE", "", "~", "null", "Null", "NULL", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "-0", "-0.0", "<<",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let Some(first) = s.chars().next() else {
        return false;
    };
    match first {
        '.' => !is_go_float(s),
        '+' | '-' | '0'..='9' => {
            if is_timestamp(s) {
                return false;
            }
            let plain: String = s.chars().filter(|&c| c != '_').collect();
            !(is_go_int(&plain) || (is_yaml_style_float(&plain) && is_go_float(&plain)))
        }
        _ => true,
    }
}

/// Go `strconv.ParseInt(s, 0, 64)` / `ParseUint` syntax (range not checked: an overlong
/// decimal still resolves as a float, as in go-yaml).
fn is_go_int(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let all =
        |digits: &str, radix: u32| !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix));
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        all(hex, 16)
    } else if let Some(oct) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
        all(oct, 8)
    } else if let Some(bin) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
        all(bin, 2)
    } else if body.len() > 1 && body.starts_with('0') {
        all(body, 8)
    } else {
        all(body, 10)
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_style_float(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let digits = |d: &str| d.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && digits(frac),
        Some((int, frac)) => digits(int) && digits(frac),
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// Go `strconv.ParseFloat` for the decimal forms go-yaml can reach.
fn is_go_float(s: &str) -> bool {
    is_yaml_style_float(s) && s.parse::<f64>().is_ok()
}

/// go-yaml `parseTimestamp`: four digits, a dash, then one of its accepted layouts.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let (date, time) = match s.find(['T', 't', ' ']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let (Some(_y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let small = |x: &str, max: u32| {
        (1..=2).contains(&x.len()) && x.parse::<u32>().is_ok_and(|v| (1..=max).contains(&v))
    };
    if !small(m, 12) || !small(d, 31) {
        return false;
    }
    match time {
        None => true,
        Some(t) => {
            let clock =
                t.trim_end_matches(|c: char| c == 'Z' || c.is_ascii_digit() || "+-:.".contains(c));
            clock.is_empty() && t.split(':').count() >= 3
        }
    }
}

pub(crate) fn is_base60_float(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first == '+' || first == '-' || first.is_ascii_digit()) || !s.contains(':') {
        return false;
    }
    // ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (main, frac) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if frac.is_some_and(|f| !f.chars().all(|c| c.is_ascii_digit() || c == '_')) {
        return false;
    }
    let mut groups = main.split(':');
    let head = groups.next().unwrap_or_default();
    let head_ok = head.starts_with(|c: char| c.is_ascii_digit())
        && head.chars().all(|c| c.is_ascii_digit() || c == '_');
    let mut count = 0;
    let rest_ok = groups.all(|g| {
        count += 1;
        let b = g.as_bytes();
        match b.len() {
            1 => b[0].is_ascii_digit(),
            2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
            _ => false,
        }
    });
    head_ok && rest_ok && count > 0
}

pub(crate) fn is_old_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_that_read_back_as_other_types_are_recognised() {
        for s in [
            "",
            "~",
            "null",
            "true",
            "FALSE",
            "12",
            "-3",
            "0x1F",
            "0o17",
            "0755",
            "1_000",
            "1.5",
            ".5",
            "1e3",
            "2024-01-02",
            "2001-12-14t21:59:43.10-05:00",
            ".inf",
            "<<",
        ] {
            assert!(
                !resolves_to_string(s),
                "{s:?} should not resolve to a string"
            );
        }
        for s in [
            "yes",
            "on",
            "10.244.0.0/16",
            "v1.13.9",
            "1.2.3",
            "abc",
            "0x",
            "-",
            "2024-13-45",
            "fx7k2q.0a1b2c3d4e5f6g7h",
        ] {
            assert!(resolves_to_string(s), "{s:?} should resolve to a string");
        }
    }

    #[test]
    fn yaml_1_1_forms_are_flagged_for_quoting() {
        assert!(is_old_bool("on") && is_old_bool("No") && !is_old_bool("true"));
        assert!(
            is_base60_float("1:20")
                && is_base60_float("190:20:30.15")
                && !is_base60_float("1:2:3:99")
        );
    }
}
