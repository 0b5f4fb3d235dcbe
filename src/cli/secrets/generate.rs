//! `talosprov secrets gen`: write a new secrets bundle (CAs, service-account key, tokens) in
//! talosctl's secrets.yaml format, with file mode 0600, for `machineconfig gen --secrets`.

use anyhow::Context as _;
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;

/// Arguments of `talosprov secrets gen`.
#[derive(Debug, Args)]
pub struct SecretsGenArgs {
    /// Where to write the bundle; `-` for stdout.
    #[arg(short, long, default_value = "secrets.yaml")]
    pub output_file: PathBuf,

    /// Overwrite the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Generate the bundle from the operating system's RNG and the current time, and write it.
///
/// # Errors
/// The output file exists (without `--force`) or cannot be written.
pub fn run(args: SecretsGenArgs) -> Result<Outcome, CommandError> {
    let mut rng = rand::rngs::OsRng;
    let bundle = SecretsBundle::generate(&mut rng, time::OffsetDateTime::now_utc())?;
    let text = secrets_yaml(&bundle);
    if args.output_file.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(Outcome::Success);
    }
    let path = &args.output_file;
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if args.force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| {
        if path.exists() && !args.force {
            format!(
                "{} already exists (use --force to overwrite it)",
                path.display()
            )
        } else {
            format!("cannot write {}", path.display())
        }
    })?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    crate::ui::out::print_line(&format!(
        "wrote the secrets bundle to {} (mode 0600)",
        path.display()
    ));
    Ok(Outcome::Success)
}
