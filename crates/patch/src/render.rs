//! Rendering of patch templates: minijinja for `.j2`/`.jinja` files, OpenTofu
//! `templatefile` syntax for `.tftpl` files (through minijinja's custom
//! syntax), literal text for `.yaml`/`.yml`. Undefined variables are errors,
//! and every error names the file and line of the template.

use foldhash::{HashMap, HashMapExt as _};
use minijinja::value::{Value as JValue, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, UndefinedBehavior};
use serde::Serialize;
use std::path::{Path, PathBuf};

use super::document::{DocumentError, parse_documents};
use super::tftpl::{self, Translated};
use crate::discover::PatchKind;

/// The variables a patch template sees. Filled from the topology for each node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateVars {
    /// The node's hostname.
    pub hostname: String,
    /// The node's IPv4 address, without prefix (`192.168.1.121`).
    pub node_ip: String,
    /// `controlplane` or `worker`.
    pub role: String,
    /// The cluster's shared virtual IP, if any (`none`/`null` otherwise).
    pub vip: Option<String>,
    /// The default gateway.
    pub gateway: String,
    /// DNS servers, possibly empty.
    pub nameservers: Vec<String>,
    /// The network prefix length (24 for a /24).
    pub prefix_length: u8,
    /// The cluster name.
    pub cluster_name: String,
    /// The Talos version, `v1.13.8`.
    pub talos_version: String,
    /// The Kubernetes version, `v1.36.2`.
    pub kubernetes_version: String,
    /// The node's whole topology entry.
    pub node: serde_json::Value,
    /// The pool the node is a member of (`pools.<name>`), if any.
    pub pool: Option<String>,
    /// The node's index in its pool, from 1, if it is a member.
    pub index: Option<u32>,
}

/// A patch that could not be rendered or read as YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A template syntax or evaluation error (undefined variable, bad call).
    /// `line` and `column` are 1-based positions in the template file.
    #[error("{}:{line}{}: {message}", file.display(), column.map(|c| format!(":{c}")).unwrap_or_default())]
    Template {
        /// The template file.
        file: PathBuf,
        /// 1-based line in the file.
        line: usize,
        /// 1-based column, when known.
        column: Option<usize>,
        /// What went wrong.
        message: String,
    },
    /// The rendered text is not valid YAML. For a template, the line is in the
    /// rendered output.
    #[error("{}:{line}{}: invalid YAML{}: {message}", file.display(), column.map(|c| format!(":{c}")).unwrap_or_default(), if *rendered { " in the rendered output" } else { "" })]
    Yaml {
        /// The patch file.
        file: PathBuf,
        /// 1-based line (of the rendered output, for a template).
        line: usize,
        /// 1-based column, when known.
        column: Option<usize>,
        /// Whether the line is in the rendered output rather than the file.
        rendered: bool,
        /// For a template, its 1-based line that wrote the rendered line, when its text
        /// tells (see [`super::origin::template_line`]).
        origin: Option<usize>,
        /// The YAML parser's message.
        message: String,
    },
    /// [`Renderer::render`] was asked for a file never added.
    #[error("{}: patch file was not loaded", file.display())]
    NotLoaded {
        /// The patch file's path, as passed to `render`.
        file: PathBuf,
    },
}

/// How long a template's compiled form is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// Rendered for several nodes: compiled once and kept.
    Shared,
    /// Rendered for one node (a `nodes/<hostname>/` file): compiled when
    /// added only to report its syntax errors, and again at its render. A
    /// compiled template's instruction buffers are large beside a patch, and
    /// a 1000-node tree has thousands of these.
    Once,
}

struct Entry {
    kind: PatchKind,
    /// Whether the compiled template is kept in its environment.
    kept: bool,
    text: String,
    translated: Option<Translated>,
    /// For a literal file, its documents, read once for every node.
    literal: Option<Result<Vec<serde_yaml_ng::Value>, RenderError>>,
}

/// A file [`Renderer::prepare`] checked, for [`Renderer::add_prepared`]:
/// its templatefile translation, and whether it is kept compiled.
#[derive(Debug)]
pub struct Prepared {
    translated: Option<Translated>,
    reuse: Reuse,
}

