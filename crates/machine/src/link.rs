//! Whether a node keeps its address. A talosprov node gets its address and default route from
//! Proxmox cloud-init on its one link; a machine-config entry that configures that link takes
//! it over, and Talos then drops what cloud-init gave it (siderolabs/talos#11887). So every
//! entry that takes the node's link over must carry the address and the default route itself.
//! Pure: the node's link facts are passed in.

use serde_yaml_ng::Value;
use std::net::Ipv4Addr;

use super::validate::{ConfigProblem, ProblemKind, Severity};
use talosprov_patch::document::{identify, scalar_text};

/// The link of a Proxmox VM booted from the nocloud image: talosprov gives each VM one virtio
/// NIC (`net0`), and Talos's nocloud platform boots with `net.ifnames=0`
/// (`platform/nocloud/nocloud.go`, `KernelArgs`), so the link is `eth0`.
pub const NOCLOUD_LINK: &str = "eth0";

/// The kernel driver of that link (a virtio NIC), as a `deviceSelector.driver` would match it.
pub const NOCLOUD_DRIVER: &str = "virtio_net";

/// What a node's link is and what cloud-init puts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLink {
    /// The link's name on the node ([`NOCLOUD_LINK`]).
    pub link: String,
    /// The link's kernel driver ([`NOCLOUD_DRIVER`]).
    pub driver: String,
    /// The node's address (Proxmox `ipconfig0` `ip=`).
    pub address: Ipv4Addr,
    /// Its prefix length, in bits.
    pub prefix_length: u8,
    /// The default gateway (`ipconfig0` `gw=`).
    pub gateway: Ipv4Addr,
    /// The link's MAC address, lower-case, when the topology gives the node's NICs (`net0`'s);
    /// every other NIC's MAC is then another link. `None`: the MAC Proxmox picked, unknown
    /// offline.
    pub mac: Option<String>,
}

impl NodeLink {
    /// A talosprov VM's link: [`NOCLOUD_LINK`] with [`NOCLOUD_DRIVER`].
    pub fn nocloud(address: Ipv4Addr, prefix_length: u8, gateway: Ipv4Addr) -> Self {
        NodeLink {
            link: NOCLOUD_LINK.into(),
            driver: NOCLOUD_DRIVER.into(),
            address,
            prefix_length,
            gateway,
            mac: None,
        }
    }

    /// The same link with its MAC known (`net0`'s, given or derived).
    pub fn with_mac(self, mac: Option<&str>) -> Self {
        NodeLink {
            mac: mac.map(str::to_ascii_lowercase),
            ..self
        }
    }

    /// Whether a MAC pattern (a `hardwareAddr` glob) is the link's, when its MAC is known.
    fn mac_is(&self, pattern: &str) -> Option<bool> {
        self.mac
            .as_deref()
            .map(|mac| glob(&pattern.to_ascii_lowercase(), mac))
    }

    fn cidr(&self) -> String {
        format!("{}/{}", self.address, self.prefix_length)
    }
}

/// Whether an entry configures the node's link.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Takes {
    /// It does (the reason, for the message).
    Yes(String),
    /// It does not.
    No,
    /// It may: a selector field talosprov cannot evaluate offline (a MAC address, a bus path).
    Maybe(String),
}

/// Check every network entry of a config against the node's link:
/// - a v1alpha1 `machine.network.interfaces[]` entry that takes the link over (by `interface`,
///   by a `deviceSelector` that matches it, or as a bond or bridge enslaving it), or a
///   `LinkConfig` (`BondConfig`, `BridgeConfig`, `VRFConfig` enslaving it) for it, without the
///   node's address, or without a default route (unless it runs DHCP), is an error
///   ([`ProblemKind::AddressLost`]);
/// - an `interface:`, `LinkConfig` name, VIP `link` or VLAN `parent` that names no link of the
///   node (nor a bond, bridge, VLAN, dummy or alias the config defines), and a selector that
///   cannot be matched offline, are warnings ([`ProblemKind::OtherLink`]).
///
/// A `Layer2VIPConfig` (or `HCloudVIPConfig`) only adds the VIP to the link: it does not take
/// the link over, so it needs no address.
pub fn check_node_link(documents: &[Value], node: &NodeLink) -> Vec<ConfigProblem> {
    let mut c = LinkCheck {
        node,
        logical: Vec::new(),
        aliases: Vec::new(),
        alias_macs: Vec::new(),
        problems: Vec::new(),
    };
    c.collect_names(documents);
    for (i, doc) in documents.iter().enumerate() {
        let Some(map) = doc.as_mapping() else {
            continue;
        };
        let Ok(id) = identify(map, i + 1) else {
            continue;
        };
        if id.is_v1alpha1() {
            c.v1alpha1(doc);
        } else if id.api_version == "v1alpha1" {
            let name = [
                id.api_version.as_str(),
                id.kind.as_str(),
                id.name.as_deref().unwrap_or(""),
            ]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("/");
            c.typed(&name, &id.kind, doc);
        }
    }
    cap_other_links(c.problems)
}

