//! `talosprov adopt --from-tfstate PATH|http --out DIR` (or `--from-talos
//! secrets.yaml --node IP...`): take over a running cluster that OpenTofu
//! made with the siderolabs/talos and bpg/proxmox providers, or that
//! talosctl made. Writes DIR/cluster.yaml, DIR/patches/ and talosprov's state;
//! changes nothing in Proxmox, in Talos or in the source state.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::frontend::Console;
use super::state_options::LockOptions;
use crate::cli::error::Outcome;
use talosprov_adopt::topology::Settings;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::adopt::{AdoptFrom, AdoptOutcome, AdoptRequest, adopt};
use talosprov_engine::command::store::{DEFAULT_TOPOLOGY, StateSettings, shell_quoted};

/// Arguments of `talosprov adopt`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["from_tfstate", "from_talos"])))]
pub struct AdoptArgs {
    /// The OpenTofu or Terraform state to adopt from: a file (format 4), or
    /// `http` for the state behind TF_HTTP_ADDRESS (read with one GET, never
    /// locked or written).
    #[arg(long = "from-tfstate", value_name = "PATH|http")]
    pub from_tfstate: Option<PathBuf>,

    /// A cluster made with talosctl: its secrets bundle (secrets.yaml). Each
    /// --node's running machine config is read over the Talos API, and its
    /// VM is found in Proxmox by its cloud-init address, name or guest
    /// agent address.
    #[arg(long = "from-talos", value_name = "SECRETS", requires = "nodes")]
    pub from_talos: Option<PathBuf>,

    /// A node of the talosctl cluster, by IP address; repeat for each node.
    #[arg(long = "node", value_name = "IP", requires = "from_talos")]
    pub nodes: Vec<String>,

    /// The folder to write cluster.yaml and patches/ to (created; files
    /// already there are never overwritten).
    #[arg(long = "out", value_name = "DIR")]
    pub out: PathBuf,

    /// The target state file, instead of talosprov.tfstate in DIR.
    #[arg(long = "state", value_name = "PATH")]
    pub state: Option<PathBuf>,

    /// Override one target backend setting, as for every command; repeatable.
    #[arg(long = "backend-config", value_name = "KEY=VALUE")]
    pub backend_config: Vec<String>,

    /// The cluster's secrets bundle (talosctl's secrets.yaml), when the
    /// state's talos_machine_secrets is ephemeral or absent.
    #[arg(long = "secrets", value_name = "FILE")]
    pub secrets: Option<PathBuf>,

    /// Which talos_machine_secrets instance, when the state has several
    /// (its address, e.g. module.prod.talos_machine_secrets.this).
    #[arg(long = "secrets-address", value_name = "ADDRESS")]
    pub secrets_address: Option<String>,

    /// proxmox.endpoint to write (else PROXMOX_VE_ENDPOINT serves).
    #[arg(long = "proxmox-endpoint", value_name = "URL")]
    pub proxmox_endpoint: Option<String>,

    /// proxmox.ca_file to write: the CA of the Proxmox API's certificate.
    #[arg(long = "proxmox-ca-file", value_name = "PATH")]
    pub proxmox_ca_file: Option<String>,

    /// proxmox.node: the default Proxmox host (else the VMs' most common).
    #[arg(long = "proxmox-node", value_name = "NODE")]
    pub proxmox_node: Option<String>,

    /// proxmox.datastore for system disks (else the VMs' own).
    #[arg(long = "datastore", value_name = "STORAGE")]
    pub datastore: Option<String>,

    /// proxmox.image_storage (else the downloaded images' own).
    #[arg(long = "image-storage", value_name = "STORAGE")]
    pub image_storage: Option<String>,

    /// proxmox.bridge (else the VMs' first NIC's).
    #[arg(long = "bridge", value_name = "BRIDGE")]
    pub bridge: Option<String>,

    /// cluster.talos_version, vX.Y.Z, when the state holds only a contract.
    #[arg(long = "talos-version", value_name = "VERSION")]
    pub talos_version: Option<String>,

    /// The Image Factory schematic ID the nodes run, when neither their
    /// installer image nor their VM's disk image says (a talosctl cluster).
    #[arg(long = "schematic", value_name = "ID")]
    pub schematic: Option<String>,

