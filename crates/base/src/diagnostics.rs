//! Diagnostics: one problem found in the user's input (the topology file, the
//! patch tree, later templates and patches), with a stable code, the file, line,
//! column, node and field it concerns. Every stage returns a list of them.

use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// A 1-based position in a file: line and column (in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Pos {
    /// Line, 1-based.
    pub line: u32,
    /// Column, 1-based, counted in characters.
    pub column: u32,
}

impl Pos {
    /// A position from a 1-based line and column.
    pub fn new(line: u32, column: u32) -> Self {
        Pos { line, column }
    }
}

/// How serious a diagnostic is: an error stops the command (exit 1), a warning
/// is printed and the command goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The input cannot be used as it is.
    Error,
    /// The input works, but probably not the way the user wants.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = ($code:literal, $name:literal), )*) => {
        /// The stable identifier of each kind of problem: a code (`T012`) and a
        /// name (`duplicate-ip`). Codes never change meaning once released;
        /// scripts and documentation may rely on them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// Every code, in numeric order.
            pub const ALL: &'static [Code] = &[ $( Code::$variant, )* ];

            /// The short code, such as `T012`.
            pub fn code(self) -> &'static str {
                match self { $( Code::$variant => $code, )* }
            }

            /// The readable name, such as `duplicate-ip`.
            pub fn name(self) -> &'static str {
                match self { $( Code::$variant => $name, )* }
            }
        }
    };
}

