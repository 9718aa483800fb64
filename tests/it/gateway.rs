//! The gateway's LDP front against simulated delegates, on real sockets.

use crate::support::{card, eventually, sim, Resp, TestGateway};
use ldp_gateway::ldp::PayloadMode;
use ldp_gateway::sim::SimOptions;
use serde_json::json;
use std::time::Duration;

const FRAME: &str = "semantic_frame";

fn frame(text: &str) -> serde_json::Value {
    json!({"task_type": "summarization", "instruction": "Summarize", "input": text})
}

#[tokio::test]
async fn rfc_dialect_full_lifecycle() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("summarize", 0.9)],
        &[FRAME, "text"],
    )))
    .await;
    let b = sim(SimOptions::new(card(
        "b",
        "default",
        &[("summarize", 0.6), ("reasoning", 0.8)],
        &[FRAME, "text"],
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .delegate(&b.url())
        .spawn()
        .await;
    let c = gw.client();

    // RFC config: preferred modes + required_trust_domain, no client domain.
    let body = c
        .open(
            json!({"preferred_payload_modes": ["semantic_graph", FRAME, "text"], "ttl_secs": 600,
                     "required_trust_domain": "default"}),
        )
        .await;
    assert_eq!(body["type"], "SESSION_ACCEPT", "{body}");
    assert_eq!(
        body["negotiated_mode"], FRAME,
        "semantic_graph is skipped (not implemented)"
    );
    assert_eq!(body["fallback_chain"], json!(["text"]));
    let sid = body["session_id"].as_str().unwrap().to_owned();

    let r = c.task(&sid, "summarize", frame("a long text"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    let p = &r["provenance"];
    assert_eq!(p["produced_by"], "ldp:delegate:a", "highest quality wins");
    assert_eq!(
        p["session_id"],
        sid.as_str(),
        "client's session id, not the upstream one"
    );
    assert_eq!(p["lineage"][0]["step"], "route");
    assert_eq!(p["lineage"][0]["delegate_id"], "ldp:delegate:gateway");
    assert_eq!(p["lineage"][0]["routed_to"], "d0");
    assert!(p["tokens_used"].as_u64().unwrap() > 0);
    assert!(p["cost_usd"].as_f64().unwrap() > 0.0);

    // A second task of the same skill reuses the upstream session; another skill opens one.
    c.task(&sid, "summarize", frame("more"), FRAME).await;
    let r2 = c.task(&sid, "reasoning", frame("why"), FRAME).await;
    assert_eq!(r2["provenance"]["produced_by"], "ldp:delegate:b");
    assert_eq!(a.stats().accepted, 1);
    assert_eq!(a.stats().results, 2);
    assert_eq!(b.stats().accepted, 1);

    let close = c
        .send(
            &sid,
            json!({"type": "SESSION_CLOSE", "reason": "done"}),
            "text",
        )
        .await;
    assert_eq!(close["body"]["type"], "SESSION_CLOSE");
    assert!(
        eventually(Duration::from_secs(5), || a.stats().closes == 1
            && b.stats().closes == 1)
        .await,
        "upstream sessions closed"
    );
    let after = c.task(&sid, "summarize", frame("x"), FRAME).await;
    assert_eq!(after["type"], "TASK_FAILED");
    assert_eq!(after["error"]["code"], "SESSION_NOT_FOUND");
    gw.shutdown().await;
}

#[tokio::test]
async fn reference_dialect_lifecycle_in_text_mode() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.7)],
        &[FRAME, "text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let (sid, mode) = c
        .session(json!({"preferred_payload_modes": ["text"], "ttl_secs": 3600, "trust_domain": "default"}))
        .await;
    assert_eq!(mode, "text");
    let r = c.task(&sid, "echo", json!("hello there"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    assert_eq!(r["provenance"]["payload_mode_used"], "text");
    assert_eq!(r["provenance"]["verification_status"], "self_verified");
    // Rust reference spelling: singular payload_mode.
    let (_, mode) = c
        .session(json!({"payload_mode": FRAME, "trust_domain": {"name": "default"}}))
        .await;
    assert_eq!(mode, FRAME);
    gw.shutdown().await;
}

#[tokio::test]
async fn trust_domain_rules_reject_sessions() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.7)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let b = c.open(json!({"trust_domain": "evil.example"})).await;
    assert_eq!(b["type"], "SESSION_REJECT");
    assert_eq!(b["error"]["code"], "TRUST_VIOLATION");
    assert_eq!(b["error"]["category"], "policy");
    assert_eq!(b["error"]["severity"], "fatal");
    assert!(
        b["reason"].as_str().unwrap().contains("evil.example"),
        "{b}"
    );
    let b = c
        .open(json!({"required_trust_domain": "research.internal"}))
        .await;
    assert_eq!(b["type"], "SESSION_REJECT");
    assert!(
        b["reason"].as_str().unwrap().contains("research.internal"),
        "{b}"
    );
    assert_eq!(a.stats().proposals, 0, "nothing reached the delegate");
    gw.shutdown().await;
}

#[tokio::test]
async fn cross_domain_client_only_reaches_delegates_that_trust_it() {
    let open = |id: &str| {
        let mut c = card(id, "default", &[("echo", 0.9)], &["text"]);
        c.trust_domain.allow_cross_domain = true;
        c.trust_domain.trusted_peers = vec!["partner".into()];
        c
    };
    let closed = sim(SimOptions::new(card(
        "closed",
        "default",
        &[("echo", 0.99)],
        &["text"],
    )))
    .await;
    let opened = sim(SimOptions::new(open("open"))).await;
    let gw = TestGateway::builder()
        .delegate(&closed.url())
        .delegate(&opened.url())
        .config(|cfg| {
            cfg.identity.trust_domain.allow_cross_domain = true;
            cfg.identity.trust_domain.trusted_peers = vec!["partner".into()];
        })
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"trust_domain": "partner", "preferred_payload_modes": ["text"]}))
        .await;
    let r = c.task(&sid, "echo", json!("hi"), "text").await;
    assert_eq!(r["provenance"]["produced_by"], "ldp:delegate:open", "{r}");
    assert_eq!(closed.stats().proposals, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn frames_are_translated_for_text_only_delegates() {
    let t = sim(SimOptions::new(card(
        "t",
        "default",
        &[("summarize", 0.9)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&t.url()).spawn().await;
    let c = gw.client();
    let (sid, mode) = c
        .session(json!({"preferred_payload_modes": [FRAME, "text"]}))
        .await;
    assert_eq!(mode, FRAME, "the gateway speaks frames to the client");
    let r = c
        .task(&sid, "summarize", frame("the quick brown fox"), FRAME)
        .await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    assert_eq!(
        r["provenance"]["payload_mode_used"], "text",
        "the delegate got text"
    );
    assert_eq!(t.stats().failures, 0);

    // And text from a text client reaches a frame-only delegate as a `task_type: text` frame.
    let f = sim(SimOptions::new(card(
        "f",
        "default",
        &[("classify", 0.9)],
        &[FRAME],
    )))
    .await;
    let gw2 = TestGateway::builder().delegate(&f.url()).spawn().await;
    let c2 = gw2.client();
    let (sid2, _) = c2
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let r = c2
        .task(&sid2, "classify", json!("great product"), "text")
        .await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    gw.shutdown().await;
    gw2.shutdown().await;
}

#[tokio::test]
async fn payload_mode_failure_falls_back_along_the_chain() {
    let mut opts = SimOptions::new(card(
        "m",
        "default",
        &[("summarize", 0.9)],
        &[FRAME, "text"],
    ));
    opts.fail_modes = vec![PayloadMode::SemanticFrame];
    let m = sim(opts).await;
    let gw = TestGateway::builder().delegate(&m.url()).spawn().await;
    let c = gw.client();
    let (sid, mode) = c
        .session(json!({"preferred_payload_modes": [FRAME, "text"]}))
        .await;
    assert_eq!(mode, FRAME);
    let r = c.task(&sid, "summarize", frame("x"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT", "the client's task survives: {r}");
    assert_eq!(r["provenance"]["payload_mode_used"], "text");
    let note = r["provenance"]["lineage"][0]["note"].as_str().unwrap();
    assert!(note.contains("fell back to text"), "{note}");
    assert_eq!(r["provenance"]["lineage"][0]["attempts"], 2);
    assert_eq!(m.stats().failures, 1);
    // The session continues at the lower mode: no second failure.
    let r = c.task(&sid, "summarize", frame("y"), FRAME).await;
    assert_eq!(r["type"], "TASK_RESULT");
    assert_eq!(m.stats().failures, 1);
    assert_eq!(m.stats().accepted, 1, "same upstream session throughout");
    gw.shutdown().await;
}

#[tokio::test]
async fn idle_ttl_expiry_closes_upstream_sessions() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.7)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .config(|cfg| cfg.sessions.sweep_interval = Duration::from_millis(100))
        .spawn()
        .await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"ttl_secs": 1, "preferred_payload_modes": ["text"]}))
        .await;
    let r = c.task(&sid, "echo", json!("hi"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT");
    assert_eq!(gw.sessions(), 1);
    assert!(
        eventually(Duration::from_secs(10), || a.stats().closes == 1).await,
        "the expired session's upstream session is closed"
    );
    assert_eq!(gw.sessions(), 0);
    let r = c.task(&sid, "echo", json!("again"), "text").await;
    assert_eq!(r["error"]["code"], "SESSION_NOT_FOUND");
    gw.shutdown().await;
}

#[tokio::test]
async fn upstream_session_loss_triggers_one_rehandshake() {
    let opts = SimOptions::new(card("a", "default", &[("echo", 0.7)], &["text"]));
    let a = sim(opts.clone()).await;
    let addr = a.addr();
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    assert_eq!(
        c.task(&sid, "echo", json!("1"), "text").await["type"],
        "TASK_RESULT"
    );
    // The delegate restarts on the same port and forgets every session.
    a.shutdown().await;
    let l = tokio::net::TcpListener::bind(addr).await.expect("rebind");
    let a2 = ldp_gateway::sim::spawn(l, opts).await.expect("respawn");
    let r = c.task(&sid, "echo", json!("2"), "text").await;
    assert_eq!(r["type"], "TASK_RESULT", "{r}");
    assert!(r["provenance"]["lineage"][0]["note"]
        .as_str()
        .unwrap()
        .contains("re-opened"));
    assert_eq!(a2.stats().accepted, 1);
    gw.shutdown().await;
}

#[tokio::test]
async fn bad_input_gets_clear_answers() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.7)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&a.url())
        .config(|cfg| cfg.server.body_limit_bytes = 64 * 1024)
        .spawn()
        .await;
    let c = gw.client();
    let check = |r: &Resp, want_status: u16, code: &str| {
        let v = &r.json;
        assert_eq!(r.status, want_status, "{v}");
        let e = &v["error"];
        assert_eq!(e["code"], code, "{v}");
        for k in ["category", "message", "severity", "retryable"] {
            assert!(!e[k].is_null(), "{k} missing in {v}");
        }
    };
    let message = |r: &Resp| r.json["error"]["message"].as_str().unwrap().to_owned();
    let r = c.post(b"{not json".to_vec()).await;
    check(&r, 400, "BAD_REQUEST");
    let r = c
        .post(
            br#"{"message_id":"m","session_id":"s","body":{"type":"TASK_SUBMIT","task_id":"t"}}"#
                .to_vec(),
        )
        .await;
    check(&r, 400, "BAD_REQUEST");
    assert!(message(&r).contains("`body.skill`"), "{}", r.json);
    let r = c.post(br#"{"message_id":"m"}"#.to_vec()).await;
    check(&r, 400, "BAD_REQUEST");
    assert!(message(&r).contains("`body`"), "{}", r.json);
    let r = c.post(br#"{"body":{"type":"TELEPORT"}}"#.to_vec()).await;
    check(&r, 400, "BAD_REQUEST");
    assert!(message(&r).contains("TELEPORT"));
    let r = c
        .post(br#"{"body":{"type":"TASK_RESULT","task_id":"t","output":1}}"#.to_vec())
        .await;
    check(&r, 400, "BAD_REQUEST");
    let big = json!({"body": {"type": "HELLO", "delegate_id": "x".repeat(100 * 1024)}});
    let r = c.post(serde_json::to_vec(&big).unwrap()).await;
    check(&r, 413, "PAYLOAD_TOO_LARGE");

    // Protocol refusals are 200 envelopes.
    let r = c.task("no-such-session", "echo", json!("x"), "text").await;
    assert_eq!(r["type"], "TASK_FAILED");
    assert_eq!(r["error"]["code"], "SESSION_NOT_FOUND");
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let other = gw.client().with_from("ldp:client:intruder");
    let r = other.task(&sid, "echo", json!("x"), "text").await;
    assert_eq!(
        r["error"]["code"], "SESSION_NOT_FOUND",
        "someone else's session looks missing"
    );
    let r = c.task(&sid, "translate", json!("x"), "text").await;
    assert_eq!(r["error"]["code"], "NO_ELIGIBLE_DELEGATE");
    assert_eq!(r["error"]["category"], "capability");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("'translate'"));
    assert_eq!(a.stats().tasks, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn unreachable_delegates_are_not_routed_to() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        format!("http://{addr}")
    };
    let live = sim(SimOptions::new(card(
        "live",
        "default",
        &[("echo", 0.5)],
        &["text"],
    )))
    .await;
    // The live one is given as ldp:// (plain HTTP transport).
    let ldp_url = live.url().replace("http://", "ldp://");
    let gw = TestGateway::builder()
        .delegate(&dead)
        .delegate(&ldp_url)
        .healthy(1)
        .spawn()
        .await;
    let c = gw.client();
    let card = c.get("/.well-known/ldp-identity").await.json;
    assert_eq!(card["delegate_id"], "ldp:delegate:gateway");
    assert_eq!(card["capabilities"][0]["name"], "echo");
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let r = c.task(&sid, "echo", json!("x"), "text").await;
    assert_eq!(r["provenance"]["produced_by"], "ldp:delegate:live");
    gw.shutdown().await;
}

#[tokio::test]
async fn stream_sends_progress_then_the_result() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.7)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let c = gw.client();
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let env = json!({"message_id": "m1", "session_id": sid, "from": c.from, "to": "gw",
        "body": {"type": "TASK_SUBMIT", "task_id": "t1", "skill": "echo", "input": "hi"},
        "payload_mode": "text", "timestamp": "2026-11-22T00:00:00Z"});
    let text = c
        .post_with("/ldp/stream", serde_json::to_vec(&env).unwrap(), &[])
        .await
        .text();
    let events: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[0]["body"]["type"], "TASK_UPDATE");
    assert_eq!(events[1]["body"]["type"], "TASK_RESULT");
    gw.shutdown().await;
}

