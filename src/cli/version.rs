//! `talosprov version`: the binary's version, the git commit and target it was
//! built from and for, the Rust compiler that built it, and the Talos config
//! contracts it generates machine configs for.

use clap::Args;
use serde::Serialize;

use crate::cli::error::Outcome;
use talosprov_base::version::Contract;
use talosprov_engine::command::CommandError;

/// Arguments of `talosprov version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Print one JSON object: version, commit, target, rustc,
    /// machine_config_contracts and default_contract.
    #[arg(long)]
    pub json: bool,
}

/// What `talosprov version` reports, as its `--json` object.
#[derive(Debug, Serialize)]
struct Build {
    /// The crate's version, as in Cargo.toml (`0.1.0`).
    version: &'static str,
    /// The full git commit hash, or `unknown` for a build outside a checkout.
    commit: &'static str,
    /// The Rust target triple (`x86_64-unknown-linux-musl`).
    target: &'static str,
    /// `rustc --version` of the compiler, without the leading `rustc `.
    rustc: &'static str,
    /// The machine config contracts talosprov renders (`v1.12`, …).
    machine_config_contracts: Vec<String>,
    /// The contract used when the topology names no Talos version.
    default_contract: String,
}

impl Build {
    fn this() -> Self {
        Build {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("TALOSPROV_BUILD_COMMIT"),
            target: env!("TALOSPROV_BUILD_TARGET"),
            rustc: env!("TALOSPROV_BUILD_RUSTC"),
            machine_config_contracts: [Contract::V1_12, Contract::V1_13, Contract::V1_14]
                .iter()
                .map(ToString::to_string)
                .collect(),
            default_contract: Contract::DEFAULT.to_string(),
        }
    }
}

/// Print the version, as text or (`--json`) as one JSON object on one line.
///
/// # Errors
/// Only when stdout is closed.
pub fn run(args: VersionArgs) -> Result<Outcome, CommandError> {
    let build = Build::this();
    if args.json {
        let json = serde_json::to_string(&build).expect("plain strings serialise");
        crate::ui::out::write_stdout(&(json + "\n"))?;
        return Ok(Outcome::Success);
    }
    crate::ui::console::print_lines(&[
        format!("talosprov {}", build.version),
        format!("commit: {}", build.commit),
        format!("target: {}", build.target),
        format!("rustc: {}", build.rustc),
        format!(
            "machine config contracts: {} (default {}); other Talos releases get the nearest one, with a warning",
            build.machine_config_contracts.join(", "),
            build.default_contract
        ),
    ])?;
    Ok(Outcome::Success)
}
