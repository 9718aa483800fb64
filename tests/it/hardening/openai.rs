//! The OpenAI path under attack (issue 24, round two): OpenAI-backed delegates that stream
//! without end, report absurd usage, split characters across TCP writes or call tools, and
//! clients that leave, ask for more than was held, or for several choices. The misbehaving
//! upstreams are written here on purpose (`support::rogue`); the clients are real (raw HTTP,
//! the test's LDP client, the `openai` SDK).

use crate::support::openai::{chunks, declared, entry, openai_python, start, streamed_text};
use crate::support::process::{output_within, py_script, text};
use crate::support::rogue::{
    chunk, completion, split_characters, usage_chunk, Answer, RogueOpenAi, SplittingRelay, DONE,
};
use crate::support::{eventually, sim, Card, Client, Resp, TestGateway};
use ldp_gateway::config::{BudgetConfig, DeclaredCard, TenantConfig};
use ldp_gateway::ldp::{
    Body, CapabilityManifest, Envelope, IdentityCard, Json, PayloadMode, Provenance,
};
use ldp_gateway::provenance::{digest, LedgerRow, Outcome};
use ldp_gateway::sim::openai::OpenAiOptions;
use ldp_gateway::sim::SimOptions;
use ldp_gateway::upstream::DEFAULT_MAX_RESPONSE_BYTES;
use serde_json::{json, Value};
use std::time::Duration;

const CHAT: &str = "chat";
/// The rogue's model.
const ROGUE: &str = "rogue";
/// The chat completions route.
const COMPLETIONS: &str = "/v1/chat/completions";
/// How long a gateway may take to notice and settle what the test did (a generous ceiling).
const SETTLED_WITHIN: Duration = Duration::from_secs(30);

/// A declared card for [`CHAT`] at these prices (USD per million tokens in and out).
fn priced(input: f64, output: f64) -> DeclaredCard {
    DeclaredCard {
        price_per_mtok_input: Some(input),
        price_per_mtok_output: Some(output),
        ..declared(&[CHAT], 0.8)
    }
}

/// The tenant `payer`, holding `key`, with `budget`.
fn payer(key: &str, budget: BudgetConfig) -> TenantConfig {
    let mut t: TenantConfig = serde_json::from_value(json!({
        "name": "payer",
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": ["default"],
    }))
    .unwrap();
    t.budget = budget;
    t
}

fn daily(usd: f64) -> BudgetConfig {
    BudgetConfig {
        usd_per_day: Some(usd),
        ..BudgetConfig::default()
    }
}

/// A completion request of [`CHAT`] with one user message.
fn ask(text: &str) -> Value {
    json!({"model": CHAT, "messages": [{"role": "user", "content": text}]})
}

/// The same, streamed, usage included.
fn ask_streamed(text: &str) -> Value {
    let mut a = ask(text);
    a["stream"] = json!(true);
    a["stream_options"] = json!({"include_usage": true});
    a
}

fn header<'r>(r: &'r Resp, name: &str) -> &'r str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name}: {:?}", r.headers))
}

/// The ledger's spend of `rows`.
fn spent(rows: &[LedgerRow]) -> f64 {
    rows.iter().filter_map(|r| r.cost_usd).sum()
}

// ---------------------------------------------------------------------------------------
// Item 2: a streamed completion is capped, and not read for nobody
// ---------------------------------------------------------------------------------------

