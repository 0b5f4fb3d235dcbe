//! The fields a change or a drift shows, typed by resource kind. Planning
//! and apply decide on the variants (a restart-class VM field, a config's
//! digest); the text (`memory_mib`, `hostpci0`, `spec.replicas`) is made from
//! them at the edge, for the plan's view and its JSON format, which hold the
//! same names as before.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use talosprov_statefile::address::Address;

/// A field of one resource kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// A VM's (`vm/…`).
    Vm(VmField),
    /// An image's volume ID (`image/…`): `volid`.
    Volid,
    /// A PCI mapping's (`pci_mapping/…`).
    Mapping(MappingField),
    /// An HA rule's (`ha_rule/…`).
    HaRule(HaRuleField),
    /// A node's machine config or Talos install (`config/…`).
    Config(ConfigField),
    /// An add-on object's field (`addon/…`), by its dotted path, such as
    /// `spec.replicas` or `data.key`.
    Object(String),
}

/// A VM's fields, in the order of their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VmField {
    /// `agent`: the QEMU guest agent (`enabled=1`), taken at the VM's next
    /// start.
    Agent,
    /// `cores`: a restart-class setting (no CPU hotplug).
    Cores,
    /// `disk_gib`: `scsi0`'s size, grown in place.
    DiskGib,
    /// `ha`: the VM's Proxmox HA resource (`/cluster/ha/resources`), set at
    /// once.
    Ha,
    /// `hostpciN`: a PCI device; a restart-class setting.
    HostPci(u32),
    /// `memory_mib`: a restart-class setting (no memory hotplug).
    MemoryMib,
    /// `name`.
    Name,
    /// `netN`: a NIC, hot-plugged.
    Net(u32),
    /// `node`: the Proxmox node it runs on.
    Node,
    /// `scsiN` (N from 1): a data disk, hot-plugged, grown in place; removed
    /// only with its data.
    Scsi(u32),
    /// `tags`, `;`-separated.
    Tags,
    /// `vmid`.
    Vmid,
}

/// A PCI mapping's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MappingField {
    /// `description`.
    Description,
    /// `map`: one entry per Proxmox node.
    Map,
}

/// An HA rule's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HaRuleField {
    /// `resources`: the VMs it keeps apart, `vm:101,vm:102`.
    Resources,
    /// `comment`.
    Comment,
    /// `groups`: PVE 8's HA group per VM, `vmid=nodes; …`.
    Groups,
}

impl HaRuleField {
    fn parse(name: &str) -> Option<HaRuleField> {
        match name {
            "resources" => Some(HaRuleField::Resources),
            "comment" => Some(HaRuleField::Comment),
            "groups" => Some(HaRuleField::Groups),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            HaRuleField::Resources => "resources",
            HaRuleField::Comment => "comment",
            HaRuleField::Groups => "groups",
        }
    }
}

impl From<HaRuleField> for Field {
    fn from(f: HaRuleField) -> Field {
        Field::HaRule(f)
    }
}

/// A node's config fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigField {
    /// `config_sha256`: the digest of the machine config.
    ConfigSha256,
    /// `installer_image`: the installer a Talos upgrade uses.
    InstallerImage,
    /// `kubernetes_version`.
    KubernetesVersion,
    /// `mode`: maintenance or secure.
    Mode,
    /// `staged`: a config staged for the next reboot.
    Staged,
    /// `talos_version`.
    TalosVersion,
}

impl VmField {
    /// Whether a running VM takes the field only at its next start: without
    /// CPU and memory hotplug Proxmox keeps them pending until the VM
    /// restarts, and a PCI device needs a new QEMU process. Tags and a disk
    /// grow apply at once.
    pub fn needs_restart(self) -> bool {
        match self {
            VmField::Cores | VmField::MemoryMib | VmField::HostPci(_) => true,
            VmField::Agent
            | VmField::DiskGib
            | VmField::Ha
            | VmField::Name
            | VmField::Net(_)
            | VmField::Node
            | VmField::Scsi(_)
            | VmField::Tags
            | VmField::Vmid => false,
        }
    }

