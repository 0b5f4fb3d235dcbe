//! Create intents (pure): before talosprov sends the request that creates a VM,
//! a pool or a PCI mapping, it saves in the state the address and the Proxmox
//! ID it is about to create, so that a run killed at any instant leaves a trace
//! of what it may have made. An object found at that ID is talosprov's own only
//! when it is recorded, or when such an intent names it; anything else is left
//! untouched.

use serde::{Deserialize, Serialize};

use super::address::Address;

/// An object talosprov is about to create (`resources.creating`), saved before
/// the create request is sent and replaced by the object's record once
/// Proxmox confirmed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateIntent {
    /// The Proxmox ID the object is created at: the vmid (as decimal text),
    /// the pool or mapping name, or an image's volid.
    pub id: String,
    /// For a VM: the Proxmox node it is created on; for an image, the node
    /// that downloads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// For a VM: the name the create request gives it (the node's hostname).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl CreateIntent {
    /// The intent to create VM `vmid` named `name` on `node`.
    pub fn vm(vmid: u32, node: &str, name: &str) -> Self {
        CreateIntent {
            id: vmid.to_string(),
            node: Some(node.to_owned()),
            name: Some(name.to_owned()),
        }
    }

    /// The intent to create the pool or PCI mapping `name`.
    pub fn named(name: &str) -> Self {
        CreateIntent {
            id: name.to_owned(),
            node: None,
            name: None,
        }
    }

    /// The intent to download an image to the volume `volid`
    /// (`<storage>:import/<file>`) from Proxmox node `node`.
    pub fn image(node: &str, volid: &str) -> Self {
        CreateIntent {
            id: volid.to_owned(),
            node: Some(node.to_owned()),
            name: None,
        }
    }

    /// For a VM intent, its vmid; `None` when the ID is not a number.
    pub fn vmid(&self) -> Option<u32> {
        self.id.parse().ok()
    }

    /// Whether this intent is for VM `vmid` named `name` on `node`.
    pub fn is_vm(&self, vmid: u32, node: &str, name: &str) -> bool {
        self.vmid() == Some(vmid)
            && self.node.as_deref() == Some(node)
            && self.name.as_deref() == Some(name)
    }
}

/// The kinds of objects talosprov creates in Proxmox and records intents for.
pub fn has_intents(address: &Address) -> bool {
    matches!(
        address,
        Address::Vm(_) | Address::Pool(_) | Address::PciMapping(_) | Address::HaRule(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::State;

    #[test]
    fn intents_round_trip_and_are_left_out_when_there_are_none() {
        let mut s = State::new(uuid::Uuid::nil());
        let plain = String::from_utf8(s.to_json()).unwrap();
        assert!(!plain.contains("creating"), "{plain}");
        let vm = Address::Vm("wk-1".into());
        s.set_intent(&vm, CreateIntent::vm(122, "pve1", "wk-1"));
        s.set_intent(
            &Address::PciMapping("gpu".into()),
            CreateIntent::named("gpu"),
        );
        let back = State::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
        let i = back.intent(&vm).unwrap();
        assert!(i.is_vm(122, "pve1", "wk-1"));
        assert!(!i.is_vm(122, "pve1", "legacy-db"));
        assert_eq!(back.intents().len(), 2);
        let mut s = back;
        assert!(s.clear_intent(&vm));
        assert!(!s.clear_intent(&vm));
    }

    #[test]
    fn state_commands_see_an_address_with_only_an_intent() {
        let mut s = State::new(uuid::Uuid::nil());
        let vm = Address::Vm("wk-1".into());
        s.set_intent(&vm, CreateIntent::vm(122, "pve1", "wk-1"));
        assert_eq!(s.addresses(), std::slice::from_ref(&vm));
        assert!(!s.has_record(&vm));
        let shown = s.show(&vm).unwrap();
        assert_eq!(shown["creating"]["id"], "122");
        assert!(s.remove(&vm), "state rm forgets the intent");
        assert!(s.intents().is_empty());
        assert_eq!(s.show(&vm), None);
    }
}