codes! {
    /// The file is not valid YAML, or not one YAML mapping.
    YamlSyntax = ("T001", "yaml-syntax"),
    /// A key that the format does not define.
    UnknownKey = ("T002", "unknown-key"),
    /// A value of the wrong YAML type (a list where a string belongs, say).
    WrongType = ("T003", "wrong-type"),
    /// A required field is missing.
    MissingField = ("T004", "missing-field"),
    /// `role` is neither `controlplane` nor `worker`.
    InvalidRole = ("T010", "invalid-role"),
    /// Two nodes have the same hostname.
    DuplicateHostname = ("T011", "duplicate-hostname"),
    /// Two nodes have the same IP address.
    DuplicateIp = ("T012", "duplicate-ip"),
    /// No node is a control plane.
    NoControlplane = ("T013", "no-controlplane"),
    /// The VIP is also a node's IP address.
    VipIsNodeIp = ("T014", "vip-is-node-ip"),
    /// A `hostpci` entry names a mapping that `pci_mappings` does not declare.
    UnknownPciMapping = ("T015", "unknown-pci-mapping"),
    /// A hostname (or the cluster name) is not a lowercase RFC 1123 label.
    InvalidHostname = ("T016", "invalid-hostname"),
    /// An IPv4 address does not parse.
    InvalidIpv4 = ("T017", "invalid-ipv4"),
    /// An address lies outside the cluster's `/prefix_length` network.
    OutsideNetwork = ("T018", "outside-network"),
    /// An address is the network or broadcast address of its network.
    ReservedAddress = ("T019", "reserved-address"),
    /// Two nodes have the same VM ID.
    DuplicateVmid = ("T020", "duplicate-vmid"),
    /// A VM ID lies outside 100..=999999999.
    VmidOutOfRange = ("T021", "vmid-out-of-range"),
    /// `vm_id` is missing and the IP's last octet is below 100.
    VmidRequired = ("T022", "vmid-required"),
    /// A `hostpci` device name is not `hostpci0`..`hostpci15`.
    InvalidHostpciDevice = ("T023", "invalid-hostpci-device"),
    /// A node uses the same `hostpci` device name twice.
    DuplicateHostpciDevice = ("T024", "duplicate-hostpci-device"),
    /// A PCI mapping is given to more than one node.
    PciMappingShared = ("T025", "pci-mapping-shared"),
    /// A node uses a PCI mapping that belongs to another Proxmox host.
    PciMappingWrongHost = ("T026", "pci-mapping-wrong-host"),
    /// Control planes share Proxmox hosts: losing one host loses etcd quorum.
    ControlplanesShareHost = ("T027", "controlplanes-share-host"),
    /// A schematic name that `schematics` does not declare.
    UnknownSchematic = ("T028", "unknown-schematic"),
    /// An extension name is not `<org>/<name>`.
    InvalidExtension = ("T029", "invalid-extension"),
    /// A schematic `id` is not 64 lowercase hex digits.
    InvalidSchematicId = ("T030", "invalid-schematic-id"),
    /// A version is not `vMAJOR.MINOR.PATCH`.
    InvalidVersion = ("T031", "invalid-version"),
    /// `memory` is below Talos's minimum for the node's role.
    MemoryBelowMinimum = ("T032", "memory-below-minimum"),
    /// `disk_size` is below Talos's minimum.
    DiskBelowMinimum = ("T033", "disk-below-minimum"),
    /// An even number of control planes, more than one.
    EvenControlplanes = ("T034", "even-controlplanes"),
    /// A schematic gives both `id` and `extensions`/`kernel_args`.
    InvalidSchematic = ("T035", "invalid-schematic"),
    /// A value out of its allowed range (prefix length, cores, ...).
    OutOfRange = ("T036", "out-of-range"),
    /// A URL that does not parse or has the wrong scheme.
    InvalidUrl = ("T037", "invalid-url"),
    /// A value that is not one of the allowed names.
    InvalidValue = ("T038", "invalid-value"),
    /// A field that does not apply with the other settings given.
    ConflictingFields = ("T039", "conflicting-fields"),
    /// A PCI mapping's `path`, `id` or `subsystem_id` has the wrong form.
    InvalidPciMapping = ("T040", "invalid-pci-mapping"),
    /// A Proxmox tag with characters Proxmox refuses.
    InvalidTag = ("T041", "invalid-tag"),
    /// A TLS fingerprint that is not a SHA-256 digest.
    InvalidFingerprint = ("T042", "invalid-fingerprint"),
    /// An input beyond talosprov's bounds: YAML nested too deep, excessive
    /// aliasing, a template that runs out of its work budget.
    InputLimit = ("T043", "input-limit"),
    /// A Talos version for which the Image Factory has no `nocloud-installer` image (before
    /// v1.10.0), so talosprov can neither install nor upgrade its nodes.
    NoNocloudInstaller = ("T044", "no-nocloud-installer"),
    /// A PCI mapping whose `id` has vendor or device `0000`, which
    /// no PCI device has (PCI-SIG assigns no vendor 0000): a placeholder, such as
    /// `talosprov init` writes, not yet filled in from the Proxmox host.
    PlaceholderPciMapping = ("T045", "placeholder-pci-mapping"),
    /// `install_disk` names a disk other than the VM's system disk as Talos
    /// sees it: `scsi0` on virtio-scsi is `/dev/sda`.
    InstallDiskBus = ("T046", "install-disk-bus"),
    /// Two NICs with the same MAC address.
    DuplicateMac = ("T047", "duplicate-mac"),
    /// A `networks` or `disks` entry Proxmox or Talos would refuse: a MAC that
    /// is not a unicast address, a mount that is not `/var/mnt/<name>`, two
    /// disks mounted at one place, more NICs or disks than a VM takes.
    InvalidDevice = ("T048", "invalid-device"),
    /// A node whose image lacks the `siderolabs/qemu-guest-agent` extension:
    /// its VM gets no guest agent (`agent: 0`).
    NoGuestAgent = ("T049", "no-guest-agent"),
    /// An `ha` entry Proxmox would refuse: a state other than `started`,
    /// `stopped`, `disabled` or `ignored`, or a `max_restart`/`max_relocate`
    /// over 32 bits.
    InvalidHa = ("T050", "invalid-ha"),
    /// A `proxmox.spread` entry that is neither a role nor a pool, or one
    /// given twice.
    UnknownSpread = ("T051", "unknown-spread"),
    /// An add-on without a source, or with more than one of `helm`,
    /// `manifests` and `url`.
    AddonSource = ("A001", "addon-source"),
    /// A `depends_on` entry that names no declared add-on.
    UnknownAddon = ("A002", "unknown-addon"),
    /// Add-ons whose `depends_on` form a cycle.
    AddonCycle = ("A003", "addon-cycle"),
    /// A `url` add-on without a valid `sha256`, or whose download does not
    /// match it.
    AddonChecksum = ("A004", "addon-checksum"),
    /// An add-on that carries a CNI (the `cilium` preset, or a DaemonSet
    /// that writes `/etc/cni/net.d`) on a cluster whose CNI is not `none`.
    AddonCniConflict = ("A005", "addon-cni-conflict"),
    /// A node with an NVIDIA device lacks what the GPU operator preset needs:
    /// the NVIDIA extensions in its schematic, the NVIDIA kernel modules in
    /// its config.
    GpuNodeIncomplete = ("A006", "gpu-node-incomplete"),
    /// The GPU operator is declared, and no node has an NVIDIA device.
    NoGpuNode = ("A007", "no-gpu-node"),
    /// The Talos cloud controller manager is declared, and a node's kubelet
    /// lacks `cloud-provider: external`.
    ExternalCloudProvider = ("A008", "external-cloud-provider"),
    /// An add-on's manifests cannot be used: a file that cannot be read, a
    /// glob that matches no file, a document that is not a Kubernetes object
    /// (`apiVersion`, `kind`, `metadata.name`).
    InvalidAddonManifest = ("A009", "invalid-addon-manifest"),
    /// Two add-ons render the same Kubernetes object.
    AddonObjectConflict = ("A010", "addon-object-conflict"),
    /// A `helm` add-on, and no `helm` program: neither `TALOSPROV_HELM` nor
    /// `helm` on `PATH`.
    HelmNotFound = ("A011", "helm-not-found"),
    /// An add-on's source did not answer: a download that failed, answered an HTTP error,
    /// went slower than the minimum rate or past its deadline; a `helm template` that could
    /// not start, failed, or ran past its deadline. What the source gave, when it gave
    /// something that cannot be used (too large, not UTF-8, not YAML), is `A009`.
    AddonSourceFailed = ("A012", "addon-source-failed"),
    /// A pool's `ip_range` that is not a range, lies outside the cluster
    /// network, or includes its network or broadcast address.
    InvalidPoolRange = ("O001", "invalid-pool-range"),
    /// A pool's range has fewer free addresses than its `replicas`.
    PoolRangeTooSmall = ("O002", "pool-range-too-small"),
    /// Two pools whose ranges overlap.
    OverlappingPools = ("O003", "overlapping-pools"),
    /// A pool's hostname pattern gives invalid or identical names, or a
    /// pool's `replicas` is over the limit.
    InvalidPool = ("O004", "invalid-pool"),
    /// An edit of a pool would move a member the state records (its IP out
    /// of the range, its hostname, vmid or host).
    PoolMemberMoved = ("O005", "pool-member-moved"),
    /// A new pool member fits on none of the pool's hosts: the plan read each
    /// host's free memory and datastore space, and none has what it needs.
    PoolNoCapacity = ("O006", "pool-no-capacity"),
    /// A patch file is empty, and is skipped.
    EmptyPatch = ("P001", "empty-patch"),
    /// A `patches/nodes/<name>` folder that matches no node.
    UnknownPatchNode = ("P002", "unknown-patch-node"),
    /// The patch tree cannot be read.
    UnreadablePatchTree = ("P003", "unreadable-patch-tree"),
    /// A folder in the patch tree that is not `common`, `controlplane`,
    /// `worker` or `nodes`, so its files are ignored.
    UnknownPatchFolder = ("P004", "unknown-patch-folder"),
    /// A patch file cannot be read (permissions, not UTF-8).
    UnreadablePatch = ("P005", "unreadable-patch"),
    /// A patch template does not compile or fails to render for a node
    /// (undefined variable, failed function call).
    TemplateError = ("P006", "template-error"),
    /// A patch (as written, or as rendered for a node) is not valid YAML, or
    /// neither a config patch nor a JSON patch.
    InvalidPatch = ("P007", "invalid-patch"),
    /// A patch cannot be applied to the node's config (a value of another
    /// shape, a JSON patch path that does not exist).
    PatchConflict = ("P008", "patch-conflict"),
    /// Patch files of one folder whose numeric prefixes have different
    /// widths, so byte-wise order is not numeric order.
    MixedPrefixWidths = ("P009", "mixed-prefix-widths"),
    /// The base machine config cannot be generated (no default Kubernetes
    /// version for the Talos release, say).
    BaseConfig = ("M001", "base-config"),
    /// Talos would refuse the node's final machine config.
    ConfigRejected = ("M002", "config-rejected"),
    /// Talos accepts the node's final machine config but warns about it, or
    /// the Talos version is outside the contracts talosprov generates.
    ConfigWarning = ("M003", "config-warning"),
    /// The node's final machine config has a key (or a document kind) that the
    /// cluster's Talos config contract does not define: Talos's decoder refuses it.
    UnknownConfigKey = ("M004", "unknown-config-key"),
    /// A value in the node's final machine config has a type its field cannot
    /// take (a list where Talos wants a mapping, a number where it wants a duration).
    ConfigWrongType = ("M005", "config-wrong-type"),
    /// A network entry takes the node's link over without the node's address
    /// (or default route), which cloud-init gave the link and Talos then drops.
    NodeAddressLost = ("M006", "node-address-lost"),
    /// An interface, link, VIP link or VLAN parent that is not the node's link,
    /// or a selector that cannot be matched to it offline.
    UnknownLink = ("M007", "unknown-link"),
    /// A patch sets (or removes) `machine.install.image` or `machine.install.disk`, which
    /// talosprov manages (the schematic's installer, `cluster.install_disk`): the patch's
    /// value is what the config carries.
    ManagedValueOverridden = ("M008", "managed-value-overridden"),
    /// A patch sets a v1alpha1 field that the cluster's Talos release deprecates (1.14:
    /// the fields its own documents replace); the message names the replacement.
    DeprecatedField = ("M009", "deprecated-field"),
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code(), self.name())
    }
}

