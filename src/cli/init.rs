//! `talosprov init DIR`: the flags of a new cluster folder, handed to the
//! engine's [`init`], and what was written and what to run next.

use anyhow::Context as _;
use clap::Args;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::cli::error::Outcome;
use talosprov_engine::command::CommandError;
use talosprov_engine::command::init::init;
use talosprov_engine::command::init::request::{
    DataDisk, GpuWorker, InitRequest, parse_data_disk, parse_gpu,
};

/// Arguments of `talosprov init` (its help text is on `Command::Init`).
#[derive(Debug, Args)]
pub struct InitArgs {
    /// The folder to write the cluster into; created when missing.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,

    /// The cluster name, a DNS label; hostnames are derived from it
    /// (default: DIR's name when it is one, else `talos`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The control planes' shared address that fronts the Kubernetes API
    /// (default: the free address just below the first control plane).
    #[arg(long, value_name = "IP")]
    pub vip: Option<Ipv4Addr>,

    /// The nodes' default route, also their nameserver (default: `.1` of the
    /// nodes' /24).
    #[arg(long, value_name = "IP")]
    pub gateway: Option<Ipv4Addr>,

    /// A control plane's address; repeat for more (default: one, at `.121`
    /// of the network, or the nearest free address).
    #[arg(long = "controlplane", value_name = "IP")]
    pub controlplanes: Vec<Ipv4Addr>,

    /// A worker's address; repeat for more.
    #[arg(long = "worker", value_name = "IP")]
    pub workers: Vec<Ipv4Addr>,

    /// A GPU worker at IP with the PCI device of the Proxmox resource mapping
    /// MAPPING passed through; repeat for more.
    #[arg(long = "gpu", value_name = "IP=MAPPING", value_parser = parse_gpu)]
    pub gpus: Vec<GpuWorker>,

    /// The Proxmox VE API URL, such as https://pve.example:8006 (default:
    /// none in the file, and every command, validate included, then needs
    /// PROXMOX_VE_ENDPOINT).
    #[arg(long, value_name = "URL")]
    pub proxmox_endpoint: Option<String>,

    /// Also write `.gitlab-ci.yml`: validate and plan on merge requests,
    /// apply the saved plan by hand, state kept by GitLab.
    #[arg(long)]
    pub gitlab: bool,

    /// The VLAN tag (1 to 4094) of every VM's NIC: the bridge tags its
    /// traffic (written as `proxmox.networks`).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u16).range(1..=4094))]
    pub vlan: Option<u16>,

    /// A data disk of SIZE GiB on every worker (every node when there is no
    /// worker), mounted at MOUNT (`/var/mnt/<name>`) as a Talos user volume,
    /// or left raw without one; repeat for more. Example: `--data-disk
    /// 200:/var/mnt/longhorn`.
    #[arg(long = "data-disk", value_name = "SIZE[:MOUNT]", value_parser = parse_data_disk)]
    pub data_disks: Vec<DataDisk>,
}

impl InitArgs {
    /// The request the engine's [`init`] takes.
    fn into_request(self) -> InitRequest {
        InitRequest {
            dir: self.dir,
            name: self.name,
            vip: self.vip,
            gateway: self.gateway,
            controlplanes: self.controlplanes,
            workers: self.workers,
            gpus: self.gpus,
            proxmox_endpoint: self.proxmox_endpoint,
            gitlab: self.gitlab,
            vlan: self.vlan,
            data_disks: self.data_disks,
        }
    }
}

/// Run `init`: work out the cluster, refuse if any file exists, write them,
/// and print what was written and what to run next.
///
/// # Errors
/// Flags that contradict each other, an existing file (nothing is written
/// then), or a file that cannot be written.
pub fn run(args: InitArgs) -> Result<Outcome, CommandError> {
    let dir = args.dir.clone();
    let done = init(&args.into_request())?;
    let mut text = String::new();
    for path in &done.files {
        let _ = writeln!(text, "Wrote {}", dir.join(path).display());
    }
    let topology = dir.join("cluster.yaml");
    let f = topology.display();
    // validate needs the Proxmox endpoint (the file leaves proxmox.endpoint
    // out unless --proxmox-endpoint) and helm (the add-ons are Helm charts).
    let _ = write!(
        text,
        "\nNext steps:\n\
         \x20 1. Review {f}{fill}.\n\
         \x20 2. Install helm, on PATH or named by TALOSPROV_HELM=/path/to/helm: the add-ons are\n\
         \x20    rendered with `helm template`, and without it validate fails with A011.\n\
         \x20 3. {endpoint}export PROXMOX_VE_API_TOKEN='USER@REALM!TOKENID=SECRET'   # plan and apply need it\n\
         \x20 4. talosprov validate -f {f}\n\
         \x20 5. talosprov plan -f {f} -out {dir}/cluster.plan\n\
         \x20 6. talosprov apply -f {f} {dir}/cluster.plan\n\
         \x20 7. talosprov output kubeconfig -f {f} --out-file ~/.kube/{name}\n",
        fill = if done.placeholders {
            ": fill in the PCI mappings' placeholders"
        } else {
            ""
        },
        endpoint = if !done.endpoint {
            "export PROXMOX_VE_ENDPOINT=https://HOST:8006   # validate needs it: cluster.yaml \
             leaves proxmox.endpoint out\n\x20    "
        } else {
            ""
        },
        dir = dir.display(),
        name = done.cluster,
    );
    crate::ui::out::write_stdout(&text).context("cannot print the files written")?;
    Ok(Outcome::Success)
}
