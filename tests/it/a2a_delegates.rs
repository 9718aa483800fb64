//! A2A agents as delegates (`kind = "a2a"`): agents built with the reference SDK's server
//! classes (`a2a-sdk` 1.3.0, `tests/interop/a2a_agent.py`) behind the gateway. An LDP client
//! (ours, and the reference LDP SDK's `LdpClient`) and an OpenAI client reach one; a client
//! session's tasks share one `contextId` upstream; a second agent takes over when the first
//! is killed; an agent whose card speaks only 0.3 is called `message/send` with
//! `A2A-Version: 0.3`; INPUT_REQUIRED ends the task; a misbehaving agent (garbage, a huge
//! answer, a JSON-RPC error, a 500, a task that is not one) is failed over, never trusted.
//!
//! The agents run on `$LDP_PY_A2A` (`eval "$(bash .ci/run venvs)"`), else the venv `.ci/run`
//! caches; without either each test prints a skip note and passes, unless
//! `LDP_INTEROP_REQUIRED=1` (CI).

use crate::support::client::submit_body;
use crate::support::process::{output_within, py_script, pythons, text, Running};
use crate::support::{eventually_async, Client, TestGateway};
use axum::routing::{get, post};
use ldp_gateway::config::{DeclaredCard, DelegateConfig, DelegateKind};
use ldp_gateway::ldp::Body;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A cold start of the SDK (protobuf, pydantic, uvicorn) on a loaded 2-core machine.
const AGENT_UP: Duration = Duration::from_secs(120);
const SKILL: &str = "echo";
const GATEWAY_ID: &str = "ldp:delegate:gateway";

/// The A2A venv's interpreter, or `None` (after a note) when there is none and it is not
/// required.
pub(crate) fn a2a_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LDP_PY_A2A").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("LDP_CI_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ldp-gateway-ci")));
    if let Some(p) = cache.map(|c| c.join("venv-a2a/bin/python")) {
        if p.exists() {
            return Some(p);
        }
    }
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(!required, "LDP_PY_A2A is not set and no venv-a2a exists");
    eprintln!("skipping the A2A delegate tests: LDP_PY_A2A is not set and no venv-a2a exists");
    None
}

/// One running SDK agent.
pub(crate) struct Agent {
    process: Running,
    pub(crate) url: String,
}

