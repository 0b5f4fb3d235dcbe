//! Each node's ordered patches, factored into talosprov's patch tree so that
//! every node's merge order is unchanged: the folders merge `common/`, then
//! `<role>/`, then `nodes/<hostname>/`, so only a shared leading run of
//! patches may move up. `common/` takes the longest run every node starts
//! with; `<role>/` the longest run every node of that role starts with after
//! it; the rest stays the node's own, in its order. A folder is only shared
//! by two nodes or more: a lone node's patches stay in `nodes/<hostname>/`.

use std::collections::BTreeMap;

use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;

/// One node's patches, as applied.
#[derive(Debug, Clone)]
pub struct NodePatches {
    /// The node's hostname.
    pub hostname: String,
    /// Its role.
    pub role: Role,
    /// Its patches (YAML documents), in merge order.
    pub patches: Vec<Sensitive<String>>,
}

/// The patch tree: each folder's patches in merge order. File names are
/// the writer's (`NN-<source>.yaml`, so byte-wise order is this order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchTree {
    /// `common/`.
    pub common: Vec<Sensitive<String>>,
    /// `<role>/`.
    pub roles: BTreeMap<Role, Vec<Sensitive<String>>>,
    /// `nodes/<hostname>/`.
    pub nodes: BTreeMap<String, Vec<Sensitive<String>>>,
}

impl PatchTree {
    /// The patches `hostname` of `role` merges, in order: what the node had.
    pub fn merged_for(&self, hostname: &str, role: Role) -> Vec<&Sensitive<String>> {
        self.common
            .iter()
            .chain(self.roles.get(&role).into_iter().flatten())
            .chain(self.nodes.get(hostname).into_iter().flatten())
            .collect()
    }
}

/// Two patches are the same when their text is, but for the whitespace
/// around it (OpenTofu's heredocs and `yamlencode` differ in the final newline).
fn same(a: &Sensitive<String>, b: &Sensitive<String>) -> bool {
    a.expose().trim() == b.expose().trim()
}

/// How many leading patches every list in `lists` shares.
fn shared_prefix(lists: &[&[Sensitive<String>]]) -> usize {
    let Some(first) = lists.first() else {
        return 0;
    };
    (0..first.len())
        .take_while(|&k| {
            lists
                .iter()
                .all(|l| l.get(k).is_some_and(|p| same(p, &first[k])))
        })
        .count()
}

/// Factor `nodes` into a tree that gives each node its patches in the same
/// order (see the module's rules).
pub fn factor(nodes: &[NodePatches]) -> PatchTree {
    let mut tree = PatchTree::default();
    let all: Vec<&[Sensitive<String>]> = nodes.iter().map(|n| n.patches.as_slice()).collect();
    let common = if nodes.len() >= 2 {
        shared_prefix(&all)
    } else {
        0
    };
    if let Some(first) = nodes.first() {
        tree.common = first.patches[..common].to_vec();
    }
    let mut taken: BTreeMap<&str, usize> = nodes
        .iter()
        .map(|n| (n.hostname.as_str(), common))
        .collect();
    for role in [Role::Controlplane, Role::Worker] {
        let members: Vec<&NodePatches> = nodes.iter().filter(|n| n.role == role).collect();
        if members.len() < 2 {
            continue;
        }
        let rests: Vec<&[Sensitive<String>]> =
            members.iter().map(|n| &n.patches[common..]).collect();
        let shared = shared_prefix(&rests);
        if shared == 0 {
            continue;
        }
        tree.roles.insert(role, rests[0][..shared].to_vec());
        for m in &members {
            taken.insert(m.hostname.as_str(), common + shared);
        }
    }
    for n in nodes {
        let from = taken.get(n.hostname.as_str()).copied().unwrap_or(common);
        if from < n.patches.len() {
            tree.nodes
                .insert(n.hostname.clone(), n.patches[from..].to_vec());
        }
    }
    tree
}
