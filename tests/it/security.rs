//! Security: every attack the gateway is meant to stop, tried on real sockets.
//!
//! API keys and tenants, trust-domain claims, cross-tenant session ids, rate limits (tenant,
//! tenant × skill, policy, delegate), budgets under concurrency and across a restart,
//! signatures and replays (both directions), canary secrets in every output, slowloris, big
//! and deep bodies, the reference SDK with signing on, and the admin registration allowlist.
//!
//! Each attack prints one `attack: … → …` line on stderr (`-- --nocapture` shows them).
//! The reference-SDK test uses `LDP_PY_SDK` / `LDP_PY_WHEEL` like tests/interop.rs: unset,
//! it prints a skip note and passes, unless `LDP_INTEROP_REQUIRED=1`.
//!
//! Tenant signing secrets, delegate signing secrets and the admin token are read from the
//! environment: the tests that need them run the gateway as the real binary with its own
//! environment (`Builder::spawn_process`), never changing this process's.

use crate::support::client::{hello_body, submit_body, GATEWAY_ID};
use crate::support::process::{output_within, py_script, pythons};
use crate::support::{card, contains, sim, unique, Card, Client, Resp, TestGateway};
use ldp_gateway::config::{BudgetConfig, Config, RateConfig, SigningConfig, TenantConfig};
use ldp_gateway::ldp::signing::{self, Algorithm};
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode, SessionConfig};
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One line of the attack report.
fn attack(line: impl std::fmt::Display) {
    eprintln!("attack: {line}");
}

/// A tenant owning `domains`, with key `key` (none: keyless, only valid for `anonymous`).
fn tenant(name: &str, key: Option<&str>, domains: &[&str]) -> TenantConfig {
    TenantConfig {
        api_key_sha256: key.map(|k| vec![hash_key(k)]).unwrap_or_default(),
        trust_domains: domains.iter().map(|d| (*d).to_owned()).collect(),
        ..TenantConfig::new(name)
    }
}

/// A card offering `skills` at `price` USD per call with `quality`.
fn priced_card(id: &str, domain: &str, skills: &[&str], price: f64, quality: f64) -> IdentityCard {
    skills
        .iter()
        .fold(
            Card::new(id)
                .domain(domain)
                .modes(&["text", "semantic_frame"]),
            |c, s| c.priced(s, quality, price, 50),
        )
        .build()
}

async fn plain_sim(id: &str, domain: &str, skills: &[&str]) -> SimHandle {
    let skills: Vec<(&str, f64)> = skills.iter().map(|s| (*s, 0.9)).collect();
    sim(SimOptions::new(card(id, domain, &skills, &["text"]))).await
}

/// A client of `base` sending `Authorization: Bearer <key>` when it has one.
fn keyed(base: &str, key: Option<&str>) -> Client {
    Client::new(base)
        .with_key(key)
        .with_from("ldp:client:security")
}

/// Every ledger row of `tenant` (newest first).
async fn ledger_rows(gw: &TestGateway, tenant: &str) -> Vec<ldp_gateway::provenance::LedgerRow> {
    gw.ledger(&format!("tenant={tenant}&limit=10000")).await
}

/// Asserts the complete `LdpError` shape of a 4xx body.
fn assert_error_shape(r: &Resp, status: u16, code: &str, category: &str, retryable: bool) {
    assert_eq!(r.status, status, "{}", r.json);
    let e = &r.json["error"];
    assert_eq!(e["code"], code, "{e}");
    assert_eq!(e["category"], category, "{e}");
    assert_eq!(e["retryable"], retryable, "{e}");
    assert!(
        e["severity"] == "error" || e["severity"] == "fatal",
        "severity: {e}"
    );
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "message: {e}"
    );
}

// ---------------------------------------------------------------------------------------
// 1. API keys
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_keys_decide_the_tenant() {
    let s = plain_sim("auth", "default", &["summarize"]).await;
    let (key_a, key_b) = (unique("key-a"), unique("key-b"));
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.tenants = vec![
                tenant("alpha", Some(&key_a), &["default"]),
                tenant("beta", Some(&key_b), &["default"]),
            ];
        })
        .spawn()
        .await;
    let anon = keyed(&gw.ldp_url(), None);

    let r = anon.hello().await;
    assert_error_shape(&r, 401, "UNAUTHENTICATED", "identity", false);
    let env = anon.envelope("", hello_body(&anon.from));
    let (status, _) = anon.stream(&env).await;
    assert_eq!(status, 401, "the stream route needs a key too");
    attack("no API key with tenants configured → HTTP 401 UNAUTHENTICATED (identity, not retryable), on /ldp/messages and /ldp/stream");

    let wrong = anon.with_key(Some("not-a-key"));
    assert_error_shape(
        &wrong.hello().await,
        401,
        "UNAUTHENTICATED",
        "identity",
        false,
    );
    let basic = anon
        .post_with(
            "/ldp/messages",
            anon.envelope("", hello_body("x")).to_vec().unwrap(),
            &[("authorization", &format!("Basic {key_a}"))],
        )
        .await;
    assert_eq!(basic.status, 401, "a key under another scheme is no key");
    attack("wrong API key / right key under `Basic` → HTTP 401 UNAUTHENTICATED");

    let a = anon.with_key(Some(&key_a));
    let hello = a.hello().await;
    assert_eq!(hello.status, 200);
    assert_eq!(hello.body_type(), "CAPABILITY_MANIFEST");
    let sid = a.accepted(json!({})).await;
    let t = a
        .task(&sid, "summarize", json!({"text": "hi"}), "text")
        .await;
    assert_eq!(t["type"], "TASK_RESULT", "{t}");
    let rows = ledger_rows(&gw, "alpha").await;
    assert_eq!(rows.len(), 1, "the task is recorded under tenant alpha");
    attack("right API key → served, ledger row under its tenant");

    for path in [
        "/.well-known/ldp-identity",
        "/ldp/identity",
        "/ldp/capabilities",
        "/healthz",
    ] {
        assert_eq!(anon.get(path).await.status, 200, "{path} needs no key");
    }
    attack("identity card, capabilities and /healthz without a key → HTTP 200 (public by design)");
    gw.shutdown().await;

    // Without tenants everyone is `anonymous`; a key is ignored.
    let gw = TestGateway::builder().delegate(&s.url()).spawn().await;
    let anon = keyed(&gw.ldp_url(), None);
    assert_eq!(anon.hello().await.status, 200);
    assert_eq!(anon.with_key(Some("anything")).hello().await.status, 200);
    gw.shutdown().await;

    // A keyless `anonymous` tenant: keyless requests run as it; a wrong key does not fall back.
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.tenants = vec![
                tenant("alpha", Some(&key_a), &["default"]),
                tenant("anonymous", None, &["default"]),
            ];
        })
        .spawn()
        .await;
    let anon = keyed(&gw.ldp_url(), None);
    let sid = anon.accepted(json!({})).await;
    let t = anon
        .task(&sid, "summarize", json!({"text": "hi"}), "text")
        .await;
    assert_eq!(t["type"], "TASK_RESULT", "{t}");
    assert_eq!(ledger_rows(&gw, "anonymous").await.len(), 1);
    let page = gw.metrics().await;
    assert!(
        page.samples().any(
            |l| l.starts_with("ldp_gateway_tasks_total{") && l.contains("tenant=\"anonymous\"")
        ),
        "metrics carry the anonymous tenant"
    );
    let r = anon.with_key(Some("wrong-key")).hello().await;
    assert_eq!(
        r.status, 401,
        "a wrong key is refused, not downgraded to anonymous"
    );
    attack("wrong key where a keyless `anonymous` tenant exists → HTTP 401 (no downgrade); no key → served as `anonymous`");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 2. Trust-domain claims and the policy allow-list
