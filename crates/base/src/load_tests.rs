use super::*;
use proptest::prelude::*;

const DEEP: usize = 100_000;

fn assert_refused(
    r: Result<impl std::fmt::Debug, Located>,
    problem: Problem,
    line: u32,
) -> Located {
    let e = r.expect_err("refused");
    assert_eq!(e.problem, problem, "{e}");
    assert_eq!(e.pos.line, line, "{e}");
    assert!(e.pos.column >= 1, "{e}");
    e
}

#[test]
fn deep_flow_yaml_is_refused_at_its_place() {
    let text = format!("a: 1\nb: {}{}\n", "[".repeat(DEEP), "]".repeat(DEEP));
    let e = assert_refused(yaml_documents(&text, Budget::INPUT), Problem::TooDeep, 2);
    assert!(e.message.contains("deeper than 64"), "{e}");
    let braces = format!("a:\n  b: {}\n", "{x: ".repeat(DEEP));
    assert_refused(yaml_documents(&braces, Budget::INPUT), Problem::TooDeep, 2);
}

#[test]
fn deep_block_yaml_is_refused_at_its_place() {
    let text = format!("x: 1\ny:\n  {}z\n", "- ".repeat(DEEP));
    let e = assert_refused(yaml_documents(&text, Budget::INPUT), Problem::TooDeep, 3);
    assert!(e.pos.column > 64, "{e}");
    let mappings: String = (0..200)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    assert_refused(
        yaml_documents(&mappings, Budget::INPUT),
        Problem::TooDeep,
        65,
    );
}

#[test]
fn deep_yaml_after_a_syntax_error_saphyr_stops_at_is_still_refused() {
    // A tab saphyr-parser refuses as indentation, then deep flow nesting.
    let text = format!("a:\n\t- b\nc: {}\n", "[".repeat(DEEP));
    let e = yaml_documents(&text, Budget::INPUT).unwrap_err();
    assert!(
        e.problem == Problem::TooDeep || e.problem == Problem::Syntax,
        "{e}"
    );
}

#[test]
fn deep_json_is_refused_at_its_place() {
    let text = format!(
        "[{{\"op\": \"add\", \"path\": \"/a\",\n \"value\": {}{}}}]",
        "[".repeat(DEEP),
        "]".repeat(DEEP)
    );
    let e = assert_refused(
        json_value::<serde_json::Value>(&text, Budget::INPUT),
        Problem::TooDeep,
        2,
    );
    // The outer list and object are two levels: the 63rd `[` is the 65th.
    assert_eq!(e.pos.column, 11 + 62, "{e}");
    let objects = format!("{}1", "{\"a\":".repeat(DEEP));
    assert_refused(
        json_value::<serde_json::Value>(&objects, Budget::INPUT),
        Problem::TooDeep,
        1,
    );
    // Brackets inside strings do not count.
    let quoted = format!("[\"{}\"]", "[".repeat(DEEP));
    assert!(json_value::<serde_json::Value>(&quoted, Budget::INPUT).is_ok());
}

#[test]
fn alias_bombs_are_refused_at_the_alias_that_crosses_the_budget() {
    let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let e = yaml_value::<serde_json::Value>(&text, Budget::INPUT).unwrap_err();
    assert_eq!(e.problem, Problem::TooManyAliases, "{e}");
    assert!(e.pos.line > 1 && e.pos.line <= 9, "{e}");
    assert!(e.message.contains("excessive aliasing"), "{e}");
}

#[test]
fn huge_node_counts_are_refused() {
    let text = format!("[{}0]", "0,".repeat(1_100_000));
    assert_refused(
        yaml_documents(&text, Budget::INPUT),
        Problem::TooManyNodes,
        1,
    );
    assert_refused(
        json_value::<serde_json::Value>(&text, Budget::INPUT),
        Problem::TooManyNodes,
        1,
    );
    // Aliases count the nodes they name, within the text budget.
    let small = Budget {
        max_bytes: 1 << 20,
        max_nodes: 1000,
    };
    let fan = format!(
        "a: &a [{}x]\nb: [{}]\n",
        "x, ".repeat(99),
        "*a, ".repeat(20)
    );
    assert_refused(yaml_documents(&fan, small), Problem::TooManyNodes, 2);
}

#[test]
fn sizes_are_bounded_per_budget() {
    let text = "a".repeat(5 * 1024 * 1024);
    let e = assert_refused(yaml_documents(&text, Budget::INPUT), Problem::TooLarge, 1);
    assert!(e.message.contains("4 MiB"), "{e}");
    assert!(check_yaml(&text, Budget::DOWNLOAD).is_ok());
}