/// An upstream that streams 16 KiB deltas without end is read up to the answer cap (the
/// whole answer's, 8 MiB) and no further: the client gets the deltas then an error (no
/// `[DONE]`), the connection is dropped, and what was used is charged and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_openai_stream_is_cut_at_the_answer_cap() {
    // The rogue's own end: far past the cap (the old gateway read all of it).
    const LIMIT: u64 = 96 << 20;
    let delta = chunk(json!({"content": "x".repeat(16 * 1024)}), None);
    let rogue = RogueOpenAi::start(move |_| Answer::Endless {
        event: delta.clone(),
        limit: LIMIT,
    })
    .await;
    let key = crate::support::unique("sk");
    let gw = TestGateway::builder()
        .entry(entry("rogue", &rogue.url(), ROGUE, priced(1.0, 1.0)))
        .tenant(payer(&key, daily(100.0)))
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));

    let r = c.post_json(COMPLETIONS, &ask_streamed("never stop")).await;
    assert_eq!(r.status, 200);
    let (events, done) = chunks(&r);
    assert!(!done, "an answer cut short is not finished");
    let last = events.last().unwrap();
    assert!(last["error"]["message"].is_string(), "{last}");
    let relayed = streamed_text(&events).len();
    let cap = DEFAULT_MAX_RESPONSE_BYTES;
    assert!(
        relayed <= cap && relayed > cap / 2,
        "{relayed} bytes relayed, cap {cap}"
    );

    // The gateway let go of the stream long before the rogue's end.
    assert!(
        eventually(SETTLED_WITHIN, || rogue.ends() == (1, 0)).await,
        "the rogue's reader went away: {:?}",
        rogue.ends()
    );
    let written = rogue.streamed();
    assert!(
        written < 4 * cap as u64,
        "{written} bytes written before the gateway let go"
    );

    let row = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    assert_eq!(row.outcome, Outcome::Failed);
    let why = row.error_message.clone().unwrap_or_default();
    assert!(why.contains(&format!("larger than {cap} bytes")), "{why}");
    // Charged within what the request allowed (the default 1,024 output tokens), though the
    // rogue sent far more.
    let tokens = row.tokens.expect("tokens recorded");
    assert!(tokens > 1024 && tokens <= 1024 + 64, "{tokens} tokens");
    let cost = row.cost_usd.expect("cost recorded");
    assert!(cost > 0.0);
    assert!(
        (gw.spent_today("payer") - cost).abs() < 1e-9,
        "settled to what was used: {} vs {cost}",
        gw.spent_today("payer")
    );
    eprintln!(
        "endless stream: {} MiB written by the upstream (its end: {} MiB), {} MiB relayed, {tokens} tokens / {cost:.6} USD recorded",
        written >> 20,
        LIMIT >> 20,
        relayed >> 20
    );
    gw.shutdown().await;
}

