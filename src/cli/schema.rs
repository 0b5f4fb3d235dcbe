//! `talosprov schema`: print the JSON Schema of `cluster.yaml`, for editors
//! (`# yaml-language-server: $schema=...`) and other tools. It is derived from
//! the topology types, so it always matches what this binary reads.

use anyhow::Context;
use clap::Args;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;

/// Arguments of `talosprov schema` (none).
#[derive(Debug, Args)]
pub struct SchemaArgs {}

/// Print the schema as pretty JSON with a final newline, byte for byte what
/// `schema/cluster.schema.json` in the repository holds.
///
/// # Errors
/// Only when stdout is closed.
pub fn run(_args: SchemaArgs) -> Result<Outcome, CommandError> {
    let schema = talosprov_topology::schema::cluster_schema();
    let mut text = serde_json::to_string_pretty(&schema).context("serialising the schema")?;
    text.push('\n');
    crate::ui::out::write_stdout(&text)?;
    Ok(Outcome::Success)
}
