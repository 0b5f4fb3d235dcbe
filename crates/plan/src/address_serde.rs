//! Serde for addresses in the plan's JSON: as their text
//! (`vm/talos-worker-01`), alone, in a list, or optional.

/// Serde for an address as its text (`vm/talos-worker-01`).
pub(super) mod text {
    use serde::{Deserialize, Deserializer, Serializer};
    use talosprov_statefile::address::Address;

    pub fn serialize<S: Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Serde for a list of addresses as text.
pub(super) mod list {
    use serde::{Deserialize, Deserializer, Serializer};
    use talosprov_statefile::address::Address;

    pub fn serialize<S: Serializer>(list: &[Address], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(ToString::to_string))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Address>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Serde for an optional address as text.
pub(super) mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use talosprov_statefile::address::Address;

    pub fn serialize<S: Serializer>(a: &Option<Address>, s: S) -> Result<S::Ok, S::Error> {
        match a {
            Some(a) => s.collect_str(a),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Address>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Serde for an add-on object's address as its key text
/// (`cilium/DaemonSet.apps/kube-system/cilium`).
pub(super) mod object {
    use serde::{Deserialize, Deserializer, Serializer};
    use talosprov_statefile::address::ObjectAddress;

    pub fn serialize<S: Serializer>(o: &ObjectAddress, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&o.key())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Box<ObjectAddress>, D::Error> {
        let text = String::deserialize(d)?;
        ObjectAddress::from_key(&text)
            .map(Box::new)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not an object's address")))
    }
}
