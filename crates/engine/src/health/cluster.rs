//! The cluster as the health checks see it: its nodes ([`ClusterNode`]) and
//! its CNI ([`Cni`]), which decides whether the Kubernetes checks apply.

use std::net::IpAddr;

use talosprov_base::role::Role;

/// A node as the checks see it: its hostname, Talos API address and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The hostname (the topology's, which Talos also uses).
    pub hostname: String,
    /// The Talos API address (port 50000).
    pub ip: IpAddr,
    /// Control plane or worker.
    pub role: Role,
}

impl ClusterNode {
    /// Whether the node runs etcd.
    pub fn is_control_plane(&self) -> bool {
        self.role == Role::Controlplane
    }

    /// `cp-1 (10.0.0.5)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.hostname, self.ip)
    }
}

/// The cluster's CNI as the machine config names it (`cluster.network.cni.name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cni {
    /// `none`: no CNI is installed by Talos (the reference patches set this), so
    /// Kubernetes nodes stay NotReady until one is deployed.
    None,
    /// `flannel` (the Talos default) or `custom`.
    Named(String),
}

impl Cni {
    /// The CNI a rendered machine config runs, in either contract
    /// ([`talosprov_machine::effective::cni_name`]: `cluster.network.cni.name` with
    /// Talos's default `flannel`, or the v1.14 documents). `None` when the text is not YAML.
    pub fn from_machine_config(config: &str) -> Option<Cni> {
        let docs = talosprov_patch::document::parse_documents(config).ok()?;
        talosprov_machine::effective::v1alpha1(&docs)?;
        let name = talosprov_machine::effective::cni_name(&docs);
        Some(if name == "none" {
            Cni::None
        } else {
            Cni::Named(name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_is_read_from_the_v1alpha1_document_with_the_talos_default() {
        let none = "machine:\n  type: controlplane\ncluster:\n  network:\n    cni:\n      name: none\n---\napiVersion: v1alpha1\nkind: HostnameConfig\n";
        assert_eq!(Cni::from_machine_config(none), Some(Cni::None));
        let default = "machine:\n  type: worker\ncluster:\n  clusterName: lab\n";
        assert_eq!(
            Cni::from_machine_config(default),
            Some(Cni::Named("flannel".into()))
        );
        assert_eq!(Cni::from_machine_config("machine: ["), None);
    }
}
