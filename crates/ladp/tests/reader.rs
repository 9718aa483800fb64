//! Malformed input is refused at the right line:column; the caps hold; nothing recurses.

use ladp::{
    parse_all, parse_bytes, parse_one, parse_with, Limits, Sexp, Sym, MAX_DEPTH, MAX_INPUT_BYTES,
    MAX_NODES,
};
use std::num::NonZeroU64;

/// `(line, column, message)` of the error `text` gives.
fn err(text: &str) -> (u32, u32, String) {
    match parse_all(text) {
        Ok(forms) => panic!("accepted {text:?}: {forms:?}"),
        Err(e) => (e.line, e.column, e.message),
    }
}

#[test]
fn malformed_inputs_name_line_and_column() {
    let cases: &[(&str, u32, u32, &str)] = &[
        ("(msg a b", 1, 1, "`(` is never closed"),
        ("(a)\n  (b (c)", 2, 3, "`(` is never closed"),
        ("(a))", 1, 4, "unexpected `)` with no open list"),
        ("(a\n  \"abc", 2, 3, "string is never closed"),
        ("(a \"x\\qy\")", 1, 6, "unknown escape `\\q`"),
        ("(a \"\\u{110000}\")", 1, 5, "malformed \\u{…} escape"),
        ("(a \"\\u{d800}\")", 1, 5, "malformed \\u{…} escape"),
        ("(a \"\\u{}\")", 1, 5, "malformed \\u{…} escape"),
        ("(quorum 3/0)", 1, 9, "zero denominator in rational `3/0`"),
        ("(q 1/99999999999999999999)", 1, 4, "rational out of range"),
        ("(q 99999999999999999999)", 1, 4, "integer out of range"),
        ("(q 1e999)", 1, 4, "decimal out of range `1e999`"),
        ("; comment\n(ΔI β* \u{7})", 2, 8, "control character U+0007"),
        (
            "(a \"tab\u{1}\")",
            1,
            8,
            "control character U+0001 in a string",
        ),
        (
            "(∀ x\n (→ p q)))",
            2,
            10,
            "unexpected `)` with no open list",
        ),
    ];
    for &(text, line, column, message) in cases {
        let (l, c, m) = err(text);
        assert_eq!((l, c), (line, column), "{text:?}: {m}");
        assert!(m.starts_with(message), "{text:?}: {m}");
    }
    let e = parse_all("(a))").unwrap_err();
    assert_eq!(
        e.to_string(),
        "parse error at 1:4: unexpected `)` with no open list"
    );
    assert_eq!(e.at(), "1:4");
    // Error messages quote at most a short excerpt of the input.
    let (_, _, m) = err(&format!("(q 1{})", "0".repeat(10_000)));
    assert!(m.len() < 100, "{m}");
}

#[test]
fn parse_one_wants_exactly_one_form() {
    assert_eq!(parse_one("  (a) ; done\n").unwrap().write(), "(a)");
    let e = parse_one("(a)\n (b)").unwrap_err();
    assert_eq!((e.line, e.column), (2, 2));
    assert!(parse_one(" ; nothing\n").is_err());
    assert_eq!(parse_all(" ; nothing\n"), Ok(vec![]));
}

