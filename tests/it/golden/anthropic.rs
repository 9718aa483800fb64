//! Anthropic both ways: the ingress (`/v1/messages` whole and streamed, `/v1/models` in
//! Anthropic's shape, its errors) in front of an LDP delegate, an OpenAI-compatible one and an
//! Anthropic-API one; and an Anthropic-API delegate behind the gateway for an OpenAI client and
//! an LDP client. Each crossing's translation, out and back.

use super::{gateway, session, submit, Case, BEARER, KEY};
use crate::support::anthropic::entry as anthropic_entry;
use crate::support::openai::{declared, entry as openai_entry};
use crate::support::recorder::{
    anthropic_model, ldp_card, ldp_delegate, openai_model, Recorder, Reply, FIXED_UNIX,
};
use crate::support::TestGateway;
use serde_json::{json, Value};

/// The model the Anthropic-API delegate `claude` is configured with.
const MODEL: &str = "claude-golden";
/// The model its answers name.
const ANSWERED: &str = "claude-golden-20260101";
/// The model of the OpenAI-compatible delegate `mini`.
const OPENAI_MODEL: &str = "gpt-golden";

const MESSAGES: &str = "/v1/messages";
/// The headers of an Anthropic SDK of the 1.x line: `x-api-key`, API `2023-06-01`.
const V1: [(&str, &str); 2] = [("x-api-key", KEY), ("anthropic-version", "2023-06-01")];
/// The headers of an SDK of the 2.x line: Bearer, API `2026-10-21`, a beta asked for.
const V2: [(&str, &str); 3] = [
    BEARER,
    ("anthropic-version", "2026-10-21"),
    ("anthropic-beta", "prompt-caching-2024-07-31"),
];

fn usage(input: u64, output: u64, read: u64, written: u64) -> Value {
    json!({"input_tokens": input, "output_tokens": output,
        "cache_read_input_tokens": read, "cache_creation_input_tokens": written})
}

/// A whole message of `content`, stopped for `stop`.
fn message(content: Value, stop: &str, usage: Value) -> Value {
    json!({"id": "msg_golden", "type": "message", "role": "assistant", "model": ANSWERED,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage})
}

/// The named events of a streamed message of `blocks` (each `(start, deltas)`).
fn stream(blocks: &[(Value, Vec<Value>)], stop: &str, usage: Value) -> Reply {
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(1);
    let mut events = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_golden", "type": "message",
            "role": "assistant", "model": ANSWERED, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": start_usage}}),
    )];
    for (index, (start, deltas)) in blocks.iter().enumerate() {
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            events.push(("ping", json!({"type": "ping"})));
        }
        for d in deltas {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": d}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": usage["output_tokens"]}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    Reply::named_sse(&events)
}

/// A text answer (after a thinking block when thinking was asked for), whole or streamed; the
/// prompt's cached prefix read from the cache.
fn text_answer(req: &Value) -> Reply {
    let thinking = req["thinking"]["type"] == "enabled";
    let use_ = usage(12, 4, 100, 0);
    if req["stream"] == true {
        let mut blocks = Vec::new();
        if thinking {
            blocks.push((
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": "A greeting, in French."}),
                    json!({"type": "signature_delta", "signature": "sig-golden"}),
                ],
            ));
        }
        blocks.push((
            json!({"type": "text", "text": ""}),
            vec![
                json!({"type": "text_delta", "text": "Bonjour"}),
                json!({"type": "text_delta", "text": " le monde."}),
            ],
        ));
        return stream(&blocks, "end_turn", use_);
    }
    let mut content = Vec::new();
    if thinking {
        content.push(
            json!({"type": "thinking", "thinking": "A greeting, in French.",
            "signature": "sig-golden"}),
        );
    }
    content.push(json!({"type": "text", "text": "Bonjour le monde."}));
    Reply::json(&message(json!(content), "end_turn", use_))
}

/// A `tool_use` of `get_weather` for Paris, whole or streamed in pieces.
fn tool_use_answer(req: &Value) -> Reply {
    let call = json!({"type": "tool_use", "id": "toolu_golden_1", "name": "get_weather",
        "input": {"city": "Paris"}});
    if req["stream"] == true {
        let mut start = call.clone();
        start["input"] = json!({});
        return stream(
            &[(
                start,
                vec![
                    json!({"type": "input_json_delta", "partial_json": "{\"city\":"}),
                    json!({"type": "input_json_delta", "partial_json": "\"Paris\"}"}),
                ],
            )],
            "tool_use",
            usage(40, 9, 0, 0),
        );
    }
    Reply::json(&message(json!([call]), "tool_use", usage(40, 9, 0, 0)))
}

