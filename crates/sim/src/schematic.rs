//! The Image Factory stand-in's schematic ID: what the factory does with the body
//! of `POST /schematics` (siderolabs/image-factory `pkg/schematic/schematic.go`):
//! parse it, marshal it again with go-yaml v3 (4-space indent, `customization`
//! always present, `extraKernelArgs` before `systemExtensions`), and take the
//! SHA-256 of that text as lowercase hex.
//!
//! Written separately from talosprov's own computation
//! (`talosprov_base::schematic`), so that the tests compare two implementations.

use serde_yaml_ng::Value;
use sha2::{Digest, Sha256};

/// A go-yaml plain scalar when the text can be one, else a double-quoted string.
/// Covers what schematics hold (extension names, kernel arguments).
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._=-+,@".contains(&b))
        && !text.starts_with(['-', '.'])
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        )
        && text.parse::<f64>().is_err();
    if plain {
        text.to_owned()
    } else {
        serde_json::to_string(text).unwrap_or_default()
    }
}

/// The strings of a list at `path`, or why the body is refused.
fn strings(doc: &Value, path: &[&str]) -> Result<Vec<String>, String> {
    let mut v = doc;
    for key in path {
        match v.get(*key) {
            Some(next) => v = next,
            None => return Ok(Vec::new()),
        }
    }
    let Some(items) = v.as_sequence() else {
        return Ok(Vec::new());
    };
    items
        .iter()
        .map(|i| {
            i.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("invalid schematic: {} must be strings", path.join(".")))
        })
        .collect()
}

/// The schematic ID of a `POST /schematics` body.
///
/// # Errors
/// A body that is not YAML, or list items that are not strings (the factory's 400).
pub fn schematic_id(body: &[u8]) -> Result<String, String> {
    let doc: Value =
        serde_yaml_ng::from_slice(body).map_err(|e| format!("invalid schematic: {e}"))?;
    let args = strings(&doc, &["customization", "extraKernelArgs"])?;
    let extensions = strings(
        &doc,
        &["customization", "systemExtensions", "officialExtensions"],
    )?;
    let mut text = String::from("customization:");
    if args.is_empty() && extensions.is_empty() {
        text.push_str(" {}\n");
    } else {
        text.push('\n');
    }
    if !args.is_empty() {
        text.push_str("    extraKernelArgs:\n");
        for a in &args {
            text.push_str(&format!("        - {}\n", scalar(a)));
        }
    }
    if !extensions.is_empty() {
        text.push_str("    systemExtensions:\n        officialExtensions:\n");
        for e in &extensions {
            text.push_str(&format!("            - {}\n", scalar(e)));
        }
    }
    Ok(hex::encode(Sha256::digest(text.as_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IDs the real factory gives (its own tests and factory.talos.dev).
    #[test]
    fn ids_match_the_factory() {
        assert_eq!(
            schematic_id(b"customization: {}\n").unwrap(),
            "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
        );
        assert_eq!(
            schematic_id(
                b"customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/qemu-guest-agent]\n"
            )
            .unwrap(),
            "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515"
        );
    }

    #[test]
    fn bodies_that_are_not_schematics_are_refused() {
        assert!(schematic_id(b"customization: [").is_err());
        assert!(
            schematic_id(b"customization:\n  extraKernelArgs: [{a: b}]\n")
                .unwrap_err()
                .contains("extraKernelArgs")
        );
    }
}
