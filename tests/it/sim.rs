//! Integration tests for the simulated delegate, over real loopback sockets.

use crate::support::cards::load_card;
use crate::support::{eventually_async, sim as start, Client, Resp};
use ldp_gateway::ldp::{
    Body, Envelope, ErrorCategory, ErrorSeverity, IdentityCard, LdpError, PayloadMode, Provenance,
    SessionConfig, VerificationStatus,
};
use ldp_gateway::sim::{SimHandle, SimOptions, SimStats};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const CLIENT: &str = "ldp:delegate:test-client";
const FRAME: PayloadMode = PayloadMode::SemanticFrame;

/// A card in the reference dialect: `summarize` (priced, quality 0.9) and `echo` (no hints).
fn card() -> IdentityCard {
    serde_json::from_value(json!({
        "delegate_id": "ldp:delegate:sim-test", "name": "Sim Test", "model_family": "sim",
        "model_version": "sim-1", "trust_domain": {"name": "default"}, "endpoint": "", "context_window": 32768,
        "capabilities": [
            {"name": "summarize", "quality": {"quality_score": 0.9, "cost_per_call_usd": 0.02,
                                              "supports_streaming": true}},
            {"name": "echo"}
        ],
        "supported_payload_modes": ["semantic_frame", "text"]
    }))
    .expect("test card")
}

/// A client of the simulator (its timeout a generous ceiling).
fn client(h: &SimHandle) -> Client {
    let mut c = Client::new(&h.url());
    c.http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    c
}

async fn get(h: &SimHandle, path: &str) -> Value {
    let r = client(h).get(path).await;
    assert!(r.status < 300, "GET {path}: {}", r.status);
    r.json
}

async fn post_raw(h: &SimHandle, path: &str, body: Vec<u8>) -> Resp {
    client(h).post_with(path, body, &[]).await
}

async fn send(h: &SimHandle, env: &Envelope) -> Envelope {
    let r = client(h).send_env(env).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.envelope()
}

fn envelope(session: &str, body: Body, mode: PayloadMode) -> Envelope {
    Envelope::new(session, CLIENT, "ldp:delegate:sim-test", body, mode)
}

fn config(v: Value) -> SessionConfig {
    serde_json::from_value(v).expect("session config")
}

/// Proposes a session with `cfg` and returns the issued id.
async fn open(h: &SimHandle, cfg: Value) -> String {
    let reply = send(
        h,
        &envelope(
            "",
            Body::SessionPropose {
                config: config(cfg),
            },
            PayloadMode::Text,
        ),
    )
    .await;
    match reply.body {
        Body::SessionAccept { session_id, .. } => {
            assert_eq!(
                reply.session_id, session_id,
                "the envelope carries the new id too"
            );
            session_id
        }
        other => panic!("expected SESSION_ACCEPT, got {other:?}"),
    }
}

fn submit(session: &str, task_id: &str, skill: &str, input: Value, mode: PayloadMode) -> Envelope {
    let body = Body::TaskSubmit {
        task_id: task_id.into(),
        skill: skill.into(),
        input: input.into(),
        contract: None,
    };
    envelope(session, body, mode)
}

fn failed(reply: &Envelope) -> &LdpError {
    match &reply.body {
        Body::TaskFailed { error, .. } => error,
        other => panic!("expected TASK_FAILED, got {other:?}"),
    }
}

fn result(reply: &Envelope) -> (Value, &Provenance) {
    match &reply.body {
        Body::TaskResult {
            output,
            provenance: Some(p),
            ..
        } => (output.to_value().expect("output is a JSON value"), p),
        other => panic!("expected TASK_RESULT with provenance, got {other:?}"),
    }
}

async fn remote_stats(h: &SimHandle) -> SimStats {
    serde_json::from_value(get(h, "/sim/stats").await).expect("stats")
}

