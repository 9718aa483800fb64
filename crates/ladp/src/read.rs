//! The reader: text → [`Sexp`], iterative and bounded.

use crate::sexp::{is_int, is_symbol_char, number_shaped, Decimal, Sexp, Sym};
use std::fmt;
use std::num::NonZeroU64;

/// Largest message read, in bytes (§14 "larger than 64 kB are rejected"; read as 64 KiB).
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// Deepest list nesting read by default. The seed's deepest construct nests 4 levels.
pub const MAX_DEPTH: usize = 64;
/// Hard ceiling on [`Limits::max_depth`]: trees are dropped, compared and printed (`Debug`)
/// recursively, so no reader setting goes past it.
pub const MAX_DEPTH_CEILING: usize = 256;
/// Most atoms and lists read from one input (each `(`…`)` and each atom counts one).
pub const MAX_NODES: usize = 16 * 1024;
/// Longest excerpt of the input quoted in an error message.
const QUOTE_CHARS: usize = 32;

/// What one read may take. [`Limits::default`] is the LADP profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of input ([`MAX_INPUT_BYTES`]).
    pub max_bytes: usize,
    /// List nesting ([`MAX_DEPTH`]); values over [`MAX_DEPTH_CEILING`] act as the ceiling.
    pub max_depth: usize,
    /// Atoms plus lists ([`MAX_NODES`]).
    pub max_nodes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: MAX_INPUT_BYTES,
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
        }
    }
}

/// A rejected input: where (1-based line and column, columns in characters) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in Unicode scalar values.
    pub column: u32,
    /// What is wrong, for the sender (quotes at most a short excerpt of the input).
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "parse error at {}:{}: {}",
            self.line, self.column, self.message
        )
    }
}

impl ParseError {
    /// `"L:C"`, as the gateway's `(at "L:C")` field carries it.
    pub fn at(&self) -> String {
        format!("{}:{}", self.line, self.column)
    }
}

/// Every form of `input` (the seed's examples often hold several), default [`Limits`].
pub fn parse_all(input: &str) -> Result<Vec<Sexp>, ParseError> {
    parse_with(input, &Limits::default())
}

/// Exactly one form.
pub fn parse_one(input: &str) -> Result<Sexp, ParseError> {
    let (mut forms, second) = read(input, &Limits::default())?;
    match (forms.len(), second) {
        (1, _) => Ok(forms.remove(0)),
        (0, _) => Err(ParseError {
            line: 1,
            column: 1,
            message: "empty input: expected one form".into(),
        }),
        (_, Some(p)) => Err(p.error("expected one form, found another")),
        (_, None) => Err(Pos::START.error("expected one form")),
    }
}

/// Every form of raw bytes: the size cap first, then UTF-8 (an invalid byte's position).
pub fn parse_bytes(bytes: &[u8], limits: &Limits) -> Result<Vec<Sexp>, ParseError> {
    check_size(bytes.len(), limits)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => parse_with(s, limits),
        Err(e) => {
            let valid = std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default();
            let mut pos = Pos::START;
            for c in valid.chars() {
                pos.advance(c);
            }
            Err(pos.error("invalid UTF-8"))
        }
    }
}

/// Every form of `input` under `limits`.
pub fn parse_with(input: &str, limits: &Limits) -> Result<Vec<Sexp>, ParseError> {
    read(input, limits).map(|(forms, _)| forms)
}

fn check_size(len: usize, limits: &Limits) -> Result<(), ParseError> {
    if len > limits.max_bytes {
        return Err(Pos::START.error(format!(
            "message of {len} bytes is larger than the {}-byte limit",
            limits.max_bytes
        )));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct Pos {
    line: u32,
    column: u32,
}

impl Pos {
    const START: Pos = Pos { line: 1, column: 1 };

    fn advance(&mut self, c: char) {
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.column = 1;
        } else {
            self.column = self.column.saturating_add(1);
        }
    }

    fn error(self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            column: self.column,
            message: message.into(),
        }
    }
}

struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    pos: Pos,
}

impl Cursor<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        self.pos.advance(c);
        Some(c)
    }

    /// Skips whitespace and `;` comments (to the end of the line).
    fn skip_blank(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() {
                self.bump();
            } else if c == ';' {
                while let Some(c) = self.bump() {
                    if c == '\n' {
                        break;
                    }
                }
            } else {
                break;
            }
        }
    }
}

