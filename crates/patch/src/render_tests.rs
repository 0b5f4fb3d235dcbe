//! Tests of patch rendering: kinds, strict variables, templatefile syntax,
//! error positions, and that no template text panics the renderer.

use super::*;
use proptest::prelude::*;

fn vars() -> TemplateVars {
    TemplateVars {
        hostname: "talos-controlplane-01".into(),
        node_ip: "192.168.1.121".into(),
        role: "controlplane".into(),
        vip: Some("192.168.1.120".into()),
        gateway: "192.168.1.1".into(),
        nameservers: vec!["1.1.1.1".into(), "9.9.9.9".into()],
        prefix_length: 24,
        cluster_name: "homelab".into(),
        talos_version: "v1.13.8".into(),
        kubernetes_version: "v1.36.2".into(),
        node: serde_json::json!({"hostname": "talos-controlplane-01", "cores": 2, "tags": {"rack": "a"}}),
        pool: None,
        index: None,
    }
}

fn render(name: &str, text: &str) -> Result<String, RenderError> {
    let file = Path::new(name);
    let kind = PatchKind::of(name).expect("a patch file name");
    let mut r = Renderer::new();
    r.add(file, kind, text)?;
    r.render(file, &vars())
}

#[test]
fn kinds_follow_the_file_name() {
    assert_eq!(PatchKind::of("10-a.yaml"), Some(PatchKind::Literal));
    assert_eq!(PatchKind::of("10-a.yml"), Some(PatchKind::Literal));
    assert_eq!(PatchKind::of("10-a.yaml.j2"), Some(PatchKind::Jinja));
    assert_eq!(PatchKind::of("10-a.yml.j2"), Some(PatchKind::Jinja));
    assert_eq!(PatchKind::of("10-a.yaml.jinja"), Some(PatchKind::Jinja));
    assert_eq!(
        PatchKind::of("10-a.yaml.tftpl"),
        Some(PatchKind::Templatefile)
    );
    assert_eq!(PatchKind::of("README.md"), None);
    assert_eq!(PatchKind::of(".yaml"), None);
}

#[test]
fn literal_files_keep_braces() {
    let text = "cluster:\n  inlineManifests:\n    - name: x\n      contents: \"{{ not a template }} ${nor_this}\"\n";
    assert_eq!(render("a.yaml", text).unwrap(), text);
}

#[test]
fn jinja_sees_the_node_variables() {
    let out = render(
        "a.yaml.j2",
        "machine:\n  network:\n    hostname: {{ hostname }}\n    nameservers: {{ nameservers | tojson }}\n    rack: {{ node.tags.rack }}\n",
    )
    .unwrap();
    assert_eq!(
        out,
        "machine:\n  network:\n    hostname: talos-controlplane-01\n    nameservers: [\"1.1.1.1\",\"9.9.9.9\"]\n    rack: a\n"
    );
}

#[test]
fn jinja_undefined_variables_are_errors_with_file_and_line() {
    let err = render(
        "patches/common/10-a.yaml.j2",
        "machine:\n  x: {{ hostnme }}\n",
    )
    .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"patches/common/10-a.yaml.j2:2:9: undefined value (in `hostnme`)");
}

#[test]
fn jinja_syntax_errors_name_file_and_line() {
    let err = render("p.yaml.j2", "a: 1\nb: {% if %}\n").unwrap_err();
    let RenderError::Template { line, .. } = err else {
        panic!("expected a template error, got {err}")
    };
    assert_eq!(line, 2);
}

#[test]
fn tftpl_interpolates_and_calls_jsonencode() {
    let out = render(
        "a.yaml.tftpl",
        "machine:\n  network:\n    hostname: ${hostname}\n    nameservers: ${jsonencode(nameservers)}\n",
    )
    .unwrap();
    assert_eq!(
        out,
        "machine:\n  network:\n    hostname: talos-controlplane-01\n    nameservers: [\"1.1.1.1\",\"9.9.9.9\"]\n"
    );
}

