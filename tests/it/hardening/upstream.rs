//! Items 13 and 17, and the first 429: what a broken or chatty delegate answers is never the
//! client's own answer. Only the request's own refusals (400, 413, 422) are relayed; any
//! other status (a redirect, a 304 to a POST, a proxy asking for credentials) fails over and
//! counts against the delegate; a delegate's rate limit that leaves nobody else is a 429 with
//! its `Retry-After`; and clients are told the delegate's name and a generic reason, never its
//! address or the provider's words (the log and the ledger row keep those).

use super::liar::{ask, handshake, is_card, ldp_card, models, Liar, Lie};
use crate::support::openai::{declared, entry, start};
use crate::support::{card, TestGateway};
use ldp_gateway::sim::openai::OpenAiOptions;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A policy that prefers the better declared quality (the liar), cost and latency aside.
const QUALITY_FIRST: &str = "name = \"quality-first\"\n[weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n[balance]\ntolerance = 0.0\n[fallback]\nmax_attempts = 3\n";

/// 302 without `Location`, 304 without a body, 407 asking for proxy credentials, in turn.
fn broken(n: usize) -> Lie {
    match n % 3 {
        0 => Lie::new(302),
        1 => Lie::new(304),
        _ => Lie::new(407).header("proxy-authenticate", "Basic realm=\"corp\""),
    }
}

