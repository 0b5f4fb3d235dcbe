//! The JSON Schema (draft 2020-12) of `cluster.yaml`, derived from the raw
//! topology types (`raw.rs`) with schemars: their doc comments become
//! descriptions, their attributes give defaults and closed vocabularies, and
//! `additionalProperties: false` mirrors `read.rs` refusing unknown keys.
//!
//! Two raw shapes need help to read as the file is written: a [`Spanned`]
//! value is described as the bare value, and a list of [`Entry`] (a mapping
//! read in file order, such as `schematics`) as an object keyed by name. The
//! second is a rewrite of the generated schema, so any new `Vec<Entry<T>>`
//! section is described correctly by deriving alone.
//!
//! The schema describes the file's shape (keys, types, enums); the checks that
//! need more than that (references between sections, address arithmetic,
//! ranges that depend on the role) stay with `talosprov validate`.

use super::raw::{Entry, RawTopology, Spanned};
use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;
use std::borrow::Cow;

/// The marker an [`Entry`] list item carries until [`EntriesAsObjects`]
/// rewrites the list around it; it never appears in the finished schema.
const ENTRY_MARKER: &str = "x-talosprov-entry";

/// The JSON Schema of `cluster.yaml`, as `talosprov schema` prints it.
///
/// Deterministic: the same build always gives the same value, key order
/// included, so a committed copy can be compared with it.
pub fn cluster_schema() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with_transform(EntriesAsObjects)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<RawTopology>().to_value();
    unwrap_descriptions(&mut schema);
    // The identifying keys first, as a reader of the file expects them.
    let mut root = serde_json::Map::new();
    root.insert(
        "$schema".into(),
        schemars::consts::meta_schemas::DRAFT2020_12.into(),
    );
    root.insert("title".into(), "talosprov topology (cluster.yaml)".into());
    root.insert("description".into(), ROOT_DESCRIPTION.into());
    if let Value::Object(generated) = schema {
        for (key, value) in generated {
            if !root.contains_key(&key) {
                root.insert(key, value);
            }
        }
    }
    Value::Object(root)
}

/// What the whole file is, for the schema's top level.
const ROOT_DESCRIPTION: &str = "A Talos Linux Kubernetes cluster on Proxmox VE, as `talosprov` \
reads it. The schema checks keys, types and allowed values; `talosprov validate` also checks \
references, addresses and the required fields.";

/// Joins the lines of every description, which come from doc comments wrapped
/// at the source's width, so that an editor's hover text flows as one
/// paragraph; a blank line still separates paragraphs.
fn unwrap_descriptions(value: &mut Value) {
    match value {
        Value::Object(object) => {
            for (key, v) in object.iter_mut() {
                match v {
                    Value::String(text) if key == "description" => {
                        *text = text
                            .split("\n\n")
                            .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
                            .collect::<Vec<_>>()
                            .join("\n\n");
                    }
                    Value::Null
                    | Value::Bool(_)
                    | Value::Number(_)
                    | Value::String(_)
                    | Value::Array(_)
                    | Value::Object(_) => unwrap_descriptions(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

impl<T: JsonSchema> JsonSchema for Spanned<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}

impl<T: JsonSchema> JsonSchema for Entry<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Entry_{}", T::schema_name()).into()
    }

    fn schema_id() -> Cow<'static, str> {
        format!("talosprov::Entry<{}>", T::schema_id()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let value = generator.subschema_for::<T>();
        json_schema!({ (ENTRY_MARKER): value })
    }
}

/// Rewrites every list of [`Entry`] items into what the file holds: a mapping
/// from names to entries, in file order. An entry may be left empty
/// (`name:` with nothing after it), so its value may also be null.
#[derive(Debug, Clone, Copy)]
struct EntriesAsObjects;

impl Transform for EntriesAsObjects {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(object) = schema.as_object_mut() else {
            return;
        };
        let entry = object
            .get_mut("items")
            .and_then(|items| items.as_object_mut())
            .and_then(|items| items.remove(ENTRY_MARKER));
        let Some(entry) = entry else {
            return;
        };
        object.remove("items");
        let ty = match object.remove("type") {
            Some(Value::Array(types)) => Value::Array(
                types
                    .into_iter()
                    .map(|t| if t == "array" { "object".into() } else { t })
                    .collect(),
            ),
            _ => "object".into(),
        };
        object.insert("type".into(), ty);
        let nullable = serde_json::json!({ "anyOf": [entry, { "type": "null" }] });
        object.insert("additionalProperties".into(), nullable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
        path.iter().fold(v, |v, k| &v[*k])
    }

    #[test]
    fn named_sections_are_objects_keyed_by_name_with_no_marker_left() {
        let schema = cluster_schema();
        let text = schema.to_string();
        assert!(!text.contains(ENTRY_MARKER), "{text}");
        for section in ["schematics", "pci_mappings", "addons"] {
            let s = at(&schema, &["properties", section]);
            assert_eq!(
                s["type"],
                serde_json::json!(["object", "null"]),
                "{section}: {s}"
            );
            assert!(
                s["additionalProperties"]["anyOf"][0]["$ref"].is_string(),
                "{section}: {s}"
            );
        }
    }

    #[test]
    fn spanned_values_read_as_the_bare_value_and_unknown_keys_are_refused() {
        let schema = cluster_schema();
        assert_eq!(schema["additionalProperties"], false);
        let name = at(&schema, &["$defs", "RawCluster", "properties", "name"]);
        assert_eq!(
            name["type"],
            serde_json::json!(["string", "null"]),
            "{name}"
        );
        assert_eq!(
            at(&schema, &["$defs", "RawNode", "additionalProperties"]),
            false
        );
    }

    #[test]
    fn defaults_are_the_ones_validation_applies() {
        let schema = cluster_schema();
        let url = at(&schema, &["$defs", "RawImageFactory", "properties", "url"]);
        assert_eq!(
            url["default"],
            super::super::validate::DEFAULT_IMAGE_FACTORY
        );
    }
}