#[tokio::test]
async fn cancel_reaches_the_running_upstream_task() {
    let mut opts = SimOptions::new(card("slow", "default", &[("echo", 0.7)], &["text"]));
    opts.latency = Duration::from_secs(20);
    let slow = sim(opts).await;
    let gw = TestGateway::builder().delegate(&slow.url()).spawn().await;
    let c = std::sync::Arc::new(gw.client());
    let (sid, _) = c
        .session(json!({"preferred_payload_modes": ["text"]}))
        .await;
    let submit = c.submit_behind(&sid, "long-1");
    assert!(
        eventually(Duration::from_secs(10), || slow.stats().tasks == 1).await,
        "task reached the delegate"
    );
    let ack = c.cancel(&sid, "long-1").await;
    assert_eq!(ack["body"]["type"], "TASK_UPDATE");
    assert_eq!(ack["body"]["message"], "cancelled");
    let done = submit.await.unwrap();
    // Cut short: the 20 s task never finished (a finished one would be a TASK_RESULT).
    assert_eq!(done["body"]["type"], "TASK_FAILED", "{done}");
    assert_eq!(slow.stats().cancels, 1);
    assert_eq!(slow.stats().results, 0, "cancel cut the 20 s task short");
    gw.shutdown().await;
}

/// The LDP port is one gateway's: a second gateway on the same address fails to start (the
/// serving threads share one socket; with `SO_REUSEPORT` the second would have started and
/// taken part of the connections), and the first keeps serving, on every serving thread:
/// tasks on fresh connections, accepted by whichever thread is free, all succeed.
#[tokio::test]
async fn a_second_gateway_on_the_same_port_fails_to_start() {
    let a = sim(SimOptions::new(card(
        "a",
        "default",
        &[("summarize", 0.9)],
        &[FRAME, "text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&a.url()).spawn().await;
    let addr: std::net::SocketAddr = gw
        .ldp_url()
        .trim_start_matches("http://")
        .parse()
        .expect("addr");
    let mut config = ldp_gateway::config::Config::default();
    config.server.listen = addr;
    config.admin.listen = "127.0.0.1:0".parse().expect("addr");
    config.admin.token_env = "LDP_TEST_ADMIN_TOKEN_NEVER_SET".into();
    let second = ldp_gateway::server::Gateway::start(config).await;
    assert!(
        matches!(second, Err(ldp_gateway::server::ServerError::Bind { .. })),
        "a second gateway on {addr} must not start: {:?}",
        second.as_ref().err()
    );
    let tasks = (0..8).map(|i| {
        let c = gw.client().fresh_connection();
        async move {
            let body = c
                .open(json!({"preferred_payload_modes": [FRAME, "text"], "ttl_secs": 600}))
                .await;
            let sid = body["session_id"].as_str().unwrap_or_default().to_owned();
            c.task(&sid, "summarize", frame(&format!("text {i}")), FRAME)
                .await
        }
    });
    for r in futures_util::future::join_all(tasks).await {
        assert_eq!(r["type"], "TASK_RESULT", "{r}");
    }
    gw.shutdown().await;
}
