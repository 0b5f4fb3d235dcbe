//! The command line: one file per command (`<Verb>Args` plus `run`), and a
//! folder for each command with verbs of its own (`state/`, `secrets/`,
//! `machineconfig/`, `etcd/`, `patches/`: its `mod.rs` dispatches, one file per
//! subcommand); a single dispatch `match`, and the exit code decided in
//! `error.rs`.

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

mod adopt;
mod apply;
mod argv;
mod completion;
mod destroy;
pub mod error;
mod etcd;
mod force_unlock;
mod frontend;
mod health;
mod import;
mod init;
mod machineconfig;
mod output;
mod patches;
mod plan;
mod render;
mod rotate_ca;
mod schema;
mod secrets;
mod show;
pub mod signals;
mod state;
mod state_options;
mod validate;
mod version;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;

/// talosprov turns a topology file into a running Talos Linux Kubernetes cluster
/// on Proxmox VE, and keeps it converged.
///
/// The usual flow: `talosprov validate`, `talosprov plan`, `talosprov apply`,
/// then `talosprov output kubeconfig`.
#[derive(Debug, Parser)]
#[command(name = "talosprov", version, max_term_width = 100)]
pub struct Cli {
    /// More developer logs on stderr (-v: debug, -vv: trace). RUST_LOG also works.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Every command, in the order `--help` lists them.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a new cluster folder: cluster.yaml, the patch tree and a .gitignore.
    ///
    /// The topology is made from the flags, with a comment on each section:
    /// hostnames <name>-cp-NN, <name>-wk-NN and <name>-gpu-NN, vm_id from the
    /// IP's last octet, a /24 network with the gateway as nameserver, Cilium
    /// as the CNI, and for --gpu nodes the NVIDIA schematic, the GPU operator
    /// and a PCI mapping whose placeholders you fill in. Existing files are
    /// never overwritten: if any is there, nothing is written and init exits 1.
    ///
    /// Example: talosprov init lab --controlplane 10.0.0.121 --worker 10.0.0.122 --gpu 10.0.0.123=gpu
    Init(init::InitArgs),
    /// Check the topology file and the patch tree, offline (no Proxmox, no Talos).
    ///
    /// Prints a summary (cluster, schematics, nodes, and each node's patch files
    /// in merge order) and exits 0; or prints every problem found at once, each
    /// with its code, file:line:column, node and field, and exits 1. Warnings
    /// are printed in both cases, on stderr. With --online it then reads
    /// Proxmox, the nodes and the state (unlocked, never written) and makes
    /// the plan, reporting what plan would refuse and the API token's missing
    /// privileges; nothing is changed.
    ///
    /// Example: talosprov validate -f examples/homelab/cluster.yaml
    Validate(validate::ValidateArgs),
    /// Print the final machine config of nodes, exactly as apply sends it.
    ///
    /// Each config is the base config for the node's role and Talos version,
    /// with the node's patches merged in order and Talos's checks passed.
    /// Secret values show as (sensitive) unless --show-sensitive. The secrets
    /// come from --secrets FILE, else the state, else a throwaway bundle
    /// generated now (with a warning). With --out-dir, each node's config is
    /// written to DIR/<hostname>.yaml, mode 0600, secrets included.
    ///
    /// Example: talosprov render talos-gpu-01 -f examples/homelab/cluster.yaml
    Render(render::RenderArgs),
    /// Show what apply would change, without changing anything.
    ///
    /// Every create, update, replace, delete, config apply and bootstrap, with
    /// its reason, field changes and config diffs (secrets redacted), drift
    /// found by refresh, and a summary line.
    ///
    /// Example: talosprov plan -f examples/lab/cluster.yaml -out lab.plan
    Plan(plan::PlanArgs),
    /// Make the changes of a new plan (after "yes") or of a saved one.
    ///
    /// Images, mappings and pool, then VMs, machine configs, bootstrap and the
    /// kubeconfig, in dependency order and in parallel where possible, saving
    /// the state after every step.
    ///
    /// Example: talosprov apply -f examples/lab/cluster.yaml -auto-approve
    Apply(apply::ApplyArgs),
    /// Print a plan saved with `plan -out FILE`, as text or JSON (-json).
    ///
    /// A plan sealed by state encryption is opened with the state's key.
    ///
    /// Example: talosprov show -json plan.cache
    Show(show::ShowArgs),
    /// Print the outputs in the state: kubeconfig, talosconfig, machineconfig NODE.
    ///
    /// Without a name, lists the outputs the state holds. They hold
    /// credentials, so a value is shown as <sensitive> unless -raw prints it
    /// as stored, -json as a JSON string, or --out-file PATH writes it with
    /// mode 0600. Reads the state without locking it, and changes nothing.
    ///
    /// Example: talosprov output kubeconfig -f examples/lab/cluster.yaml --out-file ~/.kube/lab
    Output(output::OutputArgs),
    /// Generate, import and export the cluster secrets bundle (talosctl's secrets.yaml).
    Secrets(secrets::SecretsArgs),
    /// Work on machine config files directly, like `talosctl machineconfig`.
    Machineconfig(machineconfig::MachineconfigArgs),
    /// Work on the topology's patch tree: migrate it to a newer Talos config contract.
    Patches(patches::PatchesArgs),
    /// Inspect and edit the state: list, show, rm, encrypt, decrypt.
    State(state::StateArgs),
    /// Take over a VM, pool or PCI mapping that already exists in Proxmox.
    ///
    /// As OpenTofu's import: ADDRESS must be one the topology declares, and ID
    /// the object's ID in Proxmox (the vmid for a VM, the name for a pool or a
    /// mapping). The object is read and recorded as it is; the next plan shows
    /// what apply changes on it to match the topology, and destroy deletes it.
    /// talosprov never changes or deletes an object it did not create or
    /// import.
    ///
    /// Example: talosprov import pci_mapping/gpu gpu -f cluster.yaml
    Import(import::ImportArgs),
    /// Take over a running cluster made with OpenTofu or talosctl, writing its topology.
    ///
    /// Reads an OpenTofu or Terraform state (a file, or `http` for the
    /// state behind TF_HTTP_ADDRESS) written by the siderolabs/talos and
    /// bpg/proxmox providers, or with --from-talos the nodes' running
    /// configs (over the Talos API) and their VMs in Proxmox, and writes
    /// DIR/cluster.yaml, DIR/patches/ and
    /// talosprov's state: the secrets bundle, the VMs, images and PCI
    /// mappings as owned, each node's applied config and the bootstrap.
    /// Prints what it adopted and what it could not express. Changes
    /// nothing in Proxmox, in Talos or in the source state.
    ///
    /// Example: talosprov adopt --from-tfstate terraform.tfstate --out prod
    Adopt(Box<adopt::AdoptArgs>),
    /// Reset the Talos nodes and delete the VMs, the pool and the PCI mappings.
    ///
    /// Shows the destroy plan, made from the state, and asks for "yes" unless
    /// -auto-approve. Then resets each Talos node that answers (gracefully
    /// for control planes), shuts down and deletes the VMs, then the pool and
    /// the PCI mappings, saving the state after every step. Only what the
    /// state records is deleted: never an object talosprov did not create or
    /// import. Downloaded images stay unless --purge-images.
    ///
    /// Example: talosprov destroy -f examples/lab/cluster.yaml -auto-approve
    Destroy(destroy::DestroyArgs),
    /// Release a state lock left by a killed or cancelled run.
    ForceUnlock(force_unlock::ForceUnlockArgs),
    /// Check the cluster's health the way `talosctl health` does.
    ///
    /// Asks every node in the topology, with the talosconfig from the state:
    /// etcd healthy and consistent on the control planes, every node up in
    /// secure mode at the topology's Talos version, apid and kubelet healthy.
    /// Checks that need a CNI are skipped when the CNI is `none`. Prints each
    /// check; exits 1 naming the failing ones.
    ///
    /// Example: talosprov health -f cluster.yaml --wait 5m
    Health(health::HealthArgs),
    /// Save etcd snapshots, encrypted, to a folder or an S3 bucket, and restore one.
    ///
    /// `etcd snapshot` streams a snapshot from a healthy control plane, seals
    /// it with age as it streams (to --recipient, the state's keys, or the
    /// cluster's own key derived from its secrets), and writes it beside a
    /// JSON manifest to --to, the topology's `backup.destination`, or
    /// etcd-snapshots/ beside the state; then applies retention there (the
    /// `backup:` section's, or the defaults in etcd-snapshots/). `etcd
    /// restore` brings back a cluster whose etcd is gone on every control
    /// plane from one of them.
    ///
    /// Example: talosprov etcd snapshot -f cluster.yaml --to s3://backups/lab
    ///
    /// Example: talosprov etcd restore -f cluster.yaml --from latest
    Etcd(etcd::EtcdArgs),
    /// Rotate the Talos API CA (--os) or the Kubernetes CA (--kubernetes).
    ///
    /// As `talosctl rotate-ca`, in three stages: every node accepts the new
    /// CA beside the old one, then the new CA issues, then the old one is
    /// dropped. Each stage re-configures every node without a reboot and
    /// checks that every node answers before the next; the state records the
    /// stage, the new CA and the client configs, so running the command
    /// again resumes an interrupted rotation. The talosconfig (or kubeconfig)
    /// in the state is re-issued from the new CA.
    ///
    /// Example: talosprov rotate-ca --os -f cluster.yaml
    RotateCa(rotate_ca::RotateCaArgs),
    /// Print the JSON Schema of the topology file, for editors and other tools.
    ///
    /// Draft 2020-12, derived from the types talosprov reads the file into:
    /// every key with its description, type, default and allowed values.
    /// Point an editor at it with a first line such as
    /// `# yaml-language-server: $schema=schema/cluster.schema.json`.
    ///
    /// Example: talosprov schema > schema/cluster.schema.json
    Schema(schema::SchemaArgs),
    /// Print a shell completion script: bash, zsh, fish or powershell.
    ///
    /// Example: talosprov completion bash > ~/.local/share/bash-completion/completions/talosprov
    Completion(completion::CompletionArgs),
    /// Print the version, commit, target and Rust compiler of this build
    ///
    /// Also the Talos config contracts it generates machine configs for.
    ///
    /// Example: talosprov version --json
    Version(version::VersionArgs),
}

