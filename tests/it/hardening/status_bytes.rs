//! Issue 24 item 7: the status store's byte bound weighs the whole answer it keeps, and the
//! provenance a delegate reports (lineage, evidence, a failure's partial output) is capped
//! before the answer, the store or the ledger keep it.

use super::liar::{handshake, is_card, ldp_card, Liar, Lie};
use crate::support::TestGateway;
use serde_json::{json, Value};

/// About 5 MB of provenance: lineage hops and evidence, each with long text.
fn huge_provenance() -> Value {
    let hop = |i: usize| {
        json!({"delegate_id": format!("ldp:delegate:hop-{i}"), "model_version": "v1",
               "step": "answer", "note": "n".repeat(400)})
    };
    let evidence =
        |i: usize| json!({"source": format!("s{i}"), "kind": "doc", "summary": "e".repeat(400)});
    json!({
        "produced_by": "ldp:delegate:big", "model_version": "v1", "payload_mode_used": "text",
        "lineage": (0..6_000).map(hop).collect::<Vec<_>>(),
        "evidence": (0..6_000).map(evidence).collect::<Vec<_>>(),
    })
}

/// The delegate's answer to task `n`: a result with ~5 MB of provenance, or (every fourth)
/// a failure with a ~5 MB partial output and message.
fn answer(asked: &super::liar::Asked, n: usize) -> Lie {
    let env: Value = serde_json::from_str(&asked.body).unwrap_or_default();
    let task_id = env["body"]["task_id"].clone();
    let body = if n % 4 == 3 {
        json!({"type": "TASK_FAILED", "task_id": task_id, "error": {
            "code": "BAD_INPUT", "category": "runtime", "severity": "error", "retryable": false,
            "message": "m".repeat(1 << 20),
            "partial_output": {"text": "p".repeat(4 << 20)}}})
    } else {
        json!({"type": "TASK_RESULT", "task_id": task_id, "output": "ok",
               "provenance": huge_provenance()})
    };
    Lie::new(200).json(&json!({
        "message_id": uuid::Uuid::new_v4().to_string(), "session_id": "big-session",
        "from": "ldp:delegate:big", "to": "ldp:delegate:gateway", "body": body,
        "payload_mode": "text", "timestamp": chrono::Utc::now().to_rfc3339()
    }))
}

fn file_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_provenance_is_capped_and_weighed_by_the_status_store() {
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = count.clone();
    let liar = Liar::start(move |a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("big", "echo", 0.9, 0.0));
        }
        if let Some(lie) = handshake("big", a) {
            return lie;
        }
        answer(a, n.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("ledger.db");
    let store = format!("sqlite://{}", db.display());
    const BOUND: u64 = 512 * 1024;
    let gw = TestGateway::builder()
        .delegate(&liar.url)
        .config(move |c| {
            c.task_status.max_bytes = BOUND;
            c.provenance.store = store;
        })
        .spawn()
        .await;
    let c = gw.client();
    let session = c.accepted(json!({})).await;
    let mut ids = Vec::new();
    for i in 0..40 {
        let r = c.task(&session, "echo", json!({"n": i}), "text").await;
        let task_id = r["task_id"].as_str().expect("task id").to_owned();
        match r["type"].as_str() {
            Some("TASK_RESULT") => {
                let lineage = r["provenance"]["lineage"].as_array().expect("lineage");
                assert!(lineage.len() <= 40, "task {i}: {} hops", lineage.len());
                let evidence = r["provenance"]["evidence"].as_array().expect("evidence");
                assert!(
                    evidence.len() <= 40,
                    "task {i}: {} references",
                    evidence.len()
                );
            }
            Some("TASK_FAILED") => {
                let e = &r["error"];
                assert!(
                    e.to_string().len() < 100_000,
                    "task {i}: error of {} bytes",
                    e.to_string().len()
                );
            }
            other => panic!("task {i}: {other:?} {r}"),
        }
        ids.push(task_id);
    }
    // What the store still answers for, as its client receives it, is within its bound.
    let mut kept = 0;
    let mut found = 0;
    for id in &ids {
        let r = c
            .post_body(
                "",
                json!({"type": "TASK_UPDATE", "task_id": id, "message": "status_query"}),
            )
            .await;
        if r.json["body"]["type"] != "TASK_FAILED"
            || r.json["body"]["error"]["code"] != "TASK_NOT_FOUND"
        {
            found += 1;
            kept += r.raw.len();
        }
    }
    let accounted = gw.metrics().await.sum("ldp_gateway_task_status_bytes");
    // The ledger keeps the capped lineage, and says what was cut.
    let row = gw.ledger_row(&ids[0]).await;
    let lineage = row.lineage.get().len();
    let routing = row.routing.get().to_owned();
    let ledger = file_size(&db) + file_size(&dir.path().join("ledger.db-wal"));
    eprintln!(
        "40 answers with ~5 MB of provenance each under a {BOUND}-byte bound: {found} still \
         answered ({kept} bytes as sent), {accounted} bytes accounted; ledger row lineage \
         {lineage} bytes; ledger files {ledger} bytes"
    );
    assert!(found >= 1, "the newest answers are kept");
    assert!(
        kept as u64 <= 2 * BOUND,
        "{kept} bytes of answers kept under {BOUND}"
    );
    assert!(accounted as u64 <= BOUND && accounted > 0.0, "{accounted}");
    assert!(lineage < 64 * 1024, "{lineage} bytes of lineage in one row");
    assert!(routing.contains("delegate's answer cut"), "{routing}");
    assert!(
        ledger < 16 * 1024 * 1024,
        "ledger files of {ledger} bytes for 40 rows"
    );
    gw.shutdown().await;
}