/// The most [`ProblemKind::OtherLink`] warnings listed one by one for a config: each is
/// located in its patch file, and a patch of thousands of interfaces needs no more; the rest
/// are counted in one warning at the first of them.
pub const MAX_LINK_WARNINGS: usize = 100;

/// `problems` with the [`ProblemKind::OtherLink`] warnings past [`MAX_LINK_WARNINGS`] counted
/// in one warning, at the first left out.
fn cap_other_links(problems: Vec<ConfigProblem>) -> Vec<ConfigProblem> {
    let mut out = Vec::with_capacity(problems.len().min(2 * MAX_LINK_WARNINGS));
    let (mut listed, mut more) = (0usize, 0usize);
    let mut first_left_out = None;
    for p in problems {
        if p.kind == ProblemKind::OtherLink {
            if listed >= MAX_LINK_WARNINGS {
                more += 1;
                first_left_out.get_or_insert(p);
                continue;
            }
            listed += 1;
        }
        out.push(p);
    }
    if let Some(first) = first_left_out {
        out.push(ConfigProblem {
            message: format!(
                "{more} more network entr{} name links that are not this node's, from here on \
                 (only the first {MAX_LINK_WARNINGS} are listed one by one); the first: {}",
                if more == 1 { "y" } else { "ies" },
                first.message
            ),
            ..first
        });
    }
    out
}

struct LinkCheck<'a> {
    node: &'a NodeLink,
    /// Names of links the config itself creates (bonds, bridges, VLANs, dummies, ...).
    logical: Vec<String>,
    /// Names given by `LinkAliasConfig` documents (their selectors are CEL expressions).
    aliases: Vec<String>,
    /// Aliases whose selector is `mac(link.permanent_addr) == "<mac>"`, with that MAC.
    alias_macs: Vec<(String, String)>,
    problems: Vec<ConfigProblem>,
}

/// The MAC of a link selector `mac(link.permanent_addr) == "<mac>"` (or `link.hardware_addr`),
/// lower-cased; `None` for any other expression.
fn mac_selector(expr: &str) -> Option<String> {
    let rest = expr
        .trim()
        .strip_prefix("mac(link.permanent_addr)")
        .or_else(|| expr.trim().strip_prefix("mac(link.hardware_addr)"))?;
    let quoted = rest.trim().strip_prefix("==")?.trim();
    let mac = quoted.strip_prefix('"')?.strip_suffix('"')?;
    (!mac.contains(['"', '*'])).then(|| mac.to_ascii_lowercase())
}

fn text(v: Option<&Value>) -> String {
    v.and_then(scalar_text).unwrap_or_default()
}

fn field<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.as_mapping()?.get(key).filter(|v| !v.is_null())
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_sequence).map_or(&[], Vec::as_slice)
}

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

