//! Malformed messages are refused at the right line:column; every bound is a `ParseError`,
//! never a panic or a stack overflow.

use llmx::{
    parse, parse_with, write, Block, Header, Limits, Message, ParseError, Request, RequestError,
    SeqChecker, SeqError, Value, MAX_BLOCKS, MAX_DEPTH, MAX_INPUT_BYTES, MAX_STRING_BYTES,
    MAX_VALUES,
};

fn err(text: &str) -> ParseError {
    match parse(text) {
        Ok(m) => panic!("accepted {text:?} as {m:?}"),
        Err(e) => e,
    }
}

/// (input, line, column, words the message must contain)
const CASES: [(&str, usize, usize, &str); 22] = [
    ("", 1, 1, "expected HEADER"),
    ("   \n  ", 2, 3, "expected HEADER"),
    ("REQ:{o:\"x\",pr:1}", 1, 1, "first block must be HEADER"),
    (
        "HEADER:{f:a,t:b}",
        1,
        1,
        "missing required field 's' in HEADER",
    ),
    ("\n\n  HEADER:{t:b,s:1}", 3, 3, "missing required field 'f'"),
    ("HEADER:{f:a,t:b,s:-1}", 1, 1, "non-negative integer"),
    (
        "HEADER:{f:a,t:b,s:1,zz:2}",
        1,
        1,
        "unknown HEADER field 'zz'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nHEADER:{f:a,t:b,s:2}",
        2,
        1,
        "only be the first",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"x\",pr:1,}",
        2,
        17,
        "expected a key",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"x\" pr:1}",
        2,
        12,
        "expected ',' or '}'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"x\",o:\"y\"}",
        2,
        12,
        "duplicate key 'o'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"unterminated}",
        2,
        8,
        "unterminated string",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"a\\qb\"}",
        2,
        10,
        "invalid escape",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"a\nb\"}",
        2,
        10,
        "control character",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{o:\"\\ud800\"}",
        2,
        9,
        "surrogate",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{pr:1.}",
        2,
        11,
        "digit after '.'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:{pr:@}",
        2,
        9,
        "expected a value, found '@'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nREQ:\"x\"",
        2,
        5,
        "expected '{' or '['",
    ),
    ("HEADER:{f:a,t:b,s:1}\nREQ {o:1}", 2, 5, "expected ':'"),
    (
        "HEADER:{f:a,t:b,s:1}\nPLAN:[(i:1,s:P|)]",
        2,
        16,
        "expected a bare word",
    ),
    // Columns count characters, not bytes.
    (
        "HEADER:{f:a,t:b,s:1}\nRES:{o:\"日本語\",msg:é}",
        2,
        18,
        "expected a value, found 'é'",
    ),
    (
        "HEADER:{f:a,t:b,s:1}\nRES:{o:[1,2}",
        2,
        12,
        "expected ',' or ']'",
    ),
];