/// Parse the command line, run the command on a fresh tokio runtime, print the
/// error once, and return the exit code.
pub fn main() -> ExitCode {
    let args = argv::normalise(std::env::args_os().collect(), &Cli::command());
    let cli = Cli::parse_from(args);
    crate::ui::init_logging(cli.verbose);
    match talosprov_base::budgets::PatchBudgets::from_env(|n| std::env::var(n).ok()) {
        Ok(budgets) => budgets.install(),
        Err(e) => {
            crate::ui::out::print_error(&anyhow::anyhow!("{e}"));
            return ExitCode::from(1);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::ui::out::print_error(
                &anyhow::Error::new(e).context("cannot start the async runtime"),
            );
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(outcome) => outcome.exit_code(),
        Err(CommandError::Failed(e)) if error::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(err) => {
            if let CommandError::Failed(e) | CommandError::Locked(e) = &err {
                crate::ui::out::print_error(e);
            }
            error::exit_code(&err)
        }
    }
}

/// Run one parsed command.
///
/// # Errors
/// Whatever the command fails with; see [`CommandError`].
pub async fn run(cli: Cli) -> Result<Outcome, CommandError> {
    match cli.command {
        Command::Init(args) => init::run(args),
        Command::Validate(args) => validate::run(args).await,
        Command::Render(args) => render::run(args).await,
        Command::Plan(args) => plan::run(args).await,
        Command::Apply(args) => apply::run(args).await,
        Command::Destroy(args) => destroy::run(args).await,
        Command::Import(args) => import::run(args).await,
        Command::Adopt(args) => adopt::run(*args).await,
        Command::Version(args) => version::run(args),
        Command::Schema(args) => schema::run(args),
        Command::Completion(args) => completion::run(args, Cli::command()),
        Command::Output(args) => output::run(args).await,
        Command::Show(args) => show::run(args).await,
        Command::State(args) => state::run(args).await,
        Command::ForceUnlock(args) => force_unlock::run(args).await,
        Command::Health(args) => health::run(args).await,
        Command::RotateCa(args) => rotate_ca::run(args).await,
        Command::Etcd(args) => etcd::run(args).await,
        Command::Machineconfig(args) => machineconfig::run(args),
        Command::Patches(args) => patches::run(args),
        Command::Secrets(args) => secrets::run(args).await,
    }
}
