//! The reader: a hand-written recursive descent over bytes, depth-limited, every error at a
//! 1-based line:column.

use crate::value::{is_number, is_word_byte, Block, Body, Fields, Header, Message, Number, Value};
use std::collections::HashSet;

/// Most bytes a message may have (1 MiB).
pub const MAX_INPUT_BYTES: usize = 1 << 20;
/// Most blocks after the `HEADER`.
pub const MAX_BLOCKS: usize = 256;
/// Deepest nesting of `{}`, `[]` and `()`, a block's body counting as 1.
pub const MAX_DEPTH: usize = 32;
/// Longest string after unescaping, bare word, number or key, in bytes (64 KiB).
pub const MAX_STRING_BYTES: usize = 64 * 1024;
/// Most values in one message, all levels together (bounds memory to a small multiple of the
/// input whatever its shape).
pub const MAX_VALUES: usize = 100_000;

/// The reader's bounds; [`Limits::default`] is the `MAX_*` constants. Over a bound is a
/// [`ParseError`] at the place it was crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// See [`MAX_INPUT_BYTES`].
    pub max_input_bytes: usize,
    /// See [`MAX_BLOCKS`].
    pub max_blocks: usize,
    /// See [`MAX_DEPTH`].
    pub max_depth: usize,
    /// See [`MAX_STRING_BYTES`].
    pub max_string_bytes: usize,
    /// See [`MAX_VALUES`].
    pub max_values: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_input_bytes: MAX_INPUT_BYTES,
            max_blocks: MAX_BLOCKS,
            max_depth: MAX_DEPTH,
            max_string_bytes: MAX_STRING_BYTES,
            max_values: MAX_VALUES,
        }
    }
}

/// A message the reader refused, at a 1-based line and column (columns count characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse error at {line}:{column}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What was wrong, short.
    pub message: String,
}

impl ParseError {
    /// An error at `line:column` (e.g. a missing field of a block found at that place).
    pub fn at(line: usize, column: usize, message: impl Into<String>) -> Self {
        ParseError {
            line,
            column,
            message: message.into(),
        }
    }
}

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

/// A message with where each block starts, for errors found after reading (a `REQ` without
/// `o`).
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The message.
    pub message: Message,
    /// Where the `HEADER` starts.
    pub header_at: Position,
    /// Where each of `message.blocks` starts (its type's first character).
    pub block_at: Vec<Position>,
}

/// Reads one message under the default [`Limits`].
pub fn parse(input: &str) -> Result<Message, ParseError> {
    parse_with(input, &Limits::default()).map(|p| p.message)
}

/// Reads one message under `limits`, with block positions.
pub fn parse_with(input: &str, limits: &Limits) -> Result<Parsed, ParseError> {
    let mut p = Parser {
        src: input,
        b: input.as_bytes(),
        i: 0,
        limits,
        values: 0,
        cursor: (0, 1, 1),
    };
    if input.len() > limits.max_input_bytes {
        return Err(ParseError::at(
            1,
            1,
            format!(
                "message of {} bytes is over the limit of {}",
                input.len(),
                limits.max_input_bytes
            ),
        ));
    }
    p.message()
}

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    i: usize,
    limits: &'a Limits,
    values: usize,
    /// (byte offset, line, column) of the last position computed, so block positions cost
    /// one pass over the input in total.
    cursor: (usize, usize, usize),
}

type R<T> = Result<T, ParseError>;

impl<'a> Parser<'a> {
    fn position(&mut self, at: usize) -> Position {
        let (from, mut line, mut column) = if at >= self.cursor.0 {
            self.cursor
        } else {
            (0, 1, 1)
        };
        let at = at.min(self.src.len());
        // `at` is always a char boundary: the reader only stops on ASCII bytes or the end.
        for c in self.src.get(from..at).unwrap_or("").chars() {
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        self.cursor = (at, line, column);
        Position { line, column }
    }

    fn err<T>(&mut self, at: usize, message: impl Into<String>) -> R<T> {
        let Position { line, column } = self.position(at);
        Err(ParseError::at(line, column, message))
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// What is at the cursor, for messages.
    fn found(&self) -> String {
        match self.src.get(self.i..).and_then(|s| s.chars().next()) {
            None => "end of input".to_owned(),
            Some(c) if c.is_control() => format!("{:?}", c),
            Some(c) => format!("'{c}'"),
        }
    }

    fn expect(&mut self, c: u8) -> R<()> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            let msg = format!("expected '{}', found {}", c as char, self.found());
            self.err(self.i, msg)
        }
    }

