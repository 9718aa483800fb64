//! The Anthropic-compatible ingress (`POST /v1/messages`, `count_tokens`, `GET /v1/models` in
//! Anthropic's shape) in front of a fleet mixing an LDP delegate and an OpenAI-backed one:
//! the real `anthropic` Python SDK, both lines, as the client (messages, streams, the tool
//! loop, the model list, each error class, the ledger row behind each answer), and raw HTTP
//! for what the SDK hides (the events' names and order, an error event after a 200, the
//! shape each `/v1/` route answers in, both key headers).
//!
//! The SDKs run from their venvs (`LDP_PY_ANTHROPIC2`: 2.x, API `2026-10-21`, Bearer;
//! `LDP_PY_ANTHROPIC1`: 1.x, `2023-06-01`, `x-api-key`); without them the SDK test prints a
//! skip note and passes, unless `LDP_INTEROP_REQUIRED=1` (CI).

use crate::support::anthropic::events;
use crate::support::openai::{declared, entry, start};
use crate::support::process::{output_within, py_script, text};
use crate::support::{card, Resp, TestGateway};
use ldp_gateway::config::{RateConfig, TenantConfig};
use ldp_gateway::provenance::{Ingress, Outcome};
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use ldp_gateway::sim::{fingerprint, SimOptions};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The skill the OpenAI-backed delegate offers.
const CHAT: &str = "chat";
/// The skill the LDP delegate offers.
const SUMMARIZE: &str = "summarize";
/// The upstream model of the OpenAI-backed delegate (`mini`).
const MODEL: &str = "sim-mini";
/// `mini`'s declared prices, USD per million tokens in and out.
const PRICE_IN: f64 = 0.15;
const PRICE_OUT: f64 = 0.60;
/// One `anthropic_ingress.py` run: a cold start and about twenty calls.
const SDK_TIMEOUT: Duration = Duration::from_secs(180);
/// The policy the tenant `acme` may not use.
const PREMIUM: &str = "premium";

/// A tenant holding `key`.
fn tenant(name: &str, key: &str) -> TenantConfig {
    serde_json::from_value(json!({
        "name": name,
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": ["default"],
    }))
    .unwrap()
}

