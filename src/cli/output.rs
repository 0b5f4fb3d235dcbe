//! `talosprov output [NAME [NODE]]`: the values in the state (kubeconfig,
//! talosconfig, each node's machine config). Sensitive values are shown only
//! with `-raw`, `-json` or `--out-file` (written with mode 0600).

use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::Args;

use super::frontend::Console;
use super::state_options::StateOptions;
use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::state::{ClientConfig, outputs, short_lived};
use talosprov_statefile::format::{Output, Outputs};

/// Arguments of `talosprov output`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// `kubeconfig`, `talosconfig` or `machineconfig` (then NODE); without a
    /// name, list the outputs.
    name: Option<String>,

    /// The node hostname, for `machineconfig`.
    node: Option<String>,

    /// Print the value exactly as stored, for a file or a pipe.
    #[arg(long, conflicts_with_all = ["json", "out_file"])]
    raw: bool,

    /// Print as JSON (a string, or every output with its value).
    #[arg(long, conflicts_with = "out_file")]
    json: bool,

    /// Write the value to this file, with mode 0600.
    #[arg(long = "out-file", value_name = "PATH")]
    out_file: Option<PathBuf>,

    /// For `talosconfig` or `kubeconfig`: issue a new one for a person, valid for this long
    /// (`24h`, `30m`, `7days`; at most 365 days), from the CAs in the state; the state's own
    /// is left as it is.
    #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
    ttl: Option<std::time::Duration>,

    #[command(flatten)]
    state: StateOptions,
}

/// `--ttl`'s value: a duration as the other settings take them.
fn parse_ttl(text: &str) -> Result<std::time::Duration, String> {
    talosprov_base::duration::parse(text)
}

/// Find one output by the names `output` accepts.
fn find<'a>(
    outputs: &'a Outputs,
    name: &str,
    node: Option<&str>,
) -> anyhow::Result<(String, &'a Output)> {
    let (key, found) = match (name, node) {
        ("kubeconfig", None) => ("kubeconfig".to_owned(), outputs.kubeconfig.as_ref()),
        ("talosconfig", None) => ("talosconfig".to_owned(), outputs.talosconfig.as_ref()),
        ("machineconfig", Some(n)) => (format!("machineconfig.{n}"), outputs.machineconfigs.get(n)),
        ("machineconfig", None) => {
            bail!("output machineconfig needs a node: talosprov output machineconfig NODE")
        }
        (other, None) if other.starts_with("machineconfig.") => {
            let n = &other["machineconfig.".len()..];
            (other.to_owned(), outputs.machineconfigs.get(n))
        }
        (_, Some(_)) => bail!("only machineconfig takes a node"),
        (other, None) => bail!(
            "there is no output {other:?}: the outputs are kubeconfig, talosconfig and machineconfig NODE"
        ),
    };
    let output = match found {
        Some(o) => o,
        None if key.starts_with("machineconfig.") => {
            let nodes: Vec<&str> = outputs.machineconfigs.keys().map(String::as_str).collect();
            let node = &key["machineconfig.".len()..];
            if nodes.is_empty() {
                bail!("no machine configs in the state yet: run `talosprov apply` first");
            }
            bail!(
                "no machine config for node {node:?} in the state; nodes: {}",
                nodes.join(", ")
            );
        }
        None => bail!("output {key} is not in the state yet: run `talosprov apply` first"),
    };
    Ok((key, output))
}

/// Print or write the outputs.
///
/// # Errors
/// No state, an unknown output, or a failed write.
pub async fn run(args: OutputArgs) -> Result<Outcome, CommandError> {
    let outputs = &outputs(&args.state.settings(), &Console::ui()).await?;
    let Some(name) = &args.name else {
        if args.ttl.is_some() {
            return Err(anyhow!(
                "--ttl needs an output name: `talosprov output talosconfig --ttl 24h -raw`"
            )
            .into());
        }
        if args.raw || args.out_file.is_some() {
            return Err(anyhow!(
                "-raw and --out-file need an output name, e.g. `talosprov output kubeconfig -raw`"
            )
            .into());
        }
        let all = outputs.named();
        if all.is_empty() {
            crate::ui::out::warn("no outputs in the state yet: run `talosprov apply` first");
        }
        if args.json {
            let map: serde_json::Map<String, serde_json::Value> = all
                .iter()
                .map(|(n, o)| {
                    let v = serde_json::json!({
                        "sensitive": o.sensitive,
                        "type": "string",
                        "value": o.value.expose(),
                    });
                    (n.clone(), v)
                })
                .collect();
            let text = serde_json::to_string_pretty(&serde_json::Value::Object(map))?;
            crate::ui::console::print_lines(&[text])?;
        } else {
            let lines: Vec<String> = all.iter().map(|(n, o)| human_line(n, o)).collect();
            crate::ui::console::print_lines(&lines)?;
        }
        return Ok(Outcome::Success);
    };
    let (key, output) = find(outputs, name, args.node.as_deref())?;
    let issued;
    let (output, value) = match args.ttl {
        None => (output, output.value.expose()),
        Some(ttl) => {
            let which = match key.as_str() {
                "talosconfig" => ClientConfig::Talosconfig,
                "kubeconfig" => ClientConfig::Kubeconfig,
                _ => return Err(anyhow!("--ttl is for talosconfig and kubeconfig only").into()),
            };
            issued = Output {
                value: short_lived(&args.state.settings(), which, ttl, &Console::ui()).await?,
                sensitive: true,
            };
            (&issued, issued.value.expose())
        }
    };
    if let Some(path) = &args.out_file {
        talosprov_files::write_private(path, value.as_bytes()).map_err(|e| {
            anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
        })?;
        crate::ui::out::print_line(&format!("Wrote {key} to {} (mode 0600).", path.display()));
    } else if args.raw {
        crate::ui::console::print_raw(value)?;
    } else if args.json {
        crate::ui::console::print_lines(&[serde_json::to_string(value)?])?;
    } else {
        crate::ui::console::print_lines(&[human_line(&key, output)])?;
        if output.sensitive {
            crate::ui::out::warn(&format!(
                "{key} is sensitive: use -raw, -json or --out-file PATH to get it"
            ));
        }
    }
    Ok(Outcome::Success)
}

/// `name = <sensitive>`, or the value when it is not sensitive.
fn human_line(name: &str, output: &Output) -> String {
    if output.sensitive {
        format!("{name} = <sensitive>")
    } else {
        format!("{name} = {}", output.value.expose())
    }
}