/// Patch files compiled once and rendered for many nodes.
pub struct Renderer {
    jinja: Environment<'static>,
    tftpl: Environment<'static>,
    files: HashMap<PathBuf, Entry>,
    /// Fuel spent by every render so far (see [`TOTAL_TEMPLATE_FUEL`]).
    spent: std::sync::atomic::AtomicU64,
    /// Renders that failed so far, each charged [`TEMPLATE_FUEL`].
    failed: std::sync::atomic::AtomicU64,
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// The work one template render may do, in minijinja fuel (about one unit
/// per instruction): ample for any patch (the reference patches use a few
/// hundred), and a bound on a loop that would run for minutes.
pub const TEMPLATE_FUEL: u64 = 2_000_000;

/// The work all renders of one [`Renderer`] (every template, for every node of a command)
/// may do together, in minijinja fuel: ten times [`TEMPLATE_FUEL`], about a second of
/// rendering, where the reference patches take a few hundred steps per node. Without it, a
/// loop that stays just under [`TEMPLATE_FUEL`] on each of a thousand nodes would run for
/// minutes. A render that fails counts as using its whole [`TEMPLATE_FUEL`] (minijinja does
/// not say what a failed render used); once the total is spent, templates are not rendered
/// and each says so.
pub const TOTAL_TEMPLATE_FUEL: u64 = 10 * TEMPLATE_FUEL;

/// Collects a render's output, refusing to grow past the input file limit.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let limit = talosprov_base::limits::MAX_INPUT_BYTES;
        if (self.0.len() + buf.len()) as u64 > limit {
            return Err(std::io::Error::other(OutputTooLarge));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The output of a render passed [`crate::limits::MAX_INPUT_BYTES`].
#[derive(Debug)]
struct OutputTooLarge;

impl std::fmt::Display for OutputTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the rendered output is over the {} MiB limit of an input file",
            talosprov_base::limits::MAX_INPUT_BYTES / (1024 * 1024)
        )
    }
}

impl std::error::Error for OutputTooLarge {}

fn base_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    super::functions::register(&mut env);
    env
}

/// `for v in x`: the values of a map (in key order) or the items of a list.
fn tf_values(v: JValue) -> Result<Vec<JValue>, Error> {
    if v.kind() == ValueKind::Map {
        let mut keys: Vec<JValue> = v.try_iter()?.collect();
        keys.sort();
        return keys.iter().map(|k| v.get_item(k)).collect();
    }
    Ok(v.try_iter()?.collect())
}

/// `for k, v in x`: key and value pairs of a map, index and item of a list.
fn tf_pairs(v: JValue) -> Result<Vec<Vec<JValue>>, Error> {
    if v.kind() == ValueKind::Map {
        let mut keys: Vec<JValue> = v.try_iter()?.collect();
        keys.sort();
        return keys
            .into_iter()
            .map(|k| Ok(vec![k.clone(), v.get_item(&k)?]))
            .collect();
    }
    Ok(v.try_iter()?
        .enumerate()
        .map(|(i, item)| vec![JValue::from(i), item])
        .collect())
}

