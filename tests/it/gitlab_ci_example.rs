//! The example GitLab pipeline (examples/gitlab-ci/.gitlab-ci.yml): it is
//! well-formed YAML with the jobs, rules and reports it promises, it runs the
//! published image and builds nothing, and every `talosprov` command line in
//! its scripts, in the CI/CD component's (templates/talosprov.yml) and in the
//! project's own pipeline is accepted by the command line parser (run with
//! `--help` appended, which clap handles after every flag).
//!
//! Also the component's interpolation, as GitLab does it at include time
//! (`$[[ inputs.NAME ]]` with the include's inputs over the spec's defaults),
//! which the fleet example's test uses too.

use std::collections::BTreeMap;

use crate::support::cli::BIN;
use crate::support::fixtures::repo;
use serde_yaml_ng::{Mapping, Value};

fn pipeline_text() -> String {
    let path = repo().join("examples/gitlab-ci/.gitlab-ci.yml");
    std::fs::read_to_string(path).expect("read the example pipeline")
}

fn pipeline() -> Value {
    serde_yaml_ng::from_str(&pipeline_text()).expect("the example pipeline is valid YAML")
}

/// The jobs of one include of the component, before their `job_suffix`.
pub(crate) const COMPONENT_JOBS: [&str; 7] = [
    "validate",
    "plan",
    "apply",
    "unlock-plan",
    "unlock-apply",
    "drift",
    "backup",
];

/// The CI/CD component: its `spec:inputs` and its jobs document, not yet
/// interpolated (the two YAML documents of templates/talosprov.yml).
pub(crate) fn component() -> (Mapping, Value) {
    let path = repo().join("templates/talosprov.yml");
    let text = std::fs::read_to_string(path).expect("read the component");
    let (header, jobs) = text
        .split_once("\n---\n")
        .expect("a spec header, then `---`, then the jobs");
    let header: Value = serde_yaml_ng::from_str(header).expect("the spec header is YAML");
    let inputs = header["spec"]["inputs"]
        .as_mapping()
        .expect("spec:inputs")
        .clone();
    let jobs = serde_yaml_ng::from_str(jobs).expect("the jobs document is YAML");
    (inputs, jobs)
}

/// The component's jobs as GitLab adds them to a pipeline that includes it
/// with `given` inputs: each input is the given value, else the spec's
/// default (an input without one must be given).
pub(crate) fn component_jobs(given: &Mapping) -> Mapping {
    let (spec, jobs) = component();
    let mut values = BTreeMap::new();
    for (name, input) in &spec {
        let name = name.as_str().expect("input name").to_owned();
        let value = given
            .get(name.as_str())
            .or_else(|| input.get("default"))
            .unwrap_or_else(|| panic!("the mandatory input {name} is not given"))
            .clone();
        values.insert(name, value);
    }
    for name in given.keys() {
        let name = name.as_str().expect("input name");
        assert!(
            values.contains_key(name),
            "the include gives an undeclared input {name}"
        );
    }
    interpolate(&jobs, &values)
        .as_mapping()
        .expect("the jobs are a mapping")
        .clone()
}

