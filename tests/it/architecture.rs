//! The workspace's architecture, checked: the pure crates depend on no async
//! runtime, HTTP or gRPC stack and does no I/O of its own, and the `talosprov`
//! binary does not link the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::fixtures::repo;

/// A TOML file of the workspace, parsed.
fn read_toml(path: &Path) -> toml::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The normal (linked) dependency names of each workspace member, by package
/// name, from its `Cargo.toml`: `[dependencies]` and
/// `[target.*.dependencies]`, not dev- or build-dependencies.
fn members() -> BTreeMap<String, BTreeSet<String>> {
    let root = repo();
    let mut dirs = vec![root.to_path_buf()];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(entry.unwrap().path());
    }
    let mut out = BTreeMap::new();
    for dir in dirs {
        let manifest = read_toml(&dir.join("Cargo.toml"));
        let Some(name) = manifest
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
        else {
            continue;
        };
        let mut deps = BTreeSet::new();
        let mut tables = vec![manifest.get("dependencies")];
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().map(|t| t.get("dependencies")));
        }
        for table in tables.into_iter().flatten() {
            deps.extend(table.as_table().unwrap().keys().cloned());
        }
        out.insert(name.to_owned(), deps);
    }
    out
}

/// The names of every package `package` links, through normal dependencies
/// only. Workspace members are read from their manifests (so a member's
/// dev-dependencies don't count); everything else from `Cargo.lock`, which
/// lists every platform's dependencies, so the answer is a superset of what
/// any one target links. Reads files only: no `cargo` call, no network.
fn linked(package: &str) -> BTreeSet<String> {
    let members = members();
    let lock = read_toml(&repo().join("Cargo.lock"));
    let mut locked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in lock["package"]
        .as_array()
        .expect("[[package]] in Cargo.lock")
    {
        let deps = locked
            .entry(entry["name"].as_str().unwrap().to_owned())
            .or_default();
        for dep in entry
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
        {
            let dep = dep.as_str().unwrap();
            deps.insert(dep.split(' ').next().unwrap().to_owned());
        }
    }
    assert!(
        members.contains_key(package),
        "no workspace member {package}"
    );
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let deps = members.get(&name).or_else(|| locked.get(&name));
        todo.extend(deps.into_iter().flatten().cloned());
    }
    seen.remove(package);
    seen
}

/// The pure crates, bottom up: every decision that needs no machine, and no I/O.
const PURE: [&str; 8] = [
    "base",
    "statefile",
    "topology",
    "patch",
    "machine",
    "addon",
    "plan",
    "adopt",
];

#[test]
fn the_pure_crates_link_no_runtime_http_or_grpc_stack() {
    for name in PURE {
        let package = format!("talosprov-{name}");
        let linked = linked(&package);
        let forbidden: Vec<&str> = ["tokio", "reqwest", "hyper", "tonic"]
            .into_iter()
            .filter(|f| linked.contains(*f))
            .collect();
        assert!(
            forbidden.is_empty(),
            "{package} must stay free of I/O stacks, but links {forbidden:?}"
        );
    }
    assert!(
        linked("talosprov-base").contains("serde_yaml_ng"),
        "the graph walk found the base's own dependencies"
    );
    assert!(
        !linked("talosprov-base").contains("rcgen")
            && !linked("talosprov-statefile").contains("rcgen"),
        "the vocabulary the clients use does not build the PKI"
    );
}

#[test]
fn the_talosprov_binary_does_not_link_the_simulator() {
    let root = linked("talosprov");
    assert!(root.contains("talosprov-engine"));
    assert!(
        !root.contains("talosprov-sim"),
        "the simulator is a dev-dependency only"
    );
    let engine = linked("talosprov-engine");
    assert!(!engine.contains("talosprov-sim"));
}

#[test]
fn the_crates_that_match_on_changes_addresses_and_presets_refuse_wildcard_arms() {
    // `Change`, `Address` and `Preset` live in the pure crates; the engine and
    // the CLI match on them. With the lint denied, a new kind or preset makes
    // the compiler list every match to extend.
    let roots = PURE
        .iter()
        .map(|c| format!("crates/{c}/src/lib.rs"))
        .chain([
            "crates/engine/src/lib.rs".to_owned(),
            "src/lib.rs".to_owned(),
        ]);
    for root in roots {
        let text = std::fs::read_to_string(repo().join(&root)).unwrap();
        assert!(
            text.lines()
                .any(|l| l.trim() == "#![deny(clippy::wildcard_enum_match_arm)]"),
            "{root} must deny clippy::wildcard_enum_match_arm"
        );
    }
}

