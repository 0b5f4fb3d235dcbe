//! One test row per topology validation: a change to a valid topology, and the
//! code and field of the diagnostic it must give; plus the warnings, which
//! leave the topology valid.

use std::path::Path;
use talosprov_base::diagnostics::{Code, Severity};
use talosprov_topology::model::Environment;
use talosprov_topology::parse;

/// A valid topology with every kind of section; each row changes one thing.
const BASE: &str = include_str!("../fixtures/valid/base.yaml");

/// Diagnostics (code, severity, field) for BASE with `from` replaced by `to`.
fn problems(from: &str, to: &str) -> Vec<(Code, Severity, Option<String>)> {
    assert!(BASE.contains(from), "BASE has no {from:?}");
    let text = BASE.replacen(from, to, 1);
    let loaded = parse(&text, Path::new("cluster.yaml"), &Environment::default());
    if loaded.diagnostics.iter().any(|d| d.is_error()) {
        assert!(loaded.topology.is_none());
    }
    loaded
        .diagnostics
        .into_iter()
        .map(|d| (d.code, d.severity, d.field))
        .collect()
}

fn env() -> Environment {
    Environment::default()
}

/// One row per validation: the change to BASE, and the code and field it must give.
#[test]
fn each_validation_reports_its_code_and_field() {
    let cases: &[(&str, &str, Code, &str)] = &[
        (
            "role: worker",
            "role: boss",
            Code::InvalidRole,
            "nodes[1].role",
        ),
        (
            "hostname: w-01",
            "hostname: cp-01",
            Code::DuplicateHostname,
            "nodes[1].hostname",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0.101\n    vm_id: 102",
            Code::DuplicateIp,
            "nodes[1].ip",
        ),
        (
            "  - hostname: cp-01\n    ip: 10.0.0.101\n",
            "  - hostname: cp-01\n    role: worker\n    ip: 10.0.0.101\n",
            Code::NoControlplane,
            "nodes",
        ),
        (
            "vip: 10.0.0.100",
            "vip: 10.0.0.102",
            Code::VipIsNodeIp,
            "nodes[1].ip",
        ),
        (
            "mapping: gpu",
            "mapping: gpu1",
            Code::UnknownPciMapping,
            "nodes[1].hostpci[0].mapping",
        ),
        (
            "hostname: w-01",
            "hostname: W-01",
            Code::InvalidHostname,
            "nodes[1].hostname",
        ),
        (
            "name: lab",
            "name: my_lab",
            Code::InvalidHostname,
            "cluster.name",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0",
            Code::InvalidIpv4,
            "nodes[1].ip",
        ),
        (
            "gateway: 10.0.0.1",
            "gateway: 10.0.0.1\n  nameservers: [x]",
            Code::InvalidIpv4,
            "cluster.nameservers[0]",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.1.102",
            Code::OutsideNetwork,
            "nodes[1].ip",
        ),
        (
            "vip: 10.0.0.100",
            "vip: 10.9.0.100",
            Code::OutsideNetwork,
            "cluster.vip",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0.255\n    vm_id: 255",
            Code::ReservedAddress,
            "nodes[1].ip",
        ),
        (
            "gateway: 10.0.0.1",
            "gateway: 10.0.0.0",
            Code::ReservedAddress,
            "cluster.gateway",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0.102\n    vm_id: 101",
            Code::DuplicateVmid,
            "nodes[1].vm_id",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0.102\n    vm_id: 42",
            Code::VmidOutOfRange,
            "nodes[1].vm_id",
        ),
        (
            "ip: 10.0.0.102",
            "ip: 10.0.0.12",
            Code::VmidRequired,
            "nodes[1].vm_id",
        ),
        (
            "device: hostpci0",
            "device: hostpci16",
            Code::InvalidHostpciDevice,
            "nodes[1].hostpci[0].device",
        ),
        (
            "        mapping: gpu\n",
            "        mapping: gpu\n      - device: hostpci0\n        mapping: gpu\n",
            Code::DuplicateHostpciDevice,
            "nodes[1].hostpci[1].device",
        ),
        (
            "    memory: 4096\n",
            "    memory: 4096\n    hostpci: [{device: hostpci1, mapping: gpu}]\n",
            Code::PciMappingShared,
            "nodes[1].hostpci[0].mapping",
        ),
        (
            "    subsystem_id: \"10de:2507\"\n",
            "    subsystem_id: \"10de:2507\"\n    node: pve9\n",
            Code::PciMappingWrongHost,
            "nodes[1].hostpci[0].mapping",
        ),
        (
            "default_schematic: base",
            "default_schematic: nvidia",
            Code::UnknownSchematic,
            "default_schematic",
        ),
        (
            "    memory: 4096\n",
            "    memory: 4096\n    schematic: gpu\n",
            Code::UnknownSchematic,
            "nodes[0].schematic",
        ),
        (
            "[siderolabs/qemu-guest-agent]",
            "[qemu-guest-agent]",
            Code::InvalidExtension,
            "schematics.base.extensions[0]",
        ),
        (
            "    extensions: [siderolabs/qemu-guest-agent]",
            "    id: abc",
            Code::InvalidSchematicId,
            "schematics.base.id",
        ),
        (
            "talos_version: v1.13.8",
            "talos_version: v1.13",
            Code::InvalidVersion,
            "cluster.talos_version",
        ),
        (
            "kubernetes_version: v1.36.2",
            "kubernetes_version: 1.36.2",
            Code::InvalidVersion,
            "cluster.kubernetes_version",
        ),
        (
            "memory: 4096",
            "memory: 2047",
            Code::MemoryBelowMinimum,
            "nodes[0].memory",
        ),
        (
            "memory: 2048",
            "memory: 1023",
            Code::MemoryBelowMinimum,
            "nodes[1].memory",
        ),
        (
            "    memory: 4096\n",
            "    memory: 4096\n    disk_size: 9\n",
            Code::DiskBelowMinimum,
            "nodes[0].disk_size",
        ),
        (
            "cores: 2\n    memory: 4096",
            "cores: 2\n    memroy: 4096",
            Code::UnknownKey,
            "nodes[0].memroy",
        ),
        (
            "cores: 2\n    memory: 4096",
            "cores: [2]\n    memory: 4096",
            Code::WrongType,
            "nodes[0].cores",
        ),
        (
            "  datastore: local-lvm\n",
            "",
            Code::MissingField,
            "proxmox.datastore",
        ),
        (
            "  node: pve\n",
            "  node: pve_1\n",
            Code::InvalidValue,
            "proxmox.node",
        ),
        (
            "datastore: local-lvm",
            "datastore: local_lvm-",
            Code::InvalidValue,
            "proxmox.datastore",
        ),
        (
            "  datastore: local-lvm\n",
            "  datastore: local-lvm\n  bridge: vmbr 0\n",
            Code::InvalidValue,
            "proxmox.bridge",
        ),
        (
            "  datastore: local-lvm\n",
            "  datastore: local-lvm\n  pool: a b\n",
            Code::InvalidValue,
            "proxmox.pool",
        ),
        (
            "    memory: 4096\n",
            "    memory: 4096\n    proxmox_node: pve.lan\n",
            Code::InvalidValue,
            "nodes[0].proxmox_node",
        ),
        (
            "    subsystem_id: \"10de:2507\"\n",
            "    subsystem_id: \"10de:2507\"\n    node: pve_2\n",
            Code::InvalidValue,
            "pci_mappings.gpu.node",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  keep_last: 3\n",
            Code::MissingField,
            "backup.destination",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: ftp://host/x\n",
            Code::InvalidValue,
            "backup.destination",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: s3://\n",
            Code::InvalidValue,
            "backup.destination",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: b\n  keep_last: 10001\n",
            Code::OutOfRange,
            "backup.keep_last",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: b\n  keep_daily: 3651\n",
            Code::OutOfRange,
            "backup.keep_daily",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: b\n  max_age: soon\n",
            Code::InvalidValue,
            "backup.max_age",
        ),
        (
            "default_schematic: base\n",
            "default_schematic: base\nbackup:\n  destination: b\n  max_age: 0\n",
            Code::InvalidValue,
            "backup.max_age",
        ),
    ];
    for (from, to, code, field) in cases {
        let got = problems(from, to);
        assert!(
            got.iter().any(|(c, s, f)| c == code
                && *s == Severity::Error
                && f.as_deref() == Some(*field)),
            "{} ({}): replacing {from:?} gave {got:?}",
            code.code(),
            code.name()
        );
    }
}

