//! The seed's own examples (`004_…`, LADP v1.9), copied verbatim: §4 and §13 constructs and
//! the v1.9 `finalize-proposal` message read, and write back to text that reads equal.

use ladp::{parse_all, parse_one, Msg, Sexp};

/// §4.1's table and §4.2.1–4.2.10, each code block as in the seed.
const SECTION_4: &[&str] = &[
    "(agenda …)",
    "(synthesis …)",
    "(step n …)",
    "(integration …)",
    "(summary …)",
    "(meta …)",
    r#"    (param-sweep
      (parameter <symbol>)
      (range (start <value>) (end <value>) (step <value>)))"#,
    r#"    (define-invariant
      (id <string>)
      (name "<...>")
      (description "<...>")
      (domains (<domain1> <domain2> ...)))"#,
    "(metric <name> <numeric-value>)",
    r#"    (verify
      (target-msg <msg-id>)
      (checks (syntax logical-consistency external-grounding formal-consistency))
      (result passed|failed)
      (confidence <0.0–1.0>)
      (reason? "<failure-reason>"))"#,
    r#"    (retrieve
      (query "<keyword or proposition>"))
    (verify-external
      (target-msg <msg-id>)
      (source <knowledge-base-id>)
      (match-score <0.0–1.0>))"#,
    r#"    (vote
      (proposal <id>)
      (agent <agent-id>)
      (weight <0.0–1.0>)
      (decision yes|no))"#,
    r#"    (anomaly-detected
      (metric <name>)
      (value <float>)
      (threshold <float>))"#,
    r#"    (calibration
      (round <n>)
      (reference-source <id>)
      (adjustment-factor <float>))
    (meta
      (uncertainty <0.0–1.0>))"#,
    r#"    (claim
      (target-msg <msg-id>)
      (text "<assertion>"))
    (data
      (target-msg <msg-id>)
      (text "<evidence>"))
    (warrant
      (target-msg <msg-id>)
      (text "<reasoning>"))"#,
    r#"    (phase DIVERGE)   ; idea generation mode
    (phase CONVERGE)  ; option refinement mode
    (phase DECIDE)    ; decision & execution mode"#,
];

/// §13's code blocks.
const SECTION_13: &[&str] = &[
    r#"       (verify
         (target-msg <msg-id>)
         (result failed)
         (reason "<failure-reason>"))
       (reject-proposal (target-msg <msg-id>) (reason "<failure-reason>"))"#,
    r#"         (meta abort (reason "verification-retry-exceeded") (reference <msg-id>))"#,
    r#"         (meta halt (reason "critical-verification-failure") (reference <Semantic-ID>))"#,
    r#"       (msg agenda-revise controller ...)
       (msg task-init controller ...)
       (msg phase-back controller (data (phase "<previous-phase>")))"#,
];

/// v1.9 "Final Proposal Declaration".
const FINALIZE: &str = r#"    (msg finalize-proposal llm-assistant controller 1746176400000
      (data
        (proposal-id "MetaOrgPrinciples_v1.0")
        (status "finalized")
        (support-rate 1.0)
      )
    )"#;

