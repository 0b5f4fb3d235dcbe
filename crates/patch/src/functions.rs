//! The OpenTofu functions patch templates commonly call (`jsonencode`,
//! `yamlencode`, `join`, `cidrhost`...), as minijinja functions, so a patch
//! tree written for OpenTofu's `templatefile` renders unchanged. Semantics
//! follow the OpenTofu function reference (opentofu.org/docs/language/functions).

use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use std::net::IpAddr;

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

fn text(v: &Value, func: &str) -> Result<String, Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or_default().to_string()),
        ValueKind::Number | ValueKind::Bool => Ok(v.to_string()),
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bytes
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable
        | ValueKind::Plain
        | ValueKind::Invalid
        | _ => Err(invalid(format!(
            "{func}: expected a string, got {}",
            v.kind()
        ))),
    }
}

fn list(v: &Value, func: &str) -> Result<Vec<Value>, Error> {
    match v.kind() {
        ValueKind::Seq | ValueKind::Iterable => Ok(v.try_iter()?.collect()),
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Number
        | ValueKind::String
        | ValueKind::Bytes
        | ValueKind::Map
        | ValueKind::Plain
        | ValueKind::Invalid
        | _ => Err(invalid(format!(
            "{func}: expected a list, got {}",
            v.kind()
        ))),
    }
}

fn pairs(v: &Value, func: &str) -> Result<Vec<(Value, Value)>, Error> {
    if v.kind() != ValueKind::Map {
        return Err(invalid(format!("{func}: expected a map, got {}", v.kind())));
    }
    v.try_iter()?
        .map(|k| v.get_item(&k).map(|val| (k, val)))
        .collect()
}

/// `jsonencode(value)`: the value as compact JSON.
fn jsonencode(v: Value) -> Result<String, Error> {
    serde_json::to_string(&v).map_err(|e| invalid(format!("jsonencode: {e}")))
}

/// `yamlencode(value)`: the value as a YAML document (ends with a newline).
fn yamlencode(v: Value) -> Result<String, Error> {
    serde_yaml_ng::to_string(&v).map_err(|e| invalid(format!("yamlencode: {e}")))
}

fn join(sep: String, lists: Rest<Value>) -> Result<String, Error> {
    let mut parts = Vec::new();
    for l in lists.iter() {
        for item in list(l, "join")? {
            parts.push(text(&item, "join")?);
        }
    }
    Ok(parts.join(&sep))
}

fn split(sep: String, s: String) -> Vec<String> {
    s.split(sep.as_str()).map(str::to_string).collect()
}

fn length(v: Value) -> Result<usize, Error> {
    match v.kind() {
        ValueKind::String => Ok(v.as_str().unwrap_or_default().chars().count()),
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Number
        | ValueKind::Bytes
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable
        | ValueKind::Plain
        | ValueKind::Invalid
        | _ => v
            .len()
            .ok_or_else(|| invalid(format!("length: cannot take the length of a {}", v.kind()))),
    }
}

fn keys(v: Value) -> Result<Vec<Value>, Error> {
    let mut ks: Vec<Value> = pairs(&v, "keys")?.into_iter().map(|(k, _)| k).collect();
    ks.sort();
    Ok(ks)
}

fn values(v: Value) -> Result<Vec<Value>, Error> {
    let mut ps = pairs(&v, "values")?;
    ps.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(ps.into_iter().map(|(_, v)| v).collect())
}

fn contains(l: Value, item: Value) -> Result<bool, Error> {
    Ok(list(&l, "contains")?.contains(&item))
}

fn concat(lists: Rest<Value>) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for l in lists.iter() {
        out.extend(list(l, "concat")?);
    }
    Ok(out)
}

fn element(l: Value, index: i64) -> Result<Value, Error> {
    let items = list(&l, "element")?;
    if items.is_empty() {
        return Err(invalid(
            "element: cannot use element function with an empty list",
        ));
    }
    if index < 0 {
        return Err(invalid(
            "element: cannot use element function with a negative index",
        ));
    }
    let len = i64::try_from(items.len()).unwrap_or(i64::MAX);
    let i = usize::try_from(index % len).unwrap_or(0);
    Ok(items[i].clone())
}

