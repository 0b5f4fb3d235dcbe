//! Talos API roles and which of them each RPC we use requires, following
//! siderolabs/talos `pkg/machinery/role/role.go` and the apid/machined authz rules.

/// A Talos API role, carried in the client certificate's Subject Organization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `os:admin`: everything.
    Admin,
    /// `os:operator`: readers plus reboot, shutdown, service restarts.
    Operator,
    /// `os:reader`: read-only calls.
    Reader,
    /// `os:etcd:backup`: readers plus etcd snapshots.
    EtcdBackup,
    /// `os:impersonator`: may set `talos-role` metadata (used between apids).
    Impersonator,
}

impl Role {
    /// Parses an Organization value; unknown values give `None` (Talos ignores them).
    pub fn parse(organization: &str) -> Option<Role> {
        match organization {
            "os:admin" => Some(Role::Admin),
            "os:operator" => Some(Role::Operator),
            "os:reader" => Some(Role::Reader),
            "os:etcd:backup" => Some(Role::EtcdBackup),
            "os:impersonator" => Some(Role::Impersonator),
            _ => None,
        }
    }

    /// The Organization value, e.g. `os:admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "os:admin",
            Role::Operator => "os:operator",
            Role::Reader => "os:reader",
            Role::EtcdBackup => "os:etcd:backup",
            Role::Impersonator => "os:impersonator",
        }
    }
}

/// The roles allowed to call the RPC at gRPC `path` (e.g. `/machine.MachineService/Reboot`),
/// any one of which suffices. Unknown paths fall back to admin, as Talos does.
pub fn allowed_roles(path: &str) -> &'static [Role] {
    const ADMIN: &[Role] = &[Role::Admin];
    const OPERATOR: &[Role] = &[Role::Admin, Role::Operator];
    const READER: &[Role] = &[Role::Admin, Role::Operator, Role::Reader];
    const ETCD_BACKUP: &[Role] = &[Role::Admin, Role::Operator, Role::EtcdBackup];
    const ETCD_READER: &[Role] = &[Role::Admin, Role::Operator, Role::Reader, Role::EtcdBackup];
    match path.rsplit('/').next().unwrap_or_default() {
        _ if path.starts_with("/machine.LifecycleService/") => ADMIN,
        "Pull" if path.starts_with("/machine.ImageService/") => OPERATOR,
        "Version" | "ServiceList" | "SystemStat" => READER,
        "EtcdMemberList" => ETCD_READER,
        "EtcdSnapshot" => ETCD_BACKUP,
        "Reboot" | "Shutdown" => OPERATOR,
        _ => ADMIN,
    }
}

/// Human form of [`allowed_roles`] for error messages: `os:admin` or
/// `os:admin or os:operator`.
pub fn required_roles_text(path: &str) -> &'static str {
    let roles = allowed_roles(path);
    match roles {
        [Role::Admin] => "os:admin",
        [Role::Admin, Role::Operator] => "os:admin or os:operator",
        [Role::Admin, Role::Operator, Role::EtcdBackup] => {
            "os:admin, os:operator or os:etcd:backup"
        }
        _ => "os:reader",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_and_bootstrap_need_admin() {
        assert_eq!(
            allowed_roles("/machine.MachineService/ApplyConfiguration"),
            &[Role::Admin]
        );
        assert_eq!(
            allowed_roles("/machine.MachineService/Bootstrap"),
            &[Role::Admin]
        );
        assert_eq!(
            allowed_roles("/machine.LifecycleService/Upgrade"),
            &[Role::Admin]
        );
        assert_eq!(
            required_roles_text("/machine.MachineService/Kubeconfig"),
            "os:admin"
        );
    }

    #[test]
    fn readers_may_call_version_and_service_list_but_not_reboot() {
        assert!(allowed_roles("/machine.MachineService/Version").contains(&Role::Reader));
        assert!(allowed_roles("/machine.MachineService/ServiceList").contains(&Role::Reader));
        assert!(allowed_roles("/machine.MachineService/SystemStat").contains(&Role::Reader));
        assert!(!allowed_roles("/machine.MachineService/Reboot").contains(&Role::Reader));
        assert_eq!(
            required_roles_text("/machine.MachineService/Reboot"),
            "os:admin or os:operator"
        );
    }

    #[test]
    fn unknown_organizations_are_ignored() {
        assert_eq!(Role::parse("os:admin"), Some(Role::Admin));
        assert_eq!(Role::parse("system:masters"), None);
        assert_eq!(Role::parse(""), None);
    }
}
