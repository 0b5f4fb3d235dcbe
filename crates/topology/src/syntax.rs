//! The small grammars of the topology file: DNS labels, versions, extension
//! names, schematic IDs, PCI addresses, Proxmox tags, fingerprints and IPv4
//! networks. Pure predicates and parsers, each with the source it follows.

use serde::Serialize;
use std::fmt;
use std::net::Ipv4Addr;

/// Whether `s` is a lowercase RFC 1123 label: 1-63 characters of `a-z`, `0-9`
/// and `-`, not starting or ending with `-` (Kubernetes node names, which Talos
/// derives from the hostname, follow the same rule).
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// A release version, `vMAJOR.MINOR.PATCH` (Talos and Kubernetes tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
    /// Patch number.
    pub patch: u32,
}

impl Version {
    /// Parse `vMAJOR.MINOR.PATCH` (the leading `v` is required, as in Talos
    /// and Kubernetes release tags); `None` for anything else.
    pub fn parse(s: &str) -> Option<Version> {
        let rest = s.strip_prefix('v')?;
        let mut parts = rest.split('.');
        let mut number = || -> Option<u32> {
            let p = parts.next()?;
            // No signs, no leading zeros (semver), digits only.
            if p.is_empty()
                || !p.bytes().all(|c| c.is_ascii_digit())
                || (p.len() > 1 && p.starts_with('0'))
            {
                return None;
            }
            p.parse().ok()
        };
        let v = Version {
            major: number()?,
            minor: number()?,
            patch: number()?,
        };
        parts.next().is_none().then_some(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'_' | b'.')
        })
}

/// Whether `s` is an official extension name, `<org>/<name>` (for example
/// `siderolabs/qemu-guest-agent`), as the Image Factory lists them.
pub fn is_extension_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((org, name)) => is_name_part(org) && is_name_part(name),
        None => false,
    }
}

/// Whether `s` is a schematic ID: the 64 lowercase hex digits of a SHA-256.
pub fn is_schematic_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Whether `s` is a PCI address as Proxmox mappings take it: `0000:01:00`
/// (all functions) or `0000:01:00.0` (domain:bus:device[.function]).
pub fn is_pci_path(s: &str) -> bool {
    let (addr, function) = match s.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (s, None),
    };
    let parts: Vec<&str> = addr.split(':').collect();
    let function_ok =
        function.is_none_or(|f| f.len() == 1 && matches!(f.as_bytes()[0], b'0'..=b'7'));
    parts.len() == 3
        && is_hex(parts[0], 4)
        && is_hex(parts[1], 2)
        && is_hex(parts[2], 2)
        && function_ok
}

/// Whether `s` is a PCI vendor:device pair, `10de:2507`.
pub fn is_pci_id(s: &str) -> bool {
    matches!(s.split_once(':'), Some((v, d)) if is_hex(v, 4) && is_hex(d, 4))
}

/// Whether `s` is a Proxmox tag: `[a-z0-9_][a-z0-9_\-+.]*`, case-insensitive
/// (PVE's `pve-tag` format, `PVE::JSONSchema`).
pub fn is_proxmox_tag(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'+' | b'.'))
}

/// Whether `s` is a SHA-256 certificate fingerprint: 32 bytes in hex, either
/// bare or as colon-separated pairs (the form `pvenode cert info` prints).
pub fn is_sha256_fingerprint(s: &str) -> bool {
    if s.contains(':') {
        let pairs: Vec<&str> = s.split(':').collect();
        pairs.len() == 32 && pairs.iter().all(|p| is_hex(p, 2))
    } else {
        is_hex(s, 64)
    }
}

/// Whether `s` is a `hostpciN` device name with N in 0..=15 (qemu-server's
/// `MAX_HOSTPCI_DEVICES` is 16); gives N.
pub fn hostpci_index(s: &str) -> Option<u8> {
    let n = s.strip_prefix("hostpci")?;
    if n.is_empty() || (n.len() > 1 && n.starts_with('0')) || !n.bytes().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    n.parse::<u8>().ok().filter(|i| *i <= 15)
}

