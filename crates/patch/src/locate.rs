//! Finding, in a patch file, the line that wrote a value of the final config. A final path
//! (`machine.network.interfaces[2].vip`) is first translated to the patch's own path (its list
//! items are matched by their keys, since a patch's entry 0 may be the config's entry 2), then
//! looked up in block style, flow style, or, for a JSON patch, by its JSON pointer.

use serde_yaml_ng::Value;

use super::document::scalar_text;
use talosprov_base::diagnostics::Pos;

/// One step of a dotted path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps(path: &str) -> Vec<Step> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            out.push(Step::Key(key.to_string()));
        }
        for index in rest.split('[') {
            if let Ok(i) = index.trim_end_matches(']').parse() {
                out.push(Step::Index(i));
            }
        }
    }
    out
}

/// Keys that identify a list item, in the order they are tried.
const IDENTITY_KEYS: [&str; 10] = [
    "interface",
    "name",
    "vlanId",
    "mountPath",
    "image",
    "path",
    "hostPath",
    "destination",
    "address",
    "network",
];

fn key_text(v: &Value, key: &str) -> Option<String> {
    v.as_mapping()?.get(key).and_then(scalar_text)
}

/// The item of a patch's list that wrote the config's item `item`: the one with the same
/// identifying key (or selector), else the only one that has `next` (the key the path goes on
/// with), else the one equal to it, else the only item.
fn matching_item(patch_items: &[Value], item: &Value, next: Option<&str>) -> Option<usize> {
    for key in IDENTITY_KEYS {
        if let Some(want) = key_text(item, key)
            && let Some(i) = patch_items
                .iter()
                .position(|p| key_text(p, key).as_deref() == Some(want.as_str()))
        {
            return Some(i);
        }
    }
    let selector = |v: &Value| {
        v.as_mapping()
            .and_then(|m| m.get("deviceSelector"))
            .cloned()
    };
    if let Some(sel) = selector(item)
        && let Some(i) = patch_items
            .iter()
            .position(|p| selector(p).as_ref() == Some(&sel))
    {
        return Some(i);
    }
    if let Some(next) = next {
        let having: Vec<usize> = patch_items
            .iter()
            .enumerate()
            .filter(|(_, p)| p.as_mapping().is_some_and(|m| m.contains_key(next)))
            .map(|(i, _)| i)
            .collect();
        if let [only] = having.as_slice() {
            return Some(*only);
        }
    }
    if let Some(i) = patch_items.iter().position(|p| p == item) {
        return Some(i);
    }
    (patch_items.len() == 1).then_some(0)
}

/// Translate a path of the final config document `config` into the path the patch document
/// `patch` writes it at, as far as the patch goes (a shorter path when the patch wrote only a
/// parent). Keys that contain dots (`net.ipv4.ip_forward`) are found whole.
pub fn patch_path(config: &Value, patch: &Value, path: &str) -> String {
    let steps = steps(path);
    let mut out = String::new();
    let (mut cur, mut mine) = (config, patch);
    let mut i = 0;
    while i < steps.len() {
        match &steps[i] {
            Step::Key(_) => {
                // The longest run of keys that, joined with dots, is one key of the mapping.
                let mut found = None;
                let mut joined = String::new();
                for (j, step) in steps.iter().enumerate().skip(i) {
                    let Step::Key(k) = step else { break };
                    if !joined.is_empty() {
                        joined.push('.');
                    }
                    joined.push_str(k);
                    if cur
                        .as_mapping()
                        .is_some_and(|m| m.contains_key(joined.as_str()))
                    {
                        found = Some((j, joined.clone()));
                    }
                }
                let Some((j, key)) = found else {
                    // Not in the config (an unknown document key, say): the patch's own key.
                    if let Step::Key(k) = &steps[i]
                        && mine
                            .as_mapping()
                            .is_some_and(|m| m.contains_key(k.as_str()))
                    {
                        push_key(&mut out, k);
                    }
                    return out;
                };
                let Some(next_mine) = mine.as_mapping().and_then(|m| m.get(key.as_str())) else {
                    return out;
                };
                push_key(&mut out, &key);
                cur = cur
                    .as_mapping()
                    .and_then(|m| m.get(key.as_str()))
                    .unwrap_or(&Value::Null);
                mine = next_mine;
                i = j + 1;
            }
            Step::Index(n) => {
                let (Some(items), Some(patch_items)) = (cur.as_sequence(), mine.as_sequence())
                else {
                    return out;
                };
                let Some(item) = items.get(*n) else {
                    return out;
                };
                let next = match steps.get(i + 1) {
                    Some(Step::Key(k)) => Some(k.as_str()),
                    _ => None,
                };
                let Some(j) = matching_item(patch_items, item, next) else {
                    return out;
                };
                out.push_str(&format!("[{j}]"));
                cur = item;
                mine = &patch_items[j];
                i += 1;
            }
        }
    }
    out
}

fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    out.push_str(key);
}

/// The line of a path in a patch's text: block style first, else the path's last key written
/// in flow style (`{vip: ...}`) after its located parent, else the parent's line.
pub fn locate_path(text: &str, path: &str) -> Option<Pos> {
    if path.is_empty() {
        return None;
    }
    if let Some(pos) = locate_field(text, path) {
        return Some(pos);
    }
    let (parent, last) = match path.rfind(['.', '[']) {
        Some(i) => (&path[..i], &path[i..]),
        None => ("", path),
    };
    let parent_pos = locate_path(text, parent);
    let key = last.trim_start_matches('.');
    if !key.starts_with('[') {
        let from = parent_pos.map_or(0, |p| p.line as usize - 1);
        if let Some(pos) = find_key(text, key, from) {
            return Some(pos);
        }
    }
    parent_pos
}

/// The first `key:` (plain or quoted, not part of a longer word) at or after line `from`
/// (0-based).
fn find_key(text: &str, key: &str, from: usize) -> Option<Pos> {
    for (n, line) in text.lines().enumerate().skip(from) {
        let code = line.split(" #").next().unwrap_or(line);
        for quoted in [key.to_string(), format!("\"{key}\""), format!("'{key}'")] {
            let mut start = 0;
            while let Some(i) = code[start..].find(quoted.as_str()) {
                let at = start + i;
                let before = code[..at].chars().next_back();
                let after = code[at + quoted.len()..].trim_start().chars().next();
                let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
                if !before.is_some_and(word) && after == Some(':') {
                    let column = code[..at].chars().count() + 1;
                    return Some(Pos::new(to_u32(n + 1), to_u32(column)));
                }
                start = at + quoted.len();
            }
        }
    }
    None
}

/// Find the line of a dotted field path in block-style YAML text: each key is looked for
/// inside the block of the previous one (deeper indentation). List indices (`[0]`) count the
/// items of the list. Flow style (`{a: 1}`) is not searched.
pub fn locate_field(text: &str, field: &str) -> Option<Pos> {
    // (line number, column of the dash if the line is a list item, column of its key, key text)
    let lines: Vec<(usize, Option<usize>, usize, &str)> = text
        .lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("---") {
                return None;
            }
            let indent = line.len() - trimmed.len();
            match trimmed.strip_prefix('-') {
                Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                    let body = rest.trim_start();
                    Some((n, Some(indent), indent + (trimmed.len() - body.len()), body))
                }
                _ => Some((n, None, indent, trimmed)),
            }
        })
        .collect();
    let mut from = 0usize;
    let mut parent: Option<usize> = None;
    let mut found = None;
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        let indices = rest
            .split('[')
            .filter_map(|i| i.trim_end_matches(']').parse::<usize>().ok());
        // The key, inside the parent's block.
        let mut hit = None;
        for (i, &(n, dash, col, body)) in lines.iter().enumerate().skip(from) {
            if i > from && parent.is_some_and(|p| dash.unwrap_or(col) <= p) {
                break;
            }
            let is_key = key_matches(body, key);
            if is_key && parent.is_none_or(|p| col > p) {
                hit = Some((i, n, col));
                break;
            }
        }
        let (i, n, col) = hit?;
        found = Some((n, col));
        parent = Some(col);
        from = i + 1;
        for index in indices {
            // The index-th item of the list under the key (or under the previous item).
            let list_col = parent.unwrap_or(0);
            let mut item = 0usize;
            let mut dash_col = None;
            let mut hit = None;
            for (j, &(m, dash, c, _)) in lines.iter().enumerate().skip(from) {
                let ended = match dash {
                    Some(d) => d < list_col,
                    None => c <= list_col,
                };
                if ended {
                    break;
                }
                let Some(d) = dash else { continue };
                if *dash_col.get_or_insert(d) != d {
                    continue;
                }
                if item == index {
                    hit = Some((j, m, c, d));
                    break;
                }
                item += 1;
            }
            let (j, m, c, d) = hit?;
            found = Some((m, c));
            // Keys of the item sit right of its dash, starting on the dash's own line.
            parent = Some(d);
            from = j;
        }
    }
    let (n, col) = found?;
    Some(Pos::new(to_u32(n + 1), to_u32(col + 1)))
}