/// Two clients leave an endless stream (one on the OpenAI ingress, one on `/ldp/stream`):
/// each time the gateway stops reading upstream, and the task is settled and recorded with
/// what it used (a `CANCELLED` row, its tokens and cost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_stream_nobody_listens_to_is_stopped_settled_and_recorded() {
    const LIMIT: u64 = 32 << 20;
    // Small deltas: many events to relay, so that the gateway reaches no cap before it sees
    // its client gone.
    let delta = chunk(json!({"content": "y".repeat(64)}), None);
    let rogue = RogueOpenAi::start(move |_| Answer::Endless {
        event: delta.clone(),
        limit: LIMIT,
    })
    .await;
    let key = crate::support::unique("sk");
    let gw = TestGateway::builder()
        .entry(entry("rogue", &rogue.url(), ROGUE, priced(1.0, 1.0)))
        .tenant(payer(&key, daily(100.0)))
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));

    // The ingress: the first bytes, then the client is gone.
    let mut resp = c
        .http
        .post(c.url(COMPLETIONS))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body(ask_streamed("talk forever").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ingress_task = resp.headers()["x-ldp-task-id"].to_str().unwrap().to_owned();
    assert!(resp.chunk().await.unwrap().is_some());
    drop(resp);
    assert!(
        eventually(SETTLED_WITHIN, || rogue.ends().0 == 1).await,
        "the gateway read on for nobody: {:?}, {} bytes",
        rogue.ends(),
        rogue.streamed()
    );
    let after_ingress = rogue.streamed();

    // `/ldp/stream`: "routed", a delta, then the client is gone.
    let sid = c
        .accepted(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let body = json!({"type": "TASK_SUBMIT", "task_id": "t-left", "skill": CHAT,
        "input": "talk forever"});
    let mut events = c.open_stream(&c.envelope_json(&sid, body, "text")).await;
    for _ in 0..2 {
        assert!(events.next().await.is_some());
    }
    drop(events);
    assert!(
        eventually(SETTLED_WITHIN, || rogue.ends().0 == 2).await,
        "the gateway read on for nobody: {:?}",
        rogue.ends()
    );
    assert_eq!(rogue.ends().1, 0, "no stream was read to the rogue's end");

    let mut total = 0.0;
    for task in [ingress_task.as_str(), "t-left"] {
        let row = gw.ledger_row(task).await;
        assert_eq!(row.outcome, Outcome::Failed, "{row:?}");
        assert_eq!(row.error_code.as_deref(), Some("CANCELLED"), "{row:?}");
        assert!(row.tokens.is_some_and(|t| t > 0), "{row:?}");
        let cost = row.cost_usd.expect("what was used is recorded");
        assert!(cost > 0.0, "{row:?}");
        total += cost;
    }
    let settled = eventually(SETTLED_WITHIN, || {
        (gw.spent_today("payer") - total).abs() < 1e-9
    })
    .await;
    assert!(
        settled,
        "settled to what was used: {} vs {total}",
        gw.spent_today("payer")
    );
    assert!(
        gw.delegate("rogue").unwrap().is_healthy(),
        "a client leaving is no fault"
    );
    eprintln!(
        "two clients left: the upstream wrote {} KiB then {} KiB before the gateway let go (its end: {} MiB); {total:.6} USD settled and recorded",
        after_ingress >> 10,
        (rogue.streamed() - after_ingress) >> 10,
        LIMIT >> 20
    );
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Item 4: the upstream request allows no more than the budget hold assumed
// ---------------------------------------------------------------------------------------

/// Each completion's request carries the output bound its budget hold assumed
/// (`openai.default_max_tokens`, or a client's larger `max_tokens`, which is held for; 0,
/// which some servers read as none, is refused): 50
/// concurrent requests with long prompts, whose echo would cost 2 USD each unbounded, stay
/// within a 1 USD daily budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_openai_request_allows_no_more_output_than_its_budget_hold() {
    let (pin, pout, limit) = (10.0, 2000.0, 1.0);
    let oa = start(OpenAiOptions::new("sim-mini")).await;
    let key = crate::support::unique("sk");
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "sim-mini", priced(pin, pout)))
        .tenant(payer(&key, daily(limit)))
        .config(|c| c.openai.default_max_tokens = 16)
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));

    // A client's own bound is held for and sent as it named it; one too large to hold is
    // refused before anything is sent.
    let mut a = ask("hi");
    a["max_tokens"] = json!(100);
    assert_eq!(c.post_json(COMPLETIONS, &a).await.status, 200);
    let mut a = ask("hi");
    a["max_completion_tokens"] = json!(50);
    assert_eq!(c.post_json(COMPLETIONS, &a).await.status, 200);
    for param in ["max_tokens", "max_completion_tokens"] {
        let mut a = ask("hi");
        a[param] = json!(0);
        let r = c.post_json(COMPLETIONS, &a).await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(
            r.json["error"]["param"],
            param,
            "no bound is no bound: {}",
            r.text()
        );
    }
    let mut a = ask("hi");
    a["max_tokens"] = json!(10_000_000);
    let r = c.post_json(COMPLETIONS, &a).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json["error"]["code"], "budget_exceeded", "{}", r.text());
    let sent = oa.requests();
    assert_eq!(
        sent.len(),
        2,
        "neither 0 nor one too large to hold was sent"
    );
    assert_eq!(
        (&sent[0]["max_tokens"], sent[0].get("max_completion_tokens")),
        (&json!(100), None)
    );
    assert_eq!(
        (sent[1].get("max_tokens"), &sent[1]["max_completion_tokens"]),
        (None, &json!(50))
    );

    // 50 at once, 1,000 prompt tokens each: the echo would be 1,002 tokens (2 USD); the
    // hold assumed 16.
    let prompt = "p".repeat(4000);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (c, body) = (c.clone(), ask(&prompt));
            tokio::spawn(async move { c.post_json(COMPLETIONS, &body).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    // The budget first: the ledger's spend.
    let rows = gw.ledger("tenant=payer&limit=1000").await;
    let total = spent(&rows);
    assert!(total <= limit + 1e-9, "spent {total} of {limit}");
    let mut answered = 0;
    for r in &answers {
        match r.status {
            200 => {
                answered += 1;
                let choice = &r.json["choices"][0];
                assert_eq!(choice["finish_reason"], "length", "{choice}");
                assert!(r.json["usage"]["completion_tokens"].as_u64() <= Some(16));
            }
            403 => assert_eq!(r.json["error"]["code"], "budget_exceeded", "{}", r.text()),
            s => panic!("{s}: {}", r.text()),
        }
    }
    assert!(answered > 0, "some ran");
    for body in &oa.requests()[2..] {
        assert_eq!(body["max_tokens"], 16, "the hold's bound is sent: {body}");
    }
    eprintln!(
        "50 concurrent requests (unbounded: 2.01 USD each) against {limit} USD/day: {answered} answered, {total:.4} USD spent"
    );
    gw.shutdown().await;
    oa.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Item 5: reported usage is bounded, flagged and saturated
// ---------------------------------------------------------------------------------------

/// A delegate that bills "hello" as 2^64 − 1, 10^9 or 10^30 tokens (whole or at the end of a
/// stream) is charged within what the request allowed (its `max_tokens` out, its own bytes
/// in): every row keeps a count that is neither 0 nor wrapped, and says it was clamped; the
/// clamps are counted; `ldp_gateway_tokens_total` equals the rows; the tenant is not locked
/// out of its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_usage_is_bounded_by_the_request_flagged_and_saturated() {
    let max = u64::MAX;
    let usages = [
        json!({"prompt_tokens": max, "completion_tokens": max, "total_tokens": max}),
        json!({"prompt_tokens": 1_000_000_000u64, "completion_tokens": 1_000_000_000u64,
            "total_tokens": 2_000_000_000u64}),
        json!({"prompt_tokens": 1e30, "completion_tokens": 1e30, "total_tokens": -1}),
    ];
    let rogue = RogueOpenAi::start(move |req| {
        let case: usize = req["messages"][0]["content"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let usage = usages[case % usages.len()].clone();
        if req["stream"] == true {
            Answer::Parts(vec![
                chunk(json!({"role": "assistant", "content": ""}), None),
                chunk(json!({"content": "hello"}), None),
                chunk(json!({}), Some("stop")),
                usage_chunk(usage),
                DONE.to_vec(),
            ])
        } else {
            Answer::Json(completion("hello", usage))
        }
    })
    .await;
    let key = crate::support::unique("sk");
    let gw = TestGateway::builder()
        .entry(entry("rogue", &rogue.url(), ROGUE, priced(0.15, 0.60)))
        .tenant(payer(&key, daily(1.0)))
        .config(|c| c.openai.default_max_tokens = 64)
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));

    let mut tasks = Vec::new();
    for (case, stream) in [(0, false), (1, false), (2, false), (0, true)] {
        let body = if stream {
            ask_streamed(&case.to_string())
        } else {
            ask(&case.to_string())
        };
        let r = c.post_json(COMPLETIONS, &body).await;
        assert_eq!(r.status, 200, "case {case}: {}", r.text());
        if !stream {
            let usage = &r.json["usage"];
            assert!(usage["completion_tokens"].as_u64() <= Some(64), "{usage}");
            assert!(usage["prompt_tokens"].as_u64() <= Some(4096), "{usage}");
        }
        tasks.push(header(&r, "x-ldp-task-id").to_owned());
    }
    // The request's own bytes bound the prompt: the rogue saw each request.
    let request_bytes = rogue
        .requests()
        .iter()
        .map(|r| r.to_string().len() as u64)
        .max()
        .unwrap();
    let mut total = 0u64;
    for task in &tasks {
        let row = gw.ledger_row(task).await;
        assert_eq!(row.outcome, Outcome::Result, "{row:?}");
        let tokens = row.tokens.unwrap();
        assert!(
            tokens > 0 && tokens <= 64 + request_bytes + 64,
            "{tokens} tokens stored"
        );
        assert!(
            row.routing.get().contains("usage clamped"),
            "flagged in the row: {}",
            row.routing.get()
        );
        total += tokens;
    }
    let m = gw.metrics().await;
    assert_eq!(
        m.sum("ldp_gateway_usage_clamped_total{delegate=\"rogue\"}"),
        4.0
    );
    let counted = m.sum("ldp_gateway_tokens_total{delegate=\"rogue\",tenant=\"payer\"}");
    assert_eq!(counted, total as f64, "the counter is the rows' sum");
    let day = gw.spent_today("payer");
    assert!(day < 0.01, "not locked out: {day} USD spent");
    assert_eq!(c.post_json(COMPLETIONS, &ask("0")).await.status, 200);
    eprintln!("2^64-1, 1e9 and 1e30 reported tokens: {total} tokens stored over 4 rows, {day:.6} USD charged");
    gw.shutdown().await;
}