fn shipped_cards() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/delegates");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("config/delegates")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_shipped_card_parses_and_the_fleet_is_varied() {
    let cards: Vec<IdentityCard> = shipped_cards().iter().map(|p| load_card(p)).collect();
    assert!(cards.len() >= 6, "{} cards", cards.len());
    let distinct = |f: &dyn Fn(&IdentityCard) -> Option<String>| {
        let mut v: Vec<String> = cards.iter().filter_map(f).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    assert_eq!(
        distinct(&|c| Some(c.delegate_id.clone())),
        cards.len(),
        "ids are unique"
    );
    assert!(distinct(&|c| Some(c.model_family.clone())) >= 4);
    assert!(distinct(&|c| c.jurisdiction.clone()) >= 3);
    assert!(distinct(&|c| Some(c.trust_domain.name.clone())) >= 2);
    let in_default = cards
        .iter()
        .filter(|c| c.trust_domain.name == "default")
        .count();
    assert!(
        in_default * 2 > cards.len(),
        "most cards are usable by a default gateway"
    );
    for c in &cards {
        assert!(
            !c.capabilities.is_empty(),
            "{} offers nothing",
            c.delegate_id
        );
        for cap in &c.capabilities {
            let h = c.effective_hints(&cap.name).expect("hints");
            assert!(
                h.quality.is_some(),
                "{}/{} has no quality",
                c.delegate_id,
                cap.name
            );
            assert!(
                h.cost_per_call_usd.is_some() || h.cost_tier.is_some(),
                "{}/{} has no price",
                c.delegate_id,
                cap.name
            );
            assert!(
                h.latency_p50_ms.is_some(),
                "{}/{} has no latency",
                c.delegate_id,
                cap.name
            );
        }
    }
}

#[tokio::test]
async fn card_is_served_at_both_paths_with_its_endpoint() {
    let path = shipped_cards().into_iter().next().expect("a shipped card");
    let card = load_card(&path);
    let h = start(SimOptions::new(card.clone())).await;
    for p in ["/.well-known/ldp-identity", "/ldp/identity"] {
        let served: IdentityCard = serde_json::from_value(get(&h, p).await).expect("card");
        assert_eq!(served.delegate_id, card.delegate_id, "{p}");
        assert_eq!(served.capabilities.len(), card.capabilities.len(), "{p}");
        assert_eq!(
            served.endpoint.as_deref(),
            Some(h.url().as_str()),
            "{p}: empty endpoint is filled"
        );
    }
    let caps = get(&h, "/ldp/capabilities").await;
    assert_eq!(
        caps["capabilities"].as_array().map(Vec::len),
        Some(card.capabilities.len())
    );
    assert!(caps["supported_modes"]
        .as_array()
        .is_some_and(|m| m.contains(&json!("text"))));
    h.shutdown().await;
}

