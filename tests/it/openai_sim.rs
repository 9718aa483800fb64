//! The simulated OpenAI-compatible server (`ldp_gateway::sim::openai`): its answers, streams,
//! refusals and knobs over real loopback sockets, the `delegate --openai` binary, and the real
//! `openai` Python SDK as its client.
//!
//! The SDK runs from the wheel venv (`LDP_PY_WHEEL`, which `.ci/run` builds with a pinned
//! `openai`); without it, or in an older venv without `openai`, the SDK test prints a skip note
//! and passes, unless `LDP_INTEROP_REQUIRED=1` (CI), where it fails.

use crate::support::openai::{chunks, openai_python, streamed_text};
use crate::support::process::{bin, output_within, py_script, text, Running};
use crate::support::{Client, Resp};
use ldp_gateway::secret::Secret;
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions, OpenAiStats};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const MODEL: &str = "sim-gpt";
const KEY: &str = "sk-sim-test";
/// One `openai_client.py` run: a cold start on a loaded machine and three calls.
const SDK_TIMEOUT: Duration = Duration::from_secs(120);

async fn start(opts: OpenAiOptions) -> OpenAiHandle {
    crate::support::openai::start(opts).await
}

/// A client of `h`'s `/v1` base, with `key` as its Bearer key.
fn client(h: &OpenAiHandle, key: Option<&str>) -> Client {
    Client::new(&h.url()).with_key(key)
}

fn chat(content: &str) -> Value {
    json!({"model": MODEL, "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": content},
    ]})
}