/// An LDP delegate that reports 2^64 − 1 tokens for its first task, 5 for the others.
async fn token_liar(card: IdentityCard) -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::{get, post};
    use std::sync::atomic::{AtomicU64, Ordering};
    let calls = std::sync::Arc::new(AtomicU64::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shown = serde_json::to_value(&card).unwrap();
    let app = axum::Router::new()
        .route(
            "/.well-known/ldp-identity",
            get({
                let shown = shown.clone();
                move || async move { axum::Json(shown) }
            }),
        )
        .route(
            "/ldp/identity",
            get(move || async move { axum::Json(shown) }),
        )
        .route(
            "/ldp/messages",
            post(move |body: axum::body::Bytes| {
                let (card, calls) = (card.clone(), calls.clone());
                async move {
                    let env = Envelope::from_slice(&body).unwrap();
                    let id = card.delegate_id.to_string();
                    let answer = match &env.body {
                        Body::Hello { .. } => Body::CapabilityManifest {
                            capabilities: CapabilityManifest {
                                capabilities: card.capabilities.clone(),
                                supported_modes: vec![PayloadMode::Text],
                            },
                        },
                        Body::SessionPropose { .. } => Body::SessionAccept {
                            session_id: "liar-session".into(),
                            negotiated_mode: PayloadMode::Text,
                            fallback_chain: Vec::new(),
                        },
                        Body::TaskSubmit { task_id, .. } => {
                            let mut p = Provenance::new(
                                card.delegate_id.clone(),
                                card.model_version.clone(),
                                PayloadMode::Text,
                            );
                            // 2^64 − 1 first, then a plain count that would wrap it.
                            let first = calls.fetch_add(1, Ordering::SeqCst) == 0;
                            p.tokens_used = Some(if first { u64::MAX } else { 5 });
                            Body::TaskResult {
                                task_id: task_id.clone(),
                                output: Json::from(json!("counted")),
                                provenance: Some(p),
                            }
                        }
                        _ => Body::SessionClose { reason: None },
                    };
                    let reply = env.reply(&id, answer, PayloadMode::Text);
                    axum::Json(serde_json::to_value(&reply).unwrap())
                }
            }),
        );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// An LDP delegate's 2^64 − 1 tokens are stored as the ledger's largest integer (not 0, as a
/// wrapped i64 read back was), and `ldp_gateway_tokens_total` saturates there instead of
/// wrapping round to the next task's count.
#[tokio::test]
async fn an_absurd_token_count_is_stored_and_counted_saturated() {
    let card = Card::new("liar").skill("s", 0.8).build();
    let (url, liar) = token_liar(card).await;
    let gw = TestGateway::builder().delegate(&url).spawn().await;
    let c = gw.client();
    let sid = c
        .accepted(json!({"preferred_payload_modes": ["text"]}))
        .await;
    for want in [i64::MAX as u64, 5] {
        let a = c.task(&sid, "s", json!("count me"), "text").await;
        assert_eq!(a["type"], "TASK_RESULT", "{a}");
        let row = gw.ledger_row(a["task_id"].as_str().unwrap()).await;
        assert_eq!(row.tokens, Some(want), "{row:?}");
    }
    let m = gw.metrics().await;
    let counted = m.sum("ldp_gateway_tokens_total{delegate=\"d0\",tenant=\"anonymous\"}");
    assert!(counted >= 1.8e19, "saturated, not wrapped: {counted}");
    eprintln!(
        "2^64 - 1 then 5 tokens: {} and 5 stored, the counter at {counted}",
        i64::MAX
    );
    gw.shutdown().await;
    liar.abort();
}

// ---------------------------------------------------------------------------------------
// Item 10: a character split across network reads arrives whole
// ---------------------------------------------------------------------------------------

const SPLIT_TEXT: &str = "héllo wörld ✓ 你好 🎉";

/// An answer whose characters each straddle two TCP writes reaches the client whole, on the
/// ingress stream and in `/ldp/stream` results (an OpenAI-backed delegate's SSE, read by
/// `transport/http.rs`; an LDP delegate's, read by `transport/stream.rs`), and the ledger
/// hashes the right text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_split_mid_character_by_the_network_arrives_whole() {
    let rogue = RogueOpenAi::start(|req| {
        let mut sse = chunk(json!({"role": "assistant", "content": ""}), None);
        let (a, b) = SPLIT_TEXT.split_at(7);
        sse.extend(chunk(json!({"content": a}), None));
        sse.extend(chunk(json!({"content": b}), None));
        sse.extend(chunk(json!({}), Some("stop")));
        sse.extend(usage_chunk(
            json!({"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}),
        ));
        sse.extend_from_slice(DONE);
        if req["stream"] == true {
            Answer::Parts(split_characters(&sse))
        } else {
            Answer::Json(completion(SPLIT_TEXT, json!({})))
        }
    })
    .await;
    let streams = Card::new("ldp-stream")
        .capability(json!({"name": "s", "quality": {"quality_score": 0.9,
            "cost_per_call_usd": 0.001, "latency_p50_ms": 10, "supports_streaming": true}}))
        .build();
    let ldp = sim(SimOptions::new(streams)).await;
    let relay = SplittingRelay::start(ldp.addr()).await;
    let gw = TestGateway::builder()
        .entry(entry("rogue", &rogue.url(), ROGUE, declared(&[CHAT], 0.8)))
        .delegate(&relay.url())
        .spawn()
        .await;
    let c = gw.client();
    let whole_digest = digest(&Json::from(json!(SPLIT_TEXT)));

    // The ingress stream.
    let r = c.post_json(COMPLETIONS, &ask_streamed("split me")).await;
    let (events, done) = chunks(&r);
    assert!(done, "{}", r.text());
    assert_eq!(streamed_text(&events), SPLIT_TEXT);
    let row = gw.ledger_row(header(&r, "x-ldp-task-id")).await;
    assert_eq!(
        row.output_sha256.as_deref(),
        Some(whole_digest.as_str()),
        "hashed whole"
    );

    // `/ldp/stream` to the OpenAI-backed delegate: the deltas and the result.
    let sid = c
        .accepted(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let body = json!({"type": "TASK_SUBMIT", "task_id": "t-oa", "skill": CHAT,
        "input": "split me"});
    let events = c
        .open_stream(&c.envelope_json(&sid, body, "text"))
        .await
        .rest()
        .await;
    let result = events.last().unwrap();
    assert_eq!(result["body"]["type"], "TASK_RESULT", "{events:#?}");
    assert_eq!(result["body"]["output"], SPLIT_TEXT);
    let deltas: String = events
        .iter()
        .filter(|e| e["body"]["type"] == "TASK_UPDATE")
        .filter_map(|e| e["body"]["message"].as_str())
        .filter(|m| !m.starts_with("routed to"))
        .collect();
    assert_eq!(deltas, SPLIT_TEXT);
    let row = gw.ledger_row("t-oa").await;
    assert_eq!(row.output_sha256.as_deref(), Some(whole_digest.as_str()));

    // `/ldp/stream` to an LDP delegate that streams, through the splitting relay.
    let body = json!({"type": "TASK_SUBMIT", "task_id": "t-ldp", "skill": "s",
        "input": SPLIT_TEXT});
    let events = c
        .open_stream(&c.envelope_json(&sid, body, "text"))
        .await
        .rest()
        .await;
    let result = events.last().unwrap();
    assert_eq!(result["body"]["type"], "TASK_RESULT", "{events:#?}");
    let out = &result["body"]["output"];
    let said = out["text"].as_str().unwrap();
    assert!(said.ends_with(SPLIT_TEXT), "{said:?}");
    assert!(!out.to_string().contains('\u{fffd}'), "{out}");
    assert!(
        events.len() >= 3,
        "the delegate's own updates were streamed: {events:#?}"
    );
    let row = gw.ledger_row("t-ldp").await;
    assert_eq!(
        row.output_sha256.as_deref(),
        Some(digest(&Json::from(out.clone())).as_str()),
        "the row hashes the output as delivered"
    );
    eprintln!(
        "{SPLIT_TEXT:?}: every character split across two writes; 0 U+FFFD on the ingress stream and both /ldp/stream readers"
    );
    gw.shutdown().await;
    ldp.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Item 14: tool calls reach the ingress's client, whole and streamed
// ---------------------------------------------------------------------------------------

/// The `openai` SDK's tool-calling flow through the ingress to an upstream that calls a tool
/// (the simulated OpenAI server): the call arrives whole and as streamed deltas (the SDK's
/// own accumulator and streaming helper rebuild it), the tool's result goes back and is
/// answered, and the legacy `function_call` passes the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_pass_through_the_ingress_whole_and_streamed_with_the_openai_sdk() {
    let Some(py) = openai_python().await else {
        return;
    };
    let oa = start(OpenAiOptions::new("sim-mini")).await;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "sim-mini", declared(&[CHAT], 0.8)))
        .spawn()
        .await;
    let mut cmd = py_script(&py, "openai_tools.py");
    cmd.args(["--base-url", &format!("{}/v1", gw.ldp_url())])
        .args(["--api-key", "unused", "--model", CHAT]);
    let out = output_within(cmd, Duration::from_secs(180)).await;
    let stdout = text(&out.stdout);
    let o: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line: {stdout}\n{}", text(&out.stderr)));
    assert!(out.status.success(), "{o:#}\nstderr: {}", text(&out.stderr));

    let arguments = json!({"text": "What is the weather in Paris?"}).to_string();
    let called = |v: &Value, what: &str| {
        let calls = v["tool_calls"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: {v}"));
        assert_eq!(calls.len(), 1, "{what}: {v}");
        let call = &calls[0];
        assert_eq!(call["type"], "function", "{what}: {call}");
        assert_eq!(call["name"], "get_weather", "{what}: {call}");
        assert_eq!(call["arguments"], json!(arguments), "{what}: {call}");
        assert!(
            call["id"].as_str().is_some_and(|i| i.starts_with("call_")),
            "{what}: {call}"
        );
        assert_eq!(v["finish_reason"], "tool_calls", "{what}: {v}");
    };
    called(&o["whole"], "whole");
    assert_eq!(o["whole"]["content"], Value::Null, "{}", o["whole"]);
    called(&o["streamed"], "streamed");
    assert!(
        o["streamed"]["tool_deltas"].as_u64() >= Some(2),
        "{}",
        o["streamed"]
    );
    called(&o["helper"], "the streaming helper");
    let kinds = o["helper"]["events"].as_array().unwrap();
    assert!(
        kinds.contains(&json!("tool_calls.function.arguments.done")),
        "{kinds:?}"
    );
    assert_eq!(o["answered"]["content"], "echo: sunny, 21 °C", "{o:#}");
    assert_eq!(o["answered"]["finish_reason"], "stop");
    // The tool's result went upstream with its call's id.
    let followed = &oa.requests()[1]["messages"];
    assert_eq!(followed[2]["role"], "tool", "{followed}");
    assert_eq!(
        followed[1]["tool_calls"][0]["id"],
        followed[2]["tool_call_id"]
    );

    let legacy = json!({"name": "get_weather", "arguments": arguments});
    assert_eq!(
        o["legacy"]["finish_reason"], "function_call",
        "{}",
        o["legacy"]
    );
    assert_eq!(o["legacy"]["whole"], legacy);
    assert_eq!(o["legacy"]["streamed"], legacy);
    eprintln!(
        "openai SDK {}: tool_calls and function_call carried whole and streamed",
        o["sdk_version"]
    );
    gw.shutdown().await;
    oa.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// Item 15 and `n`: what one ingress request may cost, and how many choices it gets
// ---------------------------------------------------------------------------------------

/// `usd_per_session` caps each ingress request (its hold), not the tenant's ingress traffic
/// together: five requests, each well within it and together past it, all pass; one whose
/// hold alone is past it is refused with 403, saying so.
#[tokio::test]
async fn usd_per_session_caps_each_ingress_request_alone() {
    let oa = start(OpenAiOptions::new("sim-mini")).await;
    let key = crate::support::unique("sk");
    let budget = BudgetConfig {
        usd_per_session: Some(0.025),
        ..BudgetConfig::default()
    };
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "sim-mini", priced(10.0, 1000.0)))
        .tenant(payer(&key, budget))
        .config(|c| c.openai.default_max_tokens = 16)
        .spawn()
        .await;
    let c = gw.client().with_key(Some(&key));
    // Each holds 1.25 × (3 × 10 + 16 × 1000) / 1e6 ≈ 0.02 and costs ≈ 0.005: together 0.025.
    for i in 0..5 {
        let r = c
            .post_json(COMPLETIONS, &ask(&format!("app {i} says hi")))
            .await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    let rows = gw.ledger("tenant=payer&limit=100").await;
    let total = spent(&rows);
    assert!(total >= 0.02, "together past one session's cap: {total}");

    let mut big = ask("hi");
    big["max_tokens"] = json!(10_000);
    let r = c.post_json(COMPLETIONS, &big).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json["error"]["code"], "budget_exceeded");
    let m = r.json["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("session budget") && m.contains("per request"),
        "{m}"
    );
    assert_eq!(oa.stats().requests, 5, "the refused one was not sent");
    eprintln!("usd_per_session 0.025: 5 ingress requests answered, {total:.4} USD together; one holding 12.5 USD refused");
    gw.shutdown().await;
    oa.shutdown().await;
}

/// `n` > 1 would be charged for every choice and answered with one: it is refused with 400
/// in OpenAI's shape, naming `n`, before anything is sent or charged; `n: 1` is fine.
#[tokio::test]
async fn n_above_one_is_refused_in_openais_error_shape() {
    let oa = start(OpenAiOptions::new("sim-mini")).await;
    let gw = TestGateway::builder()
        .entry(entry("mini", &oa.url(), "sim-mini", declared(&[CHAT], 0.8)))
        .spawn()
        .await;
    let c: Client = gw.client();
    for n in [json!(2), json!(0), json!(1.5)] {
        let mut a = ask("two please");
        a["n"] = n.clone();
        let r = c.post_json(COMPLETIONS, &a).await;
        assert_eq!(r.status, 400, "n = {n}: {}", r.text());
        let e = &r.json["error"];
        assert_eq!(e["type"], "invalid_request_error", "{e}");
        assert_eq!(e["param"], "n", "{e}");
    }
    assert_eq!(oa.stats().requests, 0, "nothing sent");
    let mut a = ask("one please");
    a["n"] = json!(1);
    assert_eq!(c.post_json(COMPLETIONS, &a).await.status, 200);
    gw.shutdown().await;
    oa.shutdown().await;
}