impl Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

/// The longest diagnostic message, in characters; see [`Diagnostic::error`].
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// `message`, its middle elided when it is longer than [`MAX_MESSAGE_CHARS`].
fn bounded_message(message: String) -> String {
    let count = message.chars().count();
    if count <= MAX_MESSAGE_CHARS {
        return message;
    }
    let keep = MAX_MESSAGE_CHARS / 2;
    let head: String = message.chars().take(keep).collect();
    let tail: String = message.chars().skip(count - keep / 2).collect();
    format!(
        "{head}… ({} characters elided) …{tail}",
        count - keep - keep / 2
    )
}

/// One problem in the user's input.
///
/// `file` is the file the problem is in (the topology file, or a patch file);
/// `pos` is its line and column when the parser knows it; `node` is the
/// hostname of the node concerned; `field` is the dotted path of the field
/// (`nodes[2].hostpci[0].mapping`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable code and name.
    pub code: Code,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, worded for the operator (one sentence, no trailing period).
    pub message: String,
    /// The file concerned.
    pub file: PathBuf,
    /// Line and column in `file`, when known.
    pub pos: Option<Pos>,
    /// Hostname of the node concerned, when the problem belongs to one node.
    pub node: Option<String>,
    /// Dotted path of the field, such as `cluster.vip` or `nodes[1].ip`.
    pub field: Option<String>,
}