// ---------------------------------------------------------------------------------------

/// A simulated delegate whose every request body to `/ldp/messages` is recorded.
struct RecordingSim {
    url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    state: ldp_gateway::sim::SimState,
    _server: tokio::task::JoinHandle<()>,
}

impl RecordingSim {
    async fn start(card: IdentityCard) -> RecordingSim {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let mut card = card;
        card.endpoint = Some(url.clone());
        let state = ldp_gateway::sim::SimState::new(SimOptions::new(card));
        let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let rec = bodies.clone();
        let app = ldp_gateway::sim::router(state.clone()).layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let rec = rec.clone();
                async move {
                    use http_body_util::BodyExt;
                    let (parts, body) = req.into_parts();
                    let bytes = body.collect().await.unwrap().to_bytes();
                    if parts.uri.path() == "/ldp/messages" {
                        rec.lock().unwrap().push(bytes.to_vec());
                    }
                    let req =
                        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
                    next.run(req).await
                }
            },
        ));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordingSim {
            url,
            bodies,
            state,
            _server: server,
        }
    }

    fn envelopes(&self) -> Vec<Envelope> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .map(|b| Envelope::from_slice(b).unwrap())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trust_domain_claims_are_bound_to_the_tenant() {
    let research = RecordingSim::start(card(
        "research",
        "research.internal",
        &[("summarize", 0.9)],
        &["text"],
    ))
    .await;
    let public = plain_sim("public", "default", &["summarize"]).await;
    let (key_a, key_b) = (unique("key-a"), unique("key-b"));
    let gw = TestGateway::builder()
        .delegate(&research.url)
        .delegate(&public.url())
        .config(|c| {
            let mut a = tenant("alpha", Some(&key_a), &["research.internal"]);
            a.policies = vec!["balanced".into()];
            c.tenants = vec![a, tenant("beta", Some(&key_b), &["default"])];
        })
        .spawn()
        .await;
    let a = keyed(&gw.ldp_url(), Some(&key_a));
    let b = keyed(&gw.ldp_url(), Some(&key_b));

    let rej = a.propose(json!({"trust_domain": "default"})).await;
    assert_eq!(rej["type"], "SESSION_REJECT", "{rej}");
    assert_eq!(rej["error"]["code"], "TRUST_VIOLATION", "{rej}");
    assert_eq!(rej["error"]["category"], "policy", "{rej}");
    assert!(rej["reason"].as_str().unwrap().contains("default"), "{rej}");
    attack("tenant claims a trust domain it does not own (\"default\") → SESSION_REJECT TRUST_VIOLATION");

    for forged in [
        "Research.Internal",
        "research.internal ",
        "research.internal\u{0}",
    ] {
        let rej = a.propose(json!({ "trust_domain": forged })).await;
        assert_eq!(rej["type"], "SESSION_REJECT", "{forged:?}: {rej}");
    }
    let rej = a.propose(json!({ "trust_domain": "" })).await;
    assert_eq!(rej["type"], "HTTP 400", "{rej}");
    let rej = a
        .propose(json!({ "trust_domain": {"name": "default", "allow_cross_domain": true, "trusted_peers": ["research.internal"]} }))
        .await;
    assert_eq!(rej["type"], "SESSION_REJECT", "{rej}");
    attack("near-miss claims (case, trailing space, NUL suffix, a domain object naming \"default\") → SESSION_REJECT; empty claim → HTTP 400 BAD_REQUEST");

    let rej = b
        .propose(json!({"trust_domain": "research.internal"}))
        .await;
    assert_eq!(rej["error"]["code"], "TRUST_VIOLATION", "{rej}");
    attack("tenant B claims tenant A's domain → SESSION_REJECT TRUST_VIOLATION");

    let rej = a
        .propose(json!({"trust_domain": "default", "required_trust_domain": "research.internal"}))
        .await;
    assert_eq!(rej["type"], "SESSION_REJECT", "{rej}");
    attack("unowned claim hidden next to an RFC required_trust_domain → SESSION_REJECT");

    let sid = a
        .accepted(json!({"trust_domain": "research.internal"}))
        .await;
    let t = a
        .task(&sid, "summarize", json!({"text": "x"}), "text")
        .await;
    assert_eq!(t["type"], "TASK_RESULT", "{t}");
    assert_eq!(
        t["provenance"]["produced_by"], "ldp:delegate:research",
        "{t}"
    );
    let proposals: Vec<SessionConfig> = research
        .envelopes()
        .into_iter()
        .filter_map(|e| match e.body {
            Body::SessionPropose { config } => Some(config),
            _ => None,
        })
        .collect();
    assert_eq!(proposals.len(), 1);
    assert_eq!(
        proposals[0].trust_domain.as_deref(),
        Some("research.internal"),
        "the upstream session presents the claimed domain"
    );
    assert_eq!(research.state.stats().rejected, 0);
    assert_eq!(
        public.stats().tasks,
        0,
        "a delegate in another domain is never used"
    );
    let sid2 = a.accepted(json!({})).await;
    assert_eq!(
        a.task(&sid2, "summarize", json!({"text": "y"}), "text")
            .await["type"],
        "TASK_RESULT"
    );
    attack("owned claim → SESSION_ACCEPT; upstream SESSION_PROPOSE presents trust_domain \"research.internal\"; only the research.internal delegate serves it");

    let rej = a
        .propose(json!({"trust_domain": "research.internal", "policy": "cheapest"}))
        .await;
    assert_eq!(rej["type"], "SESSION_REJECT", "{rej}");
    assert_eq!(rej["error"]["code"], "UNKNOWN_POLICY", "{rej}");
    let env = a.envelope(&sid, submit_body("summarize", json!({"text": "z"})));
    let r = a
        .post_with(
            "/ldp/messages",
            env.to_vec().unwrap(),
            &[("x-ldp-policy", "cheapest")],
        )
        .await;
    assert_eq!(r.body_type(), "TASK_FAILED", "{}", r.json);
    assert_eq!(
        r.json["body"]["error"]["code"], "UNKNOWN_POLICY",
        "{}",
        r.json
    );
    attack("policy outside the tenant's allow-list (session config or x-ldp-policy) → SESSION_REJECT / TASK_FAILED UNKNOWN_POLICY");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 3. Another tenant's session
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_tenants_session_id_is_useless() {
    let s = plain_sim("cross", "default", &["summarize"]).await;
    let (key_a, key_b) = (unique("key-a"), unique("key-b"));
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            let mut b = tenant("beta", Some(&key_b), &["default"]);
            b.max_sessions = Some(3);
            c.tenants = vec![tenant("alpha", Some(&key_a), &["default"]), b];
        })
        .spawn()
        .await;
    let a = keyed(&gw.ldp_url(), Some(&key_a));
    let b = keyed(&gw.ldp_url(), Some(&key_b)); // same `from` as A
    let sid = a.accepted(json!({})).await;
    assert_eq!(
        a.task(&sid, "summarize", json!({"t": 1}), "text").await["type"],
        "TASK_RESULT"
    );

    let stolen = b.task(&sid, "summarize", json!({"t": 2}), "text").await;
    let random_id = uuid::Uuid::new_v4().to_string();
    let unknown = b
        .task(&random_id, "summarize", json!({"t": 2}), "text")
        .await;
    assert_eq!(stolen["type"], "TASK_FAILED", "{stolen}");
    assert_eq!(stolen["error"]["code"], "SESSION_NOT_FOUND", "{stolen}");
    // Identical but for the ids: nothing tells B that the session exists.
    let normalise = |v: &Value, id: &str| {
        let mut v = v.clone();
        v["task_id"] = json!("T");
        let m = v["error"]["message"].as_str().unwrap().replace(id, "ID");
        v["error"]["message"] = json!(m);
        v
    };
    assert_eq!(normalise(&stolen, &sid), normalise(&unknown, &random_id));
    attack("tenant B submits a task in tenant A's session (same `from`) → TASK_FAILED SESSION_NOT_FOUND, identical to an unknown id");

    let other_from = a.with_from("ldp:client:other");
    let r = other_from.task(&sid, "summarize", json!({}), "text").await;
    assert_eq!(r["error"]["code"], "SESSION_NOT_FOUND", "{r}");
    attack("same tenant, different `from` → TASK_FAILED SESSION_NOT_FOUND");

    let cancel = b
        .send_body(
            &sid,
            Body::TaskCancel {
                task_id: "t".into(),
            },
        )
        .await;
    assert_eq!(
        cancel.json["body"]["error"]["code"], "SESSION_NOT_FOUND",
        "{}",
        cancel.json
    );
    let env = b.envelope(&sid, submit_body("summarize", json!({})));
    let (status, events) = b.stream(&env).await;
    assert_eq!(status, 200);
    let last = events.last().expect("a final event");
    assert_eq!(last["body"]["error"]["code"], "SESSION_NOT_FOUND", "{last}");
    attack("tenant B cancels / streams in tenant A's session → SESSION_NOT_FOUND");

    let close_stolen = b.send_body(&sid, Body::SessionClose { reason: None }).await;
    let close_unknown = b
        .send_body(&random_id, Body::SessionClose { reason: None })
        .await;
    assert_eq!(close_stolen.json["body"], close_unknown.json["body"]);
    let still = a.task(&sid, "summarize", json!({"t": 3}), "text").await;
    assert_eq!(
        still["type"], "TASK_RESULT",
        "A's session survives B's close: {still}"
    );
    attack("tenant B closes tenant A's session → acknowledged like an unknown id, A's session still works");

    for _ in 0..3 {
        b.accepted(json!({})).await;
    }
    let rej = b.propose(json!({})).await;
    assert_eq!(rej["type"], "SESSION_REJECT", "{rej}");
    assert_eq!(rej["error"]["code"], "SESSION_LIMIT", "{rej}");
    a.accepted(json!({})).await;
    attack("session flood past the tenant's max_sessions (3) → SESSION_REJECT SESSION_LIMIT; other tenants unaffected");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 4. Rate limits
