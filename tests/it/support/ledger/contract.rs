//! What every ledger backend promises, checked the same way on SQLite (`ledger` tests) and
//! Postgres (`cluster` tests): filters, paging, read-back of every field, spend, feedback,
//! pruning.

use ldp_gateway::provenance::{
    Backend, Cancel, Feedback, Given, JsonText, LedgerRow, Outcome, Query, RatedTask,
};
use serde_json::json;

/// A result row; `finished_ms` orders rows in time.
pub fn row(task: &str, session: &str, tenant: &str, finished_ms: i64) -> LedgerRow {
    LedgerRow {
        task_id: task.into(),
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

/// Writes ten rows (t0…t9, finished at 1,000…1,009 ms; t3 a failure of tenant `acme` on
/// delegate `d1`) in two batches and checks what `b` answers; leaves t5…t9.
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
    assert_eq!(
        ids(b, query(|q| q.since_ms = Some(1_007))),
        ["t9", "t8", "t7"]
    );
    let page = query(|q| {
        q.limit = Some(3);
        q.offset = Some(2);
    });
    assert_eq!(ids(b, page), ["t7", "t6", "t5"]);
    // Every field reads back as written, the failure's payload preview included.
    for i in [3, 4] {
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
    assert!(b.healthy());
    feedback(b);
    // Pruning is strictly before the cut-off (ratings by when they were given).
    assert_eq!(b.prune(1_005).unwrap(), 5);
    assert_eq!(b.feedback("t4").unwrap(), Vec::<Feedback>::new());
    assert_eq!(b.feedback("t7").unwrap().len(), 1, "a later rating stays");
    assert_eq!(b.prune(1_005).unwrap(), 0);
    assert_eq!(
        ids(b, Query::default()).last().map(String::as_str),
        Some("t5")
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
