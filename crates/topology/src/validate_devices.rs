//! The VM devices a topology declares besides the system disk: `networks`
//! (Proxmox `netN`) and `disks` (`scsiN`, N from 1), on a node, a pool or as
//! the cluster-wide default under `proxmox`. Each entry is checked against
//! what Proxmox's `pve-qm-net` and drive formats (qemu-server) and Talos's
//! `UserVolumeConfig` accept. Called by the section and node checks.

use super::check::Cx;
use super::model::{DataDisk, Ha, Network};
use super::raw::{RawDisk, RawHa, RawNetwork, Spanned};
use super::syntax;
use sha2::{Digest, Sha256};
use talosprov_base::diagnostics::{Code, Diagnostic, Pos};

/// The most NICs a Proxmox VM has: `net0` to `net31`.
pub const MAX_NICS: usize = 32;
/// The most data disks: `scsi1` to `scsi30` (`scsi0` is the system disk).
pub const MAX_DATA_DISKS: usize = 30;
/// Where Talos mounts a user volume: `/var/mnt/<name>`.
pub const USER_VOLUME_ROOT: &str = "/var/mnt/";
/// The longest Talos user volume name: a partition label (36) less `u-`
/// (Talos `user_volume_config.go`, `maxUserVolumeNameLength`).
pub const MAX_VOLUME_NAME: usize = 34;
/// The cache modes of Proxmox's drive format.
const CACHE_MODES: [&str; 5] = ["none", "writethrough", "writeback", "directsync", "unsafe"];

/// Where a list's diagnostics go: its field path (`nodes[2].networks`,
/// `proxmox.disks`) and the node they are about, if any.
#[derive(Clone, Copy)]
pub(super) struct Place<'a> {
    /// The list's field path.
    pub field: &'a str,
    /// The node's hostname as written.
    pub node: Option<&'a str>,
}

impl Place<'_> {
    fn err(&self, cx: &mut Cx<'_>, code: Code, pos: Pos, field: String, msg: String) {
        cx.push(
            Diagnostic::error(code, cx.file, msg)
                .at(pos)
                .on_node(self.node)
                .field(field),
        );
    }
}

