//! The example GitLab pipeline (examples/gitlab-ci/.gitlab-ci.yml): it is
//! well-formed YAML with the jobs, rules and reports it promises, and every
//! `talosprov` command line in its scripts is accepted by the command line
//! parser (run with `--help` appended, which clap handles after every flag).

use crate::support::cli::BIN;
use crate::support::fixtures::repo;
use serde_yaml_ng::Value;

fn pipeline_text() -> String {
    let path = repo().join("examples/gitlab-ci/.gitlab-ci.yml");
    std::fs::read_to_string(path).expect("read the example pipeline")
}

fn pipeline() -> Value {
    serde_yaml_ng::from_str(&pipeline_text()).expect("the example pipeline is valid YAML")
}

/// Every script line of every job (`before_script`, `script`, `after_script`).
fn script_lines(doc: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for (_, job) in doc.as_mapping().expect("top-level mapping") {
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
        let end = ["|", ";", "&&", " 2>", " >", "\n"]
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

#[test]
fn pipeline_passes_a_yaml_lint() {
    let text = pipeline_text();
    assert!(text.ends_with('\n'), "ends with a newline");
    for (n, line) in text.lines().enumerate() {
        assert!(!line.contains('\t'), "line {}: a tab", n + 1);
        assert_eq!(line, line.trim_end(), "line {}: trailing spaces", n + 1);
        assert!(
            line.chars().count() <= 160,
            "line {}: longer than 160",
            n + 1
        );
        let indent = line.len() - line.trim_start().len();
        assert_eq!(indent % 2, 0, "line {}: indentation not by two", n + 1);
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
fn every_talosprov_command_line_is_accepted() {
    let doc = pipeline();
    let commands: Vec<String> = script_lines(&doc)
        .iter()
        .flat_map(|l| talosprov_commands(l))
        .collect();
    for expected in ["validate", "plan", "apply", "force-unlock", "version"] {
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
}