// ---------------------------------------------------------------------------------------

fn assert_rate_limited(r: &Resp, scope: &str) {
    assert_error_shape(r, 429, "RATE_LIMITED", "policy", true);
    let after = r.retry_after().expect("429 carries an integer Retry-After");
    assert!(after >= 1, "Retry-After {after}");
    let m = r.json["error"]["message"].as_str().unwrap();
    assert!(m.starts_with(scope), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenant_rate_limit_holds_over_a_burst_from_many_clients() {
    let s = plain_sim("rate", "default", &["summarize"]).await;
    let (key, key_other) = (unique("key"), unique("key-o"));
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            let mut t = tenant("limited", Some(&key), &["default"]);
            t.limits = Some(RateConfig {
                rps: 5.0,
                burst: Some(5),
            });
            c.tenants = vec![t, tenant("other", Some(&key_other), &["default"])];
        })
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), Some(&key));
    // 6 clients × 10 requests, each client one every 100 ms: ~1 s of offered load at 60 rps.
    let start = Instant::now();
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let api = api.with_from(&format!("ldp:client:burst-{i}"));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                let mut out = Vec::new();
                for _ in 0..10 {
                    tick.tick().await;
                    out.push(api.hello().await);
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let admitted = all.iter().filter(|r| r.status == 200).count();
    let refused: Vec<&Resp> = all.iter().filter(|r| r.status != 200).collect();
    let bound = (5.0 * elapsed + 5.0) * 1.1;
    assert!(
        (admitted as f64) <= bound,
        "admitted {admitted} in {elapsed:.2} s, bound {bound:.1}"
    );
    assert!(admitted >= 5, "the burst is admitted: {admitted}");
    for r in &refused {
        assert_rate_limited(r, "tenant");
    }
    let page = gw.metrics().await;
    assert_eq!(
        page.sum("ldp_gateway_rate_limited_total{scope=\"tenant\"}") as usize,
        refused.len()
    );
    attack(format!(
        "60 requests from 6 clients in {elapsed:.2} s at rps 5 burst 5 → {admitted} admitted (bound {bound:.1}), {} × HTTP 429 RATE_LIMITED with Retry-After, counted scope=\"tenant\"",
        refused.len()
    ));
    let other = keyed(&gw.ldp_url(), Some(&key_other));
    assert_eq!(other.hello().await.status, 200);
    attack("noisy neighbour: another tenant is served while this one is limited");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skill_and_policy_limits_refuse_with_429() {
    let s = plain_sim("skills", "default", &["summarize", "translate"]).await;
    let key = unique("key");
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            let mut t = tenant("sk", Some(&key), &["default"]);
            t.skill_limits = Some(RateConfig {
                rps: 0.2,
                burst: Some(2),
            });
            c.tenants = vec![t];
        })
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), Some(&key));
    let sid = api.accepted(json!({})).await;
    let mut results = Vec::new();
    for _ in 0..4 {
        results.push(api.task_resp(&sid, "summarize", json!({})).await);
    }
    assert!(results[..2].iter().all(|r| r.status == 200));
    for r in &results[2..] {
        assert_rate_limited(r, "tenant_skill");
    }
    assert_eq!(
        api.task(&sid, "translate", json!({}), "text").await["type"],
        "TASK_RESULT",
        "another skill has its own allowance"
    );
    let page = gw.metrics().await;
    assert_eq!(
        page.sum("ldp_gateway_rate_limited_total{scope=\"tenant_skill\"}"),
        2.0
    );
    attack("tasks past the tenant's per-skill limit (rps 0.2 burst 2) → HTTP 429 scope tenant_skill; other skills unaffected");
    gw.shutdown().await;

    // A policy with [limits].
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("balanced.toml"),
        "name = \"balanced\"\n[limits]\nrps = 0.2\nburst = 2\n",
    )
    .unwrap();
    let policies = dir.path().to_path_buf();
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(move |c| c.policies.dir = policies)
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), None);
    let sid = api.accepted(json!({})).await;
    let mut results = Vec::new();
    for _ in 0..4 {
        results.push(api.task_resp(&sid, "summarize", json!({})).await);
    }
    assert!(results[..2].iter().all(|r| r.status == 200));
    for r in &results[2..] {
        assert_rate_limited(r, "policy");
    }
    let page = gw.metrics().await;
    assert_eq!(
        page.sum("ldp_gateway_rate_limited_total{scope=\"policy\"}"),
        2.0
    );
    attack("tasks past a policy's [limits] (rps 0.2 burst 2) → HTTP 429 scope policy");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limited_delegate_is_skipped_even_within_a_session() {
    let best = sim(SimOptions::new(priced_card(
        "best",
        "default",
        &["summarize"],
        0.001,
        0.99,
    )))
    .await;
    let backup = sim(SimOptions::new(priced_card(
        "backup",
        "default",
        &["summarize"],
        0.01,
        0.5,
    )))
    .await;
    let gw = TestGateway::builder()
        .delegate(&best.url())
        .delegate(&backup.url())
        .config(|c| {
            c.delegates[0].limits = Some(RateConfig {
                rps: 0.01,
                burst: Some(1),
            });
        })
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), None);
    // One session (affinity would keep it on `best`), then fresh sessions.
    let sid = api.accepted(json!({})).await;
    for _ in 0..4 {
        let t = api.task(&sid, "summarize", json!({}), "text").await;
        assert_eq!(t["type"], "TASK_RESULT", "{t}");
    }
    for _ in 0..3 {
        let sid = api.accepted(json!({})).await;
        let t = api.task(&sid, "summarize", json!({}), "text").await;
        assert_eq!(t["type"], "TASK_RESULT", "{t}");
    }
    assert_eq!(
        best.stats().tasks,
        1,
        "the limited delegate got its burst only"
    );
    assert_eq!(backup.stats().tasks, 6);
    let page = gw.metrics().await;
    assert!(page.sum("ldp_gateway_rate_limited_total{scope=\"delegate\"}") >= 4.0);
    attack("7 tasks (one session, then new sessions) at a delegate limited to burst 1 → 1 served there, 6 routed to the other delegate, all succeed, counted scope=\"delegate\"");
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 5. Budgets
// ---------------------------------------------------------------------------------------

