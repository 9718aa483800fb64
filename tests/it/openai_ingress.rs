//! The OpenAI-compatible ingress (`POST /v1/chat/completions`, `GET /v1/models`) in front of a
//! fleet mixing an LDP delegate and an OpenAI-backed one: the real `openai` Python SDK as the
//! client (answers, streams, usage, refusals, its retry of a 429, the ledger row behind each
//! answer), and raw HTTP for what the SDK hides (the LDP delegate's input, every error's shape
//! and status).
//!
//! The SDK runs from the wheel venv (`LDP_PY_WHEEL`, see `openai_sim`); without it the SDK test
//! prints a skip note and passes, unless `LDP_INTEROP_REQUIRED=1` (CI).

use crate::support::openai::{chunks, declared, entry, openai_python, start, streamed_text};
use crate::support::process::{output_within, py_script, text};
use crate::support::{card, ledger, Client, Resp, TestGateway};
use ldp_gateway::config::TenantConfig;
use ldp_gateway::provenance::{Ingress, Outcome};
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use ldp_gateway::sim::{fingerprint, SimOptions};
use serde_json::{json, Value};
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
/// One `openai_ingress.py` run: a cold start and nine calls (one of them retried).
const SDK_TIMEOUT: Duration = Duration::from_secs(180);

/// A tenant holding `key`, claiming `domain`.
fn tenant(name: &str, key: &str, domain: &str) -> TenantConfig {
    serde_json::from_value(json!({
        "name": name,
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": [domain],
    }))
    .unwrap()
}

/// The LDP delegate `d0` (`ldp:delegate:sim-ldp`, summarize) and, after it, the OpenAI-backed
/// `mini` in front of `oa` (chat, priced per token).
fn fleet<'a>(oa: &OpenAiHandle) -> crate::support::gateway::Builder<'a> {
    let mut ldp = SimOptions::new(card("sim-ldp", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    ldp.latency = Duration::from_millis(5);
    let mut mini = declared(&[CHAT], 0.8);
    mini.price_per_mtok_input = Some(PRICE_IN);
    mini.price_per_mtok_output = Some(PRICE_OUT);
    TestGateway::builder()
        .sim(ldp)
        .entry(entry("mini", &oa.url(), MODEL, mini))
}

/// What `prompt` input and `completion` output tokens cost at `mini`'s prices.
fn mini_cost(usage: &Value) -> f64 {
    let (p, c) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    (p as f64 * PRICE_IN + c as f64 * PRICE_OUT) / 1e6
}

fn header<'r>(r: &'r Resp, name: &str) -> &'r str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header: {:?}", r.headers))
}

