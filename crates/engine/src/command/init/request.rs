//! What `init` is asked: the folder, the cluster's addresses and its
//! options, as the CLI's flags give them, with the parsers of the flags that
//! carry more than one value.

use std::net::Ipv4Addr;
use std::path::PathBuf;

/// What `init` was asked, as the flags give it.
#[derive(Debug, Clone)]
pub struct InitRequest {
    /// The folder to write the cluster into; created when missing.
    pub dir: PathBuf,
    /// `--name`: the cluster name (default: `dir`'s name when it is a DNS
    /// label, else `talos`).
    pub name: Option<String>,
    /// `--vip` (default: the free address just below the first control plane).
    pub vip: Option<Ipv4Addr>,
    /// `--gateway` (default: `.1` of the nodes' /24).
    pub gateway: Option<Ipv4Addr>,
    /// `--controlplane` addresses (default: one, at `.121`, or the nearest free).
    pub controlplanes: Vec<Ipv4Addr>,
    /// `--worker` addresses.
    pub workers: Vec<Ipv4Addr>,
    /// `--gpu IP=MAPPING` workers.
    pub gpus: Vec<GpuWorker>,
    /// `--proxmox-endpoint`: written into the file when given.
    pub proxmox_endpoint: Option<String>,
    /// `--gitlab`: also write `.gitlab-ci.yml`.
    pub gitlab: bool,
    /// `--vlan`: every VM's NIC tagged with it.
    pub vlan: Option<u16>,
    /// `--data-disk`s: on every worker (every node without a worker).
    pub data_disks: Vec<DataDisk>,
}

/// A `--data-disk SIZE[:MOUNT]` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDisk {
    /// Size, GiB.
    pub size_gib: u32,
    /// Where Talos mounts it, `/var/mnt/<name>`; `None` leaves it raw.
    pub mount: Option<String>,
}

/// Parse `SIZE[:MOUNT]`: a size in GiB, and a mount that names a Talos user
/// volume (the same check as `validate`).
///
/// # Errors
/// What is wrong with the size or the mount, in words.
pub fn parse_data_disk(s: &str) -> Result<DataDisk, String> {
    let (size, mount) = match s.split_once(':') {
        Some((size, mount)) => (size, Some(mount)),
        None => (s, None),
    };
    let size_gib = size
        .parse::<u32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("expected a size in GiB (1 or more), found {size:?}"))?;
    if let Some(m) = mount {
        talosprov_topology::validate_devices::volume_of(m)
            .map_err(|why| format!("mount {m:?} {why}"))?;
    }
    Ok(DataDisk {
        size_gib,
        mount: mount.map(str::to_owned),
    })
}

/// A `--gpu IP=MAPPING` flag: the worker's address and the name of the PCI
/// resource mapping its GPU is passed through from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWorker {
    /// The worker's address.
    pub ip: Ipv4Addr,
    /// The PCI mapping's name, as `pci_mappings` and `hostpci[].mapping` spell it.
    pub mapping: String,
}

/// Parse `IP=MAPPING`, where MAPPING is a Proxmox mapping ID.
///
/// # Errors
/// What is wrong with the address or the mapping, in words.
pub fn parse_gpu(s: &str) -> Result<GpuWorker, String> {
    let (ip, mapping) = s
        .split_once('=')
        .ok_or_else(|| format!("expected IP=MAPPING, such as 192.168.1.123=gpu, found {s:?}"))?;
    let ip = ip
        .parse()
        .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
    let valid = mapping.len() <= 64
        && mapping.starts_with(|c: char| c.is_ascii_alphabetic())
        && mapping
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(format!(
            "mapping {mapping:?} must be a Proxmox mapping ID: a letter, then letters, digits, '-' and '_'"
        ));
    }
    Ok(GpuWorker {
        ip,
        mapping: mapping.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn gpu_flags_name_an_address_and_a_mapping() {
        assert_eq!(
            parse_gpu("10.0.0.5=gpu-a").unwrap(),
            GpuWorker {
                ip: ip("10.0.0.5"),
                mapping: "gpu-a".into()
            }
        );
        assert!(parse_gpu("10.0.0.5").is_err());
        assert!(parse_gpu("10.0.0.5=a b").is_err());
        assert!(parse_gpu("host=gpu").is_err());
    }
}
