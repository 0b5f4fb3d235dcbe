//! `talosprov machineconfig gen`: print the base machine config for one role, as Talos's config
//! generator makes it for exactly these inputs (no topology, no patches).

use anyhow::Context as _;
use clap::Args;
use clap::builder::TypedValueParser as _;
use std::io::Write as _;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use talosprov_base::role::Role;
use talosprov_base::version::TalosVersion;
use talosprov_engine::command::CommandError;
use talosprov_machine::config::base_config;
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::secrets_file::parse_secrets_yaml;

/// Arguments of `talosprov machineconfig gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Machine type.
    #[arg(
        long = "type",
        value_parser = clap::builder::PossibleValuesParser::new(["controlplane", "worker"])
            .map(|s: String| Role::parse(&s).expect("one of the possible values")),
    )]
    pub machine_type: Role,

    /// Cluster name (`cluster.clusterName`).
    #[arg(long)]
    pub cluster_name: String,

    /// Kubernetes API endpoint, e.g. https://192.168.1.120:6443.
    #[arg(long)]
    pub endpoint: String,

    /// Kubernetes version (default: the Talos release's default).
    #[arg(long)]
    pub kubernetes_version: Option<String>,

    /// Talos version the node runs; selects the config contract (v1.12, v1.13 or v1.14:
    /// from v1.14, `machine.install` becomes an UnattendedInstallConfig document).
    #[arg(long, default_value = "v1.13.9")]
    pub talos_version: String,

    /// Secrets bundle in talosctl's secrets.yaml format.
    #[arg(long)]
    pub secrets: PathBuf,

    /// Install disk (`machine.install.disk`; from v1.14 the UnattendedInstallConfig disk
    /// selector); left out when not given.
    #[arg(long)]
    pub install_disk: Option<String>,

    /// Installer image (`machine.install.image`; from v1.14 `installer.image`); left out
    /// when not given.
    #[arg(long)]
    pub install_image: Option<String>,

    /// Extra certificate SAN for both machine.certSANs and cluster.apiServer.certSANs (repeatable).
    #[arg(long = "additional-sans")]
    pub additional_sans: Vec<String>,

    /// Write the config to this file (mode 0600: it holds the cluster's keys)
    /// instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Print the base config on stdout, or write it to `--output` (mode 0600);
/// warnings go to stderr.
///
/// # Errors
/// An unreadable or invalid secrets file, an invalid endpoint or version, or a closed stdout.
pub fn run(args: GenArgs) -> Result<Outcome, CommandError> {
    let text = talosprov_base::inputs::Inputs::read(&talosprov_files::Disk, &args.secrets)
        .with_context(|| format!("cannot read the secrets bundle {}", args.secrets.display()))?;
    let secrets = parse_secrets_yaml(&text)
        .with_context(|| format!("cannot use the secrets bundle {}", args.secrets.display()))?;
    let talos_version: TalosVersion = args.talos_version.parse()?;
    let input = BaseConfigInput {
        cluster_name: args.cluster_name,
        endpoint: args.endpoint,
        kubernetes_version: args.kubernetes_version,
        talos_version,
        role: args.machine_type,
        secrets: &secrets,
        install_disk: args.install_disk,
        install_image: args.install_image,
        additional_sans: args.additional_sans,
        hostname_config: true,
        accepted_cas: &talosprov_machine::rotation::NO_ACCEPTED_CAS,
    };
    let config = base_config(&input)?;
    for warning in &config.warnings {
        crate::ui::out::warn(warning);
    }
    let yaml = config.to_yaml();
    if let Some(path) = &args.output {
        talosprov_files::write_private(path, yaml.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(Outcome::Success);
    }
    let mut out = std::io::stdout().lock();
    out.write_all(yaml.as_bytes())?;
    out.flush()?;
    Ok(Outcome::Success)
}
