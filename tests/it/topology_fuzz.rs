//! Whatever text is given to the topology parser, it returns diagnostics and
//! never panics: arbitrary bytes, YAML-looking text, and random YAML trees
//! built from the format's own keys and tricky values.

use proptest::prelude::*;
use serde_yaml_ng::{Mapping, Value};
use std::path::Path;
use talosprov_topology::model::Environment;
use talosprov_topology::parse;

const KEYS: &[&str] = &[
    "cluster",
    "name",
    "talos_version",
    "kubernetes_version",
    "vip",
    "endpoint",
    "gateway",
    "prefix_length",
    "nameservers",
    "install_disk",
    "proxmox",
    "node",
    "datastore",
    "image_storage",
    "bridge",
    "pool",
    "insecure",
    "ca_file",
    "fingerprint",
    "image_factory",
    "url",
    "schematics",
    "extensions",
    "kernel_args",
    "id",
    "default_schematic",
    "pci_mappings",
    "path",
    "iommu_group",
    "subsystem_id",
    "comment",
    "nodes",
    "hostname",
    "ip",
    "role",
    "cores",
    "memory",
    "disk_size",
    "vm_id",
    "proxmox_node",
    "schematic",
    "hostpci",
    "device",
    "mapping",
    "pcie",
    "rombar",
    "xvga",
    "tags",
    "patches_dir",
    "state",
    "backend",
    "address",
    "lock_address",
    "unlock_address",
    "lock_method",
    "unlock_method",
    "bogus",
];

const STRINGS: &[&str] = &[
    "",
    "lab",
    "v1.13.8",
    "v1.13",
    "10.0.0.1",
    "10.0.0.0",
    "10.0.0.255",
    "10.0.0.101",
    "192.168.1.120",
    "300.1.1.1",
    "https://pve:8006",
    "http://x",
    "controlplane",
    "worker",
    "hostpci0",
    "hostpci15",
    "hostpci16",
    "gpu",
    "base",
    "siderolabs/x",
    "0000:01:00",
    "10de:2507",
    "local",
    "http",
    "LOCK",
    "é\u{0}\u{7f}",
    "-",
    "a/b/c",
];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        (0u64..2000).prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_map(|f| Value::Number(f.into())),
        prop::sample::select(STRINGS).prop_map(|s| Value::String(s.to_owned())),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Sequence),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..8).prop_map(|entries| {
                let mut m = Mapping::new();
                for (k, v) in entries {
                    m.insert(Value::String(k.to_owned()), v);
                }
                Value::Mapping(m)
            }),
        ]
    })
}

/// Replace the node reached by following `path` (each step an index into a
/// mapping's entries or a list's items) with `new`.
fn mutate(v: &mut Value, path: &[usize], new: Value) {
    let next = match (v, path.split_first()) {
        (Value::Mapping(m), Some((i, rest))) if !m.is_empty() => {
            let n = m.len();
            m.values_mut().nth(i % n).map(|child| (child, rest))
        }
        (Value::Sequence(s), Some((i, rest))) if !s.is_empty() => {
            let n = s.len();
            s.get_mut(i % n).map(|child| (child, rest))
        }
        (v, _) => {
            *v = new;
            return;
        }
    };
    if let Some((child, rest)) = next {
        mutate(child, rest, new);
    }
}

