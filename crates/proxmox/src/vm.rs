//! VMs: the create call with every option in one request, then the resize of the
//! imported disk and the start (qemu-server `API2/Qemu.pm` `create_vm`,
//! `resize_vm`, `vm_start`). Look first: a vmid already present on its node with
//! its name is left alone; held by another guest or node, it is an error.

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::observe;
use crate::request::{Operation, Request};
use crate::task::{self, TaskDone};

use talosprov_base::vm::VmSpec;

/// The operation a request on `spec`'s VM is reported as.
fn op(spec: &VmSpec, action: &str) -> Operation {
    Operation::new(action).node(&spec.node).vmid(spec.vmid)
}

/// The `POST /nodes/{node}/qemu` request with every option, in one call.
pub fn create_request(spec: &VmSpec) -> Request {
    let ds = &spec.datastore;
    let mut r = Request::post(&["nodes", &spec.node, "qemu"], op(spec, "create VM"))
        .form("vmid", spec.vmid)
        .form("name", &spec.name)
        .form("machine", "q35")
        .form("bios", "ovmf")
        .form("efidisk0", format!("{ds}:1,efitype=4m,pre-enrolled-keys=0"))
        .form("scsihw", "virtio-scsi-single")
        .form(
            "scsi0",
            format!(
                "{ds}:0,import-from={},iothread=1,discard=on,ssd=1",
                spec.image_volid
            ),
        )
        .form("ide2", format!("{ds}:cloudinit"))
        .form("ipconfig0", spec.ipconfig0());
    if !spec.nameservers.is_empty() {
        let list: Vec<String> = spec.nameservers.iter().map(ToString::to_string).collect();
        r = r.form("nameserver", list.join(" "));
    }
    r = r
        .form("memory", spec.memory_mib)
        .form("balloon", 0)
        .form("cores", spec.cores)
        .form("cpu", "host")
        .form("agent", if spec.agent { "enabled=1" } else { "0" })
        .form("boot", "order=scsi0")
        .form("serial0", "socket")
        .form("ostype", "l26");
    if let Some(pool) = &spec.pool {
        r = r.form("pool", pool);
    }
    if !spec.tags.is_empty() {
        r = r.form("tags", spec.tags.join(";"));
    }
    for (i, nic) in spec.networks.iter().enumerate() {
        r = r.form(&format!("net{i}"), nic.property_string());
    }
    for disk in &spec.disks {
        r = r.form(&disk.key(), disk.create_string());
    }
    let mut devices = spec.hostpci.clone();
    devices.sort();
    for d in devices {
        r = r.form(&d.key(), d.property_string());
    }
    r
}

/// `PUT /nodes/{node}/qemu/{vmid}/resize disk=<disk> size=<N>G` (absolute size).
pub fn resize_request(node: &str, vmid: u32, disk: &str, gib: u64) -> Request {
    Request::put(
        &["nodes", node, "qemu", &vmid.to_string(), "resize"],
        Operation::new(format!("resize {disk}"))
            .node(node)
            .vmid(vmid),
    )
    .form("disk", disk)
    .form("size", format!("{gib}G"))
}

/// `POST /nodes/{node}/qemu/{vmid}/status/<action>`.
pub fn power_request(node: &str, vmid: u32, action: &str) -> Request {
    Request::post(
        &["nodes", node, "qemu", &vmid.to_string(), "status", action],
        Operation::new(format!("{action} VM")).node(node).vmid(vmid),
    )
}

/// What [`ensure_vm`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmOutcome {
    /// The VM was there already, on its node with its name; nothing was changed.
    Present,
    /// Created, resized and started; any task warnings.
    Created {
        /// `WARN:` lines of tasks that ended `WARNINGS: N`.
        warnings: Vec<String>,
    },
}

/// Make sure the VM exists: look at the cluster's VMs, then create it (see
/// [`create`]). A vmid already present on its node with its name is left as it
/// is: only for callers that know the vmid is theirs (apply decides that from
/// the state, see `apply::create_step`).
///
/// # Errors
/// [`ProxmoxError::VmidTaken`] naming the node that holds the vmid; request and task errors.
pub async fn ensure_vm(client: &Client, spec: &VmSpec) -> Result<VmOutcome, ProxmoxError> {
    if let Some(existing) = find(client, spec.vmid).await? {
        if is_ours(&existing, spec) {
            return Ok(VmOutcome::Present);
        }
        return Err(taken(spec, &existing));
    }
    let warnings = create(client, spec).await?;
    Ok(VmOutcome::Created { warnings })
}