#[test]
fn ordinary_inputs_load() {
    let docs = yaml_documents(
        "defaults: &d {cores: 2}\nnodes:\n  - <<: *d\n  - *d\n---\n---\nb: 1\n",
        Budget::INPUT,
    )
    .unwrap();
    assert_eq!(docs.len(), 2);
    let v: Option<serde_json::Value> = yaml_value("a: [1, 2]\n", Budget::INPUT).unwrap();
    assert_eq!(v.unwrap()["a"][1], 2);
    let p: json_patch::Patch =
        json_value(r#"[{"op": "remove", "path": "/a"}]"#, Budget::INPUT).unwrap();
    assert_eq!(p.0.len(), 1);
    let e = yaml_documents("a: [\n", Budget::INPUT).unwrap_err();
    assert_eq!(e.problem, Problem::Syntax);
    let e = json_value::<serde_json::Value>("{\n  \"a\": ]", Budget::INPUT).unwrap_err();
    assert_eq!((e.problem, e.pos.line), (Problem::Syntax, 2), "{e}");
}

/// Nodes of a built value, aliases expanded (mapping keys counted).
fn nodes(v: &serde_yaml_ng::Value) -> usize {
    match v {
        serde_yaml_ng::Value::Sequence(s) => 1 + s.iter().map(nodes).sum::<usize>(),
        serde_yaml_ng::Value::Mapping(m) => {
            1 + m.iter().map(|(k, v)| nodes(k) + nodes(v)).sum::<usize>()
        }
        serde_yaml_ng::Value::Tagged(t) => nodes(&t.value),
        serde_yaml_ng::Value::Null
        | serde_yaml_ng::Value::Bool(_)
        | serde_yaml_ng::Value::Number(_)
        | serde_yaml_ng::Value::String(_) => 1,
    }
}

/// A YAML text: `depth` nested flow or block lists around `levels` of
/// anchors, each aliasing the previous one `fan` times, and `width` scalars.
fn generated(depth: usize, block: bool, levels: usize, fan: usize, width: usize) -> String {
    let mut text = format!("a0: &a0 [{}]\n", vec!["word"; width.max(1)].join(", "));
    for i in 1..=levels {
        let refs = vec![format!("*a{}", i - 1); fan].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    if block {
        text.push_str(&format!("deep:\n  {}x\n", "- ".repeat(depth)));
    } else {
        text.push_str(&format!(
            "deep: {}x{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ));
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn accepted_inputs_stay_within_the_budget(
        depth in 0usize..200,
        block in any::<bool>(),
        levels in 0usize..8,
        fan in 1usize..12,
        width in 0usize..400,
        max_nodes in 1usize..20_000,
    ) {
        let text = generated(depth, block, levels, fan, width);
        let budget = Budget { max_bytes: 64 * 1024, max_nodes };
        if let Ok(docs) = yaml_documents(&text, budget) {
            let built: usize = docs.iter().map(nodes).sum();
            // The constant: the anchors' own keys, and `deep`, counted once more.
            prop_assert!(built <= max_nodes + 16, "{built} nodes over {max_nodes}");
            prop_assert!(depth <= MAX_NESTING);
            prop_assert!(text.len() as u64 <= budget.max_bytes);
        }
        let json = format!("{{\"deep\": {}1{}}}", "[".repeat(depth), "]".repeat(depth));
        if let Ok(v) = json_value::<serde_json::Value>(&json, budget) {
            prop_assert!(depth < MAX_NESTING, "{v}");
        }
    }

    #[test]
    fn arbitrary_text_never_panics(text in "[\\[\\]{}&*a-c:, \\-\n\"'#|>]{0,300}") {
        let _ = yaml_documents(&text, Budget::INPUT);
        let _ = json_value::<serde_json::Value>(&text, Budget::INPUT);
    }
}

#[test]
fn ordinary_anchors_pass_and_text_aliased_past_a_mebibyte_is_refused_where_it_crosses() {
    let text = "defaults: &d {cores: 2, memory: 4096}\nnodes:\n  - <<: *d\n  - *d\n";
    assert!(check_yaml(text, Budget::INPUT).is_ok());
    // A large string aliased many times: the 490 KB topology of an old bug.
    let big = format!(
        "s: &s \"{}\"\nl: [{}]\n",
        "x".repeat(100_000),
        "*s, ".repeat(20)
    );
    let e = assert_refused(check_yaml(&big, Budget::INPUT), Problem::TooManyAliases, 2);
    assert!(e.message.contains("excessive aliasing"), "{e}");
}