#[tokio::test]
async fn redirects_and_proxy_auth_from_an_openai_delegate_fail_over_and_count_against_it() {
    let n = Arc::new(AtomicUsize::new(0));
    let k = n.clone();
    let liar = Liar::start(move |a| match a.path.as_str() {
        "/v1/models" => models("m"),
        _ => broken(k.fetch_add(1, Ordering::SeqCst)),
    })
    .await;
    let good = start(OpenAiOptions::new("good-model")).await;
    let gw = TestGateway::builder()
        .entry(entry(
            "broken",
            &format!("{}/v1", liar.url),
            "m",
            declared(&["chat"], 0.99),
        ))
        .entry(entry(
            "good",
            &good.url(),
            "good-model",
            declared(&["chat"], 0.5),
        ))
        .policy("quality-first.toml", QUALITY_FIRST)
        .config(|c| c.policies.default = "quality-first".into())
        .spawn()
        .await;
    let c = gw.client();
    let mut ok = 0;
    for i in 0..30 {
        let r = c
            .post_json("/v1/chat/completions", &ask("chat", &format!("q{i}")))
            .await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert!(
            r.json["choices"][0]["message"]["content"].is_string(),
            "{}",
            r.text()
        );
        ok += 1;
    }
    let tried = n.load(Ordering::SeqCst);
    assert!(tried >= 3, "each broken status was met: {tried}");
    let snap = gw.delegate("broken").unwrap().snapshot();
    assert!(
        snap.ejections >= 1,
        "its failures count against it: {snap:?}"
    );
    let scrape = gw.metrics().await;
    assert!(
        scrape.sum("ldp_gateway_fallbacks_total{reason=\"http_3xx\"}") >= 2.0,
        "{scrape}"
    );
    assert!(scrape.sum("ldp_gateway_fallbacks_total{reason=\"http_4xx\"}") >= 1.0);
    eprintln!(
        "{ok} of 30 answered 200; the broken delegate answered {tried} times (302, 304, 407), failed over each time and was ejected ({} ejections)",
        snap.ejections
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn redirects_from_an_ldp_delegate_fail_over_and_count_against_it() {
    let n = Arc::new(AtomicUsize::new(0));
    let k = n.clone();
    // Its card is fine; every message is answered 302 without `Location` or 407.
    let liar = Liar::start(move |a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("broken", "echo", 0.99, 0.001));
        }
        match k.fetch_add(1, Ordering::SeqCst) % 2 {
            0 => Lie::new(302),
            _ => Lie::new(407),
        }
    })
    .await;
    let gw = TestGateway::builder()
        .delegate(&liar.url)
        .sim(SimOptions::new(card(
            "good",
            "default",
            &[("echo", 0.5)],
            &["text"],
        )))
        .policy("quality-first.toml", QUALITY_FIRST)
        .config(|c| c.policies.default = "quality-first".into())
        .spawn()
        .await;
    let c = gw.client();
    for i in 0..10 {
        let session = c.accepted(json!({})).await;
        let a = c.task(&session, "echo", json!({"n": i}), "text").await;
        assert_eq!(a["type"], "TASK_RESULT", "task {i}: {a}");
    }
    let tried = n.load(Ordering::SeqCst);
    assert!(tried >= 2, "{tried}");
    let snap = gw.delegate("d0").unwrap().snapshot();
    assert!(snap.ejections >= 1, "{snap:?}");
    eprintln!(
        "10 of 10 LDP tasks answered; the delegate answering 302/407 was asked {tried} times and ejected"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn the_first_429_that_leaves_no_other_delegate_is_a_429_with_its_retry_after() {
    let liar = Liar::start(|a| match a.path.as_str() {
        "/v1/models" => models("m"),
        _ => Lie::new(429)
            .header("retry-after", "7")
            .json(&json!({"error": {"message": "slow down", "type": "rate_limit_error"}})),
    })
    .await;
    let gw = TestGateway::builder()
        .entry(entry(
            "busy",
            &format!("{}/v1", liar.url),
            "m",
            declared(&["chat"], 0.9),
        ))
        .spawn()
        .await;
    let c = gw.client();
    let first = c
        .post_json("/v1/chat/completions", &ask("chat", "hi"))
        .await;
    assert_eq!(first.status, 429, "{}", first.text());
    assert_eq!(first.retry_after(), Some(7), "{:?}", first.headers);
    assert_eq!(
        first.json["error"]["code"],
        "rate_limit_exceeded",
        "{}",
        first.text()
    );
    let second = c
        .post_json("/v1/chat/completions", &ask("chat", "hi"))
        .await;
    assert_eq!(second.status, 429, "{}", second.text());
    let wait = second.retry_after().expect("a Retry-After");
    assert!((1..=7).contains(&wait), "{wait}");
    assert_eq!(liar.asked("/v1/chat/completions").len(), 1);
    eprintln!(
        "first 429 (Retry-After: 7) → 429, Retry-After 7; the next → 429, Retry-After {wait}"
    );
    gw.shutdown().await;
}

/// What must never reach a client: the provider's hint of the operator's key, and the
/// delegates' internal addresses.
const CANARY: &str = "sk-live-CANARY";

/// Every leak of `liars`' addresses or the canary in `text`.
fn leaks(text: &str, liars: &[&Liar]) -> Vec<String> {
    let mut found: Vec<String> = liars
        .iter()
        .filter(|l| text.contains(l.authority()))
        .map(|l| l.authority().to_owned())
        .collect();
    if text.contains("CANARY") {
        found.push("CANARY".into());
    }
    found
}

#[tokio::test]
async fn clients_get_a_delegates_name_and_a_generic_reason_never_its_address_or_words() {
    // An OpenAI-backed delegate whose provider refuses the operator's key, hinting at it.
    let provider = Liar::start(|a| match a.path.as_str() {
        "/v1/models" => models("m"),
        _ => Lie::new(401).json(&json!({"error": {
            "message": format!("Incorrect API key provided: {CANARY}...xyz. You can find your API key at https://platform.openai.com/account/api-keys."),
            "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})),
    })
    .await;
    // An LDP delegate whose every task fails, its message naming its database.
    let ldp = Liar::start(|a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("chatty", "echo", 0.9, 0.001));
        }
        handshake("chatty", a).unwrap_or_else(|| {
            Lie::new(500).json(&json!({"error": {
                "code": "INTERNAL", "category": "runtime", "severity": "error",
                "retryable": true,
                "message": "postgres://app:CANARY-db-password@10.1.2.3/tasks is down"}}))
        })
    })
    .await;
    let gw = TestGateway::builder()
        .entry(entry(
            "provider",
            &format!("{}/v1", provider.url),
            "m",
            declared(&["chat"], 0.9),
        ))
        .delegate(&ldp.url)
        .spawn()
        .await;
    let liars = [&provider, &ldp];
    let c = gw.client();
    let mut told = Vec::new();

    // The OpenAI ingress, whole and streamed.
    let whole = c
        .post_json("/v1/chat/completions", &ask("chat", "hi"))
        .await;
    assert_eq!(whole.status, 502, "{}", whole.text());
    let streamed = c
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(streamed.status, 502, "{}", streamed.text());
    // LDP: the OpenAI-backed delegate and the LDP one, by message and by stream.
    let session = c.accepted(json!({})).await;
    let chat = c.task(&session, "chat", json!("hi"), "text").await;
    let echo = c.task(&session, "echo", json!("hi"), "text").await;
    let env = c.envelope(
        &session,
        crate::support::client::submit_body("echo", json!("hi")),
    );
    let (status, events) = c.stream(&env).await;
    assert_eq!(status, 200);
    for (what, text) in [
        ("ingress", whole.text()),
        ("ingress stream", streamed.text()),
        ("LDP chat", chat.to_string()),
        ("LDP echo", echo.to_string()),
        ("LDP stream", Value::from(events.clone()).to_string()),
    ] {
        let found = leaks(&text, &liars);
        assert!(found.is_empty(), "{what} leaked {found:?}: {text}");
        told.push((what, text));
    }
    let message = |v: &Value| {
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let m = message(&whole.json);
    assert!(m.contains("'provider'") && m.contains("HTTP 401"), "{m}");
    assert_eq!(chat["type"], "TASK_FAILED", "{chat}");
    assert!(message(&chat).contains("'provider'"), "{chat}");
    assert_eq!(echo["type"], "TASK_FAILED", "{echo}");
    let m = message(&echo);
    assert!(m.contains("'d1'") && m.contains("HTTP 500"), "{m}");

    // The operator keeps the whole story in the ledger row.
    let id = whole.headers["x-ldp-task-id"].to_str().unwrap();
    let row = gw.ledger_row(id).await;
    let routing = row.routing.get();
    assert!(routing.contains("CANARY"), "{routing}");
    assert!(routing.contains(provider.authority()), "{routing}");
    let row = gw.ledger_row(echo["task_id"].as_str().unwrap()).await;
    assert!(
        row.routing.get().contains("CANARY-db-password"),
        "{:?}",
        row.routing
    );
    eprintln!("told clients (no address, no provider text):");
    for (what, text) in &told {
        eprintln!("  {what}: {}", &text[..text.len().min(300)]);
    }
    gw.shutdown().await;
}