/// An `ha` section: its state one of [`super::model::HA_STATES`], its counts
/// 32-bit; unset keys take Proxmox's defaults. `None` after a diagnostic.
pub(super) fn ha(cx: &mut Cx<'_>, raw: &Spanned<RawHa>, at: Place<'_>) -> Option<Ha> {
    let mut out = Ha::default();
    let mut ok = true;
    if let Some(s) = &raw.value.state {
        if super::model::HA_STATES.contains(&s.value.as_str()) {
            out.state.clone_from(&s.value);
        } else {
            let msg = format!(
                "{}.state must be one of {}, found {:?}",
                at.field,
                super::model::HA_STATES.join(", "),
                s.value
            );
            at.err(
                cx,
                Code::InvalidHa,
                s.pos,
                format!("{}.state", at.field),
                msg,
            );
            ok = false;
        }
    }
    for (key, value, slot) in [
        ("max_restart", &raw.value.max_restart, &mut out.max_restart),
        (
            "max_relocate",
            &raw.value.max_relocate,
            &mut out.max_relocate,
        ),
    ] {
        let Some(v) = value else { continue };
        match u32::try_from(v.value) {
            Ok(n) => *slot = n,
            Err(_) => {
                let msg = format!(
                    "{}.{key} must be 0 to {}, found {}",
                    at.field,
                    u32::MAX,
                    v.value
                );
                at.err(
                    cx,
                    Code::InvalidHa,
                    v.pos,
                    format!("{}.{key}", at.field),
                    msg,
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// A `networks` list: each entry checked, the bridge defaulting to
/// `bridge`. MACs are as written (`None` where not given). `None` after a
/// diagnostic.
pub(super) fn networks(
    cx: &mut Cx<'_>,
    list: &Spanned<Vec<Spanned<RawNetwork>>>,
    at: Place<'_>,
    bridge: &str,
) -> Option<Vec<Network>> {
    if list.value.len() > MAX_NICS {
        let msg = format!(
            "{} NICs, over the {MAX_NICS} (net0 to net31) a Proxmox VM has",
            list.value.len()
        );
        at.err(cx, Code::InvalidDevice, list.pos, at.field.to_owned(), msg);
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, n) in list.value.iter().enumerate() {
        let field = |key: &str| format!("{}[{i}].{key}", at.field);
        match network(cx, &n.value, &field, at, bridge) {
            Some(net) => out.push(net),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn network(
    cx: &mut Cx<'_>,
    n: &RawNetwork,
    field: &dyn Fn(&str) -> String,
    at: Place<'_>,
    bridge: &str,
) -> Option<Network> {
    let mut ok = true;
    let bridge = match &n.bridge {
        Some(b) if syntax::is_pve_bridge(&b.value) => b.value.clone(),
        Some(b) => {
            let msg = format!(
                "bridge must be {}, found {:?}",
                syntax::BRIDGE_FORM,
                b.value
            );
            at.err(cx, Code::InvalidValue, b.pos, field("bridge"), msg);
            ok = false;
            String::new()
        }
        None => bridge.to_owned(),
    };
    let mut ranged = |v: &Option<Spanned<u64>>, key: &str, lo: u64, hi: u64, what: &str| match v {
        Some(x) if (lo..=hi).contains(&x.value) => u16::try_from(x.value).ok(),
        Some(x) => {
            let msg = format!("{key} {} is outside {lo}..{hi} ({what})", x.value);
            at.err(cx, Code::OutOfRange, x.pos, field(key), msg);
            ok = false;
            None
        }
        None => None,
    };
    let vlan = ranged(&n.vlan, "vlan", 1, 4094, "an 802.1Q VLAN ID");
    let mtu = ranged(&n.mtu, "mtu", 576, 65520, "Proxmox's MTU range");
    let mac = match &n.mac {
        Some(m) => match mac_problem(&m.value) {
            None => Some(m.value.to_ascii_uppercase()),
            Some(problem) => {
                let msg = format!("mac {:?} {problem}", m.value);
                at.err(cx, Code::InvalidDevice, m.pos, field("mac"), msg);
                ok = false;
                None
            }
        },
        None => None,
    };
    ok.then(|| Network {
        bridge,
        vlan,
        mtu,
        mac,
        firewall: n.firewall.as_ref().is_some_and(|f| f.value),
    })
}

/// Why `mac` is not a MAC address a NIC can have: not six hex pairs joined
/// by ':', a multicast address (the first octet's low bit), or all zeros.
pub fn mac_problem(mac: &str) -> Option<&'static str> {
    let octets: Vec<&str> = mac.split(':').collect();
    if octets.len() != 6
        || octets
            .iter()
            .any(|o| o.len() != 2 || !o.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Some(
            "is not a MAC address: six hex pairs joined by ':', such as 02:00:00:00:00:01",
        );
    }
    let first = u8::from_str_radix(octets[0], 16).unwrap_or(0);
    if first & 1 == 1 {
        return Some("is a multicast address: a NIC needs a unicast one (even first octet)");
    }
    if octets.iter().all(|o| *o == "00") {
        return Some("is all zeros");
    }
    None
}

/// The MAC talosprov gives NIC `index` of `hostname` in `cluster` when the
/// topology names none: `02` (a locally administered unicast address, IEEE
/// 802) then the first five bytes of SHA-256 of `talosprov/<cluster>/<hostname>/net<index>`,
/// upper-case as Proxmox writes MACs. Stable for the node's life.
pub fn derived_mac(cluster: &str, hostname: &str, index: usize) -> String {
    let digest = Sha256::digest(format!("talosprov/{cluster}/{hostname}/net{index}"));
    let mut octets = vec!["02".to_owned()];
    octets.extend(digest.iter().take(5).map(|b| format!("{b:02X}")));
    octets.join(":")
}

/// A `disks` list: each entry checked, the storage defaulting to
/// `datastore`, indexes from 1 in order. `None` after a diagnostic.
pub(super) fn disks(
    cx: &mut Cx<'_>,
    list: &Spanned<Vec<Spanned<RawDisk>>>,
    at: Place<'_>,
    datastore: &str,
) -> Option<Vec<DataDisk>> {
    if list.value.len() > MAX_DATA_DISKS {
        let msg = format!(
            "{} data disks, over the {MAX_DATA_DISKS} (scsi1 to scsi30) a Proxmox VM has \
             beside its system disk",
            list.value.len()
        );
        at.err(cx, Code::InvalidDevice, list.pos, at.field.to_owned(), msg);
        return None;
    }
    let mut out: Vec<DataDisk> = Vec::new();
    let mut ok = true;
    for (i, d) in list.value.iter().enumerate() {
        let field = |key: &str| format!("{}[{i}].{key}", at.field);
        let index = u8::try_from(i + 1).unwrap_or(u8::MAX);
        match disk(cx, d, index, &field, at, datastore) {
            Some(disk) => {
                if let (Some(v), Some(m)) = (&disk.volume, &d.value.mount)
                    && out.iter().any(|o| o.volume.as_ref() == Some(v))
                {
                    let msg = format!("two disks are mounted at {USER_VOLUME_ROOT}{v}");
                    at.err(cx, Code::InvalidDevice, m.pos, field("mount"), msg);
                    ok = false;
                }
                out.push(disk);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn disk(
    cx: &mut Cx<'_>,
    d: &Spanned<RawDisk>,
    index: u8,
    field: &dyn Fn(&str) -> String,
    at: Place<'_>,
    datastore: &str,
) -> Option<DataDisk> {
    let r = &d.value;
    let mut ok = true;
    let size_gib = match &r.size {
        Some(s) if s.value >= 1 && u32::try_from(s.value).is_ok() => s.value as u32,
        Some(s) => {
            let msg = format!("size {} is outside 1..{} (GiB)", s.value, u32::MAX);
            at.err(cx, Code::OutOfRange, s.pos, field("size"), msg);
            ok = false;
            0
        }
        None => {
            let msg = "a data disk needs its size, in GiB".to_owned();
            at.err(cx, Code::MissingField, d.pos, field("size"), msg);
            ok = false;
            0
        }
    };
    let datastore = match &r.datastore {
        Some(s) if syntax::is_pve_storage_id(&s.value) => s.value.clone(),
        Some(s) => {
            let msg = format!(
                "datastore must be {}, found {:?}",
                syntax::STORAGE_ID_FORM,
                s.value
            );
            at.err(cx, Code::InvalidValue, s.pos, field("datastore"), msg);
            ok = false;
            String::new()
        }
        None => datastore.to_owned(),
    };
    let cache = match &r.cache {
        Some(c) if c.value == "none" => None,
        Some(c) if CACHE_MODES.contains(&c.value.as_str()) => Some(c.value.clone()),
        Some(c) => {
            let msg = format!(
                "cache must be one of {}, found {:?}",
                CACHE_MODES.join(", "),
                c.value
            );
            at.err(cx, Code::InvalidValue, c.pos, field("cache"), msg);
            ok = false;
            None
        }
        None => None,
    };
    let volume = match &r.mount {
        Some(m) => match volume_of(&m.value) {
            Ok(v) => Some(v),
            Err(problem) => {
                let msg = format!("mount {:?} {problem}", m.value);
                at.err(cx, Code::InvalidDevice, m.pos, field("mount"), msg);
                ok = false;
                None
            }
        },
        None => None,
    };
    let flag = |f: &Option<Spanned<bool>>| f.as_ref().is_none_or(|f| f.value);
    ok.then(|| DataDisk {
        index,
        size_gib,
        datastore,
        ssd: flag(&r.ssd),
        iothread: flag(&r.iothread),
        discard: flag(&r.discard),
        cache,
        volume,
    })
}

/// The Talos user volume name a `mount` path gives: `/var/mnt/<name>`,
/// `<name>` of ASCII letters, digits and '-', 1 to 34 characters (Talos
/// `UserVolumeConfigV1Alpha1.Validate`); otherwise why not.
pub fn volume_of(mount: &str) -> Result<String, String> {
    let Some(name) = mount
        .strip_prefix(USER_VOLUME_ROOT)
        .map(|n| n.trim_end_matches('/'))
    else {
        return Err(format!(
            "is not under {USER_VOLUME_ROOT}: Talos mounts a user volume at \
             {USER_VOLUME_ROOT}<name>"
        ));
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "must be {USER_VOLUME_ROOT}<name>, one folder deep (Talos mounts a user volume there)"
        ));
    }
    if name.len() > MAX_VOLUME_NAME || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(format!(
            "has the volume name {name:?}: Talos takes ASCII letters, digits and '-', at most \
             {MAX_VOLUME_NAME} characters"
        ));
    }
    Ok(name.to_owned())
}

/// Each node's NICs with their MACs: a MAC not given is derived (see
/// [`derived_mac`]). An empty list stays empty (the default NIC).
pub fn with_macs(networks: &[Network], cluster: &str, hostname: &str) -> Vec<Network> {
    networks
        .iter()
        .enumerate()
        .map(|(i, n)| Network {
            mac: Some(
                n.mac
                    .clone()
                    .unwrap_or_else(|| derived_mac(cluster, hostname, i)),
            ),
            ..n.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_macs_are_local_unicast_and_stable() {
        let a = derived_mac("lab", "lab-w1", 0);
        assert_eq!(a, derived_mac("lab", "lab-w1", 0));
        assert_ne!(a, derived_mac("lab", "lab-w1", 1));
        assert_ne!(a, derived_mac("lab", "lab-w2", 0));
        assert!(a.starts_with("02:"), "{a}");
        assert_eq!(mac_problem(&a), None);
        assert_eq!(a, a.to_ascii_uppercase());
    }

    #[test]
    fn macs_are_checked_as_unicast_hex_pairs() {
        assert_eq!(mac_problem("BC:24:11:00:00:01"), None);
        assert_eq!(mac_problem("bc:24:11:00:00:01"), None);
        for bad in [
            "bc:24:11:00:00",
            "bc-24-11-00-00-01",
            "zz:24:11:00:00:01",
            "bc:24:11:00:00:001",
        ] {
            assert!(
                mac_problem(bad).is_some_and(|p| p.contains("six hex pairs")),
                "{bad}"
            );
        }
        assert!(mac_problem("01:00:5E:00:00:01").is_some_and(|p| p.contains("multicast")));
        assert!(mac_problem("00:00:00:00:00:00").is_some_and(|p| p.contains("zeros")));
    }

    #[test]
    fn mounts_name_a_talos_user_volume() {
        assert_eq!(volume_of("/var/mnt/data").as_deref(), Ok("data"));
        assert_eq!(volume_of("/var/mnt/longhorn/").as_deref(), Ok("longhorn"));
        assert!(volume_of("/mnt/data").is_err_and(|e| e.contains("not under /var/mnt/")));
        assert!(volume_of("/var/mnt/a/b").is_err_and(|e| e.contains("one folder deep")));
        assert!(volume_of("/var/mnt/").is_err());
        assert!(volume_of("/var/mnt/da_ta").is_err_and(|e| e.contains("letters, digits")));
        assert!(volume_of(&format!("/var/mnt/{}", "a".repeat(35))).is_err());
        assert!(volume_of(&format!("/var/mnt/{}", "a".repeat(34))).is_ok());
    }
}
