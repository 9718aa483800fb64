//! The A2A bridge (issue 27 item 1) end to end: the real `a2a-sdk` client (the pinned venv's,
//! `tests/interop/a2a_client.py`) discovers the gateway's card, sends to an LDP, an A2A and an
//! OpenAI-backed delegate, streams, gets and cancels a slow task, and cannot see another
//! tenant's task; the card's ETag and LDP identity extension; the v0.3 method names by raw
//! JSON-RPC; every error code; a `contextId` keeping an OpenAI-backed delegate's
//! conversation; a refusal as `TASK_STATE_REJECTED`.

use crate::support::cards::card;
use crate::support::openai::{declared, entry, sse_data, start};
use crate::support::process::{output_within, py_script, text};
use crate::support::{Client, TestGateway};
use ldp_gateway::config::TenantConfig;
use ldp_gateway::provenance::Ingress;
use ldp_gateway::sim::openai::{OpenAiHandle, OpenAiOptions};
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const KEY: &str = "sk-a2a-acme";
const OTHER_KEY: &str = "sk-a2a-other";
/// The LDP delegate's skill.
const SUMMARIZE: &str = "summarize";
/// The OpenAI-backed delegate's skill.
const CHAT: &str = "chat";
/// The slow LDP delegate's skill (its tasks take [`SLOW`]).
const SLOW_SKILL: &str = "ponder";
const SLOW: Duration = Duration::from_secs(30);
const MODEL: &str = "sim-mini";
/// The A2A agent's skill (an SDK agent behind the gateway).
const ECHO: &str = "echo";
/// A cold start of the SDK and a dozen calls on a loaded 2-core machine.
const SDK_WITHIN: Duration = Duration::from_secs(180);

fn tenant(name: &str, key: &str) -> TenantConfig {
    serde_json::from_value(json!({
        "name": name,
        "api_key_sha256": [ldp_gateway::secret::hash_key(key)],
        "trust_domains": ["default"],
    }))
    .unwrap()
}

/// LDP `sim-ldp` (summarize, 5 ms), LDP `sim-slow` (ponder, 30 s) and the OpenAI-backed
/// `mini` (chat) in front of `oa`; tenants `acme` and `other`; `summarize` the default A2A
/// skill.
async fn gateway(oa: &OpenAiHandle) -> TestGateway {
    gateway_with(oa, None).await
}

