#!/usr/bin/env python3
"""GitLab CI checks, with GitLab's own CI schema (check-jsonschema's
vendor.gitlab-ci):

- the project's pipeline (.gitlab-ci.yml) and both example pipelines;
- the CI/CD component (templates/talosprov.yml): its `spec` header on its own,
  and its jobs after interpolating `$[[ inputs.NAME ]]` as GitLab does, with
  the spec's defaults and again with the inputs of each include of it in the
  example pipelines (merged into the including pipeline, whose stages, needs
  and extends must then resolve);
- every input the jobs use is declared, and every declared input is used;
  each default and each include's value fits the input's type, options and
  regex;
- no example pipeline (nor the component) has a job whose script runs cargo:
  they run the published talosprov image;
- the component follows GitLab's layout (templates/<name>.yml), sets no
  global keyword, and the examples include it by a name that exists; its
  default version, the example's pinned version and the include's version are
  the workspace's version.

Usage: check_gitlab_ci.py [REPO_ROOT]   (default: this file's repository)
check-jsonschema is $CHECK_JSONSCHEMA, else the one beside this Python.
Prints one line per check, then `N passed, N failed`; exits 1 on a failure.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
PIPELINES = [".gitlab-ci.yml", "examples/gitlab-ci/.gitlab-ci.yml", "examples/fleet/.gitlab-ci.yml"]
EXAMPLES = ["examples/gitlab-ci/.gitlab-ci.yml", "examples/fleet/.gitlab-ci.yml"]
COMPONENT = "templates/talosprov.yml"
# The project the component is published from, as include:component names it.
COMPONENT_PROJECT = "talosprov/talosprov"
# Top-level keys that are not jobs (GitLab's global keywords).
GLOBAL_KEYWORDS = {
    "default", "include", "stages", "variables", "workflow", "spec",
    "image", "services", "cache", "before_script", "after_script",
}
SCRIPT_KEYS = ("before_script", "script", "after_script")
BLOCK = re.compile(r"\$\[\[((?:(?!\]\]).)*)\]\]")
CARGO = re.compile(r"(^|[\s;&|({`])cargo(\s|$)")

results = []  # (ok, name, detail)


def check(name, problems):
    """Record a check: `problems` is a list of strings (empty: passed)."""
    problems = [p for p in problems if p]
    results.append((not problems, name, problems))
    if problems:
        print(f"FAIL {name}")
        for p in problems[:20]:
            for line in str(p).splitlines() or [""]:
                print(f"       {line}")
    else:
        print(f"ok   {name}")


def attempt(name, fn):
    """Run a check whose body may raise: an exception is a failure."""
    try:
        problems = fn()
    except Exception as e:  # noqa: BLE001 - any error fails the check, with its text
        problems = [f"{type(e).__name__}: {e}"]
    check(name, problems or [])


def yaml():
    y = YAML(typ="safe", pure=True)
    y.allow_duplicate_keys = False
    return y


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml().load(f)


def load_component(path):
    """The component's two documents: the spec header and the jobs."""
    with open(path, encoding="utf-8") as f:
        docs = list(yaml().load_all(f))
    if len(docs) != 2:
        raise ValueError(f"{path}: {len(docs)} YAML documents, expected the spec header, `---`, the jobs")
    header, jobs = docs
    if not isinstance(header, dict) or set(header) != {"spec"}:
        raise ValueError(f"{path}: the first document must hold `spec:` alone")
    if not isinstance(jobs, dict):
        raise ValueError(f"{path}: the jobs document is not a mapping")
    return header, jobs


def check_jsonschema():
    exe = os.environ.get("CHECK_JSONSCHEMA") or str(Path(sys.executable).parent / "check-jsonschema")
    if not Path(exe).is_file():
        print(f"check-jsonschema not found at {exe}: set CHECK_JSONSCHEMA", file=sys.stderr)
        sys.exit(2)
    return exe


CHECK_JSONSCHEMA = check_jsonschema()
TMP = tempfile.TemporaryDirectory(prefix="check-gitlab-ci-")


def schema_problems(data=None, path=None, label="doc"):
    """GitLab's CI schema on a file, or on data (written out as JSON)."""
    if path is not None and not Path(path).is_file():
        return [f"{path}: no such file"]
    if path is None:
        path = Path(TMP.name) / (re.sub(r"[^A-Za-z0-9_.-]", "_", label) + ".json")
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    out = subprocess.run(
        [CHECK_JSONSCHEMA, "--builtin-schema", "vendor.gitlab-ci", "--output-format", "text", str(path)],
        capture_output=True, text=True, check=False,
    )
    if out.returncode == 0:
        return []
    text = (out.stdout + out.stderr).strip()
    return [text or f"check-jsonschema exited {out.returncode}"]