fn lookup(map: Value, key: Value, default: Option<Value>) -> Result<Value, Error> {
    let found = pairs(&map, "lookup")?.into_iter().find(|(k, _)| *k == key);
    match (found, default) {
        (Some((_, v)), _) => Ok(v),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(invalid(format!(
            "lookup: the given key {key} does not exist in the map"
        ))),
    }
}

fn merge(maps: Rest<Value>) -> Result<Value, Error> {
    let mut out: Vec<(Value, Value)> = Vec::new();
    for m in maps.iter() {
        if m.is_none() {
            continue;
        }
        for (k, v) in pairs(m, "merge")? {
            match out.iter_mut().find(|(ek, _)| *ek == k) {
                Some(slot) => slot.1 = v,
                None => out.push((k, v)),
            }
        }
    }
    Ok(Value::from_iter(out))
}

fn coalesce(vals: Rest<Value>) -> Result<Value, Error> {
    vals.iter()
        .find(|v| !v.is_none() && !v.is_undefined() && v.as_str() != Some(""))
        .cloned()
        .ok_or_else(|| invalid("coalesce: no non-null, non-empty-string arguments"))
}

fn base64encode(s: String) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn base64decode(s: String) -> Result<String, Error> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.as_bytes())
        .map_err(|e| invalid(format!("base64decode: {e}")))?;
    String::from_utf8(bytes).map_err(|_| invalid("base64decode: the result is not UTF-8"))
}

/// `indent(n, s)`: n spaces before every line but the first.
fn indent(n: usize, s: String) -> String {
    let pad = " ".repeat(n);
    s.split('\n')
        .enumerate()
        .map(|(i, line)| {
            if i == 0 || line.is_empty() {
                line.to_string()
            } else {
                format!("{pad}{line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn tonumber(v: Value) -> Result<Value, Error> {
    match v.kind() {
        ValueKind::Number => Ok(v),
        ValueKind::String => {
            let s = v.as_str().unwrap_or_default();
            if let Ok(i) = s.parse::<i64>() {
                return Ok(Value::from(i));
            }
            s.parse::<f64>()
                .map(Value::from)
                .map_err(|_| invalid(format!("tonumber: cannot convert {s:?} to a number")))
        }
        ValueKind::Undefined
        | ValueKind::None
        | ValueKind::Bool
        | ValueKind::Bytes
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable
        | ValueKind::Plain
        | ValueKind::Invalid
        | _ => Err(invalid(format!(
            "tonumber: cannot convert a {} to a number",
            v.kind()
        ))),
    }
}

/// `format(spec, args...)`: the `%s`, `%d`, `%v`, `%q` and `%%` verbs.
fn format(spec: String, args: Rest<Value>) -> Result<String, Error> {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let verb = chars
            .next()
            .ok_or_else(|| invalid("format: the spec ends with %"))?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let arg = args
            .next()
            .ok_or_else(|| invalid(format!("format: not enough arguments for %{verb}")))?;
        match verb {
            's' | 'v' => out.push_str(&text(arg, "format")?),
            'd' => out.push_str(
                &arg.as_i64()
                    .ok_or_else(|| invalid("format: %d needs a whole number"))?
                    .to_string(),
            ),
            'q' => out.push_str(&serde_json::to_string(&text(arg, "format")?).unwrap_or_default()),
            other => return Err(invalid(format!("format: unsupported verb %{other}"))),
        }
    }
    Ok(out)
}

fn parse_prefix(prefix: &str, func: &str) -> Result<(IpAddr, u32), Error> {
    let bad = || invalid(format!("{func}: invalid CIDR prefix {prefix:?}"));
    let (addr, len) = prefix.split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u32 = len.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad());
    }
    Ok((addr, len))
}

/// `cidrhost(prefix, hostnum)`: the address of host number `hostnum` in the
/// prefix; a negative number counts back from the end.
fn cidrhost(prefix: String, hostnum: i64) -> Result<String, Error> {
    let (addr, len) = parse_prefix(&prefix, "cidrhost")?;
    let bits = if addr.is_ipv4() { 32 } else { 128 };
    let host_bits = bits - len;
    let size: u128 = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    let base = match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    } & !size;
    let offset = if hostnum >= 0 {
        u128::try_from(hostnum).unwrap_or(0)
    } else {
        size.wrapping_add(1)
            .wrapping_sub(u128::from(hostnum.unsigned_abs()))
    };
    if offset > size {
        return Err(invalid(format!(
            "cidrhost: prefix {prefix} has no host number {hostnum}"
        )));
    }
    let host = base | offset;
    Ok(match addr {
        IpAddr::V4(_) => std::net::Ipv4Addr::from(u32::try_from(host).unwrap_or(0)).to_string(),
        IpAddr::V6(_) => std::net::Ipv6Addr::from(host).to_string(),
    })
}

