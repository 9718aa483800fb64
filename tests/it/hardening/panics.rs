//! Item 1: a `Retry-After` no `Duration` can hold (`1e30`) on any non-2xx upstream answer —
//! an LDP card or task answer, an OpenAI delegate's `/models` or completion — panicked the
//! gateway: `serve` exited 101 at start, the card poller died for the whole fleet at run time,
//! and tasks answered HTTP 500 with the panic text, no ledger row and a budget hold kept until
//! a restart. Each place is tried here, at start and at run time.

use super::liar::{ask, handshake, is_card, ldp_card, models, Liar, Lie};
use crate::support::openai::{declared, entry, start};
use crate::support::{card, eventually, Client, TestGateway};
use ldp_gateway::config::{BudgetConfig, TenantConfig};
use ldp_gateway::sim::openai::OpenAiOptions;
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Past anything a `Duration` holds.
const HUGE: &str = "1e30";

/// A policy that prefers the better declared quality (the liar), cost and latency aside.
const QUALITY_FIRST: &str = "name = \"quality-first\"\n[weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n[balance]\ntolerance = 0.0\n[fallback]\nmax_attempts = 3\n";

/// Whether an answer shows a panic.
fn panicky(text: &str) -> bool {
    text.contains("panicked") || text.contains("Duration") || text.contains("overflow")
}

#[tokio::test]
async fn serve_starts_when_card_fetches_answer_a_huge_retry_after() {
    // An LDP delegate whose card fetch, and an OpenAI-backed one whose `/models`, answer a
    // refusal asking to wait 10^30 seconds.
    let ldp = Liar::start(|_| Lie::new(503).header("retry-after", HUGE)).await;
    let openai = Liar::start(|_| Lie::new(429).header("retry-after", HUGE)).await;
    let served = TestGateway::builder()
        .delegate(&ldp.url)
        .entry(entry(
            "busy",
            &format!("{}/v1", openai.url),
            "m",
            declared(&["chat"], 0.9),
        ))
        .healthy(0)
        .spawn_process()
        .await;
    let admin = served.admin();
    let r = admin.get("/admin/delegates").await;
    let delegates = r.json["delegates"].as_array().expect("delegates").clone();
    assert_eq!(delegates.len(), 2, "{}", r.json);
    for d in &delegates {
        assert_eq!(d["health"], "down", "{d}");
    }
    assert!(ldp.count() >= 1 && openai.count() >= 1, "both were asked");
    assert_eq!(served.client().get("/healthz").await.status, 200);
    let mut served = served;
    assert!(served.process.is_running(), "serve exited");
    eprintln!(
        "serve with a card fetch and a /models answering Retry-After: {HUGE}: up, both delegates down"
    );
    let out = served.stop().await;
    assert!(!out.contains("panicked"), "{out}");
}

#[tokio::test]
async fn the_card_poller_survives_a_huge_retry_after_and_still_sees_a_delegate_go() {
    // The liar's card is fine at first, then answers 503 with a huge Retry-After.
    let bad = Arc::new(AtomicBool::new(false));
    let b = bad.clone();
    let liar = Liar::start(move |a| {
        if b.load(Ordering::SeqCst) || !is_card(&a.path) {
            Lie::new(503).header("retry-after", HUGE)
        } else {
            Lie::new(200).json(&ldp_card("liar", "echo", 0.9, 0.001))
        }
    })
    .await;
    let victim = crate::support::sim(SimOptions::new(card(
        "victim",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&liar.url)
        .delegate(&victim.url())
        .config(|c| c.discovery.poll_interval = Duration::from_millis(200))
        .spawn()
        .await;
    let (liar_d, victim_d) = (gw.delegate("d0").unwrap(), gw.delegate("d1").unwrap());
    assert!(liar_d.is_healthy() && victim_d.is_healthy());
    bad.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(30), || !liar_d.is_healthy()).await,
        "the liar's bad card was never seen"
    );
    // The poller is still running: a delegate that stops now is seen to go.
    victim.shutdown().await;
    assert!(
        eventually(Duration::from_secs(30), || !victim_d.is_healthy()).await,
        "the poller stopped: a stopped delegate stays healthy"
    );
    let scrape = gw.metrics().await;
    assert_eq!(
        scrape.sum("ldp_gateway_delegate_up{delegate=\"d1\"}"),
        0.0,
        "{scrape}"
    );
    assert_eq!(scrape.sum("ldp_gateway_panics_total"), 0.0, "{scrape}");
    eprintln!("card poller after a Retry-After of {HUGE}: the liar and then the stopped delegate seen down");
    gw.shutdown().await;
}