# Interpolation, as GitLab does it at include time.

def input_names_used(node, found=None):
    """Every `inputs.NAME` of an interpolation block, in keys and values."""
    found = set() if found is None else found
    if isinstance(node, str):
        for block in BLOCK.findall(node):
            found.add(block.strip())
    elif isinstance(node, list):
        for item in node:
            input_names_used(item, found)
    elif isinstance(node, dict):
        for k, v in node.items():
            input_names_used(k, found)
            input_names_used(v, found)
    return found


def as_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"{value!r} cannot be interpolated inside a string")


def interpolate(node, values):
    """A block alone as a whole value keeps the input's type; inside a longer
    string it becomes text. Functions (`| expand_vars`) are not supported here."""
    if isinstance(node, str):
        def lookup(block):
            block = block.strip()
            if "|" in block:
                raise ValueError(f"`$[[ {block} ]]`: interpolation functions are not checked here")
            if not block.startswith("inputs."):
                raise ValueError(f"`$[[ {block} ]]` names no input")
            name = block[len("inputs."):]
            if name not in values:
                raise ValueError(f"`$[[ {block} ]]`: no input {name} in the spec")
            return values[name]
        whole = BLOCK.fullmatch(node)
        if whole:
            return lookup(whole.group(1))
        return BLOCK.sub(lambda m: as_text(lookup(m.group(1))), node)
    if isinstance(node, list):
        return [interpolate(item, values) for item in node]
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            key = interpolate(k, values)
            if not isinstance(key, str):
                raise ValueError(f"the key {k!r} becomes {key!r}, not a string")
            if key in out:
                raise ValueError(f"two keys become {key!r}")
            out[key] = interpolate(v, values)
        return out
    return node


def value_problems(name, spec, value, what):
    """Whether `value` fits the input `spec` (type, options, regex)."""
    kind = spec.get("type", "string")
    expected = {"string": str, "array": list, "boolean": bool, "number": (int, float)}[kind]
    if isinstance(value, bool) and kind == "number":
        return [f"{what} of {name}: {value!r} is not a number"]
    if not isinstance(value, expected):
        return [f"{what} of {name}: {value!r} is not of type {kind}"]
    problems = []
    if "options" in spec and value not in spec["options"]:
        problems.append(f"{what} of {name}: {value!r} is not one of {spec['options']}")
    if "regex" in spec and kind == "string" and not re.search(spec["regex"], value):
        problems.append(f"{what} of {name}: {value!r} does not match {spec['regex']}")
    return problems


def resolve_inputs(spec_inputs, given, label):
    """The values of every input: given, else default (mandatory inputs must be given)."""
    problems, values = [], {}
    for name in given:
        if name not in spec_inputs:
            problems.append(f"{label}: input {name} is not declared in the component's spec")
    for name, spec in spec_inputs.items():
        spec = spec or {}
        if name in given:
            values[name] = given[name]
            problems += value_problems(name, spec, given[name], label)
        elif "default" in spec:
            values[name] = spec["default"]
        else:
            problems.append(f"{label}: the mandatory input {name} is not given")
    return values, problems


# Pipelines: jobs, stages, needs, extends, scripts.

def jobs_of(doc):
    return {k: v for k, v in doc.items() if k not in GLOBAL_KEYWORDS and isinstance(v, dict)}


def script_lines(job):
    lines = []
    for key in SCRIPT_KEYS:
        value = job.get(key)
        if isinstance(value, str):
            lines.append(value)
        elif isinstance(value, list):
            lines += [v for v in value if isinstance(v, str)]
    return lines


def resolved(jobs, name, seen=()):
    """A job with its `extends` merged in (deep merge of hashes, as GitLab)."""
    job = jobs[name]
    parents = job.get("extends", [])
    parents = [parents] if isinstance(parents, str) else parents
    merged = {}
    for parent in parents:
        if parent in seen or parent not in jobs:
            continue
        merged = deep_merge(merged, resolved(jobs, parent, seen + (name,)))
    return deep_merge(merged, {k: v for k, v in job.items() if k != "extends"})


