//! OpenAI both ways: the ingress (`/v1/chat/completions` whole and streamed, with tools and
//! tool calls, `/v1/models`, its errors) in front of an LDP delegate and an OpenAI-compatible
//! one; and an OpenAI-compatible delegate behind the gateway for an LDP client (the chat
//! request it is POSTed, whole and streamed, and the TASK_RESULT made of its answer: usage,
//! cost, tool calls, finish reason).

use super::{gateway, session, submit, Case, BEARER};
use crate::support::openai::{declared, entry};
use crate::support::recorder::{ldp_card, ldp_delegate, openai_model, Recorder, Reply, FIXED_UNIX};
use crate::support::TestGateway;
use serde_json::{json, Value};

/// The model the OpenAI-backed delegate `mini` is configured with.
const MODEL: &str = "gpt-golden";
/// The model its answers name (a dated snapshot of [`MODEL`], as real providers answer).
const ANSWERED: &str = "gpt-golden-2026-01-01";

/// A whole `chat.completion` of `message`, stopped for `finish`, with `usage`.
fn completion(message: Value, finish: &str, usage: Value) -> Value {
    json!({
        "id": "chatcmpl-golden", "object": "chat.completion", "created": FIXED_UNIX,
        "model": ANSWERED, "system_fingerprint": "fp_golden",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage,
    })
}

/// A `chat.completion.chunk` of one choice's `delta`.
fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-golden", "object": "chat.completion.chunk", "created": FIXED_UNIX,
        "model": ANSWERED, "system_fingerprint": "fp_golden",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    })
}

/// The last chunk of a stream that asked for usage.
fn usage_chunk(usage: Value) -> Value {
    json!({
        "id": "chatcmpl-golden", "object": "chat.completion.chunk", "created": FIXED_UNIX,
        "model": ANSWERED, "system_fingerprint": "fp_golden", "choices": [], "usage": usage,
    })
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion})
}

/// A text answer, whole or (when the request streams) in three pieces.
fn text_answer(req: &Value) -> Reply {
    if req["stream"] == true {
        return Reply::sse(&[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"content": "Bonjour"}), None),
            chunk(json!({"content": " le monde."}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk(usage(12, 4)),
            json!("[DONE]"),
        ]);
    }
    Reply::json(&completion(
        json!({"role": "assistant", "content": "Bonjour le monde.", "refusal": null}),
        "stop",
        usage(12, 4),
    ))
}

/// The tool the clients offer.
fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}])
}

