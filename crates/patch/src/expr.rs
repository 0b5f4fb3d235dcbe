//! Where the growing operations (`*`, `~`, `+`) of a Jinja tag are, found by a small parser
//! that follows
//! minijinja's operator precedence (`compiler/parser.rs`: `if`/`else`, `or`, `and`, `not`,
//! comparisons and `in`, `+ -`, `~`, `* / // %`, `**`, unary `-`, then postfix `.x`, `[i]`,
//! calls, filters and `is` tests). minijinja repeats a string up to 100 MB and a list
//! lazily without any limit for `x * n`, and joins any two values for `~` and `+`, and no
//! hook sees it; so [`super::shape`] turns each into a call the budget checks
//! ([`super::budget::MUL`], [`super::budget::CONCAT`], [`super::budget::ADD`]). A tag the
//! parser does not follow is left as written.

/// One token of a tag: its kind and its byte range in the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tok<'a> {
    kind: Kind<'a>,
    start: usize,
    end: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind<'a> {
    Word(&'a str),
    Literal,
    Op(&'a str),
    Open(u8),
    Close(u8),
}

/// The offset just past the string literal that starts at `i` (`'` or `"`, with `\`
/// escapes), or the end of the text: how Jinja and HCL expressions quote alike.
pub(super) fn skip_string(b: &[u8], mut i: usize) -> usize {
    let q = b[i];
    i += 1;
    while i < b.len() && b[i] != q {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(b.len())
}

/// The tokens of `body`, which starts at byte `offset` of the template.
fn tokens(body: &str, offset: usize) -> Vec<Tok<'_>> {
    let b = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let kind = match b[i] {
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'"' | b'\'' => {
                i = skip_string(b, i);
                Kind::Literal
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.')
                {
                    // `1.foo` is not a number: stop before a dot not followed by a digit.
                    if b[i] == b'.' && !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                        break;
                    }
                    i += 1;
                }
                Kind::Literal
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                Kind::Word(&body[start..i])
            }
            b'(' | b'[' | b'{' => {
                i += 1;
                Kind::Open(b[start])
            }
            b')' | b']' | b'}' => {
                i += 1;
                Kind::Close(b[start])
            }
            _ => {
                let two = body.get(i..i + 2).unwrap_or("");
                let len = if matches!(two, "**" | "//" | "==" | "!=" | "<=" | ">=") {
                    2
                } else {
                    body[i..].chars().next().map_or(1, char::len_utf8)
                };
                i += len;
                Kind::Op(&body[start..i])
            }
        };
        out.push(Tok {
            kind,
            start: start + offset,
            end: i + offset,
        });
    }
    out
}

/// Words that start a statement rather than an expression.
const KEYWORDS: &[&str] = &[
    "set",
    "endset",
    "for",
    "endfor",
    "if",
    "elif",
    "else",
    "endif",
    "macro",
    "endmacro",
    "call",
    "endcall",
    "filter",
    "endfilter",
    "with",
    "endwith",
    "block",
    "endblock",
    "extends",
    "include",
    "import",
    "from",
    "as",
    "recursive",
    "raw",
    "endraw",
    "autoescape",
    "endautoescape",
    "do",
    "continue",
    "break",
    "ignore",
    "missing",
    "context",
    "without",
];