def deep_merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def structure_problems(doc, label):
    """Declared stages, existing needs and extends, unique names."""
    problems = []
    jobs = jobs_of(doc)
    stages = doc.get("stages", ["build", "test", "deploy"])
    stages = set(stages) | {".pre", ".post"}
    for name, job in jobs.items():
        for parent in [job["extends"]] if isinstance(job.get("extends"), str) else job.get("extends", []):
            if parent not in jobs:
                problems.append(f"{label}: {name} extends {parent}, which is not there")
        if name.startswith("."):
            continue
        full = resolved(jobs, name)
        stage = full.get("stage", "test")
        if stage not in stages:
            problems.append(f"{label}: {name} is in stage {stage!r}, not one of the pipeline's stages")
        for need in full.get("needs", []) or []:
            if isinstance(need, dict) and ("pipeline" in need or "project" in need):
                continue
            target = need if isinstance(need, str) else need.get("job")
            optional = isinstance(need, dict) and need.get("optional")
            if target not in jobs and not optional:
                problems.append(f"{label}: {name} needs {target}, which is not a job of the pipeline")
        if not script_lines(full) and "trigger" not in full:
            problems.append(f"{label}: {name} has no script")
    return problems


def cargo_problems(doc, label):
    jobs = jobs_of(doc)
    problems = []
    for name in jobs:
        for line in script_lines(resolved(jobs, name)):
            if CARGO.search(line):
                problems.append(f"{label}: job {name} runs cargo: {line.strip()}")
    for key in ("image",):
        for name in jobs:
            image = resolved(jobs, name).get(key)
            image = image.get("name") if isinstance(image, dict) else image
            if isinstance(image, str) and re.match(r"^(docker\.io/)?(library/)?rust:", image):
                problems.append(f"{label}: job {name} runs in the Rust image {image}")
    return problems


def component_includes(doc):
    includes = doc.get("include", [])
    includes = [includes] if isinstance(includes, (str, dict)) else includes
    return [inc for inc in includes if isinstance(inc, dict) and "component" in inc]


def workspace_version():
    text = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[workspace\.package\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version = "([^"]+)"', section.group(1), re.M)
    if not match:
        raise ValueError("no version under [workspace.package] in Cargo.toml")
    return match.group(1)


def main():
    for rel in PIPELINES:
        path = ROOT / rel
        attempt(f"schema: {rel}", lambda path=path: schema_problems(path=path))
    attempt("structure: .gitlab-ci.yml stages, needs, extends",
            lambda: structure_problems(load(ROOT / ".gitlab-ci.yml"), ".gitlab-ci.yml"))

    header, jobs_doc = None, None

    def component_layout():
        nonlocal header, jobs_doc
        problems = []
        templates = ROOT / "templates"
        for entry in sorted(templates.iterdir()):
            if entry.is_file() and entry.suffix == ".yml":
                continue
            if entry.is_dir() and (entry / "template.yml").is_file():
                continue
            problems.append(f"templates/{entry.name}: neither templates/<name>.yml nor templates/<name>/template.yml")
        header, jobs_doc = load_component(ROOT / COMPONENT)
        spec = header["spec"]
        if set(spec) - {"inputs"}:
            problems.append(f"spec has {sorted(set(spec) - {'inputs'})}: only inputs is used")
        for key in jobs_doc:
            if key in GLOBAL_KEYWORDS:
                problems.append(f"the component sets the global keyword {key}: it would change the including pipeline")
        return problems

    attempt(f"layout: {COMPONENT} is a component (spec header, ---, jobs; no global keyword)", component_layout)
    if header is None:
        return
    component_checks(header, jobs_doc)


