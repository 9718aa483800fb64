//! The s-expression tree and its writer.

use std::fmt;
use std::num::NonZeroU64;

/// One datum of the LADP DSL.
///
/// Atoms whose text could be misread (a symbol that looks like a number, a non-finite
/// decimal, a zero denominator) cannot be built: [`Sym`], [`Decimal`] and the rational's
/// `NonZeroU64` check at construction, so every tree writes to text that reads back equal.
#[derive(Debug, Clone, PartialEq)]
pub enum Sexp {
    /// A bare symbol: `msg`, `task-init`, `∀`, `ΔI`, `β*`, `passed|failed`, `<msg-id>`.
    Symbol(Sym),
    /// A double-quoted string, escapes resolved.
    Str(String),
    /// An integer in `i64` range: `42`, `-7`, `1746176400000`.
    Int(i64),
    /// A decimal with a `.` or an exponent: `0.75`, `-1.5e-3`.
    Decimal(Decimal),
    /// A rational as written (not reduced): `3/4`, `-6/8`.
    Rational(i64, NonZeroU64),
    /// `( … )`, possibly empty.
    List(Vec<Sexp>),
}

impl Sexp {
    /// A symbol; `None` when `s` is not readable back as that symbol (see [`Sym::new`]).
    pub fn symbol(s: &str) -> Option<Sexp> {
        Sym::new(s).map(Sexp::Symbol)
    }

    /// A string atom.
    pub fn string(s: impl Into<String>) -> Sexp {
        Sexp::Str(s.into())
    }

    /// `(head args…)` with a symbol head. `head` must be a valid symbol: callers pass literals.
    pub fn form(head: &'static str, args: impl IntoIterator<Item = Sexp>) -> Sexp {
        let mut items = vec![Sexp::Symbol(Sym::lit(head))];
        items.extend(args);
        Sexp::List(items)
    }

    /// The symbol's text, if this is a symbol.
    pub fn as_symbol(&self) -> Option<&str> {
        match self {
            Sexp::Symbol(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// The string's text, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Sexp::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The text of a symbol or a string (the seed writes names either way).
    pub fn as_name(&self) -> Option<&str> {
        self.as_symbol().or_else(|| self.as_str())
    }

    /// The items, if this is a list.
    pub fn as_list(&self) -> Option<&[Sexp]> {
        match self {
            Sexp::List(items) => Some(items),
            _ => None,
        }
    }

    /// Any number as `f64` (integers, decimals, rationals).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Sexp::Int(i) => Some(*i as f64),
            Sexp::Decimal(d) => Some(d.get()),
            Sexp::Rational(n, d) => Some(*n as f64 / d.get() as f64),
            _ => None,
        }
    }

    /// For `(head …)` lists, the head symbol.
    pub fn head(&self) -> Option<&str> {
        self.as_list()?.first()?.as_symbol()
    }

    /// Text with no line breaks; `parse_one(&x.to_string()) == Ok(x)`.
    pub fn write(&self) -> String {
        let mut out = String::new();
        write_into(self, &mut out);
        out
    }
}

impl fmt::Display for Sexp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.write())
    }
}

/// A symbol's text: non-empty, no whitespace, control characters, `(`, `)`, `"` or `;`, and
/// not shaped like a number (`12`, `-3/4`, `1.5e3`; `2025-05-01` and `1.2.3` are symbols).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sym(String);

impl Sym {
    /// `None` when `s` would not read back as this symbol.
    pub fn new(s: &str) -> Option<Sym> {
        if s.is_empty() || number_shaped(s) || !s.chars().all(is_symbol_char) {
            return None;
        }
        Some(Sym(s.to_owned()))
    }

    /// A literal the crate knows to be valid; falls back to a string-safe placeholder never
    /// reached (kept panic-free).
    pub(crate) fn lit(s: &'static str) -> Sym {
        Sym::new(s).unwrap_or_else(|| Sym("invalid-symbol".to_owned()))
    }

    /// Unchecked: the reader has already checked `s`.
    pub(crate) fn from_reader(s: String) -> Sym {
        Sym(s)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Sym {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A finite `f64` written so it reads back as a decimal (always with a `.` or an exponent).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Decimal(f64);

impl Decimal {
    /// `None` for NaN and infinities (they have no LADP spelling).
    pub fn new(v: f64) -> Option<Decimal> {
        v.is_finite().then_some(Decimal(v))
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

/// Characters a symbol may hold (also what ends one when reading).
pub(crate) fn is_symbol_char(c: char) -> bool {
    !(c.is_whitespace() || c.is_control() || matches!(c, '(' | ')' | '"' | ';'))
}

/// Iterative: trees built in code may be deeper than the reader accepts.
fn write_into(root: &Sexp, out: &mut String) {
    enum Step<'a> {
        Open(&'a Sexp),
        Close,
        Space,
    }
    let mut stack = vec![Step::Open(root)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Close => out.push(')'),
            Step::Space => out.push(' '),
            Step::Open(x) => match x {
                Sexp::List(items) => {
                    out.push('(');
                    stack.push(Step::Close);
                    for (i, item) in items.iter().enumerate().rev() {
                        stack.push(Step::Open(item));
                        if i > 0 {
                            stack.push(Step::Space);
                        }
                    }
                }
                atom => write_atom(atom, out),
            },
        }
    }
}

fn write_atom(x: &Sexp, out: &mut String) {
    use std::fmt::Write;
    match x {
        Sexp::Symbol(s) => out.push_str(s.as_str()),
        Sexp::Str(s) => write_string(s, out),
        Sexp::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Sexp::Decimal(d) => {
            // `{:?}` is the shortest text that reads back to the same f64 and always has a
            // `.` or an exponent (`1.0`, `1e20`, `1.5e-7`).
            let _ = write!(out, "{:?}", d.get());
        }
        Sexp::Rational(n, d) => {
            let _ = write!(out, "{n}/{d}");
        }
        Sexp::List(_) => {}
    }
}

/// `"…"` with `\"`, `\\`, `\n`, `\r`, `\t` and `\u{…}` for other control characters.
pub(crate) fn write_string(s: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Whether `tok` has the shape of a number (and so must be one, in range): `[+-]digits`,
/// `[+-]digits/digits`, or a decimal. Every other token is a symbol.
pub(crate) fn number_shaped(tok: &str) -> bool {
    match tok.split_once('/') {
        Some((n, d)) => is_int(n) && digits(d),
        None => is_int(tok) || is_decimal(tok),
    }
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `[+-]digits`.
pub(crate) fn is_int(s: &str) -> bool {
    digits(s.strip_prefix(['+', '-']).unwrap_or(s))
}

/// `[+-]digits[.digits][(e|E)[+-]digits]` with a `.` or an exponent.
fn is_decimal(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exp) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((i, f)) => digits(i) && digits(f),
        None => digits(mantissa) && exp.is_some(),
    };
    mantissa_ok && exp.is_none_or(is_int)
}
