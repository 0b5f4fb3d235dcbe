//! Resource addresses as plans and `state` commands name them:
//! `image/<schematic8>-<version>`, `pci_mapping/gpu`, `pool/TALOS`,
//! `vm/<hostname>`, `ha_rule/<entry>`, `config/<hostname>`, `bootstrap`, `kubeconfig`, `talosconfig`, and an
//! add-on's Kubernetes object, `addon/<addon>/<Kind>[.<group>]/[<namespace>/]<name>`
//! (e.g. `addon/cilium/DaemonSet.apps/kube-system/cilium`,
//! `addon/gpu/Namespace/gpu-operator`).

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
    /// `ha_rule/<entry>`: the Proxmox HA rule that keeps the VMs of a
    /// `proxmox.spread` entry (a role or a pool) on different hosts.
    HaRule(String),
    /// `config/<hostname>`: the machine config applied to a node.
    Config(String),
    /// `bootstrap`: the one-time cluster bootstrap.
    Bootstrap,
    /// `kubeconfig`: the fetched admin kubeconfig.
    Kubeconfig,
    /// `talosconfig`: the talosconfig kept in the state's outputs, whose admin client
    /// certificate talosprov renews before it expires.
    Talosconfig,
    /// `addon/<addon>/<Kind>[.<group>]/[<namespace>/]<name>`: one Kubernetes
    /// object of an add-on, applied with server-side apply (boxed: it is
    /// the largest address by far).
    Object(Box<ObjectAddress>),
}

/// Which Kubernetes object of which add-on: the object's identity in the
/// cluster is its API group, kind, namespace and name (the version is not
/// part of it: `apps/v1` and `apps/v1beta2` name the same Deployment).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectAddress {
    /// The add-on's name in the topology.
    pub addon: String,
    /// `Kind` for the core group, `Kind.group` otherwise (`DaemonSet.apps`),
    /// as `kubectl get` names a resource type.
    pub kind: String,
    /// `metadata.namespace`; `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectAddress {
    /// The address of `name` of `kind` in `api_version` (`v1`, `apps/v1`).
    pub fn new(
        addon: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> ObjectAddress {
        let kind = match api_version.rsplit_once('/') {
            Some((group, _)) => format!("{kind}.{group}"),
            None => kind.to_owned(),
        };
        ObjectAddress {
            addon: addon.to_owned(),
            kind,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The kind alone, without its group (`DaemonSet`).
    pub fn bare_kind(&self) -> &str {
        self.kind.split_once('.').map_or(&self.kind, |(k, _)| k)
    }

    /// The text after `addon/`: how the state keys its inventory.
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{}/{ns}/{}", self.addon, self.kind, self.name),
            None => format!("{}/{}/{}", self.addon, self.kind, self.name),
        }
    }

    /// Read back [`ObjectAddress::key`]'s text; `None` when it has not three
    /// or four non-empty parts.
    pub fn from_key(key: &str) -> Option<ObjectAddress> {
        let parts: Vec<&str> = key.split('/').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return None;
        }
        let (addon, kind, namespace, name) = match parts.as_slice() {
            [a, k, n] => (a, k, None, n),
            [a, k, ns, n] => (a, k, Some((*ns).to_owned()), n),
            _ => return None,
        };
        Some(ObjectAddress {
            addon: (*addon).to_owned(),
            kind: (*kind).to_owned(),
            namespace,
            name: (*name).to_owned(),
        })
    }
}

/// An address that does not name any kind of resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}\" is not a resource address: expected image/NAME, pci_mapping/NAME, pool/NAME, \
     vm/HOSTNAME, config/HOSTNAME, bootstrap, kubeconfig, talosconfig or \
     addon/ADDON/KIND/[NAMESPACE/]NAME"
)]
pub struct AddressError(pub String);

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AddressError(s.to_owned());
        match s {
            "bootstrap" => return Ok(Address::Bootstrap),
            "kubeconfig" => return Ok(Address::Kubeconfig),
            "talosconfig" => return Ok(Address::Talosconfig),
            _ => {}
        }
        let (kind, name) = s.split_once('/').ok_or_else(bad)?;
        if kind == "addon" {
            return ObjectAddress::from_key(name)
                .map(|o| Address::Object(Box::new(o)))
                .ok_or_else(bad);
        }
        if name.is_empty() || name.contains('/') {
            return Err(bad());
        }
        let name = name.to_owned();
        Ok(match kind {
            "image" => Address::Image(name),
            "pci_mapping" => Address::PciMapping(name),
            "pool" => Address::Pool(name),
            "vm" => Address::Vm(name),
            "ha_rule" => Address::HaRule(name),
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
            Address::HaRule(n) => write!(f, "ha_rule/{n}"),
            Address::Config(n) => write!(f, "config/{n}"),
            Address::Bootstrap => f.write_str("bootstrap"),
            Address::Kubeconfig => f.write_str("kubeconfig"),
            Address::Talosconfig => f.write_str("talosconfig"),
            Address::Object(o) => write!(f, "addon/{}", o.key()),
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
            "talosconfig",
            "addon/cilium/DaemonSet.apps/kube-system/cilium",
            "addon/gpu/Namespace/gpu-operator",
        ] {
            let a: Address = text.parse().unwrap();
            assert_eq!(a.to_string(), text);
        }
    }

    #[test]
    fn object_addresses_name_the_group_and_the_scope() {
        let a = ObjectAddress::new("cni", "apps/v1", "DaemonSet", Some("kube-system"), "cni");
        assert_eq!(
            Address::Object(Box::new(a.clone())).to_string(),
            "addon/cni/DaemonSet.apps/kube-system/cni"
        );
        assert_eq!(a.bare_kind(), "DaemonSet");
        let ns = ObjectAddress::new("gpu", "v1", "Namespace", None, "gpu-operator");
        assert_eq!(ns.key(), "gpu/Namespace/gpu-operator");
        assert_eq!(ObjectAddress::from_key(&ns.key()), Some(ns));
    }

    #[test]
    fn unknown_address_kinds_are_refused() {
        for text in [
            "vms/x",
            "vm/",
            "vm",
            "vm/a/b",
            "talosconfigs",
            "",
            "addon/x",
            "addon/x/Kind",
            "addon/x//n",
            "addon/a/b/c/d/e",
        ] {
            assert!(text.parse::<Address>().is_err(), "{text}");
        }
    }
}