/// Asserts OpenAI's error shape with this status, type and code.
fn assert_error(resp: &Resp, status: u16, kind: &str, code: Value) {
    assert_eq!(resp.status, status, "{}", resp.text());
    let e = &resp.json["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
    assert_eq!(e["type"], kind, "{e}");
    assert_eq!(e["code"], code, "{e}");
    assert!(e.get("param").is_some(), "`param` is always present: {e}");
}

#[tokio::test]
async fn completion_is_well_formed_and_deterministic() {
    let mut opts = OpenAiOptions::new(MODEL);
    opts.models.push("other".into());
    let sim = start(opts).await;
    let c = client(&sim, None);

    let models = c.get("/models").await;
    assert_eq!(models.status, 200);
    assert_eq!(models.json["object"], "list");
    let ids: Vec<&str> = models.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model");
            assert!(m["created"].is_u64() && m["owned_by"].is_string(), "{m}");
            m["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, [MODEL, "other"]);

    let body = chat("hello world");
    let r = c.post_json("/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = &r.json;
    assert!(j["id"].as_str().unwrap().starts_with("chatcmpl-"), "{j}");
    assert_eq!(j["object"], "chat.completion");
    assert!(j["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(j["model"], MODEL);
    assert_eq!(j["choices"][0]["index"], 0);
    assert_eq!(j["choices"][0]["message"]["role"], "assistant");
    assert_eq!(j["choices"][0]["message"]["content"], "echo: hello world");
    assert_eq!(j["choices"][0]["finish_reason"], "stop");
    // ceil(("be brief" + "hello world") bytes / 4) = ceil(19 / 4); ceil(17 / 4).
    assert_eq!(
        j["usage"],
        json!({"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10})
    );

    // Content parts count as text; max_tokens cuts the answer at 4 bytes a token.
    let parts = json!({"model": "other", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "text", "text": "def"}]}]});
    let r = c.post_json("/chat/completions", &parts).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json["model"], "other");
    assert_eq!(r.json["choices"][0]["message"]["content"], "echo: ab");
    assert_eq!(r.json["choices"][0]["finish_reason"], "length");
    assert_eq!(r.json["usage"]["completion_tokens"], 2);

    assert_eq!(
        sim.requests(),
        [body, parts],
        "bodies kept as sent, in order"
    );
    assert_eq!(
        sim.stats(),
        OpenAiStats {
            requests: 2,
            completions: 2,
            model_lists: 1,
            ..OpenAiStats::default()
        }
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn stream_sends_role_deltas_finish_usage_and_done() {
    let sim = start(OpenAiOptions::new(MODEL)).await;
    let c = client(&sim, None);

    let mut body = chat("stream me please");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = c.post_json("/chat/completions", &body).await;
    assert_eq!(r.status, 200);
    assert!(r.content_type().starts_with("text/event-stream"), "{r:?}");
    let (chunks, done) = chunks(&r);
    assert!(done, "ends with [DONE]");
    let ids: std::collections::HashSet<&str> =
        chunks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "one id for the whole stream");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == MODEL));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(streamed_text(&chunks), "echo: stream me please");
    let n = chunks.len();
    // role, 4 content deltas, finish, usage
    assert_eq!(n, 7, "{chunks:?}");
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "stop");
    assert!(chunks[..n - 2]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null() && c["usage"].is_null()));
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    assert_eq!(
        chunks[n - 1]["usage"],
        json!({"prompt_tokens": 6, "completion_tokens": 6, "total_tokens": 12})
    );

    // Without include_usage: no usage anywhere, the finish chunk last before [DONE].
    body.as_object_mut().unwrap().remove("stream_options");
    let (chunks, done) =
        crate::support::openai::chunks(&c.post_json("/chat/completions", &body).await);
    assert!(done);
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "{chunks:?}"
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(streamed_text(&chunks), "echo: stream me please");
    assert_eq!(sim.stats().streams, 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn refusals_use_openai_error_shapes_and_statuses() {
    let mut opts = OpenAiOptions::new(MODEL);
    opts.api_key = Some(Secret::new(KEY));
    opts.context_window = Some(10);
    let sim = start(opts).await;
    let c = client(&sim, Some(KEY));
    let code = |s: &str| json!(s);

    for key in [None, Some("sk-wrong")] {
        let r = client(&sim, key)
            .post_json("/chat/completions", &chat("hi"))
            .await;
        assert_error(&r, 401, "invalid_request_error", code("invalid_api_key"));
        let r = client(&sim, key).get("/models").await;
        assert_error(&r, 401, "invalid_request_error", code("invalid_api_key"));
    }
    assert_eq!(c.get("/models").await.status, 200, "the right key passes");

    let r = c
        .post_with("/chat/completions", b"{not json".to_vec(), &[])
        .await;
    assert_error(&r, 400, "invalid_request_error", Value::Null);
    let r = c
        .post_json(
            "/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    assert_error(&r, 400, "invalid_request_error", Value::Null);
    let r = c
        .post_json("/chat/completions", &json!({"model": MODEL}))
        .await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        code("missing_required_parameter"),
    );
    assert_eq!(r.json["error"]["param"], "messages");
    let r = c
        .post_json(
            "/chat/completions",
            &json!({"model": MODEL, "messages": []}),
        )
        .await;
    assert_error(&r, 400, "invalid_request_error", code("empty_array"));
    let r = c
        .post_json(
            "/chat/completions",
            &json!({"model": MODEL, "messages": [{"content": "x"}]}),
        )
        .await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        code("missing_required_parameter"),
    );

    let mut unknown = chat("hi");
    unknown["model"] = json!("gpt-nope");
    let r = c.post_json("/chat/completions", &unknown).await;
    assert_error(&r, 404, "invalid_request_error", code("model_not_found"));
    assert!(r.text().contains("gpt-nope"), "{}", r.text());

    // 8 + 35 bytes of prompt: 11 tokens > 10.
    let long = chat("this prompt is over ten tokens long");
    let r = c.post_json("/chat/completions", &long).await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        code("context_length_exceeded"),
    );
    sim.set_context_window(Some(11));
    assert_eq!(c.post_json("/chat/completions", &long).await.status, 200);

    let s = sim.stats();
    assert_eq!(
        (
            s.unauthorized,
            s.bad_requests,
            s.unknown_models,
            s.completions
        ),
        (4, 6, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.requests, 10, "every POST counts, refused or not");
    sim.shutdown().await;
}

#[tokio::test]
async fn knobs_give_429_with_retry_after_500_and_latency() {
    let sim = start(OpenAiOptions::new(MODEL)).await;
    let c = client(&sim, None);

    sim.set_rate_limit(1.0, 7);
    let r = c.post_json("/chat/completions", &chat("hi")).await;
    assert_error(&r, 429, "requests", json!("rate_limit_exceeded"));
    assert_eq!(r.retry_after(), Some(7));

    sim.set_rate_limit(0.0, 1);
    sim.set_fail_rate(1.0);
    let r = c.post_json("/chat/completions", &chat("hi")).await;
    assert_error(&r, 500, "server_error", Value::Null);

    sim.set_fail_rate(0.0);
    sim.set_latency(Duration::from_millis(300));
    let t0 = Instant::now();
    let r = c.post_json("/chat/completions", &chat("hi")).await;
    assert_eq!(r.status, 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );

    let s = sim.stats();
    assert_eq!((s.rate_limited, s.server_errors, s.completions), (1, 1, 1));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_broken_stream_ends_without_finish_usage_or_done() {
    let mut opts = OpenAiOptions::new(MODEL);
    opts.break_stream_after = Some(2);
    let sim = start(opts).await;
    let mut body = chat("a long enough answer");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});

    let r = client(&sim, None)
        .post_json("/chat/completions", &body)
        .await;
    assert_eq!(r.status, 200);
    let (chunks, done) = chunks(&r);
    assert!(!done, "no [DONE]");
    assert_eq!(chunks.len(), 3, "the role chunk and two deltas: {chunks:?}");
    assert!(chunks
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null() && c["usage"].is_null()));
    assert!("echo: a long enough answer".starts_with(&streamed_text(&chunks)));
    assert_eq!(sim.stats().broken_streams, 1);

    sim.set_break_stream_after(None);
    let (_, done) = crate::support::openai::chunks(
        &client(&sim, None)
            .post_json("/chat/completions", &body)
            .await,
    );
    assert!(done, "whole again");
    sim.shutdown().await;
}