    /// The field a name gives (`cores`, `hostpci0`), if it is a VM's.
    pub fn parse(name: &str) -> Option<VmField> {
        let numbered = |prefix: &str| -> Option<u32> {
            name.strip_prefix(prefix)
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))?
                .parse()
                .ok()
        };
        Some(match name {
            "agent" => VmField::Agent,
            "cores" => VmField::Cores,
            "disk_gib" => VmField::DiskGib,
            "ha" => VmField::Ha,
            "memory_mib" => VmField::MemoryMib,
            "name" => VmField::Name,
            "node" => VmField::Node,
            "tags" => VmField::Tags,
            "vmid" => VmField::Vmid,
            _ => {
                if let Some(n) = numbered("hostpci") {
                    VmField::HostPci(n)
                } else if let Some(n) = numbered("net") {
                    VmField::Net(n)
                } else {
                    VmField::Scsi(numbered("scsi").filter(|n| *n > 0)?)
                }
            }
        })
    }
}

impl fmt::Display for VmField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmField::Agent => f.write_str("agent"),
            VmField::Cores => f.write_str("cores"),
            VmField::DiskGib => f.write_str("disk_gib"),
            VmField::Ha => f.write_str("ha"),
            VmField::HostPci(n) => write!(f, "hostpci{n}"),
            VmField::MemoryMib => f.write_str("memory_mib"),
            VmField::Name => f.write_str("name"),
            VmField::Net(n) => write!(f, "net{n}"),
            VmField::Node => f.write_str("node"),
            VmField::Scsi(n) => write!(f, "scsi{n}"),
            VmField::Tags => f.write_str("tags"),
            VmField::Vmid => f.write_str("vmid"),
        }
    }
}

impl MappingField {
    fn parse(name: &str) -> Option<MappingField> {
        match name {
            "description" => Some(MappingField::Description),
            "map" => Some(MappingField::Map),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            MappingField::Description => "description",
            MappingField::Map => "map",
        }
    }
}

impl ConfigField {
    fn parse(name: &str) -> Option<ConfigField> {
        Some(match name {
            "config_sha256" => ConfigField::ConfigSha256,
            "installer_image" => ConfigField::InstallerImage,
            "kubernetes_version" => ConfigField::KubernetesVersion,
            "mode" => ConfigField::Mode,
            "staged" => ConfigField::Staged,
            "talos_version" => ConfigField::TalosVersion,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            ConfigField::ConfigSha256 => "config_sha256",
            ConfigField::InstallerImage => "installer_image",
            ConfigField::KubernetesVersion => "kubernetes_version",
            ConfigField::Mode => "mode",
            ConfigField::Staged => "staged",
            ConfigField::TalosVersion => "talos_version",
        }
    }
}

impl Field {
    /// The field `name` is at `address`, as a plan's JSON holds it: a VM's,
    /// an image's, a mapping's or a config's own name, and an add-on
    /// object's path. `None` for a name the kind does not have.
    pub fn of(address: &Address, name: &str) -> Option<Field> {
        match address {
            Address::Vm(_) => VmField::parse(name).map(Field::Vm),
            Address::Image(_) => (name == "volid").then_some(Field::Volid),
            Address::PciMapping(_) => MappingField::parse(name).map(Field::Mapping),
            Address::HaRule(_) => HaRuleField::parse(name).map(Field::HaRule),
            Address::Config(_) => ConfigField::parse(name).map(Field::Config),
            Address::Object(_) => Some(Field::Object(name.to_owned())),
            Address::Pool(_) | Address::Bootstrap | Address::Kubeconfig | Address::Talosconfig => {
                None
            }
        }
    }

    /// The field a name gives without its address (a plan being read): the
    /// first kind that has the name, else an object's path. Reading a plan
    /// then settles it by address ([`super::Plan::settle_fields`]).
    fn guess(name: &str) -> Field {
        VmField::parse(name)
            .map(Field::Vm)
            .or_else(|| (name == "volid").then_some(Field::Volid))
            .or_else(|| MappingField::parse(name).map(Field::Mapping))
            .or_else(|| HaRuleField::parse(name).map(Field::HaRule))
            .or_else(|| ConfigField::parse(name).map(Field::Config))
            .unwrap_or_else(|| Field::Object(name.to_owned()))
    }