/// [`gateway`], with an A2A agent (a `kind = "a2a"` entry) in the fleet too.
async fn gateway_with(
    oa: &OpenAiHandle,
    agent: Option<ldp_gateway::config::DelegateConfig>,
) -> TestGateway {
    let mut fast = SimOptions::new(card("sim-ldp", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    fast.latency = Duration::from_millis(5);
    let mut slow = SimOptions::new(card("sim-slow", "default", &[(SLOW_SKILL, 0.9)], &["text"]));
    slow.latency = SLOW;
    let mut b = TestGateway::builder().sim(fast).sim(slow).entry(entry(
        "mini",
        &oa.url(),
        MODEL,
        declared(&[CHAT], 0.8),
    ));
    let healthy = 3 + usize::from(agent.is_some());
    if let Some(a) = agent {
        b = b.entry(a);
    }
    b.tenant(tenant("acme", KEY))
        .tenant(tenant("other", OTHER_KEY))
        .healthy(healthy)
        .config(|c| c.a2a.default_skill = Some(SUMMARIZE.into()))
        .spawn()
        .await
}

fn client(gw: &TestGateway) -> Client {
    gw.client().with_key(Some(KEY))
}

/// A JSON-RPC call of `method` with `params`, `A2A-Version: version` (none when `None`).
pub(crate) async fn rpc(
    c: &Client,
    method: &str,
    params: Value,
    version: Option<&str>,
) -> crate::support::Resp {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    rpc_raw(c, body.to_string().into_bytes(), version).await
}

pub(crate) async fn rpc_raw(
    c: &Client,
    body: Vec<u8>,
    version: Option<&str>,
) -> crate::support::Resp {
    let mut h = vec![("content-type", "application/json")];
    if let Some(v) = version {
        h.push(("A2A-Version", v));
    }
    c.post_with("/a2a", body, &h).await
}

/// A v1.0 message of `text` (with `metadata`).
pub(crate) fn v1_message(text: &str, metadata: Value) -> Value {
    json!({"message": {"messageId": ldp_gateway::ldp::new_id(), "role": "ROLE_USER",
        "parts": [{"text": text}], "metadata": metadata}})
}

/// A v0.3 message of `text` for `skill`.
fn v03_message(text: &str, skill: &str) -> Value {
    json!({"message": {"kind": "message", "messageId": ldp_gateway::ldp::new_id(), "role": "user",
        "parts": [{"kind": "text", "text": text}], "metadata": {"skill": skill}}})
}

/// `SubscribeToTask` of task `id` with `key` through `c`: the open event stream and its first
/// chunk (the task as it is now: the subscription is in place).
pub(crate) async fn subscribe(c: &Client, key: &str, id: &str) -> (reqwest::Response, String) {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": id}});
    let mut sub = reqwest::Client::new()
        .post(c.url("/a2a"))
        .header("authorization", format!("Bearer {key}"))
        .header("A2A-Version", "1.0")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(sub.headers()["content-type"], "text/event-stream");
    let first = String::from_utf8(sub.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    (sub, first)
}

/// Reads `sub` to its end into `seen`; its last event's JSON.
pub(crate) async fn last_event(sub: &mut reqwest::Response, seen: &mut String) -> Value {
    while let Some(chunk) = sub.chunk().await.unwrap() {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let last = seen.trim_end().rsplit("data: ").next().unwrap();
    serde_json::from_str(last).unwrap()
}

pub(crate) fn a2a_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LDP_PY_A2A").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let cached = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/ldp-gateway-ci/venv-a2a/bin/python"))
        .filter(|p| p.exists());
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(
        cached.is_some() || !required,
        "LDP_PY_A2A is not set and no venv-a2a exists, but LDP_INTEROP_REQUIRED=1"
    );
    if cached.is_none() {
        eprintln!(
            "skipping the a2a-sdk client test: no LDP_PY_A2A (`eval \"$(bash .ci/run venvs)\"`)"
        );
    }
    cached
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_a2a_sdk_client_discovers_sends_streams_gets_and_cancels() {
    let Some(py) = a2a_python() else { return };
    let oa = start(OpenAiOptions::new(MODEL)).await;
    // An SDK agent behind the gateway too: A2A in front and behind.
    let agent = crate::a2a_delegates::Agent::start(&py, "one", &[]).await;
    let behind = crate::a2a_delegates::entry("one", &agent.url, 0.8);
    let gw = gateway_with(&oa, Some(behind)).await;
    let base = client(&gw).url("");
    let base = base.trim_end_matches('/').to_owned();
    let mut cmd = py_script(&py, "a2a_client.py");
    cmd.args([&base, KEY, OTHER_KEY, SUMMARIZE, CHAT, SLOW_SKILL, ECHO]);
    let out = output_within(cmd, SDK_WITHIN).await;
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let r: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();

    let card = &r["card"];
    assert_eq!(card["url"], format!("{base}/a2a"));
    assert_eq!(
        (card["binding"].as_str(), card["version"].as_str()),
        (Some("JSONRPC"), Some("1.0"))
    );
    assert_eq!(card["streaming"], true);
    assert_eq!(card["skills"], json!([CHAT, ECHO, SLOW_SKILL, SUMMARIZE]));
    assert_eq!(card["security"], json!(["bearer"]));
    let ext = &card["extensions"][0];
    assert_eq!(
        ext["uri"],
        ldp_gateway::frontend::a2a::IDENTITY_EXTENSION_URI
    );
    assert!(
        ext["params"]["ldp.delegate_id"]
            .as_str()
            .unwrap()
            .starts_with("ldp:delegate:"),
        "{ext}"
    );

    for (skill, delegate) in [(SUMMARIZE, "d0"), (CHAT, "mini"), (ECHO, "one")] {
        let t = &r["send"][skill];
        assert_eq!(t["state"], "TASK_STATE_COMPLETED", "{skill}: {t}");
        assert!(!t["output"].as_str().unwrap().is_empty(), "{t}");
        assert_eq!(t["metadata"]["ldp_delegate"], delegate, "{t}");
        let produced = t["metadata"]["ldp_provenance"]["produced_by"]
            .as_str()
            .unwrap();
        assert!(produced.starts_with("ldp:delegate:"), "{t}");
        let row = gw.ledger_row(t["id"].as_str().unwrap()).await;
        assert_eq!((row.ingress, row.skill.as_str()), (Ingress::A2a, skill));
    }

    let kinds = r["stream"].as_array().unwrap();
    assert_eq!(
        kinds[0],
        json!(["task", "TASK_STATE_SUBMITTED"]),
        "{kinds:?}"
    );
    assert_eq!(
        kinds[1],
        json!(["status", "TASK_STATE_WORKING"]),
        "{kinds:?}"
    );
    let n = kinds.len();
    assert_eq!(kinds[n - 2][0], "artifact", "{kinds:?}");
    assert_eq!(
        kinds[n - 1],
        json!(["status", "TASK_STATE_COMPLETED"]),
        "{kinds:?}"
    );
    assert_eq!(r["get"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(r["get"]["output"], kinds[n - 2][1]);
    assert_eq!(r["other_tenant_get"], "TaskNotFoundError");

    assert_eq!(r["slow_submitted"], "TASK_STATE_SUBMITTED");
    assert_eq!(r["cancel"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(r["after_cancel"]["state"], "TASK_STATE_CANCELED");
    assert_eq!(r["cancel_again"], "TaskNotCancelableError");
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_card_has_etag_max_age_and_ldp_labels() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    // Public: no key needed to discover how to authenticate.
    let http = reqwest::Client::new();
    let url = gw.client().url("/.well-known/agent-card.json");
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(r.headers()["cache-control"], "max-age=60");
    let card: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    let labels = &card["capabilities"]["extensions"][0]["params"];
    for k in [
        "ldp.delegate_id",
        "ldp.model_family",
        "ldp.trust_domain",
        "ldp.payload_modes",
    ] {
        assert!(
            labels[k].as_str().is_some_and(|v| !v.is_empty()),
            "{k}: {labels}"
        );
    }
    assert_eq!(card["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(
        card["securityRequirements"][0]["schemes"]["bearer"],
        json!({})
    );
    let again = http
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_v03_method_names_answer_v03_shapes() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    let c = client(&gw);
    let r = rpc(&c, "message/send", v03_message("hi", SUMMARIZE), None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t = &r.json["result"];
    assert_eq!(
        (t["kind"].as_str(), t["status"]["state"].as_str()),
        (Some("task"), Some("completed")),
        "{t}"
    );
    assert_eq!(t["artifacts"][0]["parts"][0]["kind"], "data", "{t}");
    let id = t["id"].as_str().unwrap();

    let got = rpc(&c, "tasks/get", json!({"id": id}), Some("0.3")).await;
    assert_eq!(got.json["result"]["kind"], "task", "{}", got.text());
    assert_eq!(got.json["result"]["status"]["state"], "completed");

    let s = rpc(&c, "message/stream", v03_message("hi", SUMMARIZE), None).await;
    let events: Vec<Value> = sse_data(&s)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["result"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"status-update"), "{kinds:?}");
    assert!(kinds.contains(&"artifact-update"), "{kinds:?}");
    assert_eq!(events.last().unwrap()["result"]["final"], true);

    let slow = json!({"message": v03_message("slow", SLOW_SKILL)["message"],
        "configuration": {"blocking": false}});
    let sub = rpc(&c, "message/send", slow, None).await;
    assert_eq!(
        sub.json["result"]["status"]["state"],
        "submitted",
        "{}",
        sub.text()
    );
    let slow_id = sub.json["result"]["id"].as_str().unwrap().to_owned();
    let cancel = rpc(&c, "tasks/cancel", json!({"id": slow_id}), None).await;
    assert_eq!(
        cancel.json["result"]["status"]["state"],
        "canceled",
        "{}",
        cancel.text()
    );
    // Resubscribing to a terminal task: nothing to stream (-32004).
    let re = rpc(&c, "tasks/resubscribe", json!({"id": slow_id}), None).await;
    assert_eq!(re.json["error"]["code"], -32004, "{}", re.text());
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_answers_every_error_code() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    let c = client(&gw);
    let code = |r: &crate::support::Resp| r.json["error"]["code"].as_i64();

    let r = rpc_raw(&c, b"{not json".to_vec(), Some("1.0")).await;
    assert_eq!((r.status, code(&r)), (200, Some(-32700)), "{}", r.text());
    let r = rpc_raw(
        &c,
        br#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#.to_vec(),
        Some("1.0"),
    )
    .await;
    assert_eq!(code(&r), Some(-32600), "{}", r.text());
    let r = rpc(&c, "NoSuchMethod", json!({}), Some("1.0")).await;
    assert_eq!(code(&r), Some(-32601), "{}", r.text());
    let r = rpc(&c, "GetTask", json!({"nope": 1}), Some("1.0")).await;
    assert_eq!(code(&r), Some(-32602), "{}", r.text());
    let r = rpc(&c, "GetTask", json!({"id": "no-such-task"}), Some("1.0")).await;
    assert_eq!(code(&r), Some(-32001), "{}", r.text());
    assert_eq!(r.json["error"]["data"][0]["reason"], "TASK_NOT_FOUND");
    let r = rpc(
        &c,
        "GetTaskPushNotificationConfig",
        json!({"taskId": "t", "id": "c"}),
        Some("1.0"),
    )
    .await;
    assert_eq!(code(&r), Some(-32003), "{}", r.text());
    let mut push = v1_message("hi", json!({}));
    push["configuration"] = json!({"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/cb"}});
    let r = rpc(&c, "SendMessage", push, Some("1.0")).await;
    assert_eq!(code(&r), Some(-32003), "{}", r.text());
    let r = rpc(&c, "ListTasks", json!({}), Some("1.0")).await;
    assert_eq!(code(&r), Some(-32004), "{}", r.text());
    // A v1.0 method without a version (0.3) or with one the gateway does not speak.
    for v in [None, Some("2.0")] {
        let r = rpc(&c, "SendMessage", v1_message("hi", json!({})), v).await;
        assert_eq!(code(&r), Some(-32009), "{v:?}: {}", r.text());
    }

    // -32002: cancel a completed task.
    let done = rpc(&c, "SendMessage", v1_message("hi", json!({})), Some("1.0")).await;
    let task = &done.json["result"]["task"];
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        done.text()
    );
    let r = rpc(&c, "CancelTask", json!({"id": task["id"]}), Some("1.0")).await;
    assert_eq!(code(&r), Some(-32002), "{}", r.text());

    // Another tenant's task is not found, for GetTask and CancelTask alike.
    let other = gw.client().with_key(Some(OTHER_KEY));
    for m in ["GetTask", "CancelTask"] {
        let r = rpc(&other, m, json!({"id": task["id"]}), Some("1.0")).await;
        assert_eq!(code(&r), Some(-32001), "{m}: {}", r.text());
    }

    // No key: 401 with a JSON-RPC error body.
    let anon = gw.client().with_key(None);
    let r = rpc(&anon, "GetTask", json!({"id": "x"}), Some("1.0")).await;
    assert_eq!((r.status, code(&r)), (401, Some(-32600)), "{}", r.text());
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    gw.shutdown().await;
}

/// JSON-RPC 2.0 §4.1 (issue 37 item 12): a notification — a request without an `id` member —
/// gets no JSON-RPC answer, HTTP 204 with no body, whatever it asks or gets wrong; a send
/// notification runs no task, a cancel notification cancels. The same calls with an id are
/// answered, `"id": null` included (a request, not a notification); a body that is no request
/// at all, and a batch, are answered `id: null`.
#[tokio::test]
async fn bridge_a2a_does_not_answer_notifications() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    let c = client(&gw);
    let notify = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "method": method, "params": params})
            .to_string()
            .into_bytes()
    };
    let unanswered = |r: &crate::support::Resp, what: &str| {
        assert_eq!(r.status, 204, "{what}: {}", r.text());
        assert!(r.raw.is_empty(), "{what}: {}", r.text());
    };

    // A send: not answered, and no task ran (the default skill's delegate was never asked).
    let send = notify("SendMessage", v1_message("hi", json!({})));
    unanswered(&rpc_raw(&c, send, Some("1.0")).await, "SendMessage");
    assert_eq!(gw.sim(0).stats().tasks, 0, "a send notification ran a task");
    // Reads, and what would be errors for a request (no such task, no such method, bad
    // params, a version the gateway does not speak): not answered either.
    for (method, params, version) in [
        ("GetTask", json!({"id": "no-such-task"}), Some("1.0")),
        ("NoSuchMethod", json!({}), Some("1.0")),
        ("GetTask", json!({"nope": 1}), Some("1.0")),
        ("SendMessage", v1_message("hi", json!({})), None),
        ("CancelTask", json!({"id": "no-such-task"}), Some("1.0")),
    ] {
        let r = rpc_raw(&c, notify(method, params.clone()), version).await;
        unanswered(&r, &format!("{method} {params} {version:?}"));
    }

    // A cancel notification cancels: a slow task, submitted at once, is then canceled.
    let mut slow = v1_message("slow", json!({"skill": SLOW_SKILL}));
    slow["configuration"] = json!({"returnImmediately": true});
    let r = rpc(&c, "SendMessage", slow, Some("1.0")).await;
    let id = r.json["result"]["task"]["id"].as_str().unwrap().to_owned();
    let cancel = notify("CancelTask", json!({"id": id}));
    unanswered(&rpc_raw(&c, cancel, Some("1.0")).await, "CancelTask");
    let r = rpc(&c, "GetTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(
        r.json["result"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        r.text()
    );

    // A request with an id is answered, and runs.
    let r = rpc(&c, "SendMessage", v1_message("hi", json!({})), Some("1.0")).await;
    assert_eq!(
        (r.status, r.json["id"].as_i64()),
        (200, Some(7)),
        "{}",
        r.text()
    );
    assert_eq!(
        r.json["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert_eq!(gw.sim(0).stats().tasks, 1);
    // `"id": null` is a request with a null id: answered, with it.
    let body = json!({"jsonrpc": "2.0", "id": null, "method": "GetTask",
        "params": {"id": "no-such-task"}});
    let r = rpc_raw(&c, body.to_string().into_bytes(), Some("1.0")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json.get("id").is_some_and(Value::is_null), "{}", r.text());
    assert_eq!(r.json["error"]["code"], -32001, "{}", r.text());
    // No request at all (no `jsonrpc`), and a batch (of notifications, even): one error,
    // `id: null`.
    for body in [
        json!({"method": "GetTask", "params": {"id": "x"}}),
        json!([{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}]),
    ] {
        let r = rpc_raw(&c, body.to_string().into_bytes(), Some("1.0")).await;
        assert_eq!(
            (r.status, r.json["error"]["code"].as_i64()),
            (200, Some(-32600)),
            "{body}"
        );
        assert!(r.json["id"].is_null(), "{}", r.text());
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_context_keeps_the_conversation_and_a_refusal_is_rejected() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    let c = client(&gw);
    let chat = json!({"skill": CHAT});
    let mut first = v1_message("my name is Ada", chat.clone());
    first["message"]["contextId"] = json!("ctx-1");
    let r = rpc(&c, "SendMessage", first, Some("1.0")).await;
    let t = &r.json["result"]["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_COMPLETED", "{}", r.text());
    assert_eq!(t["contextId"], "ctx-1");
    let mut second = v1_message("what is my name?", chat.clone());
    second["message"]["contextId"] = json!("ctx-1");
    rpc(&c, "SendMessage", second, Some("1.0")).await;
    // A new context starts afresh.
    rpc(&c, "SendMessage", v1_message("hello", chat), Some("1.0")).await;
    let counts: Vec<usize> = oa
        .requests()
        .iter()
        .map(|r| r["messages"].as_array().map_or(0, Vec::len))
        .collect();
    // The second task of ctx-1 carries the first turn (user, assistant, user).
    assert_eq!(counts, [1, 3, 1], "{:?}", oa.requests());

    let r = rpc(
        &c,
        "SendMessage",
        v1_message("hi", json!({"policy": "no-such-policy"})),
        Some("1.0"),
    )
    .await;
    let t = &r.json["result"]["task"];
    assert_eq!(t["status"]["state"], "TASK_STATE_REJECTED", "{}", r.text());
    let said = t["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(said.starts_with("LDP UNKNOWN_POLICY"), "{said}");
    assert_eq!(t["metadata"]["ldp_error"]["code"], "UNKNOWN_POLICY");
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_subscribe_follows_a_running_task_to_its_end() {
    let oa = start(OpenAiOptions::new(MODEL)).await;
    let gw = gateway(&oa).await;
    let c = client(&gw);
    let mut slow = v1_message("slow", json!({"skill": SLOW_SKILL}));
    slow["configuration"] = json!({"returnImmediately": true});
    let r = rpc(&c, "SendMessage", slow, Some("1.0")).await;
    let id = r.json["result"]["task"]["id"].as_str().unwrap().to_owned();
    let (mut sub, mut seen) = subscribe(&c, KEY, &id).await;
    // The first event is the task as it is now (the subscription is in place).
    assert!(seen.contains("\"task\""), "{seen}");
    let cancel = rpc(&c, "CancelTask", json!({"id": id}), Some("1.0")).await;
    assert_eq!(
        cancel.json["result"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{}",
        cancel.text()
    );
    // Then the cancellation, and the stream ends.
    let last = last_event(&mut sub, &mut seen).await;
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED",
        "{seen}"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn bridge_a2a_context_keeps_its_delegate() {
    // Two equal LDP delegates of one skill: every task of a context goes to the one its
    // first task was routed to.
    let mut a = SimOptions::new(card("twin-a", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    a.latency = Duration::from_millis(2);
    let mut b = SimOptions::new(card("twin-b", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    b.latency = Duration::from_millis(2);
    let even = "name = \"even\"\n[weights]\nquality = 1.0\ncost = 0.0\nlatency = 0.0\n[balance]\ntolerance = 0.05\n";
    let gw = TestGateway::builder()
        .sim(a)
        .sim(b)
        .tenant(tenant("acme", KEY))
        .healthy(2)
        .policy("even.toml", even)
        .config(|c| c.policies.default = "even".into())
        .spawn()
        .await;
    let c = client(&gw);
    let mut per_context = Vec::new();
    for ctx in ["ctx-a", "ctx-b", "ctx-c"] {
        let mut delegates = std::collections::BTreeSet::new();
        for _ in 0..4 {
            let mut m = v1_message("hi", json!({"skill": SUMMARIZE}));
            m["message"]["contextId"] = json!(ctx);
            let r = rpc(&c, "SendMessage", m, Some("1.0")).await;
            let d = &r.json["result"]["task"]["metadata"]["ldp_delegate"];
            delegates.insert(
                d.as_str()
                    .unwrap_or_else(|| panic!("{}", r.text()))
                    .to_owned(),
            );
        }
        per_context.push(delegates.len());
    }
    assert_eq!(per_context, [1, 1, 1]);
    gw.shutdown().await;
}

/// `SendMessage` (v1.0) of `message`: its task, which must have completed.
async fn completed(c: &Client, message: Value) -> Value {
    let r = rpc(c, "SendMessage", message, Some("1.0")).await;
    let task = r.json["result"]["task"].clone();
    assert_eq!(
        task["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{}",
        r.text()
    );
    task
}

/// A context's first task runs on the tenant's upstream session: messages that each start a
/// context cost the LDP delegate one handshake in all, not one per message (and no close);
/// a context that continues opens its own upstream session with the same delegate.
#[tokio::test]
async fn bridge_a2a_a_context_of_one_message_opens_no_upstream_session() {
    let mut fast = SimOptions::new(card("sim-ldp", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    fast.latency = Duration::ZERO;
    let gw = TestGateway::builder()
        .sim(fast)
        .tenant(tenant("acme", KEY))
        .healthy(1)
        .spawn()
        .await;
    let c = client(&gw);
    let mut contexts = Vec::new();
    for _ in 0..5 {
        let task = completed(&c, v1_message("hi", json!({"skill": SUMMARIZE}))).await;
        contexts.push(task["contextId"].as_str().unwrap().to_owned());
    }
    let stats = gw.sim(0).stats();
    assert_eq!((stats.tasks, stats.proposals), (5, 1), "{stats:?}");
    // Each context is still its own session: five session ids in the provenance.
    let rows = gw.ledger("limit=10").await;
    let sessions: std::collections::BTreeSet<_> =
        rows.iter().map(|r| r.session_id.clone()).collect();
    assert_eq!(sessions.len(), 5, "{sessions:?}");
    // A context that continues gets its own upstream session, from its second task on.
    for _ in 0..2 {
        let mut m = v1_message("again", json!({"skill": SUMMARIZE}));
        m["message"]["contextId"] = json!(contexts[0]);
        completed(&c, m).await;
    }
    let stats = gw.sim(0).stats();
    assert_eq!((stats.tasks, stats.proposals), (7, 2), "{stats:?}");
    assert_eq!(stats.closes, 0, "{stats:?}");
    gw.shutdown().await;
}

/// A context's session lives no longer than the context: past the contexts a tenant keeps
/// (`MAX_CONTEXTS_PER_TENANT`), the forgotten one's session is closed, so a client sending
/// one new context after another never runs into its tenant's session cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_a2a_forgotten_contexts_free_their_sessions() {
    use ldp_gateway::frontend::a2a::MAX_CONTEXTS_PER_TENANT;
    let mut fast = SimOptions::new(card("sim-ldp", "default", &[(SUMMARIZE, 0.9)], &["text"]));
    fast.latency = Duration::ZERO;
    let mut t = tenant("acme", KEY);
    // Room for the kept contexts' sessions and a few closing in the background.
    t.max_sessions = Some(MAX_CONTEXTS_PER_TENANT + 8);
    let gw = TestGateway::builder()
        .sim(fast)
        .tenant(t)
        .healthy(1)
        .spawn()
        .await;
    let c = client(&gw);
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..MAX_CONTEXTS_PER_TENANT + 200 {
        let r = rpc(
            &c,
            "SendMessage",
            v1_message("hi", json!({"skill": SUMMARIZE})),
            Some("1.0"),
        )
        .await;
        let state = r.json["result"]["task"]["status"]["state"]
            .as_str()
            .unwrap_or("none");
        *states.entry(state.to_owned()).or_default() += 1;
    }
    assert_eq!(
        states.into_iter().collect::<Vec<_>>(),
        [(
            "TASK_STATE_COMPLETED".to_owned(),
            MAX_CONTEXTS_PER_TENANT + 200
        )]
    );
    gw.shutdown().await;
}