/// A completion request for `model` with `messages`.
fn ask(model: &str, messages: Value) -> Value {
    json!({"model": model, "messages": messages})
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_drives_a_mixed_fleet_through_the_ingress() {
    let Some(py) = openai_python().await else {
        return;
    };
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let (key, limited_key) = ("sk-acme-ingress", "sk-limited-ingress");
    let mut limited = tenant("limited", limited_key, "default");
    // One request, then the next token in 100 s: the SDK's one retry (its wait shortened by
    // the script) comes back limited too.
    limited.limits = Some(ldp_gateway::config::RateConfig {
        rps: 0.01,
        burst: Some(1),
    });
    let gw = fleet(&oa)
        .tenant(tenant("acme", key, "default"))
        .tenant(limited)
        .spawn()
        .await;

    let mut cmd = py_script(&py, "openai_ingress.py");
    cmd.args(["--base-url", &format!("{}/v1", gw.ldp_url())])
        .args(["--api-key", key, "--limited-key", limited_key])
        .args(["--chat-model", CHAT, "--ldp-model", SUMMARIZE]);
    let out = output_within(cmd, SDK_TIMEOUT).await;
    let stdout = text(&out.stdout);
    let o: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line: {stdout}\n{}", text(&out.stderr)));
    assert!(out.status.success(), "{o:#}\nstderr: {}", text(&out.stderr));
    eprintln!("openai SDK {}", o["sdk_version"]);

    assert_eq!(o["models"], json!([CHAT, SUMMARIZE]), "healthy skills");

    // To the OpenAI-backed delegate: its answer, usage and model; headers name the row.
    let chat = &o["chat"]["completion"];
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(chat["model"], MODEL);
    let msg = &chat["choices"][0]["message"];
    assert_eq!(
        (&msg["role"], &msg["content"]),
        (
            &json!("assistant"),
            &json!("echo: hello through the gateway")
        )
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "stop");
    // ceil(("You are terse." + "hello through the gateway") = 39 bytes / 4); ceil(31 / 4).
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18});
    assert_eq!(
        chat["usage"]["total_tokens"], usage["total_tokens"],
        "{chat}"
    );
    assert_eq!(chat["usage"]["prompt_tokens"], usage["prompt_tokens"]);
    let h = &o["chat"]["headers"];
    assert_eq!(h["x-ldp-delegate"], "mini", "{h}");
    assert_eq!(h["x-ldp-policy"], "balanced", "{h}");
    let r = gw.ledger_row(h["x-ldp-task-id"].as_str().unwrap()).await;
    assert_eq!(
        (r.tenant.as_str(), r.skill.as_str(), r.delegate.as_deref()),
        ("acme", CHAT, Some("mini"))
    );
    assert_eq!(r.delegate_id.as_deref(), Some("ldp:delegate:mini"));
    assert_eq!(r.model_version.as_deref(), Some(MODEL));
    assert_eq!(r.policy.as_deref(), Some("balanced"));
    assert_eq!(r.outcome, Outcome::Result, "{r:?}");
    assert_eq!(r.tokens, Some(18));
    assert_eq!(
        r.cost_usd,
        Some(mini_cost(&usage)),
        "usage × declared prices"
    );

    // To the LDP delegate: its output (a JSON object) is the assistant's text.
    let ldp = &o["ldp"]["completion"];
    let content = ldp["choices"][0]["message"]["content"].as_str().unwrap();
    let output: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {ldp}"));
    assert_eq!(output["skill"], SUMMARIZE);
    assert_eq!(output["delegate_id"], "ldp:delegate:sim-ldp");
    assert_eq!(
        output["input_fingerprint"],
        fingerprint(&json!("summarize this for me")),
        "a lone message's text is the task input"
    );
    assert_eq!(ldp["model"], output["model_version"]);
    let h = &o["ldp"]["headers"];
    assert_eq!(h["x-ldp-delegate"], "d0", "{h}");
    let r = gw.ledger_row(h["x-ldp-task-id"].as_str().unwrap()).await;
    assert_eq!(
        (r.delegate.as_deref(), r.skill.as_str()),
        (Some("d0"), SUMMARIZE)
    );
    assert_eq!(r.outcome, Outcome::Result, "{r:?}");

    // A stream with include_usage: deltas, one finish, the usage last, one id.
    let s = &o["stream"];
    assert_eq!(s["content"], "echo: hello through the gateway", "{s}");
    assert_eq!(s["roles"], json!(["assistant"]));
    assert_eq!(s["finish_reasons"], json!(["stop"]));
    assert_eq!(s["usages"], 1, "one chunk carries the usage: {s}");
    assert_eq!(s["last"]["choices"], json!([]), "{s}");
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(s["last"]["usage"][k], usage[k], "{s}");
    }
    assert_eq!(s["ids"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["objects"], json!(["chat.completion.chunk"]));
    assert_eq!(s["headers"]["x-ldp-delegate"], "mini");
    let r = gw
        .ledger_row(s["headers"]["x-ldp-task-id"].as_str().unwrap())
        .await;
    assert_eq!(r.tokens, Some(18));
    assert_eq!(r.cost_usd, Some(mini_cost(&usage)));

    // A stream from the LDP delegate: its whole output in one go, no usage unasked.
    let s = &o["ldp_stream"];
    let output: Value = serde_json::from_str(s["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        output["input_fingerprint"],
        fingerprint(&json!(
            "system: You are terse.\nuser: hello through the gateway"
        )),
        "several messages reach an LDP delegate as a transcript"
    );
    assert_eq!(s["finish_reasons"], json!(["stop"]));
    assert_eq!(s["usages"], 0, "{s}");
    assert_eq!(s["headers"]["x-ldp-delegate"], "d0");

    // Refusals the SDK raises as their classes.
    let e = &o["unknown"];
    assert_eq!(
        (&e["class"], &e["status"]),
        (&json!("NotFoundError"), &json!(404)),
        "{e}"
    );
    assert_eq!(e["body"]["code"], "model_not_found", "{e}");
    assert_eq!(e["body"]["param"], "model", "{e}");
    let e = &o["wrong_key"];
    assert_eq!(
        (&e["class"], &e["status"]),
        (&json!("AuthenticationError"), &json!(401)),
        "{e}"
    );
    assert_eq!(e["body"]["code"], "invalid_api_key", "{e}");

    // The limited tenant: one answer, then 429 twice (the SDK's try and its one retry).
    let rl = &o["rate_limit"];
    assert_eq!(rl["first"], "echo: hello through the gateway", "{rl}");
    let e = &rl["error"];
    assert_eq!(
        (&e["class"], &e["status"]),
        (&json!("RateLimitError"), &json!(429)),
        "{e}"
    );
    assert_eq!(e["body"]["code"], "rate_limit_exceeded", "{e}");
    let wait: f64 = e["retry_after"].as_str().unwrap().parse().unwrap();
    assert!((90.0..=100.0).contains(&wait), "Retry-After {wait}");
    assert_eq!(rl["sent"], 3, "one answer, one refusal, one retry: {rl}");
    let waits = rl["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{rl}");
    assert!(
        (90.0..=100.0).contains(&waits[0].as_f64().unwrap()),
        "the SDK chose the gateway's Retry-After: {rl}"
    );
    let refused = gw
        .metrics()
        .await
        .sum("ldp_gateway_errors_total{code=\"rate_limited\"}");
    assert_eq!(refused, 2.0, "the gateway refused the try and the retry");
    // Chat, stream and the limited tenant's first: the 429s never reached the delegate.
    assert_eq!(oa.stats().requests, 3, "{:?}", oa.stats());

    gw.shutdown().await;
    oa.shutdown().await;
}

#[tokio::test]
async fn the_ingress_reaches_an_ldp_delegate() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa).spawn().await;
    let c = gw.client();

    let models = c.get("/v1/models").await;
    assert_eq!(models.status, 200, "{}", models.text());
    assert_eq!(models.json["object"], "list");
    let ids: Vec<&str> = models.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["object"], "model", "{m}");
            m["id"].as_str().unwrap()
        })
        .collect();
    assert_eq!(ids, [CHAT, SUMMARIZE]);

    // One message: its text is the task's input; the LDP output is the assistant's text.
    let r = c
        .post_json(
            "/v1/chat/completions",
            &ask(SUMMARIZE, user("hello ldp world")),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let j = &r.json;
    assert!(j["id"].as_str().unwrap().starts_with("chatcmpl-"), "{j}");
    assert_eq!(j["object"], "chat.completion");
    assert_eq!(j["choices"][0]["index"], 0);
    assert_eq!(j["choices"][0]["message"]["role"], "assistant");
    assert_eq!(j["choices"][0]["finish_reason"], "stop");
    let content = j["choices"][0]["message"]["content"].as_str().unwrap();
    let output: Value = serde_json::from_str(content).unwrap();
    assert_eq!(output["delegate_id"], "ldp:delegate:sim-ldp");
    assert_eq!(output["skill"], SUMMARIZE);
    assert_eq!(
        output["input_fingerprint"],
        fingerprint(&json!("hello ldp world"))
    );
    assert_eq!(
        j["model"], output["model_version"],
        "the model that answered"
    );
    // Usage estimated from the text at 4 bytes a token (an LDP delegate reports no split).
    let u = &j["usage"];
    assert_eq!(
        u["completion_tokens"],
        (content.len() as u64).div_ceil(4),
        "{u}"
    );
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
    assert_eq!(header(&r, "x-ldp-delegate"), "d0");
    assert_eq!(header(&r, "x-ldp-policy"), "balanced");
    let first = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    assert_eq!(first.delegate_id.as_deref(), Some("ldp:delegate:sim-ldp"));
    assert_eq!(first.outcome, Outcome::Result);
    assert_eq!(first.tenant, "anonymous");
    assert_eq!(gw.sim(0).stats().tasks, 1);

    // Several messages: a transcript, one `role: text` line each.
    let convo = json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"},
    ]);
    let r = c
        .post_json("/v1/chat/completions", &ask(SUMMARIZE, convo))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let output: Value =
        serde_json::from_str(r.json["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        output["input_fingerprint"],
        fingerprint(&json!(
            "system: be brief\nuser: hi\nassistant: hello\nuser: again"
        ))
    );

    // The policy: named in `model`, else by the header, else the default.
    let r = c
        .post_with(
            "/v1/chat/completions",
            ask(&format!("{SUMMARIZE}@cheapest"), user("x"))
                .to_string()
                .into_bytes(),
            &[],
        )
        .await;
    assert_eq!(
        (r.status, header(&r, "x-ldp-policy")),
        (200, "cheapest"),
        "{}",
        r.text()
    );
    let body = ask(SUMMARIZE, user("x")).to_string().into_bytes();
    let r = c
        .post_with(
            "/v1/chat/completions",
            body,
            &[("x-ldp-policy", "low-latency")],
        )
        .await;
    assert_eq!((r.status, header(&r, "x-ldp-policy")), (200, "low-latency"));
    let by_header = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    assert_eq!(by_header.policy.as_deref(), Some("low-latency"));

    // A stream from the LDP delegate: the whole output as one delta, then finish, usage, DONE.
    let mut body = ask(SUMMARIZE, user("stream it"));
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = c.post_json("/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.content_type().starts_with("text/event-stream"), "{r:?}");
    assert_eq!(header(&r, "x-ldp-delegate"), "d0");
    let (events, done) = chunks(&r);
    assert!(done, "ends with [DONE]: {}", r.text());
    assert!(events
        .iter()
        .all(|e| e["object"] == "chat.completion.chunk"));
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let output: Value = serde_json::from_str(&streamed_text(&events)).unwrap();
    assert_eq!(
        output["input_fingerprint"],
        fingerprint(&json!("stream it"))
    );
    let n = events.len();
    assert_eq!(events[n - 2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(events[n - 1]["choices"], json!([]));
    assert!(events[n - 1]["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(oa.stats().requests, 0, "nothing went to the chat model");

    gw.shutdown().await;
    oa.shutdown().await;
}

/// Asserts OpenAI's error shape (`param` always present) with this status, type and code.
fn assert_error(r: &Resp, status: u16, kind: &str, code: &str, param: Value) {
    assert_eq!(r.status, status, "{}", r.text());
    let e = &r.json["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        r.text()
    );
    assert_eq!(e["type"], kind, "{e}");
    assert_eq!(e["code"], code, "{e}");
    assert_eq!(e.get("param"), Some(&param), "{e}");
    assert_eq!(
        r.json.as_object().unwrap().len(),
        1,
        "only `error`: {}",
        r.json
    );
}

#[tokio::test]
async fn ingress_errors_have_openai_shape_and_the_ldp_statuses() {
    let mut opts = OpenAiOptions::new(MODEL);
    // The chat model's own limit, which the gateway does not know: its 400 is passed on.
    opts.context_window = Some(8);
    let oa = start(opts).await;
    let mut broke = tenant("broke", "sk-broke", "default");
    broke.budget.usd_per_day = Some(0.0);
    let mut limited = tenant("limited", "sk-limited", "default");
    limited.limits = Some(ldp_gateway::config::RateConfig {
        rps: 0.01,
        burst: Some(1),
    });
    let gw = fleet(&oa)
        .tenant(tenant("acme", "sk-acme", "default"))
        .tenant(broke)
        .tenant(limited)
        .tenant(tenant("stranger", "sk-stranger", "elsewhere"))
        .tenant(TenantConfig {
            trust_domains: Vec::new(),
            ..tenant("nodomain", "sk-nodomain", "default")
        })
        .config(|c| c.server.body_limit_bytes = 16 * 1024)
        .spawn()
        .await;
    let anon = gw.client();
    let c = anon.with_key(Some("sk-acme"));
    let post = |c: &Client, body: Value| {
        let c = c.clone();
        async move { c.post_json("/v1/chat/completions", &body).await }
    };
    let ok = ask(SUMMARIZE, user("hi"));

    for client in [anon.clone(), anon.with_key(Some("sk-wrong"))] {
        let r = post(&client, ok.clone()).await;
        assert_error(
            &r,
            401,
            "authentication_error",
            "invalid_api_key",
            Value::Null,
        );
        let r = client.get("/v1/models").await;
        assert_error(
            &r,
            401,
            "authentication_error",
            "invalid_api_key",
            Value::Null,
        );
    }
    assert_eq!(post(&c, ok.clone()).await.status, 200, "the right key");

    // Unknown skill or policy: the model does not exist.
    for model in ["nope", "summarize@nope"] {
        let r = post(&c, ask(model, user("hi"))).await;
        assert_error(
            &r,
            404,
            "not_found_error",
            "model_not_found",
            json!("model"),
        );
        assert!(r.text().contains(model), "names the model: {}", r.text());
    }

    // Bad requests name the field.
    let r = post(&c, json!({"model": SUMMARIZE})).await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        "bad_request",
        json!("messages"),
    );
    let r = post(&c, ask(SUMMARIZE, json!([]))).await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        "bad_request",
        json!("messages"),
    );
    let r = post(&c, json!({"messages": user("hi")})).await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        "bad_request",
        json!("model"),
    );
    let r = c
        .post_with("/v1/chat/completions", b"{not json".to_vec(), &[])
        .await;
    assert_error(&r, 400, "invalid_request_error", "bad_request", Value::Null);
    let r = post(&c, ask(SUMMARIZE, user(&"x".repeat(20 * 1024)))).await;
    assert_error(
        &r,
        413,
        "invalid_request_error",
        "payload_too_large",
        Value::Null,
    );

    // Refusals an LDP client gets as TASK_FAILED are 4xx here.
    let r = post(&c, ask(&format!("{SUMMARIZE}@eu-only"), user("hi"))).await;
    assert_error(
        &r,
        404,
        "not_found_error",
        "no_eligible_delegate",
        Value::Null,
    );
    let r = post(&anon.with_key(Some("sk-broke")), ok.clone()).await;
    assert_error(&r, 403, "permission_error", "budget_exceeded", Value::Null);
    // A tenant in another trust domain: no delegate it may reach.
    let r = post(&anon.with_key(Some("sk-stranger")), ok.clone()).await;
    assert_error(
        &r,
        404,
        "not_found_error",
        "no_eligible_delegate",
        Value::Null,
    );
    assert!(r.text().contains("trust_domain"), "{}", r.text());
    // A tenant that may claim no domain: its ingress session is refused.
    let r = post(&anon.with_key(Some("sk-nodomain")), ok.clone()).await;
    assert_error(&r, 403, "permission_error", "trust_violation", Value::Null);

    // The tenant's rate limit: 429 with Retry-After.
    let limited = anon.with_key(Some("sk-limited"));
    assert_eq!(post(&limited, ok.clone()).await.status, 200);
    let r = post(&limited, ok.clone()).await;
    assert_error(
        &r,
        429,
        "rate_limit_error",
        "rate_limit_exceeded",
        Value::Null,
    );
    assert!(r.retry_after().is_some_and(|s| s >= 1), "{:?}", r.headers);

    // The delegate failing: 502, and the failed task's row is named.
    gw.sim(0).set_fail_rate(1.0);
    let r = post(&c, ok.clone()).await;
    assert_error(&r, 502, "server_error", "upstream_failed", Value::Null);
    let failed = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    assert_eq!(failed.outcome, Outcome::Failed, "{failed:?}");
    assert_eq!(header(&r, "x-ldp-delegate"), "d0");
    gw.sim(0).set_fail_rate(0.0);

    // The OpenAI-backed delegate's own refusal, passed on as it came, and not retried.
    let r = post(
        &c,
        ask(CHAT, user("this prompt is well over eight tokens long")),
    )
    .await;
    assert_error(
        &r,
        400,
        "invalid_request_error",
        "context_length_exceeded",
        json!("messages"),
    );
    assert!(
        r.text().contains("maximum context length is 8 tokens"),
        "{}",
        r.text()
    );
    assert_eq!(oa.stats().bad_requests, 1, "{:?}", oa.stats());
    assert_eq!(oa.stats().requests, 1);

    gw.shutdown().await;
    oa.shutdown().await;
}

/// Each ingress request carries its whole conversation, so each is routed afresh: the policy
/// it names picks the delegate every time (no affinity to the first request's), near-equals
/// share the load, and the upstream session opened with an LDP delegate is kept and reused.
#[tokio::test]
async fn every_ingress_request_is_routed_afresh() {
    let (cheap, good, twin) = (
        start(OpenAiOptions::new(MODEL)).await,
        start(OpenAiOptions::new(MODEL)).await,
        start(OpenAiOptions::new(MODEL)).await,
    );
    // `cheap`: free and good enough; `good`: better and priced. `twin` equals `good`.
    let mut good_card = declared(&[CHAT], 0.95);
    good_card.price_per_mtok_input = Some(5.0);
    good_card.price_per_mtok_output = Some(15.0);
    let shipped = |f: &str| {
        std::fs::read_to_string(format!("{}/policies/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    // `even`: quality only, so observed latency cannot separate the twins.
    let even = "name = \"even\"\n[weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n[balance]\ntolerance = 0.05\n";
    let gw = TestGateway::builder()
        .policy("balanced.toml", &shipped("balanced.toml"))
        .policy("cheapest.toml", &shipped("cheapest.toml"))
        .policy("best-quality.toml", &shipped("best-quality.toml"))
        .policy("even.toml", even)
        .entry(entry("cheap", &cheap.url(), MODEL, declared(&[CHAT], 0.7)))
        .entry(entry("good", &good.url(), MODEL, good_card.clone()))
        .entry(entry("twin", &twin.url(), MODEL, good_card))
        .sim(SimOptions::new(card(
            "sim-ldp",
            "default",
            &[(SUMMARIZE, 0.9)],
            &["text"],
        )))
        .spawn()
        .await;
    let c = Client::new(&gw.ldp_url());
    let delegate_of = |r: &Resp| header(r, "x-ldp-delegate").to_owned();
    let mut seen = Vec::new();
    for model in [
        "chat@cheapest",
        "chat@best-quality",
        "chat@cheapest",
        "chat@best-quality",
    ] {
        let r = c
            .post_json("/v1/chat/completions", &ask(model, user("hi")))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        seen.push(delegate_of(&r));
    }
    assert_eq!(seen[0], "cheap", "{seen:?}");
    assert_eq!(seen[2], "cheap", "{seen:?}");
    for d in [&seen[1], &seen[3]] {
        assert!(d == "good" || d == "twin", "{seen:?}");
    }
    // Near-equals share: 30 requests under `even`, ten at a time, reach both `good` and
    // `twin` (one after another, the one measured faster would take them all: the power of
    // two choices weighs queued work, and nothing is queued).
    let mut both = std::collections::BTreeMap::new();
    let body = ask("chat@even", user("x"));
    for _ in 0..3 {
        let asks = (0..10).map(|_| c.post_json("/v1/chat/completions", &body));
        for r in futures_util::future::join_all(asks).await {
            *both.entry(delegate_of(&r)).or_insert(0) += 1;
        }
    }
    assert!(both.get("good").is_some_and(|n| *n > 0), "{both:?}");
    assert!(both.get("twin").is_some_and(|n| *n > 0), "{both:?}");
    // The delegate's finish reason comes through: an answer cut at `max_tokens` is `length`.
    let cut = json!({"model": "chat@cheapest", "max_tokens": 1,
        "messages": [{"role": "user", "content": "a long question to answer"}]});
    let r = c.post_json("/v1/chat/completions", &cut).await;
    let body: Value = serde_json::from_str(&r.text()).unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    // The LDP delegate: five requests, one upstream session.
    for _ in 0..5 {
        let r = c
            .post_json("/v1/chat/completions", &ask(SUMMARIZE, user("sum")))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let stats = gw.sim(0).stats();
    assert_eq!((stats.tasks, stats.accepted), (5, 1), "{stats:?}");
    gw.shutdown().await;
}

/// Each task's row and its `ldp_gateway_tasks_total` series name the front end it came in
/// through; the ledger filters by it; every front end's series is there from the start.
#[tokio::test]
async fn the_ledger_and_the_metrics_name_the_front_end_of_each_task() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa).spawn().await;
    let fresh = gw.metrics().await;
    for ingress in ["ldp", "openai", "llmcp", "llmx", "ladp", "a2a"] {
        let label = format!("ingress=\"{ingress}\"");
        assert!(
            fresh
                .samples()
                .any(|l| l.starts_with("ldp_gateway_tasks_total{") && l.contains(&label)),
            "no {label} series on a fresh gateway:\n{}",
            fresh.0
        );
    }
    let c = gw.client();
    let r = c
        .post_json("/v1/chat/completions", &ask(SUMMARIZE, user("over openai")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let by_openai = header(&r, "x-ldp-task-id").to_owned();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let t = c.task(&sid, SUMMARIZE, json!("over ldp"), "text").await;
    assert_eq!(t["type"], "TASK_RESULT", "{t}");
    let by_ldp = t["task_id"].as_str().unwrap().to_owned();

    assert_eq!(gw.ledger_row(&by_openai).await.ingress, Ingress::Openai);
    assert_eq!(gw.ledger_row(&by_ldp).await.ingress, Ingress::Ldp);
    let admin = gw.admin();
    let (rows, _) = ledger::page(&admin, "ingress=openai").await;
    let ids: Vec<&str> = rows.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(ids, [by_openai.as_str()]);
    let bad = admin.get("/admin/provenance?ingress=smtp").await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let csv = admin.get("/admin/provenance?format=csv").await.text();
    assert!(csv.starts_with("finished_at,task_id,ingress,"), "{csv}");
    assert!(csv.contains(&format!("{by_openai},openai,")), "{csv}");

    let m = gw.metrics().await;
    let count = |ingress: &str| -> f64 {
        let label = format!("ingress=\"{ingress}\"");
        m.samples()
            .filter(|l| l.starts_with("ldp_gateway_tasks_total{") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        (count("openai"), count("ldp"), count("a2a")),
        (1.0, 1.0, 0.0)
    );
    gw.shutdown().await;
    oa.shutdown().await;
}

/// The ingress's session gone (closed, expired, lost by the store): the request is answered
/// through a fresh one, and its task has the one row of what the client got, not a second
/// one for the session it never saw fail.
#[tokio::test]
async fn a_lost_ingress_session_leaves_no_row_of_its_own() {
    use ldp_gateway::ldp::Body;
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = fleet(&oa).spawn().await;
    let c = gw.client();
    let r = c
        .post_json("/v1/chat/completions", &ask(SUMMARIZE, user("first")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let first = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    // Close the ingress's session as its owner (the tenant and the ingress's `from`).
    let owner = Client::new(&gw.ldp_url()).with_from("ldp:client:openai-ingress");
    let closed = owner
        .send_body(&first.session_id, Body::SessionClose { reason: None })
        .await;
    assert_eq!(closed.status, 200);
    let r = c
        .post_json("/v1/chat/completions", &ask(SUMMARIZE, user("second")))
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let task = header(&r, "x-ldp-task-id").to_owned();
    let (rows, _) = ledger::page(&gw.admin(), &format!("task_id={task}")).await;
    let seen: Vec<(Outcome, Option<&str>)> = rows
        .iter()
        .map(|r| (r.outcome, r.error_code.as_deref()))
        .collect();
    assert_eq!(seen, [(Outcome::Result, None)]);
    assert_ne!(rows[0].session_id, first.session_id, "a fresh session");
    gw.shutdown().await;
    oa.shutdown().await;
}