def component_checks(header, jobs_doc):
    """The component's spec, inputs and jobs, alone and as the examples include it."""
    spec_inputs = header["spec"].get("inputs") or {}

    attempt(f"schema: {COMPONENT} spec header", lambda: schema_problems(header, label="component-spec"))

    def declared_inputs():
        problems = []
        for name, spec in spec_inputs.items():
            spec = spec or {}
            if not spec.get("description"):
                problems.append(f"input {name} has no description")
            if "default" in spec:
                problems += value_problems(name, spec, spec["default"], "the default")
        return problems

    attempt("spec: every input is described, and its default fits its type, options and regex", declared_inputs)

    def used_inputs():
        used = input_names_used(jobs_doc)
        problems = []
        names = set()
        for block in sorted(used):
            if not block.startswith("inputs.") or "|" in block:
                problems.append(f"`$[[ {block} ]]` is not a plain input reference")
                continue
            names.add(block[len("inputs."):])
        for name in sorted(names - set(spec_inputs)):
            problems.append(f"the jobs use input {name}, which the spec does not declare")
        for name in sorted(set(spec_inputs) - names):
            problems.append(f"the spec declares input {name}, which no job uses")
        if "$[[" in (ROOT / COMPONENT).read_text(encoding="utf-8").split("\n---\n", 1)[0]:
            problems.append("an interpolation block in the spec header")
        return problems

    attempt("inputs: every input the jobs use is declared, every declared one is used", used_inputs)

    def defaults_jobs():
        values, problems = resolve_inputs(spec_inputs, {}, "defaults")
        if problems:
            return problems
        jobs = interpolate(jobs_doc, values)
        problems += schema_problems(jobs, label="component-defaults")
        stages = [values.get("validate_stage"), values.get("plan_stage"), values.get("apply_stage")]
        problems += structure_problems({"stages": stages, **jobs}, "component (defaults)")
        problems += cargo_problems(jobs, "component (defaults)")
        return problems

    attempt(f"component: {COMPONENT} jobs with the default inputs (schema, stages, needs, no cargo)", defaults_jobs)

    version = None

    def versions():
        nonlocal version
        version = workspace_version()
        problems = []
        default = (spec_inputs.get("version") or {}).get("default")
        if default != version:
            problems.append(f"the component's default version {default!r} is not the workspace's {version}")
        example = load(ROOT / "examples/gitlab-ci/.gitlab-ci.yml")
        pinned = (example.get("variables") or {}).get("TALOSPROV_VERSION")
        if pinned != version:
            problems.append(f"examples/gitlab-ci pins TALOSPROV_VERSION {pinned!r}, not {version}")
        return problems

    attempt("versions: the component's default and the example's pin are the workspace's version", versions)

    for rel in EXAMPLES:
        def example(rel=rel):
            doc = load(ROOT / rel)
            problems = cargo_problems(doc, rel)
            if "build" in jobs_of(doc):
                problems.append(f"{rel}: a build job")
            return problems

        attempt(f"no cargo: {rel} has no job that runs cargo or the Rust image", example)

        doc = load(ROOT / rel)
        includes = component_includes(doc)
        if not includes:
            attempt(f"structure: {rel} stages, needs, extends", lambda doc=doc, rel=rel: structure_problems(doc, rel))
            continue

        merged = {k: v for k, v in doc.items() if k != "include"}
        names = {}
        for n, inc in enumerate(includes, 1):
            label = f"{rel} include {n}"

            def one(inc=inc, label=label, n=n):
                problems = []
                address = inc["component"]
                m = re.fullmatch(r"\$CI_SERVER_FQDN/(.+)/([^/@]+)@(.+)", address)
                if not m:
                    return [f"{label}: {address} is not $CI_SERVER_FQDN/<project>/<component>@<version>"]
                project, component, ref = m.groups()
                if project != COMPONENT_PROJECT:
                    problems.append(f"{label}: project {project}, not {COMPONENT_PROJECT}")
                if not ((ROOT / "templates" / f"{component}.yml").is_file()
                        or (ROOT / "templates" / component / "template.yml").is_file()):
                    problems.append(f"{label}: no component {component} under templates/")
                if version and ref != version:
                    problems.append(f"{label}: version {ref}, not the workspace's {version}")
                values, bad = resolve_inputs(spec_inputs, inc.get("inputs") or {}, label)
                problems += bad
                if bad:
                    return problems
                jobs = interpolate(jobs_doc, values)
                problems += schema_problems(jobs, label=f"component-include-{n}")
                for name, job in jobs.items():
                    if name in merged or name in names:
                        problems.append(f"{label}: job {name} is already defined (by {names.get(name, 'the pipeline')})")
                    names[name] = label
                    merged[name] = job
                return problems

            suffix = (inc.get("inputs") or {}).get("job_suffix", "")
            attempt(f"include: {label} ({suffix or 'no suffix'}): address, inputs, jobs' schema, unique job names", one)

        attempt(f"schema: {rel} with its includes interpolated",
                lambda merged=merged, rel=rel: schema_problems(merged, label=f"merged-{rel}"))
        attempt(f"structure: {rel} with its includes: stages, needs, extends, unique jobs",
                lambda merged=merged, rel=rel: structure_problems(merged, rel) + cargo_problems(merged, rel))



if __name__ == "__main__":
    try:
        main()
    finally:
        TMP.cleanup()
    passed = sum(1 for ok, _, _ in results if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not results else 0)
