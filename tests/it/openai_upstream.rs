//! OpenAI-backed delegates (`kind = "openai"`) behind the gateway, driven by LDP clients: the
//! reference SDK's `LdpClient` in a multi-turn session (the gateway keeps the conversation the
//! endpoint does not), failover on 500 / 429 (the delegate then skipped until `Retry-After`) /
//! timeouts, a 400 that is the request's own and not retried, a stream that breaks mid-way
//! (failed, never finished), cost from usage at the declared prices, a token-priced budget under
//! 50 concurrent tasks, the API key from the environment, and `check` on bad entries.

use crate::support::openai::{chunks, declared, entry, start, streamed_text};
use crate::support::process::{self, output_within, py_script, pythons, text, Sdk};
use crate::support::{eventually, Client, TestGateway};
use ldp_gateway::config::{BudgetConfig, DeclaredCard, TenantConfig};
use ldp_gateway::provenance::Outcome;
use ldp_gateway::secret::Secret;
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use serde_json::{json, Value};
use std::time::Duration;

const CHAT: &str = "chat";
/// The upstream models of delegates `a` and `b`.
const MODEL_A: &str = "model-a";
const MODEL_B: &str = "model-b";
/// One `ref_client.py` run: a cold start, discovery, a session and two tasks.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// `a` (quality 0.9, preferred) in front of `sa` and `b` (0.6) in front of `sb`, both offering
/// [`CHAT`].
fn pair<'a>(sa: &OpenAiHandle, sb: &OpenAiHandle) -> crate::support::gateway::Builder<'a> {
    TestGateway::builder()
        .entry(entry("a", &sa.url(), MODEL_A, declared(&[CHAT], 0.9)))
        .entry(entry("b", &sb.url(), MODEL_B, declared(&[CHAT], 0.6)))
}

/// A client session under `policy`, text only.
async fn session(c: &Client, policy: &str) -> String {
    c.session(json!({"policy": policy, "preferred_payload_modes": ["text"]}))
        .await
        .0
}

fn produced_by(answer: &Value) -> &str {
    assert_eq!(answer["type"], "TASK_RESULT", "{answer}");
    answer["provenance"]["produced_by"].as_str().unwrap()
}

/// The `messages` of each request `sim` received, in order.
fn sent_messages(sim: &OpenAiHandle) -> Vec<Value> {
    sim.requests()
        .into_iter()
        .map(|r| r["messages"].clone())
        .collect()
}

// ---------------------------------------------------------------------------------------
// The reference SDK's LdpClient, multi-turn
// ---------------------------------------------------------------------------------------

/// Each form of the reference SDK's `LdpClient` runs two tasks in one session through the
/// gateway to an OpenAI-backed delegate: the second request upstream carries the first turn
/// (the user's text and the assistant's answer) before the new input; another session starts
/// afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldp_clients_hold_a_multi_turn_session_with_an_openai_backed_delegate() {
    let pys = pythons("reference-SDK client to an OpenAI-backed delegate");
    if pys.is_empty() {
        return;
    }
    let oa = start(OpenAiOptions::new(MODEL_A)).await;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), MODEL_A, declared(&[CHAT], 0.8)))
        .config(|c| c.identity.delegate_id = "ldp:delegate:gateway".into())
        .spawn()
        .await;
    for (n, (sdk, py)) in pys.iter().enumerate() {
        let mut cmd = py_script(py, "ref_client.py");
        cmd.args(["--url", &gw.ldp_url(), "--skill", CHAT, "--tasks", "2"])
            .args(["--expect-produced-by", "ldp:delegate:mini"]);
        let out = output_within(cmd, CLIENT_TIMEOUT).await;
        let stdout = text(&out.stdout);
        let what = format!("{} LdpClient", sdk.label());
        let summary: Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{what}: no summary: {stdout}\n{}", text(&out.stderr)));
        assert!(
            out.status.success() && summary["ok"] == true,
            "{what}: {summary}\n{}",
            text(&out.stderr)
        );
        let results = summary["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{what}: {summary}");

        let sent = sent_messages(&oa);
        assert_eq!(sent.len(), 2 * (n + 1), "{what}: two requests upstream");
        let (first, second) = (&sent[2 * n], &sent[2 * n + 1]);
        assert_eq!(first.as_array().unwrap().len(), 1, "{what}: {first}");
        assert_eq!(first[0]["role"], "user");
        let asked = first[0]["content"].as_str().unwrap();
        assert!(asked.contains("interop task 0"), "{what}: {asked}");
        let answered = format!("echo: {asked}");
        assert_eq!(
            second.as_array().unwrap().len(),
            3,
            "{what}: the first turn, then the new input: {second}"
        );
        assert_eq!(
            second[0],
            json!({"role": "user", "content": asked}),
            "{what}"
        );
        assert_eq!(
            second[1],
            json!({"role": "assistant", "content": answered}),
            "{what}"
        );
        assert_eq!(second[2]["role"], "user", "{what}");
        assert!(
            second[2]["content"]
                .as_str()
                .unwrap()
                .contains("interop task 1"),
            "{what}: {second}"
        );
        // The client saw the model's answers, with the delegate's provenance.
        assert_eq!(results[0]["output"], json!(answered), "{what}: {summary}");
        for r in results {
            assert_eq!(r["produced_by"], "ldp:delegate:mini", "{what}: {r}");
            assert_eq!(r["model_version"], MODEL_A, "{what}: {r}");
            assert_eq!(r["session_id"], summary["session_id"], "{what}: {r}");
            if *sdk == Sdk::Bundled {
                assert_eq!(r["lineage"][0]["step"], "route", "{what}: {r}");
                assert!(r["tokens_used"].as_u64().unwrap() > 0, "{what}: {r}");
            }
        }
    }
    gw.shutdown().await;
    oa.shutdown().await;
}

