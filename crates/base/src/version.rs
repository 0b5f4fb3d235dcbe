//! Talos versions, the config contract generated for each (v1.12 and v1.13 exactly, others the
//! nearest with a warning), and each Talos release's default Kubernetes version.
//! Source: Talos `pkg/machinery/config/contract.go` and `pkg/machinery/constants/constants.go`.

use std::fmt;
use std::str::FromStr;

/// Errors about versions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// Not `vMAJOR.MINOR[.PATCH][-PRE]`.
    #[error("invalid version {0:?}: expected vMAJOR.MINOR.PATCH, e.g. v1.13.0")]
    Invalid(String),
    /// No known default Kubernetes version for this Talos release.
    #[error(
        "no known default Kubernetes version for Talos {0} (known: v1.10.0 to v1.14.1); set kubernetes_version"
    )]
    UnknownDefaultKubernetes(TalosVersion),
}

/// A Talos release version such as `v1.13.9` (the leading `v` is optional when parsing).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TalosVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version (13).
    pub minor: u32,
    /// Patch version (9); 0 when not written.
    pub patch: u32,
    /// Pre-release suffix without the dash (`beta.0`), if any.
    pub pre: Option<String>,
}

impl FromStr for TalosVersion {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || VersionError::Invalid(s.to_string());
        let body = s.strip_prefix('v').unwrap_or(s);
        let (core, pre) = match body.split_once('-') {
            Some((c, p)) if !p.is_empty() => (c, Some(p.to_string())),
            Some(_) => return Err(invalid()),
            None => (body, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(invalid());
        }
        let num = |p: &str| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                Err(invalid())
            } else {
                p.parse::<u32>().map_err(|_| invalid())
            }
        };
        Ok(TalosVersion {
            major: num(parts[0])?,
            minor: num(parts[1])?,
            patch: parts.get(2).map(|p| num(p)).transpose()?.unwrap_or(0),
            pre,
        })
    }
}

impl fmt::Display for TalosVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)?;
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

/// The machine config contract talosprov generates: what `talosctl gen config --talos-version`
/// produces for that minor release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Contract {
    /// Talos 1.12: multi-document configs (`HostnameConfig`), `machine.network: {}` still emitted.
    V1_12,
    /// Talos 1.13 (the default): as 1.12 without the empty `machine.network`.
    V1_13,
    /// Talos 1.14: the v1alpha1 document reduced to the machine's identity, CAs and
    /// tokens, with the rest in documents of their own (`KubeletConfig`,
    /// `KubeClusterConfig`, `UnattendedInstallConfig`, ...).
    V1_14,
}

impl Contract {
    /// The default contract.
    pub const DEFAULT: Contract = Contract::V1_13;

    /// Whether Talos's generator still writes an empty `machine.network: {}`
    /// (`!KubeSpanMultidocConfig()`, i.e. contract ≤ 1.12).
    pub fn emits_empty_machine_network(self) -> bool {
        self == Contract::V1_12
    }
}

impl fmt::Display for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Contract::V1_12 => "v1.12",
            Contract::V1_13 => "v1.13",
            Contract::V1_14 => "v1.14",
        })
    }
}

/// The contract chosen for a Talos version, and a warning the caller should print when the
/// version is not one talosprov generates for exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractChoice {
    /// The contract used.
    pub contract: Contract,
    /// Whether the `HostnameConfig` document may be generated: the kind exists from Talos 1.12
    /// (`network.HostnameConfigV1Alpha1`), so it is `false` for older releases, whatever the
    /// caller asks for.
    pub hostname_config: bool,
    /// Set when the version is outside v1.12–v1.13; it says what is generated instead.
    pub warning: Option<String>,
}

/// The contract for a Talos version: 1.12, 1.13 and 1.14 exactly. Newer releases get the v1.14
/// contract (Talos accepts configs of older contracts). Older releases get the v1.12
/// contract's v1alpha1 document without the `HostnameConfig` document, which they still
/// refuse: its `machine.install.grubUseUKICmdline` is a Talos 1.12 field (siderolabs/talos
/// commit ec0a813, "use cmdline from the UKI in Talos 1.12+"), unknown to the decoder of
/// earlier releases.
pub fn contract_for(version: &TalosVersion) -> ContractChoice {
    match (version.major, version.minor) {
        (1, 12) => ContractChoice {
            contract: Contract::V1_12,
            hostname_config: true,
            warning: None,
        },
        (1, 13) => ContractChoice {
            contract: Contract::V1_13,
            hostname_config: true,
            warning: None,
        },
        (1, 14) => ContractChoice {
            contract: Contract::V1_14,
            hostname_config: true,
            warning: None,
        },
        (major, minor) if (major, minor) > (1, 14) => ContractChoice {
            contract: Contract::V1_14,
            hostname_config: true,
            warning: Some(format!(
                "Talos {version} is newer than the config contracts talosprov generates (v1.12 to v1.14): \
                 generating the v1.14 config, which Talos {major}.{minor} accepts but which lacks that release's new defaults"
            )),
        },
        _ => ContractChoice {
            contract: Contract::V1_12,
            hostname_config: false,
            warning: Some(format!(
                "Talos {version} is older than the config contracts talosprov generates (v1.12, v1.13): \
                 generating the v1.12 config's v1alpha1 document alone (no HostnameConfig document), \
                 which Talos before v1.12 still refuses: its machine.install.grubUseUKICmdline is a \
                 v1.12 field (unknown keys found during decoding)"
            )),
        },
    }
}

