//! The checking context the validation passes share: the file, the
//! diagnostics found so far and the checks every section uses (addresses,
//! versions, URLs, networks), plus path resolution against the file's folder.

use super::raw::Spanned;
use super::syntax::{Ipv4Net, Version};
use std::net::Ipv4Addr;
use std::path::{Component, Path, PathBuf};
use talosprov_base::diagnostics::{Code, Diagnostic, Pos};

/// " (declared: a, b)" or " (none is declared)", for reference errors.
pub(super) fn known<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        " (none is declared)".to_owned()
    } else {
        format!(" (declared: {})", names.join(", "))
    }
}

/// The checking context: the file and the diagnostics so far.
pub(super) struct Cx<'f> {
    pub(super) file: &'f Path,
    pub(super) diagnostics: Vec<Diagnostic>,
}

impl Cx<'_> {
    pub(super) fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    pub(super) fn error(&mut self, code: Code, pos: Pos, field: &str, message: String) {
        let d = Diagnostic::error(code, self.file, message)
            .at(pos)
            .field(field);
        self.push(d);
    }

    /// Report a missing required field of a section that starts at `pos`.
    pub(super) fn missing(
        &mut self,
        pos: Option<Pos>,
        node: Option<&str>,
        field: &str,
        hint: &str,
    ) {
        let mut d = Diagnostic::error(
            Code::MissingField,
            self.file,
            format!("`{field}` is required{hint}"),
        )
        .on_node(node)
        .field(field);
        d.pos = pos;
        self.push(d);
    }

    pub(super) fn ipv4(&mut self, s: &Spanned<String>, field: &str) -> Option<Ipv4Addr> {
        match s.value.parse::<Ipv4Addr>() {
            Ok(a) => Some(a),
            Err(_) => {
                let msg = format!(
                    "`{field}` must be an IPv4 address such as 192.168.1.10, found {:?}",
                    s.value
                );
                self.error(Code::InvalidIpv4, s.pos, field, msg);
                None
            }
        }
    }

    pub(super) fn version(&mut self, s: &Spanned<String>, field: &str) -> Option<Version> {
        let v = Version::parse(&s.value);
        if v.is_none() {
            let msg = format!(
                "`{field}` must be a version vMAJOR.MINOR.PATCH such as v1.13.8, found {:?}",
                s.value
            );
            self.error(Code::InvalidVersion, s.pos, field, msg);
        }
        v
    }

    /// An `http(s)://host[:port][/path]` URL, returned without a trailing `/`.
    pub(super) fn url(
        &mut self,
        s: &Spanned<String>,
        field: &str,
        https_only: bool,
    ) -> Option<String> {
        let parsed = url::Url::parse(&s.value).ok().filter(|u| u.has_host());
        let scheme_ok =
            |u: &url::Url| u.scheme() == "https" || (!https_only && u.scheme() == "http");
        match parsed {
            Some(u) if scheme_ok(&u) && u.query().is_none() && u.fragment().is_none() => {
                Some(s.value.trim_end_matches('/').to_owned())
            }
            _ => {
                let want = if https_only {
                    "an https:// URL"
                } else {
                    "an http:// or https:// URL"
                };
                let msg = format!(
                    "`{field}` must be {want} with a host and no query, found {:?}",
                    s.value
                );
                self.error(Code::InvalidUrl, s.pos, field, msg);
                None
            }
        }
    }

    /// Check that `addr` is a usable host address of `net`.
    pub(super) fn in_network(
        &mut self,
        net: Ipv4Net,
        addr: Ipv4Addr,
        pos: Pos,
        node: Option<&str>,
        field: &str,
    ) {
        let d = if !net.contains(addr) {
            Diagnostic::error(
                Code::OutsideNetwork,
                self.file,
                format!(
                    "{addr} is outside the cluster network {net} (from cluster.gateway and cluster.prefix_length)"
                ),
            )
        } else if addr == net.network || addr == net.broadcast() {
            let which = if addr == net.network {
                "network"
            } else {
                "broadcast"
            };
            Diagnostic::error(
                Code::ReservedAddress,
                self.file,
                format!("{addr} is the {which} address of {net}; use a host address"),
            )
        } else {
            return;
        };
        self.push(d.at(pos).on_node(node).field(field));
    }
}

/// `p` from the file against the file's folder `base`, with `.` and `name/..`
/// removed lexically (no file system access, so symlinks are not followed):
/// `examples/homelab` + `../../patches` is `patches`.
pub fn resolve(base: &Path, p: &str) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    let joined = base.join(p);
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other @ Component::Prefix(_)
            | other @ Component::RootDir
            | other @ Component::ParentDir
            | other @ Component::Normal(_) => out.push(other),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}
