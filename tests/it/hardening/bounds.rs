//! Items 3, 4, 5, 7, 8, 13 and 14: nothing a client or a delegate sends can grow the
//! gateway's metrics, maps, stored cards or sessions without bound, session slots come back,
//! and the gateway never routes to itself or around a loop of gateways.

use crate::support::metrics::Scrape;
use crate::support::{card, TestGateway};
use ldp_gateway::config::{Config, DelegateConfig, RateConfig, TenantConfig};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The built-in anonymous tenant, with the given knobs.
fn anonymous(tweak: impl FnOnce(&mut TenantConfig)) -> TenantConfig {
    let mut t = TenantConfig {
        trust_domains: vec!["default".into()],
        ..TenantConfig::new("anonymous")
    };
    tweak(&mut t);
    t
}

/// A simulated delegate offering `echo`, no latency.
fn echo() -> SimOptions {
    SimOptions::new(card("echo", "default", &[("echo", 0.9)], &["text"]))
}

/// Sample lines (not comments) in a scrape.
fn series(scrape: &Scrape) -> usize {
    scrape.samples().count()
}

#[tokio::test]
async fn unknown_skills_add_no_metric_series_and_no_limiter_keys() {
    let gw = TestGateway::builder()
        .sim(echo())
        .tenant(anonymous(|t| {
            t.skill_limits = Some(RateConfig {
                rps: 1e6,
                burst: Some(1_000_000),
            })
        }))
        .spawn()
        .await;
    let client = Arc::new(gw.client());
    let (session, _) = client.session(json!({})).await;
    // One known task first, so the known series exist in the baseline.
    let ok = client.task(&session, "echo", json!("hi"), "text").await;
    assert_eq!(ok["type"], "TASK_RESULT", "{ok}");
    let before = series(&gw.metrics().await);
    let sent = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let (client, session, sent) = (client.clone(), session.clone(), sent.clone());
            tokio::spawn(async move {
                for i in 0..5_000 / 16 + 1 {
                    let skill = format!("made-up-skill-{w}-{i}");
                    let b = client.task(&session, &skill, json!("x"), "text").await;
                    assert_eq!(b["type"], "TASK_FAILED", "{b}");
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
    assert!(sent.load(Ordering::Relaxed) >= 5_000);
    let scrape = gw.metrics().await;
    let after = series(&scrape);
    let text = scrape.text();
    eprintln!("series: {before} before, {after} after 5,000 unknown skills");
    assert!(
        after < before + 100,
        "5,000 unknown skills added {} series ({before} → {after})",
        after - before
    );
    assert!(
        text.contains("skill=\"unknown\""),
        "unrouted tasks count as unknown"
    );
    assert!(
        !text.contains("made-up-skill"),
        "client text became a label"
    );
    // Every skill nobody offers shares one limiter key; the housekeeper keeps the rest small.
    let keys = gw.limiter_keys();
    eprintln!("limiter keys after 5,000 distinct skills: {keys}");
    assert!(keys <= 3, "{keys} limiter keys after 5,000 distinct skills");
    // A 200 KB skill name is refused outright, not stored anywhere.
    let skill = "s".repeat(200_000);
    let r = client
        .post_body(
            &session,
            json!({"type": "TASK_SUBMIT", "task_id": "t", "skill": skill, "input": "x"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(r.json["error"]["code"], "BAD_REQUEST", "{}", r.json);
    gw.shutdown().await;
}

#[tokio::test]
async fn oversized_ids_are_refused_before_a_session_stores_them() {
    let gw = TestGateway::builder().sim(echo()).spawn().await;
    let client = gw.client().with_from(&"f".repeat(900 * 1024));
    let r = client
        .post_body("", json!({"type": "SESSION_PROPOSE", "config": {}}))
        .await;
    assert_eq!(r.status, 400, "{}", r.json);
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        "from is 921600 bytes long; the most accepted is 256"
    );
    assert_eq!(gw.sessions(), 0, "nothing was stored");
    // At the limit it is accepted.
    let client = client.with_from(&"f".repeat(256));
    client.session(json!({})).await;
    assert_eq!(gw.sessions(), 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn closing_sessions_frees_the_tenant_slot() {
    let gw = TestGateway::builder()
        .sim(echo())
        .tenant(anonymous(|t| t.max_sessions = Some(3)))
        .spawn()
        .await;
    let client = gw.client();
    for round in 0..3 {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(client.session(json!({})).await.0);
        }
        let full = client.open(json!({})).await;
        assert_eq!(full["type"], "SESSION_REJECT", "round {round}: {full}");
        for id in &ids {
            let closed = client
                .send(
                    id,
                    json!({"type": "SESSION_CLOSE", "reason": "done"}),
                    "text",
                )
                .await;
            assert_eq!(closed["body"]["type"], "SESSION_CLOSE", "{closed}");
        }
        assert_eq!(gw.tenant_sessions("anonymous"), 0);
    }
    gw.shutdown().await;
}

/// A delegate whose card the test changes at will (`/.well-known/ldp-identity`).
async fn card_server(card: Arc<Mutex<Value>>) -> String {
    let app = axum::Router::new().route(
        "/.well-known/ldp-identity",
        axum::routing::get(move || {
            let card = card.clone();
            async move { axum::Json(card.lock().expect("card").clone()) }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(l, app).await });
    url
}

fn stuffed_card(id: &str, skills: usize) -> Value {
    let caps: Vec<Value> = (0..skills)
        .map(|i| json!({"name": format!("skill-{i}"), "quality": {"quality_score": 0.5, "latency_p50_ms": 100}}))
        .collect();
    json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": "sim",
        "model_version": "1", "trust_domain": "default", "context_window": 8192,
        "capabilities": caps, "supported_payload_modes": ["text"]
    })
}

fn delegate_lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let label = format!("delegate=\"{name}\"");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(&label))
        .collect()
}

#[tokio::test]
async fn capability_stuffed_cards_are_refused_and_departed_series_removed() {
    let card = Arc::new(Mutex::new(stuffed_card("stuffed", 2_000)));
    let url = card_server(card.clone()).await;
    let gw = TestGateway::builder()
        .healthy(0)
        .config(|c| {
            c.delegates = vec![DelegateConfig {
                name: Some("stuffed".into()),
                ..DelegateConfig::new(url.clone())
            }];
        })
        .spawn()
        .await;
    let d = gw.delegate("stuffed").expect("registered");
    assert!(!d.is_healthy());
    let err = d.last_error().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        err.contains("lists 2000 capabilities; at most 1024"),
        "{err}"
    );
    // 50 capabilities: accepted, one declared-latency series each.
    *card.lock().expect("card") = stuffed_card("stuffed", 50);
    gw.refresh_cards().await;
    assert!(d.is_healthy());
    let text = gw.metrics().await.0;
    let declared = |t: &str| {
        delegate_lines(t, "stuffed")
            .iter()
            .filter(|l| l.starts_with("ldp_gateway_delegate_declared_latency_seconds"))
            .count()
    };
    assert_eq!(declared(&text), 50);
    // The card shrinks: its old skills' series go.
    *card.lock().expect("card") = stuffed_card("stuffed", 1);
    gw.refresh_cards().await;
    assert_eq!(declared(&gw.metrics().await.0), 1);
    // Deregistered: no series names it any more (it read `delegate_up 1` forever before).
    assert_eq!(
        gw.admin().delete("/admin/delegates/stuffed").await.status,
        204
    );
    let text = gw.metrics().await.0;
    assert_eq!(delegate_lines(&text, "stuffed"), Vec::<&str>::new());
    gw.shutdown().await;
}

/// A delegate that answers every card request with an endless JSON body; counts the bytes
/// it managed to send.
async fn firehose(sent: Arc<AtomicUsize>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let sent = sent.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = s.read(&mut head).await;
                let start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"delegate_id\": \"x\", \"capabilities\": [";
                if s.write_all(start).await.is_err() {
                    return;
                }
                let chunk = b"{\"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"},"
                    .repeat(1024);
                // Bounded so that a broken test cannot run forever: 256 MiB.
                for _ in 0..(256 * 1024 * 1024 / chunk.len()) {
                    if s.write_all(&chunk).await.is_err() {
                        return;
                    }
                    sent.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn endless_cards_are_cut_off_at_the_size_cap() {
    let sent = Arc::new(AtomicUsize::new(0));
    let url = firehose(sent.clone()).await;
    let gw = TestGateway::builder()
        .healthy(0)
        .config(|c| {
            c.delegates = vec![DelegateConfig {
                name: Some("hose".into()),
                ..DelegateConfig::new(url.clone())
            }];
            c.discovery.fetch_timeout = Duration::from_secs(20);
        })
        .spawn()
        .await;
    let d = gw.delegate("hose").expect("registered");
    assert!(!d.is_healthy());
    let err = d.last_error().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
    // Both card paths were tried and cut off: a few MiB at most went out (socket buffers
    // included), not the 256 MiB on offer.
    let total = sent.load(Ordering::Relaxed);
    eprintln!("firehose card: {total} bytes sent before the gateway hung up");
    assert!(total < 32 * 1024 * 1024, "the gateway read {total} bytes");
    let listing = gw.admin().get("/admin/delegates").await.raw;
    assert!(listing.len() < 16 * 1024, "{} bytes", listing.len());
    gw.shutdown().await;
}

#[tokio::test]
async fn card_polls_run_with_bounded_concurrency() {
    use tokio::io::AsyncReadExt;
    // Accepts and never answers; records how many connections were open at once.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (o, m) = (open.clone(), most.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let n = o.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(n, Ordering::SeqCst);
            let o = o.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                o.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    let gw = TestGateway::builder()
        .healthy(0)
        .config(|c| {
            c.delegates = (0..12)
                .map(|i| DelegateConfig {
                    name: Some(format!("mute{i}")),
                    // Distinct paths, one listener.
                    ..DelegateConfig::new(format!("{url}/d{i}"))
                })
                .collect();
            c.discovery.concurrency = 2;
            c.discovery.fetch_timeout = Duration::from_millis(300);
        })
        .spawn()
        .await;
    assert_eq!(gw.healthy_count(), 0);
    let most = most.load(Ordering::SeqCst);
    eprintln!("card fetches open at once: {most} (12 delegates, concurrency 2)");
    // Twelve at once before; two now. A fetch tries two paths, and the listener may not
    // have seen the first connection close when the second opens: up to 2 × 2, plus slack.
    assert!(most <= 6, "{most} card fetches were open at once");
    gw.shutdown().await;
}

#[tokio::test]
async fn the_gateway_refuses_to_register_itself() {
    let gw = TestGateway::builder().sim(echo()).spawn().await;
    let r = gw
        .admin()
        .post_json(
            "/admin/delegates",
            &json!({"url": gw.ldp_url(), "name": "me"}),
        )
        .await;
    assert_eq!(r.status, 400);
    let body = r.json;
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("this gateway's own"), "{body}");
    assert!(gw.delegate("me").is_none(), "not kept");
    // Configured under another name, it is never healthy, so never routed to.
    let other = TestGateway::builder()
        .delegate(&gw.ldp_url())
        .healthy(0)
        .config(|c| {
            c.identity.delegate_id = "ldp:delegate:gateway".into();
            c.delegates[0].name = None;
        })
        .spawn()
        .await;
    assert_eq!(other.healthy_count(), 0);
    other.shutdown().await;
    gw.shutdown().await;
}

#[tokio::test]
async fn gateways_chained_into_a_loop_refuse_the_task() {
    let named = |id: &'static str| {
        move |c: &mut Config| {
            c.identity.delegate_id = format!("ldp:delegate:{id}");
        }
    };
    let b = TestGateway::builder()
        .sim(echo())
        .config(named("gw-b"))
        .spawn()
        .await;
    let a = TestGateway::builder()
        .delegate(&b.ldp_url())
        .config(named("gw-a"))
        .spawn()
        .await;
    // B learns A (whose card offers echo through B), then loses its real delegate: the only
    // way on from either gateway is the other one.
    let b_admin = b.admin();
    let registered = b_admin
        .post_json(
            "/admin/delegates",
            &json!({"url": a.ldp_url(), "name": "a"}),
        )
        .await;
    assert_eq!(registered.status, 201, "{}", registered.json);
    assert_eq!(b_admin.delete("/admin/delegates/d0").await.status, 204);
    let client = a.client();
    let (session, _) = client.session(json!({})).await;
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        client.task(&session, "echo", json!("around"), "text"),
    )
    .await
    .expect("the loop ends");
    assert_eq!(answer["type"], "TASK_FAILED", "{answer}");
    assert_eq!(answer["error"]["code"], "LOOP_DETECTED", "{answer}");
    // max_hops = 8: A, B, A, B … eight forwards, then a refusal. Not thousands.
    let tasks = |scrape: Scrape| -> f64 {
        scrape
            .samples()
            .filter(|l| {
                l.starts_with("ldp_gateway_tasks_total{")
                    && l.contains("tenant=\"anonymous\"")
                    && l.contains("skill=\"echo\"")
                    && l.contains("outcome=\"failed\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let total = (tasks(a.metrics().await) + tasks(b.metrics().await)) as u64;

    eprintln!("tasks recorded across the A ⇄ B loop: {total}");
    assert!((5..=12).contains(&total), "{total} tasks across the loop");
    assert_eq!(
        b.sim(0).stats().tasks,
        0,
        "the removed delegate was not used"
    );
    a.shutdown().await;
    b.shutdown().await;
}