/// A tenant holding `key` with a daily budget of `usd`.
fn budgeted(key: &str, usd: f64) -> TenantConfig {
    TenantConfig {
        api_key_sha256: vec![ldp_gateway::secret::hash_key(key)],
        trust_domains: vec!["default".into()],
        budget: BudgetConfig {
            usd_per_day: Some(usd),
            ..BudgetConfig::default()
        },
        ..TenantConfig::new("payer")
    }
}

#[tokio::test]
async fn a_huge_retry_after_on_a_task_answer_fails_over_and_settles_hold_and_row() {
    // The liar serves a good card (the best quality, 0.3 USD a call), opens sessions, and
    // answers every task 503 with a huge Retry-After, after the task's budget is held. A
    // budget of 1 USD fits three of its holds at once: holds kept after a failure would
    // refuse the fourth task.
    let liar = Liar::start(|a| {
        if is_card(&a.path) {
            return Lie::new(200).json(&ldp_card("liar", "echo", 0.99, 0.3));
        }
        handshake("liar", a).unwrap_or_else(|| Lie::new(503).header("retry-after", HUGE))
    })
    .await;
    let good = SimOptions::new(card("good", "default", &[("echo", 0.5)], &["text"]));
    let key = crate::support::unique("key");
    let gw = TestGateway::builder()
        .delegate(&liar.url)
        .sim(good)
        .policy("quality-first.toml", QUALITY_FIRST)
        .tenant(budgeted(&key, 1.0))
        .config(|c| {
            c.policies.default = "quality-first".into();
            // Never ejected: every task tries the liar first.
            c.outlier.consecutive_failures = 1_000;
            c.outlier.min_requests = 1_000;
        })
        .spawn()
        .await;
    let c = Client::new(&gw.ldp_url()).with_key(Some(&key));
    let mut tasks = Vec::new();
    for i in 0..8 {
        // A session each: a session's later tasks would stick to the delegate that answered.
        let session = c.accepted(json!({})).await;
        let r = c.task_resp(&session, "echo", json!({"n": i})).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(!panicky(&r.text()), "{}", r.text());
        assert_eq!(r.json["body"]["type"], "TASK_RESULT", "{}", r.text());
        tasks.push(r.json["body"]["task_id"].as_str().unwrap().to_owned());
    }
    let submits = liar
        .asked("/ldp/messages")
        .iter()
        .filter(|a| a.ldp_type().as_deref() == Some("TASK_SUBMIT"))
        .count();
    assert_eq!(submits, 8, "the liar was sent every task, its hold taken");
    for id in &tasks {
        let row = gw.ledger_row(id).await;
        assert_eq!(row.delegate.as_deref(), Some("d1"), "{row:?}");
    }
    let spent = gw.spent_today("payer");
    assert!(
        spent < 0.1,
        "only the good delegate's price was charged: {spent}"
    );
    assert_eq!(gw.metrics().await.sum("ldp_gateway_panics_total"), 0.0);
    eprintln!(
        "8 tasks, each first answered 503 Retry-After: {HUGE}: 8 TASK_RESULT after failover, 8 ledger rows, {spent:.4} USD spent of 1.0, no hold kept"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_huge_retry_after_on_a_completion_pauses_for_at_most_an_hour_and_fails_over() {
    let liar = Liar::start(|a| match a.path.as_str() {
        "/v1/models" => models("m"),
        _ => Lie::new(429).header("retry-after", HUGE),
    })
    .await;
    let good = start(OpenAiOptions::new("good-model")).await;
    let gw = TestGateway::builder()
        .entry(entry(
            "liar",
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
    for i in 0..3 {
        let r = c
            .post_json("/v1/chat/completions", &ask("chat", &format!("hi {i}")))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(!panicky(&r.text()), "{}", r.text());
        let id = r.headers["x-ldp-task-id"].to_str().unwrap().to_owned();
        let row = gw.ledger_row(&id).await;
        assert_eq!(row.delegate.as_deref(), Some("good"), "{row:?}");
    }
    assert_eq!(
        liar.asked("/v1/chat/completions").len(),
        1,
        "asked once, then paused"
    );
    assert!(gw.delegate("liar").unwrap().is_paused());
    eprintln!("a 429 with Retry-After: {HUGE}: the delegate paused (an hour at most), 3 answers from the other delegate");
    gw.shutdown().await;
}