struct Parser<'t, 'a> {
    toks: &'t [Tok<'a>],
    i: usize,
    /// (the operator, left operand start, operator token, right operand end), as token
    /// indexes, inner operations first.
    ops: Vec<(Growth, usize, usize, usize)>,
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<Kind<'_>> {
        self.toks.get(self.i).map(|t| t.kind)
    }

    fn eat_op(&mut self, ops: &[&str]) -> Option<usize> {
        match self.peek() {
            Some(Kind::Op(o)) if ops.contains(&o) => {
                self.i += 1;
                Some(self.i - 1)
            }
            Some(_) | None => None,
        }
    }

    fn eat_word(&mut self, word: &str) -> bool {
        if self.peek() == Some(Kind::Word(word)) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Option<()> {
        self.or()?;
        while self.eat_word("if") {
            self.or()?;
            if self.eat_word("else") {
                self.or()?;
            }
        }
        Some(())
    }

    fn or(&mut self) -> Option<()> {
        self.and()?;
        while self.eat_word("or") {
            self.and()?;
        }
        Some(())
    }

    fn and(&mut self) -> Option<()> {
        self.not()?;
        while self.eat_word("and") {
            self.not()?;
        }
        Some(())
    }

    fn not(&mut self) -> Option<()> {
        if self.eat_word("not") {
            return self.not();
        }
        self.compare()
    }

    fn compare(&mut self) -> Option<()> {
        self.math1()?;
        loop {
            if self.eat_op(&["==", "!=", "<", ">", "<=", ">="]).is_some() || self.eat_word("in") {
                self.math1()?;
            } else if self.peek() == Some(Kind::Word("not"))
                && self.toks.get(self.i + 1).map(|t| t.kind) == Some(Kind::Word("in"))
            {
                self.i += 2;
                self.math1()?;
            } else {
                return Some(());
            }
        }
    }

    fn math1(&mut self) -> Option<()> {
        let start = self.i;
        self.concat()?;
        while let Some(op) = self.eat_op(&["+", "-"]) {
            self.concat()?;
            if self.toks[op].kind == Kind::Op("+") {
                self.ops.push((Growth::Add, start, op, self.i));
            }
        }
        Some(())
    }

    fn concat(&mut self) -> Option<()> {
        let start = self.i;
        self.math2()?;
        while let Some(op) = self.eat_op(&["~"]) {
            self.math2()?;
            self.ops.push((Growth::Concat, start, op, self.i));
        }
        Some(())
    }

    fn math2(&mut self) -> Option<()> {
        let start = self.i;
        self.pow()?;
        while let Some(op) = self.eat_op(&["*", "/", "//", "%"]) {
            self.pow()?;
            if self.toks[op].kind == Kind::Op("*") {
                self.ops.push((Growth::Mul, start, op, self.i));
            }
        }
        Some(())
    }

    fn pow(&mut self) -> Option<()> {
        self.unary()?;
        while self.eat_op(&["**"]).is_some() {
            self.unary()?;
        }
        Some(())
    }

    fn unary(&mut self) -> Option<()> {
        while self.eat_op(&["-", "+"]).is_some() {}
        self.primary()?;
        self.postfix()
    }

    fn primary(&mut self) -> Option<()> {
        match self.peek()? {
            Kind::Word(w) if !KEYWORDS.contains(&w) || matches!(w, "none" | "true" | "false") => {
                self.i += 1;
                Some(())
            }
            Kind::Literal => {
                self.i += 1;
                Some(())
            }
            Kind::Open(c) => self.group(c),
            Kind::Word(_) | Kind::Op(_) | Kind::Close(_) => None,
        }
    }

    /// A bracketed group: comma-separated expressions, `key: value` pairs, `name=value`
    /// arguments and slices `a:b:c` alike.
    fn group(&mut self, open: u8) -> Option<()> {
        let close = match open {
            b'(' => b')',
            b'[' => b']',
            _ => b'}',
        };
        self.i += 1;
        loop {
            match self.peek()? {
                Kind::Close(c) if c == close => {
                    self.i += 1;
                    return Some(());
                }
                Kind::Op("," | ":" | "=" | "**") => self.i += 1,
                Kind::Word(_) | Kind::Literal | Kind::Op(_) | Kind::Open(_) | Kind::Close(_) => {
                    if let Some(Kind::Close(c)) = self.peek()
                        && c != close
                    {
                        return None;
                    }
                    let before = self.i;
                    self.expr()?;
                    if self.i == before {
                        return None;
                    }
                }
            }
        }
    }

    fn postfix(&mut self) -> Option<()> {
        loop {
            match self.peek() {
                Some(Kind::Op(".")) => {
                    self.i += 2;
                }
                Some(Kind::Open(c @ (b'[' | b'('))) => self.group(c)?,
                Some(Kind::Op("|")) => {
                    self.i += 2;
                    if let Some(Kind::Open(b'(')) = self.peek() {
                        self.group(b'(')?;
                    }
                }
                Some(Kind::Word("is")) => {
                    self.i += 1;
                    self.eat_word("not");
                    self.i += 1;
                    match self.peek() {
                        Some(Kind::Open(b'(')) => self.group(b'(')?,
                        Some(Kind::Literal) => self.i += 1,
                        Some(Kind::Word(w))
                            if !matches!(w, "and" | "or" | "else" | "is")
                                && !KEYWORDS.contains(&w) =>
                        {
                            self.i += 1;
                        }
                        Some(_) | None => {}
                    }
                }
                Some(_) | None => return Some(()),
            }
        }
    }
}

/// An operator that builds a larger value from smaller ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// `a * b`: a number, or a string or list repeated.
    Mul,
    /// `a ~ b`: two values' text joined.
    Concat,
    /// `a + b`: a number, or two strings or lists joined.
    Add,
}

