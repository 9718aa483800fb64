//! A confidence that does not parse dropped the whole vote (no verifier "gave a usable vote",
//! the task failed). Now the vote stands and only its confidence is left out. A verifier
//! written in the test answers each verification with another unreadable confidence.

use super::liar::{handshake, is_card, ldp_card, Liar, Lie};
use crate::support::TestGateway;
use crate::verify::{policy, producer, question};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Confidences as a careless verifier (or a model) writes them.
const UNREADABLE: [&str; 5] = [r#""high""#, "1e999", "7", "-1", r#"{"level": "high"}"#];

/// A TASK_RESULT from `id` for the TASK_SUBMIT `asked`, its output the JSON text `output`.
fn result(id: &str, asked: &Value, output: &str) -> Lie {
    let env = format!(
        r#"{{"message_id":"{}","session_id":"{id}-session","from":"ldp:delegate:{id}",
        "to":"ldp:delegate:gateway","payload_mode":"text","timestamp":"{}","provenance":null,
        "body":{{"type":"TASK_RESULT","task_id":{},"output":{output}}}}}"#,
        uuid::Uuid::new_v4(),
        chrono::Utc::now().to_rfc3339(),
        asked["body"]["task_id"],
    );
    let mut lie = Lie::new(200);
    lie.body = env;
    lie.header("content-type", "application/json")
}

#[tokio::test]
async fn a_vote_with_an_unreadable_confidence_still_counts() {
    let n = Arc::new(AtomicUsize::new(0));
    let k = n.clone();
    let judge = Liar::start(move |a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("judge", "verify", 0.9, 0.0001));
        }
        if let Some(h) = handshake("judge", a) {
            return h;
        }
        let asked: Value = serde_json::from_str(&a.body).unwrap_or_default();
        let c = UNREADABLE[k.fetch_add(1, Ordering::SeqCst) % UNREADABLE.len()];
        let output = format!(r#"{{"passed": true, "confidence": {c}, "reason": 42}}"#);
        result("judge", &asked, &output)
    })
    .await;
    let gw = TestGateway::builder()
        .sim(producer("p", "alpha", 0.9, 0.001, 1.0))
        .delegate(&judge.url)
        .policy("verified.toml", &policy(1, 1, 1.0))
        .config(|c| c.policies.default = "verified".into())
        .spawn()
        .await;
    let c = gw.client();
    let s = c.accepted(json!({"payload_mode": "text"})).await;
    for (i, confidence) in UNREADABLE.iter().enumerate() {
        let body = c.task(&s, "qa", question(i), "text").await;
        assert_eq!(
            body["type"], "TASK_RESULT",
            "confidence {confidence}: {body}"
        );
        let p = &body["provenance"];
        assert_eq!(p["verification_status"], "peer_verified", "{p}");
        let votes = p["evidence"].as_array().expect("evidence");
        assert_eq!(votes.len(), 1, "{p}");
        assert_eq!(votes[0]["decision"], "passed");
        assert!(votes[0]["confidence"].is_null(), "{confidence}: {p}");
        let row = gw.ledger_row(body["task_id"].as_str().unwrap()).await;
        assert_eq!(row.votes.len(), 1, "{row:?}");
        assert_eq!(row.votes[0].confidence, None);
    }
    assert_eq!(
        n.load(Ordering::SeqCst),
        UNREADABLE.len(),
        "one vote asked per task"
    );
    gw.shutdown().await;
}
