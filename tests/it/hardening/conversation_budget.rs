//! Issue 24 item 9: the conversations kept for OpenAI-backed delegates have a global byte
//! budget across sessions (`openai.memory_bytes`): past it the least recently used sessions'
//! conversations are dropped, counted in `ldp_gateway_conversations_evicted_total`.

use crate::support::openai::{declared, entry, start};
use crate::support::TestGateway;
use ldp_gateway::sim::openai::OpenAiOptions;
use serde_json::json;

#[tokio::test]
async fn many_sessions_with_big_turns_stay_within_the_conversation_budget() {
    let oa = start(OpenAiOptions::new("m")).await;
    const BUDGET: u64 = 1024 * 1024;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "m", declared(&["chat"], 0.8)))
        .config(|c| c.openai.memory_bytes = BUDGET)
        .spawn()
        .await;
    let c = gw.client();
    // 40 sessions, two turns each of ~40 kB (a 20 kB question and its echo): ~3.2 MB kept
    // without a budget.
    let mut sessions = Vec::new();
    for s in 0..40 {
        let (sid, _) = c
            .session(json!({"preferred_payload_modes": ["text"]}))
            .await;
        for t in 0..2 {
            let input = format!("session {s} turn {t} {}", "x".repeat(20_000));
            let a = c.task(&sid, "chat", json!(input), "text").await;
            assert_eq!(a["type"], "TASK_RESULT", "{a}");
        }
        sessions.push(sid);
    }
    let scrape = gw.metrics().await;
    let kept = scrape.sum("ldp_gateway_conversations_bytes");
    let evicted = scrape.sum("ldp_gateway_conversations_evicted_total");
    eprintln!(
        "40 sessions × 2 turns of ~40 kB under a {BUDGET}-byte budget: {kept} bytes kept, \
         {evicted} sessions' conversations evicted"
    );
    assert!(kept > 0.0 && kept <= BUDGET as f64, "{kept} bytes kept");
    assert!(evicted >= 10.0, "{evicted} evicted");
    // The newest session still has its context; the oldest lost it.
    let last = c
        .task(&sessions[39], "chat", json!("and then?"), "text")
        .await;
    assert_eq!(last["type"], "TASK_RESULT", "{last}");
    let sent = oa.requests();
    let messages = sent.last().expect("a request")["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(messages, 5, "two turns and the question");
    let first = c
        .task(&sessions[0], "chat", json!("and then?"), "text")
        .await;
    assert_eq!(first["type"], "TASK_RESULT", "{first}");
    let sent = oa.requests();
    let messages = sent.last().expect("a request")["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        messages, 1,
        "the least recently used session's conversation was dropped"
    );
    gw.shutdown().await;
    oa.shutdown().await;
}

/// A closed session's conversations are forgotten at once (not kept until its TTL or the
/// budget), and only its owner's close reaches them.
#[tokio::test]
async fn a_closed_sessions_conversations_are_forgotten() {
    use crate::support::Client;
    use ldp_gateway::ldp::Body;
    let oa = start(OpenAiOptions::new("m")).await;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "m", declared(&["chat"], 0.8)))
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let a = c.task(&sid, "chat", json!("remember me"), "text").await;
    assert_eq!(a["type"], "TASK_RESULT", "{a}");
    let kept = || async { gw.metrics().await.sum("ldp_gateway_conversations_bytes") };
    assert!(kept().await > 0.0);
    // Someone else's close is acknowledged and changes nothing.
    let other = Client::new(&gw.ldp_url()).with_from("ldp:client:someone-else");
    let r = other
        .send_body(&sid, Body::SessionClose { reason: None })
        .await;
    assert_eq!(r.status, 200);
    assert!(kept().await > 0.0, "another client's close kept it");
    let r = c.send_body(&sid, Body::SessionClose { reason: None }).await;
    assert_eq!(r.status, 200);
    assert_eq!(kept().await, 0.0, "the owner's close forgot it");
    gw.shutdown().await;
    oa.shutdown().await;
}