#[tokio::test]
async fn full_lifecycle_hello_to_close() {
    let h = start(SimOptions::new(card())).await;
    let hello = envelope(
        "",
        Body::Hello {
            delegate_id: CLIENT.into(),
            supported_modes: vec![FRAME, PayloadMode::Text],
        },
        PayloadMode::Text,
    );
    match send(&h, &hello).await.body {
        Body::CapabilityManifest { capabilities } => {
            let names: Vec<&str> = capabilities
                .capabilities
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(names, ["summarize", "echo"]);
            assert_eq!(capabilities.supported_modes, [FRAME, PayloadMode::Text]);
        }
        other => panic!("expected CAPABILITY_MANIFEST, got {other:?}"),
    }

    let cfg = json!({"preferred_payload_modes": ["semantic_frame", "text"], "required_trust_domain": "default"});
    let propose = envelope(
        "",
        Body::SessionPropose {
            config: config(cfg),
        },
        PayloadMode::Text,
    );
    let accept = send(&h, &propose).await;
    let session = match &accept.body {
        Body::SessionAccept {
            session_id,
            negotiated_mode,
            fallback_chain,
        } => {
            assert_eq!(*negotiated_mode, FRAME);
            assert_eq!(fallback_chain, &[PayloadMode::Text]);
            assert_eq!(accept.from, "ldp:delegate:sim-test");
            assert_eq!(accept.to, CLIENT);
            session_id.clone()
        }
        other => panic!("expected SESSION_ACCEPT, got {other:?}"),
    };
    assert_eq!(accept.session_id, session);

    let frame = json!({"task_type": "summary", "instruction": "Summarize the quarterly report for the board"});
    let reply = send(
        &h,
        &submit(&session, "t1", "summarize", frame.clone(), FRAME),
    )
    .await;
    assert_eq!(reply.session_id, session);
    let (output, prov) = result(&reply);
    assert_eq!(
        output["text"],
        "Sim Test (summarize): Summarize the quarterly report for the board"
    );
    assert_eq!(output["skill"], "summarize");
    assert_eq!(prov.produced_by, "ldp:delegate:sim-test");
    assert_eq!(prov.model_version, "sim-1");
    assert_eq!(prov.payload_mode_used, FRAME);
    assert_eq!(prov.confidence, Some(0.9));
    assert_eq!(prov.session_id.as_deref(), Some(session.as_str()));
    assert_eq!(prov.verification_status, VerificationStatus::SelfVerified);
    assert!(prov.verified);
    let tokens = prov.tokens_used.expect("tokens");
    assert!(tokens >= 1);
    let cost = prov.cost_usd.expect("priced skill has a cost");
    assert!(
        (cost - 0.02 * (1.0 + tokens as f64 / 1000.0)).abs() < 1e-8,
        "cost {cost} for {tokens} tokens"
    );

    let again = send(
        &h,
        &submit(&session, "t2", "summarize", frame.clone(), FRAME),
    )
    .await;
    assert_eq!(result(&again).0, output, "output is deterministic");
    let echo = send(
        &h,
        &submit(
            &session,
            "t3",
            "echo",
            json!("plain text"),
            PayloadMode::Text,
        ),
    )
    .await;
    assert_eq!(
        result(&echo).1.cost_usd,
        None,
        "no price on the card, no cost"
    );

    let close = send(
        &h,
        &envelope(
            &session,
            Body::SessionClose {
                reason: Some("done".into()),
            },
            PayloadMode::Text,
        ),
    )
    .await;
    assert!(
        matches!(close.body, Body::SessionClose { reason: Some(ref r) } if r == "acknowledged"),
        "{close:?}"
    );
    let late = send(&h, &submit(&session, "t4", "summarize", frame, FRAME)).await;
    assert_eq!(failed(&late).code, "SESSION_NOT_FOUND");

    let expected = SimStats {
        hellos: 1,
        proposals: 1,
        accepted: 1,
        tasks: 4,
        results: 3,
        failures: 1,
        closes: 1,
        ..SimStats::default()
    };
    assert_eq!(remote_stats(&h).await, expected);
    assert_eq!(h.stats(), expected);
    h.shutdown().await;
}

#[tokio::test]
async fn tasks_need_a_live_session_and_a_known_skill() {
    let h = start(SimOptions::new(card())).await;
    for session in ["", "no-such-session"] {
        let reply = send(
            &h,
            &submit(session, "t", "summarize", json!("x"), PayloadMode::Text),
        )
        .await;
        let e = failed(&reply);
        assert_eq!(
            (e.code.as_str(), e.category, e.severity, e.retryable),
            (
                "SESSION_NOT_FOUND",
                ErrorCategory::Session,
                ErrorSeverity::Error,
                false
            )
        );
        assert!(e.message.contains("session"), "{}", e.message);
    }
    let session = open(&h, json!({})).await;
    let reply = send(
        &h,
        &submit(&session, "t", "translate", json!("x"), PayloadMode::Text),
    )
    .await;
    let e = failed(&reply);
    assert_eq!(
        (e.code.as_str(), e.category, e.retryable),
        ("SKILL_NOT_FOUND", ErrorCategory::Capability, false)
    );
    assert!(
        e.message.contains("translate") && e.message.contains("summarize"),
        "{}",
        e.message
    );
    h.shutdown().await;
}

