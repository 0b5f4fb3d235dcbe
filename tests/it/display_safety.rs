//! The human views never panic on a user's string and never pass its control
//! characters to the terminal: arbitrary strings (very long ones, escapes,
//! line breaks, bidirectional overrides, wide CJK) fed to the validate
//! summary, the plan, the diagnostics, the progress lines and the node table;
//! and the real binary on a topology whose add-on URL is 65,536 characters
//! long (once a `format!` width beyond `u16::MAX`: exit 101).

use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;
use talosprov::ui::cell::{MAX_CELL_CHARS, MAX_LINE_CHARS};
use talosprov::ui::{diagnostics, lines, plan, progress, summary};
use talosprov_base::diagnostics::{Code, Diagnostic, Pos};
use talosprov_base::kube_node::KubeNode;
use talosprov_engine::apply::event::{Event, EventKind, Update};
use talosprov_patch::discover::{PatchFile, PatchKind, PatchLevel};
use talosprov_plan::change::{Action, FieldChange};
use talosprov_plan::example;
use talosprov_plan::field::VmField;
use talosprov_plan::model::{Drift, DriftKind, Plan, PlanWarning};
use talosprov_statefile::address::Address;
use talosprov_topology::model::{AddonSource, Environment, Topology};
use talosprov_topology::parse;

use crate::support::cli::{stderr, stdout, talosprov};

/// The longest line a view may print: a free-text line at its bound, with
/// its `… (N more characters)` and the view's own words around it.
const MAX_SHOWN_LINE: usize = MAX_LINE_CHARS + 200;

/// The invisible characters that reorder the text around them.
const BIDI: [std::ops::RangeInclusive<char>; 2] =
    ['\u{202a}'..='\u{202e}', '\u{2066}'..='\u{2069}'];

/// The colour codes the diagnostics view writes itself.
const COLOURS: [&str; 4] = ["\x1b[1;31m", "\x1b[1;33m", "\x1b[1m", "\x1b[0m"];

const PIECES: &[&str] = &[
    "\x1b[2J",
    "\x1b]0;title\x07",
    "\r",
    "\n",
    "\r\n",
    "\t",
    "\0",
    "\u{7f}",
    "\u{85}",
    "\u{9b}31m",
    "\u{202a}",
    "\u{202e}",
    "\u{2066}",
    "\u{2069}",
    "\u{200f}",
    "日本語",
    "한국어",
    "é",
    "e\u{301}",
    "a",
    "-",
    " ",
    "{}",
    "{:<99999}",
    "%s",
];

/// Strings that have broken terminals and formatters: arbitrary Unicode,
/// runs of the tricky pieces above, and runs of 65,536 to 100,000 characters.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat()),
        (prop::sample::select(PIECES), 65_536usize..100_001).prop_map(|(p, n)| {
            let mut s: String = p.chars().cycle().take(n).collect();
            s.push_str("end");
            s
        }),
    ]
}

/// Panics unless `text` is safe to print: no control character but line
/// breaks (and `allowed` sequences, the view's colours), no bidirectional
/// formatting character, no line longer than `max` characters.
fn assert_safe(view: &str, text: &str, allowed: &[&str], max: usize) {
    let mut stripped = text.to_owned();
    for a in allowed {
        stripped = stripped.replace(a, "");
    }
    for c in stripped.chars() {
        assert!(
            c == '\n' || !(c.is_control() || BIDI.iter().any(|r| r.contains(&c))),
            "{view}: raw {c:?} in the output"
        );
    }
    for l in stripped.lines() {
        let n = l.chars().count();
        assert!(n <= max, "{view}: a line of {n} characters");
    }
}

/// The minimal valid topology, with one URL add-on.
fn topology() -> Topology {
    let text = format!(
        "{}addons:\n  cert-approver:\n    url: https://example.test/a.yaml\n    sha256: {}\n",
        include_str!("../fixtures/valid/minimal.yaml"),
        "a".repeat(64)
    );
    let loaded = parse(&text, Path::new("cluster.yaml"), &Environment::default());
    loaded
        .topology
        .unwrap_or_else(|| panic!("valid: {:?}", loaded.diagnostics))
}