fn check(text: &str) {
    let env = Environment {
        proxmox_endpoint: Some("https://pve.env:8006".into()),
        ..Environment::default()
    };
    let loaded = parse(text, Path::new("fuzz.yaml"), &env);
    let has_error = loaded.diagnostics.iter().any(|d| d.is_error());
    assert_eq!(
        loaded.topology.is_some(),
        !has_error,
        "a topology exactly when there is no error"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn yaml_looking_text_never_panics(text in "([a-z_]{1,8}|[ \\-:\\[\\]{},&*!|>'\"#%@`?\\n]|[0-9.]{1,6}){0,80}") {
        check(&text);
    }

    #[test]
    fn mutated_homelab_example_never_panics(
        edits in prop::collection::vec((prop::collection::vec(any::<usize>(), 0..6), tree()), 1..4)
    ) {
        let mut v: Value = serde_yaml_ng::from_str(include_str!("../../examples/homelab/cluster.yaml")).expect("example parses");
        for (path, new) in edits {
            mutate(&mut v, &path, new);
        }
        check(&serde_yaml_ng::to_string(&v).expect("serialize"));
    }

    #[test]
    fn random_yaml_trees_of_known_keys_never_panic(top in prop::collection::vec((prop::sample::select(KEYS), tree()), 0..10)) {
        let mut m = Mapping::new();
        for (k, v) in top {
            m.insert(Value::String(k.to_owned()), v);
        }
        let text = serde_yaml_ng::to_string(&Value::Mapping(m)).expect("serialize");
        check(&text);
    }
}

/// Whether the diagnostics refuse the input for going beyond a bound.
fn refused_as_unbounded(text: &str) -> bool {
    let env = Environment {
        proxmox_endpoint: None,
        ..Environment::default()
    };
    let loaded = parse(text, Path::new("hostile.yaml"), &env);
    // saphyr's scanner has its own limit for flow collections, reported as a
    // located syntax error before the bounds are checked.
    loaded.diagnostics.iter().any(|d| {
        d.pos.is_some()
            && (d.code == talosprov_base::diagnostics::Code::InputLimit
                || d.message.contains("recursion limit exceeded"))
    })
}

/// `levels` anchors, each a list of `fanout` aliases to the one before, the
/// first a string of `base` characters, then the topology's own keys.
fn alias_bomb(levels: usize, fanout: usize, base: usize) -> String {
    let mut text = format!("a0: &a0 \"{}\"\n", "x".repeat(base));
    for i in 1..=levels {
        let refs = vec![format!("*a{}", i - 1); fanout].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text + "cluster: {name: lab}\n"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn alias_bombs_are_refused_once_they_expand_past_the_budget(
        levels in 1usize..12, fanout in 1usize..12, base in 1usize..20_000
    ) {
        let text = alias_bomb(levels, fanout, base);
        // What the aliases would add when expanded, level by level.
        let mut size = base as f64;
        let mut added = 0.0;
        for _ in 0..levels {
            added += size * fanout as f64;
            size *= fanout as f64;
        }
        let limit = talosprov_base::limits::MAX_ALIAS_EXPANSION as f64;
        let refused = refused_as_unbounded(&text);
        if added > 2.0 * limit {
            prop_assert!(refused, "{levels} levels x {fanout}: {added} characters");
        }
        if added * 2.0 < limit {
            prop_assert!(!refused, "{levels} levels x {fanout}: {added} characters");
        }
        check(&text);
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow(depth in 1usize..40_000, flow in any::<bool>()) {
        let text = if flow {
            format!("cluster: {}x{}\n", "[".repeat(depth), "]".repeat(depth))
        } else {
            format!("cluster:\n{}x\n", "- ".repeat(depth))
        };
        let refused = refused_as_unbounded(&text);
        prop_assert_eq!(refused, depth + 1 > talosprov_base::limits::MAX_NESTING);
        check(&text);
    }

    #[test]
    fn huge_files_are_refused_before_being_read_whole(extra in 0u64..4096, over in any::<bool>()) {
        use talosprov_files::Disk;
        use talosprov_base::inputs::Inputs as _;
        use talosprov_base::limits::{MAX_INPUT_BYTES, ReadError};
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("cluster.yaml");
        let len = if over { MAX_INPUT_BYTES + 1 + extra } else { MAX_INPUT_BYTES - extra };
        std::fs::write(&file, vec![b'#'; usize::try_from(len).expect("size")]).expect("write");
        match Disk.read(&file) {
            Err(ReadError::TooLarge { bytes }) => {
                prop_assert!(over);
                prop_assert_eq!(bytes, MAX_INPUT_BYTES + 1, "reads one byte past the limit, no more");
            }
            Ok(text) => prop_assert!(!over && text.len() as u64 == len),
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}