    fn message(&mut self) -> R<Parsed> {
        self.skip_ws();
        let header_start = self.i;
        let header_at = self.position(header_start);
        if self.peek().is_none() {
            return self.err(self.i, "empty message: expected HEADER");
        }
        let kind = self.ident("a block type")?;
        if kind != "HEADER" {
            return self.err(
                header_start,
                format!("the first block must be HEADER, found {kind}"),
            );
        }
        self.expect(b':')?;
        self.skip_ws();
        if self.peek() != Some(b'{') {
            let msg = format!("expected '{{' after HEADER:, found {}", self.found());
            return self.err(self.i, msg);
        }
        let fields = self.map(1)?;
        let header = self.header(fields, header_start)?;

        let mut blocks = Vec::new();
        let mut block_at = Vec::new();
        loop {
            self.skip_ws();
            if self.peek().is_none() {
                break;
            }
            let start = self.i;
            if blocks.len() == self.limits.max_blocks {
                let msg = format!("more than {} blocks", self.limits.max_blocks);
                return self.err(start, msg);
            }
            let kind = self.ident("a block type")?;
            if kind == "HEADER" {
                return self.err(start, "HEADER may only be the first block");
            }
            self.expect(b':')?;
            self.skip_ws();
            let body = match self.peek() {
                Some(b'{') => Body::Map(self.map(1)?),
                Some(b'[') => Body::List(self.list(1)?),
                _ => {
                    let msg = format!("expected '{{' or '[' after {kind}:, found {}", self.found());
                    return self.err(self.i, msg);
                }
            };
            block_at.push(self.position(start));
            blocks.push(Block { kind, body });
        }
        Ok(Parsed {
            message: Message { header, blocks },
            header_at,
            block_at,
        })
    }

    fn header(&mut self, fields: Fields, at: usize) -> R<Header> {
        let (mut from, mut to, mut seq, mut batch) = (None, None, None, None);
        let mut extra = Vec::new();
        for (k, v) in fields {
            match k.as_str() {
                "f" | "t" | "b" => {
                    let Some(text) = v.as_str().filter(|s| !s.is_empty()) else {
                        return self
                            .err(at, format!("HEADER field '{k}' must be a non-empty string"));
                    };
                    let text = text.to_owned();
                    match k.as_str() {
                        "f" => from = Some(text),
                        "t" => to = Some(text),
                        _ => batch = Some(text),
                    }
                }
                "s" => match &v {
                    Value::Number(n) => match n.as_u64() {
                        Some(n) => seq = Some(n),
                        None => {
                            return self.err(at, "HEADER field 's' must be a non-negative integer")
                        }
                    },
                    _ => return self.err(at, "HEADER field 's' must be a number"),
                },
                _ if k.starts_with("x_") => extra.push((k, v)),
                _ => return self.err(at, format!("unknown HEADER field '{k}'")),
            }
        }
        let Some(from) = from else {
            return self.err(at, "missing required field 'f' in HEADER");
        };
        let Some(to) = to else {
            return self.err(at, "missing required field 't' in HEADER");
        };
        let Some(seq) = seq else {
            return self.err(at, "missing required field 's' in HEADER");
        };
        Ok(Header {
            from,
            to,
            seq,
            batch,
            extra,
        })
    }