fn summary_of(values: &[String; 4]) -> String {
    let [url, hostname, path, name] = values;
    let mut t = topology();
    for a in t.addons.values_mut() {
        a.source = AddonSource::Url {
            url: url.clone(),
            sha256: "a".repeat(64),
        };
        a.name.clone_from(name);
        a.depends_on = vec![hostname.clone()];
    }
    t.nodes[0].hostname.clone_from(hostname);
    t.cluster.install_disk.clone_from(name);
    let patches = vec![(
        hostname.clone(),
        vec![PatchFile {
            path: PathBuf::from(path),
            kind: PatchKind::Literal,
            level: PatchLevel::Node,
            len: 0,
        }],
    )];
    let ignored = vec![PathBuf::from(path)];
    let diags = vec![Diagnostic::warning(
        Code::EvenControlplanes,
        Path::new(path),
        name,
    )];
    let report = summary::ValidateReport {
        file: Path::new(path),
        topology: Some(&t),
        patches: &patches,
        ignored: &ignored,
        diagnostics: &diags,
    };
    summary::summary_text(&report)
}

fn plan_of(values: &[String; 4]) -> String {
    let [a, b, c, d] = values;
    let mut change = example::change(Address::Vm(a.clone()), Action::Update, b.clone())
        .expect("an update of a VM");
    change.fields = vec![FieldChange::new(
        VmField::MemoryMib,
        Some(c.clone()),
        Some(d.clone()),
    )];
    let mut config = example::change(Address::Config(b.clone()), Action::ApplyConfig, c.clone())
        .expect("a config to apply");
    config.config_diff = Some(format!("--- a\n+++ b\n-{d}\n+{a}\n"));
    let p = Plan {
        changes: vec![change, config],
        drift: vec![Drift {
            address: Address::Vm(c.clone()),
            kind: DriftKind::Changed,
            diff: None,
            fields: vec![FieldChange::new(VmField::Cores, Some(a.clone()), None)],
        }],
        warnings: vec![PlanWarning {
            address: Some(Address::Config(d.clone())),
            message: a.clone(),
        }],
        ..Plan::of_changes(Vec::new())
    };
    plan::render(&p)
}

fn diagnostics_of(values: &[String; 4], colour: bool) -> String {
    let [message, path, node, field] = values;
    let d = vec![
        Diagnostic::error(Code::DuplicateIp, Path::new(path), message.as_str())
            .at(Pos::new(3, 7))
            .on_node(Some(node.as_str()))
            .field(field.as_str()),
        Diagnostic::warning(Code::EvenControlplanes, Path::new(node), field.as_str()),
    ];
    diagnostics::render_all(&d, colour)
}

/// The plain progress view's lines for events carrying the values.
fn progress_of(values: &[String; 4]) -> String {
    let [a, b, c, d] = values;
    let address = Address::Config(a.clone());
    let kinds = [
        EventKind::Started {
            action: Action::ApplyConfig,
        },
        EventKind::Progress { what: b.clone() },
        EventKind::Warning { message: c.clone() },
        EventKind::Skipped { reason: d.clone() },
        EventKind::Failed { message: b.clone() },
    ];
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for kind in kinds {
        tx.send(Update::Step(Event {
            address: address.clone(),
            kind,
            elapsed: Duration::from_secs(3),
        }))
        .expect("send");
    }
    drop(tx);
    let mut out: Vec<u8> = Vec::new();
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(progress::plain(rx, &mut out, Duration::from_secs(3600)));
    String::from_utf8(out).expect("UTF-8")
}

fn node_table_of(values: &[String; 4]) -> String {
    let [a, b, c, d] = values;
    let node = |name: &String, version: &String, gpus: u64| KubeNode {
        name: name.clone(),
        internal_ip: None,
        ready: gpus == 0,
        reason: c.clone(),
        control_plane: gpus == 0,
        kubelet_version: version.clone(),
        gpus,
    };
    lines::node_table(&[node(a, b, 0), node(c, d, 1), node(d, a, 2)])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn views_escape_bound_and_never_panic(
        a in nasty(),
        b in nasty(),
        c in nasty(),
        d in nasty(),
    ) {
        let values = [a, b, c, d];
        assert_safe("summary", &summary_of(&values), &[], MAX_SHOWN_LINE);
        assert_safe("plan", &plan_of(&values), &[], MAX_SHOWN_LINE);
        assert_safe("diagnostics", &diagnostics_of(&values, false), &[], MAX_SHOWN_LINE);
        assert_safe("coloured diagnostics", &diagnostics_of(&values, true), &COLOURS, MAX_SHOWN_LINE);
        assert_safe("progress", &progress_of(&values), &[], MAX_SHOWN_LINE);
        // A table's cells are cut much shorter: five of them and the gaps.
        assert_safe("node table", &node_table_of(&values), &[], 6 * (MAX_CELL_CHARS + 40));
    }
}