const PRICE: f64 = 0.01;

async fn budget_sim() -> SimHandle {
    let mut opts = SimOptions::new(priced_card("spend", "default", &["summarize"], PRICE, 0.9));
    opts.latency = Duration::from_millis(50);
    sim(opts).await
}

fn budget_tenant(key: &str, budget: BudgetConfig) -> TenantConfig {
    let mut t = tenant("payer", Some(key), &["default"]);
    t.budget = budget;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_tasks_cannot_overshoot_the_daily_budget() {
    let s = budget_sim().await;
    let key = unique("key");
    let limit = 10.0 * PRICE;
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.tenants = vec![budget_tenant(
                &key,
                BudgetConfig {
                    usd_per_day: Some(limit),
                    ..BudgetConfig::default()
                },
            )];
        })
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), Some(&key));
    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(api.accepted(json!({})).await);
    }
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let api = api.clone();
            let sid = sessions[i % 5].clone();
            tokio::spawn(async move {
                api.task(&sid, "summarize", json!({"text": i}), "text")
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
    let failures: Vec<&Value> = answers
        .iter()
        .filter(|a| a["type"] == "TASK_FAILED")
        .collect();
    assert_eq!(results + failures.len(), 50);
    assert!((1..=10).contains(&results), "{results} results");
    for f in &failures {
        assert_eq!(f["error"]["code"], "BUDGET_EXCEEDED", "{f}");
        assert_eq!(f["error"]["category"], "policy", "{f}");
        let m = f["error"]["message"].as_str().unwrap();
        assert!(m.starts_with("daily budget"), "{m}");
    }
    let spent: f64 = ledger_rows(&gw, "payer")
        .await
        .iter()
        .filter_map(|r| r.cost_usd)
        .sum();
    assert!(spent <= limit + 1e-9, "ledger spend {spent} over {limit}");
    assert!(spent > 0.0);
    attack(format!(
        "50 concurrent tasks against usd_per_day {limit} (price {PRICE}, sim cost a little above) → {results} results, {} TASK_FAILED BUDGET_EXCEEDED naming \"daily\"; ledger spend {spent:.4} ≤ {limit}",
        failures.len()
    ));
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_budget_caps_one_session_only() {
    let s = budget_sim().await;
    let key = unique("key");
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.tenants = vec![budget_tenant(
                &key,
                BudgetConfig {
                    usd_per_session: Some(2.5 * PRICE),
                    ..BudgetConfig::default()
                },
            )];
        })
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), Some(&key));
    let sid = api.accepted(json!({})).await;
    let mut answers = Vec::new();
    for i in 0..4 {
        answers.push(
            api.task(&sid, "summarize", json!({"text": i}), "text")
                .await,
        );
    }
    assert_eq!(answers[0]["type"], "TASK_RESULT");
    assert_eq!(answers[1]["type"], "TASK_RESULT");
    for a in &answers[2..] {
        assert_eq!(a["error"]["code"], "BUDGET_EXCEEDED", "{a}");
        assert!(
            a["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("session budget"),
            "{a}"
        );
    }
    let fresh = api.accepted(json!({})).await;
    assert_eq!(
        api.task(&fresh, "summarize", json!({}), "text").await["type"],
        "TASK_RESULT"
    );
    attack("tasks past usd_per_session → TASK_FAILED BUDGET_EXCEEDED naming \"session\"; a new session has its own budget");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spend_survives_a_restart() {
    let s = budget_sim().await;
    let key = unique("key");
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let limit = 3.0 * PRICE;
    let configure = |c: &mut Config| {
        c.provenance.store = store.clone();
        c.tenants = vec![budget_tenant(
            &key,
            BudgetConfig {
                usd_per_day: Some(limit),
                ..BudgetConfig::default()
            },
        )];
    };
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let api = keyed(&gw.ldp_url(), Some(&key));
    let sid = api.accepted(json!({})).await;
    let mut served = 0;
    loop {
        let a = api.task(&sid, "summarize", json!({}), "text").await;
        if a["type"] == "TASK_RESULT" {
            served += 1;
            assert!(served < 10, "the budget never ran out");
        } else {
            assert_eq!(a["error"]["code"], "BUDGET_EXCEEDED", "{a}");
            break;
        }
    }
    let spent = gw.proxy().budgets().spent("payer").0;
    gw.shutdown().await;

    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(configure)
        .spawn()
        .await;
    let restored = gw.proxy().budgets().spent("payer").0;
    assert!(
        (restored - spent).abs() < 1e-9,
        "restored {restored}, spent {spent}"
    );
    let api = keyed(&gw.ldp_url(), Some(&key));
    let sid = api.accepted(json!({})).await;
    let a = api.task(&sid, "summarize", json!({}), "text").await;
    assert_eq!(a["error"]["code"], "BUDGET_EXCEEDED", "{a}");
    assert!(a["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("daily budget"));
    attack(format!(
        "restart after spending {spent:.4} of {limit} → spend restored from the ledger, next task BUDGET_EXCEEDED (daily)"
    ));
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 6. Signatures and replays
// ---------------------------------------------------------------------------------------

fn signed(mut env: Envelope, secret: &[u8], alg: Algorithm) -> Envelope {
    env.nonce = Some(signing::new_nonce());
    signing::apply(&mut env, secret, alg).unwrap();
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signatures_are_checked_and_replays_refused() {
    let s = plain_sim("signed", "default", &["summarize"]).await;
    let (key, key_lax) = (unique("key"), unique("key-lax"));
    let (var, var_lax) = ("LDP_TEST_SIGNING", "LDP_TEST_SIGNING_LAX");
    let secret = unique("secret");
    let secret_lax = unique("secret-lax");
    let mut t = tenant("signer", Some(&key), &["default"]);
    t.signing = Some(SigningConfig {
        secret_env: var.into(),
        required: true,
    });
    let mut lax = tenant("lax", Some(&key_lax), &["default"]);
    lax.signing = Some(SigningConfig {
        secret_env: var_lax.into(),
        required: false,
    });
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .tenant(t)
        .tenant(lax)
        .env(var, &secret)
        .env(var_lax, &secret_lax)
        .spawn_process()
        .await;
    let api = keyed(&gw.ldp, Some(&key));
    let secret = secret.as_bytes();
    let refused = |r: &Resp, what: &str| {
        assert_error_shape(r, 401, "UNAUTHENTICATED", "identity", false);
        eprintln!("  ({what}: {})", r.json["error"]["message"]);
    };

    refused(&api.hello().await, "unsigned");
    attack("unsigned message to a tenant that requires signatures → HTTP 401");

    let hello = signed(
        api.envelope("", hello_body(&api.from)),
        secret,
        Algorithm::Reference,
    );
    let r = api.send_env(&hello).await;
    assert_eq!(r.status, 200, "{}", r.json);
    refused(&api.send_env(&hello).await, "replay");
    attack("correctly signed message → 200; the same message again → HTTP 401 (replay)");

    let mut renonced = hello.clone();
    renonced.nonce = Some(signing::new_nonce());
    refused(&api.send_env(&renonced).await, "replay with a new nonce");
    let mut reid = hello.clone();
    reid.message_id = uuid::Uuid::new_v4().to_string();
    refused(&api.send_env(&reid).await, "replay with a new message id");
    attack(
        "replay with a fresh nonce or message id (signature kept) → HTTP 401 (signature mismatch)",
    );

    let mut stripped = signed(
        api.envelope("", hello_body(&api.from)),
        secret,
        Algorithm::Reference,
    );
    stripped.signature = None;
    stripped.signature_algorithm = None;
    refused(&api.send_env(&stripped).await, "signature stripped");
    let mut none_alg = signed(
        api.envelope("", hello_body(&api.from)),
        secret,
        Algorithm::Reference,
    );
    none_alg.signature_algorithm = Some("none".into());
    refused(&api.send_env(&none_alg).await, "algorithm none");
    let mut swapped = signed(
        api.envelope("", hello_body(&api.from)),
        secret,
        Algorithm::Reference,
    );
    swapped.signature_algorithm = Some(signing::BODY_ALGORITHM.into());
    refused(&api.send_env(&swapped).await, "algorithm relabelled");
    let foreign = signed(
        api.envelope("", hello_body(&api.from)),
        secret_lax.as_bytes(),
        Algorithm::Reference,
    );
    refused(&api.send_env(&foreign).await, "another tenant's secret");
    attack("signature stripped / algorithm \"none\" / algorithm relabelled / signed with another tenant's secret → HTTP 401");

    let mut old = api.envelope("", hello_body(&api.from));
    old.timestamp = (chrono::Utc::now() - chrono::TimeDelta::seconds(400))
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    refused(
        &api.send_env(&signed(old, secret, Algorithm::Reference))
            .await,
        "400 s old",
    );
    let mut future = api.envelope("", hello_body(&api.from));
    future.timestamp = (chrono::Utc::now() + chrono::TimeDelta::seconds(400))
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    refused(
        &api.send_env(&signed(future, secret, Algorithm::Reference))
            .await,
        "400 s ahead",
    );
    attack("correctly signed message with a timestamp 400 s old (or ahead) → HTTP 401 (outside the ±300 s window)");

    let propose = signed(
        api.envelope(
            "",
            Body::SessionPropose {
                config: SessionConfig::default(),
            },
        ),
        secret,
        Algorithm::Reference,
    );
    let r = api.send_env(&propose).await;
    assert_eq!(r.body_type(), "SESSION_ACCEPT", "{}", r.json);
    let sid = r.json["body"]["session_id"].as_str().unwrap().to_owned();

    let mut skill_changed = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Reference,
    );
    if let Body::TaskSubmit { skill, .. } = &mut skill_changed.body {
        *skill = "translate".into();
    }
    refused(&api.send_env(&skill_changed).await, "skill changed");
    let mut session_changed = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Reference,
    );
    session_changed.session_id = uuid::Uuid::new_v4().to_string().into();
    refused(&api.send_env(&session_changed).await, "session id changed");
    attack("signed TASK_SUBMIT with `skill` (or session id) changed after signing → HTTP 401");

    // hmac-sha256 (reference) does not cover the input; hmac-sha256-body does.
    let mut input_changed = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Reference,
    );
    if let Body::TaskSubmit { input, .. } = &mut input_changed.body {
        *input = json!({"text": "tampered"}).into();
    }
    let r = api.send_env(&input_changed).await;
    assert_eq!(r.body_type(), "TASK_RESULT", "{}", r.json);
    let body_signed = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Body,
    );
    let r = api.send_env(&body_signed).await;
    assert_eq!(r.body_type(), "TASK_RESULT", "{}", r.json);
    let mut body_tampered = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Body,
    );
    if let Body::TaskSubmit { input, .. } = &mut body_tampered.body {
        *input = json!({"text": "tampered"}).into();
    }
    refused(
        &api.send_env(&body_tampered).await,
        "input changed, body algorithm",
    );
    let mut mode_tampered = signed(
        api.envelope(&sid, submit_body("summarize", json!({"text": "a"}))),
        secret,
        Algorithm::Body,
    );
    mode_tampered.payload_mode = PayloadMode::SemanticFrame;
    refused(
        &api.send_env(&mode_tampered).await,
        "payload mode changed, body algorithm",
    );
    attack("task input changed after signing: hmac-sha256 (reference: ids, timestamp, nonce, type, task id, skill) → still accepted, by design of that algorithm; hmac-sha256-body (whole envelope) → HTTP 401");

    let wrong_key = api.with_key(Some("wrong"));
    let good = signed(
        api.envelope("", hello_body(&api.from)),
        secret,
        Algorithm::Reference,
    );
    assert_eq!(wrong_key.send_env(&good).await.status, 401);
    attack("valid signature under a wrong API key → HTTP 401");

    let lax = keyed(&gw.ldp, Some(&key_lax));
    assert_eq!(
        lax.hello().await.status,
        200,
        "unsigned is fine when not required"
    );
    let mut bad = signed(
        lax.envelope("", hello_body(&lax.from)),
        secret_lax.as_bytes(),
        Algorithm::Reference,
    );
    bad.signature = Some("00".repeat(32));
    refused(&lax.send_env(&bad).await, "bad signature, signing optional");
    attack("optional signing: unsigned → 200, but a present bad signature → HTTP 401");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_messages_are_signed_with_the_delegates_secret() {
    let rec = RecordingSim::start(card("up", "default", &[("summarize", 0.9)], &["text"])).await;
    let var = "LDP_TEST_UPSTREAM_SECRET";
    let secret = unique("upstream-secret");
    let gw = TestGateway::builder()
        .delegate(&rec.url)
        .config(|c| c.delegates[0].signing_secret_env = Some(var.into()))
        .env(var, &secret)
        .spawn_process()
        .await;
    let api = keyed(&gw.ldp, None);
    let sid = api.accepted(json!({})).await;
    assert_eq!(
        api.task(&sid, "summarize", json!({}), "text").await["type"],
        "TASK_RESULT"
    );
    api.send_body(&sid, Body::SessionClose { reason: None })
        .await;
    let sent = rec.envelopes();
    let types: Vec<&str> = sent
        .iter()
        .map(|e| e.body.message_type().as_str())
        .collect();
    assert!(
        types.starts_with(&["HELLO", "SESSION_PROPOSE", "TASK_SUBMIT"]),
        "{types:?}"
    );
    for env in &sent {
        assert_eq!(
            signing::verify(env, secret.as_bytes()),
            Ok(Algorithm::Reference),
            "{} verifies under the delegate's secret",
            env.body.message_type().as_str()
        );
        assert!(signing::verify(env, b"another secret").is_err());
    }
    attack(format!(
        "upstream messages to a delegate with signing_secret_env ({}) → every one verifies (hmac-sha256) under that secret and fails under another",
        types.join(", ")
    ));
    gw.stop().await;
}

// ---------------------------------------------------------------------------------------
// 7. Canary secrets
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn canary_secrets_never_appear_in_any_output() {
    let canary = format!("CANARY-{}", uuid::Uuid::new_v4());
    let api_key = format!("key-{canary}");
    let wrong_key = format!("wrong-{canary}");
    let sign_secret = format!("sign-{canary}");
    let upstream_secret = format!("upstream-{canary}");
    let admin_token = format!("admin-{canary}");
    let (sign_var, upstream_var, admin_var) =
        ("LDP_CANARY_SIGN", "LDP_CANARY_UPSTREAM", "LDP_CANARY_ADMIN");
    let s = plain_sim("canary", "default", &["summarize"]).await;
    // The ledger outlives the gateway process: it is read after the stop.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let limited_key = unique("limited");
    let mut acme = tenant("acme", Some(&api_key), &["default"]);
    acme.signing = Some(SigningConfig {
        secret_env: sign_var.into(),
        required: false,
    });
    acme.budget.usd_per_session = Some(0.007);
    let mut limited = tenant("limited", Some(&limited_key), &["default"]);
    limited.limits = Some(RateConfig {
        rps: 1.0,
        burst: Some(1),
    });
    let store = format!("sqlite://{}", db.display());
    let bin = TestGateway::builder()
        .delegate(&s.url())
        .tenant(acme)
        .tenant(limited)
        .config(|c| {
            c.admin.token_env = admin_var.into();
            c.provenance.store = store;
            c.provenance.store_payloads = true;
            c.delegates[0].signing_secret_env = Some(upstream_var.into());
        })
        .env(sign_var, &sign_secret)
        .env(upstream_var, &upstream_secret)
        .env(admin_var, &admin_token)
        .log("debug")
        .spawn_process()
        .await;
    let (ldp, admin) = (bin.ldp.clone(), bin.admin.clone());

    let good = keyed(&ldp, Some(&api_key)).recorded();
    let bad = good.with_key(Some(&wrong_key));
    // Successes: unsigned and signed traffic, tasks, a stream.
    assert_eq!(good.hello().await.status, 200);
    let sid = good.accepted(json!({})).await;
    assert_eq!(
        good.task(&sid, "summarize", json!({"text": "a"}), "text")
            .await["type"],
        "TASK_RESULT"
    );
    let env = signed(
        good.envelope(&sid, submit_body("summarize", json!({"text": "b"}))),
        sign_secret.as_bytes(),
        Algorithm::Reference,
    );
    assert_eq!(good.send_env(&env).await.body_type(), "TASK_RESULT");
    let (status, _) = good
        .stream(&good.envelope(&sid, submit_body("summarize", json!({"text": "c"}))))
        .await;
    assert_eq!(status, 200);
    // Failures: wrong keys, bad signatures, replays, budget, rate limit, bad requests.
    assert_eq!(bad.hello().await.status, 401);
    assert_eq!(
        bad.stream(&bad.envelope(&sid, submit_body("summarize", json!({}))))
            .await
            .0,
        401
    );
    let mut forged = good.envelope(&sid, submit_body("summarize", json!({})));
    forged.nonce = Some(signing::new_nonce());
    signing::apply(&mut forged, wrong_key.as_bytes(), Algorithm::Reference).unwrap();
    assert_eq!(good.send_env(&forged).await.status, 401);
    assert_eq!(good.send_env(&env).await.status, 401, "replay");
    let over = good
        .task(&sid, "summarize", json!({"text": "d"}), "text")
        .await;
    assert_eq!(over["error"]["code"], "BUDGET_EXCEEDED", "{over}");
    assert_eq!(good.post(b"{not json".to_vec()).await.status, 400);
    let limited = good.with_key(Some(&limited_key));
    for _ in 0..3 {
        limited.hello().await;
    }
    // Admin: every output, with the right token and with a wrong one that holds the canary.
    let admin_api = good.with_base(&admin).with_key(Some(&admin_token));
    for path in [
        "/metrics",
        "/healthz",
        "/readyz",
        "/admin/delegates",
        "/admin/policies",
        "/admin/sessions",
        "/admin/route?skill=summarize",
        "/admin/provenance?limit=1000",
        "/admin/provenance?limit=1000&format=csv",
    ] {
        let r = admin_api.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.raw));
    }
    let wrong_admin = admin_api.with_key(Some(&wrong_key));
    assert_eq!(wrong_admin.get("/admin/delegates").await.status, 401);
    let r = admin_api
        .post_with(
            "/admin/delegates",
            json!({"url": "ftp://nowhere"}).to_string().into_bytes(),
            &[],
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(good.get("/ldp/identity").await.status, 200);

    let logs = bin.stop().await.into_bytes();
    assert!(
        contains(&logs, "DEBUG") && contains(&logs, "session accepted"),
        "debug logging was on:\n{}",
        String::from_utf8_lossy(&logs)
    );
    let transcript = good.transcript();
    assert!(transcript.len() > 1000);
    let mut ledger = Vec::new();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = PathBuf::from(format!("{}{suffix}", db.display()));
        if let Ok(bytes) = std::fs::read(&p) {
            ledger.extend(bytes);
        }
    }
    assert!(!ledger.is_empty(), "the ledger file exists");
    for secret in [
        &api_key,
        &wrong_key,
        &sign_secret,
        &upstream_secret,
        &admin_token,
    ] {
        assert!(!contains(&transcript, secret), "a response holds {secret}");
        assert!(!contains(&logs, secret), "the logs hold {secret}");
        assert!(!contains(&ledger, secret), "the ledger holds {secret}");
    }
    for (what, bytes) in [
        (
            "responses (bodies and headers, LDP and admin, metrics, provenance JSON and CSV)",
            &transcript,
        ),
        (
            "logs (RUST_LOG=debug, stdout and stderr of the real binary)",
            &logs,
        ),
        ("ledger file (+ WAL)", &ledger),
    ] {
        assert!(!contains(bytes, "CANARY"), "{what} hold the canary");
    }
    attack(format!(
        "canary in the API key, a wrong key, the tenant signing secret, the upstream signing secret and the admin token; success + 401/400/429/budget traffic → canary in none of: {} bytes of responses, {} bytes of debug logs, {} bytes of ledger",
        transcript.len(),
        logs.len(),
        ledger.len()
    ));
}

