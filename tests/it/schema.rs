//! The JSON Schema of `cluster.yaml` (`talosprov schema`): the committed copy is
//! the binary's output, every example points editors at it, and an independent
//! validator (Python's `jsonschema`, draft 2020-12) accepts every example and
//! valid fixture and refuses the invalid fixtures whose fault is one of shape.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::cli::{stdout, talosprov};
use crate::support::fixtures::repo;

/// The `jsonschema` release `tests/run.sh` installs.
const JSONSCHEMA: &str = "jsonschema==4.26.0";

/// The invalid fixtures whose diagnostics include an unknown key, a value of
/// the wrong type or a value outside a closed vocabulary, each with a place
/// the schema alone must refuse (a JSON path, `/` between the steps).
const SHAPE_FAULTS: [(&str, &str); 6] = [
    ("unknown-key.yaml", "nodes/0"), // memroy, colour (and gatway, extra_section)
    ("wrong-type.yaml", "nodes/0/memory"), // memory: [4096] (and cores: two)
    ("invalid-role.yaml", "nodes/1/role"), // role: master
    ("invalid-value.yaml", "state"), // backend: s3
    ("many-faults.yaml", "nodes/1/role"), // role: wroker (and memroy)
    ("addon-checksum.yaml", "addons/numeric"), // sha256: 1234, a number
];

/// Validates each document against the schema and prints one JSON line per
/// document: its name and the validator's messages (none when it is valid).
const VALIDATOR: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
given = json.load(sys.stdin)
Draft202012Validator.check_schema(given["schema"])
validator = Draft202012Validator(given["schema"])
for name, doc in given["documents"].items():
    errors = [
        "/".join(str(p) for p in e.absolute_path) + ": " + e.message
        for e in validator.iter_errors(doc)
    ]
    print(json.dumps({"name": name, "errors": errors}))
"#;

fn schema_file() -> PathBuf {
    repo().join("schema/cluster.schema.json")
}

fn committed_schema() -> serde_json::Value {
    let text = std::fs::read_to_string(schema_file()).expect("read schema/cluster.schema.json");
    serde_json::from_str(&text).expect("schema/cluster.schema.json is JSON")
}

/// Every `examples/**/cluster.yaml`, sorted.
fn examples() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read examples/") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.file_name().is_some_and(|n| n == "cluster.yaml") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("examples"), &mut out);
    out.sort();
    assert!(
        out.len() >= 2,
        "examples/lab and examples/homelab at least: {out:?}"
    );
    out
}

/// Every valid fixture (`tests/fixtures/valid/*.yaml`), sorted.
fn valid_fixtures() -> Vec<PathBuf> {
    let dir = repo().join("tests/fixtures/valid");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read tests/fixtures/valid")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    out.sort();
    out
}

/// The Python with `jsonschema`: `TALOSPROV_TEST_PYTHON`, else the venv that
/// `tests/run.sh` makes. Missing either is a failure, never a skip.
fn python() -> PathBuf {
    let python = std::env::var_os("TALOSPROV_TEST_PYTHON")
        .map_or_else(|| repo().join("target/venv/bin/python"), PathBuf::from);
    let probe = Command::new(&python)
        .args(["-c", "import jsonschema"])
        .output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "Python with {JSONSCHEMA} is needed to check the schema independently, and {} has none \
         ({probe:?}): run tests/run.sh, which installs it into target/venv and sets \
         TALOSPROV_TEST_PYTHON (or `{} -m pip install {JSONSCHEMA}`)",
        python.display(),
        python.display(),
    );
    python
}

/// The validator's messages for each file, keyed by file name relative to the
/// repository.
fn validate(files: &[PathBuf]) -> Vec<(String, Vec<String>)> {
    let root = repo();
    let mut documents = serde_json::Map::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("read a topology");
        let doc: serde_json::Value = serde_yaml_ng::from_str(&text)
            .unwrap_or_else(|e| panic!("{} as JSON: {e}", file.display()));
        let name = file.strip_prefix(&root).unwrap_or(file);
        documents.insert(name.display().to_string(), doc);
    }
    let input = serde_json::json!({ "schema": committed_schema(), "documents": documents });
    let mut child = Command::new(python())
        .args(["-c", VALIDATOR])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start Python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("send the documents");
    let out = child.wait_with_output().expect("run the validator");
    assert!(
        out.status.success(),
        "the validator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<(String, Vec<String>)> = stdout(&out)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a result line");
            let errors = v["errors"].as_array().expect("errors").iter();
            let errors = errors
                .map(|e| e.as_str().expect("text").to_owned())
                .collect();
            (v["name"].as_str().expect("name").to_owned(), errors)
        })
        .collect();
    assert_eq!(
        results.len(),
        files.len(),
        "one result per file: {results:?}"
    );
    results
}