/// The conversation sent upstream is fitted to the declared context window (oldest turns
/// dropped first and counted), and what is dropped stays forgotten.
#[tokio::test]
async fn the_conversation_is_fitted_to_the_declared_context_window() {
    let oa = start(OpenAiOptions::new(MODEL_A)).await;
    let mut card = declared(&[CHAT], 0.8);
    // 64 tokens, 16 of them kept for the answer: a 10-token input and one 22-token turn fit,
    // two turns do not.
    card.context_window = Some(64);
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), MODEL_A, card))
        .spawn()
        .await;
    let c = gw.client();
    let sid = session(&c, "balanced").await;
    let inputs: Vec<String> = (0..3).map(|i| format!("{i} {}", "w".repeat(38))).collect();
    for input in &inputs {
        assert_eq!(input.len(), 40);
        let a = c.task(&sid, CHAT, json!(input), "text").await;
        assert_eq!(a["output"], json!(format!("echo: {input}")), "{a}");
    }
    let sent = sent_messages(&oa);
    assert_eq!(sent[1].as_array().unwrap().len(), 3, "{}", sent[1]);
    assert_eq!(
        sent[2],
        json!([
            {"role": "user", "content": inputs[1]},
            {"role": "assistant", "content": format!("echo: {}", inputs[1])},
            {"role": "user", "content": inputs[2]},
        ]),
        "the oldest turn is dropped"
    );
    let dropped = gw
        .metrics()
        .await
        .sum("ldp_gateway_openai_turns_dropped_total{reason=\"context_window\"}");
    assert_eq!(dropped, 1.0);
    gw.shutdown().await;
    oa.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Failover
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_500_fails_over_to_the_other_openai_backed_delegate() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.fail_rate = 1.0;
    let (sa, sb) = (start(opts).await, start(OpenAiOptions::new(MODEL_B)).await);
    let gw = pair(&sa, &sb).spawn().await;
    let c = gw.client();
    let sid = session(&c, "best-quality").await;
    let a = c.task(&sid, CHAT, json!("fail over please"), "text").await;
    assert_eq!(produced_by(&a), "ldp:delegate:b");
    assert_eq!(a["provenance"]["model_version"], MODEL_B);
    assert_eq!(a["output"], "echo: fail over please");
    let r = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
    assert_eq!(r.fallbacks, ["http_5xx"], "{r:?}");
    assert_eq!(r.delegate.as_deref(), Some("b"));
    assert_eq!((sa.stats().server_errors, sb.stats().completions), (1, 1));
    gw.shutdown().await;
    sa.shutdown().await;
    sb.shutdown().await;
}