/// Go's glob (`ryanuber/go-glob`, which Talos's selectors use): `*` matches any run.
fn glob(pattern: &str, value: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == value;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !value.starts_with(first) || value.len() < first.len() + last.len() || !value.ends_with(last)
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

impl LinkCheck<'_> {
    fn push(&mut self, kind: ProblemKind, document: &str, field: &str, message: String) {
        let severity = match kind {
            ProblemKind::AddressLost => Severity::Error,
            ProblemKind::Validation
            | ProblemKind::UnknownKey
            | ProblemKind::WrongType
            | ProblemKind::OtherLink => Severity::Warning,
        };
        self.problems.push(ConfigProblem {
            severity,
            kind,
            document: document.to_string(),
            field: field.to_string(),
            message,
        });
    }

    /// The names of links the config creates, and of aliases, wherever they are defined.
    fn collect_names(&mut self, documents: &[Value]) {
        for (i, doc) in documents.iter().enumerate() {
            let Some(map) = doc.as_mapping() else {
                continue;
            };
            let Ok(id) = identify(map, i + 1) else {
                continue;
            };
            if id.is_v1alpha1() {
                let interfaces = field(doc, "machine")
                    .and_then(|m| field(m, "network"))
                    .and_then(|n| field(n, "interfaces"));
                for entry in items(interfaces) {
                    let logical = ["bond", "bridge", "wireguard"]
                        .iter()
                        .any(|k| field(entry, k).is_some())
                        || is_true(field(entry, "dummy"));
                    let name = text(field(entry, "interface"));
                    if logical && !name.is_empty() {
                        self.logical.push(name);
                    }
                }
                continue;
            }
            let name = text(field(doc, "name"));
            match id.kind.as_str() {
                "BondConfig" | "BridgeConfig" | "VLANConfig" | "DummyLinkConfig"
                | "WireguardConfig" | "VRFConfig" => self.logical.push(name),
                "LinkAliasConfig" => {
                    let selector = field(doc, "selector").and_then(|s| field(s, "match"));
                    if let Some(mac) = mac_selector(&text(selector)) {
                        self.alias_macs.push((name.clone(), mac));
                    }
                    self.aliases.push(name);
                }
                _ => {}
            }
        }
    }

    /// Whether the alias `name` is the node's link, when both its selector's MAC and the node's
    /// are known.
    fn alias_is_node_link(&self, name: &str) -> Option<bool> {
        let mac = self.node.mac.as_deref()?;
        self.alias_macs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, m)| m == mac)
    }

    /// Whether a name is a link the node has or the config creates (so not a typo).
    fn known_name(&self, name: &str) -> bool {
        name == self.node.link || name == "lo" || self.logical.iter().any(|l| l == name)
    }

    /// Whether a v1alpha1 `deviceSelector` selects the node's link (Talos
    /// `network/device_config.go` `selectDevices`: every field set must match).
    fn selector(&self, sel: &Value) -> Takes {
        let mut unknown = Vec::new();
        for key in [
            "hardwareAddr",
            "permanentAddr",
            "pciID",
            "driver",
            "busPath",
        ] {
            let want = text(field(sel, key));
            if want.is_empty() {
                continue;
            }
            if key == "driver" {
                if !glob(&want, &self.node.driver) {
                    return Takes::No;
                }
            } else if matches!(key, "hardwareAddr" | "permanentAddr")
                && let Some(is) = self.node.mac_is(&want)
            {
                if !is {
                    return Takes::No;
                }
            } else {
                unknown.push(format!("{key}: {want}"));
            }
        }
        if let Some(physical) = field(sel, "physical").and_then(Value::as_bool)
            && !physical
        {
            // A VM's virtio NIC is a physical link to Talos.
            return Takes::No;
        }
        let shown = ["physical", "driver"]
            .iter()
            .filter_map(|k| {
                field(sel, k)
                    .and_then(scalar_text)
                    .map(|v| format!("{k}: {v}"))
            })
            .chain(unknown.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ");
        if unknown.is_empty() {
            Takes::Yes(format!(
                "this entry's deviceSelector ({shown}) selects {}",
                self.node.link
            ))
        } else {
            Takes::Maybe(format!("this entry's deviceSelector ({shown})"))
        }
    }

    /// Whether a v1alpha1 interface entry configures the node's link.
    fn entry_takes(&self, entry: &Value) -> Takes {
        let link = &self.node.link;
        let name = text(field(entry, "interface"));
        if !name.is_empty() && name == *link {
            return Takes::Yes(format!("this entry configures {link}"));
        }
        if let Some(bond) = field(entry, "bond") {
            if items(field(bond, "interfaces"))
                .iter()
                .any(|i| text(Some(i)) == *link)
            {
                return Takes::Yes(format!("this entry's bond {name} enslaves {link}"));
            }
            let mut maybe = None;
            for sel in items(field(bond, "deviceSelectors")) {
                match self.selector(sel) {
                    Takes::Yes(_) => {
                        return Takes::Yes(format!("this entry's bond {name} enslaves {link}"));
                    }
                    Takes::Maybe(why) => {
                        let what = why.trim_start_matches("this entry's ");
                        maybe = Some(Takes::Maybe(format!("this entry's bond {name} ({what})")));
                    }
                    Takes::No => {}
                }
            }
            return maybe.unwrap_or(Takes::No);
        }
        if let Some(bridge) = field(entry, "bridge") {
            if items(field(bridge, "interfaces"))
                .iter()
                .any(|i| text(Some(i)) == *link)
            {
                return Takes::Yes(format!("this entry's bridge {name} enslaves {link}"));
            }
            return Takes::No;
        }
        if name.is_empty()
            && let Some(sel) = field(entry, "deviceSelector")
        {
            return self.selector(sel);
        }
        Takes::No
    }

    fn v1alpha1(&mut self, doc: &Value) {
        let interfaces = field(doc, "machine")
            .and_then(|m| field(m, "network"))
            .and_then(|n| field(n, "interfaces"));
        for (i, entry) in items(interfaces).iter().enumerate() {
            let path = format!("machine.network.interfaces[{i}]");
            let name = text(field(entry, "interface"));
            let logical = ["bond", "bridge", "wireguard"]
                .iter()
                .any(|k| field(entry, k).is_some())
                || is_true(field(entry, "dummy"));
            if !name.is_empty() && !logical && !self.known_name(&name) {
                let message = format!(
                    "interface {name} is not this node's link: a Proxmox VM booted from the \
                     nocloud image has one link, {link} (Talos's nocloud platform boots with \
                     net.ifnames=0), so Talos finds no {name} and this entry does nothing",
                    link = self.node.link
                );
                self.push(
                    ProblemKind::OtherLink,
                    "v1alpha1",
                    &format!("{path}.interface"),
                    message,
                );
                continue;
            }
            let takes = self.entry_takes(entry);
            let missing = self.missing_v1alpha1(entry);
            if missing.is_empty() {
                continue;
            }
            match takes {
                Takes::No => {}
                Takes::Yes(why) => {
                    let message = self.lost_message(&why, &missing, true);
                    self.push(ProblemKind::AddressLost, "v1alpha1", &path, message);
                }
                Takes::Maybe(what) => {
                    let message = format!(
                        "talosprov cannot tell offline whether {what} selects {link}, the node's \
                         link; if it does, {}",
                        self.lost_message("", &missing, true),
                        link = self.node.link
                    );
                    self.push(ProblemKind::OtherLink, "v1alpha1", &path, message);
                }
            }
        }
    }

    /// What a v1alpha1 entry lacks of what cloud-init gave the link.
    fn missing_v1alpha1(&self, entry: &Value) -> Vec<Missing> {
        let mut out = Vec::new();
        let address = self.node.address.to_string();
        let has_address = items(field(entry, "addresses"))
            .iter()
            .chain(field(entry, "cidr"))
            .any(|a| text(Some(a)).split('/').next() == Some(address.as_str()));
        let dhcp = is_true(field(entry, "dhcp"));
        if !has_address {
            out.push(Missing::Address { dhcp });
        }
        let has_route = items(field(entry, "routes")).iter().any(|r| {
            matches!(text(field(r, "network")).as_str(), "" | "0.0.0.0/0")
                && !text(field(r, "gateway")).is_empty()
        });
        if !has_route && !dhcp {
            out.push(Missing::Route);
        }
        out
    }

    /// What a multi-document link config lacks of what cloud-init gave the link.
    fn missing_typed(&self, doc: &Value) -> Vec<Missing> {
        let mut out = Vec::new();
        let address = self.node.address.to_string();
        let has_address = items(field(doc, "addresses"))
            .iter()
            .any(|a| text(field(a, "address")).split('/').next() == Some(address.as_str()));
        if !has_address {
            out.push(Missing::Address { dhcp: false });
        }
        let has_route = items(field(doc, "routes")).iter().any(|r| {
            matches!(text(field(r, "destination")).as_str(), "" | "0.0.0.0/0")
                && !text(field(r, "gateway")).is_empty()
        });
        if !has_route {
            out.push(Missing::Route);
        }
        out
    }

    /// "…: the node would lose 10.0.0.5/24 and its default route via 10.0.0.1; add …".
    fn lost_message(&self, lead: &str, missing: &[Missing], v1alpha1: bool) -> String {
        let cidr = self.node.cidr();
        let gw = self.node.gateway;
        let mut lose = Vec::new();
        let mut add = Vec::new();
        for m in missing {
            match m {
                Missing::Address { dhcp } => {
                    let note = if *dhcp {
                        " (DHCP may lease it another address)"
                    } else {
                        ""
                    };
                    lose.push(format!("its address {cidr}{note}"));
                    add.push(if v1alpha1 {
                        format!("`addresses: [{cidr}]`")
                    } else {
                        format!("`addresses: [{{address: {cidr}}}]`")
                    });
                }
                Missing::Route => {
                    lose.push(format!("its default route via {gw}"));
                    add.push(if v1alpha1 {
                        format!("`routes: [{{network: 0.0.0.0/0, gateway: {gw}}}]`")
                    } else {
                        format!("`routes: [{{gateway: {gw}}}]`")
                    });
                }
            }
        }
        let body = format!(
            "Talos takes the link over from cloud-init and drops what cloud-init gave it: the \
             node would lose {}; add {} to {}",
            lose.join(" and "),
            add.join(" and "),
            if v1alpha1 {
                "this entry"
            } else {
                "this document"
            }
        );
        if lead.is_empty() {
            body
        } else {
            format!("{lead}, the node's link, so {body}")
        }
    }

    fn typed(&mut self, document: &str, kind: &str, doc: &Value) {
        let link = self.node.link.clone();
        let name = text(field(doc, "name"));
        match kind {
            "LinkConfig" => {
                let missing = self.missing_typed(doc);
                if name == link {
                    if !missing.is_empty() {
                        let lead = format!("LinkConfig {name} configures {link}");
                        let mut message = self.lost_message(&lead, &missing, false);
                        message.push_str(" (a Layer2VIPConfig alone needs neither)");
                        self.push(ProblemKind::AddressLost, document, "", message);
                    }
                } else if let Some(is) = self.alias_is_node_link(&name) {
                    if is && !missing.is_empty() {
                        let lead = format!(
                            "LinkConfig {name} configures {link} (its alias selects the node's \
                             MAC)"
                        );
                        let message = self.lost_message(&lead, &missing, false);
                        self.push(ProblemKind::AddressLost, document, "", message);
                    }
                } else if self.aliases.contains(&name) {
                    if !missing.is_empty() {
                        let message = format!(
                            "talosprov cannot tell offline whether the alias {name} \
                             (LinkAliasConfig) selects {link}, the node's link; if it does, {}",
                            self.lost_message("", &missing, false)
                        );
                        self.push(ProblemKind::OtherLink, document, "", message);
                    }
                } else if !self.known_name(&name) {
                    self.other_name(document, "name", &name, "LinkConfig");
                }
            }
            "BondConfig" | "BridgeConfig" | "VRFConfig" => {
                let enslaves = items(field(doc, "links"))
                    .iter()
                    .any(|l| text(Some(l)) == link);
                let missing = self.missing_typed(doc);
                if enslaves && !missing.is_empty() {
                    let lead = format!("{kind} {name} enslaves {link}");
                    let message = self.lost_message(&lead, &missing, false);
                    self.push(ProblemKind::AddressLost, document, "", message);
                }
            }
            "Layer2VIPConfig" | "HCloudVIPConfig" => {
                let on = text(field(doc, "link"));
                if !on.is_empty() && !self.known_name(&on) && !self.aliases.contains(&on) {
                    self.other_name(document, "link", &on, "the VIP's link");
                }
            }
            "VLANConfig" => {
                let parent = text(field(doc, "parent"));
                if !parent.is_empty()
                    && !self.known_name(&parent)
                    && !self.aliases.contains(&parent)
                {
                    self.other_name(document, "parent", &parent, "the VLAN's parent");
                }
            }
            _ => {}
        }
    }

    fn other_name(&mut self, document: &str, key: &str, name: &str, what: &str) {
        let message = format!(
            "{what} {name} is not this node's link: a Proxmox VM booted from the nocloud image \
             has one link, {link} (Talos's nocloud platform boots with net.ifnames=0), and the \
             config defines no link {name}",
            link = self.node.link
        );
        self.push(ProblemKind::OtherLink, document, key, message);
    }
}