/// The LDP delegate `d0` (`ldp:delegate:sim-ldp`, summarize) and the OpenAI-backed `mini` in
/// front of `oa` (chat, priced per token); a policy `premium` beside the built-in ones.
fn fleet<'a>(oa: &OpenAiHandle) -> crate::support::gateway::Builder<'a> {
    let ldp = SimOptions::new(card("sim-ldp", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    let mut mini = declared(&[CHAT], 0.8);
    mini.price_per_mtok_input = Some(PRICE_IN);
    mini.price_per_mtok_output = Some(PRICE_OUT);
    TestGateway::builder()
        .sim(ldp)
        .entry(entry("mini", &oa.url(), MODEL, mini))
        .policy("balanced.toml", "name = \"balanced\"\n")
        .policy("premium.toml", "name = \"premium\"\n")
}

/// The SDK lines whose venvs are here: (label, interpreter).
fn sdks() -> Vec<(&'static str, PathBuf)> {
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    let mut found = Vec::new();
    for (label, var) in [("2.x", "LDP_PY_ANTHROPIC2"), ("1.x", "LDP_PY_ANTHROPIC1")] {
        match std::env::var_os(var).filter(|v| !v.is_empty()) {
            Some(p) => found.push((label, PathBuf::from(p))),
            None => {
                assert!(
                    !required,
                    "{var} is not set but LDP_INTEROP_REQUIRED=1: `eval \"$(bash .ci/run venvs)\"`"
                );
                eprintln!("skipping the anthropic SDK {label}: {var} is not set");
            }
        }
    }
    found
}

fn cost(usage: &Value) -> f64 {
    let (i, o) = (
        usage["input_tokens"].as_u64().unwrap(),
        usage["output_tokens"].as_u64().unwrap(),
    );
    (i as f64 * PRICE_IN + o as f64 * PRICE_OUT) / 1e6
}

/// The text of a message's text blocks.
fn text_of(message: &Value) -> String {
    message["content"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_sdks_drive_a_mixed_fleet_through_the_ingress() {
    let sdks = sdks();
    if sdks.is_empty() {
        return;
    }
    for (label, py) in sdks {
        let oa = start(OpenAiOptions::new(MODEL)).await;
        let (key, limited_key, full_key) = ("sk-acme-anthropic", "sk-limited", "sk-full");
        let mut acme = tenant("acme", key);
        acme.policies = vec!["balanced".into()];
        let mut limited = tenant("limited", limited_key);
        limited.limits = Some(RateConfig {
            rps: 0.01,
            burst: Some(1),
        });
        // A tenant whose one session is taken: the gateway has no room for its message.
        let mut full = tenant("full", full_key);
        full.max_sessions = Some(1);
        let gw = fleet(&oa)
            .tenant(acme)
            .tenant(limited)
            .tenant(full)
            .spawn()
            .await;
        gw.client()
            .with_key(Some(full_key))
            .accepted(json!({}))
            .await;

        let mut cmd = py_script(&py, "anthropic_ingress.py");
        cmd.args(["--base-url", &gw.ldp_url()])
            .args(["--api-key", key, "--limited-key", limited_key])
            .args(["--full-key", full_key])
            .args(["--chat-model", CHAT, "--ldp-model", SUMMARIZE])
            .args(["--forbidden-model", &format!("{CHAT}@{PREMIUM}")]);
        let out = output_within(cmd, SDK_TIMEOUT).await;
        let stdout = text(&out.stdout);
        let o: Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{label}: no JSON line: {stdout}\n{}", text(&out.stderr)));
        assert!(
            out.status.success(),
            "{label}: {o:#}\nstderr: {}",
            text(&out.stderr)
        );
        eprintln!("anthropic SDK {}", o["version"]);

        // Each line as it ships: its API version and where it puts the key.
        let v = &o["version"];
        let (version, auth) = match label {
            "2.x" => ("2026-10-21", "authorization"),
            _ => ("2023-06-01", "x-api-key"),
        };
        assert_eq!(
            (v["version"].as_str(), v["auth"].as_str()),
            (Some(version), Some(auth)),
            "{v}"
        );
        assert_eq!(
            o["models"],
            json!([CHAT, SUMMARIZE]),
            "{label}: healthy skills"
        );

        // To the OpenAI-backed delegate: its answer in Anthropic's shape; the row behind it.
        let m = &o["create"]["message"];
        assert_eq!(
            (m["type"].as_str(), m["role"].as_str()),
            (Some("message"), Some("assistant")),
            "{m}"
        );
        assert_eq!(m["model"], MODEL);
        assert_eq!(
            m["content"].as_array().map(Vec::len),
            Some(1),
            "{label}: {m}"
        );
        assert_eq!(
            text_of(m),
            "echo: hello through the gateway",
            "{label}: {m}"
        );
        assert_eq!(m["stop_reason"], "end_turn");
        // ceil(("You are terse." + "hello through the gateway") = 39 bytes / 4); ceil(31 / 4).
        assert_eq!(
            (
                m["usage"]["input_tokens"].as_u64(),
                m["usage"]["output_tokens"].as_u64()
            ),
            (Some(10), Some(8)),
            "{m}"
        );
        let h = &o["create"]["headers"];
        assert_eq!(h["x-ldp-delegate"], "mini", "{h}");
        let r = gw.ledger_row(h["x-ldp-task-id"].as_str().unwrap()).await;
        assert_eq!(r.ingress, Ingress::Anthropic, "{r:?}");
        assert_eq!((r.tenant.as_str(), r.skill.as_str()), ("acme", CHAT));
        assert_eq!(r.outcome, Outcome::Result, "{r:?}");
        assert_eq!(r.tokens, Some(18));
        assert_eq!(
            r.cost_usd,
            Some(cost(&m["usage"])),
            "usage × declared prices"
        );
        // The system prompt reached the OpenAI delegate as its system message.
        let sent = oa.requests();
        let first = &sent[0]["messages"];
        assert_eq!(
            first[0],
            json!({"role": "system", "content": "You are terse."}),
            "{first}"
        );

        // To the LDP delegate: its output (a JSON object) is the text.
        let output: Value = serde_json::from_str(&text_of(&o["ldp"])).unwrap();
        assert_eq!(output["skill"], SUMMARIZE);
        assert_eq!(
            output["input_fingerprint"],
            fingerprint(&json!("hello through the gateway")),
            "a lone message's text is the task input"
        );

        // Streams: named events from message_start to message_stop, the text, the usage.
        let s = &o["stream"];
        let types: Vec<&str> = s["types"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(types.first(), Some(&"message_start"), "{types:?}");
        assert_eq!(types.last(), Some(&"message_stop"), "{types:?}");
        assert!(
            types.contains(&"text") && types.contains(&"message_delta"),
            "{types:?}"
        );
        let f = &s["final"];
        assert_eq!(text_of(f), "echo: hello through the gateway", "{f}");
        assert_eq!(f["stop_reason"], "end_turn");
        assert_eq!(
            (
                f["usage"]["input_tokens"].as_u64(),
                f["usage"]["output_tokens"].as_u64()
            ),
            (Some(10), Some(8)),
            "{f}"
        );
        let r = gw
            .ledger_row(s["headers"]["x-ldp-task-id"].as_str().unwrap())
            .await;
        assert_eq!((r.ingress, r.tokens), (Ingress::Anthropic, Some(18)));
        let f = &o["ldp_stream"]["final"];
        let output: Value = serde_json::from_str(&text_of(f)).unwrap();
        assert_eq!(output["skill"], SUMMARIZE, "{f}");

        // The tool loop across dialects: Anthropic's tools to an OpenAI delegate and back.
        let first = &o["tools"]["first"];
        assert_eq!(first["stop_reason"], "tool_use", "{first}");
        let call = first["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap();
        assert_eq!(call["name"], "get_weather");
        assert_eq!(
            call["input"],
            json!({"text": "What is the weather in Paris?"})
        );
        let done = &o["tools"]["done"];
        assert_eq!(
            text_of(done),
            "echo: sunny, 21 C",
            "the result reached the model: {done}"
        );
        assert_eq!(done["stop_reason"], "end_turn");
        let f = &o["tools_stream"]["final"];
        let call = f["content"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["type"] == "tool_use")
            .unwrap();
        assert_eq!(
            call["input"],
            json!({"text": "What is the weather in Paris?"}),
            "{f}"
        );
        assert_eq!(f["stop_reason"], "tool_use");
        let requests = oa.requests();
        let offered = &requests
            .iter()
            .rev()
            .find(|r| r["tools"].is_array())
            .unwrap()["tools"][0];
        assert_eq!(offered["function"]["name"], "get_weather", "{offered}");
        assert_eq!(
            offered["function"]["parameters"]["required"],
            json!(["city"])
        );

        // No Anthropic delegate offers the skill: estimated, ceil(25 / 4).
        assert_eq!(o["count"], 7);

        // Each error class the SDK knows, in Anthropic's shape.
        for (step, class, status, kind) in [
            ("unknown", "NotFoundError", 404, "not_found_error"),
            (
                "wrong_key",
                "AuthenticationError",
                401,
                "authentication_error",
            ),
            ("bad", "BadRequestError", 400, "invalid_request_error"),
            (
                "forbidden",
                "PermissionDeniedError",
                403,
                "permission_error",
            ),
            ("rate_limit", "RateLimitError", 429, "rate_limit_error"),
            ("overloaded", "OverloadedError", 529, "overloaded_error"),
        ] {
            let e = &o[step];
            assert_eq!(
                (e["class"].as_str(), e["status"].as_u64()),
                (Some(class), Some(status)),
                "{label} {step}: {e}"
            );
            assert_eq!(
                (
                    e["body"]["type"].as_str(),
                    e["body"]["error"]["type"].as_str()
                ),
                (Some("error"), Some(kind)),
                "{step}: {e}"
            );
        }
        assert!(
            o["rate_limit"]["retry_after"].as_str().is_some(),
            "{}",
            o["rate_limit"]
        );
        gw.shutdown().await;
        oa.shutdown().await;
    }
}

/// A Messages request to `model` saying `text`, `stream` as asked.
fn message(model: &str, text: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": text}]})
}

async fn post(gw: &TestGateway, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let c = gw.client();
    let mut h = vec![
        ("anthropic-version", "2023-06-01"),
        ("content-type", "application/json"),
    ];
    h.extend_from_slice(headers);
    c.post_with(path, serde_json::to_vec(body).unwrap(), &h)
        .await
}

#[tokio::test]
async fn events_come_named_in_order_and_a_break_after_the_first_is_an_error_event() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa).spawn().await;

    let r = post(
        &gw,
        "/v1/messages",
        &message(CHAT, "hello stream", true),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..3],
        ["message_start", "content_block_start", "ping"],
        "{names:?}"
    );
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    for (name, data) in &ev {
        assert_eq!(
            data["type"],
            name.as_str(),
            "every event says its name: {data}"
        );
    }
    let text: String = ev
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "echo: hello stream");
    let end = &ev[ev.len() - 2].1;
    assert_eq!(end["delta"]["stop_reason"], "end_turn", "{end}");
    assert!(end["usage"]["output_tokens"].as_u64().unwrap() > 0, "{end}");
    assert!(r.headers.get("x-ldp-task-id").is_some());

    // The delegate's stream breaks after its first piece went out: 200, then an error event,
    // and no message_stop.
    oa.set_break_stream_after(Some(1));
    let r = post(
        &gw,
        "/v1/messages",
        &message(CHAT, "a longer answer that breaks", true),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    let (last, data) = ev.last().unwrap();
    assert_eq!(last, "error", "{ev:?}");
    assert_eq!(data["type"], "error");
    assert_eq!(data["error"]["type"], "api_error", "{data}");
    assert!(!ev.iter().any(|(n, _)| n == "message_stop"), "{ev:?}");
    assert!(ev.iter().any(|(n, _)| n == "content_block_delta"), "{ev:?}");
    gw.shutdown().await;
    oa.shutdown().await;
}

#[tokio::test]
async fn each_v1_route_answers_in_the_shape_its_request_speaks() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let key = "sk-acme-shape";
    let gw = fleet(&oa).tenant(tenant("acme", key)).spawn().await;
    let c = gw.client();

    // The model list: Anthropic's to a request naming an API version, OpenAI's otherwise.
    let bearer = format!("Bearer {key}");
    let r = c
        .with_key(None)
        .get_with(
            "/v1/models",
            &[("anthropic-version", "2023-06-01"), ("x-api-key", key)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json["data"][0]["type"], "model", "{}", r.json);
    assert_eq!(
        (r.json["first_id"].as_str(), r.json["has_more"].as_bool()),
        (Some(CHAT), Some(false))
    );
    let r = c
        .with_key(None)
        .get_with("/v1/models", &[("authorization", &bearer)])
        .await;
    assert_eq!(
        (
            r.json["object"].as_str(),
            r.json["data"][0]["object"].as_str()
        ),
        (Some("list"), Some("model")),
        "{}",
        r.json
    );

    // The key in x-api-key or as a bearer token; neither, or a wrong one: Anthropic's 401.
    for h in [("x-api-key", key), ("authorization", bearer.as_str())] {
        let r = post(&gw, "/v1/messages", &message(CHAT, "hi", false), &[h]).await;
        assert_eq!(r.status, 200, "{h:?}: {}", r.text());
    }
    let r = post(
        &gw,
        "/v1/messages",
        &message(CHAT, "hi", false),
        &[("x-api-key", "sk-wrong")],
    )
    .await;
    assert_eq!(
        (r.status, r.json["error"]["type"].as_str()),
        (401, Some("authentication_error")),
        "{}",
        r.text()
    );

    // What is wrong with a request is named, in Anthropic's shape.
    let no_bound = json!({"model": CHAT, "messages": [{"role": "user", "content": "hi"}]});
    let r = post(&gw, "/v1/messages", &no_bound, &[("x-api-key", key)]).await;
    assert_eq!(
        (r.status, r.json["error"]["type"].as_str()),
        (400, Some("invalid_request_error")),
        "{}",
        r.text()
    );
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens"),
        "{}",
        r.json
    );
    let mut bad_role = message(CHAT, "hi", false);
    bad_role["messages"][0]["role"] = json!("system");
    let r = post(&gw, "/v1/messages", &bad_role, &[("x-api-key", key)]).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages.0.role"),
        "{}",
        r.json
    );
    let r = post(
        &gw,
        "/v1/messages",
        &message("chat@nowhere", "hi", false),
        &[("x-api-key", key)],
    )
    .await;
    assert_eq!(
        (r.status, r.json["error"]["type"].as_str()),
        (404, Some("not_found_error")),
        "{}",
        r.text()
    );
    // An unknown /v1/ path: a 404 in the form of the API the request speaks.
    let r = post(&gw, "/v1/nothing", &json!({}), &[("x-api-key", key)]).await;
    assert_eq!(
        (r.status, r.json["type"].as_str()),
        (404, Some("error")),
        "{}",
        r.text()
    );
    let r = c
        .with_key(Some(key))
        .post_json("/v1/nothing", &json!({}))
        .await;
    assert_eq!(
        (r.status, r.json["error"]["type"].as_str()),
        (404, Some("invalid_request_error")),
        "{}",
        r.text()
    );
    gw.shutdown().await;
    oa.shutdown().await;
}