#[tokio::test]
async fn untrusted_domains_are_rejected() {
    let mut research = card();
    research.trust_domain = serde_json::from_value(json!({"name": "research.internal", "allow_cross_domain": true, "trusted_peers": ["default"]})).expect("domain");
    let h = start(SimOptions::new(research)).await;
    for cfg in [
        json!({"trust_domain": "evil.example"}),
        json!({"required_trust_domain": "default", "trust_domain": "default"}),
    ] {
        let reply = send(
            &h,
            &envelope(
                "",
                Body::SessionPropose {
                    config: config(cfg.clone()),
                },
                PayloadMode::Text,
            ),
        )
        .await;
        match reply.body {
            Body::SessionReject {
                reason,
                error: Some(e),
            } => {
                assert!(!reason.is_empty(), "{cfg}");
                assert_eq!(
                    (e.code.as_str(), e.category, e.severity, e.retryable),
                    (
                        "TRUST_VIOLATION",
                        ErrorCategory::Policy,
                        ErrorSeverity::Fatal,
                        false
                    ),
                    "{cfg}"
                );
            }
            other => panic!("{cfg}: expected SESSION_REJECT, got {other:?}"),
        }
    }
    // A trusted peer and the delegate's own domain (RFC peers that do not name theirs) get in.
    open(&h, json!({"trust_domain": "default"})).await;
    open(&h, json!({"required_trust_domain": "research.internal"})).await;
    let s = h.stats();
    assert_eq!(
        (s.proposals, s.rejected, s.accepted, s.active_sessions),
        (4, 2, 2, 2)
    );
    h.shutdown().await;
}

#[tokio::test]
async fn payload_mode_failures_use_the_rfc_wording() {
    let h = start(SimOptions::new(card())).await;
    let session = open(&h, json!({})).await;
    let reply = send(
        &h,
        &submit(
            &session,
            "t",
            "summarize",
            json!({"task_type": "summary"}),
            FRAME,
        ),
    )
    .await;
    let e = failed(&reply);
    assert_eq!(
        (e.code.as_str(), e.category, e.retryable),
        ("PAYLOAD_MODE_FAILED", ErrorCategory::Runtime, false)
    );
    assert!(
        e.message.starts_with("semantic_frame validation failed: "),
        "{}",
        e.message
    );
    assert!(e.message.contains("`instruction`"), "{}", e.message);
    h.shutdown().await;

    let mut opts = SimOptions::new(card());
    opts.fail_modes = vec![FRAME];
    let h = start(opts).await;
    let session = open(&h, json!({})).await;
    let frame = json!({"task_type": "summary", "instruction": "go"});
    let reply = send(
        &h,
        &submit(&session, "t1", "summarize", frame.clone(), FRAME),
    )
    .await;
    assert!(failed(&reply)
        .message
        .starts_with("semantic_frame validation failed"));
    let reply = send(
        &h,
        &submit(&session, "t2", "summarize", frame, PayloadMode::Text),
    )
    .await;
    assert_eq!(
        result(&reply).1.payload_mode_used,
        PayloadMode::Text,
        "text still works"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn idle_sessions_expire() {
    let mut opts = SimOptions::new(card());
    opts.sweep_interval = Duration::from_millis(100);
    let h = start(opts).await;
    let session = open(&h, json!({"ttl_secs": 1})).await;
    let long = open(&h, json!({"ttl_secs": 3600})).await;
    assert!(
        eventually_async(Duration::from_secs(15), || async {
            remote_stats(&h).await.expired >= 1
        })
        .await,
        "never expired"
    );
    let reply = send(
        &h,
        &submit(&session, "t", "echo", json!("x"), PayloadMode::Text),
    )
    .await;
    assert_eq!(failed(&reply).code, "SESSION_NOT_FOUND");
    let reply = send(
        &h,
        &submit(&long, "t", "echo", json!("x"), PayloadMode::Text),
    )
    .await;
    result(&reply);
    let s = h.stats();
    assert_eq!((s.expired, s.active_sessions), (1, 1));
    h.shutdown().await;
}

#[tokio::test]
async fn a_running_task_can_be_cancelled() {
    let mut opts = SimOptions::new(card());
    opts.latency = Duration::from_secs(60);
    let h = start(opts).await;
    let session = open(&h, json!({})).await;
    let body = submit(&session, "slow", "echo", json!("x"), PayloadMode::Text)
        .to_vec()
        .expect("encode");
    let c = client(&h);
    let pending = tokio::spawn(async move { c.post_with("/ldp/messages", body, &[]).await });
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            h.stats().in_flight == 1
        })
        .await,
        "task never started"
    );

    let cancel = send(
        &h,
        &envelope(
            &session,
            Body::TaskCancel {
                task_id: "slow".into(),
            },
            PayloadMode::Text,
        ),
    )
    .await;
    assert!(
        matches!(cancel.body, Body::TaskUpdate { ref message, .. } if message.as_deref() == Some("cancelled")),
        "{cancel:?}"
    );
    let r = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("cancel ends the task")
        .expect("join");
    assert_eq!(r.status, 200);
    let reply = r.envelope();
    assert_eq!(failed(&reply).code, "CANCELLED");
    let s = h.stats();
    assert_eq!((s.cancels, s.in_flight, s.failures), (1, 0, 1));
    h.shutdown().await;
}

