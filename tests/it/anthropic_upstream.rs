//! Anthropic-API delegates (`kind = "anthropic"`) behind the gateway, in front of the simulated
//! Anthropic server (`ldp-gateway delegate --anthropic`) and LiteLLM's `/v1/messages` (a real
//! Messages server no one here wrote): every kind of client reaching one — an Anthropic client
//! passed through (cache_control, thinking, unknown fields and `anthropic-beta` kept; the
//! gateway's key, never the client's), an OpenAI client (tools ↔ `tool_use`, the finish
//! reason), an LDP client in a multi-turn session (the conversation kept), an A2A client (a
//! text task as one user message); the cost of cache
//! reads and writes at their own prices and the ledger's four counts; failover on 529, 429
//! (then paused) and 500; a stream that breaks mid-way.

use crate::support::anthropic::{entry, events, start};
use crate::support::openai::declared;
use crate::support::process::{output_within, py_code};
use crate::support::{Client, Resp, TestGateway};
use ldp_gateway::config::{DeclaredCard, TenantConfig};
use ldp_gateway::provenance::{Ingress, Outcome, TokenCounts};
use ldp_gateway::secret::Secret;
use ldp_gateway::sim::anthropic::{AnthropicHandle, AnthropicOptions};
use serde_json::{json, Value};
use std::time::Duration;

/// The skill the Anthropic-API delegates offer.
const ASSIST: &str = "assist";
/// The upstream model.
const MODEL: &str = "sim-claude";
/// The declared prices, USD per million tokens: input, output, cache reads, cache writes.
const PRICES: [f64; 4] = [3.0, 15.0, 0.3, 3.75];
/// The tenant's key.
const KEY: &str = "sk-tenant-anthropic";

fn tenant() -> TenantConfig {
    serde_json::from_value(json!({
        "name": "acme",
        "api_key_sha256": [ldp_gateway::secret::hash_key(KEY)],
        "trust_domains": ["default"],
    }))
    .unwrap()
}

/// A card offering [`ASSIST`] at `quality`, priced at [`PRICES`].
fn priced(quality: f64) -> DeclaredCard {
    let mut card = declared(&[ASSIST], quality);
    card.price_per_mtok_input = Some(PRICES[0]);
    card.price_per_mtok_output = Some(PRICES[1]);
    card.price_per_mtok_cache_read = Some(PRICES[2]);
    card.price_per_mtok_cache_write = Some(PRICES[3]);
    card
}

/// POSTs a Messages request as the 1.x SDK does (`x-api-key`, `2023-06-01`), plus `headers`.
async fn messages(c: &Client, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let mut h = vec![("x-api-key", KEY), ("anthropic-version", "2023-06-01")];
    h.extend_from_slice(headers);
    c.with_key(None)
        .post_with("/v1/messages", serde_json::to_vec(body).unwrap(), &h)
        .await
}

/// The text of the `text_delta`s of `ev`.
fn streamed_text(ev: &[(String, Value)]) -> String {
    ev.iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect()
}

fn task_id(r: &Resp) -> String {
    r.headers
        .get("x-ldp-task-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-ldp-task-id")
        .to_owned()
}

fn usage_of(u: &Value) -> TokenCounts {
    let n = |k: &str| u[k].as_u64().unwrap_or_else(|| panic!("{k} in {u}"));
    TokenCounts {
        input: n("input_tokens"),
        output: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
    }
}

