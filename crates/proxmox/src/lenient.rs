//! Lenient reading of PVE answers: numbers may arrive as strings (`/cluster/nextid`,
//! a VM's `memory`), booleans as 0/1, `"1"` or absent (reference/proxmox.md §2,
//! "Value types in answers"). Serde helpers for `deserialize_with`, and plain readers.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A non-negative integer from a JSON number (integer or float) or a string holding
/// one (`"8192"`, `"8192.0"`, `" 12 "`). `None` for anything else.
pub fn u64_of(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => {
            let s = s.trim();
            s.parse::<u64>().ok().or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| *f >= 0.0)
                    .map(|f| f as u64)
            })
        }
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

/// A boolean from `true`/`false`, `0`/`1`, or the strings PVE's schema accepts
/// (`1`, `0`, `yes`, `no`, `on`, `off`, `true`, `false`). `None` for anything else.
pub fn bool_of(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "yes" | "on" | "true" => Some(true),
            "0" | "no" | "off" | "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A string from a JSON string, or the text of a number (some fields change type
/// between PVE releases).
pub fn string_of(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `deserialize_with` for an optional lenient integer; absent, null or unreadable is `None`.
///
/// # Errors
/// Only when the input is not JSON at all.
pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(u64_of))
}

/// `deserialize_with` for a lenient integer that must be there.
///
/// # Errors
/// When the value is missing or not a number.
pub fn req_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    u64_of(&v).ok_or_else(|| serde::de::Error::custom(format!("expected a number, got {v}")))
}

/// `deserialize_with` for a lenient integer that must be there and fit in a `u32` (a vmid).
///
/// # Errors
/// When the value is missing, not a number, or too large.
pub fn req_u64_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = req_u64(d)?;
    u32::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} is out of range")))
}

/// `deserialize_with` for a lenient boolean; absent or null is `false`.
///
/// # Errors
/// Only when the input is not JSON at all.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(bool_of).unwrap_or(false))
}

/// `deserialize_with` for an optional string that may arrive as a number.
///
/// # Errors
/// Only when the input is not JSON at all.
pub fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(string_of))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_arrive_as_strings_or_floats() {
        assert_eq!(u64_of(&json!("100")), Some(100));
        assert_eq!(u64_of(&json!(" 8192 ")), Some(8192));
        assert_eq!(u64_of(&json!(8192)), Some(8192));
        assert_eq!(u64_of(&json!(4096.0)), Some(4096));
        assert_eq!(u64_of(&json!("8192.0")), Some(8192));
        assert_eq!(u64_of(&json!("current=8192")), None);
        assert_eq!(u64_of(&json!(null)), None);
        assert_eq!(u64_of(&json!(-1)), None);
    }

    #[test]
    fn booleans_arrive_as_numbers_or_words() {
        assert_eq!(bool_of(&json!(1)), Some(true));
        assert_eq!(bool_of(&json!(0)), Some(false));
        assert_eq!(bool_of(&json!("1")), Some(true));
        assert_eq!(bool_of(&json!("off")), Some(false));
        assert_eq!(bool_of(&json!(true)), Some(true));
        assert_eq!(bool_of(&json!("maybe")), None);
    }

    #[derive(serde::Deserialize)]
    struct Sample {
        #[serde(default, deserialize_with = "opt_u64")]
        memory: Option<u64>,
        #[serde(default, deserialize_with = "flag")]
        shared: bool,
        #[serde(default, deserialize_with = "opt_string")]
        tags: Option<String>,
    }

    #[test]
    fn serde_helpers_read_pve_shapes() {
        let s: Sample = serde_json::from_value(json!({"memory": "8192", "shared": 1, "tags": 5}))
            .expect("decodes");
        assert_eq!(s.memory, Some(8192));
        assert!(s.shared);
        assert_eq!(s.tags.as_deref(), Some("5"));
        let empty: Sample = serde_json::from_value(json!({})).expect("decodes");
        assert_eq!(empty.memory, None);
        assert!(!empty.shared);
    }
}