/// Whether the mapping key that `body` starts with is `key`: plain, or quoted and read as
/// YAML reads it (`"a\x1bb"`, `"caf\u00e9"` and `'it''s'` are keys with an escape, a
/// non-ASCII letter and a quote).
fn key_matches(body: &str, key: &str) -> bool {
    let plain = body.strip_prefix(key).is_some_and(|r| r.starts_with(':'));
    if plain || !body.starts_with(['"', '\'']) {
        return plain;
    }
    let quote = body.as_bytes()[0];
    let bytes = body.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b if b == quote => break,
            _ => i += 1,
        }
    }
    let Some(token) = body.get(..=i) else {
        return false;
    };
    if !body[i + 1..].trim_start().starts_with(':') {
        return false;
    }
    serde_yaml_ng::from_str::<String>(token).is_ok_and(|k| k == key)
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The line of the JSON patch operation that wrote a path: the longest prefix of the path's
/// JSON pointer (`/machine/network/vip`) that the text spells out whole.
pub fn locate_pointer(text: &str, path: &str) -> Option<Pos> {
    let parts: Vec<String> = steps(path)
        .into_iter()
        .map(|s| match s {
            Step::Key(k) => k.replace('~', "~0").replace('/', "~1"),
            Step::Index(i) => i.to_string(),
        })
        .collect();
    for len in (1..=parts.len()).rev() {
        let pointer = format!("/{}", parts[..len].join("/"));
        let mut start = 0;
        while let Some(i) = text[start..].find(pointer.as_str()) {
            let at = start + i;
            let after = text[at + pointer.len()..].chars().next();
            if after.is_none_or(|c| "\"' \t\r\n,}]/".contains(c)) {
                let line = text[..at].matches('\n').count() + 1;
                let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
                let column = text[line_start..at].chars().count() + 1;
                return Some(Pos::new(to_u32(line), to_u32(column)));
            }
            start = at + pointer.len();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap()
    }

    #[test]
    fn quoted_keys_are_found_as_yaml_reads_them() {
        let text =
            "machine:\n  \"a\\x1bb\": 1\n  'it''s': 2\n  \"caf\\u00e9\" : 3\n  \"x\\\"y\": 4\n";
        let at = |f: &str| locate_field(text, f).map(|p| (p.line, p.column));
        assert_eq!(at("machine.a\u{1b}b"), Some((2, 3)));
        assert_eq!(at("machine.it's"), Some((3, 3)));
        assert_eq!(at("machine.café"), Some((4, 3)));
        assert_eq!(at("machine.x\"y"), Some((5, 3)));
        assert_eq!(at("machine.ab"), None);
        // An unterminated quote is no key.
        assert_eq!(
            locate_field("machine:\n  \"open: 1\n", "machine.open"),
            None
        );
    }

    #[test]
    fn list_items_are_matched_by_their_keys() {
        let config = yaml(
            "machine:\n  network:\n    interfaces:\n      - interface: eth1\n      - interface: eth0\n        vip: {ip: 1.2.3.4}\n",
        );
        let patch = yaml(
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        vip: {ip: 1.2.3.4}\n",
        );
        assert_eq!(
            patch_path(&config, &patch, "machine.network.interfaces[1].vip"),
            "machine.network.interfaces[0].vip"
        );
    }

    #[test]
    fn dotted_keys_are_found_whole() {
        let config = yaml("machine:\n  sysctls:\n    net.ipv4.ip_forward: 1\n");
        assert_eq!(
            patch_path(&config, &config, "machine.sysctls.net.ipv4.ip_forward"),
            "machine.sysctls.net.ipv4.ip_forward"
        );
    }

    #[test]
    fn a_path_the_patch_wrote_only_in_part_stops_at_its_part() {
        let config = yaml("machine:\n  install:\n    disk: /dev/sda\n    image: x\n");
        let patch = yaml("machine:\n  install:\n    image: x\n");
        assert_eq!(
            patch_path(&config, &patch, "machine.install.disk"),
            "machine.install"
        );
    }

    #[test]
    fn flow_style_keys_are_found_after_their_parent() {
        let text = "machine:\n  network: {vip: {ip: 1.2.3.4}}\n";
        assert_eq!(
            locate_path(text, "machine.network.vip"),
            Some(Pos::new(2, 13))
        );
        let text = "machine: {network: {interfaces: [{interface: eth0, vip: {ip: 1.2.3.4}}]}}\n";
        assert_eq!(
            locate_path(text, "machine.network.interfaces[0].vip"),
            Some(Pos::new(1, 52))
        );
    }

    #[test]
    fn json_patches_are_found_by_their_pointer() {
        let text = "- op: add\n  path: /machine/network/vip\n  value: {ip: 1.2.3.4}\n- op: add\n  path: /machine/install/disk\n  value: 42\n";
        assert_eq!(
            locate_pointer(text, "machine.network.vip.ip"),
            Some(Pos::new(2, 9))
        );
        assert_eq!(
            locate_pointer(text, "machine.install.disk"),
            Some(Pos::new(5, 9))
        );
        assert_eq!(locate_pointer(text, "cluster.network"), None);
        let json = r#"[{"op": "add", "path": "/machine/network/interfaces/-", "value": {}}]"#;
        assert_eq!(
            locate_pointer(json, "machine.network.interfaces[0]"),
            Some(Pos::new(1, 25))
        );
    }
}
