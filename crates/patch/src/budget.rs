//! The memory and work budget of one template render. minijinja's fuel bounds the number of
//! instructions a render runs; this bounds what they build. Every filter and function a
//! template can call (minijinja's builtins and the OpenTofu functions) is wrapped: its
//! arguments are sized before the call (a lazily repeated list such as `[1] * 10**9` is
//! refused by its length before anything iterates it), the calls that can amplify their
//! input (`indent`, `replace`, `join`, `batch`, `slice`, `tojson`, `format`, ...) have their
//! output estimated first, and every result is measured after. The values a `{% set %}` or a
//! macro call binds are measured where they are bound (see [`super::shape`]), and every value
//! written out is measured by the formatter. All of it is charged to the render's work, so a
//! loop that copies a growing value stops at the budget instead of running for minutes.

use std::cell::Cell;

use minijinja::value::{Rest, ValueKind};

use super::expr::Growth;
use minijinja::{Environment, Error, ErrorKind, State, Value};

/// The largest value one template may build or bind, in bytes as measured by [`measure`]:
/// [`crate::budgets::PatchBudgets::template_value`] in force (4 MiB by default, raised with
/// `TALOSPROV_TEMPLATE_VALUE_BYTES`), at most `usize::MAX`.
pub fn value_budget() -> usize {
    usize::try_from(talosprov_base::budgets::PatchBudgets::current().template_value)
        .unwrap_or(usize::MAX)
}

/// What one render may build in total, in bytes as measured by [`measure`]: every result
/// of a filter or function, every value bound by `set` or a macro call and every value
/// written out, summed. [`crate::budgets::PatchBudgets::template_work`] in force (64 MiB by
/// default, raised with `TALOSPROV_TEMPLATE_WORK_BYTES`).
pub fn work_budget() -> u64 {
    talosprov_base::budgets::PatchBudgets::current().template_work
}

/// What [`measure`] counts for each item of a list or entry of a map, besides its
/// content: about the size of a minijinja value.
pub const ITEM_BYTES: usize = 16;

/// The deepest nesting of lists and maps a template may build: twice the YAML nesting
/// limit, since a template may wrap input values.
pub const MAX_VALUE_NESTING: usize = 2 * talosprov_base::limits::MAX_NESTING;

/// The most operators, filters, calls and subscripts one tag may hold: far more than any
/// machine config patch writes in one `{{ }}` or `{% %}`, far fewer than what overflows
/// the stack of a thread rendering it.
pub const MAX_TAG_TERMS: usize = 256;

/// The most `~`, `+` and `*` one tag may hold. Each may double the largest value the
/// template holds, so they bound what one tag can build before the budget looks at it.
pub const MAX_TAG_GROWTH: usize = 16;

thread_local! {
    /// Work charged by the render running on this thread.
    static WORK: Cell<u64> = const { Cell::new(0) };
}

/// Start the budget of a render on this thread (renders run one at a time per thread).
pub fn start() {
    WORK.with(|w| w.set(0));
}

/// The work charged on this thread since [`start`], in bytes.
pub fn spent() -> u64 {
    WORK.with(Cell::get)
}