    /// `letter { letter | digit | "_" }`
    fn ident(&mut self, what: &str) -> R<String> {
        let start = self.i;
        if !self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            let msg = format!("expected {what}, found {}", self.found());
            return self.err(start, msg);
        }
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            self.i += 1;
        }
        if self.i - start > self.limits.max_string_bytes {
            let msg = format!("{what} longer than {} bytes", self.limits.max_string_bytes);
            return self.err(start, msg);
        }
        Ok(self.src[start..self.i].to_owned())
    }

    fn count_value(&mut self, at: usize) -> R<()> {
        self.values += 1;
        if self.values > self.limits.max_values {
            let msg = format!("more than {} values", self.limits.max_values);
            return self.err(at, msg);
        }
        Ok(())
    }

    fn enter(&mut self, depth: usize) -> R<()> {
        if depth > self.limits.max_depth {
            let msg = format!("nested deeper than {}", self.limits.max_depth);
            return self.err(self.i, msg);
        }
        Ok(())
    }

    /// `{ [pair {, pair}] }` at the cursor (which is on `{`); `depth` is this map's.
    fn map(&mut self, depth: usize) -> R<Fields> {
        self.enter(depth)?;
        self.i += 1;
        self.pairs(b'}', depth, "map")
    }

    /// `( [pair {, pair}] )`
    fn tuple(&mut self, depth: usize) -> R<Fields> {
        self.enter(depth)?;
        self.i += 1;
        self.pairs(b')', depth, "tuple")
    }

    fn pairs(&mut self, close: u8, depth: usize, what: &str) -> R<Fields> {
        let mut fields = Vec::new();
        let mut seen: HashSet<&'a str> = HashSet::new();
        self.skip_ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(fields);
        }
        loop {
            self.skip_ws();
            let key_at = self.i;
            let key = self.ident("a key")?;
            let src: &'a str = self.src;
            if !seen.insert(&src[key_at..self.i]) {
                return self.err(key_at, format!("duplicate key '{key}'"));
            }
            self.expect(b':')?;
            let value = self.value(depth)?;
            fields.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(c) if c == close => {
                    self.i += 1;
                    return Ok(fields);
                }
                _ => {
                    let msg = format!(
                        "expected ',' or '{}' in {what}, found {}",
                        close as char,
                        self.found()
                    );
                    return self.err(self.i, msg);
                }
            }
        }
    }

    /// `[ [value {, value}] ]`
    fn list(&mut self, depth: usize) -> R<Vec<Value>> {
        self.enter(depth)?;
        self.i += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(items);
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(items);
                }
                _ => {
                    let msg = format!("expected ',' or ']' in list, found {}", self.found());
                    return self.err(self.i, msg);
                }
            }
        }
    }

    /// A value inside a container at `depth`.
    fn value(&mut self, depth: usize) -> R<Value> {
        self.skip_ws();
        let start = self.i;
        self.count_value(start)?;
        match self.peek() {
            Some(b'"') => self.string().map(Value::Str),
            Some(b'-' | b'0'..=b'9') => self.number().map(Value::Number),
            Some(b'{') => self.map(depth + 1).map(Value::Map),
            Some(b'[') => self.list(depth + 1).map(Value::List),
            Some(b'(') => self.tuple(depth + 1).map(Value::Tuple),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => self.word_value(),
            _ => {
                let msg = format!("expected a value, found {}", self.found());
                self.err(start, msg)
            }
        }
    }

    fn word(&mut self) -> R<String> {
        let start = self.i;
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        {
            let msg = format!("expected a bare word, found {}", self.found());
            return self.err(start, msg);
        }
        while self.peek().is_some_and(is_word_byte) {
            self.i += 1;
        }
        if self.i - start > self.limits.max_string_bytes {
            let msg = format!(
                "bare word longer than {} bytes",
                self.limits.max_string_bytes
            );
            return self.err(start, msg);
        }
        Ok(self.src[start..self.i].to_owned())
    }

    /// A bare word, `true`/`false`, or an enum `A|B|…` (no spaces around `|`).
    fn word_value(&mut self) -> R<Value> {
        let start = self.i;
        let first = self.word()?;
        if self.peek() != Some(b'|') {
            return Ok(match first.as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => Value::Symbol(first),
            });
        }
        let mut members = vec![first];
        while self.peek() == Some(b'|') {
            self.i += 1;
            members.push(self.word()?);
            if self.i - start > self.limits.max_string_bytes {
                let msg = format!("enum longer than {} bytes", self.limits.max_string_bytes);
                return self.err(start, msg);
            }
        }
        Ok(Value::Enum(members))
    }

    /// `-?digit+(.digit+)?`
    fn number(&mut self) -> R<Number> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            p.i > s
        };
        if !digits(self) {
            let msg = format!("expected a digit, found {}", self.found());
            return self.err(self.i, msg);
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                let msg = format!("expected a digit after '.', found {}", self.found());
                return self.err(self.i, msg);
            }
        }
        if self.i - start > self.limits.max_string_bytes {
            let msg = format!("number longer than {} bytes", self.limits.max_string_bytes);
            return self.err(start, msg);
        }
        let text = &self.src[start..self.i];
        debug_assert!(is_number(text.as_bytes()));
        match Number::parse(text) {
            Some(n) => Ok(n),
            None => self.err(start, "invalid number"),
        }
    }

    /// `"…"` with JSON's escapes; raw control characters are refused.
    fn string(&mut self) -> R<String> {
        let start = self.i;
        self.i += 1;
        let mut out = String::new();
        loop {
            // Copy the run up to the next quote, backslash or control byte in one go.
            let run = self.i;
            while self
                .peek()
                .is_some_and(|c| c != b'"' && c != b'\\' && c >= 0x20)
            {
                self.i += 1;
            }
            out.push_str(&self.src[run..self.i]);
            if out.len() > self.limits.max_string_bytes {
                let msg = format!("string longer than {} bytes", self.limits.max_string_bytes);
                return self.err(start, msg);
            }
            match self.peek() {
                None => return self.err(start, "unterminated string"),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let esc_at = self.i;
                    self.i += 1;
                    let simple = match self.peek() {
                        Some(b'"') => Some('"'),
                        Some(b'\\') => Some('\\'),
                        Some(b'/') => Some('/'),
                        Some(b'b') => Some('\u{8}'),
                        Some(b'f') => Some('\u{c}'),
                        Some(b'n') => Some('\n'),
                        Some(b'r') => Some('\r'),
                        Some(b't') => Some('\t'),
                        _ => None,
                    };
                    let c = match (simple, self.peek()) {
                        (Some(c), _) => {
                            self.i += 1;
                            c
                        }
                        (None, Some(b'u')) => {
                            self.i += 1;
                            self.unicode_escape(esc_at)?
                        }
                        _ => {
                            let msg = format!("invalid escape '\\' followed by {}", self.found());
                            return self.err(esc_at, msg);
                        }
                    };
                    out.push(c);
                }
                Some(_) => {
                    let msg = format!("control character {} in string", self.found());
                    return self.err(self.i, msg);
                }
            }
        }
    }

    /// After `\u`: four hex digits, a surrogate pair as two escapes.
    fn unicode_escape(&mut self, esc_at: usize) -> R<char> {
        let hi = self.hex4(esc_at)?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.b.get(self.i) != Some(&b'\\') || self.b.get(self.i + 1) != Some(&b'u') {
                return self.err(esc_at, "unpaired surrogate in \\u escape");
            }
            self.i += 2;
            let lo = self.hex4(esc_at)?;
            if !(0xDC00..0xE000).contains(&lo) {
                return self.err(esc_at, "unpaired surrogate in \\u escape");
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else {
            hi
        };
        match char::from_u32(code) {
            Some(c) => Ok(c),
            None => self.err(esc_at, "unpaired surrogate in \\u escape"),
        }
    }

    fn hex4(&mut self, esc_at: usize) -> R<u32> {
        let mut n = 0;
        for _ in 0..4 {
            let d = match self.peek().and_then(|c| (c as char).to_digit(16)) {
                Some(d) => d,
                None => return self.err(esc_at, "\\u escape needs four hex digits"),
            };
            n = n * 16 + d;
            self.i += 1;
        }
        Ok(n)
    }
}
