//! The three example nodes of the design's topology, as plain client values.

use talosprov_base::vm::Image;
use talosprov_base::vm::{HostPci, VmSpec};
use talosprov_proxmox::mapping::{PciMapEntry, PciMappingSpec};

/// Base schematic (qemu-guest-agent).
pub const BASE: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
/// NVIDIA schematic.
pub const NVIDIA: &str = "9c1d1b442d73f96dcd04e81463eb20000ab014062d22e1b083e1773336bc1dd5";
/// Talos version of the examples.
pub const TALOS: &str = "v1.13.8";

/// The image of a schematic.
pub fn image(schematic: &str) -> Image {
    Image {
        talos_version: TALOS.into(),
        schematic: schematic.into(),
    }
}

fn node(
    vmid: u32,
    name: &str,
    cores: u32,
    memory_mib: u64,
    disk_gib: u64,
    schematic: &str,
    role: &str,
) -> VmSpec {
    VmSpec {
        vmid,
        name: name.into(),
        node: "pve1".into(),
        cores,
        memory_mib,
        disk_gib,
        datastore: "local-lvm".into(),
        image_volid: image(schematic).volid("local"),
        networks: vec![talosprov_base::vm::Nic::on_bridge("vmbr0")],
        disks: Vec::new(),
        agent: true,
        ip: format!("192.168.1.{vmid}").parse().expect("ip"),
        prefix: 24,
        gateway: Some("192.168.1.1".parse().expect("ip")),
        nameservers: vec!["192.168.1.1".parse().expect("ip")],
        pool: Some("TALOS".into()),
        tags: vec!["talos".into(), role.into()],
        hostpci: Vec::new(),
        ha: None,
    }
}

/// talos-controlplane-01 (.121), talos-worker-01 (.122), talos-gpu-01 (.123, hostpci0 on `gpu`).
pub fn nodes() -> Vec<VmSpec> {
    let mut gpu = node(123, "talos-gpu-01", 4, 12288, 100, NVIDIA, "worker");
    gpu.hostpci = vec![HostPci {
        index: 0,
        mapping: "gpu".into(),
        pcie: true,
        rombar: true,
        x_vga: false,
    }];
    vec![
        node(
            121,
            "talos-controlplane-01",
            2,
            4096,
            50,
            BASE,
            "controlplane",
        ),
        node(122, "talos-worker-01", 4, 8192, 100, BASE, "worker"),
        gpu,
    ]
}

/// The `gpu` mapping: 0000:01:00, 10de:2507, IOMMU group 10, subsystem 10de:2507, on `node`.
pub fn gpu_mapping(nodes: &[&str]) -> PciMappingSpec {
    PciMappingSpec {
        id: "gpu".into(),
        description: Some("GeForce RTX 3050".into()),
        entries: nodes
            .iter()
            .map(|n| PciMapEntry {
                node: (*n).into(),
                path: "0000:01:00".into(),
                id: "10de:2507".into(),
                iommu_group: Some(10),
                subsystem_id: Some("10de:2507".into()),
            })
            .collect(),
    }
}
