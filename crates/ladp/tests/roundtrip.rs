//! Property: any tree writes to text that reads back equal; any text reads without a panic,
//! and what reads writes back to the same tree.

use ladp::{parse_all, parse_one, Decimal, Sexp, Sym};
use proptest::prelude::*;
use std::num::NonZeroU64;

fn atom() -> impl Strategy<Value = Sexp> {
    prop_oneof![
        "[a-zA-Z∀∃∧∨↔→←¬=Δβ∂*<>|?.+/:_-][a-zA-Z0-9∀∃ΔIβ∂*<>|?.+/:_-]{0,10}"
            .prop_filter_map("not a symbol", |s| Sym::new(&s).map(Sexp::Symbol)),
        any::<String>().prop_map(Sexp::Str),
        "[ -~\u{0}-\u{1f}\u{7f}λ😀\"\\\\]{0,12}".prop_map(Sexp::Str),
        any::<i64>().prop_map(Sexp::Int),
        prop::num::f64::NORMAL
            .prop_union(prop::num::f64::SUBNORMAL)
            .or(prop::num::f64::ZERO)
            .prop_filter_map("finite", |f| Decimal::new(f).map(Sexp::Decimal)),
        (any::<i64>(), 1..=u64::MAX).prop_filter_map("zero", |(n, d)| NonZeroU64::new(d)
            .map(|d| Sexp::Rational(n, d))),
    ]
}

fn tree() -> impl Strategy<Value = Sexp> {
    atom().prop_recursive(8, 128, 8, |inner| {
        prop::collection::vec(inner, 0..8).prop_map(Sexp::List)
    })
}

/// Text from the reader's own alphabet: parens, quotes, escapes, digits, signs, comments.
fn noise() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("(".to_owned()),
            Just(")".to_owned()),
            Just("\"".to_owned()),
            Just("\\".to_owned()),
            Just(";".to_owned()),
            Just("\n".to_owned()),
            Just(" ".to_owned()),
            "[0-9./eE+-]{1,4}",
            "[a-zΔβ∀→|<>u{}]{1,3}",
        ],
        0..64,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn write_then_parse_is_identity(x in tree()) {
        let text = x.write();
        prop_assert_eq!(parse_one(&text), Ok(x));
    }

    #[test]
    fn sequences_round_trip(xs in prop::collection::vec(tree(), 0..4)) {
        let text: Vec<String> = xs.iter().map(Sexp::write).collect();
        prop_assert_eq!(parse_all(&text.join(" ; c\n")), Ok(xs));
    }

    #[test]
    fn any_text_reads_or_is_refused_with_a_position(s in prop_oneof![noise(), any::<String>()]) {
        match parse_all(&s) {
            Ok(forms) => {
                let text: Vec<String> = forms.iter().map(Sexp::write).collect();
                prop_assert_eq!(parse_all(&text.join(" ")), Ok(forms));
            }
            Err(e) => {
                prop_assert!(e.line >= 1 && e.column >= 1);
                prop_assert!(e.line as usize <= s.lines().count().max(1));
            }
        }
    }
}

/// A `task-init` data item: one of its fields (or another) holding any atom(s).
fn task_field() -> impl Strategy<Value = Sexp> {
    let name = prop::sample::select(vec![
        "skill", "task", "policy", "deadline", "quorum", "timeout", "meta",
    ]);
    (name, prop::collection::vec(atom(), 0..3)).prop_map(|(name, mut args)| {
        let mut items = vec![Sexp::symbol(name).unwrap_or(Sexp::Int(0))];
        items.append(&mut args);
        Sexp::List(items)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn task_init_reads_in_range_or_names_a_field(
        fields in prop::collection::vec(task_field(), 0..8),
    ) {
        let data: Vec<String> = fields.iter().map(Sexp::write).collect();
        let text = format!("(msg task-init c gateway 1 (data {}))", data.join(" "));
        let m = ladp::Msg::parse(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        let back = ladp::Msg::parse(&m.write());
        prop_assert_eq!(back.as_ref(), Ok(&m));
        match ladp::TaskInit::from_msg(&m) {
            Ok(t) => {
                prop_assert!(!t.skill.is_empty());
                prop_assert!(t.quorum.is_none_or(|q| (0.0..=1.0).contains(&q)));
                prop_assert!(t.timeout.is_none_or(|d| !d.is_zero()
                    && d.as_secs() <= 86_400));
            }
            Err(ladp::MsgError::Field { field, .. }) => {
                prop_assert!(
                    ["skill", "task", "policy", "deadline", "quorum", "timeout"].contains(&field),
                    "{}", field
                );
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        }
    }
}
