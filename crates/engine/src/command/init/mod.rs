//! `init DIR`: a new cluster folder that `validate` accepts, made from a few
//! settings: the topology (commented, section by section), the reference
//! patch tree with each GPU node's folder named after its generated hostname, a
//! `.gitignore` for what talosprov writes beside the topology, and optionally
//! the GitLab pipeline. Nothing is ever overwritten: when any of the files
//! exists, nothing is written at all.

use std::path::PathBuf;

use super::CommandError;
use request::InitRequest;

mod files;
pub mod request;
mod scaffold;
mod topology;

/// What `init` wrote.
#[derive(Debug, Clone)]
pub struct Initialized {
    /// The files, relative to the folder, in the order they were written.
    pub files: Vec<PathBuf>,
    /// The cluster's name.
    pub cluster: String,
    /// The topology holds PCI mappings with placeholders to fill in.
    pub placeholders: bool,
    /// The topology names the Proxmox endpoint (else `PROXMOX_VE_ENDPOINT`
    /// must give it).
    pub endpoint: bool,
}

/// Run `init`: work out the cluster, refuse if any of its files exists, and
/// write them.
///
/// # Errors
/// Settings that contradict each other, an existing file (nothing is written
/// then), or a file that cannot be written.
pub fn init(request: &InitRequest) -> Result<Initialized, CommandError> {
    let scaffold = scaffold::Scaffold::from_request(request)?;
    scaffold.check_network()?;
    let files = files::files(&scaffold, &request.dir);
    files::write_all(&request.dir, &files)?;
    Ok(Initialized {
        files: files.into_iter().map(|(p, _)| p).collect(),
        placeholders: !scaffold.mappings().is_empty(),
        endpoint: scaffold.endpoint.is_some(),
        cluster: scaffold.name,
    })
}