fn over(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

/// Charge `bytes` of work to the render on this thread.
///
/// # Errors
/// When the render's total passes [`work_budget`].
pub fn charge(bytes: usize, what: &str) -> Result<(), Error> {
    let total = WORK.with(|w| {
        let t = w.get().saturating_add(bytes as u64);
        w.set(t);
        t
    });
    if total > work_budget() {
        return Err(over(format!(
            "{what}: the template has built more than {} while rendering (its work budget, \
             {}); a machine config patch never needs that much",
            talosprov_base::budgets::human(work_budget()),
            talosprov_base::budgets::TEMPLATE_WORK_ENV
        )));
    }
    Ok(())
}

fn too_large(what: &str, size: &str) -> Error {
    over(format!(
        "{what} would build a value of {size}, over the {} a template may build ({})",
        talosprov_base::budgets::human(value_budget() as u64),
        talosprov_base::budgets::TEMPLATE_VALUE_ENV
    ))
}

/// The size of a value in bytes: the length of a string, [`ITEM_BYTES`] plus the content for
/// each item of a list or entry of a map, 8 for anything else; counted without recursion and
/// without iterating a collection whose length is already over `limit`.
///
/// # Errors
/// When the size passes `limit` (the message says `what`), or the value nests deeper than
/// [`MAX_VALUE_NESTING`].
pub fn measure(value: &Value, limit: usize, what: &str) -> Result<usize, Error> {
    let mut total = 0usize;
    let mut stack: Vec<(Value, usize)> = vec![(value.clone(), 0)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_VALUE_NESTING {
            return Err(over(format!(
                "{what}: the value nests deeper than {MAX_VALUE_NESTING} levels"
            )));
        }
        match v.kind() {
            ValueKind::String | ValueKind::Bytes => {
                total = total.saturating_add(
                    v.as_str()
                        .map(str::len)
                        .or_else(|| v.as_bytes().map(<[u8]>::len))
                        .unwrap_or(0),
                );
            }
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable | ValueKind::Plain => {
                if let Some(n) = v.len() {
                    total = total.saturating_add(n.saturating_mul(ITEM_BYTES));
                    if total > limit {
                        return Err(too_large(what, &format!("{n} items")));
                    }
                }
                let map = v.kind() == ValueKind::Map;
                let Ok(items) = v.try_iter() else {
                    total = total.saturating_add(8);
                    continue;
                };
                for (count, item) in items.enumerate() {
                    if v.len().is_none() {
                        total = total.saturating_add(ITEM_BYTES);
                    }
                    if map {
                        let inner = v.get_item(&item).unwrap_or_default();
                        stack.push((inner, depth + 1));
                    }
                    stack.push((item, depth + 1));
                    if total > limit || count > limit / ITEM_BYTES {
                        return Err(too_large(what, "more items than that"));
                    }
                }
            }
            ValueKind::Undefined
            | ValueKind::None
            | ValueKind::Bool
            | ValueKind::Number
            | ValueKind::Invalid
            | _ => total = total.saturating_add(8),
        }
        if total > limit {
            return Err(too_large(what, &format!("{total} bytes or more")));
        }
    }
    Ok(total)
}

/// A length of an argument known without iterating it: a string's bytes, a collection's
/// [`ITEM_BYTES`] per item.
fn shallow(v: &Value) -> usize {
    if let Some(s) = v.as_str() {
        return s.len();
    }
    match v.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable | ValueKind::Plain => {
            v.len().map_or(0, |n| n.saturating_mul(ITEM_BYTES))
        }
        ValueKind::String
        | ValueKind::Bytes
        | ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Number
        | ValueKind::Invalid
        | _ => 8,
    }
}

/// The integers among the arguments, keyword arguments included (not the values of a map
/// passed as an argument).
fn integers(args: &[Value]) -> Vec<i128> {
    let mut out = Vec::new();
    for a in args {
        if let Some(n) = a.as_i64() {
            out.push(i128::from(n));
        } else if a.is_kwargs()
            && let Ok(keys) = a.try_iter()
        {
            out.extend(keys.filter_map(|k| a.get_item(&k).ok()?.as_i64().map(i128::from)));
        }
    }
    out
}

fn first_str(args: &[Value]) -> Option<&str> {
    args.iter().find_map(Value::as_str)
}

fn first_seq(args: &[Value]) -> Option<&Value> {
    args.iter()
        .find(|a| matches!(a.kind(), ValueKind::Seq | ValueKind::Iterable))
}

/// The widths written in a printf-style format (`%10s`, `%-*d` has none), summed.
fn format_widths(format: &str) -> u128 {
    let mut sum = 0u128;
    let mut rest = format;
    while let Some(i) = rest.find('%') {
        rest = &rest[i + 1..];
        let digits: String = rest
            .chars()
            .skip_while(|c| matches!(c, '-' | '+' | ' ' | '#' | '0'))
            .take_while(char::is_ascii_digit)
            .collect();
        let precision: String = rest
            .split_once('.')
            .map(|(_, p)| p.chars().take_while(char::is_ascii_digit).collect())
            .unwrap_or_default();
        for n in [digits, precision] {
            sum = sum.saturating_add(n.parse::<u128>().unwrap_or(if n.is_empty() {
                0
            } else {
                u128::MAX
            }));
        }
    }
    sum
}

