//! LADP (`POST /ladp`, seed v1.9 s-expressions) in front of LDP delegates: a `task-init`
//! without `[verify]` (the task sent upstream; `synthesis` then `integration`), with
//! `[verify]` (the producer's task and the verifier's; `synthesis`, `verify`, `vote`,
//! `integration-verified`), and refusals in LADP's `error` form.

use super::{gateway, Case, BEARER};
use crate::support::recorder::{ldp_card, ldp_delegate, Recorder, FIXED_TIME};
use crate::support::TestGateway;
use serde_json::{json, Value};

const TEXT: (&str, &str) = ("content-type", "text/plain");

/// The producer `solo` offering `qa`.
async fn producer() -> Recorder {
    let card = ldp_card("solo", "solo-family", &[("qa", 0.9, false)]);
    ldp_delegate("solo", card, |task: &Value| {
        vec![
            json!({"type": "TASK_RESULT", "task_id": task["body"]["task_id"],
            "output": "Yes: x = x holds for every x.",
            "provenance": {"produced_by": "ldp:delegate:solo", "model_version": "solo-1",
                "payload_mode_used": "text", "confidence": 0.9, "verified": false,
                "tokens_used": 20, "cost_usd": 0.0021, "timestamp": FIXED_TIME}}),
        ]
    })
    .await
}

/// The verifier `judge` (another model family) offering `verify`, passing everything.
async fn verifier() -> Recorder {
    let card = ldp_card("judge", "judge-family", &[("verify", 0.9, false)]);
    ldp_delegate("judge", card, |task: &Value| {
        vec![
            json!({"type": "TASK_RESULT", "task_id": task["body"]["task_id"],
            "output": {"passed": true, "confidence": 0.8, "reason": "it holds"},
            "provenance": {"produced_by": "ldp:delegate:judge", "model_version": "judge-1",
                "payload_mode_used": "text", "confidence": 0.8, "verified": false,
                "tokens_used": 10, "cost_usd": 0.001, "timestamp": FIXED_TIME}}),
        ]
    })
    .await
}

/// Policies: `balanced` (the default) and `verified` (one verifier, one round, every task).
fn with_policies<'a>(
    b: crate::support::gateway::Builder<'a>,
) -> crate::support::gateway::Builder<'a> {
    b.policy("balanced.toml", "name = \"balanced\"\n").policy(
        "verified.toml",
        "name = \"verified\"\n[fallback]\nmax_attempts = 1\n\
         [verify]\nverifiers = 1\nmax_rounds = 1\nsample = 1.0\n",
    )
}

async fn spawn(delegates: &[&Recorder]) -> TestGateway {
    let urls: Vec<String> = delegates.iter().map(|d| d.url()).collect();
    with_policies(gateway().delegates(&urls)).spawn().await
}

#[tokio::test]
async fn a_task_init_without_verify() {
    let p = producer().await;
    let gw = spawn(&[&p]).await;
    let mut case = Case::new(
        "ladp__task_init",
        "LADP client, task-init under a policy without [verify] → gateway → LDP delegate: \
         the task's text sent upstream, the answer as synthesis then integration",
        &gw,
    )
    .upstream("d0", &p);
    let text = "(msg task-init ctl gateway 1746176400000\n  \
                (data (skill qa) (task \"Is x = x for every x?\") (policy balanced) (timeout 30)))";
    let r = case.post("/ladp", &[BEARER, TEXT], text.as_bytes()).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn a_task_init_with_verify() {
    let (p, v) = (producer().await, verifier().await);
    let gw = spawn(&[&p, &v]).await;
    let mut case = Case::new(
        "ladp__verified",
        "LADP client, task-init under a policy with [verify] → gateway → producer, then \
         verifier: the verification task ({input, output, skill}), and the answer as \
         synthesis, verify, vote, integration-verified",
        &gw,
    )
    .upstream("d0", &p)
    .upstream("d1", &v);
    let text = "(msg task-init ctl gateway 1746176400000\n  \
                (data (skill qa) (task \"Is x = x for every x?\") (policy verified)))";
    let r = case.post("/ladp", &[BEARER, TEXT], text.as_bytes()).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn refusals() {
    let p = producer().await;
    let gw = spawn(&[&p]).await;
    let mut case = Case::new(
        "ladp__refused",
        "LADP client refused in LADP's error form: a grammar error (400, at its line:column), \
         a policy there is not (403), a message type the gateway does not answer (400); \
         nothing sent upstream",
        &gw,
    )
    .upstream("d0", &p);
    let bad = "(msg task-init ctl gateway 1746176400000 (data (skill qa) (task \"x\")";
    case.post("/ladp", &[BEARER, TEXT], bad.as_bytes()).await;
    let nosuch = "(msg task-init ctl gateway 1746176400001\n  \
                  (data (skill qa) (task \"x\") (policy nosuch)))";
    case.post("/ladp", &[BEARER, TEXT], nosuch.as_bytes()).await;
    let other = "(msg finalize-proposal ctl gateway 1746176400002\n  \
                 (data (proposal-id \"p1\") (status \"finalized\")))";
    case.post("/ladp", &[BEARER, TEXT], other.as_bytes()).await;
    case.snapshot();
    gw.shutdown().await;
}
