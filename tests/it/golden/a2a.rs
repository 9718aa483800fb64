//! A2A both ways: an A2A client at `/a2a` (the gateway's Agent Card, `SendMessage` and
//! `SendStreamingMessage` in v1.0 shapes, `message/send` and `message/stream` in v0.3 ones,
//! a refusal as `TASK_STATE_REJECTED`, JSON-RPC errors) in front of an LDP delegate; and an
//! A2A agent behind the gateway for an LDP client (the JSON-RPC `SendMessage`,
//! `SendStreamingMessage` or v0.3 `message/send` it is sent, and the result or failure made
//! of its answer).

use super::{gateway, session, submit, Case, BEARER};
use crate::support::recorder::{a2a_agent, ldp_card, ldp_delegate, Recorder, Reply, FIXED_TIME};
use crate::support::TestGateway;
use ldp_gateway::config::{DeclaredCard, DelegateConfig, DelegateKind};
use serde_json::{json, Value};

const V1: (&str, &str) = ("a2a-version", "1.0");

/// The LDP delegate `d0` offering `summarize`, streaming it: two updates, then the result.
async fn ldp_fleet() -> (TestGateway, Recorder) {
    let card = ldp_card("echo", "echo-family", &[("summarize", 0.9, true)]);
    let d = ldp_delegate("echo", card, |task| {
        let id = &task["body"]["task_id"];
        vec![
            json!({"type": "TASK_UPDATE", "task_id": id, "progress": 0.5,
                "message": "reading"}),
            json!({"type": "TASK_RESULT", "task_id": id, "output": "A fox jumps a dog.",
                "provenance": {"produced_by": "ldp:delegate:echo", "model_version": "echo-1",
                    "confidence": 0.9, "verified": false, "tokens_used": 30,
                    "cost_usd": 0.0021, "timestamp": FIXED_TIME}}),
        ]
    })
    .await;
    let gw = gateway().delegate(&d.url()).spawn().await;
    (gw, d)
}

/// A JSON-RPC request of `method` with `params`, id 1.
fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// A v1.0 user message of `text` in context `ctx-golden`, for `summarize`.
fn v1_message(text: &str) -> Value {
    json!({"message": {"messageId": "client-msg-1", "contextId": "ctx-golden",
        "role": "ROLE_USER", "parts": [{"text": text}], "metadata": {"skill": "summarize"}}})
}

/// A v0.3 user message of `text` in context `ctx-golden`, for `summarize`.
fn v03_message(text: &str) -> Value {
    json!({"message": {"kind": "message", "messageId": "client-msg-1",
        "contextId": "ctx-golden", "role": "user", "parts": [{"kind": "text", "text": text}],
        "metadata": {"skill": "summarize"}}})
}

const FOX: &str = "Summarise: the quick brown fox jumps over the lazy dog.";