/// Whether `s` is a Proxmox node name (PVE's `pve-node` format, a hostname
/// label): letters, digits and `-`, not starting or ending with `-`, at most 63.
pub fn is_pve_node_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a Proxmox storage ID (PVE's `pve-storage-id` format,
/// `[a-z][a-z0-9\-_.]*[a-z0-9]` without regard to case, as
/// `PVE::JSONSchema::pve_verify_storage_id` matches it), such as `local-lvm`.
pub fn is_pve_storage_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What [`is_pve_storage_id`] takes, in words.
pub const STORAGE_ID_FORM: &str = "a Proxmox storage ID: letters, digits, '-', '_' and '.', \
    starting with a letter and ending with a letter or digit, such as local-lvm";

/// The longest bridge name: a bridge is a Linux network interface, whose
/// name the kernel holds in `IFNAMSIZ` (16) bytes with its terminating NUL.
pub const MAX_BRIDGE_CHARS: usize = 15;

/// Whether `s` is a Proxmox bridge name: PVE's `pve-bridge-id` format
/// (`[-_.\w\d]+`, `PVE::JSONSchema::pve_verify_bridge_id`) and at most
/// [`MAX_BRIDGE_CHARS`], such as `vmbr0`.
pub fn is_pve_bridge(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_BRIDGE_CHARS
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What [`is_pve_bridge`] takes, in words.
pub const BRIDGE_FORM: &str = "a Proxmox bridge name: 1 to 15 letters, digits, '-', '_' and \
    '.' (a Linux interface name), such as vmbr0";

/// The most levels a nested pool may have (PVE 8.1+: `a/b/c`).
pub const MAX_POOL_LEVELS: usize = 3;

/// Whether `s` is a Proxmox pool ID (PVE's `pve-poolid` format,
/// `[A-Za-z0-9.\-_]+`, with `/` between the levels of a nested pool, at
/// most [`MAX_POOL_LEVELS`]; `PVE::AccessControl::pve_verify_poolname`).
pub fn is_pve_pool_id(s: &str) -> bool {
    s.split('/').count() <= MAX_POOL_LEVELS
        && s.split('/').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
        })
}

/// Whether `s` is a Proxmox configuration ID, as a PCI mapping is named
/// (PVE's `pve-configid` format, `[a-z][a-z0-9_-]+` without regard to case:
/// two characters at least).
pub fn is_pve_config_id(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
}

/// An IPv4 network: the address with the host bits cleared, and the prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    /// The network address.
    pub network: Ipv4Addr,
    /// The prefix length, 0..=32.
    pub prefix: u8,
}

impl Ipv4Net {
    /// The network that `addr` is in, for a prefix of 0..=32 bits.
    pub fn containing(addr: Ipv4Addr, prefix: u8) -> Ipv4Net {
        let mask = Self::mask(prefix);
        Ipv4Net {
            network: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        }
    }

    fn mask(prefix: u8) -> u32 {
        if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix.min(32)))
        }
    }

    /// Whether `addr` is inside this network.
    pub fn contains(&self, addr: Ipv4Addr) -> bool {
        u32::from(addr) & Self::mask(self.prefix) == u32::from(self.network)
    }

    /// The broadcast address (all host bits set).
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) | !Self::mask(self.prefix))
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// A Proxmox VM ID, 100..=999999999 (PVE's `pve-vmid` format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Vmid(pub u32);

impl Vmid {
    /// The smallest VM ID Proxmox accepts.
    pub const MIN: u32 = 100;
    /// The largest VM ID Proxmox accepts.
    pub const MAX: u32 = 999_999_999;
}