/// Reads every form, writes each, reads the text back: equal trees; returns the forms.
fn round_trip(text: &str) -> Vec<Sexp> {
    let forms = parse_all(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(!forms.is_empty(), "no form in {text}");
    for form in &forms {
        let written = form.write();
        assert_eq!(parse_one(&written).as_ref(), Ok(form), "{written}");
    }
    let all: Vec<String> = forms.iter().map(Sexp::write).collect();
    assert_eq!(parse_all(&all.join("\n")).as_ref(), Ok(&forms));
    forms
}

#[test]
fn section_4_constructs_read_and_round_trip() {
    let mut heads = Vec::new();
    for block in SECTION_4 {
        for form in round_trip(block) {
            heads.push(form.head().unwrap_or_default().to_owned());
        }
    }
    assert_eq!(
        heads,
        [
            "agenda",
            "synthesis",
            "step",
            "integration",
            "summary",
            "meta",
            "param-sweep",
            "define-invariant",
            "metric",
            "verify",
            "retrieve",
            "verify-external",
            "vote",
            "anomaly-detected",
            "calibration",
            "meta",
            "claim",
            "data",
            "warrant",
            "phase",
            "phase",
            "phase"
        ]
    );
    // The placeholders and Unicode read as symbols, the comments are gone.
    let verify = round_trip(SECTION_4[9]).remove(0);
    assert_eq!(
        verify.write(),
        "(verify (target-msg <msg-id>) (checks (syntax logical-consistency external-grounding \
         formal-consistency)) (result passed|failed) (confidence <0.0–1.0>) \
         (reason? \"<failure-reason>\"))"
    );
    assert_eq!(round_trip(SECTION_4[15])[2].write(), "(phase DECIDE)");
}

#[test]
fn section_13_constructs_read_and_round_trip() {
    let forms: Vec<Sexp> = SECTION_13.iter().flat_map(|b| round_trip(b)).collect();
    assert_eq!(forms.len(), 7);
    let abort = ladp::Meta::from_sexp(&forms[2]).unwrap();
    assert_eq!(abort.kind.as_deref(), Some("abort"));
    assert_eq!(abort.reason(), Some("verification-retry-exceeded"));
    assert_eq!(abort, ladp::Meta::abort_retry_exceeded("<msg-id>"));
    let halt = ladp::Meta::from_sexp(&forms[3]).unwrap();
    assert_eq!(halt.kind.as_deref(), Some("halt"));
    assert_eq!(halt.reason(), Some("critical-verification-failure"));
    // §13.4's short envelopes read as s-expressions but are not full `msg` forms (no
    // recipient, no epoch-ms): the message layer names the missing field.
    let e = Msg::from_sexp(&forms[4]).unwrap_err();
    assert!(
        e.to_string().starts_with("field `epoch-ms`: missing"),
        "{e}"
    );
    let e = Msg::from_sexp(&forms[6]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "field `recipient`: must be a symbol or a string"
    );
}

#[test]
fn finalize_proposal_reads_as_a_message_and_round_trips() {
    round_trip(FINALIZE);
    let m = Msg::parse(FINALIZE).unwrap();
    assert_eq!(m.kind, "finalize-proposal");
    assert_eq!(m.sender, "llm-assistant");
    assert_eq!(m.recipient, "controller");
    assert_eq!(m.epoch_ms, 1_746_176_400_000);
    assert_eq!(
        m.value("proposal-id").unwrap().and_then(Sexp::as_str),
        Some("MetaOrgPrinciples_v1.0")
    );
    assert_eq!(
        m.value("support-rate").unwrap().and_then(Sexp::as_f64),
        Some(1.0)
    );
    assert_eq!(
        m.write(),
        "(msg finalize-proposal llm-assistant controller 1746176400000 (data (proposal-id \
         \"MetaOrgPrinciples_v1.0\") (status \"finalized\") (support-rate 1.0)))"
    );
    assert_eq!(Msg::parse(&m.write()), Ok(m));
}

#[test]
fn v1_9_forms_read() {
    // The other v1.9 examples; the meta template's `0.0–1.0` reads as a symbol (a documented
    // choice), like its `<0.0–1.0>` spelling in §4.
    round_trip(r#"(transition-condition "integration-sufficient")"#);
    let t = round_trip("(termination-condition \n      (or unanimous (weighted-agreement >=0.9)))");
    assert_eq!(
        t[0].write(),
        "(termination-condition (or unanimous (weighted-agreement >=0.9)))"
    );
    round_trip("(meta\n      (capsule-id \"MetaOrgPrinciples_v1.0\")\n    )");
    let m = round_trip(
        "    (meta\n      (divergence-level \"low\"|\"medium\"|\"high\")\n      (confidence 0.0–1.0))",
    );
    assert_eq!(
        m[0].write(),
        "(meta (divergence-level \"low\" | \"medium\" | \"high\") (confidence 0.0–1.0))"
    );
    // The math and logic symbols of §4.
    let f = round_trip("(∀ x (→ (∧ p q) (¬ (∨ r ΔI β* ∂/∂ ↔ ← = ∃ ΔH ΔE ΔC))))");
    assert_eq!(f[0].head(), Some("∀"));
}