#[tokio::test]
async fn delegate_openai_binary_serves_v1_with_its_key() {
    let mut cmd = bin();
    cmd.args([
        "delegate",
        "--openai",
        "--model",
        "m-one",
        "--api-key-env",
        "SIM_OPENAI_KEY",
    ])
    .env("SIM_OPENAI_KEY", KEY);
    let mut child = Running::spawn(cmd);
    let line = child
        .line(Duration::from_secs(30), |l| l.starts_with("listening on "))
        .await;
    let url = line.trim_start_matches("listening on ").trim();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"),
        "{line}"
    );
    let c = Client::new(url);
    assert_eq!(c.get("/models").await.status, 401);
    let models = c.with_key(Some(KEY)).get("/models").await;
    assert_eq!(models.json["data"][0]["id"], "m-one", "{}", models.text());
    child.kill().await;
}

/// Runs `openai_client.py` against `url`: its exit success and its JSON line.
async fn run_sdk(py: &std::path::Path, url: &str, key: &str, model: &str) -> (bool, Value) {
    let mut cmd = py_script(py, "openai_client.py");
    cmd.args(["--base-url", url, "--api-key", key, "--model", model]);
    let out = output_within(cmd, SDK_TIMEOUT).await;
    let stdout = text(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let json = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout}\nstderr {}", text(&out.stderr)));
    (out.status.success(), json)
}

#[tokio::test]
async fn the_openai_sdk_reads_the_sim() {
    let Some(py) = openai_python().await else {
        return;
    };
    let mut opts = OpenAiOptions::new(MODEL);
    opts.api_key = Some(Secret::new(KEY));
    let sim = start(opts).await;
    let url = sim.url();

    let (ok, out) = run_sdk(&py, &url, KEY, MODEL).await;
    assert!(ok, "{out}");
    assert_eq!(out["models"], json!([MODEL]));
    let done = &out["completion"];
    assert_eq!(
        done["choices"][0]["message"]["content"],
        "echo: hello from the openai sdk"
    );
    assert_eq!(done["choices"][0]["finish_reason"], "stop");
    // ceil(("You are terse." + "hello from the openai sdk") = 39 bytes / 4); ceil(31 / 4).
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18});
    assert_eq!(
        done["usage"]["total_tokens"], usage["total_tokens"],
        "{done}"
    );
    let stream = &out["stream"];
    assert_eq!(stream["content"], "echo: hello from the openai sdk");
    assert_eq!(stream["roles"], json!(["assistant"]));
    assert_eq!(stream["finish_reasons"], json!(["stop"]));
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(stream["usage"][k], usage[k], "{stream}");
    }
    assert_eq!(stream["ids"].as_array().unwrap().len(), 1);
    let sent = sim.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1]["stream"], true);
    assert_eq!(sent[1]["stream_options"], json!({"include_usage": true}));

    let (ok, out) = run_sdk(&py, &url, "sk-wrong", MODEL).await;
    assert!(!ok);
    assert_eq!(out["error"]["class"], "AuthenticationError", "{out}");
    assert_eq!(out["error"]["status"], 401);

    let (ok, out) = run_sdk(&py, &url, KEY, "gpt-nope").await;
    assert!(!ok);
    assert_eq!(out["error"]["class"], "NotFoundError", "{out}");
    assert_eq!(out["error"]["body"]["code"], "model_not_found");

    sim.set_rate_limit(1.0, 3);
    let (ok, out) = run_sdk(&py, &url, KEY, MODEL).await;
    assert!(!ok);
    assert_eq!(out["error"]["class"], "RateLimitError", "{out}");
    assert_eq!(out["error"]["retry_after"], "3");
    assert_eq!(out["error"]["body"]["code"], "rate_limit_exceeded");
    sim.shutdown().await;
}