    /// The VM field, if it is one.
    pub fn vm(&self) -> Option<VmField> {
        match self {
            Field::Vm(f) => Some(*f),
            Field::Volid
            | Field::Mapping(_)
            | Field::HaRule(_)
            | Field::Config(_)
            | Field::Object(_) => None,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Vm(v) => v.fmt(f),
            Field::Volid => f.write_str("volid"),
            Field::Mapping(m) => f.write_str(m.name()),
            Field::HaRule(r) => f.write_str(r.name()),
            Field::Config(c) => f.write_str(c.name()),
            Field::Object(path) => f.write_str(path),
        }
    }
}

impl From<VmField> for Field {
    fn from(f: VmField) -> Field {
        Field::Vm(f)
    }
}

impl From<MappingField> for Field {
    fn from(f: MappingField) -> Field {
        Field::Mapping(f)
    }
}

impl From<ConfigField> for Field {
    fn from(f: ConfigField) -> Field {
        Field::Config(f)
    }
}

impl Serialize for Field {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Field, D::Error> {
        let name = String::deserialize(d)?;
        Ok(Field::guess(&name))
    }
}

impl Serialize for VmField {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for VmField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VmField, D::Error> {
        let name = String::deserialize(d)?;
        VmField::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("{name:?} is not a VM field")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_its_field_at_its_address() {
        let vm = Address::Vm("wk-1".into());
        let config = Address::Config("wk-1".into());
        let mapping = Address::PciMapping("gpu".into());
        let object: Address = "addon/cilium/DaemonSet.apps/kube-system/cilium"
            .parse()
            .expect("an object address");
        for (address, field) in [
            (&vm, Field::Vm(VmField::HostPci(3))),
            (&vm, Field::Vm(VmField::MemoryMib)),
            (&vm, Field::Vm(VmField::Name)),
            (&config, Field::Config(ConfigField::Mode)),
            (&mapping, Field::Mapping(MappingField::Map)),
            (&object, Field::Object("name".into())),
            (&object, Field::Object("spec.replicas".into())),
        ] {
            assert_eq!(Field::of(address, &field.to_string()), Some(field));
        }
        assert_eq!(Field::of(&vm, "hostpci"), None);
        assert_eq!(Field::of(&vm, "hostpci1x"), None);
        assert_eq!(Field::of(&config, "cores"), None);
    }

    #[test]
    fn a_plan_read_back_gives_each_field_the_kind_of_its_address() {
        use crate::change::{Action, FieldChange};
        use crate::model::{Drift, DriftKind, Plan};
        use crate::saved::{InputDigests, SavedPlan};
        let object: Address = "addon/app/ConfigMap/default/settings"
            .parse()
            .expect("an object address");
        let mut vm = crate::example::change(Address::Vm("wk-1".into()), Action::Delete, "gone")
            .expect("a change of that kind");
        vm.fields
            .push(FieldChange::new(VmField::Name, Some("a".into()), None));
        let mut plan = Plan::of_changes(vec![vm]);
        plan.drift.push(Drift {
            address: object,
            kind: DriftKind::Changed,
            diff: None,
            fields: vec![FieldChange::new(
                Field::Object("name".into()),
                Some("a".into()),
                Some("b".into()),
            )],
        });
        let saved = SavedPlan::of(plan, InputDigests::default());
        let json = String::from_utf8(saved.to_json()).expect("UTF-8");
        assert!(json.contains("\"name\": \"name\""), "{json}");
        let back = SavedPlan::from_json(json.as_bytes()).expect("reads back");
        assert_eq!(back, saved);
        // A name its kind does not have is refused, naming both.
        let bad = json.replacen("\"name\": \"name\"", "\"name\": \"volid\"", 1);
        let e = SavedPlan::from_json(bad.as_bytes()).expect_err("refused");
        assert!(
            e.to_string().contains("vm/wk-1 has no field \"volid\""),
            "{e}"
        );
    }

    #[test]
    fn restart_class_fields_are_cores_memory_and_pci_devices() {
        let restart: Vec<VmField> = [
            VmField::Agent,
            VmField::Cores,
            VmField::DiskGib,
            VmField::HostPci(0),
            VmField::MemoryMib,
            VmField::Name,
            VmField::Net(1),
            VmField::Node,
            VmField::Scsi(1),
            VmField::Tags,
            VmField::Vmid,
        ]
        .into_iter()
        .filter(|f| f.needs_restart())
        .collect();
        assert_eq!(
            restart,
            [VmField::Cores, VmField::HostPci(0), VmField::MemoryMib]
        );
    }
}
