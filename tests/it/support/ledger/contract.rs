//! What every ledger backend promises, checked the same way on SQLite (`ledger` tests) and
//! Postgres (`cluster` tests): filters, paging, read-back of every field (a verified task's
//! votes included), spend, feedback, quality evidence, pruning.

use ldp_gateway::provenance::{
    Backend, Cancel, Evidence, EvidenceSource, Feedback, Given, Ingress, JsonText, LedgerRow,
    Outcome, Query, RatedTask, Vote,
};
use serde_json::json;

/// A result row; `finished_ms` orders rows in time.
pub fn row(task: &str, session: &str, tenant: &str, finished_ms: i64) -> LedgerRow {
    LedgerRow {
        task_id: task.into(),
        ingress: Ingress::Ldp,
        session_id: session.into(),
        upstream_session_id: Some(format!("up-{session}")),
        tenant: tenant.into(),
        skill: "echo".into(),
        policy: Some("balanced".into()),
        delegate: Some("d0".into()),
        delegate_id: Some("ldp:delegate:a".into()),
        model_version: Some("a-1".into()),
        outcome: Outcome::Result,
        error_code: None,
        error_message: None,
        score: Some(0.75),
        candidates: Some(2),
        attempts: 1,
        fallbacks: vec!["payload_mode".into()],
        payload_mode: Some("text".into()),
        latency_ms: 3.25,
        upstream_ms: 2.5,
        cost_usd: Some(0.002),
        reported_cost_usd: None,
        declared_cost_usd: Some(0.002),
        tokens: Some(12),
        confidence: Some(0.9),
        verification_status: Some("unverified".into()),
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: "2026-01-01T00:00:01Z".into(),
        finished_ms,
        output_sha256: Some("ab".repeat(32)),
        lineage: JsonText::of(&json!([{"step": "route"}])),
        routing: JsonText::of(&json!({"policy": "balanced"})),
        payload: None,
        votes: Vec::new(),
        trace_id: None,
        usage: None,
    }
}

/// Task ids `q` returns, in order.
pub fn ids(b: &mut dyn Backend, q: Query) -> Vec<String> {
    b.query(&q)
        .unwrap()
        .into_iter()
        .map(|r| r.task_id)
        .collect()
}

fn query(f: fn(&mut Query)) -> Query {
    let mut q = Query::default();
    f(&mut q);
    q
}

/// A vote of `verifier` on `producer`'s result in `round`.
pub fn vote(round: u32, producer: &str, verifier: &str, passed: bool, weight: f64) -> Vote {
    Vote {
        round,
        producer: producer.into(),
        skill: "echo".into(),
        verifier: verifier.into(),
        passed,
        confidence: passed.then_some(0.8),
        weight,
    }
}