/// What a call may build, estimated from its arguments before it runs, in bytes; `None`
/// when the call builds no more than its arguments hold.
fn estimate(name: &str, args: &[Value]) -> Result<Option<u128>, Error> {
    let base: u128 = args.iter().map(|a| shallow(a) as u128).sum();
    let ints = integers(args);
    let largest = ints.iter().copied().max().unwrap_or(0).max(0) as u128;
    let lines = first_str(args).map_or(1, |s| s.matches('\n').count() as u128 + 1);
    Ok(match name {
        "indent" => Some(base + lines.saturating_mul(largest)),
        "replace" => {
            let strs: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
            match strs.as_slice() {
                [s, from, to, ..] => {
                    let hits = if from.is_empty() {
                        s.chars().count() as u128 + 1
                    } else {
                        s.matches(from).count() as u128
                    };
                    Some(base + hits.saturating_mul(to.len() as u128))
                }
                _ => None,
            }
        }
        "join" => {
            let sep = args
                .iter()
                .filter_map(Value::as_str)
                .map(str::len)
                .max()
                .unwrap_or(0);
            let seq = first_seq(args).or_else(|| args.first());
            let (items, content) = match seq {
                Some(s) => (
                    s.len().unwrap_or(0) as u128,
                    measure(s, value_budget(), name)? as u128,
                ),
                None => (0, 0),
            };
            Some(content + items.saturating_mul(sep as u128))
        }
        "batch" | "slice" => Some(
            base + largest
                .saturating_add(first_seq(args).and_then(Value::len).unwrap_or(0) as u128)
                .saturating_mul(ITEM_BYTES as u128),
        ),
        "tojson" | "jsonencode" | "yamlencode" | "pprint" | "string" | "tostring" => {
            let content = match args.first() {
                Some(v) => measure(v, value_budget(), name)? as u128,
                None => 0,
            };
            Some(content.saturating_mul(4 + largest.min(u128::from(u32::MAX))))
        }
        "format" => Some(base + first_str(args).map_or(0, format_widths)),
        "split" | "lines" => Some(base.saturating_mul(ITEM_BYTES as u128 + 1)),
        _ => None,
    })
}

/// `inner` behind the budget: its arguments sized, its output estimated for the calls that
/// amplify, its result measured and charged.
fn guarded(
    name: &'static str,
    inner: Value,
) -> impl Fn(&State, Rest<Value>) -> Result<Value, Error> {
    move |state: &State, args: Rest<Value>| {
        for a in args.iter() {
            if shallow(a) > value_budget() {
                return Err(too_large(
                    name,
                    &format!("an argument of {} bytes or items", shallow(a)),
                ));
            }
        }
        if let Some(estimate) = estimate(name, &args)?
            && estimate > value_budget() as u128
        {
            return Err(too_large(
                &format!("{name}()"),
                &format!("about {estimate} bytes"),
            ));
        }
        let result = inner.call(state, &args).map_err(|e| match name {
            "range" => range_error(&args, e),
            _ => e,
        })?;
        let size = measure(&result, value_budget(), name)?;
        charge(size, name)?;
        Ok(result)
    }
}

/// minijinja's refusal of a `range` over 100,000 items, with the count it would have had.
fn range_error(args: &[Value], e: Error) -> Error {
    let n: Vec<i128> = args
        .iter()
        .filter_map(|a| a.as_i64().map(i128::from))
        .collect();
    let (lower, upper, step) = match n[..] {
        [upper] => (0, upper, 1),
        [lower, upper] => (lower, upper, 1),
        [lower, upper, step] if step != 0 => (lower, upper, step),
        _ => return e,
    };
    let count = ((upper - lower) + step - step.signum()) / step;
    if e.kind() != ErrorKind::InvalidOperation || count <= 100_000 {
        return e;
    }
    let shown: Vec<String> = n.iter().map(i128::to_string).collect();
    over(format!(
        "range({}) would have {count} items, over the 100000 a template's range may have",
        shown.join(", ")
    ))
}