/// OpenAI's answer with a tool call, for the Anthropic client reaching `mini`.
fn openai_answer(req: &Value) -> Reply {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "chatcmpl-golden", "object": "chat.completion.chunk", "created": FIXED_UNIX,
            "model": OPENAI_MODEL, "choices": [{"index": 0, "delta": delta, "logprobs": null,
            "finish_reason": finish}]})
    };
    let has_result = req["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    if req["stream"] == true && !has_result {
        return Reply::sse(&[
            chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                    "id": "call_golden_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":\"Paris\"}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            json!({"id": "chatcmpl-golden", "object": "chat.completion.chunk",
                "created": FIXED_UNIX, "model": OPENAI_MODEL, "choices": [],
                "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}}),
            json!("[DONE]"),
        ]);
    }
    Reply::json(
        &json!({"id": "chatcmpl-golden", "object": "chat.completion",
        "created": FIXED_UNIX, "model": OPENAI_MODEL,
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
            "message": {"role": "assistant", "content": "It is 21 °C in Paris.", "refusal": null}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58}}),
    )
}

/// The tool the clients offer, in Anthropic's words.
fn tools() -> Value {
    json!([{"name": "get_weather", "description": "The weather in a city now",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}])
}

/// The same tool in OpenAI's words.
fn openai_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "description": "The weather in a city now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}}])
}

/// The LDP delegate `d0` (`summarize`), the OpenAI-compatible `mini` (`chat`) and the
/// Anthropic-API `claude` (`assist`, priced with its cache prices), `claude` answering what
/// `answer` says.
async fn fleet(answer: fn(&Value) -> Reply) -> (TestGateway, [Recorder; 3]) {
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
    let oa = openai_model(OPENAI_MODEL, openai_answer).await;
    let claude = anthropic_model(MODEL, answer).await;
    let mut mini = declared(&["chat"], 0.8);
    mini.price_per_mtok_input = Some(0.15);
    mini.price_per_mtok_output = Some(0.60);
    let mut card = declared(&["assist"], 0.9);
    card.price_per_mtok_input = Some(3.0);
    card.price_per_mtok_output = Some(15.0);
    card.price_per_mtok_cache_read = Some(0.3);
    card.price_per_mtok_cache_write = Some(3.75);
    let gw = gateway()
        .delegate(&ldp.url())
        .entry(openai_entry(
            "mini",
            &format!("{}/v1", oa.url()),
            OPENAI_MODEL,
            mini,
        ))
        .entry(anthropic_entry("claude", &claude.url(), MODEL, card))
        .spawn()
        .await;
    (gw, [ldp, oa, claude])
}

fn case(name: &str, what: &str, gw: &TestGateway, r: &[Recorder; 3]) -> Case {
    Case::new(name, what, gw)
        .upstream("d0", &r[0])
        .upstream("mini", &r[1])
        .upstream("claude", &r[2])
}