impl Renderer {
    /// An empty renderer.
    pub fn new() -> Self {
        let mut jinja = base_environment();
        jinja.set_formatter(|out, state, value| {
            super::budget::written(value)?;
            minijinja::escape_formatter(out, state, value)
        });
        super::budget::install(&mut jinja);
        let mut tftpl = base_environment();
        tftpl.set_syntax(tftpl::syntax());
        tftpl.add_function("tf_values", tf_values);
        tftpl.add_function("tf_pairs", tf_pairs);
        // templatefile refuses to interpolate null, lists and maps.
        tftpl.set_formatter(|out, state, value| match value.kind() {
            ValueKind::None => Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot include a null value in a string template",
            )),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => Err(Error::new(
                ErrorKind::InvalidOperation,
                "cannot include a list or map in a string template; use jsonencode() or yamlencode()",
            )),
            ValueKind::Undefined | ValueKind::Bool | ValueKind::Number | ValueKind::String | ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid | _ => {
                super::budget::written(value)?;
                minijinja::escape_formatter(out, state, value)
            }
        });
        super::budget::install(&mut tftpl);
        Renderer {
            jinja,
            tftpl,
            files: HashMap::new(),
            spent: std::sync::atomic::AtomicU64::new(0),
            failed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Add a patch file, compiling it when it is a template (and keeping
    /// it compiled: [`Reuse::Shared`]).
    ///
    /// # Errors
    /// [`RenderError::Template`] for a syntax error, with the file and line.
    pub fn add(&mut self, file: &Path, kind: PatchKind, text: &str) -> Result<(), RenderError> {
        let literal = (kind == PatchKind::Literal).then(|| parse_rendered(file, kind, text));
        self.add_parsed(file, kind, text, literal, Reuse::Shared)
    }

    /// [`Renderer::add`] with a literal file's documents already parsed
    /// ([`parse_rendered`], as when files are read and parsed on every core
    /// first; `literal` is `None` for a template), and a template kept
    /// compiled or not by `reuse`.
    ///
    /// # Errors
    /// As [`Renderer::add`].
    pub fn add_parsed(
        &mut self,
        file: &Path,
        kind: PatchKind,
        text: &str,
        literal: Option<Result<Vec<serde_yaml_ng::Value>, RenderError>>,
        reuse: Reuse,
    ) -> Result<(), RenderError> {
        let prepared = self.prepare(file, kind, text, reuse)?;
        self.add_prepared(file, kind, text.to_owned(), prepared, literal)
    }

    /// The part of adding a file that needs no `&mut`, so that files can
    /// be prepared on every core: a templatefile translated, and a template
    /// used once ([`Reuse::Once`]) compiled for its syntax errors. A
    /// template kept compiled ([`Reuse::Shared`]) is compiled by
    /// [`Renderer::add_prepared`].
    ///
    /// # Errors
    /// [`RenderError::Template`] for a syntax error, with the file and line.
    pub fn prepare(
        &self,
        file: &Path,
        kind: PatchKind,
        text: &str,
        reuse: Reuse,
    ) -> Result<Prepared, RenderError> {
        let check = |env: &Environment<'static>, source: &str| {
            if reuse == Reuse::Once {
                let name = file.display().to_string();
                env.template_from_named_str(&name, source).map(drop)
            } else {
                Ok(())
            }
        };
        let translated = match kind {
            PatchKind::Literal => None,
            PatchKind::Jinja => {
                let t = super::shape::jinja(text).map_err(|e| shape_error(file, text, e))?;
                check(&self.jinja, &t.source)
                    .map_err(|e| template_error(file, text, Some(&t), &e))?;
                Some(t)
            }
            PatchKind::Templatefile => {
                let t = tftpl::translate(text).map_err(|e| shape_error(file, text, e))?;
                check(&self.tftpl, &t.source)
                    .map_err(|e| template_error(file, text, Some(&t), &e))?;
                Some(t)
            }
        };
        Ok(Prepared { translated, reuse })
    }

    /// Add a file [`Renderer::prepare`] prepared, compiling and keeping a
    /// template several nodes use.
    ///
    /// # Errors
    /// [`RenderError::Template`] for a syntax error of a kept template.
    pub fn add_prepared(
        &mut self,
        file: &Path,
        kind: PatchKind,
        text: String,
        prepared: Prepared,
        literal: Option<Result<Vec<serde_yaml_ng::Value>, RenderError>>,
    ) -> Result<(), RenderError> {
        let kept = prepared.reuse == Reuse::Shared;
        if kept {
            let name = file.display().to_string();
            match (kind, &prepared.translated) {
                (PatchKind::Jinja, Some(t)) => self
                    .jinja
                    .add_template_owned(name, t.source.clone())
                    .map_err(|e| template_error(file, &text, Some(t), &e))?,
                (PatchKind::Templatefile, Some(t)) => self
                    .tftpl
                    .add_template_owned(name, t.source.clone())
                    .map_err(|e| template_error(file, &text, Some(t), &e))?,
                (PatchKind::Literal | PatchKind::Jinja | PatchKind::Templatefile, _) => {}
            }
        }
        self.files.insert(
            file.to_path_buf(),
            Entry {
                kind,
                kept,
                text,
                translated: prepared.translated,
                literal,
            },
        );
        Ok(())
    }

    /// Render an added file with `vars` (a node's [`TemplateVars`], or an
    /// add-on's variables).
    ///
    /// # Errors
    /// [`RenderError::Template`] (undefined variable, failed function call...)
    /// or [`RenderError::NotLoaded`].
    pub fn render<V: Serialize + ?Sized>(
        &self,
        file: &Path,
        vars: &V,
    ) -> Result<String, RenderError> {
        let entry = self.files.get(file).ok_or_else(|| RenderError::NotLoaded {
            file: file.to_path_buf(),
        })?;
        let (env, source) = match (entry.kind, &entry.translated) {
            (PatchKind::Literal, _) => return Ok(entry.text.clone()),
            (PatchKind::Jinja, Some(t)) => (&self.jinja, t.source.as_str()),
            (PatchKind::Templatefile, Some(t)) => (&self.tftpl, t.source.as_str()),
            // A template is added with its translation.
            (PatchKind::Jinja | PatchKind::Templatefile, None) => {
                return Err(RenderError::NotLoaded {
                    file: file.to_path_buf(),
                });
            }
        };
        use std::sync::atomic::Ordering;
        if self.spent.load(Ordering::Relaxed) >= TOTAL_TEMPLATE_FUEL {
            let failed = self.failed.load(Ordering::Relaxed);
            let advice = if failed > 0 {
                format!(
                    "{failed} render{} failed, each counting {TEMPLATE_FUEL}; fix the template \
                     errors reported with this one",
                    if failed == 1 { "" } else { "s" }
                )
            } else {
                "no render failed: the templates take that many steps over every node; \
                 simplify the loops they run for each node"
                    .to_string()
            };
            return Err(RenderError::Template {
                file: file.to_path_buf(),
                line: 1,
                column: None,
                message: format!(
                    "not rendered: the patch templates used up the work budget of one command \
                     ({TOTAL_TEMPLATE_FUEL} steps for all templates and nodes); {advice}"
                ),
            });
        }
        let name = file.display().to_string();
        let mut out = Bounded(Vec::new());
        let template = if entry.kept {
            env.get_template(&name)
        } else {
            env.template_from_named_str(&name, source)
        };
        super::budget::start();
        let rendered = template.and_then(|t| t.render_captured_to(vars, &mut out));
        let used = match &rendered {
            Ok(captured) => captured
                .state()
                .fuel_levels()
                .map_or(TEMPLATE_FUEL, |(used, _)| used),
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                TEMPLATE_FUEL
            }
        };
        self.spent.fetch_add(used, Ordering::Relaxed);
        drop(
            rendered
                .map_err(|e| template_error(file, &entry.text, entry.translated.as_ref(), &e))?,
        );
        String::from_utf8(out.0).map_err(|e| RenderError::Template {
            file: file.to_path_buf(),
            line: 1,
            column: None,
            message: format!("the rendered output is not UTF-8: {e}"),
        })
    }

    /// Render an added file and read the result as YAML documents (null
    /// documents skipped).
    ///
    /// # Errors
    /// As [`Renderer::render`], or [`RenderError::Yaml`].
    pub fn render_documents<V: Serialize + ?Sized>(
        &self,
        file: &Path,
        vars: &V,
    ) -> Result<Vec<serde_yaml_ng::Value>, RenderError> {
        if let Some(Entry {
            literal: Some(docs),
            ..
        }) = self.files.get(file)
        {
            return docs.clone();
        }
        let text = self.render(file, vars)?;
        let Some(entry) = self.files.get(file) else {
            return parse_rendered(file, PatchKind::Literal, &text);
        };
        parse_rendered(file, entry.kind, &text).map_err(|e| match e {
            RenderError::Yaml {
                file,
                line,
                column,
                rendered,
                origin: _,
                message,
            } => RenderError::Yaml {
                origin: super::origin::template_line(entry.kind, &entry.text, &text, line),
                file,
                line,
                column,
                rendered,
                message,
            },
            other @ (RenderError::Template { .. } | RenderError::NotLoaded { .. }) => other,
        })
    }
}