impl Diagnostic {
    /// An error about `file`, with no position, node or field yet.
    ///
    /// A message longer than [`MAX_MESSAGE_CHARS`] (one quoting a huge value)
    /// is cut in its middle, so no input can flood the terminal or a CI log.
    pub fn error(code: Code, file: &Path, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            severity: Severity::Error,
            message: bounded_message(message.into()),
            file: file.to_path_buf(),
            pos: None,
            node: None,
            field: None,
        }
    }

    /// A warning about `file`, with no position, node or field yet.
    pub fn warning(code: Code, file: &Path, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, file, message)
        }
    }

    /// Set the position.
    pub fn at(mut self, pos: Pos) -> Self {
        self.pos = Some(pos);
        self
    }

    /// Set the node's hostname (ignored when `None`).
    pub fn on_node(mut self, hostname: Option<&str>) -> Self {
        self.node = hostname.map(str::to_owned);
        self
    }

    /// Set the dotted field path.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Whether this is an error (not a warning).
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// `"; did you mean `x`?"` for the candidate closest to `value` (Jaro-Winkler
/// similarity of at least 0.8, ignoring case), or an empty string.
pub fn did_you_mean<'a>(value: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    let value = value.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&c.to_lowercase(), &value), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

/// Whether any diagnostic in the list is an error.
pub fn has_errors(diagnostics: &[Diagnostic]) -> bool {
    diagnostics.iter().any(Diagnostic::is_error)
}

/// Sort diagnostics for display: by file, then position (unpositioned last in
/// each file), then code; the sort is stable, so equal keys keep their order.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        let key = |d: &Diagnostic| (d.pos.is_none(), d.pos.unwrap_or_default(), d.code);
        a.file.cmp(&b.file).then_with(|| key(a).cmp(&key(b)))
    });
}

/// Test helper: panics unless `diagnostics` holds nothing but `T049 no-guest-agent`
/// warnings (which every small test topology without a schematic gets). Built
/// for other crates' tests with the `test-support` feature.
#[cfg(any(test, feature = "test-support"))]
pub fn assert_clean(diagnostics: &[Diagnostic]) {
    assert!(
        diagnostics.iter().all(|d| d.code == Code::NoGuestAgent),
        "{diagnostics:#?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_and_names_are_unique() {
        let codes: HashSet<_> = Code::ALL.iter().map(|c| c.code()).collect();
        let names: HashSet<_> = Code::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(codes.len(), Code::ALL.len());
        assert_eq!(names.len(), Code::ALL.len());
    }

    #[test]
    fn did_you_mean_picks_the_closest_candidate() {
        assert_eq!(
            did_you_mean("wroker", ["controlplane", "worker"]),
            "; did you mean `worker`?"
        );
        assert_eq!(
            did_you_mean("Controlplane", ["controlplane", "worker"]),
            "; did you mean `controlplane`?"
        );
        assert_eq!(did_you_mean("zzz", ["controlplane", "worker"]), "");
    }

    #[test]
    fn sort_puts_positioned_first_in_line_order() {
        let f = Path::new("c.yaml");
        let mut d = vec![
            Diagnostic::error(Code::NoControlplane, f, "a"),
            Diagnostic::error(Code::DuplicateIp, f, "b").at(Pos::new(9, 3)),
            Diagnostic::error(Code::UnknownKey, f, "c").at(Pos::new(2, 1)),
        ];
        sort(&mut d);
        let order: Vec<_> = d.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(order, ["c", "b", "a"]);
    }
}