/// `DefaultKubernetesVersion` in Talos `pkg/machinery/constants/constants.go` at each release
/// tag, read from the tags v1.10.0 to v1.13.9, and v1.14.1 (`1.37.0`; the v1.14 pre-releases
/// defaulted to 1.36.x and 1.37 pre-releases, v1.14.0 to the final 1.37.0).
const DEFAULT_KUBERNETES: &[((u32, u32, u32), &str)] = &[
    ((1, 10, 0), "1.33.0"),
    ((1, 10, 3), "1.33.1"),
    ((1, 10, 5), "1.33.2"),
    ((1, 10, 6), "1.33.3"),
    ((1, 10, 7), "1.33.4"),
    ((1, 10, 8), "1.33.6"),
    ((1, 11, 0), "1.34.0"),
    ((1, 11, 2), "1.34.1"),
    ((1, 12, 0), "1.35.0"),
    ((1, 12, 5), "1.35.2"),
    ((1, 12, 7), "1.35.4"),
    ((1, 13, 0), "1.36.0"),
    ((1, 13, 3), "1.36.1"),
    ((1, 13, 5), "1.36.2"),
    ((1, 13, 9), "1.36.3"),
    ((1, 14, 0), "1.37.0"),
];

/// The newest patch release of each minor in [`DEFAULT_KUBERNETES`].
const LAST_KNOWN_PATCH: &[((u32, u32), u32)] = &[
    ((1, 10), 9),
    ((1, 11), 6),
    ((1, 12), 11),
    ((1, 13), 9),
    ((1, 14), 1),
];

/// The Talos release of talosprov's reference cluster (`examples/homelab`),
/// which `init` pins in the clusters it writes.
pub const REFERENCE_TALOS_VERSION: &str = "v1.13.8";

/// The Kubernetes release `init` pins (without `v`): the one
/// [`REFERENCE_TALOS_VERSION`] installs by default, as the reference cluster
/// pins it.
pub fn reference_kubernetes_version() -> &'static str {
    let talos: TalosVersion = REFERENCE_TALOS_VERSION
        .parse()
        .expect("the reference Talos release is a version");
    default_kubernetes_version(&talos).expect("the reference Talos release is a known one")
}

/// The Kubernetes version (without `v`, e.g. `1.36.3`) a Talos release installs by default:
/// that release's `DefaultKubernetesVersion`. Pre-releases use their release's entry.
///
/// # Errors
/// [`VersionError::UnknownDefaultKubernetes`] for releases outside v1.10.0–v1.14.1; the caller
/// then needs an explicit Kubernetes version.
pub fn default_kubernetes_version(talos: &TalosVersion) -> Result<&'static str, VersionError> {
    let key = (talos.major, talos.minor, talos.patch);
    let known = LAST_KNOWN_PATCH
        .iter()
        .any(|&((ma, mi), last)| ma == talos.major && mi == talos.minor && talos.patch <= last);
    if !known {
        return Err(VersionError::UnknownDefaultKubernetes(talos.clone()));
    }
    DEFAULT_KUBERNETES
        .iter()
        .rev()
        .find(|(v, _)| *v <= key && (v.0, v.1) == (key.0, key.1))
        .map(|(_, k)| *k)
        .ok_or_else(|| VersionError::UnknownDefaultKubernetes(talos.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> TalosVersion {
        s.parse().unwrap()
    }

    #[test]
    fn default_kubernetes_follows_each_talos_tag() {
        assert_eq!(default_kubernetes_version(&v("v1.11.0")).unwrap(), "1.34.0");
        assert_eq!(default_kubernetes_version(&v("v1.12.0")).unwrap(), "1.35.0");
        assert_eq!(default_kubernetes_version(&v("v1.12.6")).unwrap(), "1.35.2");
        assert_eq!(
            default_kubernetes_version(&v("v1.12.11")).unwrap(),
            "1.35.4"
        );
        assert_eq!(default_kubernetes_version(&v("v1.13.0")).unwrap(), "1.36.0");
        assert_eq!(default_kubernetes_version(&v("v1.13.8")).unwrap(), "1.36.2");
        assert_eq!(reference_kubernetes_version(), "1.36.2");
        assert_eq!(default_kubernetes_version(&v("v1.13.9")).unwrap(), "1.36.3");
    }

    #[test]
    fn unknown_release_has_no_default_kubernetes() {
        let err = default_kubernetes_version(&v("v1.13.10")).unwrap_err();
        assert!(err.to_string().contains("set kubernetes_version"), "{err}");
        assert!(default_kubernetes_version(&v("v1.9.0")).is_err());
    }

    #[test]
    fn versions_outside_the_supported_contracts_get_the_nearest_with_a_warning() {
        assert_eq!(
            contract_for(&v("v1.13.9")),
            ContractChoice {
                contract: Contract::V1_13,
                hostname_config: true,
                warning: None
            }
        );
        assert_eq!(contract_for(&v("1.12.0")).contract, Contract::V1_12);
        assert_eq!(contract_for(&v("v1.14.0")).contract, Contract::V1_14);
        assert_eq!(contract_for(&v("v1.14.0")).warning, None);
        let newer = contract_for(&v("v1.15.0"));
        assert_eq!(newer.contract, Contract::V1_14);
        assert!(newer.warning.unwrap().contains("v1.14 config"));
        let older = contract_for(&v("v1.11.3"));
        assert_eq!(older.contract, Contract::V1_12);
        assert!(!older.hostname_config);
        assert!(
            older
                .warning
                .unwrap()
                .contains("machine.install.grubUseUKICmdline")
        );
    }

    #[test]
    fn version_parsing_accepts_talos_tags_and_refuses_garbage() {
        assert_eq!(v("v1.13.0-beta.1").to_string(), "v1.13.0-beta.1");
        assert_eq!(v("1.12").to_string(), "v1.12.0");
        assert!("v1".parse::<TalosVersion>().is_err());
        assert!("v1.x.0".parse::<TalosVersion>().is_err());
    }
}
