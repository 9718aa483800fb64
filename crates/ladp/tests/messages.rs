//! `msg`/`meta` forms, the `task-init` fields and the gateway's answers.

use ladp::{parse_all, Decision, Meta, Msg, MsgError, Outcome, Reply, Sexp, TaskInit};
use std::time::Duration;

fn task_init(data: &str) -> Result<TaskInit, MsgError> {
    TaskInit::from_msg(&Msg::parse(&format!(
        "(msg task-init controller gateway 1746176400000 (data {data}))"
    ))?)
}

fn field_of(e: MsgError) -> &'static str {
    match e {
        MsgError::Field { field, .. } => field,
        other => panic!("not a field error: {other}"),
    }
}

#[test]
fn task_init_fields_read() {
    let t = task_init(
        r#"(skill summarize) (task "Summarize \"LADP\".") (policy strict-eu)
           (deadline "2025-05-01T12:00:00+09:00") (quorum 3/4) (timeout 90) (meta (uncertainty 0.2))"#,
    )
    .unwrap();
    assert_eq!(t.skill, "summarize");
    assert_eq!(t.task, "Summarize \"LADP\".");
    assert_eq!(t.policy.as_deref(), Some("strict-eu"));
    assert_eq!(
        t.deadline.map(|d| d.to_rfc3339()).as_deref(),
        Some("2025-05-01T03:00:00+00:00")
    );
    assert_eq!(t.quorum, Some(0.75));
    assert_eq!(t.timeout, Some(Duration::from_secs(90)));

    let t = task_init(
        r#"(skill "web.summarize") (task "x") (quorum 1) (timeout 0.5) (deadline 2025-05-01T09:30:00Z)"#,
    )
    .unwrap();
    assert_eq!(t.skill, "web.summarize");
    assert_eq!(t.policy, None);
    assert_eq!(t.quorum, Some(1.0));
    assert_eq!(t.timeout, Some(Duration::from_millis(500)));
    assert_eq!(
        t.deadline.map(|d| d.to_rfc3339()).as_deref(),
        Some("2025-05-01T09:30:00+00:00")
    );
}

