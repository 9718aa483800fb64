//! Property: for generated messages, `parse(write(m)) == m`; for arbitrary text, the reader
//! never panics and what it reads is written back to the same message.

use llmx::{parse, write, Block, Body, Header, Message, Number, Value};
use proptest::prelude::*;

fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z][A-Za-z0-9_]{0,6}"
}

fn word() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_./-]{0,6}"
}

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        "-?[0-9]{1,30}(\\.[0-9]{1,30})?".prop_filter_map("grammar", |s| Number::parse(&s)),
    ]
}

fn fields(v: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::btree_map(ident(), v, 0..4).prop_map(|m| m.into_iter().collect())
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<String>().prop_map(Value::Str),
        number().prop_map(Value::Number),
        any::<bool>().prop_map(Value::Bool),
        word()
            .prop_filter("not a boolean", |w| w != "true" && w != "false")
            .prop_map(Value::Symbol),
        prop::collection::vec(word(), 2..4).prop_map(Value::Enum),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
            fields(inner.clone()).prop_map(Value::Tuple),
            fields(inner).prop_map(Value::Map),
        ]
    })
}

fn block() -> impl Strategy<Value = Block> {
    (
        ident().prop_filter("not HEADER", |k| k != "HEADER"),
        prop_oneof![
            fields(value()).prop_map(Body::Map),
            prop::collection::vec(value(), 0..4).prop_map(Body::List),
        ],
    )
        .prop_map(|(kind, body)| Block { kind, body })
}

fn message() -> impl Strategy<Value = Message> {
    let text = prop_oneof![word(), ".{1,12}"];
    (
        text.clone(),
        text.clone(),
        any::<u64>(),
        prop::option::of(text),
        prop::collection::btree_map("x_[a-z0-9_]{0,5}", value(), 0..3),
        prop::collection::vec(block(), 0..6),
    )
        .prop_map(|(from, to, seq, batch, extra, blocks)| Message {
            header: Header {
                from,
                to,
                seq,
                batch,
                extra: extra.into_iter().collect(),
            },
            blocks,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn written_messages_read_back_equal(m in message()) {
        let text = write(&m);
        let back = parse(&text);
        prop_assert_eq!(back.as_ref(), Ok(&m), "written:\n{}", text);
        // Writing what was read gives the same text again.
        prop_assert_eq!(write(&m), text);
    }

    #[test]
    fn arbitrary_text_never_panics_and_round_trips(
        s in "(HEADER:\\{f:a,t:b,s:1\\}\n)?[A-Z_]{0,3}[:{}\\[\\](),|\"a-z0-9\\\\ .-]{0,40}"
    ) {
        if let Ok(m) = parse(&s) {
            prop_assert_eq!(parse(&write(&m)), Ok(m));
        }
    }
}