fn cost_of(u: &TokenCounts) -> f64 {
    (u.input as f64 * PRICES[0]
        + u.output as f64 * PRICES[1]
        + u.cache_read as f64 * PRICES[2]
        + u.cache_write as f64 * PRICES[3])
        / 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_client_passes_through_and_pays_for_cache_reads_at_their_price() {
    let sim = start(AnthropicOptions::new(MODEL)).await;
    let gw = TestGateway::builder()
        .tenant(tenant())
        .entry(entry("claude", &sim.url(), MODEL, priced(0.9)))
        .spawn()
        .await;
    let c = gw.client();
    let system = "You translate. ".repeat(100);
    let body = json!({"model": ASSIST, "max_tokens": 512,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 256},
        "metadata": {"user_id": "u-1"}, "a_future_field": {"kept": true},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "bonjour"}]}]});
    let beta = ("anthropic-beta", "prompt-caching-2024-07-31");

    let mut costs = Vec::new();
    for (n, stream) in [(0, false), (1, false), (2, true)] {
        let mut b = body.clone();
        b["stream"] = json!(stream);
        let r = messages(&c, &b, &[beta]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let (blocks_text, usage) = if stream {
            let ev = events(&r);
            let kinds: Vec<&str> = ev
                .iter()
                .filter_map(|(_, d)| d["delta"]["type"].as_str())
                .collect();
            assert!(
                kinds.contains(&"thinking_delta") && kinds.contains(&"signature_delta"),
                "the thinking block is relayed: {kinds:?}"
            );
            let end = ev.iter().find(|(n, _)| n == "message_delta").unwrap();
            let start = &ev[0].1["message"]["usage"];
            let mut usage = end.1["usage"].clone();
            for k in ["cache_read_input_tokens", "cache_creation_input_tokens"] {
                if usage.get(k).is_none() {
                    usage[k] = start[k].clone();
                }
            }
            (streamed_text(&ev), usage)
        } else {
            let m = &r.json;
            assert_eq!(m["content"][0]["type"], "thinking", "{m}");
            assert_eq!(m["content"][0]["signature"], "sim", "{m}");
            (
                m["content"][1]["text"].as_str().unwrap().to_owned(),
                m["usage"].clone(),
            )
        };
        assert_eq!(blocks_text, "echo: bonjour");
        let usage = usage_of(&usage);
        // The first request writes the marked prefix, the later ones read it.
        let prefix = (system.len() as u64).div_ceil(4);
        let (read, written) = if n == 0 { (0, prefix) } else { (prefix, 0) };
        assert_eq!(
            (usage.cache_read, usage.cache_write),
            (read, written),
            "call {n}"
        );
        let row = gw.ledger_row(&task_id(&r)).await;
        assert_eq!(row.ingress, Ingress::Anthropic);
        assert_eq!(row.outcome, Outcome::Result);
        assert_eq!(row.usage, Some(usage), "the ledger keeps the four counts");
        let cost = row.cost_usd.unwrap();
        assert!(
            (cost - cost_of(&usage)).abs() < 1e-12,
            "{cost} vs {usage:?}"
        );
        costs.push(cost);
        if n == 1 {
            // The CSV export carries the four counts too.
            let csv = gw
                .admin()
                .get(&format!(
                    "/admin/provenance?task_id={}&format=csv",
                    task_id(&r)
                ))
                .await
                .text();
            let lines: Vec<&str> = csv.lines().collect();
            let header: Vec<&str> = lines[0].split(',').collect();
            let at = |c: &str| header.iter().position(|h| *h == c).unwrap();
            let fields: Vec<&str> = lines[1].split(',').collect();
            let counts = [
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
            ]
            .map(|c| fields[at(c)].parse::<u64>().unwrap());
            assert_eq!(
                counts,
                [
                    usage.input,
                    usage.output,
                    usage.cache_read,
                    usage.cache_write
                ],
                "{csv}"
            );
        }
    }
    assert!(
        costs[1] < costs[0] / 5.0,
        "a cache read costs less: {costs:?}"
    );

    let seen = sim.requests();
    assert_eq!(seen.len(), 3);
    for r in &seen {
        assert_eq!(r.key, None, "the client's key is never passed on");
        assert_eq!(r.beta.as_deref(), Some(beta.1));
        assert_eq!(r.version.as_deref(), Some("2023-06-01"));
        assert_eq!(r.body["model"], MODEL);
        assert_eq!(r.body["system"], body["system"], "cache_control kept");
        assert_eq!(r.body["thinking"], body["thinking"]);
        assert_eq!(r.body["metadata"], body["metadata"]);
        assert_eq!(r.body["a_future_field"], body["a_future_field"]);
    }
    gw.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_ldp_and_a2a_clients_reach_an_anthropic_delegate() {
    let sim = start(AnthropicOptions::new(MODEL)).await;
    let gw = TestGateway::builder()
        .tenant(tenant())
        .entry(entry("claude", &sim.url(), MODEL, priced(0.9)))
        .spawn()
        .await;
    let c = gw.client().with_key(Some(KEY));

    // An OpenAI client with a tool: the delegate's tool_use comes back as a tool call.
    let tools = json!([{"type": "function", "function": {"name": "lookup",
        "description": "Looks a word up", "parameters": {"type": "object",
        "properties": {"text": {"type": "string"}}}}}]);
    let mut conversation = vec![
        json!({"role": "system", "content": "Use the tool."}),
        json!({"role": "user", "content": "chat"}),
    ];
    let ask = |messages: &[Value], stream: bool| {
        json!({"model": ASSIST, "messages": messages, "tools": tools, "stream": stream,
            "max_tokens": 100})
    };
    let r = c
        .post_with(
            "/v1/chat/completions",
            ask(&conversation, false).to_string().into_bytes(),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let choice = &r.json["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{}", r.json);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"text": "chat"}));
    let upstream = &sim.requests()[0].body;
    assert_eq!(upstream["system"], "Use the tool.", "{upstream}");
    assert_eq!(upstream["tools"][0]["name"], "lookup", "{upstream}");
    assert!(
        upstream["tools"][0]["input_schema"].is_object(),
        "{upstream}"
    );
    assert_eq!(upstream["max_tokens"], 100);

    // The tool's result goes back as a tool_result block; the answer streams as chunks.
    conversation.push(choice["message"].clone());
    conversation.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "a cat"}));
    let r = c
        .post_with(
            "/v1/chat/completions",
            ask(&conversation, true).to_string().into_bytes(),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (chunks, done) = crate::support::openai::chunks(&r);
    assert!(done, "[DONE] ends the stream");
    assert_eq!(
        crate::support::openai::streamed_text(&chunks),
        "echo: a cat"
    );
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("stop"));
    let upstream = &sim.requests()[1].body;
    let turns = upstream["messages"].as_array().unwrap();
    assert_eq!(turns.len(), 3, "{upstream}");
    assert_eq!(turns[1]["content"][0]["type"], "tool_use", "{upstream}");
    assert_eq!(turns[2]["role"], "user");
    assert_eq!(turns[2]["content"][0]["type"], "tool_result", "{upstream}");
    assert_eq!(turns[2]["content"][0]["tool_use_id"], call["id"]);

    // An LDP client in one session: the gateway keeps the conversation the API does not.
    let (sid, _) = c
        .session(json!({"policy": "balanced", "preferred_payload_modes": ["text"]}))
        .await;
    let first = c.task(&sid, ASSIST, json!("first question"), "text").await;
    assert_eq!(first["output"], "echo: first question", "{first}");
    assert_eq!(first["provenance"]["produced_by"], "ldp:delegate:claude");
    let second = c.task(&sid, ASSIST, json!("second question"), "text").await;
    assert_eq!(second["output"], "echo: second question", "{second}");
    let upstream = &sim.requests()[3].body;
    assert_eq!(
        upstream["messages"],
        json!([{"role": "user", "content": "first question"},
            {"role": "assistant", "content": "echo: first question"},
            {"role": "user", "content": "second question"}]),
        "{upstream}"
    );

    // An A2A client: a text task as one user message, the text back as the task's artifact.
    let before = sim.requests().len();
    let r = crate::bridge_a2a::rpc(
        &c,
        "SendMessage",
        crate::bridge_a2a::v1_message("an a2a question", json!({"skill": ASSIST})),
        Some("1.0"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("echo: an a2a question"), "{}", r.text());
    let upstream = &sim.requests()[before].body;
    assert_eq!(
        upstream["messages"],
        json!([{"role": "user", "content": "an a2a question"}]),
        "{upstream}"
    );
    gw.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_delegates_fail_over_on_529_429_and_500_and_a_broken_stream_fails() {
    let a = start(AnthropicOptions::new(MODEL)).await;
    let b = start(AnthropicOptions::new(MODEL)).await;
    let gw = TestGateway::builder()
        .tenant(tenant())
        .entry(entry("a", &a.url(), MODEL, priced(0.9)))
        .entry(entry("b", &b.url(), MODEL, priced(0.6)))
        .spawn()
        .await;
    let c = gw.client();
    let ask = |text: &str, stream: bool| {
        json!({"model": ASSIST, "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": text}]})
    };
    let delegate = |r: &Resp| {
        r.headers
            .get("x-ldp-delegate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let r = messages(&c, &ask("first", false), &[]).await;
    assert_eq!((r.status, delegate(&r)), (200, "a".into()), "{}", r.text());

    for (what, set, reset) in [
        (
            "529",
            &(|h: &AnthropicHandle| h.set_overload_rate(1.0)) as &dyn Fn(&AnthropicHandle),
            &(|h: &AnthropicHandle| h.set_overload_rate(0.0)) as &dyn Fn(&AnthropicHandle),
        ),
        (
            "500",
            &|h: &AnthropicHandle| h.set_fail_rate(1.0),
            &|h: &AnthropicHandle| h.set_fail_rate(0.0),
        ),
    ] {
        set(&a);
        let r = messages(&c, &ask(what, false), &[]).await;
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        assert_eq!(delegate(&r), "b", "{what}: failed over");
        assert_eq!(r.json["content"][0]["text"], format!("echo: {what}"));
        reset(&a);
    }
    assert_eq!((a.stats().overloaded, a.stats().server_errors), (1, 1));

    // A 429 with retry-after: failed over, then `a` left alone while it asked to wait.
    a.set_rate_limit(1.0, 60);
    let r = messages(&c, &ask("limited", false), &[]).await;
    assert_eq!((r.status, delegate(&r)), (200, "b".into()), "{}", r.text());
    assert_eq!(a.stats().rate_limited, 1);
    let before = a.stats().requests;
    for n in 0..3 {
        let r = messages(&c, &ask(&format!("paused {n}"), false), &[]).await;
        assert_eq!((r.status, delegate(&r)), (200, "b".into()));
    }
    assert_eq!(a.stats().requests, before, "a paused delegate is not asked");

    // `b`'s stream breaks after its first piece went out: 200, then an error event.
    b.set_break_stream_after(Some(1));
    let long = "a stream that breaks ".repeat(40);
    let r = messages(&c, &ask(&long, true), &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    assert_eq!(ev.last().map(|(n, _)| n.as_str()), Some("error"), "{ev:?}");
    assert!(!ev.iter().any(|(n, _)| n == "message_stop"), "{ev:?}");
    assert_eq!(b.stats().broken_streams, 1);
    let row = gw.ledger_row(&task_id(&r)).await;
    assert_eq!(row.outcome, Outcome::Failed, "{row:?}");
    // What went out before the break is charged: message_start said 1 output token, and
    // the first quarter of the answer (cut at 4 × max_tokens = 256 bytes) was relayed.
    let usage = row.usage.expect("a cut-short answer's usage");
    assert!(usage.output >= 10, "{usage:?}");
    gw.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// `count_tokens` is asked of the delegate a task would be routed to, under the tenant's rate
/// limit, and never along a loop of gateways (estimated instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_is_routed_rate_limited_and_loop_safe() {
    let sim = start(AnthropicOptions::new(MODEL)).await;
    let mut t = tenant();
    t.limits = Some(ldp_gateway::config::RateConfig {
        rps: 0.01,
        burst: Some(2),
    });
    let gw = TestGateway::builder()
        .tenant(t)
        .entry(entry("claude", &sim.url(), MODEL, priced(0.9)))
        .spawn()
        .await;
    let c = gw.client().with_key(None);
    let body = json!({"model": ASSIST, "messages": [{"role": "user", "content": "count me"}]});
    let count = |extra: &'static [(&'static str, &'static str)]| {
        let mut h = vec![("x-api-key", KEY), ("anthropic-version", "2023-06-01")];
        h.extend_from_slice(extra);
        let c = c.clone();
        let body = body.clone();
        async move {
            c.post_with(
                "/v1/messages/count_tokens",
                body.to_string().into_bytes(),
                &h,
            )
            .await
        }
    };
    let r = count(&[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(sim.stats().token_counts, 1, "asked of the delegate");
    // Along a loop (the hop limit reached): estimated here, not asked.
    let r = count(&[("x-ldp-hops", "8")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json["input_tokens"].as_u64() > Some(0));
    assert_eq!(sim.stats().token_counts, 1, "not asked along a loop");
    // The tenant's rate limit applies.
    let r = count(&[]).await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json["error"]["type"], "rate_limit_error", "{}", r.json);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(sim.stats().token_counts, 1);
    gw.shutdown().await;
    sim.shutdown().await;
}

/// The key comes from the variable `api_key_env` names and goes as `auth` says (here a
/// Bearer token, with the configured API version); the delegate never sees the client's.
#[tokio::test]
async fn the_gateway_calls_with_its_own_key_and_version() {
    let key = crate::support::unique("sk-ant-upstream");
    let mut opts = AnthropicOptions::new(MODEL);
    opts.api_key = Some(Secret::new(key.as_str()));
    let sim = start(opts).await;
    let var = crate::support::unique("LDP_TEST_ANTHROPIC_KEY").to_uppercase();
    let mut e = entry("keyed", &sim.url(), MODEL, priced(0.9));
    e.api_key_env = Some(var.clone());
    e.auth = Some(ldp_gateway::config::AnthropicAuth::Bearer);
    e.anthropic_version = Some("2026-10-21".into());
    let served = TestGateway::builder()
        .tenant(tenant())
        .entry(e)
        .env(&var, &key)
        .log("debug")
        .spawn_process()
        .await;
    let body = json!({"model": ASSIST, "max_tokens": 32,
        "messages": [{"role": "user", "content": "with a key"}]});
    let r = messages(&served.client(), &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json["content"][0]["text"], "echo: with a key");
    assert_eq!(sim.stats().unauthorized, 0, "{:?}", sim.stats());
    assert!(sim.stats().model_lists >= 1, "liveness asked with the key");
    let seen = sim.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].key.as_deref(), Some(key.as_str()));
    assert_eq!(seen[0].version.as_deref(), Some("2026-10-21"));
    let said = served.stop().await;
    assert!(!said.contains(&key), "the key was printed");
    assert!(!said.contains(KEY), "the client's key was printed");
    sim.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// LiteLLM's /v1/messages, a Messages server no one here wrote
// ---------------------------------------------------------------------------------------

/// LiteLLM's proxy (`LDP_PY_LITELLM`: the venv's interpreter) serving one model with a mock
/// answer: a real `/v1/messages` that, asked to stream, answers whole as JSON.
struct LiteLlm {
    url: String,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

/// LiteLLM's master key, which it requires (it refuses to start without one).
const LITELLM_KEY: &str = "sk-litellm-0123456789abcdef0123456789abcdef";
/// Its mock answer.
const LITELLM_SAYS: &str = "hello from litellm";

async fn litellm() -> Option<LiteLlm> {
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    let Some(py) = std::env::var_os("LDP_PY_LITELLM").filter(|v| !v.is_empty()) else {
        assert!(
            !required,
            "LDP_PY_LITELLM is not set but LDP_INTEROP_REQUIRED=1"
        );
        eprintln!("skipping LiteLLM: LDP_PY_LITELLM is not set");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: \
             anthropic/claude-sonnet-4-5\n      api_key: sk-ant-unused\n      mock_response: \
             \"{LITELLM_SAYS}\"\ngeneral_settings:\n  master_key: {LITELLM_KEY}\n"
        ),
    )
    .unwrap();
    // A free port for it: LiteLLM takes a port number, not a socket.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = output_within(
        py_code(std::path::Path::new(&py), "import litellm"),
        Duration::from_secs(120),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let child = tokio::process::Command::new(&py)
        .args(["-m", "litellm.proxy.proxy_cli", "--config"])
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .env("LITELLM_LOG", "ERROR")
        .env("NO_DOCS", "True")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start litellm");
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let up = crate::support::eventually_async(Duration::from_secs(120), || {
        let probe = http.get(format!("{url}/health/liveliness")).send();
        async move { probe.await.is_ok_and(|r| r.status().is_success()) }
    })
    .await;
    assert!(up, "LiteLLM did not come up on {url}");
    Some(LiteLlm {
        url,
        child,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellms_messages_server_is_a_delegate_for_every_client() {
    let Some(mut ll) = litellm().await else {
        return;
    };
    let var = crate::support::unique("LDP_TEST_LITELLM_KEY").to_uppercase();
    let mut e = entry("litellm", &ll.url, MODEL, priced(0.9));
    e.api_key_env = Some(var.clone());
    let served = TestGateway::builder()
        .tenant(tenant())
        .entry(e)
        .env(&var, LITELLM_KEY)
        .spawn_process()
        .await;
    let c = served.client();
    let body = json!({"model": ASSIST, "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = messages(&c, &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json["content"][0]["text"], LITELLM_SAYS, "{}", r.json);
    assert_eq!(r.json["stop_reason"], "end_turn");
    assert!(r.json["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // Asked to stream, LiteLLM's mock answers whole (JSON): the client still gets events.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = messages(&c, &streamed, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    assert_eq!(streamed_text(&ev), LITELLM_SAYS, "{ev:?}");
    assert_eq!(ev.last().map(|(n, _)| n.as_str()), Some("message_stop"));

    // An OpenAI client, and an LDP client.
    let oc = c.with_key(Some(KEY));
    let ask = json!({"model": ASSIST, "messages": [{"role": "user", "content": "hi"}]});
    let r = oc
        .post_with("/v1/chat/completions", ask.to_string().into_bytes(), &[])
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json["choices"][0]["message"]["content"], LITELLM_SAYS);
    let (sid, _) = oc
        .session(json!({"policy": "balanced", "preferred_payload_modes": ["text"]}))
        .await;
    let a = oc.task(&sid, ASSIST, json!("hi"), "text").await;
    assert_eq!(a["output"], LITELLM_SAYS, "{a}");
    served.stop().await;
    let _ = ll.child.kill().await;
}