#[test]
fn tftpl_if_and_for_directives_work() {
    let text = "%{ if vip != null ~}\nvip: ${vip}\n%{ endif ~}\nns:\n%{ for i, ns in nameservers ~}\n  - \"${i}:${ns}\"\n%{ endfor ~}\n";
    assert_eq!(
        render("a.yaml.tftpl", text).unwrap(),
        // `~}` strips to the end of its line only, as in HCL.
        "vip: 192.168.1.120\nns:\n  - \"0:1.1.1.1\"\n  - \"1:9.9.9.9\"\n"
    );
}

#[test]
fn tftpl_conditional_and_boolean_operators_work() {
    let text = "a: ${role == \"controlplane\" && prefix_length == 24 ? \"yes\" : \"no\"}\nb: ${!(role == \"worker\") ? upper(cluster_name) : \"x\"}\n";
    assert_eq!(
        render("a.yaml.tftpl", text).unwrap(),
        "a: yes\nb: HOMELAB\n"
    );
}

#[test]
fn tftpl_left_strip_removes_the_line_break_before_a_tag_at_line_start() {
    let text = "a: [x\n%{~ for ns in nameservers ~}\n, ${ns}\n%{~ endfor ~}\n]\nb:   ${~ \"y\"}\n";
    assert_eq!(
        render("a.yaml.tftpl", text).unwrap(),
        "a: [x, 1.1.1.1, 9.9.9.9]\nb:y\n"
    );
}

#[test]
fn tftpl_errors_after_stripped_lines_keep_their_line_number() {
    let err = render(
        "a.yaml.tftpl",
        "%{ if true ~}\n\n%{~ endif ~}\n\nb: ${nope}\n",
    )
    .unwrap_err();
    let RenderError::Template { line, .. } = err else {
        panic!("expected a template error, got {err}")
    };
    assert_eq!(line, 5);
}

#[test]
fn tftpl_dollar_escape_prints_a_literal_interpolation() {
    assert_eq!(
        render("a.yaml.tftpl", "a: $${hostname} %%{ if }\n").unwrap(),
        "a: ${hostname} %{ if }\n"
    );
}

#[test]
fn tftpl_leaves_jinja_braces_alone() {
    assert_eq!(
        render("a.yaml.tftpl", "a: \"{{ x }} {% y %}\"\n").unwrap(),
        "a: \"{{ x }} {% y %}\"\n"
    );
}

#[test]
fn tftpl_undefined_variables_are_errors_with_file_and_line() {
    let err = render(
        "patches/controlplane/10-vip.yaml.tftpl",
        "a: 1\nb: ${gatway}\n",
    )
    .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"patches/controlplane/10-vip.yaml.tftpl:2:4: undefined value (in `gatway`)");
}

#[test]
fn tftpl_refuses_to_interpolate_a_list() {
    let err = render("a.yaml.tftpl", "a: ${nameservers}\n").unwrap_err();
    assert!(err.to_string().contains("jsonencode"), "{err}");
}

#[test]
fn tftpl_unclosed_interpolation_names_the_line() {
    let err = render("a.yaml.tftpl", "a: 1\nb: 2\nc: ${hostname\n").unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"a.yaml.tftpl:3:4: unclosed ${ (no matching })");
}

#[test]
fn invalid_yaml_after_rendering_names_file_and_line() {
    let mut r = Renderer::new();
    let file = Path::new("patches/common/20-b.yaml");
    r.add(file, PatchKind::Literal, "machine:\n  a: 1\n b: 2\n")
        .unwrap();
    let err = r.render_documents(file, &vars()).unwrap_err();
    let RenderError::Yaml { line, rendered, .. } = &err else {
        panic!("expected a YAML error, got {err}")
    };
    assert_eq!((*line, *rendered), (3, false));
    assert!(
        err.to_string().starts_with("patches/common/20-b.yaml:3"),
        "{err}"
    );
}