#[test]
fn task_init_errors_name_the_field() {
    let cases = [
        (r#"(task "x")"#, "skill"),
        ("(skill s)", "task"),
        ("(skill s) (task x)", "task"),
        (r#"(skill s) (skill t) (task "x")"#, "skill"),
        (r#"(skill s) (task "x") (quorum 1.5)"#, "quorum"),
        (r#"(skill s) (task "x") (quorum -0.1)"#, "quorum"),
        (r#"(skill s) (task "x") (quorum 5/4)"#, "quorum"),
        (r#"(skill s) (task "x") (quorum high)"#, "quorum"),
        (r#"(skill s) (task "x") (quorum 0.7.5)"#, "quorum"),
        (r#"(skill s) (task "x") (quorum 0.5 0.6)"#, "quorum"),
        (r#"(skill s) (task "x") (timeout 0)"#, "timeout"),
        (r#"(skill s) (task "x") (timeout -3)"#, "timeout"),
        (r#"(skill s) (task "x") (timeout 86401)"#, "timeout"),
        (r#"(skill s) (task "x") (timeout 5e-324)"#, "timeout"),
        (r#"(skill s) (task "x") (timeout 0.0009)"#, "timeout"),
        (r#"(skill s) (task "x") (deadline "tomorrow")"#, "deadline"),
        (r#"(skill s) (task "x") (deadline 20250501)"#, "deadline"),
        (
            r#"(skill s) (task "x") (deadline 2025-05-01T25:00:00Z)"#,
            "deadline",
        ),
        (
            r#"(skill s) (task "x") (deadline "2025-13-01T00:00:00Z")"#,
            "deadline",
        ),
        (r#"(skill s) (task "x") (policy "")"#, "policy"),
    ];
    for (data, field) in cases {
        let e = task_init(data).expect_err(data);
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("field `{field}`")),
            "{data}: {text}"
        );
        assert_eq!(field_of(e), field, "{data}");
    }
    // Not a task-init at all.
    let m = Msg::parse("(msg status-request c gateway 1 (data))").unwrap();
    assert!(matches!(
        TaskInit::from_msg(&m),
        Err(MsgError::Shape { .. })
    ));
}

#[test]
fn envelope_shape_errors() {
    let cases = [
        ("(msg)", "msg-type"),
        ("(msg task-init)", "sender"),
        ("(msg task-init c)", "recipient"),
        ("(msg task-init c g)", "epoch-ms"),
        ("(msg task-init c g -1 (data))", "epoch-ms"),
        ("(msg task-init c g 1.5 (data))", "epoch-ms"),
        ("(msg task-init c g 1)", "data"),
        ("(msg task-init c g 1 (payload))", "data"),
        ("(msg \"task-init\" c g 1 (data))", "msg-type"),
    ];
    for (text, field) in cases {
        assert_eq!(field_of(Msg::parse(text).expect_err(text)), field, "{text}");
    }
    assert!(matches!(
        Msg::parse("(msg a b c 1 (data) extra)"),
        Err(MsgError::Shape { .. })
    ));
    assert!(matches!(
        Msg::parse("(note a)"),
        Err(MsgError::Shape { .. })
    ));
    match Msg::parse("(msg a b c 1 (data)") {
        Err(MsgError::Parse(e)) => assert_eq!(e.at(), "1:1"),
        other => panic!("{other:?}"),
    }
    // Sender and recipient as strings read; a name that is not a symbol is written as one.
    let m = Msg::parse(r#"(msg status-request "agent 7" gateway 5 (data (task-id "t")))"#).unwrap();
    assert_eq!(m.sender, "agent 7");
    assert_eq!(Msg::parse(&m.write()), Ok(m));
}

#[test]
fn answers_are_written_as_the_seed_spells_them() {
    let r = Reply {
        sender: "gateway".into(),
        recipient: "controller".into(),
        epoch_ms: 1_746_176_400_123,
    };
    let answers = [
        (
            r.synthesis("t1-p1", "alpha", "The answer:\n\"42\""),
            r#"(msg synthesis gateway controller 1746176400123 (data (msg-id t1-p1) (agent alpha) (text "The answer:\n\"42\"")))"#,
        ),
        (
            r.verify("t1-p1", "beta", Outcome::Failed, Some(0.25), Some("unsupported claim")),
            r#"(msg verify gateway controller 1746176400123 (data (target-msg t1-p1) (agent beta) (result failed) (confidence 0.25) (reason "unsupported claim")))"#,
        ),
        (
            r.verify("t1-p1", "beta", Outcome::Passed, Some(7.0), None),
            "(msg verify gateway controller 1746176400123 (data (target-msg t1-p1) (agent beta) (result passed) (confidence 1.0)))",
        ),
        (
            r.verify("t1-p1", "delta", Outcome::Passed, None, None),
            "(msg verify gateway controller 1746176400123 (data (target-msg t1-p1) (agent delta) (result passed)))",
        ),
        (
            r.vote("t1-p1", "beta", 0.5, Decision::Yes),
            "(msg vote gateway controller 1746176400123 (data (proposal t1-p1) (agent beta) (weight 0.5) (decision yes)))",
        ),
        (
            r.vote("t1-p1", "gamma", f64::NAN, Decision::No),
            "(msg vote gateway controller 1746176400123 (data (proposal t1-p1) (agent gamma) (weight 0.0) (decision no)))",
        ),
        (
            r.integration_verified("t1-p1", 0.8, 0.75, "42"),
            r#"(msg integration-verified gateway controller 1746176400123 (data (target-msg t1-p1) (support-rate 0.8) (quorum 0.75) (text "42")))"#,
        ),
        (
            r.integration("t1-p1", "42"),
            r#"(msg integration gateway controller 1746176400123 (data (target-msg t1-p1) (text "42")))"#,
        ),
        (
            r.reject_proposal("t1-p1", "quorum not reached", 2),
            r#"(msg reject-proposal gateway controller 1746176400123 (data (target-msg t1-p1) (reason "quorum not reached") (attempt 2)))"#,
        ),
        (
            r.status(Some("t1"), "verification"),
            r#"(msg status gateway controller 1746176400123 (data (task-id "t1") (phase verification)))"#,
        ),
        (
            r.status(None, "idle"),
            "(msg status gateway controller 1746176400123 (data (phase idle)))",
        ),
        (
            r.error("rate limit: 4 messages per minute", None),
            r#"(msg error gateway controller 1746176400123 (data (reason "rate limit: 4 messages per minute")))"#,
        ),
        (
            r.parse_error(&parse_all("(msg a\n  \"x").unwrap_err()),
            r#"(msg error gateway controller 1746176400123 (data (reason "string is never closed") (at "2:3")))"#,
        ),
        (
            r.meta(&Meta::abort_retry_exceeded("t1-p3")),
            r#"(msg meta gateway controller 1746176400123 (data (meta abort (reason "verification-retry-exceeded") (reference t1-p3))))"#,
        ),
    ];
    for (msg, text) in answers {
        assert_eq!(msg.write(), text);
        assert_eq!(Msg::parse(text).as_ref(), Ok(&msg), "{text}");
    }
    let halt = Meta::halt_controller("t1", 2);
    assert_eq!(
        halt.to_sexp().write(),
        r#"(meta halt (reason "controller-issued-halt") (reference t1) (cancelled 2))"#
    );
    assert_eq!(Meta::from_sexp(&halt.to_sexp()), Ok(halt));
    assert_eq!(
        Meta::abort_retry_exceeded("t1-p3").to_sexp().write(),
        r#"(meta abort (reason "verification-retry-exceeded") (reference t1-p3))"#
    );
    // A bare annotation block has no kind.
    let m = Meta::from_sexp(&ladp::parse_one("(meta (uncertainty 0.2))").unwrap()).unwrap();
    assert_eq!(m.kind, None);
    assert_eq!(m.items, vec![ladp::parse_one("(uncertainty 0.2)").unwrap()]);
    assert!(Meta::from_sexp(&Sexp::Int(1)).is_err());
}