impl Agent {
    /// `a2a_agent.py name [flags]`, once it listens.
    pub(crate) async fn start(py: &Path, name: &str, flags: &[&str]) -> Agent {
        let mut cmd = py_script(py, "a2a_agent.py");
        cmd.arg(name).args(flags);
        let mut process = Running::spawn(cmd);
        let line = process.line(AGENT_UP, |l| l.starts_with("PORT ")).await;
        let port = line.trim_start_matches("PORT ").trim();
        Agent {
            process,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// What the agent saw: every contextId its executor got, every call's method and
    /// `A2A-Version`.
    async fn log(&self) -> (Vec<String>, Vec<(String, String)>) {
        let j = Client::new(&self.url).get("/log").await.json;
        let contexts = j["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap_or_default().to_owned())
            .collect();
        let calls = j["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["method"].as_str().unwrap_or_default().to_owned(),
                    c["version"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        (contexts, calls)
    }
}

/// The `[[delegates]]` entry of A2A agent `name` at `url`, declared at `quality`.
pub(crate) fn entry(name: &str, url: &str, quality: f64) -> DelegateConfig {
    DelegateConfig {
        name: Some(name.to_owned()),
        kind: DelegateKind::A2a,
        card: Some(DeclaredCard {
            skills: Vec::new(),
            quality: Some(quality),
            price_per_mtok_input: None,
            price_per_mtok_output: None,
            price_per_mtok_cache_read: None,
            price_per_mtok_cache_write: None,
            latency_p50_ms: Some(100),
            jurisdiction: Some("eu-west".into()),
            trust_domain: None,
            context_window: None,
            model_family: None,
        }),
        ..DelegateConfig::new(url)
    }
}

async fn session(c: &Client) -> String {
    c.session(json!({"preferred_payload_modes": ["text"]}))
        .await
        .0
}

fn result_of(answer: &Value) -> (&str, &str) {
    assert_eq!(answer["type"], "TASK_RESULT", "{answer}");
    (
        answer["output"].as_str().unwrap_or_default(),
        answer["provenance"]["produced_by"]
            .as_str()
            .unwrap_or_default(),
    )
}

/// An LDP client's session at an SDK agent: its two tasks answered by the agent (output from
/// its artifact, `produced_by` the agent), both in one `contextId` upstream (`SendMessage`,
/// `A2A-Version: 1.0`); another session gets another context. The card the gateway built
/// carries the agent's skill, its `ldp.*` labels and the declared rest. The reference LDP
/// SDK's `LdpClient` and an OpenAI client (`POST /v1/chat/completions`) reach it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ldp_and_openai_clients_reach_an_a2a_agent_in_one_context_per_session() {
    let Some(py) = a2a_python() else { return };
    let agent = Agent::start(&py, "one", &[]).await;
    let gw = TestGateway::builder()
        .entry(entry("one", &agent.url, 0.8))
        .config(|c| c.identity.delegate_id = GATEWAY_ID.into())
        .spawn()
        .await;

    let card = gw.delegate("one").and_then(|d| d.card()).expect("card");
    assert_eq!(card.delegate_id, "ldp:delegate:one");
    assert_eq!(
        (card.model_family.as_str(), card.model_version.as_str()),
        ("one-family", "7"),
        "from the ldp.* labels"
    );
    assert_eq!(card.jurisdiction.as_deref(), Some("eu-west"), "declared");
    assert_eq!(card.capabilities.len(), 1);
    assert_eq!(card.capabilities[0].name, SKILL);
    assert_eq!(card.effective_hints(SKILL).unwrap().quality, Some(0.8));

    let c = gw.client();
    let s = session(&c).await;
    let first = c.task(&s, SKILL, json!("hello"), "text").await;
    assert_eq!(result_of(&first), ("one: hello", "ldp:delegate:one"));
    let second = c.task(&s, SKILL, json!("again"), "text").await;
    assert_eq!(result_of(&second), ("one: again", "ldp:delegate:one"));
    let other = session(&c).await;
    let third = c.task(&other, SKILL, json!("elsewhere"), "text").await;
    assert_eq!(result_of(&third).0, "one: elsewhere");

    let (contexts, calls) = agent.log().await;
    assert_eq!(contexts.len(), 3, "{contexts:?}");
    assert_eq!(contexts[0], contexts[1], "one session, one context");
    assert!(contexts[0].starts_with("ldp-"), "{contexts:?}");
    assert_ne!(contexts[2], contexts[0], "another session, another context");
    assert!(
        calls
            .iter()
            .all(|(m, v)| (m.as_str(), v.as_str()) == ("SendMessage", "1.0")),
        "{calls:?}"
    );

    // The ledger row is the agent's.
    let task_id = first["task_id"].as_str().unwrap();
    let row = gw.ledger_row(task_id).await;
    assert_eq!(row.delegate.as_deref(), Some("one"), "{row:?}");

    // An OpenAI client: the model is the skill.
    let r = c
        .post_json(
            "/v1/chat/completions",
            &json!({"model": SKILL, "messages": [{"role": "user", "content": "hi there"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json["choices"][0]["message"]["content"], "one: hi there",
        "{}",
        r.json
    );

    // The reference LDP SDK's client: a session of two tasks.
    for (sdk, ldp_py) in pythons("reference-SDK client to an A2A agent") {
        let before = agent.log().await.0.len();
        let mut cmd = py_script(&ldp_py, "ref_client.py");
        cmd.args(["--url", &gw.ldp_url(), "--skill", SKILL, "--tasks", "2"])
            .args(["--expect-produced-by", "ldp:delegate:one"]);
        let out = output_within(cmd, AGENT_UP).await;
        let stdout = text(&out.stdout);
        let summary: Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| {
                panic!(
                    "{}: no summary: {stdout}\n{}",
                    sdk.label(),
                    text(&out.stderr)
                )
            });
        assert!(
            out.status.success() && summary["ok"] == true,
            "{}: {summary}\n{}",
            sdk.label(),
            text(&out.stderr)
        );
        let contexts = agent.log().await.0;
        assert_eq!(contexts.len(), before + 2, "{contexts:?}");
        assert_eq!(
            contexts[before],
            contexts[before + 1],
            "{}: one context",
            sdk.label()
        );
    }
    gw.shutdown().await;
    drop(agent);
}

/// Two agents offer the skill; the better one answers until it is killed, then the other
/// takes the next task of the same session (the failed call fails over within the task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_a2a_agent_takes_over_when_the_first_is_killed() {
    let Some(py) = a2a_python() else { return };
    let (one, two) = tokio::join!(Agent::start(&py, "one", &[]), Agent::start(&py, "two", &[]));
    let gw = TestGateway::builder()
        .entry(entry("one", &one.url, 0.9))
        .entry(entry("two", &two.url, 0.5))
        .spawn()
        .await;
    let c = gw.client();
    let s = session(&c).await;
    let a = c.task(&s, SKILL, json!("before"), "text").await;
    assert_eq!(result_of(&a), ("one: before", "ldp:delegate:one"));
    let _ = one.process.kill().await;
    let b = c.task(&s, SKILL, json!("after"), "text").await;
    assert_eq!(result_of(&b), ("two: after", "ldp:delegate:two"));
    let row = gw.ledger_row(b["task_id"].as_str().unwrap()).await;
    assert_eq!(row.delegate.as_deref(), Some("two"), "{row:?}");
    gw.shutdown().await;
    drop(two);
}

/// An agent whose card offers only a 0.3 JSON-RPC interface is called `message/send` with
/// `A2A-Version: 0.3` and answered; an INPUT_REQUIRED task ends failed with a clear message
/// (the gateway holds no interrupted task), a FAILED one fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v03_agent_is_called_with_v03_names_and_interrupted_tasks_fail() {
    let Some(py) = a2a_python() else { return };
    let old = Agent::start(&py, "old", &["--v03"]).await;
    let gw = TestGateway::builder()
        .entry(entry("old", &old.url, 0.8))
        .spawn()
        .await;
    let c = gw.client();
    let s = session(&c).await;
    let a = c.task(&s, SKILL, json!("hi"), "text").await;
    assert_eq!(result_of(&a), ("old: hi", "ldp:delegate:old"));

    let asked = c.task(&s, SKILL, json!("ask me"), "text").await;
    assert_eq!(asked["type"], "TASK_FAILED", "{asked}");
    assert_eq!(asked["error"]["code"], "INPUT_REQUIRED", "{asked}");
    let message = asked["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("does not hold interrupted tasks") && message.contains("which file?"),
        "{message}"
    );
    let failed = c.task(&s, SKILL, json!("fail"), "text").await;
    assert_eq!(failed["type"], "TASK_FAILED", "{failed}");
    assert_eq!(failed["error"]["code"], "UPSTREAM_FAILED", "{failed}");

    let (_, calls) = old.log().await;
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|(m, v)| (m.as_str(), v.as_str()) == ("message/send", "0.3")),
        "{calls:?}"
    );
    gw.shutdown().await;
    drop(old);
}

/// What the rogue agent answers its n-th call with: status and body.
fn rogue_answer(n: usize) -> (u16, Vec<u8>) {
    let rpc = |result: Value| {
        json!({"jsonrpc": "2.0", "id": "x", "result": result})
            .to_string()
            .into_bytes()
    };
    match n % 6 {
        0 => (200, b"{not json at all".to_vec()),
        // Past the transport's 8 MiB answer cap.
        1 => (
            200,
            rpc(
                json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x".repeat(9 << 20)}]}]}}),
            ),
        ),
        2 => (
            200,
            json!({"jsonrpc": "2.0", "id": "x", "error": {"code": -32603, "message": "boom"}})
                .to_string()
                .into_bytes(),
        ),
        3 => (500, b"upstream exploded".to_vec()),
        4 => (200, rpc(json!({"task": {"nope": [1, 2, 3]}}))),
        _ => (
            200,
            rpc(json!({"task": {"id": "t", "status": {"state": "TASK_STATE_WORKING"}}})),
        ),
    }
}

/// A misbehaving agent (a fine card, at the v0.3 path only, then garbage, an answer past the cap, a JSON-RPC error,
/// a 500, a task that is not one, a task still working) is preferred by quality and fails
/// over to an SDK agent every time: the client always gets the good agent's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_a2a_agent_is_failed_over_every_time() {
    let Some(py) = a2a_python() else { return };
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new()
        .route(
            // Only the v0.3 card path: the gateway falls back to it.
            "/.well-known/agent.json",
            get(|| async {
                axum::Json(json!({"name": "rogue", "version": "1",
                    "supportedInterfaces": [{"url": "/", "protocolBinding": "JSONRPC",
                        "protocolVersion": "1.0"}],
                    "skills": [{"id": SKILL, "name": "Echo"}]}))
            }),
        )
        .route(
            "/",
            post(move || {
                let n = counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    let (status, body) = rogue_answer(n);
                    axum::response::Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(body))
                        .unwrap()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rogue_url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let good = Agent::start(&py, "good", &[]).await;
    let gw = TestGateway::builder()
        .entry(entry("rogue", &rogue_url, 0.99))
        .entry(entry("good", &good.url, 0.1))
        // The rogue is never ejected for its faults, so each task tries it first.
        .config(|c| {
            c.outlier.consecutive_failures = 1000;
            c.outlier.min_requests = 1000;
        })
        .spawn()
        .await;
    let c = gw.client();
    for i in 0..6 {
        let s = session(&c).await;
        let input = format!("task {i}");
        let a = c.task(&s, SKILL, json!(input), "text").await;
        assert_eq!(
            result_of(&a),
            (format!("good: {input}").as_str(), "ldp:delegate:good"),
            "case {i}"
        );
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        6,
        "each case reached the rogue"
    );
    gw.shutdown().await;
    server.abort();
    drop(good);
}

/// An agent whose card says it streams is sent `SendStreamingMessage`: a streaming LDP
/// client hears its status message as a TASK_UPDATE before the result; a client's
/// TASK_CANCEL of a slow task becomes `CancelTask` for the task the agent named, and the
/// client's task ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_a2a_agent_relays_updates_and_takes_cancels() {
    let Some(py) = a2a_python() else { return };
    let agent = Agent::start(&py, "live", &["--stream"]).await;
    let gw = TestGateway::builder()
        .entry(entry("live", &agent.url, 0.8))
        .spawn()
        .await;
    let c = gw.client();
    let s = session(&c).await;
    let env = c.envelope(&s, submit_body(SKILL, json!("streamed")));
    let (status, events) = c.stream(&env).await;
    assert_eq!(status, 200);
    let told: Vec<&str> = events
        .iter()
        .filter(|e| e["body"]["type"] == "TASK_UPDATE")
        .filter_map(|e| e["body"]["message"].as_str())
        .collect();
    assert!(told.contains(&"working on it"), "{events:?}");
    let last = &events.last().expect("events")["body"];
    assert_eq!(result_of(last), ("live: streamed", "ldp:delegate:live"));

    // A slow task, cancelled once the agent runs it.
    let submit = submit_body(SKILL, json!("slow"));
    let Body::TaskSubmit { task_id, .. } = &submit else {
        unreachable!()
    };
    let task_id = task_id.clone();
    let running = {
        let (c, s) = (c.clone(), s.clone());
        tokio::spawn(async move { c.send_body(&s, submit).await })
    };
    let started = eventually_async(AGENT_UP, || async { agent.log().await.0.len() == 2 }).await;
    assert!(started, "the slow task never reached the agent");
    let cancel = c.send_body(&s, Body::TaskCancel { task_id }).await;
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let answer = running.await.expect("joined").json;
    assert_eq!(answer["body"]["type"], "TASK_FAILED", "{answer}");
    assert_eq!(answer["body"]["error"]["code"], "CANCELLED", "{answer}");
    let cancelled_upstream = eventually_async(AGENT_UP, || async {
        let j = Client::new(&agent.url).get("/log").await.json;
        j["cancelled"].as_array().is_some_and(|a| a.len() == 1)
    })
    .await;
    assert!(cancelled_upstream, "the agent was never asked to cancel");
    let (_, calls) = agent.log().await;
    let methods: Vec<&str> = calls.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        ["SendStreamingMessage", "SendStreamingMessage", "CancelTask"],
        "{calls:?}"
    );
    gw.shutdown().await;
    drop(agent);
}

/// A card change takes effect at the next poll: an agent that starts offering another skill
/// at another JSON-RPC path is routed that skill there; a card naming the gateway's own
/// `ldp.delegate_id` marks it down (routing to it would loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_card_change_takes_effect_at_the_next_poll() {
    let version = Arc::new(AtomicUsize::new(0));
    let card_version = version.clone();
    let answer = |text: &str| {
        axum::Json(
            json!({"jsonrpc": "2.0", "id": "x", "result": {"task": {"id": "t",
            "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"artifactId": "a", "parts": [{"text": text}]}]}}}),
        )
    };
    let app = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || {
                let v = card_version.load(Ordering::SeqCst);
                async move {
                    // A path, then a path relative to the agent's URL: both on its origin.
                    let (path, skill) = if v == 0 {
                        ("/v1", SKILL)
                    } else {
                        ("v2", "shout")
                    };
                    let mut card = json!({"name": "changing", "version": v.to_string(),
                        "supportedInterfaces": [{"url": path,
                            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                        "skills": [{"id": skill, "name": skill}]});
                    if v == 2 {
                        card["capabilities"] = json!({"extensions": [{"uri": "urn:x",
                            "params": {"ldp.delegate_id": GATEWAY_ID}}]});
                    }
                    axum::Json(card)
                }
            }),
        )
        .route("/v1", post(move || async move { answer("from v1") }))
        .route("/v2", post(move || async move { answer("from v2") }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let gw = TestGateway::builder()
        .entry(entry("changing", &url, 0.8))
        .config(|c| {
            c.identity.delegate_id = GATEWAY_ID.into();
            c.discovery.poll_interval = Duration::from_millis(100);
        })
        .spawn()
        .await;
    let c = gw.client();
    let s = session(&c).await;
    let a = c.task(&s, SKILL, json!("x"), "text").await;
    assert_eq!(result_of(&a), ("from v1", "ldp:delegate:changing"));

    version.store(1, Ordering::SeqCst);
    let d = gw.delegate("changing").expect("registered");
    let changed = crate::support::eventually(Duration::from_secs(10), || {
        d.card().is_some_and(|c| c.capability("shout").is_some())
    })
    .await;
    assert!(changed, "the new card was never read: {:?}", d.card());
    let b = c.task(&s, "shout", json!("y"), "text").await;
    assert_eq!(result_of(&b), ("from v2", "ldp:delegate:changing"));
    let gone = c.task_resp(&s, SKILL, json!("z")).await;
    assert_eq!(gone.envelope().body.message_type().as_str(), "TASK_FAILED");

    version.store(2, Ordering::SeqCst);
    let down = crate::support::eventually(Duration::from_secs(10), || !d.is_healthy()).await;
    assert!(down, "a card with the gateway's own id left the agent up");
    assert!(
        d.last_error().is_some_and(|e| e.contains("own")),
        "{:?}",
        d.last_error()
    );
    gw.shutdown().await;
    server.abort();
}

/// A streaming agent of 0.3 is sent `message/stream` and, at a cancel, `tasks/cancel`, both
/// with `A2A-Version: 0.3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_v03_agent_is_streamed_and_cancelled_with_v03_names() {
    let Some(py) = a2a_python() else { return };
    let agent = Agent::start(&py, "old", &["--v03", "--stream"]).await;
    let gw = TestGateway::builder()
        .entry(entry("old", &agent.url, 0.8))
        .spawn()
        .await;
    let c = gw.client();
    let s = session(&c).await;
    let a = c.task(&s, SKILL, json!("hi"), "text").await;
    assert_eq!(result_of(&a), ("old: hi", "ldp:delegate:old"));
    let submit = submit_body(SKILL, json!("slow"));
    let Body::TaskSubmit { task_id, .. } = &submit else {
        unreachable!()
    };
    let task_id = task_id.clone();
    let running = {
        let (c, s) = (c.clone(), s.clone());
        tokio::spawn(async move { c.send_body(&s, submit).await })
    };
    let started = eventually_async(AGENT_UP, || async { agent.log().await.0.len() == 2 }).await;
    assert!(started, "the slow task never reached the agent");
    c.send_body(&s, Body::TaskCancel { task_id }).await;
    let answer = running.await.expect("joined").json;
    assert_eq!(answer["body"]["error"]["code"], "CANCELLED", "{answer}");
    let (_, calls) = agent.log().await;
    assert_eq!(
        calls,
        [
            ("message/stream".to_owned(), "0.3".to_owned()),
            ("message/stream".to_owned(), "0.3".to_owned()),
            ("tasks/cancel".to_owned(), "0.3".to_owned()),
        ]
    );
    gw.shutdown().await;
    drop(agent);
}

/// A2A both ways: an A2A client (v1.0 JSON-RPC `SendMessage` at the gateway's `/a2a`) is
/// answered by an SDK agent behind the gateway, through one governed task (its ledger row:
/// ingress `a2a`, the agent as delegate); two messages of one A2A context reach the agent in
/// one context of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_client_reaches_an_a2a_agent_through_the_gateway() {
    let Some(py) = a2a_python() else { return };
    let agent = Agent::start(&py, "one", &[]).await;
    let gw = TestGateway::builder()
        .entry(entry("one", &agent.url, 0.8))
        .spawn()
        .await;
    let c = gw.client();
    for (n, text) in ["hi", "again"].into_iter().enumerate() {
        let body = json!({"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {
            "message": {"messageId": format!("m-{n}"), "role": "ROLE_USER",
                "parts": [{"text": text}], "contextId": "ctx-1",
                "metadata": {"skill": SKILL}}}});
        let headers = [("content-type", "application/json"), ("A2A-Version", "1.0")];
        let r = c
            .post_with("/a2a", body.to_string().into_bytes(), &headers)
            .await;
        let task = &r.json["result"]["task"];
        assert_eq!(
            task["status"]["state"],
            "TASK_STATE_COMPLETED",
            "{}",
            r.text()
        );
        let out = &task["artifacts"][0]["parts"][0]["text"];
        assert_eq!(
            out.as_str(),
            Some(format!("one: {text}").as_str()),
            "{task}"
        );
        let row = gw.ledger_row(task["id"].as_str().unwrap()).await;
        assert_eq!(row.ingress, ldp_gateway::provenance::Ingress::A2a);
        assert_eq!(row.delegate.as_deref(), Some("one"));
    }
    let (contexts, calls) = agent.log().await;
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(contexts.len(), 2, "{contexts:?}");
    assert_eq!(
        contexts[0], contexts[1],
        "one A2A context, one upstream context"
    );
    gw.shutdown().await;
}