/// The operations of a tag whose body is `body`, at byte `offset` of the template, that
/// build a larger value: for each `a * b`, `a ~ b` and `a + b`, the operator, the byte where
/// `a` starts, the byte of the operator, and the byte just past `b`; of two operations that
/// start at the same byte, the inner comes first. Empty when the tag holds none, or when
/// the parser cannot follow it.
pub fn growth_ops(body: &str, offset: usize) -> Vec<(Growth, usize, usize, usize)> {
    if !body.contains(['*', '~', '+']) {
        return Vec::new();
    }
    let toks = tokens(body, offset);
    let mut p = Parser {
        toks: &toks,
        i: 0,
        ops: Vec::new(),
    };
    while p.i < toks.len() {
        let before = p.i;
        let starts_expr = match toks[p.i].kind {
            Kind::Word(w) => !KEYWORDS.contains(&w) || matches!(w, "none" | "true" | "false"),
            Kind::Literal | Kind::Open(_) => true,
            Kind::Op(o) => matches!(o, "-" | "+"),
            Kind::Close(_) => false,
        };
        if starts_expr && p.expr().is_none() {
            return Vec::new();
        }
        if p.i == before {
            p.i += 1;
        }
    }
    let last = toks.len();
    p.ops
        .into_iter()
        .filter(|&(_, _, _, end)| end > 0 && end <= last)
        .map(|(g, s, op, end)| (g, toks[s].start, toks[op].start, toks[end - 1].end))
        .collect()
}

/// `expr` with each growing operation written as a call, `a * b` as `func(Mul)(a, b)`
/// (for a templatefile expression, whose errors point at the start of its tag whatever
/// the text inside).
pub fn wrap_growth(expr: &str, func: impl Fn(Growth) -> &'static str) -> String {
    let mut edits: Vec<(usize, u8, isize, String, usize)> = Vec::new();
    for (k, (g, s, op, e)) in growth_ops(expr, 0).into_iter().enumerate() {
        edits.push((s, 1, -(k as isize), format!("{}(", func(g)), 0));
        edits.push((op, 2, 0, ",".into(), 1));
        edits.push((e, 0, 0, ")".into(), 0));
    }
    edits.sort_by_key(|e| (e.0, e.1, e.2));
    let mut out = String::with_capacity(expr.len() + edits.len() * 8);
    let mut at = 0;
    for (pos, _, _, text, skip) in edits {
        out.push_str(&expr[at..pos]);
        out.push_str(&text);
        at = pos + skip;
    }
    out.push_str(&expr[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(expr: &str) -> String {
        wrap_growth(expr, |g| match g {
            Growth::Mul => "M",
            Growth::Concat => "C",
            Growth::Add => "A",
        })
    }

    #[test]
    fn growing_operations_follow_minijinja_precedence() {
        for (expr, want) in [
            ("a * b", "M(a , b)"),
            ("a*b*c", "M(M(a,b),c)"),
            ("x ~ a * b ~ y", "C(C(x , M(a , b)) , y)"),
            ("a + b ~ c - d + e", "A(A(a , C(b , c)) - d , e)"),
            ("a / b * c", "M(a / b , c)"),
            ("a * b / c", "M(a , b) / c"),
            ("-a.b[0] * c|length", "M(-a.b[0] , c|length)"),
            ("a ** 2 * b ** 2", "M(a ** 2 , b ** 2)"),
            (
                "(a * b) * f(c * d, k=e * 2)",
                "M((M(a , b)) , f(M(c , d), k=M(e , 2)))",
            ),
            (
                "x if a * b > 1 else [1] * 3",
                "x if M(a , b) > 1 else M([1] , 3)",
            ),
            ("set ns.s = 'x' * 10", "set ns.s = M('x' , 10)"),
            ("set ns.s = ns.s ~ ns.s", "set ns.s = C(ns.s , ns.s)"),
            (
                "for i in range(n * 2) if i is divisibleby 3 * 1",
                "for i in range(M(n , 2)) if M(i is divisibleby 3 , 1)",
            ),
            ("dict(**kw) | length * 2", "M(dict(**kw) | length , 2)"),
            ("a not in b * c", "a not in M(b , c)"),
            ("'*' ~ x", "C('*' , x)"),
            ("-1 + 2", "A(-1 , 2)"),
            ("2 ** 8", "2 ** 8"),
        ] {
            assert_eq!(wrapped(expr), want, "{expr}");
        }
    }
}