#[tokio::test]
async fn a_429_fails_over_and_the_delegate_is_skipped_until_retry_after() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.rate_limit_rate = 1.0;
    opts.retry_after_secs = 1;
    let (sa, sb) = (start(opts).await, start(OpenAiOptions::new(MODEL_B)).await);
    let gw = pair(&sa, &sb).spawn().await;
    let c = gw.client();

    let a = c
        .task(
            &session(&c, "best-quality").await,
            CHAT,
            json!("one"),
            "text",
        )
        .await;
    assert_eq!(produced_by(&a), "ldp:delegate:b");
    let r = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
    assert_eq!(r.fallbacks, ["rate_limited"], "{r:?}");
    assert_eq!(sa.stats().rate_limited, 1);
    let da = gw.delegate("a").unwrap();
    assert!(da.is_paused(), "paused for its Retry-After");
    assert!(da.is_healthy(), "a 429 is no fault");

    // Paused: not asked at all (a fresh session, so no stickiness decides it).
    let a = c
        .task(
            &session(&c, "best-quality").await,
            CHAT,
            json!("two"),
            "text",
        )
        .await;
    assert_eq!(produced_by(&a), "ldp:delegate:b");
    assert_eq!(sa.stats().requests, 1, "skipped while paused");
    assert!(gw
        .ledger_row(a["task_id"].as_str().unwrap())
        .await
        .fallbacks
        .is_empty());

    // After Retry-After it is chosen again.
    sa.set_rate_limit(0.0, 1);
    assert!(
        eventually(Duration::from_secs(10), || !da.is_paused()).await,
        "the pause ends"
    );
    let a = c
        .task(
            &session(&c, "best-quality").await,
            CHAT,
            json!("three"),
            "text",
        )
        .await;
    assert_eq!(produced_by(&a), "ldp:delegate:a");
    assert_eq!(sa.stats().completions, 1);
    gw.shutdown().await;
    sa.shutdown().await;
    sb.shutdown().await;
}

/// A policy preferring quality whose attempts may take at most 1 s.
const TIGHT: &str = "name = \"tight\"\n[require]\nmax_latency_ms = 1000\n\
                     [weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n";

#[tokio::test]
async fn a_delegate_slower_than_the_policy_allows_is_failed_over() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.latency = Duration::from_secs(5);
    let (sa, sb) = (start(opts).await, start(OpenAiOptions::new(MODEL_B)).await);
    let gw = pair(&sa, &sb)
        .policy("tight.toml", TIGHT)
        .config(|c| c.policies.default = "tight".into())
        .spawn()
        .await;
    let c = gw.client();
    let started = std::time::Instant::now();
    let a = c
        .task(&session(&c, "tight").await, CHAT, json!("hurry"), "text")
        .await;
    assert_eq!(produced_by(&a), "ldp:delegate:b", "{a}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a's 5 s were not waited for: {:?}",
        started.elapsed()
    );
    let r = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
    assert_eq!(r.fallbacks, ["timeout"], "{r:?}");
    assert_eq!(sa.stats().requests, 1);
    gw.shutdown().await;
    sa.shutdown().await;
    sb.shutdown().await;
}

/// Without another delegate to try, the task's own deadline (`upstream.task_timeout`) ends a
/// hanging completion with UPSTREAM_FAILED rather than waiting for it.
#[tokio::test]
async fn the_task_timeout_bounds_a_hanging_completion() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.latency = Duration::from_secs(30);
    let sa = start(opts).await;
    let gw = TestGateway::builder()
        .entry(entry("a", &sa.url(), MODEL_A, declared(&[CHAT], 0.9)))
        .config(|c| c.upstream.task_timeout = Duration::from_secs(1))
        .spawn()
        .await;
    let c = gw.client();
    let started = std::time::Instant::now();
    let a = c
        .task(&session(&c, "balanced").await, CHAT, json!("wait"), "text")
        .await;
    assert_eq!(a["type"], "TASK_FAILED", "{a}");
    assert_eq!(a["error"]["code"], "UPSTREAM_FAILED", "{a}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    gw.shutdown().await;
    sa.shutdown().await;
}

#[tokio::test]
async fn a_400_from_the_delegate_is_not_retried() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    // Its real window, smaller than the operator declared: the request is too long for it.
    opts.context_window = Some(5);
    let (sa, sb) = (start(opts).await, start(OpenAiOptions::new(MODEL_B)).await);
    let gw = pair(&sa, &sb).spawn().await;
    let c = gw.client();
    let a = c
        .task(
            &session(&c, "best-quality").await,
            CHAT,
            json!("a prompt that is longer than five tokens"),
            "text",
        )
        .await;
    assert_eq!(a["type"], "TASK_FAILED", "{a}");
    assert_eq!(a["error"]["code"], "BAD_REQUEST", "{a}");
    let m = a["error"]["message"].as_str().unwrap();
    assert!(m.contains("maximum context length is 5 tokens"), "{m}");
    assert!(m.contains("HTTP 400"), "{m}");
    assert_eq!(sa.stats().bad_requests, 1);
    assert_eq!(sb.stats().requests, 0, "the other delegate got nothing");
    let r = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.error_code.as_deref(), Some("BAD_REQUEST"));
    assert!(r.fallbacks.is_empty(), "{r:?}");
    assert!(
        gw.delegate("a").unwrap().is_healthy(),
        "the request's fault, not the delegate's"
    );
    gw.shutdown().await;
    sa.shutdown().await;
    sb.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------

