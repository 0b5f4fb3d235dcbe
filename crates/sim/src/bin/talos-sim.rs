//! Runs simulated Talos nodes on loopback addresses, port 50000, so talosprov can be
//! tried without hardware. Logs every RPC it serves on stderr; stops on Ctrl-C.

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use talosprov_sim::state::{Phase, SimOptions};
use talosprov_sim::{SimNode, Simulator};

/// Simulated Talos nodes: maintenance mode, install and reboot, secure mode (mTLS),
/// bootstrap, kubeconfig, etcd members, upgrade and reset.
#[derive(Debug, Parser)]
#[command(name = "talos-sim")]
struct Args {
    /// Address of one simulated node (repeat for more); each listens on port 50000.
    #[arg(long = "node", required = true)]
    nodes: Vec<IpAddr>,
    /// Talos release the nodes report and behave as.
    #[arg(long, default_value = "v1.13.8")]
    talos_version: String,
    /// Seconds a node stays unreachable while it installs and reboots (0 allowed).
    #[arg(long, default_value_t = 2.0)]
    reboot_delay: f64,
    /// Fault: seconds CRI and etcd stay unready after each boot.
    #[arg(long, default_value_t = 0.0)]
    slow_boot: f64,
    /// Fault: refuse connections on every node for this many seconds at start.
    #[arg(long, default_value_t = 0.0)]
    refuse_for: f64,
    /// Fault: the first ApplyConfiguration to each node fails (Internal) with this message.
    #[arg(long)]
    fail_apply: Option<String>,
    /// Fault: this node loses its etcd membership as soon as it joins.
    #[arg(long)]
    lose_etcd_member: Option<IpAddr>,
    /// Fault: the first upgrade of this node fails (installer exit code 1) and it
    /// stays on its version.
    #[arg(long)]
    fail_upgrade: Option<IpAddr>,
    /// Seconds after which a node halted by a reset without reboot is powered on
    /// again (it boots into maintenance mode), as when Proxmox starts its VM
    /// again or a new VM takes its address. Without it a halted node stays off.
    #[arg(long, value_name = "SECONDS")]
    power_on_after: Option<f64>,
    /// A node with an NVIDIA GPU passed through (repeatable): its Kubernetes node
    /// reports `nvidia.com/gpu: 1` once the NVIDIA modules and a device plugin run.
    #[arg(long = "gpu-node", value_name = "IP")]
    gpu_nodes: Vec<IpAddr>,
    /// The hostname a node's platform gives it (repeatable), as Talos's nocloud platform
    /// takes the Proxmox VM name: it names the node in etcd and in Kubernetes unless its
    /// machine config sets one. A node without it is `talos-<ip with dashes>`.
    #[arg(long = "hostname", value_name = "IP=NAME", value_parser = hostname_of)]
    hostnames: Vec<(IpAddr, String)>,
}

/// `IP=NAME`, the name a DNS label of at most 63 bytes.
fn hostname_of(value: &str) -> Result<(IpAddr, String), String> {
    let (ip, name) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?} is not IP=NAME"))?;
    let ip = ip.parse().map_err(|e| format!("{ip:?}: {e}"))?;
    let label = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if name.is_empty() || name.len() > 63 || !name.chars().all(label) || name.starts_with('-') {
        return Err(format!(
            "{name:?} is not a hostname (lowercase letters, digits and '-', at most 63)"
        ));
    }
    Ok((ip, name.to_owned()))
}

fn seconds(value: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

/// Each time `node` halts, power it on `after` later.
async fn power_on_when_halted(node: SimNode, after: Duration) {
    loop {
        if node
            .wait_for_phase(|p| p == Phase::Halted, Duration::from_secs(3600))
            .await
        {
            tokio::time::sleep(after).await;
            eprintln!("talos-sim: node {} powered on again", node.ip());
            node.power_on();
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "talos_sim=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let options = SimOptions {
        talos_version: args.talos_version.clone(),
        reboot_delay: seconds(args.reboot_delay, "reboot-delay")?,
        gpu_nodes: args.gpu_nodes.clone(),
        hostnames: args.hostnames.iter().cloned().collect(),
    };
    let slow_boot = seconds(args.slow_boot, "slow-boot")?;
    let refuse_for = seconds(args.refuse_for, "refuse-for")?;
    let power_on_after = args
        .power_on_after
        .map(|s| seconds(s, "power-on-after"))
        .transpose()?;
    let sim = Simulator::start(&args.nodes, options).await?;
    for ip in &args.nodes {
        let node = sim.node(*ip).expect("started above");
        node.set_slow_boot(slow_boot);
        if !refuse_for.is_zero() {
            node.refuse_connections_for(refuse_for);
        }
        if let Some(message) = &args.fail_apply {
            node.fail_next_apply(tonic::Code::Internal, message.clone());
        }
        if args.lose_etcd_member == Some(*ip) {
            node.lose_etcd_member();
        }
        if args.fail_upgrade == Some(*ip) {
            node.fail_next_upgrade("installer: simulated failure (--fail-upgrade)");
        }
        eprintln!(
            "talos-sim: node {ip}:50000 in maintenance mode (Talos {})",
            args.talos_version
        );
        if let Some(after) = power_on_after {
            tokio::spawn(power_on_when_halted(node, after));
        }
    }
    tokio::signal::ctrl_c().await?;
    eprintln!("talos-sim: stopping");
    sim.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::hostname_of;

    #[test]
    fn a_hostname_is_ip_equals_a_dns_label() {
        assert_eq!(
            hostname_of("127.0.0.121=talos-cp-01"),
            Ok(("127.0.0.121".parse().expect("ip"), "talos-cp-01".to_owned()))
        );
        assert!(hostname_of("talos-cp-01").is_err(), "no IP");
        assert!(hostname_of("127.0.0.300=cp").is_err(), "not an IP");
        for bad in ["", "Upper", "-lead", "dot.ted", &"a".repeat(64)] {
            assert!(hostname_of(&format!("127.0.0.1={bad}")).is_err(), "{bad:?}");
        }
    }
}
