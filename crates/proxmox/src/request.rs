//! Requests as plain values: method, path, query and form, plus the operation they
//! serve (named in errors). Built by pure functions in each resource file and
//! unit-tested apart from sending. Every form and query value is fully
//! percent-encoded: PVE splits pairs on `&` and `;` and keeps only the text between
//! the first and second raw `=` (pve-http-server `decode_urlencoded`).

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::fmt;

/// Everything but `A-Z a-z 0-9 - . _ ~` is encoded (RFC 3986 unreserved are kept).
const ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET: parameters in the query string.
    Get,
    /// POST: parameters in a form body.
    Post,
    /// PUT: parameters in a form body.
    Put,
    /// DELETE: parameters in the query string (PVE reads none from the body).
    Delete,
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        })
    }
}

/// What a request (or a task) is for, as errors name it: an action, and the
/// Proxmox node and vmid it concerns when there are ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The action in operator words, e.g. "create VM", "download image".
    pub action: String,
    /// The Proxmox node, when the request is for one.
    pub node: Option<String>,
    /// The vmid, when the request is for one VM.
    pub vmid: Option<u32>,
}

impl Operation {
    /// An operation with no node or vmid yet.
    pub fn new(action: impl Into<String>) -> Self {
        Operation {
            action: action.into(),
            node: None,
            vmid: None,
        }
    }

    /// The same, on this Proxmox node.
    #[must_use]
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// The same, for this vmid.
    #[must_use]
    pub fn vmid(mut self, vmid: u32) -> Self {
        self.vmid = Some(vmid);
        self
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.action)?;
        match (&self.node, self.vmid) {
            (Some(n), Some(v)) => write!(f, " (node {n}, vmid {v})"),
            (Some(n), None) => write!(f, " (node {n})"),
            (None, Some(v)) => write!(f, " (vmid {v})"),
            (None, None) => Ok(()),
        }
    }
}

/// One API request, not yet sent: `path` is below `/api2/json`, already encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method.
    pub method: Method,
    /// The encoded path below `/api2/json`, starting with `/`.
    pub path: String,
    /// Query parameters, in order (unencoded).
    pub query: Vec<(String, String)>,
    /// Form parameters, in order (unencoded); a key may repeat for array parameters.
    pub form: Vec<(String, String)>,
    /// What the request is for.
    pub op: Operation,
}

impl Request {
    /// A request with this method for the path made of `segments` (each percent-encoded).
    pub fn new(method: Method, segments: &[&str], op: Operation) -> Self {
        Request {
            method,
            path: path(segments),
            query: Vec::new(),
            form: Vec::new(),
            op,
        }
    }

    /// A GET request.
    pub fn get(segments: &[&str], op: Operation) -> Self {
        Self::new(Method::Get, segments, op)
    }

    /// A POST request.
    pub fn post(segments: &[&str], op: Operation) -> Self {
        Self::new(Method::Post, segments, op)
    }

    /// A PUT request.
    pub fn put(segments: &[&str], op: Operation) -> Self {
        Self::new(Method::Put, segments, op)
    }

    /// A DELETE request.
    pub fn delete(segments: &[&str], op: Operation) -> Self {
        Self::new(Method::Delete, segments, op)
    }

    /// Add a query parameter.
    #[must_use]
    pub fn query(mut self, key: &str, value: impl ToString) -> Self {
        self.query.push((key.to_string(), value.to_string()));
        self
    }

    /// Add a form parameter (repeat a key to send an array, as PVE reads `map`).
    #[must_use]
    pub fn form(mut self, key: &str, value: impl ToString) -> Self {
        self.form.push((key.to_string(), value.to_string()));
        self
    }

    /// The path and encoded query string, e.g. `/pools?poolid=talos`.
    pub fn path_and_query(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, encode_pairs(&self.query))
        }
    }

    /// The `application/x-www-form-urlencoded` body, when there is one.
    pub fn body(&self) -> Option<String> {
        (!self.form.is_empty()).then(|| encode_pairs(&self.form))
    }

    /// The value of the first form parameter named `key`.
    pub fn form_value(&self, key: &str) -> Option<&str> {
        self.form
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A path from segments, each percent-encoded (`local:import/x.qcow2` becomes
/// `local%3Aimport%2Fx.qcow2`), starting with `/`.
pub fn path(segments: &[&str]) -> String {
    segments
        .iter()
        .map(|s| format!("/{}", utf8_percent_encode(s, ENCODE)))
        .collect()
}

/// `k=v&k=v` with every key and value fully percent-encoded.
pub fn encode_pairs(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, ENCODE),
                utf8_percent_encode(v, ENCODE)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_fully_percent_encoded() {
        let r = Request::post(&["nodes", "pve1", "qemu"], Operation::new("create VM"))
            .form("ipconfig0", "ip=192.168.1.121/24,gw=192.168.1.1")
            .form("tags", "talos;controlplane")
            .form("nameserver", "1.1.1.1 8.8.8.8");
        assert_eq!(
            r.body().as_deref(),
            Some(
                "ipconfig0=ip%3D192.168.1.121%2F24%2Cgw%3D192.168.1.1&tags=talos%3Bcontrolplane&nameserver=1.1.1.1%208.8.8.8"
            )
        );
    }

    #[test]
    fn repeated_keys_stay_repeated_for_arrays() {
        let r = Request::post(&["cluster", "mapping", "pci"], Operation::new("m"))
            .form("map", "node=a,path=0000:01:00")
            .form("map", "node=b,path=0000:02:00");
        let body = r.body().expect("has a body");
        assert_eq!(body.matches("map=").count(), 2);
        assert!(body.contains("node%3Da%2Cpath%3D0000%3A01%3A00"));
    }

    #[test]
    fn path_segments_are_encoded_one_by_one() {
        let r = Request::delete(
            &[
                "nodes",
                "pve1",
                "storage",
                "local",
                "content",
                "local:import/talos.qcow2",
            ],
            Operation::new("delete image"),
        );
        assert_eq!(
            r.path,
            "/nodes/pve1/storage/local/content/local%3Aimport%2Ftalos.qcow2"
        );
        assert_eq!(r.body(), None);
    }

    #[test]
    fn query_goes_after_the_path() {
        let r = Request::delete(
            &["nodes", "pve1", "qemu", "121"],
            Operation::new("delete VM"),
        )
        .query("purge", 1)
        .query("destroy-unreferenced-disks", 1);
        assert_eq!(
            r.path_and_query(),
            "/nodes/pve1/qemu/121?purge=1&destroy-unreferenced-disks=1"
        );
    }

    #[test]
    fn operation_names_node_and_vmid() {
        let op = Operation::new("start VM").node("pve2").vmid(122);
        assert_eq!(op.to_string(), "start VM (node pve2, vmid 122)");
        assert_eq!(Operation::new("read version").to_string(), "read version");
    }
}
