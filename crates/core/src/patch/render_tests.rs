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
        }
        other => panic!("{other:?}"),
    }
    assert!(results[rendered..].iter().all(Result::is_err));
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