#[tokio::test]
async fn the_gateways_agent_card() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__agent_card",
        "A2A client: the gateway's Agent Card (v1.0 path), listing the skills served now, \
         its JSON-RPC interface and the LDP identity extension",
        &gw,
    )
    .upstream("d0", &d);
    let r = case.get("/.well-known/agent-card.json", &[]).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn send_message_v1() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__send_message",
        "A2A client, v1.0 SendMessage → gateway → LDP delegate: the message's text as the \
         task input, the result as a completed Task with one artifact and the provenance",
        &gw,
    )
    .upstream("d0", &d);
    let r = case
        .post_json("/a2a", &[BEARER, V1], &rpc("SendMessage", v1_message(FOX)))
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn send_streaming_message_v1() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__send_streaming_message",
        "A2A client, v1.0 SendStreamingMessage → gateway → LDP delegate streaming: the task, \
         its status updates (the delegate's TASK_UPDATEs), the artifact, the final status",
        &gw,
    )
    .upstream("d0", &d);
    let r = case
        .post_json(
            "/a2a",
            &[BEARER, V1],
            &rpc("SendStreamingMessage", v1_message(FOX)),
        )
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn message_send_v03() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__v03_message_send",
        "A2A client, v0.3 message/send (no A2A-Version) → gateway → LDP delegate: the answer \
         in v0.3 shapes (`kind`, lower-case states)",
        &gw,
    )
    .upstream("d0", &d);
    let r = case
        .post_json("/a2a", &[BEARER], &rpc("message/send", v03_message(FOX)))
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn message_stream_v03() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__v03_message_stream",
        "A2A client, v0.3 message/stream → gateway → LDP delegate streaming: the events in \
         v0.3 shapes (`kind`, `final`)",
        &gw,
    )
    .upstream("d0", &d);
    let r = case
        .post_json(
            "/a2a",
            &[BEARER, ("a2a-version", "0.3")],
            &rpc("message/stream", v03_message(FOX)),
        )
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn a_refusal_is_a_rejected_task() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__rejected",
        "A2A client, v1.0 SendMessage under a policy that does not exist: a \
         TASK_STATE_REJECTED task with the LDP error, nothing sent upstream",
        &gw,
    )
    .upstream("d0", &d);
    let mut params = v1_message(FOX);
    params["message"]["metadata"]["policy"] = json!("no-such-policy");
    let r = case
        .post_json("/a2a", &[BEARER, V1], &rpc("SendMessage", params))
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn errors() {
    let (gw, d) = ldp_fleet().await;
    let mut case = Case::new(
        "a2a__errors",
        "A2A client's JSON-RPC errors: no key (401), not JSON (-32700), not JSON-RPC 2.0 \
         (-32600), an unknown method (-32601), bad params (-32602), an unknown task (-32001), \
         a v1.0 method without A2A-Version (-32009), a v0.3 method's error in v0.3",
        &gw,
    )
    .upstream("d0", &d);
    let get = rpc("GetTask", json!({"id": "no-such-task"}));
    assert_eq!(case.post_json("/a2a", &[V1], &get).await.status, 401);
    let raw = [BEARER, V1, ("content-type", "application/json")];
    case.post("/a2a", &raw, b"{not json").await;
    case.post(
        "/a2a",
        &raw,
        br#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#,
    )
    .await;
    case.post_json("/a2a", &[BEARER, V1], &rpc("NoSuchMethod", json!({})))
        .await;
    case.post_json("/a2a", &[BEARER, V1], &rpc("GetTask", json!({"nope": 1})))
        .await;
    case.post_json("/a2a", &[BEARER, V1], &get).await;
    case.post_json("/a2a", &[BEARER], &rpc("SendMessage", v1_message(FOX)))
        .await;
    case.post_json(
        "/a2a",
        &[BEARER],
        &rpc("tasks/get", json!({"id": "no-such-task"})),
    )
    .await;
    case.snapshot();
    gw.shutdown().await;
}

// ---- an A2A agent behind the gateway, for an LDP client ----

/// The `[[delegates]]` entry of the A2A agent `agent` at `url`.
fn agent_entry(url: &str) -> DelegateConfig {
    DelegateConfig {
        name: Some("agent".into()),
        kind: DelegateKind::A2a,
        card: Some(DeclaredCard {
            skills: Vec::new(),
            quality: Some(0.8),
            price_per_mtok_input: None,
            price_per_mtok_output: None,
            price_per_mtok_cache_read: None,
            price_per_mtok_cache_write: None,
            latency_p50_ms: Some(100),
            jurisdiction: None,
            trust_domain: None,
            context_window: None,
            model_family: None,
        }),
        ..DelegateConfig::new(url)
    }
}

/// A v1.0 Agent Card offering `translate` at `/rpc`, streaming or not.
fn agent_card(streaming: bool) -> Value {
    json!({"name": "Golden Agent", "description": "Translates into French.",
        "version": "1.2.0",
        "supportedInterfaces": [{"url": "/rpc", "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0"}],
        "provider": {"organization": "Golden Labs", "url": "https://golden.example"},
        "capabilities": {"streaming": streaming},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "translate", "name": "Translate",
            "description": "Translates into French", "tags": ["language"]}]})
}

/// The request's `contextId`, as the answer must echo it.
fn context(req: &Value) -> Value {
    req["params"]["message"]["contextId"].clone()
}

/// A completed task (v1.0) of the French text.
fn completed(req: &Value) -> Value {
    json!({"id": "agent-task-1", "contextId": context(req),
        "status": {"state": "TASK_STATE_COMPLETED", "timestamp": FIXED_TIME},
        "artifacts": [{"artifactId": "artifact-1", "name": "translation",
            "parts": [{"text": "Bonjour le monde."}]}]})
}

fn answer(req: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": req["id"], "result": result})
}