/// Writes ten rows (t0…t9, finished at 1,000…1,009 ms; t3 a failure of tenant `acme` on
/// delegate `d1`; t4 verified by three votes, t6 by one) in two batches and checks what `b`
/// answers; leaves t5…t9.
pub fn check(b: &mut dyn Backend) {
    let rows: Vec<LedgerRow> = (0..10)
        .map(|i| {
            let session = if i % 2 == 0 { "even" } else { "odd" };
            let mut r = row(&format!("t{i}"), session, "anonymous", 1_000 + i);
            if i == 3 {
                r.delegate = Some("d1".into());
                r.tenant = "acme".into();
                r.outcome = Outcome::Failed;
                r.error_code = Some("UPSTREAM_FAILED".into());
                r.output_sha256 = None;
                r.tokens = None;
                r.cost_usd = None;
                r.payload = Some(JsonText::of(&json!({"input": "[redacted]"})));
                r.ingress = Ingress::Llmx;
            }
            if i == 4 {
                r.ingress = Ingress::Openai;
            }
            if i == 4 {
                r.votes = vec![
                    vote(1, "d0", "v1", true, 0.9),
                    vote(1, "d0", "v2", false, 0.6),
                    vote(2, "d1", "v1", true, 0.75),
                ];
            }
            if i == 6 {
                r.votes = vec![vote(1, "d0", "v1", true, 1.0)];
            }
            if i == 5 {
                r.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
            }
            r
        })
        .collect();
    b.insert(&rows[..4]).unwrap();
    b.insert(&rows[4..]).unwrap();
    assert_eq!(
        ids(b, Query::default()),
        (0..10).rev().map(|i| format!("t{i}")).collect::<Vec<_>>()
    );
    assert_eq!(
        ids(b, query(|q| q.session_id = Some("odd".into()))).len(),
        5
    );
    assert_eq!(ids(b, query(|q| q.task_id = Some("t4".into()))), ["t4"]);
    assert_eq!(ids(b, query(|q| q.delegate = Some("d1".into()))), ["t3"]);
    assert_eq!(ids(b, query(|q| q.tenant = Some("acme".into()))), ["t3"]);
    assert_eq!(ids(b, query(|q| q.ingress = Some(Ingress::Openai))), ["t4"]);
    assert_eq!(ids(b, query(|q| q.ingress = Some(Ingress::A2a))).len(), 0);
    assert_eq!(ids(b, query(|q| q.ingress = Some(Ingress::Ldp))).len(), 8);
    let by_trace = query(|q| q.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into()));
    assert_eq!(ids(b, by_trace), ["t5"]);
    assert_eq!(
        ids(b, query(|q| q.since_ms = Some(1_007))),
        ["t9", "t8", "t7"]
    );
    let page = query(|q| {
        q.limit = Some(3);
        q.offset = Some(2);
    });
    assert_eq!(ids(b, page), ["t7", "t6", "t5"]);
    // Every field reads back as written, the failure's payload preview and the votes
    // included (queries by anything but the task id leave the votes out).
    for i in [3, 4, 6] {
        let task = Query {
            task_id: Some(format!("t{i}")),
            ..Query::default()
        };
        assert_eq!(b.query(&task).unwrap(), vec![rows[i].clone()]);
    }
    let mut spend = b.spend_since(0).unwrap();
    spend.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(spend.len(), 2, "{spend:?}");
    assert_eq!(
        spend[0],
        ("acme".to_owned(), 0.0),
        "its only row has no cost"
    );
    assert_eq!(spend[1].0, "anonymous");
    assert!((spend[1].1 - 0.018).abs() < 1e-9, "{spend:?}");
    let listed = b.query(&Query::default()).unwrap();
    assert!(listed.iter().all(|r| r.votes.is_empty()), "{listed:?}");
    assert!(b.healthy());
    feedback(b);
    evidence(b);
    // Pruning is strictly before the cut-off (ratings by when they were given, votes with
    // their rows).
    assert_eq!(b.prune(1_005).unwrap(), 5);
    assert_eq!(b.feedback("t4").unwrap(), Vec::<Feedback>::new());
    assert_eq!(b.feedback("t7").unwrap().len(), 1, "a later rating stays");
    assert_eq!(b.prune(1_005).unwrap(), 0);
    assert_eq!(
        at(&b.evidence(0, 100).unwrap()),
        [
            (1_006, EvidenceSource::Vote),
            (1_007, EvidenceSource::Feedback)
        ],
        "t4's votes went with it"
    );
    let t6 = Query {
        task_id: Some("t6".into()),
        ..Query::default()
    };
    assert_eq!(b.query(&t6).unwrap(), vec![rows[6].clone()]);
    assert_eq!(
        ids(b, Query::default()).last().map(String::as_str),
        Some("t5")
    );
    // The spend breakdown (the console's) adds up to the spend per tenant and to the rows.
    let breakdown = b.spend_breakdown(0).unwrap();
    let spent = b.spend_since(0).unwrap();
    assert!(!spent.is_empty());
    for (tenant, cost) in &spent {
        let sum: f64 = breakdown
            .iter()
            .filter(|r| &r.tenant == tenant)
            .map(|r| r.cost_usd)
            .sum();
        assert!((sum - cost).abs() < 1e-9, "{tenant}: {sum} vs {cost}");
    }
    let tasks: u64 = breakdown.iter().map(|r| r.tasks).sum();
    assert_eq!(
        tasks as usize,
        ids(b, Query::default()).len(),
        "{breakdown:?}"
    );
}

/// A rating of `task` by `tenant`, given at `created_ms`.
pub fn rating(task: &str, tenant: &str, score: f64, created_ms: i64) -> Feedback {
    Feedback {
        task_id: task.into(),
        tenant: tenant.into(),
        score,
        outcome: Given::Score,
        delegate: Some("d0".into()),
        skill: "echo".into(),
        created_at: "2026-01-01T00:00:02Z".into(),
        created_ms,
    }
}