#[test]
fn rendered_documents_are_parsed() {
    let docs = render_patch(
        Path::new("a.yaml.tftpl"),
        PatchKind::Templatefile,
        "machine:\n  network:\n    hostname: ${hostname}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\n",
        &vars(),
    )
    .unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(
        docs[0]["machine"]["network"]["hostname"],
        "talos-controlplane-01"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_template_text_never_panics(
        text in "(\\$\\{|%\\{|\\$\\$\\{|\\{\\{|\\{%|\\}\\}|%\\}|\\}|~|\"|\\?|:|!|&&|\\|\\||[a-z_ ]{0,4}|\n|\\(|\\)|\\[|\\]|.){0,40}",
        jinja in any::<bool>(),
    ) {
        let kind = if jinja { PatchKind::Jinja } else { PatchKind::Templatefile };
        let file = Path::new("fuzz.yaml.tmpl");
        let mut r = Renderer::new();
        if r.add(file, kind, &text).is_ok() {
            let _ = r.render_documents(file, &vars());
        }
    }
}

#[test]
fn all_renders_together_have_one_work_budget() {
    // About a tenth of TEMPLATE_FUEL per render: each render succeeds, and the renders of
    // one renderer together stop at TOTAL_TEMPLATE_FUEL.
    let file = Path::new("patches/common/10-loop.yaml.j2");
    let mut r = Renderer::new();
    r.add(
        file,
        PatchKind::Jinja,
        "{% for i in range(40000) %}{% endfor %}machine: {}\n",
    )
    .unwrap();
    let results: Vec<_> = (0..200).map(|_| r.render(file, &vars())).collect();
    let rendered = results.iter().take_while(|r| r.is_ok()).count();
    assert!(
        (50..200).contains(&rendered),
        "{rendered} renders before the budget ran out"
    );
    match &results[rendered] {
        Err(RenderError::Template {
            file: f,
            line,
            message,
            ..
        }) => {
            assert_eq!((f.as_path(), *line), (file, 1));
            assert!(
                message.starts_with(
                    "not rendered: the patch templates used up the work budget of one command"
                ),
                "{message}"
            );
            assert!(message.contains("no render failed"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(results[rendered..].iter().all(Result::is_err));
    // Failed renders count a whole render's fuel each, and the message says how many.
    let bad = Path::new("patches/common/20-bad.yaml.j2");
    let mut r = Renderer::new();
    r.add(bad, PatchKind::Jinja, "machine: {{ 'a' - 1 }}\n")
        .unwrap();
    let last = (0..11).map(|_| r.render(bad, &vars())).last().unwrap();
    let Err(RenderError::Template { message, .. }) = last else {
        panic!("{last:?}")
    };
    assert!(message.contains("10 renders failed"), "{message}");
    // A new renderer (another command) starts with the whole budget.
    let mut fresh = Renderer::new();
    fresh.add(file, PatchKind::Jinja, "machine: {}\n").unwrap();
    assert!(fresh.render(file, &vars()).is_ok());
}

#[test]
fn a_template_kept_or_compiled_at_each_render_renders_and_fails_alike() {
    let cases = [
        (
            "n.yaml.j2",
            "machine:\n  network:\n    hostname: {{ hostname }}\n",
        ),
        (
            "n.yaml.tftpl",
            "machine:\n  network:\n    hostname: ${hostname}\n",
        ),
    ];
    for (name, text) in cases {
        let file = Path::new(name);
        let kind = PatchKind::of(name).expect("a patch file name");
        let mut outputs = Vec::new();
        for reuse in [Reuse::Shared, Reuse::Once] {
            let mut r = Renderer::new();
            r.add_parsed(file, kind, text, None, reuse).expect("added");
            // Rendered twice, as for two nodes.
            outputs.push(r.render(file, &vars()).expect("renders"));
            outputs.push(r.render(file, &vars()).expect("renders again"));
            let broken = format!("{text}{{% if %}}\n");
            let e = r
                .add_parsed(
                    Path::new("b.yaml.j2"),
                    PatchKind::Jinja,
                    &broken,
                    None,
                    reuse,
                )
                .expect_err("a syntax error is reported when the file is added");
            assert!(
                matches!(e, RenderError::Template { line: 4, .. }),
                "{reuse:?}: {e}"
            );
        }
        assert!(
            outputs
                .iter()
                .all(|o| o.contains("hostname: talos-controlplane-01")),
            "{outputs:?}"
        );
        assert!(outputs.windows(2).all(|w| w[0] == w[1]), "{outputs:?}");
    }
}

/// Render `text` as `name` on a thread with a 2 MiB stack, as rendering threads have.
fn render_on_small_stack(name: &'static str, text: String) -> Result<String, RenderError> {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || render(name, &text))
        .expect("a thread")
        .join()
        .expect("no panic")
}

/// An error that is a template error on line 2 of the file.
fn refused_on_line_2(result: Result<String, RenderError>, what: &str) -> String {
    match result {
        Err(RenderError::Template { line, message, .. }) => {
            assert_eq!(line, 2, "{what}: {message}");
            message
        }
        other => panic!(
            "{what}: expected a template error, got {:.300}",
            format!("{other:?}")
        ),
    }
}

#[test]
fn calls_that_would_build_a_huge_value_are_refused_before_they_run() {
    let j2 = [
        "{{ 'x' | indent(1000000000) }}",
        "{{ ('x\\n' * 1000) | indent(100000) }}",
        "{{ range(1000) | batch(1000000000, 'x') | list }}",
        "{{ range(1000) | slice(1000000000, 'x') | list }}",
        "{{ {'a': [1, 2]} | tojson(indent=1000000000) }}",
        "{{ '%1000000000s' | format('x') }}",
        "{{ ('x' * 100000) | replace('', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}",
        "{{ (['x' * 100000] * 100) | join(',') }}",
        "{{ ([1] * 1000000000) | list | length }}",
        "{{ ([1] * 1000000000) | sort }}",
    ];
    for t in j2 {
        let message = refused_on_line_2(
            render_on_small_stack("10-a.yaml.j2", format!("a: 1\n{t}\n")),
            t,
        );
        assert!(message.contains("MiB"), "{t}: {message}");
    }
    let tf = [
        "${indent(1000000000, \"x\")}",
        "${format(\"%1000000000s\", \"x\")}",
        "${join(\",\", [for x in range(10): x])}",
    ];
    for t in &tf[..2] {
        let message = refused_on_line_2(
            render_on_small_stack("10-a.yaml.tftpl", format!("a: 1\n{t}\n")),
            t,
        );
        assert!(message.contains("MiB"), "{t}: {message}");
    }
}

#[test]
fn values_grown_in_a_loop_stop_at_the_budget() {
    let cases = [
        // A string doubled in a loop through a namespace.
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
        // A list doubled through a macro's recursion.
        "{% macro d(l, n) %}{{ d(l + l, n - 1) if n else l | length }}{% endmacro %}{{ d([1], 60) }}",
        // A dict copied and grown by one key per step: quadratic work.
        "{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = dict(ns.d, **{('k' ~ i): i}) %}{% endfor %}{{ ns.d | length }}",
        // A string grown by one character per step, copied each time.
        "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}{{ ns.s | length }}",
    ];
    let doubling_sets = (0..40).map(|_| "{% set s = s ~ s %}").collect::<String>();
    let straight = format!("{{% set s = 'x' %}}{doubling_sets}{{{{ s | length }}}}");
    // Doubled without a loop, one set after the other.
    for t in cases.iter().map(|c| c.to_string()).chain([straight]) {
        let result = render_on_small_stack("10-a.yaml.j2", format!("a: 1\n{t}\n"));
        let Err(RenderError::Template { message, .. }) = result else {
            panic!(
                "{t}: expected a template error, got {:.300}",
                format!("{result:?}")
            );
        };
        assert!(message.contains("MiB"), "{t}: {message}");
    }
}

#[test]
fn long_expressions_are_refused_not_a_stack_overflow() {
    let n = 100_000;
    let chains = [
        format!("1{}", "+1".repeat(n)),
        format!("'x'{}", "|upper".repeat(n)),
        format!("{}true", "not ".repeat(n)),
        format!("node{}", ".a".repeat(n)),
        format!("'a'{}", "~'a'".repeat(n)),
        format!("{}1{}", "(".repeat(n), ")".repeat(n)),
        format!("{}1{}", "[".repeat(n), "]".repeat(n)),
    ];
    for c in &chains {
        let message = refused_on_line_2(
            render_on_small_stack("10-a.yaml.j2", format!("a: 1\n{{{{ {c} }}}}\n")),
            &c[..20],
        );
        assert!(
            message.contains("more than") || message.contains("deeper"),
            "{message}"
        );
        let tf = c.replace(['~', '|'], "+").replace("not ", "!");
        let message = refused_on_line_2(
            render_on_small_stack("10-a.yaml.tftpl", format!("a: 1\n${{{tf}}}\n")),
            &tf[..20],
        );
        assert!(
            message.contains("more than") || message.contains("deeper"),
            "{message}"
        );
    }
    // Just within the limits, each renders or fails cleanly on a small stack.
    let within = [
        format!("1{}", "+1".repeat(30)),
        format!("'x'{}", "|upper".repeat(250)),
        "node.tags".to_owned(),
        format!("{}1{}", "(".repeat(60), ")".repeat(60)),
        format!("{}true", "not ".repeat(250)),
        format!("1{}", " - 1".repeat(250)),
    ];
    for c in &within {
        let _ = render_on_small_stack("10-a.yaml.j2", format!("a: 1\n{{{{ {c} }}}}\n"));
        let tf = c.replace('|', "+").replace("not ", "!");
        let _ = render_on_small_stack("10-a.yaml.tftpl", format!("a: 1\n${{{tf}}}\n"));
    }
}

#[test]
fn ordinary_templates_are_untouched_by_the_budget() {
    let out = render(
        "10-a.yaml.j2",
        "{% set ns = namespace(items=[]) %}{% for i in range(200) -%}\n{% set ns.items = ns.items + [i] -%}\n{% endfor -%}\nn: {{ ns.items | length }}\n{% macro m(x) %}{{ x }}{% endmacro %}m: {{ m(hostname) }}\n",
    )
    .unwrap();
    assert_eq!(out, "n: 200\nm: talos-controlplane-01\n");
}

#[test]
fn multiplication_keeps_its_meaning_and_refuses_huge_repetitions() {
    let out = render(
        "10-a.yaml.j2",
        "a: {{ 3 * 4 }} {{ 'ab' * 3 }} {{ ([1, 2] * 2) | join(',') }} {{ 2.5 * 2 }} {{ -2 * 3 ** 2 }} {{ 7 // 2 * 3 }}\n",
    )
    .unwrap();
    assert_eq!(out, "a: 12 ababab 1,2,1,2 5.0 -18 9\n");
    let out = render("10-a.yaml.tftpl", "a: ${3 * 4} ${length([1, 2] * 2)}\n").unwrap();
    assert_eq!(out, "a: 12 4\n");
    for t in [
        "{{ ('x' * 100000000) | length }}",
        "{{ '' ~ ([1] * 1000000000) }}",
        "{{ 5 in [1] * 1000000000 }}",
        "{{ ([1] * 1000000000) == ([1] * 1000000000) }}",
        "{% for i in [1] * 1000000000 %}{% endfor %}",
    ] {
        let message = refused_on_line_2(
            render_on_small_stack("10-a.yaml.j2", format!("a: 1\n{t}\n")),
            t,
        );
        assert!(message.contains("MiB"), "{t}: {message}");
    }
    let message = refused_on_line_2(
        render_on_small_stack("10-a.yaml.tftpl", "a: 1\n${\"x\" * 100000000}\n".into()),
        "tftpl *",
    );
    assert!(message.contains("MiB"), "{message}");
}

/// One statement of a generated template, sized by `n`.
fn budget_step(kind: u8, n: u32) -> String {
    match kind % 10 {
        0 => "{% set s = s ~ s %}".into(),
        1 => format!("{{% set s = s * {n} %}}"),
        2 => "{% set l = l + l %}".into(),
        3 => format!("{{% set s = s | indent({n}) %}}"),
        4 => "{% set s = s | replace('x', s) %}".into(),
        5 => format!("{{% set l = l | batch({n}, 'y') | list %}}"),
        6 => format!("{{% for i in range({n}) %}}{{% set ns.s = ns.s ~ s %}}{{% endfor %}}"),
        7 => "{% set s = l | join(s) %}".into(),
        8 => format!("{{% set l = l * {n} %}}"),
        _ => "{{ s | length }}{{ l | length }}".into(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random mixes of the calls and operators that grow values never make a render build
    /// more than its budget (plus one value, the constant the check runs after) nor write
    /// more than an input file.
    #[test]
    fn generated_templates_stay_within_the_template_budget(
        steps in prop::collection::vec((any::<u8>(), 1u32..2_000_000), 1..24)
    ) {
        let mut text = String::from("a: 1\n{% set s = 'xy' %}{% set l = [1, 2] %}{% set ns = namespace(s='') %}");
        for (kind, n) in &steps {
            text.push_str(&budget_step(*kind, *n));
        }
        text.push('\n');
        let result = render("10-a.yaml.j2", &text);
        let spent = super::super::budget::spent();
        prop_assert!(
            spent <= super::super::budget::work_budget()
                + super::super::budget::value_budget() as u64 * 2,
            "spent {spent}"
        );
        match result {
            Ok(out) => prop_assert!(out.len() as u64 <= talosprov_base::limits::MAX_INPUT_BYTES),
            Err(RenderError::Template { line, .. }) => prop_assert_eq!(line, 2),
            Err(other) => prop_assert!(false, "{:.300}", other.to_string()),
        }
    }
}

#[test]
fn encoding_a_map_with_large_numbers_is_not_mistaken_for_a_wide_indent() {
    let out = render(
        "10-a.yaml.j2",
        "a: '{{ {'vm_id': 100000, 'memory': 4194304} | tojson }}'\nb: {{ node | tojson | length > 0 }}\n",
    )
    .unwrap();
    assert!(out.contains("\"vm_id\":100000}"), "{out}");
}

#[test]
fn guarded_operators_keep_strict_undefined_and_the_place_of_their_errors() {
    for t in [
        "{{ hostnam ~ '-suffix' }}",
        "{{ 1 + undefined_var }}",
        "{{ 'a' * 'b' }}",
        "{{ [1] + 'b' }}",
        "{{ none + 1 }}",
    ] {
        let text = format!("a: 1\nb: 2\n\nc: {t}\n");
        match render("10-a.yaml.j2", &text) {
            Err(RenderError::Template { line, message, .. }) => {
                assert_eq!(line, 4, "{t}: {message}");
                assert!(!message.contains("__talosprov"), "{t}: {message}");
            }
            other => panic!("{t}: expected a template error, got {other:?}"),
        }
    }
}

#[test]
fn a_range_too_long_says_how_long_it_would_be() {
    for (call, count) in [
        ("range(1000000)", "1000000"),
        ("range(5, 200006)", "200001"),
        ("range(0, 1000000000, 7)", "142857143"),
        ("range(10, -999990, -5)", "200000"),
    ] {
        let text = format!("a: 1\n{{% for i in {call} %}}{{% endfor %}}\n");
        match render("10-r.yaml.j2", &text) {
            Err(RenderError::Template { line, message, .. }) => {
                assert_eq!(line, 2, "{message}");
                assert!(
                    message.contains(&format!("would have {count} items, over the 100000")),
                    "{call}: {message}"
                );
            }
            other => panic!("{call}: {other:?}"),
        }
    }
    // Within the limit, nothing changes.
    assert!(render("10-r.yaml.j2", "a: {{ range(3) | list | length }}\n").is_ok());
}

#[test]
fn a_yaml_error_in_a_template_output_is_located_at_the_line_that_wrote_it() {
    let file = Path::new("patches/common/10-nics.yaml.j2");
    let mut r = Renderer::new();
    // The parser stops at the first item's `dhcp: a: b`: output line 5, written by line 6.
    let text = "machine:\n  network:\n    interfaces:\n{% for n in ['eth0', 'eth1'] %}\n      - interface: {{ n }}\n        dhcp: a: b\n{% endfor %}\n";
    r.add(file, PatchKind::Jinja, text).unwrap();
    match r.render_documents(file, &vars()) {
        Err(RenderError::Yaml {
            rendered, origin, ..
        }) => {
            assert!(rendered);
            assert_eq!(origin, Some(6));
        }
        other => panic!("{other:?}"),
    }
}