/// `cidrnetmask(prefix)`: the IPv4 netmask of a prefix, `255.255.255.0`.
fn cidrnetmask(prefix: String) -> Result<String, Error> {
    let (addr, len) = parse_prefix(&prefix, "cidrnetmask")?;
    if !addr.is_ipv4() {
        return Err(invalid("cidrnetmask: only IPv4 prefixes have a netmask"));
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok(std::net::Ipv4Addr::from(mask).to_string())
}

/// Add the OpenTofu functions to an environment, as globals.
pub fn register(env: &mut Environment<'static>) {
    env.add_function("jsonencode", jsonencode);
    env.add_function("yamlencode", yamlencode);
    env.add_function("join", join);
    env.add_function("split", split);
    env.add_function("lower", |s: String| s.to_lowercase());
    env.add_function("upper", |s: String| s.to_uppercase());
    env.add_function("trimspace", |s: String| s.trim().to_string());
    env.add_function("trimprefix", |s: String, p: String| {
        s.strip_prefix(p.as_str()).unwrap_or(&s).to_string()
    });
    env.add_function("trimsuffix", |s: String, p: String| {
        s.strip_suffix(p.as_str()).unwrap_or(&s).to_string()
    });
    env.add_function("replace", |s: String, from: String, to: String| {
        s.replace(&from, &to)
    });
    env.add_function("startswith", |s: String, p: String| s.starts_with(&p));
    env.add_function("endswith", |s: String, p: String| s.ends_with(&p));
    env.add_function("length", length);
    env.add_function("keys", keys);
    env.add_function("values", values);
    env.add_function("contains", contains);
    env.add_function("concat", concat);
    env.add_function("element", element);
    env.add_function("lookup", lookup);
    env.add_function("merge", merge);
    env.add_function("coalesce", coalesce);
    env.add_function("base64encode", base64encode);
    env.add_function("base64decode", base64decode);
    env.add_function("indent", indent);
    env.add_function("tostring", |v: Value| text(&v, "tostring"));
    env.add_function("tonumber", tonumber);
    env.add_function("format", format);
    env.add_function("cidrhost", cidrhost);
    env.add_function("cidrnetmask", cidrnetmask);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expr: &str) -> String {
        let mut env = Environment::new();
        register(&mut env);
        env.render_str(
            &format!("{{{{ {expr} }}}}"),
            minijinja::context! { m => minijinja::context! { b => 2, a => 1 } },
        )
        .unwrap()
    }

    #[test]
    fn jsonencode_writes_compact_json() {
        assert_eq!(eval(r#"jsonencode(["a", 1, true])"#), r#"["a",1,true]"#);
    }

    #[test]
    fn keys_and_values_are_sorted_by_key() {
        assert_eq!(eval("join(',', keys(m))"), "a,b");
        assert_eq!(eval("jsonencode(values(m))"), "[1,2]");
    }

    #[test]
    fn cidrhost_counts_from_the_network_address() {
        assert_eq!(eval("cidrhost('192.168.1.0/24', 1)"), "192.168.1.1");
        assert_eq!(eval("cidrhost('192.168.1.77/24', -2)"), "192.168.1.254");
        assert_eq!(eval("cidrnetmask('10.0.0.0/12')"), "255.240.0.0");
    }

    #[test]
    fn format_supports_the_common_verbs() {
        assert_eq!(
            eval(r#"format("%s-%d %q %%", "a", 3, "x")"#),
            r#"a-3 "x" %"#
        );
    }

    #[test]
    fn indent_skips_the_first_line() {
        assert_eq!(eval(r#"indent(2, "a\nb")"#), "a\n  b");
    }
}