/// The guest the cluster-wide listing shows at `vmid`, if any. A free vmid
/// costs one small request (`GET /cluster/nextid?vmid=N` answers it back, as
/// bpg's sequential mode asks); only a taken one is looked up in the listing
/// (`GET /cluster/resources?type=vm`), so creating N VMs does not list the
/// cluster N times.
///
/// # Errors
/// Request errors of the listing.
pub async fn find(client: &Client, vmid: u32) -> Result<Option<observe::ClusterVm>, ProxmoxError> {
    let req = Request::get(
        &["cluster", "nextid"],
        Operation::new(format!("check that vmid {vmid} is free")),
    )
    .query("vmid", vmid);
    if let Ok(answer) = client.send(&req).await
        && crate::lenient::string_of(&answer).is_some_and(|id| id.trim() == vmid.to_string())
    {
        return Ok(None);
    }
    // Taken ("VM N already exists"), or the check could not say: the listing does.
    Ok(observe::cluster_vms(client)
        .await?
        .into_iter()
        .find(|v| v.vmid == vmid))
}

/// Create the VM (waiting for the create task, since the VM is locked `create`
/// until it ends), resize `scsi0` to `disk_gib`, and start it; returns the
/// tasks' warnings. The caller has looked first: the vmid was free.
///
/// # Errors
/// [`ProxmoxError::VmidTaken`] when another guest took the vmid meanwhile;
/// request and task errors.
pub async fn create(client: &Client, spec: &VmSpec) -> Result<Vec<String>, ProxmoxError> {
    let mut warnings = Vec::new();
    match task::run(client, &create_request(spec)).await {
        Ok(created) => warnings.extend(created.warnings),
        // A create answered 595 by the proxy may have reached the node, and the retry
        // then finds the vmid taken: if it is ours, wait for its create lock to clear.
        Err(ProxmoxError::VmidTaken { node, .. }) if node == spec.node => {
            let existing = wait_unlocked(client, spec).await?;
            if !is_ours(&existing, spec) {
                return Err(taken(spec, &existing));
            }
        }
        Err(e) => return Err(e),
    }
    let resized = resize(client, &spec.node, spec.vmid, "scsi0", spec.disk_gib).await?;
    warnings.extend(resized.into_iter().flat_map(|d| d.warnings));
    warnings.extend(start(client, &spec.node, spec.vmid).await?);
    Ok(warnings)
}

/// Whether the listed guest is the VM `spec` describes: a QEMU VM on its node
/// with its name (the name is set by the create request itself).
pub fn is_ours(existing: &observe::ClusterVm, spec: &VmSpec) -> bool {
    existing.is_vm()
        && existing.node == spec.node
        && existing.name.as_deref() == Some(spec.name.as_str())
}

fn taken(spec: &VmSpec, existing: &observe::ClusterVm) -> ProxmoxError {
    ProxmoxError::VmidTaken {
        vmid: spec.vmid,
        node: existing.node.clone(),
        name: existing.name.clone(),
    }
}

/// The listing of `spec.vmid` once it holds no config lock (a create task still
/// running, say), within the task deadline; the listing as it is at the deadline.
///
/// # Errors
/// [`ProxmoxError::NotFound`] when the VM is gone; request errors.
pub async fn wait_unlocked(
    client: &Client,
    spec: &VmSpec,
) -> Result<observe::ClusterVm, ProxmoxError> {
    let t = client.timeouts();
    let deadline = tokio::time::Instant::now() + t.task_deadline;
    let backoff = t.backoff();
    let mut polls = 0u32;
    loop {
        let delay = backoff.delay(polls);
        polls += 1;
        let listing = observe::cluster_vms(client).await?;
        let Some(existing) = listing.into_iter().find(|v| v.vmid == spec.vmid) else {
            return Err(ProxmoxError::NotFound {
                op: op(spec, "create VM"),
                message: format!("VM {} vanished while its create was finishing", spec.vmid),
            });
        };
        if existing.lock.is_none() || tokio::time::Instant::now() + delay > deadline {
            return Ok(existing);
        }
        tokio::time::sleep(delay).await;
    }
}

/// Resize a disk to `gib` GiB and wait: a UPID since PVE 8.0, `null` before.
///
/// # Errors
/// Request and task errors (PVE refuses to shrink).
pub async fn resize(
    client: &Client,
    node: &str,
    vmid: u32,
    disk: &str,
    gib: u64,
) -> Result<Option<TaskDone>, ProxmoxError> {
    let req = resize_request(node, vmid, disk, gib);
    client
        .retrying(&req.op, || async {
            let data = client.send(&req).await?;
            if data.is_null() {
                return Ok(None);
            }
            let upid = task::upid_of(&req.op, &data)?;
            task::wait(client, &req.op, &upid).await.map(Some)
        })
        .await
}