impl fmt::Display for Vmid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_are_lowercase_rfc1123() {
        assert!(is_dns_label("talos-gpu-01"));
        assert!(is_dns_label("a"));
        assert!(!is_dns_label("Talos"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a-"));
        assert!(!is_dns_label("a_b"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    #[test]
    fn versions_need_v_and_three_numbers() {
        assert_eq!(
            Version::parse("v1.13.8").map(|v| v.to_string()),
            Some("v1.13.8".into())
        );
        for bad in [
            "1.13.8",
            "v1.13",
            "v1.13.8.1",
            "v1.13.x",
            "v01.2.3",
            "v1.2.3-beta.0",
            "v",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn extension_names_are_org_slash_name() {
        assert!(is_extension_name("siderolabs/qemu-guest-agent"));
        assert!(!is_extension_name("qemu-guest-agent"));
        assert!(!is_extension_name("siderolabs/"));
        assert!(!is_extension_name("a/b/c"));
        assert!(!is_extension_name("Siderolabs/x"));
    }

    #[test]
    fn schematic_ids_are_64_lowercase_hex() {
        assert!(is_schematic_id(&"ab".repeat(32)));
        assert!(!is_schematic_id(&"AB".repeat(32)));
        assert!(!is_schematic_id(&"a".repeat(63)));
    }

    #[test]
    fn pci_paths_and_ids() {
        assert!(is_pci_path("0000:01:00"));
        assert!(is_pci_path("0000:01:00.1"));
        assert!(!is_pci_path("01:00.0"));
        assert!(!is_pci_path("0000:01:00.8"));
        assert!(is_pci_id("10de:2507"));
        assert!(!is_pci_id("10de2507"));
    }

    #[test]
    fn hostpci_names_stop_at_15() {
        assert_eq!(hostpci_index("hostpci0"), Some(0));
        assert_eq!(hostpci_index("hostpci15"), Some(15));
        assert_eq!(hostpci_index("hostpci16"), None);
        assert_eq!(hostpci_index("hostpci01"), None);
        assert_eq!(hostpci_index("pci0"), None);
    }

    #[test]
    fn tags_and_fingerprints() {
        assert!(is_proxmox_tag("talos"));
        assert!(is_proxmox_tag("k8s.gpu+1"));
        assert!(!is_proxmox_tag("-x"));
        assert!(!is_proxmox_tag("a b"));
        assert!(is_sha256_fingerprint(&vec!["AB"; 32].join(":")));
        assert!(is_sha256_fingerprint(&"ab".repeat(32)));
        assert!(!is_sha256_fingerprint(&vec!["AB"; 20].join(":")));
    }

    #[test]
    fn proxmox_names_follow_pve_formats() {
        assert!(is_pve_node_name("pve"));
        assert!(is_pve_node_name("PVE-2"));
        assert!(!is_pve_node_name("pve_2"));
        assert!(!is_pve_node_name("pve.lan"));
        assert!(is_pve_storage_id("local-lvm"));
        assert!(is_pve_storage_id("nfs.iso_1"));
        // PVE matches storage IDs without regard to case.
        assert!(is_pve_storage_id("Local-LVM"));
        assert!(!is_pve_storage_id("local-"));
        assert!(!is_pve_storage_id("1local"));
        assert!(!is_pve_storage_id("l"));
        assert!(is_pve_bridge("vmbr0"));
        assert!(is_pve_bridge("vmbr0.20"));
        assert!(is_pve_bridge(&"b".repeat(15)));
        assert!(!is_pve_bridge(&"b".repeat(16)), "a Linux interface name");
        assert!(!is_pve_bridge(&"b".repeat(10_000)));
        assert!(!is_pve_bridge("vmbr 0"));
        assert!(!is_pve_bridge(""));
        assert!(is_pve_pool_id("TALOS"));
        assert!(is_pve_pool_id("lab/talos"));
        assert!(is_pve_pool_id("a/b/c"));
        assert!(!is_pve_pool_id("a/b/c/d"), "three levels at most");
        assert!(!is_pve_pool_id("lab//talos"));
        assert!(!is_pve_pool_id("a b"));
        assert!(is_pve_config_id("gpu"));
        assert!(is_pve_config_id("GPU_a-1"));
        assert!(!is_pve_config_id("g"));
        assert!(!is_pve_config_id("1gpu"));
        assert!(!is_pve_config_id("gpu.0"));
    }

    #[test]
    fn networks_know_their_network_and_broadcast() {
        let n = Ipv4Net::containing(Ipv4Addr::new(192, 168, 1, 121), 24);
        assert_eq!(n.to_string(), "192.168.1.0/24");
        assert_eq!(n.broadcast(), Ipv4Addr::new(192, 168, 1, 255));
        assert!(n.contains(Ipv4Addr::new(192, 168, 1, 1)));
        assert!(!n.contains(Ipv4Addr::new(192, 168, 2, 1)));
    }
}