    /// image_factory.url (else the images' factory).
    #[arg(long = "image-factory", value_name = "URL")]
    pub image_factory: Option<String>,

    /// Write nothing: print what would be written, and the report.
    #[arg(long = "dry-run")]
    pub dry_run: bool,

    /// Add to a target state that already has records only what it lacks,
    /// and write only the files the folder lacks; any record or file that
    /// differs is a conflict, and nothing is written.
    #[arg(long = "merge")]
    pub merge: bool,

    /// How long to wait for the target state lock.
    #[command(flatten)]
    pub lock: LockOptions,
}

/// Run `adopt`.
///
/// # Errors
/// The engine's: a source refused with its place, a node no VM matches, a
/// value neither the source nor the flags hold, a target that is the source
/// or already holds a cluster, existing files, a held lock.
pub async fn run(args: AdoptArgs) -> Result<Outcome, CommandError> {
    let from = match (&args.from_tfstate, &args.from_talos) {
        (Some(p), _) if p.as_os_str() == "http" => AdoptFrom::TfStateHttp,
        (Some(p), _) => AdoptFrom::TfState(p.clone()),
        (None, Some(secrets)) => AdoptFrom::Talos {
            secrets: secrets.clone(),
            nodes: args.nodes.clone(),
        },
        (None, None) => {
            return Err(CommandError::Failed(anyhow::anyhow!(
                "give --from-tfstate PATH|http or --from-talos SECRETS --node IP"
            )));
        }
    };
    let request = AdoptRequest {
        from,
        state: StateSettings {
            file: args.out.join(DEFAULT_TOPOLOGY),
            state: args.state.clone(),
            backend_config: args.backend_config.clone(),
        },
        out: args.out.clone(),
        lock_timeout: args.lock.lock_timeout,
        settings: Settings {
            proxmox_endpoint: args.proxmox_endpoint,
            proxmox_ca_file: args.proxmox_ca_file,
            proxmox_node: args.proxmox_node,
            datastore: args.datastore,
            image_storage: args.image_storage,
            bridge: args.bridge,
            talos_version: args.talos_version,
            image_factory: args.image_factory,
            schematic: args.schematic,
        },
        secrets_file: args.secrets,
        secrets_address: args.secrets_address,
        dry_run: args.dry_run,
        merge: args.merge,
        probe: Duration::from_secs(10),
        command: std::iter::once("talosprov".to_owned())
            .chain(std::env::args().skip(1))
            .map(|a| shell_quoted(&a))
            .collect::<Vec<_>>()
            .join(" "),
    };
    let outcome = adopt(&request, &Console::ui()).await?;
    crate::ui::out::write_stdout(&report(&args.out, &outcome))?;
    Ok(Outcome::Success)
}

/// The text adopt prints: the files, what was adopted, the report, and
/// what to do next. No secret: the files hold none.
fn report(out: &std::path::Path, o: &AdoptOutcome) -> String {
    let mut text = String::new();
    let verb = if o.dry_run { "Would write" } else { "Wrote" };
    for (path, body) in &o.files {
        text.push_str(&format!("{verb} {}\n", out.join(path).display()));
        if o.dry_run {
            for line in body.lines() {
                text.push_str(&format!("    {line}\n"));
            }
        }
    }
    let state = if o.dry_run { "would go to" } else { "went to" };
    text.push_str(&format!(
        "The secrets bundle and the records below {state} the state {}.\n\nAdopted:\n",
        o.state_location
    ));
    for line in &o.adopted {
        text.push_str(&format!("  + {line}\n"));
    }
    if !o.report.is_empty() {
        text.push_str("\nNot expressed, or left out:\n");
        for line in &o.report {
            text.push_str(&format!("  ! {line}\n"));
        }
    }
    if o.dry_run {
        text.push_str("\nNothing was written (--dry-run).\n");
    } else {
        text.push_str(&format!(
            "\nAdopt complete. Nothing was changed in Proxmox or Talos. Next: `talosprov plan \
             -f {}` shows what talosprov sees as different.\n",
            out.join(DEFAULT_TOPOLOGY).display()
        ));
    }
    text
}
