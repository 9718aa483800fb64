//! The writer: one block per line, no spaces, strings escaped; what the reader reads back
//! equal.

use crate::value::{is_ident, is_symbol, is_word, Block, Body, Header, Message, Value};
use std::fmt::Write as _;

/// Writes `message`: `HEADER:{f:…,t:…,s:…[,b:…][,x_…]}` then each block, each on its own
/// line, ending with a newline.
///
/// For every message the reader returned, `parse(&write(&m)) == Ok(m)`. A message built by
/// hand round-trips too when its keys and block types are identifiers (`letter {letter | digit
/// | _}`), its enums have two or more bare words and its numbers come from [`crate::Number`];
/// the writer never emits text the reader refuses: a key or type that is not an identifier is
/// written with each bad character as `_` (and `x` before a leading non-letter), a
/// [`Value::Symbol`] that is not a bare word is quoted, an enum with a member that is not one
/// is written as one quoted string.
pub fn write(message: &Message) -> String {
    let mut out = String::new();
    write_header(&mut out, &message.header);
    for b in &message.blocks {
        write_block(&mut out, b);
    }
    out
}

/// Writes one block and its newline.
pub fn write_block(out: &mut String, block: &Block) {
    ident(out, &block.kind);
    out.push(':');
    match &block.body {
        Body::Map(f) => fields(out, f, '{', '}'),
        Body::List(v) => list(out, v),
    }
    out.push('\n');
}

fn write_header(out: &mut String, h: &Header) {
    out.push_str("HEADER:{f:");
    text(out, &h.from);
    out.push_str(",t:");
    text(out, &h.to);
    let _ = write!(out, ",s:{}", h.seq);
    if let Some(b) = &h.batch {
        out.push_str(",b:");
        text(out, b);
    }
    for (k, v) in &h.extra {
        out.push(',');
        ident(out, k);
        out.push(':');
        value(out, v);
    }
    out.push_str("}\n");
}

/// A header text field: bare when it reads back as the same text, quoted otherwise.
fn text(out: &mut String, s: &str) {
    if is_symbol(s) {
        out.push_str(s);
    } else {
        string(out, s);
    }
}

fn ident(out: &mut String, s: &str) {
    if is_ident(s) {
        out.push_str(s);
        return;
    }
    if !s.as_bytes().first().is_some_and(u8::is_ascii_alphabetic) {
        out.push('x');
    }
    for c in s.chars() {
        out.push(if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        });
    }
}

fn fields(out: &mut String, f: &[(String, Value)], open: char, close: char) {
    out.push(open);
    for (i, (k, v)) in f.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        ident(out, k);
        out.push(':');
        value(out, v);
    }
    out.push(close);
}

fn list(out: &mut String, items: &[Value]) {
    out.push('[');
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        value(out, v);
    }
    out.push(']');
}

fn value(out: &mut String, v: &Value) {
    match v {
        Value::Str(s) => string(out, s),
        Value::Number(n) => out.push_str(n.as_str()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Symbol(s) if is_symbol(s) => out.push_str(s),
        Value::Symbol(s) => string(out, s),
        Value::Enum(m) if m.len() >= 2 && m.iter().all(|w| is_word(w)) => {
            out.push_str(&m.join("|"))
        }
        Value::Enum(m) => string(out, &m.join("|")),
        Value::List(items) => list(out, items),
        Value::Tuple(f) => fields(out, f, '(', ')'),
        Value::Map(f) => fields(out, f, '{', '}'),
    }
}

/// `"…"`: `"` and `\` escaped, control characters as `\n`, `\t`, … or `\u00XX`; everything
/// else (non-ASCII included) as is.
pub fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