/// Read rendered text as YAML documents.
///
/// # Errors
/// [`RenderError::Yaml`] with the line and column of the syntax error.
pub fn parse_rendered(
    file: &Path,
    kind: PatchKind,
    text: &str,
) -> Result<Vec<serde_yaml_ng::Value>, RenderError> {
    rendered_documents(file, kind, parse_documents(text))
}

/// [`parse_rendered`] from documents already parsed with
/// [`parse_documents`](super::document::parse_documents): the file's errors
/// located as [`RenderError::Yaml`].
///
/// # Errors
/// As [`parse_rendered`].
pub fn rendered_documents(
    file: &Path,
    kind: PatchKind,
    parsed: Result<Vec<serde_yaml_ng::Value>, DocumentError>,
) -> Result<Vec<serde_yaml_ng::Value>, RenderError> {
    parsed.map_err(|e| match e {
        DocumentError::Yaml {
            line,
            column,
            message,
        } => RenderError::Yaml {
            file: file.to_path_buf(),
            line: line.unwrap_or(1),
            column,
            rendered: kind != PatchKind::Literal,
            origin: None,
            message,
        },
        other @ DocumentError::NotAMapping { .. }
        | other @ DocumentError::MissingKind { .. }
        | other @ DocumentError::MissingApiVersion { .. }
        | other @ DocumentError::Duplicate { .. } => RenderError::Yaml {
            file: file.to_path_buf(),
            line: 1,
            column: None,
            rendered: kind != PatchKind::Literal,
            origin: None,
            message: other.to_string(),
        },
    })
}