/// minijinja's builtin filters, by name.
fn builtin_filters() -> Vec<(&'static str, Value)> {
    use minijinja::filters as f;
    vec![
        ("lower", Value::from_function(f::lower)),
        ("upper", Value::from_function(f::upper)),
        ("title", Value::from_function(f::title)),
        ("capitalize", Value::from_function(f::capitalize)),
        ("replace", Value::from_function(f::replace)),
        ("dictsort", Value::from_function(f::dictsort)),
        ("items", Value::from_function(f::items)),
        ("reverse", Value::from_function(f::reverse)),
        ("trim", Value::from_function(f::trim)),
        ("join", Value::from_function(f::join)),
        ("split", Value::from_function(f::split)),
        ("lines", Value::from_function(f::lines)),
        ("default", Value::from_function(f::default)),
        ("d", Value::from_function(f::default)),
        ("attr", Value::from_function(f::attr)),
        ("first", Value::from_function(f::first)),
        ("last", Value::from_function(f::last)),
        ("min", Value::from_function(f::min)),
        ("max", Value::from_function(f::max)),
        ("sort", Value::from_function(f::sort)),
        ("list", Value::from_function(f::list)),
        ("string", Value::from_function(f::string)),
        ("batch", Value::from_function(f::batch)),
        ("slice", Value::from_function(f::slice)),
        ("sum", Value::from_function(f::sum)),
        ("indent", Value::from_function(f::indent)),
        ("select", Value::from_function(f::select)),
        ("reject", Value::from_function(f::reject)),
        ("selectattr", Value::from_function(f::selectattr)),
        ("rejectattr", Value::from_function(f::rejectattr)),
        ("map", Value::from_function(f::map)),
        ("groupby", Value::from_function(f::groupby)),
        ("unique", Value::from_function(f::unique)),
        ("chain", Value::from_function(f::chain)),
        ("zip", Value::from_function(f::zip)),
        ("pprint", Value::from_function(f::pprint)),
        ("format", Value::from_function(f::format)),
        ("tojson", Value::from_function(f::tojson)),
        ("escape", Value::from_function(f::escape)),
        ("e", Value::from_function(f::escape)),
    ]
}

/// The name of the function [`super::shape`] calls after each binding.
pub const BIND_CHECK: &str = "__talosprov_bound";

/// `__talosprov_bound("a", "ns")`: measure the variables a `set` or a macro call just bound,
/// and charge them.
fn bound(state: &State, names: Rest<String>) -> Result<Value, Error> {
    for name in names.iter() {
        if let Some(v) = state.lookup(name) {
            let size = measure(&v, value_budget(), &format!("`{name}`"))?;
            charge(size, &format!("`{name}`"))?;
        }
    }
    Ok(Value::from(""))
}

/// The name of the function [`super::shape`] turns `a * b` into.
pub const MUL: &str = "__talosprov_mul";

/// The name of the function `a ~ b` becomes.
pub const CONCAT: &str = "__talosprov_concat";

/// The name of the function `a + b` becomes.
pub const ADD: &str = "__talosprov_add";

/// The guarded function a growing operator becomes.
pub fn guarded_op(growth: Growth) -> &'static str {
    match growth {
        Growth::Mul => MUL,
        Growth::Concat => CONCAT,
        Growth::Add => ADD,
    }
}