/// Start the VM and wait for the start task; "already running" is success. Returns warnings.
///
/// # Errors
/// Request and task errors (the task's text, e.g. a PCI mapping problem).
pub async fn start(client: &Client, node: &str, vmid: u32) -> Result<Vec<String>, ProxmoxError> {
    match task::run(client, &power_request(node, vmid, "start")).await {
        Ok(done) => Ok(done.warnings),
        Err(e) if e.message().is_some_and(|m| m.contains("already running")) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::vm::{DataDisk, HostPci, Nic, hostpci_equivalent};

    pub(crate) fn gpu_node() -> VmSpec {
        VmSpec {
            vmid: 123,
            name: "talos-gpu-01".into(),
            node: "pve1".into(),
            cores: 4,
            memory_mib: 12288,
            disk_gib: 100,
            datastore: "local-lvm".into(),
            image_volid: "local:import/talos-v1.13.8-37656798-nocloud-amd64.qcow2".into(),
            networks: vec![
                Nic {
                    bridge: "vmbr0".into(),
                    tag: None,
                    mtu: None,
                    mac: None,
                    firewall: false,
                },
                Nic {
                    bridge: "vmbr1".into(),
                    tag: Some(20),
                    mtu: Some(9000),
                    mac: Some("02:AB:CD:EF:01:23".into()),
                    firewall: true,
                },
            ],
            disks: vec![DataDisk {
                index: 1,
                size_gib: 200,
                datastore: "local-lvm".into(),
                ssd: true,
                iothread: true,
                discard: true,
                cache: None,
            }],
            agent: true,
            ip: "192.168.1.123".parse().expect("ip"),
            prefix: 24,
            gateway: Some("192.168.1.1".parse().expect("ip")),
            nameservers: vec![
                "192.168.1.1".parse().expect("ip"),
                "1.1.1.1".parse().expect("ip"),
            ],
            pool: Some("TALOS".into()),
            tags: vec!["talos".into(), "worker".into()],
            hostpci: vec![HostPci {
                index: 0,
                mapping: "gpu".into(),
                pcie: true,
                rombar: true,
                x_vga: false,
            }],
            ha: None,
        }
    }

    #[test]
    fn create_request_lists_every_parameter_in_order() {
        let r = create_request(&gpu_node());
        assert_eq!(r.path, "/nodes/pve1/qemu");
        let pairs: Vec<String> = r.form.iter().map(|(k, v)| format!("{k}={v}")).collect();
        insta::assert_snapshot!(pairs.join("\n"));
    }

    #[test]
    fn hostpci_property_strings() {
        let mut d = gpu_node().hostpci[0].clone();
        assert_eq!(d.property_string(), "mapping=gpu,pcie=1");
        d.rombar = false;
        d.x_vga = true;
        d.index = 2;
        assert_eq!(d.key(), "hostpci2");
        assert_eq!(d.property_string(), "mapping=gpu,pcie=1,rombar=0,x-vga=1");
        d.pcie = false;
        assert_eq!(d.property_string(), "mapping=gpu,rombar=0,x-vga=1");
    }

    #[test]
    fn hostpci_spellings_of_the_same_device_are_equivalent() {
        let same = [
            ("mapping=gpu", "mapping=gpu,pcie=0,rombar=1,x-vga=0"),
            ("mapping=gpu,pcie=1", "pcie=yes,mapping=gpu"),
            ("mapping=gpu,rombar=0", "mapping=gpu,rombar=off"),
        ];
        for (a, b) in same {
            assert!(hostpci_equivalent(Some(a), Some(b)), "{a} ~ {b}");
        }
        let different = [
            ("mapping=gpu", "mapping=gpu,pcie=1"),
            ("mapping=gpu", "mapping=nic"),
            ("mapping=gpu,x-vga=1", "mapping=gpu"),
        ];
        for (a, b) in different {
            assert!(!hostpci_equivalent(Some(a), Some(b)), "{a} !~ {b}");
        }
        assert!(!hostpci_equivalent(Some("mapping=gpu"), None));
        assert!(hostpci_equivalent(None, None));
    }

    #[test]
    fn ipconfig_without_gateway_has_only_the_address() {
        let mut s = gpu_node();
        s.gateway = None;
        assert_eq!(s.ipconfig0(), "ip=192.168.1.123/24");
    }

    #[test]
    fn resize_sends_an_absolute_size_in_gib() {
        let r = resize_request("pve1", 121, "scsi0", 50);
        assert_eq!(r.path, "/nodes/pve1/qemu/121/resize");
        assert_eq!(r.body().as_deref(), Some("disk=scsi0&size=50G"));
    }
}