// ---------------------------------------------------------------------------------------
// 8. Slowloris
// ---------------------------------------------------------------------------------------

/// How a slow connection behaves.
#[derive(Clone, Copy, Debug)]
enum Slow {
    /// Connects and sends nothing.
    Silent,
    /// Sends a request head one byte every 100 ms, never finishing it.
    Trickle,
    /// Sends one complete request, then idles on the kept-alive connection.
    IdleKeepAlive,
}

/// How long the server waits for a request head in the slowloris test.
const HEADER_TIMEOUT: Duration = Duration::from_secs(3);
/// A generous ceiling on how long after [`HEADER_TIMEOUT`] a slow connection may stay open.
const CUT_SLACK: Duration = Duration::from_secs(10);

/// Runs one slow connection to `addr`; returns how long the server kept it open (`None`: still
/// open after 30 s), counting it in `cut` once the server closed it.
async fn slow_connection(
    addr: String,
    how: Slow,
    ready: Arc<tokio::sync::Barrier>,
    cut: Arc<AtomicUsize>,
) -> Option<Duration> {
    let mut tcp = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    if let Slow::IdleKeepAlive = how {
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
    }
    ready.wait().await;
    let head = b"POST /ldp/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let (mut rd, mut wr) = tcp.into_split();
    let reader = async {
        let mut buf = [0u8; 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    cut.fetch_add(1, Ordering::SeqCst);
                    return started.elapsed();
                }
                Ok(_) => {} // the keep-alive answer, or a 408
            }
        }
    };
    let writer = async {
        if let Slow::Trickle = how {
            for b in head {
                if wr.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        std::future::pending::<()>().await;
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            closed = reader => closed,
            _ = writer => unreachable!(),
        }
    })
    .await
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slowloris_connections_are_cut_and_do_not_starve_others() {
    let s = plain_sim("slow", "default", &["summarize"]).await;
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| c.server.header_read_timeout = HEADER_TIMEOUT)
        .spawn()
        .await;
    let addr = gw.ldp_url().trim_start_matches("http://").to_owned();
    let n = 50;
    let ready = Arc::new(tokio::sync::Barrier::new(n + 1));
    let cut = Arc::new(AtomicUsize::new(0));
    let conns: Vec<_> = (0..n)
        .map(|i| {
            let how = match i % 5 {
                0 => Slow::Silent,
                1 => Slow::IdleKeepAlive,
                _ => Slow::Trickle,
            };
            let (addr, ready, cut) = (addr.clone(), ready.clone(), cut.clone());
            tokio::spawn(async move { (how, slow_connection(addr, how, ready, cut).await) })
        })
        .collect();
    ready.wait().await;
    let api = keyed(&gw.ldp_url(), None);
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        // A fresh connection each time, so it competes with the slow ones for accept.
        assert_eq!(api.fresh_connection().hello().await.status, 200);
        slowest = slowest.max(t.elapsed());
    }
    // Not starved: all of them were served while every slow connection was still held.
    assert_eq!(
        cut.load(Ordering::SeqCst),
        0,
        "20 HELLOs outlasted the {HEADER_TIMEOUT:?} header deadline (slowest {slowest:?})"
    );
    let mut held = Vec::new();
    for c in conns {
        let (how, closed) = c.await.unwrap();
        let closed = closed.unwrap_or_else(|| panic!("a {how:?} connection was never closed"));
        held.push((how, closed));
    }
    let limit = HEADER_TIMEOUT + CUT_SLACK;
    for (how, closed) in &held {
        assert!(*closed <= limit, "{how:?} held for {closed:?}");
    }
    let max = held.iter().map(|(_, d)| *d).max().unwrap();
    attack(format!(
        "50 slowloris connections (silent, byte-a-100ms head, idle keep-alive) with header_read_timeout {HEADER_TIMEOUT:?} → all closed by the server within {max:.2?}; 20 HELLOs served meanwhile, slowest {slowest:.2?}"
    ));
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 9. Big and deep bodies
// ---------------------------------------------------------------------------------------