#[test]
fn malformed_messages_fail_at_their_line_and_column() {
    let mut wrong = Vec::new();
    for (text, line, column, words) in CASES {
        let e = err(text);
        if (e.line, e.column) != (line, column) || !e.message.contains(words) {
            wrong.push(format!(
                "{text:?}: got {e}, want {line}:{column} containing {words:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_error_displays_as_the_nack_wants_it() {
    let e = err("HEADER:{f:a,t:b,s:1}\nREQ:{o:\"x\" pr:1}");
    assert_eq!(
        e.to_string(),
        "parse error at 2:12: expected ',' or '}' in map, found 'p'"
    );
    let m = Message {
        header: Header::new("gateway", "Claude", 7),
        blocks: vec![Block::nack(&e)],
    };
    assert_eq!(
        write(&m),
        "HEADER:{f:gateway,t:Claude,s:7}\n\
         RES:{o:\"NACK\",msg:\"parse error at 2:12: expected ',' or '}' in map, found 'p'\"}\n"
    );
}

#[test]
fn a_req_without_its_required_fields_is_named_at_its_place() {
    let p = parse_with(
        "HEADER:{f:a,t:b,s:1}\n  CTX:{p:x}\n  REQ:{pr:2}",
        &Limits::default(),
    )
    .unwrap();
    let at = p.block_at[1];
    let e = Request::from_block(&p.message.blocks[1]).unwrap_err();
    assert_eq!(e, RequestError::Missing("o"));
    assert_eq!(
        e.at(at.line, at.column).to_string(),
        "parse error at 3:3: missing required field 'o' in REQ"
    );
    let m = parse("HEADER:{f:a,t:b,s:1}\nREQ:{o:\"x\",pr:9}").unwrap();
    assert!(matches!(
        Request::from_block(&m.blocks[0]),
        Err(RequestError::Invalid { field: "pr", .. })
    ));
}

#[test]
fn nesting_100k_deep_is_refused_without_overflow() {
    for (open, close) in [("[", "]"), ("{a:", "}"), ("(a:", ")")] {
        let n = 100_000;
        let text = format!(
            "HEADER:{{f:a,t:b,s:1}}\nX_D:{{v:{}1{}}}",
            open.repeat(n),
            close.repeat(n)
        );
        let e = err(&text);
        assert!(e.message.contains("nested deeper than 32"), "{e}");
        assert_eq!(e.line, 2);
        // The body is depth 1, `v:`'s value 2, …: the 32nd opener inside `v:` is depth 33.
        assert_eq!(e.column, 8 + 31 * open.len(), "{open}: {e}");
    }
    // Exactly at the limit it parses and round-trips.
    let ok = format!(
        "HEADER:{{f:a,t:b,s:1}}\nX_D:{}1{}",
        "[".repeat(MAX_DEPTH),
        "]".repeat(MAX_DEPTH)
    );
    let m = parse(&ok).unwrap();
    assert_eq!(parse(&write(&m)).unwrap(), m);
}

#[test]
fn a_huge_string_is_refused_at_its_start() {
    let big = "x".repeat(MAX_STRING_BYTES + 1);
    let e = err(&format!("HEADER:{{f:a,t:b,s:1}}\nRES:{{o:\"{big}\"}}"));
    assert_eq!((e.line, e.column), (2, 8), "{e}");
    assert!(e.message.contains("string longer than 65536 bytes"), "{e}");
    // Escapes count decoded: 64 KiB of `\n` written as `\\n` is still just at the limit.
    let at_limit = "\\n".repeat(MAX_STRING_BYTES);
    let m = parse(&format!("HEADER:{{f:a,t:b,s:1}}\nRES:{{o:\"{at_limit}\"}}")).unwrap();
    assert_eq!(m.blocks[0].str("o").map(str::len), Some(MAX_STRING_BYTES));
    // A bare word and a number are bounded alike.
    let e = err(&format!("HEADER:{{f:a,t:b,s:1}}\nRES:{{o:{big}}}"));
    assert!(e.message.contains("bare word longer"), "{e}");
    let digits = "9".repeat(MAX_STRING_BYTES + 1);
    let e = err(&format!("HEADER:{{f:a,t:b,s:1}}\nRES:{{o:{digits}}}"));
    assert!(e.message.contains("number longer"), "{e}");
}

#[test]
fn too_many_blocks_values_or_bytes_are_refused() {
    let mut text = String::from("HEADER:{f:a,t:b,s:1}\n");
    for _ in 0..MAX_BLOCKS {
        text.push_str("OBS:{s:OK}\n");
    }
    assert_eq!(parse(&text).unwrap().blocks.len(), MAX_BLOCKS);
    text.push_str("OBS:{s:OK}\n");
    let e = err(&text);
    assert_eq!((e.line, e.column), (MAX_BLOCKS + 2, 1), "{e}");
    assert!(e.message.contains("more than 256 blocks"), "{e}");

    let list = vec!["1"; MAX_VALUES + 1].join(",");
    let e = err(&format!("HEADER:{{f:a,t:b,s:1}}\nX_L:[{list}]"));
    assert!(e.message.contains("more than 100000 values"), "{e}");

    let pad = " ".repeat(MAX_INPUT_BYTES);
    let e = err(&format!("HEADER:{{f:a,t:b,s:1}}{pad}"));
    assert_eq!((e.line, e.column), (1, 1));
    assert!(e.message.contains("over the limit of 1048576"), "{e}");

    let small = Limits {
        max_blocks: 1,
        ..Limits::default()
    };
    let e = parse_with("HEADER:{f:a,t:b,s:1}\nA:{}\nB:{}", &small).unwrap_err();
    assert_eq!((e.line, e.column), (3, 1));
}

#[test]
fn the_writer_escapes_strings() {
    let nasty = "quote \" backslash \\ newline \n tab \t nul \u{0} del \u{7f} 日本 🦀 }],";
    let m = Message {
        header: Header::new("sender with space", "ALL", 3).with_batch(Some("b\"1".into())),
        blocks: vec![
            Block::res("o\"k", Some(nasty)),
            Block::map(
                "X_S",
                vec![("v".into(), Value::Symbol("not a word".into()))],
            ),
        ],
    };
    let text = write(&m);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains(r#"\"1"#) && text.contains(r"\u0000") && text.contains(r"\n"));
    let back = parse(&text).unwrap();
    assert_eq!(back.header, m.header);
    assert_eq!(back.blocks[0], m.blocks[0]);
    // A symbol that is not a bare word is quoted: it reads back as a string.
    assert_eq!(back.blocks[1].str("v"), Some("not a word"));
}

#[test]
fn the_reply_header_goes_back_to_the_sender_in_the_same_batch() {
    let m = parse("HEADER:{f:Claude,t:ALL,s:9,b:B1}").unwrap();
    assert_eq!(
        m.header.reply("gateway", 3),
        Header::new("gateway", "Claude", 3).with_batch(Some("B1".into()))
    );
}

#[test]
fn the_answer_builders_write_the_seeds_shapes() {
    let m = Message {
        header: Header::new("gateway", "Claude", 2).with_batch(Some("B1".into())),
        blocks: vec![
            Block::obs(Some("A1"), vec![("text".into(), Value::str("done"))], None)
                .with("x_provenance", Value::str("d1")),
            Block::obs(Some("A2"), vec![], Some("timed out")),
            Block::end("review", &[], &[], &["out.md"]),
            Block::blk(
                "no eligible delegate",
                &["web.summarize", "code.review"],
                Some(false),
            ),
            Block::warn_unknown("CUSTOM"),
        ],
    };
    assert_eq!(
        write(&m),
        "HEADER:{f:gateway,t:Claude,s:2,b:B1}\n\
         OBS:{ai:\"A1\",s:OK,c:{text:\"done\"},x_provenance:\"d1\"}\n\
         OBS:{ai:\"A2\",s:ERR,c:{},e:\"timed out\"}\n\
         END:{n:\"review\",del:[\"out.md\"]}\n\
         BLK:{w:\"no eligible delegate\",a:[\"web.summarize\",\"code.review\"],esc:false}\n\
         RES:{o:\"WARN\",msg:\"unknown message type: CUSTOM ignored\"}\n"
    );
}

#[test]
fn sequence_numbers_rise_per_sender_in_bounded_memory() {
    let mut s = SeqChecker::new(2);
    s.check("a", 1).unwrap();
    s.check("a", 5).unwrap();
    assert_eq!(
        s.check("a", 5),
        Err(SeqError::NotIncreasing {
            sender: "a".into(),
            last: 5,
            got: 5
        })
    );
    assert!(s.check("a", 4).is_err());
    s.check("b", 1).unwrap();
    s.check("a", 6).unwrap(); // a is now the most recent, b the least
    s.check("c", 1).unwrap(); // evicts b
    assert_eq!(s.len(), 2);
    assert_eq!(s.last("b"), None);
    assert_eq!(s.last("a"), Some(6));
    s.check("b", 0).unwrap(); // forgotten: accepted as a first message
    assert_eq!(s.check(&"x".repeat(257), 1), Err(SeqError::SenderTooLong));
    for i in 0..10_000u64 {
        s.check(&format!("flood-{i}"), 1).unwrap();
    }
    assert_eq!(s.len(), 2);
}