/// Ratings: the task's owner from its row (writer and readers alike), one rating per (task
/// id, tenant), read back whole.
fn feedback(b: &mut dyn Backend) {
    let t3 = Some(RatedTask {
        delegate: Some("d1".into()),
        skill: "echo".into(),
    });
    assert_eq!(b.task_of("acme", "t3").unwrap(), t3);
    assert_eq!(b.task_of("anonymous", "t3").unwrap(), None, "not its task");
    assert_eq!(b.task_of("anonymous", "nope").unwrap(), None);
    if let Some(r) = b.reader() {
        let cancel = Cancel::default();
        assert_eq!(r.task_of("acme", "t3", &cancel).unwrap(), t3);
        assert_eq!(r.task_of("anonymous", "t3", &cancel).unwrap(), None);
    }
    let mine = rating("t4", "anonymous", 0.25, 1_004);
    assert!(b.rate(&mine).unwrap());
    assert!(
        !b.rate(&rating("t4", "anonymous", 1.0, 1_004)).unwrap(),
        "once"
    );
    // Task ids are the clients' own: another tenant's rating of the same id is its own.
    let theirs = Feedback {
        outcome: Given::Good,
        delegate: None,
        ..rating("t4", "acme", 1.0, 1_004)
    };
    assert!(b.rate(&theirs).unwrap());
    assert_eq!(
        b.feedback("t4").unwrap(),
        vec![theirs.clone(), mine.clone()]
    );
    if let Some(r) = b.reader() {
        assert_eq!(
            r.feedback("t4", &Cancel::default()).unwrap(),
            vec![theirs, mine]
        );
    }
    assert!(b.rate(&rating("t7", "anonymous", 0.5, 1_007)).unwrap());
}

/// When and what each piece of evidence is.
fn at(e: &[Evidence]) -> Vec<(i64, EvidenceSource)> {
    e.iter().map(|e| (e.at_ms, e.source)).collect()
}

/// Quality evidence after `feedback`: t4's three votes (1,004 ms; each weighing its share of
/// its round), t6's (1,006), and the
/// ratings naming a delegate (t4's by `anonymous` at 1,004, t7's at 1,007; `acme`'s of t4
/// names none), oldest first, votes before ratings at the same time; the newest `limit` of
/// each; none before `since_ms`. The writer and the readers alike.
fn evidence(b: &mut dyn Backend) {
    use EvidenceSource::{Feedback as Rated, Vote as Voted};
    let piece = |delegate: &str, score: f64, weight: f64, at_ms: i64, source| Evidence {
        delegate: delegate.into(),
        skill: "echo".into(),
        score,
        weight,
        at_ms,
        // Both ratings are `anonymous`'s.
        rater: (source == Rated).then(|| "anonymous".to_owned()),
        source,
    };
    // A vote weighs its share of its round: t4's round 1 (0.9 and 0.6), round 2 (0.75 alone).
    let all = vec![
        piece("d0", 1.0, 0.9 / (0.9 + 0.6), 1_004, Voted),
        piece("d0", 0.0, 0.6 / (0.9 + 0.6), 1_004, Voted),
        piece("d1", 1.0, 1.0, 1_004, Voted),
        piece("d0", 0.25, 1.0, 1_004, Rated),
        piece("d0", 1.0, 1.0, 1_006, Voted),
        piece("d0", 0.5, 1.0, 1_007, Rated),
    ];
    let newest_two = vec![
        all[2].clone(),
        all[3].clone(),
        all[4].clone(),
        all[5].clone(),
    ];
    let since = vec![all[4].clone(), all[5].clone()];
    assert_eq!(b.evidence(0, 100).unwrap(), all);
    assert_eq!(b.evidence(0, 2).unwrap(), newest_two, "two of each");
    assert_eq!(b.evidence(1_005, 100).unwrap(), since);
    assert_eq!(b.evidence(1_005, 1).unwrap(), since);
    assert_eq!(b.evidence(1_008, 100).unwrap(), Vec::new());
    if let Some(r) = b.reader() {
        let cancel = Cancel::default();
        assert_eq!(r.evidence(0, 100, &cancel).unwrap(), all);
        assert_eq!(r.evidence(0, 2, &cancel).unwrap(), newest_two);
        assert_eq!(r.evidence(1_005, 100, &cancel).unwrap(), since);
    }
}
