//! Resource addresses as plans and `state` commands name them:
//! `image/<schematic8>-<version>`, `pci_mapping/gpu`, `pool/TALOS`,
//! `vm/<hostname>`, `config/<hostname>`, `bootstrap`, `kubeconfig`.

use std::fmt;
use std::str::FromStr;

/// The address of one recorded resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Address {
    /// `image/<name>`: a downloaded Talos image; name is `<schematic8>-<version>`,
    /// with `-<node>` when the storage is not shared.
    Image(String),
    /// `pci_mapping/<name>`: a Proxmox PCI hardware mapping.
    PciMapping(String),
    /// `pool/<name>`: the Proxmox resource pool.
    Pool(String),
    /// `vm/<hostname>`: a node's VM.
    Vm(String),
    /// `config/<hostname>`: the machine config applied to a node.
    Config(String),
    /// `bootstrap`: the one-time cluster bootstrap.
    Bootstrap,
    /// `kubeconfig`: the fetched admin kubeconfig.
    Kubeconfig,
}

/// An address that does not name any kind of resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}\" is not a resource address: expected image/NAME, pci_mapping/NAME, pool/NAME, \
     vm/HOSTNAME, config/HOSTNAME, bootstrap or kubeconfig"
)]
pub struct AddressError(pub String);

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AddressError(s.to_owned());
        match s {
            "bootstrap" => return Ok(Address::Bootstrap),
            "kubeconfig" => return Ok(Address::Kubeconfig),
            _ => {}
        }
        let (kind, name) = s.split_once('/').ok_or_else(bad)?;
        if name.is_empty() || name.contains('/') {
            return Err(bad());
        }
        let name = name.to_owned();
        Ok(match kind {
            "image" => Address::Image(name),
            "pci_mapping" => Address::PciMapping(name),
            "pool" => Address::Pool(name),
            "vm" => Address::Vm(name),
            "config" => Address::Config(name),
            _ => return Err(bad()),
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Image(n) => write!(f, "image/{n}"),
            Address::PciMapping(n) => write!(f, "pci_mapping/{n}"),
            Address::Pool(n) => write!(f, "pool/{n}"),
            Address::Vm(n) => write!(f, "vm/{n}"),
            Address::Config(n) => write!(f, "config/{n}"),
            Address::Bootstrap => f.write_str("bootstrap"),
            Address::Kubeconfig => f.write_str("kubeconfig"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_print_back() {
        for text in [
            "image/376567988ad3-v1.13.8",
            "pci_mapping/gpu",
            "pool/TALOS",
            "vm/talos-worker-01",
            "config/talos-worker-01",
            "bootstrap",
            "kubeconfig",
        ] {
            let a: Address = text.parse().unwrap();
            assert_eq!(a.to_string(), text);
        }
    }

    #[test]
    fn unknown_address_kinds_are_refused() {
        for text in ["vms/x", "vm/", "vm", "vm/a/b", "talosconfig", ""] {
            assert!(text.parse::<Address>().is_err(), "{text}");
        }
    }
}