/// A call of `get_weather` for Paris, whole or (streaming) in pieces, as OpenAI sends them.
fn tool_call_answer(req: &Value) -> Reply {
    if req["stream"] == true {
        return Reply::sse(&[
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_golden_1", "type": "function",
                "function": {"name": "get_weather", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(usage(40, 9)),
            json!("[DONE]"),
        ]);
    }
    Reply::json(&completion(
        json!({"role": "assistant", "content": null, "refusal": null,
            "tool_calls": [{"id": "call_golden_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        "tool_calls",
        usage(40, 9),
    ))
}

/// The LDP delegate `d0` (`summarize`) and the OpenAI-backed `mini` (`chat`, priced per
/// token) answering what `answer` says.
async fn fleet(answer: fn(&Value) -> Reply) -> (TestGateway, Recorder, Recorder) {
    let card = ldp_card("echo", "echo-family", &[("summarize", 0.9, false)]);
    let ldp = ldp_delegate("echo", card, |task| {
        vec![
            json!({"type": "TASK_RESULT", "task_id": task["body"]["task_id"],
            "output": {"summary": "a greeting"},
            "provenance": {"produced_by": "ldp:delegate:echo", "model_version": "echo-1",
                "confidence": 0.9, "verified": false, "tokens_used": 30, "cost_usd": 0.0021}}),
        ]
    })
    .await;
    let model = openai_model(MODEL, answer).await;
    let mut mini = declared(&["chat"], 0.8);
    mini.price_per_mtok_input = Some(0.15);
    mini.price_per_mtok_output = Some(0.60);
    let gw = gateway()
        .delegate(&ldp.url())
        .entry(entry("mini", &format!("{}/v1", model.url()), MODEL, mini))
        .spawn()
        .await;
    (gw, ldp, model)
}

const CHAT: &str = "/v1/chat/completions";

#[tokio::test]
async fn ingress_models() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let mut case = Case::new(
        "openai__ingress_models",
        "OpenAI client: GET /v1/models lists the skills served now as models",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let r = case.get("/v1/models", &[BEARER]).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_whole_to_an_ldp_delegate() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let mut case = Case::new(
        "openai__ingress_whole_to_ldp",
        "OpenAI client → gateway → LDP delegate, whole: the conversation as the task's text \
         input (one `role: text` line a message), the LDP output as the assistant's content, \
         usage estimated",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let body = json!({"model": "summarize", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hello."},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "Again, in French."}]});
    let r = case.post_json(CHAT, &[BEARER], &body).await;
    assert_eq!(r.status, 200, "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_streamed_to_an_ldp_delegate() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let mut case = Case::new(
        "openai__ingress_stream_to_ldp",
        "OpenAI client streaming with include_usage → gateway → LDP delegate (not streaming): \
         the whole output as one delta, the finish, the usage chunk, [DONE]",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let body = json!({"model": "summarize@cheapest", "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "Say hello."}]});
    let r = case.post_json(CHAT, &[BEARER], &body).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_whole_to_an_openai_delegate_with_tools() {
    let (gw, ldp, model) = fleet(tool_call_answer).await;
    let mut case = Case::new(
        "openai__ingress_tools",
        "OpenAI client with tools → gateway → OpenAI-backed delegate, whole: the request \
         passed on (tools, tool_choice, parameters), the model's tool call, finish reason and \
         usage as the client gets them",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let body = json!({"model": "chat", "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools(), "tool_choice": "auto", "parallel_tool_calls": false,
        "temperature": 0.2, "max_completion_tokens": 256, "user": "golden-user"});
    let r = case.post_json(CHAT, &[BEARER], &body).await;
    assert_eq!(r.status, 200, "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_tool_results_to_an_openai_delegate() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let mut case = Case::new(
        "openai__ingress_tool_result",
        "OpenAI client → gateway → OpenAI-backed delegate: a conversation carrying the \
         assistant's tool call and the tool's result, passed on as it came",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let body = json!({"model": "chat", "tools": tools(), "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_golden_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_golden_1", "content": "{\"celsius\": 21}"}]});
    let r = case.post_json(CHAT, &[BEARER], &body).await;
    assert_eq!(r.status, 200, "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_streamed_to_an_openai_delegate_with_tools() {
    let (gw, ldp, model) = fleet(tool_call_answer).await;
    let mut case = Case::new(
        "openai__ingress_stream_tools",
        "OpenAI client streaming with tools and include_usage → gateway → OpenAI-backed \
         delegate streaming a tool call in pieces: the request passed on, the pieces relayed \
         as chunks, the finish reason, the usage, [DONE]",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let body = json!({"model": "chat", "stream": true,
        "stream_options": {"include_usage": true}, "tools": tools(),
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}]});
    let r = case.post_json(CHAT, &[BEARER], &body).await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_errors() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let mut case = Case::new(
        "openai__ingress_errors",
        "OpenAI client refused, in OpenAI's error shape: no key (401), a model no delegate \
         serves (404), no messages (400), a body that is not JSON (400)",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    let ask = json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(case.post_json(CHAT, &[], &ask).await.status, 401);
    let nope = json!({"model": "translate", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(case.post_json(CHAT, &[BEARER], &nope).await.status, 404);
    let empty = json!({"model": "chat", "messages": []});
    assert_eq!(case.post_json(CHAT, &[BEARER], &empty).await.status, 400);
    let headers = [BEARER, ("content-type", "application/json")];
    assert_eq!(case.post(CHAT, &headers, b"{\"model\":").await.status, 400);
    case.snapshot();
    gw.shutdown().await;
}

// ---- an OpenAI-compatible delegate behind the gateway, for an LDP client ----

#[tokio::test]
async fn upstream_whole_from_an_ldp_client() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "openai__upstream_whole",
        "LDP client → gateway → OpenAI-backed delegate, whole: the task's text input as the \
         chat request's user message, the completion as the TASK_RESULT (its text the \
         output; tokens from usage, cost at the declared prices)",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "chat", json!("Say hello in French.")),
        )
        .await;
    assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_streamed_from_an_ldp_client() {
    let (gw, ldp, model) = fleet(text_answer).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "openai__upstream_stream",
        "LDP client at /ldp/stream → gateway → OpenAI-backed delegate, streamed: the chat \
         request with stream and include_usage, the chunks relayed as TASK_UPDATEs, the \
         TASK_RESULT made of them",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/stream",
            &[BEARER],
            &submit(&sid, "chat", json!("Say hello in French.")),
        )
        .await;
    assert_eq!(r.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_tool_call_for_an_ldp_client() {
    let (gw, ldp, model) = fleet(tool_call_answer).await;
    let sid = session(&gw).await;
    let mut case = Case::new(
        "openai__upstream_tool_call",
        "LDP client → gateway → OpenAI-backed delegate answering a tool call (no text): the \
         TASK_RESULT the LDP client gets",
        &gw,
    )
    .upstream("d0", &ldp)
    .upstream("mini", &model);
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let r = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "chat", json!("What is the weather in Paris?")),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    case.snapshot();
    gw.shutdown().await;
}