#[test]
fn committed_schema_is_what_talosprov_schema_prints() {
    let out = talosprov().arg("schema").output().expect("run talosprov");
    assert!(out.status.success());
    let printed = stdout(&out);
    let committed = std::fs::read_to_string(schema_file()).unwrap_or_default();
    assert!(
        printed == committed,
        "schema/cluster.schema.json differs from `talosprov schema`; regenerate it with \
         `talosprov schema > schema/cluster.schema.json` (cargo run -- schema > schema/cluster.schema.json)"
    );
}

#[test]
fn schema_is_draft_2020_12_and_describes_the_sections() {
    let schema = committed_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    for section in [
        "cluster",
        "proxmox",
        "nodes",
        "schematics",
        "addons",
        "state",
    ] {
        let s = &schema["properties"][section];
        assert!(s["description"].is_string(), "{section}: {s}");
    }
    let node = &schema["$defs"]["RawNode"]["properties"];
    assert_eq!(node["role"]["default"], "controlplane");
    assert_eq!(node["disk_size"]["default"], 40);
}

#[test]
fn every_example_points_its_editor_at_the_schema() {
    for example in examples() {
        let text = std::fs::read_to_string(&example).expect("read the example");
        let first = text.lines().next().unwrap_or_default();
        let relative = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| panic!("{} starts with {first:?}", example.display()));
        let target = example.parent().expect("folder").join(relative);
        assert_eq!(
            target.canonicalize().ok(),
            schema_file().canonicalize().ok(),
            "{}: {relative} is not schema/cluster.schema.json",
            example.display()
        );
    }
}

#[test]
fn examples_and_valid_fixtures_satisfy_the_schema() {
    let mut files = examples();
    files.extend(valid_fixtures());
    for (name, errors) in validate(&files) {
        assert!(errors.is_empty(), "{name} breaks the schema: {errors:#?}");
    }
}

#[test]
fn invalid_fixtures_of_shape_break_the_schema_where_the_fault_is() {
    let dir = repo().join("tests/fixtures/invalid");
    let files: Vec<PathBuf> = SHAPE_FAULTS.iter().map(|(f, _)| dir.join(f)).collect();
    for ((name, errors), (_, place)) in validate(&files).into_iter().zip(SHAPE_FAULTS) {
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{place}: "))),
            "{name} should break the schema at {place}: {errors:#?}"
        );
    }
}

/// Every property with the JSON path of the object holding it, walking the
/// whole schema (`$defs` included).
fn properties<'a>(
    path: &str,
    value: &'a serde_json::Value,
    out: &mut Vec<(String, &'a str, &'a serde_json::Value)>,
) {
    match value {
        serde_json::Value::Object(object) => {
            for (key, child) in object {
                let here = format!("{path}/{key}");
                if key == "properties"
                    && let Some(props) = child.as_object()
                {
                    for (name, schema) in props {
                        out.push((here.clone(), name.as_str(), schema));
                        properties(&format!("{here}/{name}"), schema, out);
                    }
                } else {
                    properties(&here, child, out);
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                properties(&format!("{path}/{i}"), item, out);
            }
        }
        _ => {}
    }
}

/// Lowercase letters and digits only, for comparing a description with its key.
fn bare(text: &str) -> String {
    text.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[test]
fn every_property_has_a_description_that_says_more_than_its_key() {
    let schema = committed_schema();
    let mut found = Vec::new();
    properties("#", &schema, &mut found);
    assert!(found.len() > 50, "the walk found the properties: {found:?}");
    let mut poor = Vec::new();
    for (at, key, property) in found {
        let description = property["description"].as_str().unwrap_or_default();
        let too_short = description.chars().count() < 15;
        let just_the_key = bare(description) == bare(key);
        // Wrapped doc-comment lines are joined: a line break only separates
        // paragraphs, so hover text flows.
        let wrapped = description.replace("\n\n", "").contains('\n');
        if too_short || just_the_key || wrapped {
            poor.push(format!("{at}/{key}: {description:?}"));
        }
    }
    assert!(
        poor.is_empty(),
        "each property's description must say what the value is for (its meaning, unit, \
         form, default), not repeat the key, in at least 15 characters: {poor:#?}"
    );
}