async fn agent_fleet(agent: &Recorder) -> TestGateway {
    gateway().entry(agent_entry(&agent.url())).spawn().await
}

#[tokio::test]
async fn upstream_send_message() {
    let agent = a2a_agent(agent_card(false), false, "/rpc", |req| {
        Reply::json(&answer(req, json!({"task": completed(req)})))
    })
    .await;
    let gw = agent_fleet(&agent).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "a2a__upstream_send_message",
        "LDP client → gateway → A2A agent (v1.0, not streaming): the SendMessage sent (the \
         task input as a text part, the context derived from the client's session), the \
         completed task's artifact as the TASK_RESULT",
        &gw,
    )
    .upstream("agent", &agent);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "translate", json!("Hello world.")),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_send_streaming_message() {
    let agent = a2a_agent(agent_card(true), false, "/rpc", |req| {
        let (task, ctx) = (json!("agent-task-1"), context(req));
        Reply::sse(&[
            answer(
                req,
                json!({"task": {"id": task, "contextId": ctx,
                "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            ),
            answer(
                req,
                json!({"statusUpdate": {"taskId": task, "contextId": ctx,
                "status": {"state": "TASK_STATE_WORKING", "message": {"messageId": "agent-msg-1",
                    "role": "ROLE_AGENT", "parts": [{"text": "translating"}]}}}}),
            ),
            answer(
                req,
                json!({"artifactUpdate": {"taskId": task, "contextId": ctx,
                "artifact": {"artifactId": "artifact-1", "name": "translation",
                    "parts": [{"text": "Bonjour le monde."}]}, "lastChunk": true}}),
            ),
            answer(
                req,
                json!({"statusUpdate": {"taskId": task, "contextId": ctx,
                "status": {"state": "TASK_STATE_COMPLETED", "timestamp": FIXED_TIME}}}),
            ),
        ])
    })
    .await;
    let gw = agent_fleet(&agent).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "a2a__upstream_streaming",
        "LDP client at /ldp/stream → gateway → A2A agent whose card streams: the \
         SendStreamingMessage sent, the agent's events, and the TASK_UPDATEs and TASK_RESULT \
         the client is told",
        &gw,
    )
    .upstream("agent", &agent);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/stream",
            &[BEARER],
            &submit(&sid, "translate", json!("Hello world.")),
        )
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_v03_message_send() {
    let mut card = json!({"name": "Old Agent", "description": "Translates into French.",
        "version": "0.9.0", "url": "/rpc", "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC", "capabilities": {"streaming": false},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "translate", "name": "Translate",
            "description": "Translates into French", "tags": ["language"]}]});
    card["provider"] = json!({"organization": "Golden Labs", "url": "https://golden.example"});
    let agent = a2a_agent(card, true, "/rpc", |req| {
        Reply::json(&answer(
            req,
            json!({"kind": "task", "id": "agent-task-1", "contextId": context(req),
                "status": {"state": "completed", "timestamp": FIXED_TIME},
                "artifacts": [{"artifactId": "artifact-1", "name": "translation",
                    "parts": [{"kind": "text", "text": "Bonjour le monde."}]}]}),
        ))
    })
    .await;
    let gw = agent_fleet(&agent).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "a2a__upstream_v03",
        "LDP client → gateway → A2A agent whose card (at the v0.3 path) speaks only 0.3: \
         message/send with A2A-Version 0.3 in v0.3 shapes, the v0.3 task as the TASK_RESULT",
        &gw,
    )
    .upstream("agent", &agent);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "translate", json!("Hello world.")),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_input_required() {
    let agent = a2a_agent(agent_card(false), false, "/rpc", |req| {
        Reply::json(&answer(
            req,
            json!({"task": {"id": "agent-task-1", "contextId": context(req),
                "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                    "message": {"messageId": "agent-msg-1", "role": "ROLE_AGENT",
                        "parts": [{"text": "Into which language?"}]}}}}),
        ))
    })
    .await;
    let gw = agent_fleet(&agent).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "a2a__upstream_input_required",
        "LDP client → gateway → A2A agent answering TASK_STATE_INPUT_REQUIRED: the \
         TASK_FAILED the client gets (the gateway holds no interrupted task)",
        &gw,
    )
    .upstream("agent", &agent);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "translate", json!("Hello world.")),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_FAILED", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}
