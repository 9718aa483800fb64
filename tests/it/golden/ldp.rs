//! LDP both ways: an LDP client at `/ldp/messages` and `/ldp/stream` (HELLO, SESSION_PROPOSE,
//! TASK_SUBMIT), and an LDP delegate behind the gateway (the handshake and the TASK_SUBMIT
//! the gateway sends it; the TASK_RESULT, TASK_UPDATEs or TASK_FAILED it answers, and what
//! the client is told of them).

use super::{envelope, gateway, submit, Case, BEARER, CLIENT};
use crate::support::recorder::{ldp_card, ldp_delegate, Recorder, FIXED_TIME};
use serde_json::{json, Value};

/// The delegate's answer to a TASK_SUBMIT: its output, its provenance.
fn result(task: &Value) -> Vec<Value> {
    let id = &task["body"]["task_id"];
    vec![json!({"type": "TASK_RESULT", "task_id": id,
        "output": {"summary": "three words only", "words": 3},
        "provenance": {"produced_by": "ldp:delegate:echo", "model_version": "echo-1",
            "payload_mode_used": "text", "confidence": 0.9, "verified": false,
            "tokens_used": 42, "cost_usd": 0.0021, "timestamp": FIXED_TIME}})]
}

/// The scripted delegate `echo` offering `summarize` (streamed when `streams`).
async fn echo(streams: bool, answer: fn(&Value) -> Vec<Value>) -> Recorder {
    let card = ldp_card("echo", "echo-family", &[("summarize", 0.9, streams)]);
    ldp_delegate("echo", card, answer).await
}

/// Opens a session through `case`: HELLO, then SESSION_PROPOSE; the session's id.
async fn open(case: &mut Case) -> String {
    let hello = envelope(
        1,
        "",
        json!({"type": "HELLO", "delegate_id": CLIENT, "supported_modes": ["text"]}),
    );
    let r = case.post_json("/ldp/messages", &[BEARER], &hello).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let propose = envelope(
        2,
        "",
        json!({"type": "SESSION_PROPOSE", "config": {"preferred_payload_modes": ["text"],
            "policy": "balanced"}}),
    );
    let r = case.post_json("/ldp/messages", &[BEARER], &propose).await;
    assert_eq!(r.json["body"]["type"], "SESSION_ACCEPT", "{}", r.json);
    r.json["body"]["session_id"]
        .as_str()
        .expect("a session")
        .to_owned()
}

#[tokio::test]
async fn a_session_and_a_task_to_an_ldp_delegate() {
    let d = echo(false, result).await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    let mut case = Case::new(
        "ldp__session_and_task",
        "LDP client → gateway → LDP delegate, whole: HELLO and SESSION_PROPOSE answered by \
         the gateway; the TASK_SUBMIT sent upstream after the gateway's own handshake; the \
         delegate's TASK_RESULT as the client gets it",
        &gw,
    )
    .upstream("d0", &d);
    let session = open(&mut case).await;
    let input = json!({"text": "Summarise: the quick brown fox jumps over the lazy dog."});
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&session, "summarize", input),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

/// Two updates, then the result.
fn streamed(task: &Value) -> Vec<Value> {
    let id = &task["body"]["task_id"];
    let mut out = vec![
        json!({"type": "TASK_UPDATE", "task_id": id, "progress": 0.5, "message": "halfway"}),
        json!({"type": "TASK_UPDATE", "task_id": id, "progress": 0.9, "message": "nearly"}),
    ];
    out.extend(result(task));
    out
}

#[tokio::test]
async fn a_streamed_task_to_a_streaming_ldp_delegate() {
    let d = echo(true, streamed).await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    let mut case = Case::new(
        "ldp__stream",
        "LDP client at /ldp/stream → gateway → LDP delegate whose card streams the skill: \
         the TASK_SUBMIT sent to the delegate's /ldp/stream, its TASK_UPDATEs and \
         TASK_RESULT as events, and the client's stream of them",
        &gw,
    )
    .upstream("d0", &d);
    let session = open(&mut case).await;
    let r = case
        .post_json(
            "/ldp/stream",
            &[BEARER],
            &submit(&session, "summarize", json!("stream me a summary")),
        )
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

/// A refusal that is the task's own (not retryable).
fn refused(task: &Value) -> Vec<Value> {
    vec![
        json!({"type": "TASK_FAILED", "task_id": task["body"]["task_id"],
        "error": {"code": "INPUT_TOO_LONG", "category": "runtime",
            "message": "the input is longer than this delegate reads",
            "severity": "error", "retryable": false}}),
    ]
}

#[tokio::test]
async fn a_task_an_ldp_delegate_refuses() {
    let d = echo(false, refused).await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    let mut case = Case::new(
        "ldp__task_failed",
        "LDP client → gateway → LDP delegate answering TASK_FAILED (not retryable): what the \
         client is told",
        &gw,
    )
    .upstream("d0", &d);
    let session = open(&mut case).await;
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&session, "summarize", json!("too long")),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_FAILED", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}