#[tokio::test]
async fn fail_rate_one_always_fails_and_the_knob_turns() {
    let mut opts = SimOptions::new(card());
    opts.fail_rate = 1.0;
    let h = start(opts).await;
    let session = open(&h, json!({})).await;
    for i in 0..3 {
        let reply = send(
            &h,
            &submit(
                &session,
                &format!("t{i}"),
                "echo",
                json!("x"),
                PayloadMode::Text,
            ),
        )
        .await;
        let e = failed(&reply);
        assert_eq!(
            (e.code.as_str(), e.category, e.retryable),
            ("SIMULATED_FAILURE", ErrorCategory::Runtime, true)
        );
    }
    h.set_fail_rate(0.0);
    result(
        &send(
            &h,
            &submit(&session, "ok", "echo", json!("x"), PayloadMode::Text),
        )
        .await,
    );
    assert_eq!((h.stats().failures, h.stats().results), (3, 1));
    h.shutdown().await;
}

#[tokio::test]
async fn bad_requests_and_unsupported_messages() {
    let h = start(SimOptions::new(card())).await;
    for bad in [
        &b"{not json"[..],
        br#"{"body":{"type":"TASK_SUBMIT","task_id":"t"}}"#,
    ] {
        let r = post_raw(&h, "/ldp/messages", bad.to_vec()).await;
        assert_eq!(r.status, 400);
        let v: Value = serde_json::from_slice(&r.raw).expect("json error");
        assert_eq!(v["error"]["code"], "BAD_REQUEST");
        assert_eq!(v["error"]["retryable"], false);
    }
    let r = post_raw(
        &h,
        "/ldp/messages",
        br#"{"body":{"type":"TASK_SUBMIT","task_id":"t"}}"#.to_vec(),
    )
    .await;
    assert!(r.text().contains("body.skill"), "names the missing field");

    let stray = envelope(
        "s",
        Body::TaskResult {
            task_id: "t".into(),
            output: json!(1).into(),
            provenance: None,
        },
        PayloadMode::Text,
    );
    let reply = send(&h, &stray).await;
    assert!(failed(&reply).message.contains("TASK_RESULT"));
    h.shutdown().await;
}

#[tokio::test]
async fn stream_sends_updates_then_the_result() {
    let mut opts = SimOptions::new(card());
    opts.latency = Duration::from_millis(50);
    let h = start(opts).await;
    let session = open(&h, json!({})).await;
    let body = submit(
        &session,
        "s1",
        "summarize",
        json!("stream me"),
        PayloadMode::Text,
    )
    .to_vec()
    .expect("encode");
    let r = post_raw(&h, "/ldp/stream", body).await;
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.raw).expect("utf8");
    let events: Vec<Envelope> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| Envelope::from_slice(d.trim().as_bytes()).expect("event envelope"))
        .collect();
    assert!(events.len() >= 2, "{text}");
    let (last, updates) = events.split_last().expect("events");
    assert!(
        updates
            .iter()
            .all(|e| matches!(e.body, Body::TaskUpdate { .. })),
        "{text}"
    );
    assert_eq!(result(last).0["skill"], "summarize");

    let close = envelope(
        &session,
        Body::SessionClose { reason: None },
        PayloadMode::Text,
    )
    .to_vec()
    .expect("encode");
    let r = post_raw(&h, "/ldp/stream", close).await;
    let text = String::from_utf8(r.raw).expect("utf8");
    assert_eq!(text.matches("data:").count(), 1, "{text}");
    assert!(text.contains("acknowledged"));
    h.shutdown().await;
}

