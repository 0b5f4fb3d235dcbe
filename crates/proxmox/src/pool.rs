//! Resource pools: ensure one exists ("already exists" counts as success), and read
//! its members (pve-manager `API2/Pool.pm`; `/pools?poolid=` since PVE 8.1).

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::lenient;
use crate::request::{Operation, Request};
use serde::Deserialize;

/// Whether [`ensure_pool`] created the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOutcome {
    /// It was there.
    Present,
    /// It was created.
    Created,
}

/// A pool member as `GET /pools?poolid=` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PoolMember {
    /// `qemu/121`, `storage/pve1/local`, ...
    pub id: String,
    /// `qemu`, `lxc` or `storage`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The guest's numeric VM ID; absent for a storage.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub vmid: Option<u64>,
    /// The Proxmox host the guest or storage is on; absent for a
    /// cluster-wide storage.
    #[serde(default)]
    pub node: Option<String>,
}

#[derive(Deserialize)]
struct PoolEntry {
    #[serde(default)]
    members: Vec<PoolMember>,
    #[serde(default)]
    comment: Option<String>,
}

/// A pool as `GET /pools` lists it, or `GET /pools?poolid=` reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PoolInfo {
    /// The pool name.
    pub poolid: String,
    /// The comment; absent when none was set.
    #[serde(default)]
    pub comment: Option<String>,
    /// The members (guests and storages); empty in the list, which does not
    /// give them.
    #[serde(default)]
    pub members: Vec<PoolMember>,
}

/// `GET /pools` request: every pool the caller may see (`Pool.Audit`).
pub fn list_request() -> Request {
    Request::get(&["pools"], Operation::new("list the pools"))
}

/// Every pool the token may see, with its comment, in one request.
///
/// # Errors
/// Request errors.
pub async fn list(client: &Client) -> Result<Vec<PoolInfo>, ProxmoxError> {
    client.send_as::<Vec<PoolInfo>>(&list_request()).await
}

/// The pool with its comment and members, or `None` when it does not exist.
///
/// # Errors
/// Request errors other than not-found.
pub async fn read(client: &Client, pool: &str) -> Result<Option<PoolInfo>, ProxmoxError> {
    match client.send_as::<Vec<PoolEntry>>(&read_request(pool)).await {
        Ok(entries) => Ok(entries.into_iter().next().map(|e| PoolInfo {
            poolid: pool.to_owned(),
            comment: e.comment,
            members: e.members,
        })),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// `GET /pools?poolid=<pool>` request.
pub fn read_request(pool: &str) -> Request {
    Request::get(&["pools"], Operation::new(format!("read pool {pool}"))).query("poolid", pool)
}

/// `POST /pools` request.
pub fn create_request(pool: &str, comment: Option<&str>) -> Request {
    let r = Request::post(&["pools"], Operation::new(format!("create pool {pool}")))
        .form("poolid", pool);
    match comment {
        Some(c) => r.form("comment", c),
        None => r,
    }
}

/// The pool's members, or `None` when the pool does not exist.
///
/// # Errors
/// Request errors other than not-found.
pub async fn members(client: &Client, pool: &str) -> Result<Option<Vec<PoolMember>>, ProxmoxError> {
    match client.send_as::<Vec<PoolEntry>>(&read_request(pool)).await {
        Ok(entries) => Ok(Some(entries.into_iter().flat_map(|e| e.members).collect())),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Make sure the pool exists: look, then create; "already exists" (a race) is success.
///
/// # Errors
/// Request errors, e.g. "pool name must start with a letter" or a missing `Pool.Allocate`.
pub async fn ensure_pool(
    client: &Client,
    pool: &str,
    comment: Option<&str>,
) -> Result<PoolOutcome, ProxmoxError> {
    if members(client, pool).await?.is_some() {
        return Ok(PoolOutcome::Present);
    }
    match client.send(&create_request(pool, comment)).await {
        Ok(_) => Ok(PoolOutcome::Created),
        Err(e) if e.message().is_some_and(|m| m.contains("already exists")) => {
            Ok(PoolOutcome::Present)
        }
        Err(e) => Err(e),
    }
}

/// `DELETE /pools?poolid=<pool>` request (PVE 8.1+; the pool must be empty).
pub fn delete_request(pool: &str) -> Request {
    Request::delete(&["pools"], Operation::new(format!("delete pool {pool}"))).query("poolid", pool)
}

/// Delete the pool; already gone is success.
///
/// # Errors
/// Request errors, e.g. "pool 'x' is not empty (contains VM 100)".
pub async fn delete_pool(client: &Client, pool: &str) -> Result<(), ProxmoxError> {
    if members(client, pool).await?.is_none() {
        return Ok(());
    }
    match client.send(&delete_request(pool)).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_requests_use_the_poolid_form() {
        assert_eq!(
            read_request("TALOS").path_and_query(),
            "/pools?poolid=TALOS"
        );
        let c = create_request("TALOS", Some("talos cluster"));
        assert_eq!(
            c.body().as_deref(),
            Some("poolid=TALOS&comment=talos%20cluster")
        );
    }

    #[test]
    fn members_decode_leniently() {
        let e: Vec<PoolEntry> = serde_json::from_value(serde_json::json!([
            {"poolid": "t", "members": [{"id": "qemu/121", "type": "qemu", "vmid": "121", "node": "pve1"}]}
        ]))
        .expect("decodes");
        assert_eq!(e[0].members[0].vmid, Some(121));
    }
}