/// minijinja's own `a OP b`, evaluated once the operands are known to be within budget
/// (compiled once per operator).
fn native(growth: Growth, a: Value, b: Value) -> Result<Value, Error> {
    use std::sync::OnceLock;
    type Compiled = minijinja::Expression<'static, 'static>;
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    static EXPRS: OnceLock<Result<[Compiled; 3], String>> = OnceLock::new();
    let exprs = EXPRS.get_or_init(|| {
        let env = ENV.get_or_init(|| {
            let mut env = Environment::new();
            env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
            env
        });
        let compile = |source| env.compile_expression(source).map_err(|e| e.to_string());
        Ok([compile("a * b")?, compile("a ~ b")?, compile("a + b")?])
    });
    let exprs = exprs.as_ref().map_err(|e| over(e.clone()))?;
    let expr = match growth {
        Growth::Mul => &exprs[0],
        Growth::Concat => &exprs[1],
        Growth::Add => &exprs[2],
    };
    // An undefined operand is an error, as in the templates' strict mode.
    if a.is_undefined() || b.is_undefined() {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    // The error without the span of `a OP b`: minijinja gives it the template's own.
    expr.eval(minijinja::context! { a => a, b => b })
        .map_err(|e| match e.detail() {
            Some(detail) => Error::new(e.kind(), detail.to_owned()),
            None => Error::from(e.kind()),
        })
}

/// Whether a value is text (`Some(false)`) or a list (`Some(true)`), the two kinds the
/// growing operators join and repeat; `None` for anything else.
fn text_or_list(v: &Value) -> Option<bool> {
    match v.kind() {
        ValueKind::String => Some(false),
        ValueKind::Seq | ValueKind::Iterable => Some(true),
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Number
        | ValueKind::Bytes
        | ValueKind::Map
        | ValueKind::Plain
        | ValueKind::Invalid
        | _ => None,
    }
}

/// What one operand adds to a result's size: a string's bytes, a list's measured size, and
/// for anything else (a number, a map written as text) its measured size twice over.
fn operand(v: &Value, what: &str) -> Result<usize, Error> {
    match text_or_list(v) {
        Some(false) => Ok(v.as_str().map_or(0, str::len)),
        Some(true) => measure(v, value_budget(), what),
        None => Ok(measure(v, value_budget(), what)?.saturating_mul(2)),
    }
}

/// `a ~ b` and `a + b`, refusing a result over [`value_budget`] before it is
/// built, and charging its size.
fn joined(growth: Growth, what: &'static str) -> impl Fn(Value, Value) -> Result<Value, Error> {
    move |a: Value, b: Value| {
        let numbers = a.kind() == ValueKind::Number && b.kind() == ValueKind::Number;
        if !numbers {
            let size = operand(&a, what)?.saturating_add(operand(&b, what)?);
            if size > value_budget() {
                return Err(too_large(what, &format!("{size} bytes or more")));
            }
            charge(size, what)?;
        }
        native(growth, a, b)
    }
}

/// `__talosprov_mul(a, b)`: `a * b`, refusing a string or list repeated past
/// [`value_budget`] before it is built (minijinja repeats a string up to 100 MB,
/// and a list lazily without a limit).
fn mul(a: Value, b: Value) -> Result<Value, Error> {
    for (x, n) in [(&a, &b), (&b, &a)] {
        let Some(n) = n.as_i64().filter(|n| *n > 0) else {
            continue;
        };
        let unit = match text_or_list(x) {
            Some(false) => x.as_str().map_or(0, str::len),
            Some(true) => x.len().unwrap_or(0).saturating_mul(ITEM_BYTES),
            None => continue,
        };
        let size = (unit as u128).saturating_mul(n as u128);
        if size > value_budget() as u128 {
            return Err(too_large("`*`", &format!("{size} bytes")));
        }
        charge(usize::try_from(size).unwrap_or(usize::MAX), "`*`")?;
    }
    native(Growth::Mul, a, b)
}

/// Put every filter and global function of `env` behind the budget, and add the binding
/// check. Call after every function is registered.
pub fn install(env: &mut Environment<'static>) {
    for (name, f) in builtin_filters() {
        env.add_filter(name, guarded(name, f));
    }
    let globals: Vec<(String, Value)> = env
        .globals()
        .filter(|(_, v)| v.kind() == ValueKind::Plain && v.as_object().is_some())
        .map(|(n, v)| (n.to_owned(), v))
        .collect();
    for (name, f) in globals {
        if name == "namespace" || name == "cycler" || name == "joiner" {
            continue;
        }
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        env.add_function(name, guarded(leaked, f));
    }
    env.add_function(BIND_CHECK, bound);
    env.add_function(MUL, mul);
    env.add_function(CONCAT, joined(Growth::Concat, "`~`"));
    env.add_function(ADD, joined(Growth::Add, "`+`"));
}

/// The formatter's part: measure a value about to be written out and charge it.
///
/// # Errors
/// A value over [`value_budget`] or a render over its work budget.
pub fn written(value: &Value) -> Result<(), Error> {
    let size = measure(value, value_budget(), "the value written here")?;
    charge(size, "the value written here")
}