#[tokio::test]
async fn ingress_models() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__ingress_models",
        "Anthropic client: GET /v1/models with anthropic-version lists the skills served now \
         in Anthropic's shape",
        &gw,
        &r,
    );
    assert_eq!(case.get("/v1/models", &V1).await.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_whole_to_an_ldp_delegate() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__ingress_whole_to_ldp",
        "Anthropic client (1.x: x-api-key, 2023-06-01) → gateway → LDP delegate, whole: the \
         system and the conversation as the task's text input, the LDP output as one text \
         block, usage estimated",
        &gw,
        &r,
    );
    let body = json!({"model": "summarize", "max_tokens": 256,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Say hello."},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "Again, in French."}]});
    let resp = case.post_json(MESSAGES, &V1, &body).await;
    assert_eq!(resp.status, 200, "{}", resp.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_streamed_with_tools_to_an_openai_delegate() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__ingress_stream_tools_to_openai",
        "Anthropic client (2.x: Bearer, 2026-10-21) streaming with tools → gateway → \
         OpenAI-compatible delegate streaming a tool call: the request in OpenAI's words \
         (system first, tools as functions, max_tokens), the call relayed as a tool_use \
         block with input_json_delta pieces, tool_calls as stop_reason tool_use",
        &gw,
        &r,
    );
    let body = json!({"model": "chat", "max_tokens": 300, "stream": true,
        "system": "Use the tools.", "tools": tools(), "tool_choice": {"type": "auto"},
        "temperature": 0.2, "stop_sequences": ["###"],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}]});
    let resp = case.post_json(MESSAGES, &V2, &body).await;
    assert_eq!(resp.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_tool_result_to_an_openai_delegate() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__ingress_tool_result_to_openai",
        "Anthropic client → gateway → OpenAI-compatible delegate: the assistant's tool_use \
         as a tool call and the tool_result as a tool message, the answer as a text block",
        &gw,
        &r,
    );
    let body = json!({"model": "chat", "max_tokens": 300, "tools": tools(), "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_golden_1",
            "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_golden_1",
            "content": [{"type": "text", "text": "{\"celsius\": 21}"}]}]}]});
    let resp = case.post_json(MESSAGES, &V1, &body).await;
    assert_eq!(resp.status, 200, "{}", resp.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn passthrough_whole() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__passthrough_whole",
        "Anthropic client → gateway → Anthropic-API delegate, whole: the request as it came \
         (cache_control, thinking, metadata, fields the gateway does not model) but for the \
         model, anthropic-beta passed on, the gateway's anthropic-version; the answer's \
         blocks as they came (thinking kept), the cache reads counted apart",
        &gw,
        &r,
    );
    let body = json!({"model": "assist", "max_tokens": 2048,
        "system": [{"type": "text", "text": "You are a translator. (a long, cached prefix)",
            "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": "golden-user"}, "service_tier": "auto",
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Say hello in French."},
            {"type": "future_block", "payload": 1}]}]});
    let resp = case.post_json(MESSAGES, &V2, &body).await;
    assert_eq!(resp.status, 200, "{}", resp.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn passthrough_streamed() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__passthrough_stream",
        "Anthropic client streaming → gateway → Anthropic-API delegate streaming a thinking \
         block then text: the events relayed in order, thinking and signature deltas kept, \
         the usage with the cache reads",
        &gw,
        &r,
    );
    let body = json!({"model": "assist", "max_tokens": 2048, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "Say hello in French."}]});
    let resp = case.post_json(MESSAGES, &V1, &body).await;
    assert_eq!(resp.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn openai_client_with_tools_to_an_anthropic_delegate() {
    let (gw, r) = fleet(tool_use_answer).await;
    let mut case = case(
        "anthropic__openai_client_tools",
        "OpenAI client with tools → gateway → Anthropic-API delegate, whole: the request in \
         Anthropic's words (system apart, tools with input_schema, max_tokens), the tool_use \
         as a tool call with finish_reason tool_calls, usage in OpenAI's words",
        &gw,
        &r,
    );
    let body = json!({"model": "assist", "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is the weather in Paris?"}],
        "tools": openai_tools(), "tool_choice": "auto", "temperature": 0.2,
        "max_completion_tokens": 256, "stop": ["###"]});
    let resp = case
        .post_json("/v1/chat/completions", &[BEARER], &body)
        .await;
    assert_eq!(resp.status, 200, "{}", resp.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn openai_client_streamed_tool_result_to_an_anthropic_delegate() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__openai_client_tool_result_stream",
        "OpenAI client streaming a conversation with a tool call and its result → gateway → \
         Anthropic-API delegate: the call as a tool_use block, the result as a tool_result \
         block in a user turn; the text deltas relayed as chunks, the usage chunk",
        &gw,
        &r,
    );
    let body = json!({"model": "assist", "stream": true,
        "stream_options": {"include_usage": true}, "tools": openai_tools(), "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_golden_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_golden_1", "content": "{\"celsius\": 21}"}]});
    let resp = case
        .post_json("/v1/chat/completions", &[BEARER], &body)
        .await;
    assert_eq!(resp.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_whole_from_an_ldp_client() {
    let (gw, r) = fleet(text_answer).await;
    let sid = session(&gw).await;
    let mut case = case(
        "anthropic__upstream_whole",
        "LDP client → gateway → Anthropic-API delegate, whole: the task's text input as one \
         user message with the default max_tokens, the message as the TASK_RESULT (its text \
         the output; tokens from usage, cost with the cache reads at their own price)",
        &gw,
        &r,
    );
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let resp = case
        .post_json(
            "/ldp/messages",
            &[BEARER],
            &submit(&sid, "assist", json!("Say hello in French.")),
        )
        .await;
    assert_eq!(resp.json["body"]["type"], "TASK_RESULT", "{}", resp.json);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_streamed_from_an_ldp_client() {
    let (gw, r) = fleet(text_answer).await;
    let sid = session(&gw).await;
    let mut case = case(
        "anthropic__upstream_stream",
        "LDP client at /ldp/stream → gateway → Anthropic-API delegate, streamed: the message \
         request with stream, the text deltas relayed as TASK_UPDATEs, the TASK_RESULT made \
         of them",
        &gw,
        &r,
    );
    case.note("the session was opened before (HELLO, SESSION_PROPOSE: see ldp__session_and_task)");
    let resp = case
        .post_json(
            "/ldp/stream",
            &[BEARER],
            &submit(&sid, "assist", json!("Say hello in French.")),
        )
        .await;
    assert_eq!(resp.status, 200);
    case.snapshot();
    gw.shutdown().await;
}

#[tokio::test]
async fn ingress_errors() {
    let (gw, r) = fleet(text_answer).await;
    let mut case = case(
        "anthropic__ingress_errors",
        "Anthropic client refused, in Anthropic's error shape: no key (401), a model no \
         delegate serves (404), no max_tokens (400), a body that is not JSON (400)",
        &gw,
        &r,
    );
    let ask = json!({"model": "assist", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let version = [("anthropic-version", "2023-06-01")];
    assert_eq!(case.post_json(MESSAGES, &version, &ask).await.status, 401);
    let nope = json!({"model": "translate", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(case.post_json(MESSAGES, &V1, &nope).await.status, 404);
    let unbounded = json!({"model": "assist", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(case.post_json(MESSAGES, &V1, &unbounded).await.status, 400);
    let headers = [V1[0], V1[1], ("content-type", "application/json")];
    assert_eq!(
        case.post(MESSAGES, &headers, b"{\"model\":").await.status,
        400
    );
    case.snapshot();
    gw.shutdown().await;
}