/// The kinds' modules in `dir` (a file `x.rs` or a folder `x/mod.rs`),
/// by name, with their text, leaving out the folder's own `mod.rs` and the
/// files that are not a kind.
fn kind_modules(dir: &Path, not_kinds: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let (name, file) = if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, path.join("mod.rs"))
        } else {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, path)
        };
        if name == "mod" || not_kinds.contains(&name.as_str()) {
            continue;
        }
        out.insert(name, std::fs::read_to_string(&file).unwrap());
    }
    out
}

#[test]
fn each_resource_kind_is_one_module_behind_one_trait_with_its_step_in_the_engine() {
    let core = kind_modules(
        &repo().join("crates/plan/src/kind"),
        &["resource", "dispatch"],
    );
    let engine = kind_modules(&repo().join("crates/engine/src/apply/kind"), &[]);
    assert!(core.len() >= 8, "{:?}", core.keys());
    for (name, text) in &core {
        assert!(
            text.contains("impl ResourceKind for "),
            "plan/kind/{name} does not implement ResourceKind"
        );
        assert!(
            engine.contains_key(name),
            "plan/kind/{name} has no step in crates/engine/src/apply/kind"
        );
    }
    for name in engine.keys() {
        assert!(
            core.contains_key(name),
            "apply/kind/{name} is the step of no kind in crates/plan/src/kind"
        );
    }
    // The dispatch names every kind: adding one to `Op` makes the compiler
    // ask for its arms there.
    let dispatch =
        std::fs::read_to_string(repo().join("crates/plan/src/kind/dispatch.rs")).unwrap();
    for text in core.values() {
        let kind = text
            .split("impl ResourceKind for ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .unwrap();
        assert!(
            dispatch.contains(&format!("{kind}::action(")),
            "{kind} is not in kind/dispatch.rs"
        );
    }
}

/// What only the engine does, and the words that give it away in a verb
/// file: waiting on a signal or a channel, racing futures, holding the
/// lock, opening the state.
const ENGINE_WORK: [&str; 6] = [
    "tokio::select!",
    "wait_for(",
    "StateStore",
    ".load().await",
    ".save(",
    "tokio::time::",
];

#[test]
fn each_verb_file_parses_resolves_calls_the_engine_and_renders() {
    let cli = repo().join("src/cli");
    // The two files that are the CLI's edge, not verbs: the frontend the
    // engine talks to, and the signal handlers it delivers.
    let edges = ["frontend.rs", "signals.rs"];
    let mut found = Vec::new();
    for file in rust_files(&cli) {
        let name = file
            .strip_prefix(&cli)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if edges.contains(&name.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = code_only(&text);
        for (n, line) in code.lines().enumerate() {
            for word in ENGINE_WORK {
                if line.contains(word) {
                    found.push(format!("src/cli/{name}:{}: {word}", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a verb file does the engine's work; move it into talosprov_engine::command:\n{}",
        found.join("\n")
    );
}

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_pure_crates_read_no_file_environment_clock_or_entropy() {
    // Its unit tests may (tempfile, say): only the code before a file's first
    // `#[cfg(test)]` is checked, without its comments.
    const FORBIDDEN: [&str; 14] = [
        "std::fs",
        "std::env",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "std::process",
        "File::open",
        "SystemTime::now",
        "Instant::now",
        "now_utc",
        "thread_rng",
        "OsRng",
        "from_entropy",
        "tokio::",
    ];
    let files: Vec<std::path::PathBuf> = PURE
        .iter()
        .flat_map(|c| rust_files(&repo().join(format!("crates/{c}/src"))))
        .collect();
    let mut found = Vec::new();
    for file in &files {
        if file.to_string_lossy().ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!("{}:{}: {f}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the pure crates take files, the environment, the clock and randomness from their \
         caller:\n{}",
        found.join("\n")
    );
    assert!(files.len() > 100, "the walk found the pure crates' files");
}

/// Rust source with comments removed and every string and char literal
/// emptied, so that only code is searched for paths. Line breaks inside a
/// removed comment or literal are kept (after it), so that line numbers hold.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            i += 2;
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            push_line_breaks(&mut out, &b[start..i.min(b.len())]);
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && !ident_char(prev(&b, i)) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            push_line_breaks(&mut out, &b[i..j.min(b.len())]);
            i = j;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            push_line_breaks(&mut out, &b[start..i.min(b.len())]);
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < b.len() && b[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && b.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// One `\n` for each line break in `removed`.
fn push_line_breaks(out: &mut String, removed: &[char]) {
    out.extend(removed.iter().filter(|c| **c == '\n'));
}

fn prev(b: &[char], i: usize) -> char {
    if i == 0 { ' ' } else { b[i - 1] }
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of a `use` tree, braces expanded: `a::{b, c::{d, e as f}}` gives
/// `a::b`, `a::c::d` and `a::c::e as f`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        return vec![tree.trim().to_owned()];
    };
    let prefix = &tree[..open];
    let body = tree[open + 1..].trim_end().trim_end_matches('}');
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use(&format!("{prefix}{p}")))
        .collect()
}

/// One crate's module files: module path (`["plan", "diff"]`) to file.
type Modules = BTreeMap<Vec<String>, std::path::PathBuf>;

fn modules(src: &Path) -> Modules {
    let mut out = Modules::new();
    for file in rust_files(src) {
        let rel = file.strip_prefix(src).expect("under src");
        if rel.starts_with("bin") {
            continue; // binaries are crates of their own
        }
        let mut parts: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("lib" | "main" | "mod")
        ) {
            parts.pop();
        }
        out.insert(parts, file);
    }
    out
}

/// A path written in module `here` made absolute within the crate, or `None`
/// for another crate's item. `crate::`, `super::`, `self::` and a child
/// module's name are this crate's.
fn absolute(here: &[String], path: &str, modules: &Modules) -> Option<Vec<String>> {
    let path = path.split(" as ").next().unwrap_or(path);
    let mut segs: Vec<&str> = path.split("::").map(str::trim).collect();
    if segs.last() == Some(&"self") {
        segs.pop();
    }
    let first = *segs.first()?;
    let (base, rest) = match first {
        "crate" => (Vec::new(), &segs[1..]),
        "super" => {
            let mut base = here.to_vec();
            let ups = segs.iter().take_while(|s| **s == "super").count();
            for _ in 0..ups {
                base.pop();
            }
            (base, &segs[ups..])
        }
        "self" => (here.to_vec(), &segs[1..]),
        child => {
            let mut candidate = here.to_vec();
            candidate.push(child.to_owned());
            if !modules.contains_key(&candidate) {
                return None;
            }
            (here.to_vec(), &segs[..])
        }
    };
    let mut full = base;
    full.extend(rest.iter().map(|s| (*s).to_owned()));
    Some(full)
}

/// Every `use` tree of a source (code only), expanded, with whether it is a
/// re-export (`pub use`, `pub(crate) use`, ...).
fn use_paths(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(k) = rest.find("use ") {
        let before = &rest[..k];
        let at_word = before.chars().last().is_none_or(|c| !ident_char(c));
        let after = &rest[k + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if at_word {
            let line_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |p| p + 1);
            let is_pub = before[line_start..].trim_start().starts_with("pub");
            for p in expand_use(&after[..end]) {
                out.push((is_pub, p));
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out
}

/// Every path in code that starts at `crate`, `super` or `self`, or at a word
/// followed by `::` (a child module is told apart by the caller).
fn code_paths(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if ident_char(chars[i]) && (i == 0 || !(ident_char(chars[i - 1]) || chars[i - 1] == ':')) {
            let mut j = i;
            let mut path = String::new();
            loop {
                let start = j;
                while j < chars.len() && ident_char(chars[j]) {
                    j += 1;
                }
                path.extend(&chars[start..j]);
                if chars.get(j) == Some(&':')
                    && chars.get(j + 1) == Some(&':')
                    && chars.get(j + 2).is_some_and(|c| ident_char(*c))
                {
                    path.push_str("::");
                    j += 2;
                } else {
                    break;
                }
            }
            if path.contains("::") {
                out.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The file a path written as `full` names: its longest module prefix, as
/// written (a re-export would be followed by nothing: there are none, see
/// [`no_item_is_re_exported`]).
fn named_file(full: &[String], modules: &Modules) -> Option<Vec<String>> {
    let k = (0..=full.len())
        .rev()
        .find(|k| modules.contains_key(&full[..*k]))?;
    Some(full[..k].to_vec())
}

/// The import graph of one crate's files: file to the files its paths name,
/// as they are written. Test modules (after a file's first `#[cfg(test)]`)
/// are not counted.
fn import_graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let modules = modules(src);
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, f) in &modules {
        let text = std::fs::read_to_string(f).expect("source");
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code = code_only(text);
        let paths = use_paths(&code)
            .into_iter()
            .map(|(_, p)| p)
            .chain(code_paths(&code));
        for path in paths {
            let Some(full) = absolute(m, &path, &modules) else {
                continue;
            };
            if let Some(target) = named_file(&full, &modules)
                && &target != m
            {
                graph.entry(m.clone()).or_default().insert(target);
            }
        }
    }
    graph
}

/// The strongly connected components with more than one file (Tarjan).
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        found: Vec<Vec<Vec<String>>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Every crate's source folder: the workspace members' and the binary's.
fn source_folders() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates") {
        let src = entry.expect("entry").path().join("src");
        if src.is_dir() {
            out.push(src);
        }
    }
    out.sort();
    out
}

#[test]
fn no_item_is_re_exported() {
    // One spelling per item: each is imported from the module that defines
    // it, so the import graph as written is the real one.
    let mut found = Vec::new();
    for src in source_folders() {
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).expect("source");
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (is_pub, path) in use_paths(&code_only(text)) {
                if is_pub {
                    found.push(format!("{}: pub use {path}", file.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "re-exports (import each item from the module that defines it):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_cycle_spelled_through_a_facade_module_is_found() {
    // machine/mod.rs re-exports from its submodule and from version.rs;
    // schematic.rs imports `crate::machine::Version` as written, though
    // version.rs defines it. As written, the files go round (a graph that
    // followed the re-export would see schematic -> version, and no cycle).
    let dir = tempfile::tempdir().expect("dir");
    let src = dir.path();
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    };
    write(
        "lib.rs",
        "pub mod machine;\npub mod schematic;\npub mod version;\n",
    );
    write(
        "machine/mod.rs",
        "pub mod config;\npub use config::f;\npub use crate::version::Version;\n",
    );
    write(
        "machine/config.rs",
        "use crate::schematic::Schematic;\npub fn f(_: Schematic) {}\n",
    );
    write(
        "schematic.rs",
        "use crate::machine::Version;\npub struct Schematic(pub Version);\n",
    );
    write("version.rs", "pub struct Version;\n");
    let files = import_graph(src);
    let found = cycles(&files);
    assert_eq!(
        found,
        vec![vec![
            vec!["machine".to_owned()],
            vec!["machine".to_owned(), "config".to_owned()],
            vec!["schematic".to_owned()],
        ]],
        "{files:?}"
    );
    assert!(!cycles(&module_graph(&files)).is_empty(), "and the modules");
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let mut found = Vec::new();
    let mut files = 0;
    for src in source_folders() {
        let graph = import_graph(&src);
        files += graph.len();
        for component in cycles(&graph) {
            let names: Vec<String> = component
                .iter()
                .map(|m| format!("{}::{}", src.display(), m.join("::")))
                .collect();
            found.push(names.join(" <-> "));
        }
    }
    assert!(
        files > 100,
        "the walk found the workspace's files ({files})"
    );
    assert!(
        found.is_empty(),
        "files that import each other (move the shared item into a module that imports none \
         of them):\n{}",
        found.join("\n")
    );
}

/// One crate's import graph folded onto its top-level modules (`plan`,
/// `topology`, ...): an edge from one to another when any file of the first
/// imports a file of the second. A crate root's own items (`lib.rs`) are the
/// module `""`.
fn module_graph(
    files: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let top = |m: &Vec<String>| vec![m.first().cloned().unwrap_or_default()];
    let mut graph: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in files {
        for to in targets {
            let (a, b) = (top(from), top(to));
            if a != b {
                graph.entry(a).or_default().insert(b);
            }
        }
    }
    graph
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for src in source_folders() {
        let graph = module_graph(&import_graph(&src));
        for component in cycles(&graph) {
            let names: Vec<String> = component.iter().map(|m| m.join("::")).collect();
            found.push(format!("{}: {}", src.display(), names.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "top-level modules that import each other, through any of their files (move what \
         they share into a module below both, or into its own crate):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_module_check_folds_files_onto_their_top_level_module() {
    let edge = |a: &[&str], b: &[&str]| {
        (
            a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
            b.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
        )
    };
    let mut files: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    // No two files import each other, but plan and topology do.
    for (a, b) in [
        edge(&["plan", "diff"], &["topology", "model"]),
        edge(&["topology", "validate"], &["plan", "model"]),
        edge(&["plan", "model"], &["plan", "util"]),
    ] {
        files.entry(a).or_default().insert(b);
    }
    assert!(cycles(&files).is_empty());
    let modules = module_graph(&files);
    assert_eq!(
        cycles(&modules),
        vec![vec![vec!["plan".to_owned()], vec!["topology".to_owned()]]]
    );
}

#[test]
fn the_cycle_check_sees_use_trees_child_paths_and_paths_as_written() {
    assert_eq!(
        expand_use("super::{a::{B, c}, d as e, self}"),
        ["super::a::B", "super::a::c", "super::d as e", "super::self"]
    );
    let code = code_only("let s = \"crate::x::y\"; // crate::z\nlet c = '\"'; child::run();");
    assert_eq!(code_paths(&code), ["child::run"]);
    let dir = tempfile::tempdir().expect("dir");
    let src = dir.path();
    std::fs::create_dir_all(src.join("plan")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "pub mod plan;\n").expect("write");
    // Paths count as written: b naming `crate::plan::A` names the facade,
    // which re-exports a's item, so the facade is part of the round.
    std::fs::write(
        src.join("plan/mod.rs"),
        "mod a;\nmod b;\npub use a::A;\npub struct Defined;\n",
    )
    .expect("write");
    std::fs::write(src.join("plan/a.rs"), "use super::b::B;\npub struct A;\n").expect("write");
    std::fs::write(
        src.join("plan/b.rs"),
        "use crate::plan::A;\npub struct B;\n",
    )
    .expect("write");
    let graph = import_graph(src);
    let found = cycles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].len(),
        3,
        "a, b and the facade they go through: {found:?}"
    );
    // b using an item mod.rs defines while a uses nothing: no cycle.
    std::fs::write(src.join("plan/a.rs"), "pub struct A;\n").expect("write");
    std::fs::write(
        src.join("plan/b.rs"),
        "use super::Defined;\npub struct B;\n",
    )
    .expect("write");
    assert!(cycles(&import_graph(src)).is_empty());
    std::fs::write(
        src.join("plan/mod.rs"),
        "mod a;\nmod b;\npub use a::A;\npub struct Defined;\nfn f() { b::g(); }\n",
    )
    .expect("write");
    std::fs::write(
        src.join("plan/b.rs"),
        "use super::Defined;\npub fn g() {}\n",
    )
    .expect("write");
    assert_eq!(
        cycles(&import_graph(src)).len(),
        1,
        "mod.rs calls b, b uses mod.rs"
    );
}

/// The longest a non-test function may be, in lines from its `fn` line to
/// its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

/// The index of the brace closing the one at `open` in `code` (`code`'s
/// length when unbalanced).
fn closing_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` (from [`code_only`]) with every item marked `#[cfg(test)]` blanked
/// out, line breaks kept.
fn without_test_items(code: &str) -> Vec<char> {
    const MARK: &str = "#[cfg(test)]";
    let mut chars: Vec<char> = code.chars().collect();
    let mark: Vec<char> = MARK.chars().collect();
    let mut i = 0;
    while i + mark.len() <= chars.len() {
        if chars[i..i + mark.len()] != mark[..] {
            i += 1;
            continue;
        }
        let body = (i..chars.len()).find(|k| chars[*k] == '{' || chars[*k] == ';');
        let end = match body {
            Some(k) if chars[k] == '{' => closing_brace(&chars, k),
            Some(k) => k,
            None => chars.len() - 1,
        };
        let last = end.min(chars.len() - 1);
        for c in &mut chars[i..=last] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = end + 1;
    }
    chars
}

/// Every function with a body in `code` (from [`code_only`], test items
/// already removed): its name, its `fn` line (1-based) and its length in
/// lines from that line to its closing brace.
fn function_lengths(code: &[char]) -> Vec<(String, usize, usize)> {
    let line_of = |k: usize| code[..k].iter().filter(|c| **c == '\n').count() + 1;
    let mut out = Vec::new();
    for k in 0..code.len().saturating_sub(2) {
        let keyword = code[k] == 'f'
            && code[k + 1] == 'n'
            && code[k + 2].is_whitespace()
            && (k == 0 || !ident_char(code[k - 1]));
        if !keyword {
            continue;
        }
        let name_start = (k + 2..code.len()).find(|j| !code[*j].is_whitespace());
        let Some(name_start) = name_start.filter(|j| ident_char(code[*j])) else {
            continue;
        };
        let name: String = code[name_start..]
            .iter()
            .take_while(|c| ident_char(**c))
            .collect();
        // The body opens at the first `{` outside the signature's
        // parentheses and brackets; a `;` there first means no body.
        let mut depth = 0i32;
        let mut open = None;
        for (j, c) in code.iter().enumerate().skip(name_start) {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' if depth <= 0 => {
                    open = Some(j);
                    break;
                }
                ';' if depth <= 0 => break,
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let close = closing_brace(code, open).min(code.len() - 1);
        let first = line_of(k);
        out.push((name, first, line_of(close) - first + 1));
    }
    out
}

#[test]
fn no_function_is_longer_than_a_screen() {
    let mut found = Vec::new();
    let mut functions = 0;
    for src in source_folders() {
        for file in rust_files(&src) {
            if file.to_string_lossy().ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("source");
            let code = without_test_items(&code_only(&text));
            for (name, line, length) in function_lengths(&code) {
                functions += 1;
                if length > MAX_FUNCTION_LINES {
                    found.push(format!(
                        "{}:{line}: {name} is {length} lines",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        functions > 1000,
        "the walk found the workspace's functions ({functions})"
    );
    assert!(
        found.is_empty(),
        "functions longer than {MAX_FUNCTION_LINES} lines (split them along their steps, each \
         part named for what it does):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_length_check_counts_from_fn_to_its_brace_and_skips_tests() {
    let text = "\
pub fn short() -> [u8; 2] {
    let s = \"}\n}\";
    [0, 1]
}
trait T {
    fn declared(&self);
}
/* fn in_a_comment() {
} */
#[cfg(test)]
mod tests {
    fn long_test() {
    }
}
async fn generic<F: Fn(u8) -> u8>(f: F)
where
    F: Send,
{
    // }
}
";
    let code = without_test_items(&code_only(text));
    assert_eq!(code.len(), code_only(text).chars().count());
    let found = function_lengths(&code);
    assert_eq!(
        found,
        [("short".to_owned(), 1, 5), ("generic".to_owned(), 16, 6)],
        "{found:?}"
    );
}

/// What each crate may depend on, as README.md's crate table says it (its
/// "Architecture" section): package name to workspace packages.
fn architecture_table() -> BTreeMap<String, BTreeSet<String>> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## Architecture\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README.md has an Architecture section");
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `talosprov")) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let name = cells[0].split('`').nth(1).expect("a crate name").to_owned();
        let deps: BTreeSet<String> = match cells.last().map(|c| c.trim()) {
            Some("nothing") | None => BTreeSet::new(),
            Some(list) => list
                .split(", ")
                .map(|d| format!("talosprov-{}", d.trim()))
                .collect(),
        };
        out.insert(name, deps);
    }
    out
}

#[test]
fn each_crate_depends_only_on_what_the_readme_table_lets_it() {
    let allowed = architecture_table();
    let members = members();
    let mut wrong = Vec::new();
    for (name, deps) in &members {
        let Some(ok) = allowed.get(name.as_str()) else {
            wrong.push(format!("{name} has no row in README.md's crate table"));
            continue;
        };
        for dep in deps.iter().filter(|d| d.starts_with("talosprov")) {
            if !ok.contains(dep) {
                wrong.push(format!("{name} depends on {dep}"));
            }
        }
    }
    for name in allowed.keys().filter(|n| !members.contains_key(*n)) {
        wrong.push(format!(
            "README.md's crate table names {name}, which is no member"
        ));
    }
    assert!(
        wrong.is_empty(),
        "dependencies across layers (README.md, Architecture):\n{}",
        wrong.join("\n")
    );
    // The pure crates each use only those below them.
    for (i, name) in PURE.iter().enumerate() {
        let row = &allowed[&format!("talosprov-{name}")];
        let below: BTreeSet<String> = PURE[..i].iter().map(|c| format!("talosprov-{c}")).collect();
        assert!(
            row.is_subset(&below),
            "talosprov-{name} may use only the crates below it: {row:?}"
        );
    }
}