/// The forms, and where the second top-level form starts (for [`parse_one`]).
fn read(input: &str, limits: &Limits) -> Result<(Vec<Sexp>, Option<Pos>), ParseError> {
    check_size(input.len(), limits)?;
    let max_depth = limits.max_depth.min(MAX_DEPTH_CEILING);
    let mut cur = Cursor {
        chars: input.chars().peekable(),
        pos: Pos::START,
    };
    let mut top: Vec<Sexp> = Vec::new();
    let mut second = None;
    // Open lists: their items so far and where their `(` is.
    let mut open: Vec<(Vec<Sexp>, Pos)> = Vec::new();
    let mut nodes = 0usize;

    loop {
        cur.skip_blank();
        let start = cur.pos;
        let Some(c) = cur.peek() else { break };
        if open.is_empty() && top.len() == 1 && second.is_none() {
            second = Some(start);
        }
        if c != ')' {
            nodes += 1;
            if nodes > limits.max_nodes {
                return Err(start.error(format!("more than {} atoms and lists", limits.max_nodes)));
            }
        }
        let atom = match c {
            '(' => {
                cur.bump();
                if open.len() >= max_depth {
                    return Err(start.error(format!("lists nested deeper than {max_depth}")));
                }
                open.push((Vec::new(), start));
                continue;
            }
            ')' => {
                cur.bump();
                match open.pop() {
                    Some((items, _)) => Sexp::List(items),
                    None => return Err(start.error("unexpected `)` with no open list")),
                }
            }
            '"' => read_string(&mut cur)?,
            c if c.is_control() => {
                return Err(start.error(format!("control character U+{:04X}", c as u32)));
            }
            _ => read_token(&mut cur)?,
        };
        match open.last_mut() {
            Some((items, _)) => items.push(atom),
            None => top.push(atom),
        }
    }
    if let Some((_, at)) = open.last() {
        return Err(at.error("`(` is never closed"));
    }
    Ok((top, second))
}

fn read_string(cur: &mut Cursor<'_>) -> Result<Sexp, ParseError> {
    let start = cur.pos;
    cur.bump();
    let mut s = String::new();
    loop {
        let at = cur.pos;
        let Some(c) = cur.bump() else {
            return Err(start.error("string is never closed"));
        };
        match c {
            '"' => return Ok(Sexp::Str(s)),
            '\\' => s.push(read_escape(cur, at)?),
            '\n' | '\r' | '\t' => s.push(c),
            c if c.is_control() => {
                return Err(at.error(format!(
                    "control character U+{:04X} in a string (write \\u{{{:x}}})",
                    c as u32, c as u32
                )));
            }
            c => s.push(c),
        }
    }
}

/// After a `\` at `at`: `\" \\ \n \r \t \u{1-6 hex}`.
fn read_escape(cur: &mut Cursor<'_>, at: Pos) -> Result<char, ParseError> {
    match cur.bump() {
        Some('"') => Ok('"'),
        Some('\\') => Ok('\\'),
        Some('n') => Ok('\n'),
        Some('r') => Ok('\r'),
        Some('t') => Ok('\t'),
        Some('u') => {
            let bad = || at.error("malformed \\u{…} escape (1 to 6 hex digits of a scalar value)");
            if cur.bump() != Some('{') {
                return Err(bad());
            }
            let mut v: u32 = 0;
            let mut digits = 0;
            loop {
                match cur.bump() {
                    Some('}') if digits > 0 => break,
                    Some(h) if digits < 6 => {
                        let d = h.to_digit(16).ok_or_else(bad)?;
                        v = v * 16 + d;
                        digits += 1;
                    }
                    _ => return Err(bad()),
                }
            }
            char::from_u32(v).ok_or_else(bad)
        }
        Some(c) => Err(at.error(format!("unknown escape `\\{}`", c.escape_debug()))),
        None => Err(at.error("string is never closed")),
    }
}

fn read_token(cur: &mut Cursor<'_>) -> Result<Sexp, ParseError> {
    let start = cur.pos;
    let mut tok = String::new();
    while let Some(c) = cur.peek() {
        if !is_symbol_char(c) {
            break;
        }
        tok.push(c);
        cur.bump();
    }
    if !number_shaped(&tok) {
        return Ok(Sexp::Symbol(Sym::from_reader(tok)));
    }
    read_number(&tok).map_err(|why| start.error(format!("{why} `{}`", quote(&tok))))
}

fn quote(tok: &str) -> String {
    if tok.chars().count() <= QUOTE_CHARS {
        tok.to_owned()
    } else {
        let mut s: String = tok.chars().take(QUOTE_CHARS).collect();
        s.push('…');
        s
    }
}

/// `tok` is [`number_shaped`].
fn read_number(tok: &str) -> Result<Sexp, &'static str> {
    if let Some((n, d)) = tok.split_once('/') {
        let n: i64 = n.parse().map_err(|_| "rational out of range")?;
        let d: u64 = d.parse().map_err(|_| "rational out of range")?;
        let d = NonZeroU64::new(d).ok_or("zero denominator in rational")?;
        return Ok(Sexp::Rational(n, d));
    }
    if is_int(tok) {
        return tok
            .parse()
            .map(Sexp::Int)
            .map_err(|_| "integer out of range");
    }
    tok.parse::<f64>()
        .ok()
        .and_then(Decimal::new)
        .map(Sexp::Decimal)
        .ok_or("decimal out of range")
}