/// Sends a request head and then `body_len` bytes of body (in a background writer that stops
/// on the first error), and returns the status of the answer and how long it took.
async fn big_request(addr: &str, head: String, body_len: usize, chunked: bool) -> (u16, Duration) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let started = Instant::now();
    let writer = tokio::spawn(async move {
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < body_len {
            let n = chunk.len().min(body_len - sent);
            let ok = if chunked {
                let mut framed = format!("{n:x}\r\n").into_bytes();
                framed.extend_from_slice(&chunk[..n]);
                framed.extend_from_slice(b"\r\n");
                wr.write_all(&framed).await
            } else {
                wr.write_all(&chunk[..n]).await
            };
            if ok.is_err() {
                return;
            }
            sent += n;
        }
        if chunked {
            let _ = wr.write_all(b"0\r\n\r\n").await;
        }
    });
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let status = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n = rd.read(&mut tmp).await.unwrap_or(0);
            if n == 0 {
                break None;
            }
            buf.extend_from_slice(&tmp[..n]);
            if let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line = String::from_utf8_lossy(&buf[..end]).into_owned();
                break line.split_whitespace().nth(1).and_then(|s| s.parse().ok());
            }
        }
    })
    .await
    .expect("an answer within 10 s")
    .expect("a status line");
    let took = started.elapsed();
    writer.abort();
    (status, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn big_and_deep_bodies_are_refused_cheaply() {
    let s = plain_sim("big", "default", &["summarize"]).await;
    let key = unique("key");
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.tenants = vec![tenant("t", Some(&key), &["default"])];
            c.server.body_read_timeout = Duration::from_secs(1);
        })
        .spawn()
        .await;
    let addr = gw.ldp_url().trim_start_matches("http://").to_owned();
    let ten_mib = 10 * 1024 * 1024;
    let head = |extra: &str| {
        format!("POST /ldp/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer {key}\r\n{extra}\r\n")
    };
    let (status, took) = big_request(
        &addr,
        head(&format!("Content-Length: {ten_mib}\r\n")),
        ten_mib,
        false,
    )
    .await;
    // Answered at all within `big_request`'s generous 10 s: the times are reported, not
    // asserted (a loaded machine is slow, not wrong).
    assert_eq!(status, 413);
    let (status_c, took_c) =
        big_request(&addr, head("Transfer-Encoding: chunked\r\n"), ten_mib, true).await;
    assert_eq!(status_c, 413);
    let api = keyed(&gw.ldp_url(), Some(&key));
    assert_eq!(
        api.hello().await.status,
        200,
        "a normal request right after works"
    );
    attack(format!(
        "10 MiB body (Content-Length: {took:.2?}; chunked: {took_c:.2?}) → HTTP 413 PAYLOAD_TOO_LARGE, next request served"
    ));
    let unauth =
        format!("POST /ldp/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {ten_mib}\r\n\r\n");
    let (status, took_u) = big_request(&addr, unauth, ten_mib, false).await;
    assert_eq!(status, 401);
    attack(format!(
        "10 MiB body without a key → HTTP 401 before the body is read ({took_u:.2?})"
    ));

    for (name, deep) in [
        (
            "[[[…]]]",
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
        ),
        (
            "{\"a\":{\"a\":…}}",
            format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)),
        ),
    ] {
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), api.post(deep.into_bytes()))
            .await
            .expect("refused within a generous 10 s");
        let took = t.elapsed();
        assert_error_shape(&r, 400, "BAD_REQUEST", "session", false);
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("nesting"),
            "{}",
            r.json
        );
        attack(format!("body nested 10,000 levels deep ({name}) → HTTP 400 naming the nesting limit in {took:.2?}"));
    }
    // Deep inside a valid envelope's input; brackets inside a string are not nesting.
    let mut env =
        serde_json::to_value(api.envelope("s", submit_body("summarize", json!(null)))).unwrap();
    env["body"]["input"] = json!("PLACEHOLDER");
    let text = env.to_string().replace(
        "\"PLACEHOLDER\"",
        &format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
    );
    assert_eq!(api.post(text.into_bytes()).await.status, 400);
    let sid = api.accepted(json!({})).await;
    let r = api
        .task(
            &sid,
            "summarize",
            json!({"text": "[".repeat(10_000)}),
            "text",
        )
        .await;
    assert_eq!(
        r["type"], "TASK_RESULT",
        "brackets in a string are text: {r}"
    );
    attack("deep nesting inside a TASK_SUBMIT input → HTTP 400; 10,000 '[' inside a string → served (no false positive)");

    // A body that never finishes arriving.
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    wr.write_all(head("Content-Length: 100\r\n").as_bytes())
        .await
        .unwrap();
    wr.write_all(b"{\"message_id\"").await.unwrap();
    let t = Instant::now();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), rd.read(&mut buf))
        .await
        .expect("answered before 5 s")
        .unwrap();
    let line = String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    assert!(line.contains(" 408 "), "{line}");
    attack(format!(
        "request body trickled and never finished → HTTP 408 after {:.2?} (body_read_timeout 1 s)",
        t.elapsed()
    ));
    drop(wr);
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// 10. The reference SDK with signing on
// ---------------------------------------------------------------------------------------

