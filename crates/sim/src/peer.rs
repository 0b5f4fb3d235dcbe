//! Who is calling, as the handlers see it: the API the connection is served
//! in (maintenance or secure) and the caller's Talos roles from its client
//! certificate.

use talosprov_talos::roles::Role;

/// Which API the node serves on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServeMode {
    Maintenance,
    Secure,
}

/// What the handlers know about the caller.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub mode: ServeMode,
    pub roles: Vec<Role>,
}