#[test]
fn even_controlplane_count_is_a_warning() {
    let got = problems("role: worker", "role: controlplane");
    assert_eq!(
        got,
        [(
            Code::EvenControlplanes,
            Severity::Warning,
            Some("nodes".into())
        )]
    );
}

#[test]
fn controlplanes_crowded_on_one_host_is_a_warning() {
    let three = BASE.replacen("role: worker", "role: controlplane", 1)
        + "  - {hostname: cp-03, ip: 10.0.0.103, cores: 2, memory: 4096, proxmox_node: pve2}\n";
    let loaded = parse(&three, Path::new("c.yaml"), &env());
    let codes: Vec<Code> = loaded.diagnostics.iter().map(|d| d.code).collect();
    assert_eq!(codes, [Code::ControlplanesShareHost]);
    assert!(loaded.topology.is_some(), "warnings do not fail validation");
    // Spread over three hosts: no warning.
    // (cp-01 moves: w-01 passes the GPU through, and its mapping is on `pve`.)
    let spread = three.replacen(
        "  - hostname: cp-01\n    ip: 10.0.0.101\n",
        "  - hostname: cp-01\n    ip: 10.0.0.101\n    proxmox_node: pve3\n",
        1,
    );
    assert!(
        parse(&spread, Path::new("c.yaml"), &env())
            .diagnostics
            .is_empty()
    );
}