async fn run_signed_client(python: &Path, url: &str, args: &[&str]) -> Value {
    let mut cmd = py_script(python, "ref_client_signed.py");
    cmd.args(["--url", url]).args(args);
    let out = output_within(cmd, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|_| {
        panic!(
            "no JSON line; stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_reference_sdk_works_with_signing_on() {
    let sdks = pythons("the signed reference-SDK run");
    if sdks.is_empty() {
        return;
    }
    let s = plain_sim("pysigned", "default", &["summarize"]).await;
    let key = unique("key");
    let var = "LDP_TEST_PY_SECRET";
    let secret = unique("py-secret");
    let mut t = tenant("py", Some(&key), &["default"]);
    t.signing = Some(SigningConfig {
        secret_env: var.into(),
        required: true,
    });
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .tenant(t)
        .config(|c| c.identity.delegate_id = GATEWAY_ID.into())
        .env(var, &secret)
        .spawn_process()
        .await;
    let url = gw.ldp.clone();
    for (sdk, py) in sdks {
        let var = sdk.var();
        let ok = run_signed_client(
            &py,
            &url,
            &["--api-key", &key, "--signing-secret", &secret, "--replay"],
        )
        .await;
        assert_eq!(ok["ok"], true, "{var}: {ok}");
        let results = ok["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{ok}");
        assert!(results.iter().all(|r| r["has_output"] == true), "{ok}");
        assert_eq!(ok["replay_first_status"], 200, "{ok}");
        assert_eq!(ok["replay_second_status"], 401, "{ok}");
        assert_eq!(ok["replay_second_code"], "UNAUTHENTICATED", "{ok}");
        let sdk = ok["sdk"].as_str().unwrap().to_owned();
        attack(format!(
            "reference SDK ({sdk}) LdpClient(signing_secret=…) + Authorization via client._http.headers → discover, establish_session, 2 × submit_task served; its signed message replayed → HTTP 401"
        ));
        let unsigned = run_signed_client(&py, &url, &["--api-key", &key]).await;
        assert_eq!(unsigned["ok"], false, "{unsigned}");
        assert_eq!(unsigned["status"], 401, "{unsigned}");
        let wrong = run_signed_client(
            &py,
            &url,
            &["--api-key", &key, "--signing-secret", "not-the-secret"],
        )
        .await;
        assert_eq!(wrong["status"], 401, "{wrong}");
        let no_key = run_signed_client(&py, &url, &["--signing-secret", &secret]).await;
        assert_eq!(no_key["status"], 401, "{no_key}");
        attack(format!(
            "reference SDK ({sdk}) unsigned / wrong secret / no API key → HTTP 401 at the first message"
        ));
    }
    gw.stop().await;
}

// ---------------------------------------------------------------------------------------
// 11. Admin registration allowlist
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registration_allowlist_refuses_before_any_fetch() {
    let s = plain_sim("reg", "default", &["summarize"]).await;
    let extra = plain_sim("reg2", "default", &["summarize"]).await;
    let token_var = "LDP_TEST_ADMIN_TOKEN";
    let token = unique("admin");
    let gw = TestGateway::builder()
        .delegate(&s.url())
        .config(|c| {
            c.admin.token_env = token_var.into();
            c.security.registration_allow = vec!["127.0.0.0/8".into()];
            // A card fetch that was attempted would take this long against an address that
            // never answers, far beyond the ceiling below.
            c.discovery.fetch_timeout = Duration::from_secs(60);
            c.upstream.connect_timeout = Duration::from_secs(60);
        })
        .env(token_var, &token)
        .spawn_process()
        .await;
    let admin = keyed(&gw.admin, Some(&token));
    let register = |url: String| {
        let admin = admin.clone();
        async move {
            let t = Instant::now();
            let r = admin
                .post_with(
                    "/admin/delegates",
                    json!({"url": url, "name": uuid::Uuid::new_v4().to_string()})
                        .to_string()
                        .into_bytes(),
                    &[],
                )
                .await;
            (r, t.elapsed())
        }
    };
    let (r, _) = register(extra.url()).await;
    assert_eq!(r.status, 201, "{}", r.json);
    attack("register a loopback delegate under registration_allow = [127.0.0.0/8] → HTTP 201");
    for url in [
        "http://169.254.169.254",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1:80",
        "ldp://10.0.0.1:80/x",
        "http://127.0.0.1:80@169.254.169.254/",
        "http://127.0.0.1@169.254.169.254/",
        "http://[::ffff:169.254.169.254]/",
        "http://metadata.google.internal/",
        "http://localhost:1/",
    ] {
        let (r, took) = register(url.to_owned()).await;
        // Credentials before the host (`a@b`) are refused as such (400) before the
        // allowlist is asked; every other URL by the allowlist (403).
        let refused = if url.contains('@') { 400 } else { 403 };
        assert_eq!(r.status, refused, "{url}: {}", r.json);
        // Refused before any fetch: milliseconds, not the 60 s a fetch could take (the
        // ceiling is generous; the allowlist refusal itself is unit-tested).
        assert!(
            took < Duration::from_secs(10),
            "{url}: answered after {took:?}"
        );
        attack(format!(
            "register {url} → HTTP {refused} in {took:.2?} (no fetch attempted)"
        ));
    }
    let list = admin.get("/admin/delegates").await;
    assert_eq!(
        list.json["delegates"].as_array().unwrap().len(),
        2,
        "{}",
        list.json
    );
    gw.stop().await;
}