fn kind(e: &Value) -> &str {
    e["body"]["type"].as_str().unwrap_or("?")
}

/// A text TASK_SUBMIT of `input` to `/ldp/stream`, read to its end.
async fn stream_task(c: &Client, sid: &str, task_id: &str, input: &str) -> Vec<Value> {
    let body = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": CHAT, "input": input});
    c.open_stream(&c.envelope_json(sid, body, "text"))
        .await
        .rest()
        .await
}

/// The TASK_UPDATE messages after "routed to …": the relayed deltas.
fn deltas(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| kind(e) == "TASK_UPDATE")
        .filter_map(|e| e["body"]["message"].as_str())
        .filter(|m| !m.starts_with("routed to ") && !m.starts_with("delegate "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_stream_that_breaks_midway_fails_and_is_not_retried() {
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.break_stream_after = Some(2);
    let (sa, sb) = (start(opts).await, start(OpenAiOptions::new(MODEL_B)).await);
    let gw = pair(&sa, &sb).spawn().await;
    let c = gw.client();
    let input = "an answer long enough to come in four pieces";
    let whole = format!("echo: {input}");

    // On /ldp/stream: two deltas relayed, then TASK_FAILED; never a result, never b.
    let events = stream_task(&c, &session(&c, "best-quality").await, "t-broken", input).await;
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(kinds.last(), Some(&"TASK_FAILED"), "{events:#?}");
    assert!(!kinds.contains(&"TASK_RESULT"), "{kinds:?}");
    let relayed = deltas(&events);
    assert_eq!(relayed.len(), 2, "{events:#?}");
    assert!(whole.starts_with(&relayed.concat()), "{relayed:?}");
    let failed = events.last().unwrap();
    assert_eq!(
        failed["body"]["error"]["code"], "UPSTREAM_FAILED",
        "{failed}"
    );
    assert_eq!(sb.stats().requests, 0, "not retried on b");
    let r = gw.ledger_row("t-broken").await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(r.fallbacks.is_empty(), "{r:?}");
    assert_eq!(sa.requests()[0]["stream"], true, "streamed upstream");

    // On the ingress: the chunks, then an error event and no [DONE].
    let body = json!({"model": CHAT, "stream": true,
        "messages": [{"role": "user", "content": input}]});
    let r = c.post_json("/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let (events, done) = chunks(&r);
    assert!(!done, "a broken stream is not finished: {}", r.text());
    let last = events.last().unwrap();
    assert!(last["error"]["message"].is_string(), "{last}");
    assert!(
        events
            .iter()
            .all(|e| e["choices"][0]["finish_reason"].is_null()),
        "{events:?}"
    );
    assert!(whole.starts_with(&streamed_text(&events)));
    assert_eq!(sb.stats().requests, 0);

    // Broken before any delta reached the client: failed over to b, which finishes.
    sa.set_break_stream_after(Some(0));
    let events = stream_task(&c, &session(&c, "best-quality").await, "t-early", input).await;
    let result = events.last().unwrap();
    assert_eq!(kind(result), "TASK_RESULT", "{events:#?}");
    assert_eq!(produced_by(&result["body"]), "ldp:delegate:b");
    assert_eq!(deltas(&events).concat(), whole, "b's deltas, all of them");
    assert_eq!(result["body"]["output"], json!(whole));
    assert_eq!(gw.ledger_row("t-early").await.fallbacks, ["stream_broken"]);
    gw.shutdown().await;
    sa.shutdown().await;
    sb.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Cost and budgets
// ---------------------------------------------------------------------------------------

/// A declared card with these prices (USD per million tokens).
fn priced(input: f64, output: f64) -> DeclaredCard {
    DeclaredCard {
        price_per_mtok_input: Some(input),
        price_per_mtok_output: Some(output),
        ..declared(&[CHAT], 0.8)
    }
}

/// The simulated server's token estimate: `ceil(bytes / 4)`, at least 1.
fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4).max(1)
}

#[tokio::test]
async fn cost_comes_from_usage_at_the_declared_prices() {
    let (pin, pout) = (0.15, 0.60);
    let oa = start(OpenAiOptions::new(MODEL_A)).await;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), MODEL_A, priced(pin, pout)))
        .spawn()
        .await;
    let c = gw.client();
    let sid = session(&c, "balanced").await;
    let first = "what does this sentence cost";
    let second = "and this one, after the first turn";
    let mut history = 0;
    for input in [first, second] {
        let a = c.task(&sid, CHAT, json!(input), "text").await;
        let answer = format!("echo: {input}");
        assert_eq!(a["output"], json!(answer), "{a}");
        // The prompt is the history and the input; the answer is the echo.
        let (p, k) = (tokens(history + input.len()), tokens(answer.len()));
        let cost = (p as f64 * pin + k as f64 * pout) / 1e6;
        let prov = &a["provenance"];
        assert_eq!(prov["tokens_used"], p + k, "{prov}");
        assert_eq!(prov["cost_usd"].as_f64(), Some(cost), "{prov}");
        let r = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
        assert_eq!(r.tokens, Some(p + k));
        assert_eq!(r.cost_usd, Some(cost), "{r:?}");
        history += input.len() + answer.len();
    }
    // The card routing compares: a typical call (1000 in, 500 out) at those prices.
    let typical = (1000.0 * pin + 500.0 * pout) / 1e6;
    let listed = gw.admin().get("/admin/delegates").await.json;
    let caps = listed
        .as_array()
        .or_else(|| listed["delegates"].as_array())
        .and_then(|ds| ds.iter().find(|d| d["name"] == "mini"))
        .map(|d| d["card"]["capabilities"][0]["quality"]["cost_per_call_usd"].clone());
    assert_eq!(caps.and_then(|v| v.as_f64()), Some(typical), "{listed}");
    gw.shutdown().await;
    oa.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_holds_under_fifty_concurrent_token_priced_tasks() {
    // Each task holds 1.25 × (its input estimate × 10 + 16 output tokens × 1000) / 1e6 ≈
    // 0.02 USD and is charged its usage, ≈ 0.005 USD: the hold bounds the charge, so spend
    // cannot pass the limit however the tasks interleave.
    let (pin, pout, limit) = (10.0, 1000.0, 0.1);
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.latency = Duration::from_millis(100);
    let oa = start(opts).await;
    let key = crate::support::unique("sk");
    let mut payer: TenantConfig = serde_json::from_value(json!({
        "name": "payer",
        "api_key_sha256": [ldp_gateway::secret::hash_key(&key)],
        "trust_domains": ["default"],
    }))
    .unwrap();
    payer.budget = BudgetConfig {
        usd_per_day: Some(limit),
        ..BudgetConfig::default()
    };
    let gw = TestGateway::builder()
        .entry(entry("tok", &oa.url(), MODEL_A, priced(pin, pout)))
        .tenant(payer)
        .config(|c| c.openai.default_max_tokens = 16)
        .spawn()
        .await;
    let api = gw.client().with_key(Some(&key));
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(api.accepted(json!({})).await);
    }
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (api, sid) = (api.clone(), sessions[i % 5].clone());
            tokio::spawn(async move {
                api.task(&sid, CHAT, json!(format!("budget task {i:02}")), "text")
                    .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let results = answers
        .iter()
        .filter(|a| a["type"] == "TASK_RESULT")
        .count();
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|a| a["type"] == "TASK_FAILED")
        .collect();
    assert_eq!(results + refused.len(), 50);
    assert!(results >= 1, "some ran");
    assert!(!refused.is_empty(), "some were refused");
    for f in &refused {
        assert_eq!(f["error"]["code"], "BUDGET_EXCEEDED", "{f}");
        let m = f["error"]["message"].as_str().unwrap();
        assert!(m.starts_with("daily budget"), "{m}");
    }
    assert_eq!(
        oa.stats().completions as usize,
        results,
        "a refused task is never sent"
    );

    // Then one at a time until the next hold no longer fits: the budget is used, not passed.
    let mut more = 0;
    loop {
        let a = api
            .task(&sessions[more % 5], CHAT, json!("one more please"), "text")
            .await;
        if a["type"] == "TASK_FAILED" {
            assert_eq!(a["error"]["code"], "BUDGET_EXCEEDED", "{a}");
            break;
        }
        more += 1;
        assert!(more < 40, "the budget never ran out");
    }
    let rows = gw.ledger("tenant=payer&limit=1000").await;
    let spent: f64 = rows.iter().filter_map(|r| r.cost_usd).sum();
    assert_eq!(
        rows.iter().filter(|r| r.outcome == Outcome::Result).count(),
        results + more
    );
    assert!(spent <= limit + 1e-9, "ledger spend {spent} over {limit}");
    assert!(
        spent > limit - 0.03,
        "stopped only when a hold (≈ 0.02) no longer fit: spent {spent}"
    );
    assert!(
        (gw.spent_today("payer") - spent).abs() < 1e-9,
        "settled to usage: book {} vs ledger {spent}",
        gw.spent_today("payer")
    );
    eprintln!(
        "50 concurrent token-priced tasks against {limit} USD/day → {results} results, {} BUDGET_EXCEEDED; then {more} one by one; spend {spent:.5}",
        refused.len()
    );
    gw.shutdown().await;
    oa.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// The API key, and `check`
// ---------------------------------------------------------------------------------------

/// The key comes from the variable `api_key_env` names in the gateway's environment and is
/// sent as a Bearer token: the upstream that requires it sees the gateway's liveness checks
/// and tasks; it never appears in what the gateway prints.
#[tokio::test]
async fn the_api_key_is_read_from_the_environment_and_sent_upstream() {
    let key = crate::support::unique("sk-upstream");
    let mut opts = OpenAiOptions::new(MODEL_A);
    opts.api_key = Some(Secret::new(key.as_str()));
    let oa = start(opts).await;
    let var = crate::support::unique("LDP_TEST_OPENAI_KEY").to_uppercase();
    let mut e = entry("keyed", &oa.url(), MODEL_A, declared(&[CHAT], 0.8));
    e.api_key_env = Some(var.clone());
    let served = TestGateway::builder()
        .entry(e)
        .env(&var, &key)
        .log("debug")
        .spawn_process()
        .await;
    let c = served.client();
    let sid = session(&c, "balanced").await;
    let a = c.task(&sid, CHAT, json!("with a key"), "text").await;
    assert_eq!(a["output"], "echo: with a key", "{a}");
    assert_eq!(oa.stats().unauthorized, 0, "{:?}", oa.stats());
    assert!(oa.stats().model_lists >= 1);
    let said = served.stop().await;
    assert!(!said.contains(&key), "the key was printed");
    oa.shutdown().await;
}

#[tokio::test]
async fn check_reports_each_bad_openai_entry_with_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("gateway.toml");
    let toml = "\
[server]
listen = \"127.0.0.1:0\"

[[delegates]]
kind = \"openai\"
name = \"no-model\"
url = \"http://127.0.0.1:4000/v1\"
[delegates.card]
skills = [\"chat\"]

[[delegates]]
kind = \"openai\"
name = \"no-card\"
url = \"http://127.0.0.1:4001/v1\"
model = \"m\"

[[delegates]]
kind = \"openai\"
name = \"bad-values\"
url = \"http://127.0.0.1:4002/v1\"
model = \"m\"
api_key_env = \"NOT A NAME\"
[delegates.card]
skills = [\"chat\"]
quality = 2.0
price_per_mtok_output = -1.0

[[delegates]]
name = \"ldp-with-card\"
url = \"http://127.0.0.1:4003\"
model = \"m\"
[delegates.card]
skills = [\"chat\"]
";
    std::fs::write(&config, toml).unwrap();
    let out = process::run(&["check", "--config", config.to_str().unwrap()], &[]).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let f = config.display();
    let want = [
        format!("{f}:4: delegates[0].model: required for kind = \"openai\""),
        format!("{f}:11: delegates[1].card: required for kind = \"openai\""),
        format!("{f}:22: delegates[2].api_key_env: must be an environment variable name"),
        format!("{f}:25: delegates[2].card.quality: must be between 0 and 1, got 2"),
        format!("{f}:26: delegates[2].card.price_per_mtok_output: must be a number of USD"),
        format!("{f}:31: delegates[3].model: only for kind = \"openai\""),
        format!("{f}:32: delegates[3].card: only for kind = \"openai\""),
    ];
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), want.len(), "one line per problem:\n{stdout}");
    for (line, want) in lines.iter().zip(&want) {
        assert!(line.starts_with(want.as_str()), "{line:?} is not {want:?}…");
    }
}