#[test]
fn wide_characters_keep_table_columns_aligned() {
    let values = [
        "日本語".to_owned(),
        "v1".to_owned(),
        "ab".to_owned(),
        "v2".to_owned(),
    ];
    let table = node_table_of(&values);
    let at: Vec<usize> = table
        .lines()
        .map(|l| {
            let i = ["NotReady", "Ready", "STATUS"]
                .iter()
                .find_map(|w| l.find(w))
                .expect("status");
            talosprov::ui::cell::width(&l[..i])
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] == w[1]), "{table}");
}

/// A topology in a temporary folder: minimal.yaml plus `extra`, with a
/// patch tree whose `common/` holds `patch`.
fn workspace(extra: &str, patch: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!("{}{extra}", include_str!("../fixtures/valid/minimal.yaml"));
    std::fs::write(dir.path().join("cluster.yaml"), text).expect("write topology");
    let common = dir.path().join("patches/common");
    std::fs::create_dir_all(&common).expect("patch folder");
    std::fs::write(common.join(patch), "machine: {}\n").expect("write patch");
    dir
}

fn validate(dir: &Path) -> std::process::Output {
    talosprov()
        .current_dir(dir)
        .env_remove("PROXMOX_VE_ENDPOINT")
        .env("NO_COLOR", "1")
        .env("TALOSPROV_HELM", "/bin/sh")
        .args(["validate", "-f", "cluster.yaml"])
        .output()
        .expect("run talosprov")
}

#[test]
fn a_65536_character_addon_url_is_validated_without_a_panic() {
    let url = format!("https://example.test/{}", "a".repeat(65_536));
    let extra = format!(
        "addons:\n  approver:\n    url: {url}\n    sha256: {}\n",
        "a".repeat(64)
    );
    let dir = workspace(&extra, "10-kubelet.yaml");
    let out = validate(dir.path());
    let (stdout, stderr) = (stdout(&out), stderr(&out));
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "exit {:?}\nstderr:\n{stderr}",
        out.status.code()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    if out.status.code() == Some(0) {
        assert!(stdout.contains("… (65361 more characters)"), "{stdout}");
    }
    for l in stdout.lines().chain(stderr.lines()) {
        assert!(
            l.chars().count() <= MAX_SHOWN_LINE,
            "a line of {} characters",
            l.len()
        );
    }
}

#[test]
fn escapes_in_values_and_patch_names_reach_the_terminal_escaped() {
    // An add-on URL with escapes (YAML's `\e` is ESC), and a patch file whose
    // name sets the terminal's title: both shown in the summary.
    let extra = format!(
        "addons:\n  approver:\n    url: \"https://example.test/\\u202e\\e[31mx.yaml\"\n    sha256: {}\n",
        "a".repeat(64)
    );
    let dir = workspace(&extra, "10-\x1b]0;pwned\x07.yaml");
    let out = validate(dir.path());
    let (stdout, stderr) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(
        stdout.contains("url https://example.test/\\u{202e}\\x1b[31mx.yaml"),
        "{stdout}"
    );
    assert!(
        stdout.contains("common/10-\\x1b]0;pwned\\x07.yaml"),
        "{stdout}"
    );
    assert_safe("validate stdout", &stdout, &[], MAX_SHOWN_LINE);
    assert_safe("validate stderr", &stderr, &[], MAX_SHOWN_LINE);
}

#[test]
fn escapes_in_an_unknown_key_reach_the_terminal_escaped() {
    let dir = workspace("\"bogus\\e[2J\\r\": 1\n", "10-kubelet.yaml");
    let out = validate(dir.path());
    let stderr = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(stderr.contains("bogus\\x1b[2J\\r"), "{stderr}");
    assert_safe("validate stderr", &stderr, &[], MAX_SHOWN_LINE);
}