#[test]
fn a_wrong_type_is_not_also_reported_missing() {
    let got = problems("cores: 2\n    memory: 4096", "cores: 2\n    memory: lots");
    assert_eq!(
        got,
        [(
            Code::WrongType,
            Severity::Error,
            Some("nodes[0].memory".into())
        )]
    );
}

#[test]
fn a_section_of_the_wrong_type_does_not_also_report_its_fields_missing() {
    let text = BASE.replacen("cluster:\n", "cluster: []\nold_cluster:\n", 1);
    let loaded = parse(&text, Path::new("c.yaml"), &env());
    let fields: Vec<(Code, Option<&str>)> = loaded
        .diagnostics
        .iter()
        .map(|d| (d.code, d.field.as_deref()))
        .collect();
    assert!(
        fields.contains(&(Code::WrongType, Some("cluster"))),
        "{fields:?}"
    );
    assert!(
        !fields.iter().any(|(c, _)| *c == Code::MissingField),
        "{fields:?}"
    );
}

#[test]
fn a_backup_section_reads_its_destination_retention_and_age() {
    use talosprov_base::backup::Location;
    let parsed = |extra: &str| {
        let text = BASE.replacen(
            "default_schematic: base\n",
            &format!("default_schematic: base\n{extra}"),
            1,
        );
        let loaded = parse(&text, Path::new("/repo/lab/cluster.yaml"), &env());
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        loaded.topology.expect("valid").backup
    };
    assert_eq!(parsed(""), None);
    let folder = parsed("backup:\n  destination: snaps\n").expect("a section");
    assert_eq!(
        folder.destination,
        Location::Folder("/repo/lab/snaps".into()),
        "a folder is relative to the topology's folder"
    );
    assert_eq!(
        (folder.keep_last, folder.keep_daily, folder.max_age),
        (7, 14, None)
    );
    let s3 = parsed(
        "backup:\n  destination: s3://bucket/lab/etcd/\n  keep_last: 0\n  keep_daily: 30\n  max_age: 26h\n",
    )
    .expect("a section");
    assert_eq!(
        s3.destination,
        Location::S3 {
            bucket: "bucket".into(),
            prefix: "lab/etcd".into()
        }
    );
    assert_eq!(s3.destination.to_string(), "s3://bucket/lab/etcd");
    assert_eq!((s3.keep_last, s3.keep_daily), (0, 30));
    assert_eq!(s3.max_age, Some(std::time::Duration::from_secs(26 * 3600)));
    let seconds = parsed("backup:\n  destination: s3://b\n  max_age: 3600\n").expect("a section");
    assert_eq!(seconds.max_age, Some(std::time::Duration::from_secs(3600)));
}