#[tokio::test]
async fn shutdown_refuses_new_connections() {
    let h = start(SimOptions::new(card())).await;
    let url = format!("{}/ldp/identity", h.url());
    get(&h, "/ldp/identity").await;
    h.shutdown().await;
    assert!(
        reqwest::get(&url).await.is_err(),
        "still serving after shutdown"
    );
}

#[tokio::test]
async fn the_rust_reference_client_understands_the_delegate() {
    use ldp_protocol::client::LdpClient;
    use ldp_protocol::types::{LdpEnvelope, LdpMessageBody, PayloadMode as RefMode};
    let h = start(SimOptions::new(card())).await;
    let client = LdpClient::new();
    let card = client
        .fetch_identity_card(&h.url())
        .await
        .expect("reference reads /ldp/identity");
    assert_eq!(card.delegate_id, "ldp:delegate:sim-test");
    client
        .fetch_identity_wellknown(&h.url())
        .await
        .expect("reference reads the well-known card");

    let msg = |session: &str, body| {
        LdpEnvelope::new(
            session,
            CLIENT,
            "ldp:delegate:sim-test",
            body,
            RefMode::Text,
        )
    };
    let hello = LdpMessageBody::Hello {
        delegate_id: CLIENT.into(),
        supported_modes: vec![RefMode::Text],
    };
    let reply = client
        .send_message(&h.url(), &msg("", hello))
        .await
        .expect("manifest parses");
    assert!(matches!(
        reply.body,
        LdpMessageBody::CapabilityManifest { .. }
    ));
    let propose = LdpMessageBody::SessionPropose {
        config: json!({"payload_mode": "semantic_frame", "trust_domain": {"name": "default"}}),
    };
    let reply = client
        .send_message(&h.url(), &msg("", propose))
        .await
        .expect("accept parses");
    let LdpMessageBody::SessionAccept { session_id, .. } = reply.body else {
        panic!("{:?}", reply.body)
    };
    let task = LdpMessageBody::TaskSubmit {
        task_id: "r1".into(),
        skill: "summarize".into(),
        input: json!("hi"),
        contract: None,
    };
    let reply = client
        .send_message(&h.url(), &msg(&session_id, task))
        .await
        .expect("result parses");
    let LdpMessageBody::TaskResult { provenance, .. } = reply.body else {
        panic!("{:?}", reply.body)
    };
    assert_eq!(provenance.produced_by, "ldp:delegate:sim-test");
    let task = LdpMessageBody::TaskSubmit {
        task_id: "r2".into(),
        skill: "nope".into(),
        input: json!("hi"),
        contract: None,
    };
    let reply = client
        .send_message(&h.url(), &msg(&session_id, task))
        .await
        .expect("failure parses");
    assert!(matches!(reply.body, LdpMessageBody::TaskFailed { .. }));
    let cancel = LdpMessageBody::TaskCancel {
        task_id: "r1".into(),
    };
    let reply = client
        .send_message(&h.url(), &msg(&session_id, cancel))
        .await
        .expect("update parses");
    assert!(matches!(reply.body, LdpMessageBody::TaskUpdate { .. }));
    let close = LdpMessageBody::SessionClose { reason: None };
    client
        .send_message(&h.url(), &msg(&session_id, close))
        .await
        .expect("close parses");
    assert_eq!(h.stats().closes, 1);
    h.shutdown().await;
}