/// Something cloud-init gave the link that an entry does not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    Address { dhcp: bool },
    Route,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeLink {
        NodeLink::nocloud(
            Ipv4Addr::new(192, 168, 1, 121),
            24,
            Ipv4Addr::new(192, 168, 1, 1),
        )
    }

    fn check(yaml: &str) -> Vec<(ProblemKind, String, String)> {
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        check_node_link(&docs, &node())
            .into_iter()
            .map(|p| (p.kind, p.field, p.message))
            .collect()
    }

    #[test]
    fn thousands_of_other_links_give_the_first_hundred_and_a_count() {
        let mut yaml = String::from("machine:\n  network:\n    interfaces:\n");
        for i in 0..10_000 {
            yaml.push_str(&format!("      - interface: ens{i}\n        mtu: 1500\n"));
        }
        let found = check(&yaml);
        assert_eq!(found.len(), MAX_LINK_WARNINGS + 1, "{:#?}", &found[..2]);
        assert!(found.iter().all(|p| p.0 == ProblemKind::OtherLink));
        let (_, field, message) = &found[MAX_LINK_WARNINGS];
        assert_eq!(field, "machine.network.interfaces[100].interface");
        assert!(
            message.starts_with("9900 more network entries name links that are not this node's"),
            "{message}"
        );
        assert!(message.contains("no ens100 "), "{message}");
    }

    #[test]
    fn an_entry_with_only_a_vip_loses_the_address_and_route() {
        let found = check(
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip:\n          ip: 192.168.1.10\n",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].0, ProblemKind::AddressLost);
        assert_eq!(found[0].1, "machine.network.interfaces[0]");
        assert!(
            found[0].2.contains(
                "lose its address 192.168.1.121/24 and its default route via 192.168.1.1"
            ),
            "{}",
            found[0].2
        );
    }

    #[test]
    fn an_entry_that_keeps_the_address_and_route_is_fine() {
        let ok = "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          physical: true\n        addresses: [192.168.1.121/24]\n        routes:\n          - network: 0.0.0.0/0\n            gateway: 192.168.1.1\n        vip:\n          ip: 192.168.1.10\n";
        assert_eq!(check(ok), vec![]);
    }

    #[test]
    fn selectors_match_the_virtio_link_offline_where_they_can() {
        let lost = |sel: &str| {
            check(&format!("machine:\n  network:\n    interfaces:\n      - deviceSelector: {sel}\n        mtu: 9000\n"))
                .into_iter()
                .map(|(k, _, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(lost("{physical: true}"), [ProblemKind::AddressLost]);
        assert_eq!(lost("{driver: virtio*}"), [ProblemKind::AddressLost]);
        assert_eq!(lost("{driver: mlx5_core}"), []);
        assert_eq!(lost("{physical: false}"), []);
        assert_eq!(
            lost("{hardwareAddr: 'bc:24:11:*'}"),
            [ProblemKind::OtherLink]
        );
    }

    #[test]
    fn another_interface_name_is_a_warning() {
        let found = check(
            "machine:\n  network:\n    interfaces:\n      - interface: ens18\n        vip:\n          ip: 192.168.1.10\n      - interface: bond0\n        bond:\n          interfaces: [eth0]\n        addresses: [192.168.1.121/24]\n        routes: [{network: 0.0.0.0/0, gateway: 192.168.1.1}]\n",
        );
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            (found[0].0, found[0].1.as_str()),
            (
                ProblemKind::OtherLink,
                "machine.network.interfaces[0].interface"
            )
        );
        assert!(
            found[0]
                .2
                .contains("interface ens18 is not this node's link"),
            "{}",
            found[0].2
        );
    }

    #[test]
    fn multi_document_vips_need_no_address_but_a_link_config_does() {
        let vip = "apiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 192.168.1.10\nlink: eth0\n";
        assert_eq!(check(vip), vec![]);
        let link = "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nmtu: 9000\n";
        let found = check(link);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].0, ProblemKind::AddressLost);
        let kept = "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\naddresses:\n  - address: 192.168.1.121/24\nroutes:\n  - gateway: 192.168.1.1\n";
        assert_eq!(check(kept), vec![]);
        let elsewhere =
            "apiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: 192.168.1.10\nlink: ens18\n";
        assert_eq!(check(elsewhere)[0].0, ProblemKind::OtherLink);
    }

    #[test]
    fn go_glob_matches_stars_anywhere() {
        assert!(glob("virtio*", "virtio_net"));
        assert!(glob("*net", "virtio_net"));
        assert!(glob("v*o*t", "virtio_net"));
        assert!(!glob("e1000*", "virtio_net"));
        assert!(glob("virtio_net", "virtio_net"));
    }
}