/// Render one patch file on its own and read it as YAML.
///
/// # Errors
/// As [`Renderer::add`] and [`Renderer::render_documents`].
pub fn render_patch(
    file: &Path,
    kind: PatchKind,
    text: &str,
    vars: &TemplateVars,
) -> Result<Vec<serde_yaml_ng::Value>, RenderError> {
    let mut renderer = Renderer::new();
    renderer.add(file, kind, text)?;
    renderer.render_documents(file, vars)
}

/// A template whose text was refused before minijinja saw it, at its offset.
fn shape_error(file: &Path, text: &str, e: tftpl::TftplError) -> RenderError {
    let (line, col) = line_col(text, e.offset);
    RenderError::Template {
        file: file.to_path_buf(),
        line,
        column: Some(col),
        message: e.message,
    }
}

fn template_error(
    file: &Path,
    text: &str,
    translated: Option<&Translated>,
    e: &Error,
) -> RenderError {
    let offset = e
        .range()
        .map(|r| translated.map_or(r.start, |t| t.original_offset(r.start)));
    let (line, column) = match offset {
        Some(o) => {
            let (l, c) = line_col(text, o);
            (l, Some(c))
        }
        None => (e.line().unwrap_or(1), None),
    };
    let mut message = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if e.kind() == ErrorKind::OutOfFuel {
        message = format!(
            "the template ran out of its work budget ({TEMPLATE_FUEL} steps) while rendering, \
             stopped here; a loop over a range this large cannot be a machine config patch"
        );
    }
    // The snippet from the file as written where the translation copied it, else from the
    // translation (a templatefile expression) unless it shows the budget's own calls.
    let shown = |s: &&str| !s.is_empty() && !s.contains('\n') && s.len() <= 60;
    let snippet = e.range().and_then(|r| match translated {
        Some(t) => text
            .get(t.original_offset(r.start)..t.original_offset(r.end))
            .filter(shown)
            .or_else(|| {
                t.source
                    .get(r)
                    .filter(|s| shown(s) && !s.contains("__talosprov"))
            }),
        None => text.get(r).filter(shown),
    });
    if let Some(snippet) = snippet {
        message.push_str(&format!(" (in `{}`)", snippet.trim()));
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message.push_str(&format!(": {c}"));
        cause = c.source();
    }
    RenderError::Template {
        file: file.to_path_buf(),
        line,
        column,
        message,
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