#[test]
fn atoms_read_as_their_types() {
    let forms =
        parse_one(r#"(sym "s\"q\\\n\t\u{1F600}" 42 -7 +3 0.75 -1.5e-3 2E3 3/4 -6/8 () ∂/∂)"#)
            .unwrap();
    let items = forms.as_list().unwrap();
    assert_eq!(items[0], Sexp::symbol("sym").unwrap());
    assert_eq!(items[1], Sexp::string("s\"q\\\n\t😀"));
    assert_eq!(items[2..5], [Sexp::Int(42), Sexp::Int(-7), Sexp::Int(3)]);
    assert_eq!(items[5].as_f64(), Some(0.75));
    assert_eq!(items[6].as_f64(), Some(-0.0015));
    assert_eq!(items[7].as_f64(), Some(2000.0));
    assert_eq!(items[8], Sexp::Rational(3, NonZeroU64::new(4).unwrap()));
    assert_eq!(items[9], Sexp::Rational(-6, NonZeroU64::new(8).unwrap()));
    assert_eq!(items[8].as_f64(), Some(0.75));
    assert_eq!(items[10], Sexp::List(vec![]));
    assert_eq!(items[11].as_symbol(), Some("∂/∂"));
    assert_eq!(
        forms.write(),
        r#"(sym "s\"q\\\n\t😀" 42 -7 3 0.75 -0.0015 2000.0 3/4 -6/8 () ∂/∂)"#
    );
    assert_eq!(parse_one(&forms.write()), Ok(forms));
}

#[test]
fn symbols_that_would_misread_cannot_be_built() {
    for bad in [
        "", "12", "-1", "+3/4", "1.5", "2e3", "a b", "a(", "x\"", "a;b", "\u{7}",
    ] {
        assert!(Sym::new(bad).is_none(), "{bad:?}");
    }
    for good in [
        "-",
        "+",
        "->",
        "∀",
        "β*",
        "a.b",
        "<msg-id>",
        "passed|failed",
        "2025-05-01",
    ] {
        assert!(Sym::new(good).is_some(), "{good:?}");
    }
    // Tokens only partly shaped as numbers are symbols (typos are caught by the getters).
    for sym in [
        "0.7.5",
        "3/-4",
        "1.",
        ".5",
        "12abc",
        "0.0–1.0",
        "2025-05-01T12:00:00Z",
    ] {
        let x = parse_one(sym).unwrap();
        assert_eq!(x.as_symbol(), Some(sym));
        assert_eq!(parse_one(&x.write()), Ok(x));
    }
    assert!(ladp::Decimal::new(f64::NAN).is_none());
    assert!(ladp::Decimal::new(f64::INFINITY).is_none());
    // Control characters in strings are written escaped and read back.
    let s = Sexp::string("a\u{0}b\u{1b}c\u{7f}");
    assert_eq!(s.write(), r#""a\u{0}b\u{1b}c\u{7f}""#);
    assert_eq!(parse_one(&s.write()), Ok(s));
}

#[test]
fn the_64k_cap_refuses_larger_messages() {
    assert_eq!(MAX_INPUT_BYTES, 65_536);
    // Exactly at the cap: read.
    let body = "x".repeat(MAX_INPUT_BYTES - 4);
    let at_cap = format!("(\"{body}\")");
    assert_eq!(at_cap.len(), MAX_INPUT_BYTES);
    assert!(parse_all(&at_cap).is_ok());
    // One byte over: refused before reading.
    let over = format!("(\"{body}\") ");
    let e = parse_all(&over).unwrap_err();
    assert_eq!((e.line, e.column), (1, 1));
    assert_eq!(
        e.message,
        "message of 65537 bytes is larger than the 65536-byte limit"
    );
    // Bytes: the cap before UTF-8 decoding; invalid UTF-8 gets its position.
    assert!(parse_bytes(over.as_bytes(), &Limits::default()).is_err());
    let e = parse_bytes(b"(a\n  b\xff)", &Limits::default()).unwrap_err();
    assert_eq!(
        (e.line, e.column, e.message.as_str()),
        (2, 4, "invalid UTF-8")
    );
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    // 100k open parens: over the size cap first …
    let deep = "(".repeat(100_000);
    assert!(parse_all(&deep).unwrap_err().message.contains("byte limit"));
    // … and with the size cap lifted, refused by the depth cap at the first paren too deep
    // (no stack overflow: the reader keeps its own stack).
    let limits = Limits {
        max_bytes: 1 << 20,
        max_depth: usize::MAX,
        max_nodes: usize::MAX,
    };
    let e = parse_with(&deep, &limits).unwrap_err();
    assert_eq!((e.line, e.column), (1, 257));
    assert_eq!(e.message, "lists nested deeper than 256");
    let closed = format!("{}{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(parse_with(&closed, &limits).is_err());
    // The default depth: 64 levels read, 65 do not.
    let ok = format!("{}{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    let tree = parse_one(&ok).unwrap();
    assert_eq!(parse_one(&tree.write()), Ok(tree));
    let over = format!("{}{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
    let e = parse_one(&over).unwrap_err();
    assert_eq!((e.line, e.column), (1, MAX_DEPTH as u32 + 1));
    // Within 64 kB, the deepest input is refused by depth too.
    let e = parse_all(&"(".repeat(60_000)).unwrap_err();
    assert_eq!(e.message, "lists nested deeper than 64");
}

#[test]
fn the_node_cap_bounds_atoms_and_lists() {
    assert_eq!(MAX_NODES, 16_384);
    let ok = format!("({})", "a ".repeat(MAX_NODES - 1));
    assert_eq!(
        parse_one(&ok).unwrap().as_list().unwrap().len(),
        MAX_NODES - 1
    );
    let over = format!("({})", "a ".repeat(MAX_NODES));
    let e = parse_one(&over).unwrap_err();
    assert_eq!((e.line, e.column), (1, 2 + 2 * (MAX_NODES as u32 - 1)));
    assert_eq!(e.message, "more than 16384 atoms and lists");
    assert!(parse_all(&"()".repeat(20_000)).is_err());
}

#[test]
fn the_writer_does_not_recurse() {
    // A tree built in code far deeper than the reader takes writes without overflowing.
    let mut x = Sexp::List(vec![]);
    for _ in 0..200_000 {
        x = Sexp::List(vec![x]);
    }
    let text = x.write();
    assert_eq!(text.len(), 400_002);
    assert!(parse_all(&text).is_err());
    // Drop it level by level (the derived Drop recurses).
    while let Sexp::List(mut items) = x {
        match items.pop() {
            Some(inner) => x = inner,
            None => break,
        }
    }
}