/// `$[[ inputs.NAME ]]` replaced as GitLab does: a value that is the block
/// alone becomes the input's value with its type (an array stays an array);
/// a block inside a longer string becomes the value's text. Keys too.
pub(crate) fn interpolate(value: &Value, inputs: &BTreeMap<String, Value>) -> Value {
    match value {
        Value::String(s) => interpolate_str(s, inputs),
        Value::Sequence(items) => items.iter().map(|v| interpolate(v, inputs)).collect(),
        Value::Mapping(map) => Value::Mapping(
            map.iter()
                .map(|(k, v)| (interpolate(k, inputs), interpolate(v, inputs)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn interpolate_str(s: &str, inputs: &BTreeMap<String, Value>) -> Value {
    let lookup = |block: &str| -> Value {
        let name = block
            .trim()
            .strip_prefix("inputs.")
            .unwrap_or_else(|| panic!("`$[[{block}]]` names no input"));
        inputs
            .get(name)
            .unwrap_or_else(|| panic!("`$[[{block}]]`: no input {name} in the spec"))
            .clone()
    };
    if let Some(block) = s.strip_prefix("$[[").and_then(|r| r.strip_suffix("]]"))
        && !block.contains("]]")
    {
        return lookup(block);
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("$[[") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("]]").expect("a closing ]]") + start;
        match lookup(&rest[start + 3..end]) {
            Value::String(v) => out.push_str(&v),
            Value::Bool(v) => out.push_str(&v.to_string()),
            Value::Number(v) => out.push_str(&v.to_string()),
            other => panic!("{other:?} interpolated inside the string {s:?}"),
        }
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Value::String(out)
}

/// No input given: the component with its defaults.
fn no_inputs() -> Mapping {
    Mapping::new()
}

/// Every script line of every job (`before_script`, `script`, `after_script`).
fn script_lines(doc: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for (_, job) in doc.as_mapping().expect("top-level mapping") {
        if !job.is_mapping() {
            continue;
        }
        for key in ["before_script", "script", "after_script"] {
            if let Some(Value::Sequence(items)) = job.get(key) {
                for item in items {
                    lines.push(item.as_str().expect("a script line is a string").to_owned());
                }
            }
        }
    }
    lines
}

/// The `talosprov ...` commands in a shell line, each up to the first `|`,
/// `;`, `&&`, `||` or redirection.
fn talosprov_commands(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("talosprov ") {
        let starts_word = at == 0 || rest[..at].ends_with([' ', '(', '{', ';']);
        let tail = &rest[at..];
        let end = ["|", ";", "&&", ")", " 2>", " >", "\n"]
            .iter()
            .filter_map(|stop| tail.find(stop))
            .min()
            .unwrap_or(tail.len());
        if starts_word {
            found.push(tail[..end].trim().to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    found
}

/// Split a command line as the shell would after expanding `${VAR}` to a
/// placeholder value; double quotes group.
fn words(command: &str) -> Vec<String> {
    let mut expanded = command.to_owned();
    while let Some(start) = expanded.find("${") {
        let end = expanded[start..].find('}').expect("closing brace") + start;
        expanded.replace_range(start..=end, "value");
    }
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expanded.chars() {
        match c {
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            _ => word.push(c),
        }
    }
    assert!(!quoted, "unbalanced quotes in {command}");
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// No tab, no trailing space, lines of at most 160 characters, indented by two.
fn lint(name: &str, text: &str) {
    assert!(text.ends_with('\n'), "{name} ends with a newline");
    for (n, line) in text.lines().enumerate() {
        assert!(!line.contains('\t'), "{name} line {}: a tab", n + 1);
        assert_eq!(
            line,
            line.trim_end(),
            "{name} line {}: trailing spaces",
            n + 1
        );
        assert!(
            line.chars().count() <= 160,
            "{name} line {}: longer than 160",
            n + 1
        );
        let indent = line.len() - line.trim_start().len();
        assert_eq!(
            indent % 2,
            0,
            "{name} line {}: indentation not by two",
            n + 1
        );
    }
}

#[test]
fn pipeline_passes_a_yaml_lint() {
    let text = pipeline_text();
    lint("examples/gitlab-ci/.gitlab-ci.yml", &text);
    for other in ["templates/talosprov.yml", "examples/fleet/.gitlab-ci.yml"] {
        let text = std::fs::read_to_string(repo().join(other)).expect("read");
        lint(other, &text);
    }
    // Duplicate keys are an error for serde_yaml_ng's mappings.
    let doc = pipeline();
    let stages: Vec<&str> = doc["stages"]
        .as_sequence()
        .expect("stages")
        .iter()
        .map(|s| s.as_str().expect("stage name"))
        .collect();
    for job in ["validate", "plan", "apply"] {
        assert!(stages.contains(&job), "stage {job}");
        assert_eq!(doc[job]["stage"].as_str(), Some(job), "job {job}'s stage");
    }
    for (name, job) in doc.as_mapping().expect("mapping") {
        if let Some(stage) = job.get("stage") {
            let stage = stage.as_str().expect("stage");
            assert!(
                stages.contains(&stage),
                "{name:?} uses an undeclared stage {stage}"
            );
        }
    }
}

#[test]
fn pipeline_plans_with_the_report_and_applies_by_hand_on_main() {
    let doc = pipeline();
    let plan = &doc["plan"];
    assert_eq!(
        plan["artifacts"]["reports"]["terraform"].as_str(),
        Some("plan.json")
    );
    let paths = plan["artifacts"]["paths"]
        .as_sequence()
        .expect("plan artifacts");
    assert!(paths.iter().any(|p| p.as_str() == Some("plan.cache")));

    let apply = &doc["apply"];
    let rule = &apply["rules"][0];
    assert_eq!(
        rule["if"].as_str(),
        Some("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH")
    );
    assert_eq!(rule["when"].as_str(), Some("manual"));
    let script = apply["script"].as_sequence().expect("apply script");
    assert!(
        script.iter().any(|l| l
            .as_str()
            .is_some_and(|l| l.contains("talosprov apply") && l.contains("plan.cache"))),
        "apply applies the saved plan"
    );

    let rules = doc["workflow"]["rules"]
        .as_sequence()
        .expect("workflow rules");
    let changes = rules[0]["changes"].as_sequence().expect("rules:changes");
    let files: Vec<&str> = changes.iter().filter_map(Value::as_str).collect();
    assert!(
        files.contains(&"cluster.yaml") && files.contains(&"patches/**/*"),
        "{files:?}"
    );

    let vars = &doc["variables"];
    let address = vars["TF_HTTP_ADDRESS"].as_str().expect("TF_HTTP_ADDRESS");
    assert!(address.starts_with("${CI_API_V4_URL}/projects/${CI_PROJECT_ID}/terraform/state/"));
    assert!(
        vars["TF_HTTP_LOCK_ADDRESS"]
            .as_str()
            .expect("lock")
            .ends_with("/lock")
    );
    assert_eq!(vars["TF_HTTP_LOCK_METHOD"].as_str(), Some("POST"));
    assert_eq!(vars["TF_HTTP_UNLOCK_METHOD"].as_str(), Some("DELETE"));
    assert_eq!(vars["TF_HTTP_USERNAME"].as_str(), Some("gitlab-ci-token"));
    assert_eq!(vars["TF_HTTP_PASSWORD"].as_str(), Some("${CI_JOB_TOKEN}"));
    // Secrets are masked project variables, never written in the file.
    for secret in ["PROXMOX_VE_API_TOKEN", "TALOSPROV_STATE_PASSPHRASE"] {
        assert!(
            vars.get(secret).is_none(),
            "{secret} must not be in the file"
        );
    }

    for cleanup in ["unlock-plan", "unlock-apply"] {
        let job = &doc[cleanup];
        let on_failure = job["when"].as_str() == Some("on_failure")
            || job["rules"][0]["when"].as_str() == Some("on_failure");
        assert!(on_failure, "{cleanup} runs on failure");
        let script = serde_yaml_ng::to_string(&job["script"]).expect("script");
        assert!(
            script.contains("talosprov force-unlock"),
            "{cleanup}: {script}"
        );
    }
}

#[test]
fn cleanup_reads_the_lock_id_line_the_runs_print() {
    let doc = pipeline();
    for (job, variable) in [
        ("plan", "TALOSPROV_PLAN_LOCK_ID"),
        ("apply", "TALOSPROV_APPLY_LOCK_ID"),
    ] {
        let after = serde_yaml_ng::to_string(&doc[job]["after_script"]).expect("after_script");
        assert!(
            after.contains("State lock ID: "),
            "{job} greps the lock ID line"
        );
        assert!(after.contains(variable), "{job} writes {variable}");
        assert_eq!(
            doc[job]["artifacts"]["reports"]["dotenv"].as_str(),
            Some("lock.env")
        );
        assert_eq!(doc[job]["artifacts"]["when"].as_str(), Some("always"));
    }
    let unlock = serde_yaml_ng::to_string(&doc["unlock-apply"]["script"]).expect("script");
    assert!(unlock.contains("${TALOSPROV_APPLY_LOCK_ID}"), "{unlock}");
}

#[test]
fn pipeline_runs_the_published_image_and_builds_nothing() {
    let doc = pipeline();
    assert!(doc.get("build").is_none(), "a build job");
    let stages = serde_yaml_ng::to_string(&doc["stages"]).expect("stages");
    assert!(!stages.contains("build"), "{stages}");
    assert_eq!(
        doc[".talosprov"]["image"].as_str(),
        Some("registry.gitlab.com/talosprov/talosprov:${TALOSPROV_VERSION}")
    );
    assert_eq!(
        doc["variables"]["TALOSPROV_VERSION"].as_str(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    for line in script_lines(&doc) {
        assert!(!line.contains("cargo"), "{line}");
        assert!(!line.contains("bin/"), "{line}");
    }
    for (name, job) in doc.as_mapping().expect("mapping") {
        let needs = serde_yaml_ng::to_string(&job["needs"]).expect("needs");
        assert!(!needs.contains("build"), "{name:?} needs {needs}");
    }
}

#[test]
fn the_component_runs_the_published_image_of_its_version() {
    let jobs = component_jobs(&no_inputs());
    let shared = &jobs[".talosprov-component"];
    assert_eq!(
        shared["image"].as_str(),
        Some(
            format!(
                "registry.gitlab.com/talosprov/talosprov:{}",
                env!("CARGO_PKG_VERSION")
            )
            .as_str()
        )
    );
    let check = joined(&shared["before_script"]);
    assert!(
        check.contains(&format!("\"version\":\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{check}"
    );
    assert_eq!(
        shared["variables"]["TF_HTTP_ADDRESS"].as_str(),
        Some("${CI_API_V4_URL}/projects/${CI_PROJECT_ID}/terraform/state/cluster")
    );
    assert_eq!(
        shared["variables"]["TALOSPROV_TOPOLOGY"].as_str(),
        Some("./cluster.yaml")
    );
    for job in COMPONENT_JOBS {
        assert_eq!(
            jobs[job]["extends"].as_str(),
            Some(".talosprov-component"),
            "{job}"
        );
    }
    assert_eq!(
        jobs["apply"]["resource_group"].as_str(),
        Some("talosprov-cluster")
    );
    let drift = &jobs["drift"];
    assert_eq!(
        drift["rules"][0]["if"].as_str(),
        Some("$CI_PIPELINE_SOURCE == \"schedule\" && $TALOSPROV_SCHEDULED_JOB != \"backup\"")
    );
    let script = joined(&drift["script"]);
    assert!(script.contains("-detailed-exitcode"), "{script}");
    assert!(script.contains("2) "), "{script}");
    assert_eq!(drift["artifacts"]["paths"][0].as_str(), Some("drift.log"));
}

#[test]
fn the_component_backs_up_etcd_in_backup_schedules_only() {
    let jobs = component_jobs(&no_inputs());
    let backup = &jobs["backup"];
    let script = joined(&backup["script"]);
    assert!(
        script.contains("talosprov etcd snapshot -f \"${TALOSPROV_TOPOLOGY}\""),
        "{script}"
    );
    // A snapshot left in the job's folder is lost with it.
    assert!(script.contains("to s3://"), "{script}");
    assert!(script.contains("exit 1"), "{script}");
    // The secrets are masked CI/CD variables, never in the script.
    for secret in [
        "TALOSPROV_STATE_PASSPHRASE",
        "PROXMOX_VE_API_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "CI_JOB_TOKEN",
        "set -x",
    ] {
        assert!(!script.contains(secret), "{secret} in {script}");
    }
    assert!(backup.get("variables").is_none(), "{backup:?}");

    let rules = backup["rules"].as_sequence().expect("backup rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["if"].as_str(),
        Some("$CI_PIPELINE_SOURCE == \"schedule\" && $TALOSPROV_SCHEDULED_JOB == \"backup\"")
    );
    for rule in rules {
        let text = serde_yaml_ng::to_string(rule).expect("rule");
        assert!(!text.contains("merge_request"), "{text}");
        assert!(rule.get("changes").is_none(), "{text}");
        assert!(rule.get("when").is_none(), "{text}");
    }
    assert_eq!(backup["stage"].as_str(), Some("plan"));
    assert_eq!(backup["needs"].as_sequence().map(Vec::len), Some(0));
    assert_eq!(backup["resource_group"].as_str(), Some("talosprov-cluster"));

    // A backup schedule runs backup alone: drift steps aside, and every
    // other job never runs in a scheduled pipeline.
    let drift = serde_yaml_ng::to_string(&jobs["drift"]["rules"]).expect("rules");
    assert!(
        drift.contains("$TALOSPROV_SCHEDULED_JOB != \"backup\""),
        "{drift}"
    );
    for job in ["validate", "plan", "apply", "unlock-plan", "unlock-apply"] {
        let first = &jobs[job]["rules"][0];
        assert_eq!(
            first["if"].as_str(),
            Some("$CI_PIPELINE_SOURCE == \"schedule\""),
            "{job}"
        );
        assert_eq!(first["when"].as_str(), Some("never"), "{job}");
    }
}

/// A script's lines, one string.
fn joined(script: &Value) -> String {
    script
        .as_sequence()
        .expect("a script is a list")
        .iter()
        .map(|l| l.as_str().expect("a script line is a string"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The talosprov commands of the example pipeline, of the component (with its
/// default inputs) and of the project's own pipeline.
fn all_talosprov_commands() -> Vec<String> {
    let mut docs = vec![pipeline(), Value::Mapping(component_jobs(&no_inputs()))];
    let own = repo().join(".gitlab-ci.yml");
    if let Ok(text) = std::fs::read_to_string(own) {
        docs.push(serde_yaml_ng::from_str(&text).expect("the project's pipeline is YAML"));
    }
    docs.iter()
        .flat_map(script_lines)
        .flat_map(|l| talosprov_commands(&l))
        .collect()
}

#[test]
fn every_talosprov_command_line_is_accepted() {
    let commands = all_talosprov_commands();
    for expected in [
        "validate",
        "plan",
        "apply",
        "force-unlock",
        "version",
        "version --json",
        "plan -f \"${TALOSPROV_TOPOLOGY}\" -detailed-exitcode",
        "etcd snapshot -f \"${TALOSPROV_TOPOLOGY}\"",
    ] {
        assert!(
            commands
                .iter()
                .any(|c| c.starts_with(&format!("talosprov {expected}"))),
            "no talosprov {expected} in {commands:?}"
        );
    }
    for command in &commands {
        let argv = words(command);
        let out = std::process::Command::new(BIN)
            .args(&argv[1..])
            .arg("--help")
            .env_clear()
            .output()
            .expect("run talosprov");
        assert!(
            out.status.success(),
            "`{command}` is refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(
            help.contains("Usage: talosprov"),
            "`{command}` printed no help: {help}"
        );
    }
}

#[test]
fn command_extraction_stops_at_pipes_and_redirections() {
    assert_eq!(
        talosprov_commands("talosprov plan -out plan.cache 2>&1 | tee plan.log"),
        vec!["talosprov plan -out plan.cache"]
    );
    assert_eq!(
        talosprov_commands(
            "test -n x || { echo; }; talosprov force-unlock -force \"${ID}\" || echo gone"
        ),
        vec!["talosprov force-unlock -force \"${ID}\""]
    );
    assert_eq!(
        words("talosprov validate -f \"${T}\""),
        vec!["talosprov", "validate", "-f", "value"]
    );
    assert_eq!(
        talosprov_commands("TALOSPROV_BUILD=$(talosprov version --json)"),
        vec!["talosprov version --json"]
    );
}

#[test]
fn interpolation_keeps_types_and_fills_strings() {
    let inputs: BTreeMap<String, Value> = [
        ("s".to_owned(), Value::from("kwkd")),
        ("a".to_owned(), Value::Sequence(vec![Value::from("x/**/*")])),
        ("b".to_owned(), Value::Bool(true)),
    ]
    .into();
    let doc: Value = serde_yaml_ng::from_str(
        "\"job$[[ inputs.s ]]\":\n  changes: $[[ inputs.a ]]\n  flag: $[[ inputs.b ]]\n  \
         t: \"p/$[[ inputs.s ]]/$[[ inputs.b ]]\"\n",
    )
    .expect("YAML");
    let out = interpolate(&doc, &inputs);
    let job = &out["jobkwkd"];
    assert_eq!(job["changes"][0].as_str(), Some("x/**/*"));
    assert_eq!(job["flag"].as_bool(), Some(true));
    assert_eq!(job["t"].as_str(), Some("p/kwkd/true"));
}
