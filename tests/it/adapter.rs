//! The `ldp-client` adapter (`discover`, `invoke`, `stream`, `status`, `cancel`) against the
//! reference SDK's Python delegates (wheel and bundled SDK), our simulated delegate in either
//! dialect, and the gateway; its session cache (one handshake for many tasks, a new one after
//! the delegate's TTL or when the delegate forgot the session), the trust refusal made before
//! any session, `ldp://` URLs and the stream's backpressure.
//!
//! The Python tests use `LDP_PY_WHEEL` / `LDP_PY_SDK` like tests/it/interop.rs: unset, they
//! print a skip note and pass, unless `LDP_INTEROP_REQUIRED=1`.

use crate::support::process::{py_script, python, Running, Sdk};
use crate::support::{card, eventually, sim, Card, TestGateway};
use ldp_client::ldp_wire::{
    Body, Envelope, ErrorCategory, ErrorSeverity, IdentityCard, LdpError, PayloadMode,
    SessionConfig, TaskId, TrustViolation,
};
use ldp_client::{Adapter, Config, Error, ErrorKind, Event, Outcome, Secret, Task, TaskState};
use ldp_gateway::config::TenantConfig;
use ldp_gateway::secret::hash_key;
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A generous ceiling for anything awaited (a loaded 2-core machine).
const WITHIN: Duration = Duration::from_secs(30);
/// A cold Python start can take seconds.
const PY_READY: Duration = Duration::from_secs(60);
/// A task that would run this long unless cancelled.
const LONG: Duration = Duration::from_secs(120);
const SKILL: &str = "summarize";

fn adapter_with(tweak: impl FnOnce(&mut Config)) -> Adapter {
    let mut config = Config {
        deadline: WITHIN,
        ..Config::default()
    };
    tweak(&mut config);
    Adapter::new(config).expect("adapter")
}

fn adapter() -> Adapter {
    adapter_with(|_| {})
}

/// `fut` within [`WITHIN`], or a failure naming `what`.
async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WITHIN, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {WITHIN:?}"))
}

/// A progress event as `(progress, message)`.
type Update = (Option<f64>, Option<String>);

/// Every event of a stream, to its end.
async fn drain(mut stream: ldp_client::TaskStream) -> Vec<Event> {
    within("stream", async {
        let mut events = Vec::new();
        while let Some(e) = stream.next().await {
            events.push(e);
        }
        events
    })
    .await
}

/// The progress events of `events` as `(progress, message)`, and the final outcome (panics
/// if the stream did not end in `Completed`, or anything but progress came before it).
fn progress_then_outcome(events: Vec<Event>) -> (Vec<Update>, Outcome) {
    let mut progress = Vec::new();
    let mut outcome = None;
    for e in events {
        assert!(outcome.is_none(), "an event after the final one: {e:?}");
        match e {
            Event::Progress {
                progress: p,
                message,
            } => progress.push((p, message)),
            Event::Completed(o) => outcome = Some(*o),
            Event::Failed(e) => panic!("the stream failed: {e}"),
        }
    }
    (
        progress,
        outcome.expect("the stream ended without its result"),
    )
}

/// The provenance inside an outcome's output, checked against the typed one.
fn output_provenance(out: &Outcome) -> &Value {
    let p = &out.output["ldp_provenance"];
    assert!(p.is_object(), "no ldp_provenance in {}", out.output);
    let typed = out.provenance.as_ref().expect("typed provenance");
    assert_eq!(p["produced_by"], typed.produced_by.as_str(), "{p}");
    p
}

/// `handle.result()` of a cancelled task is `Error::Cancelled` for that task.
fn assert_cancelled(result: Result<Outcome, Error>, task_id: &TaskId) {
    match result {
        Err(Error::Cancelled { task_id: id }) => assert_eq!(&id, task_id),
        other => panic!("expected Error::Cancelled, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The five operations, against any endpoint
// ---------------------------------------------------------------------------------------------

/// What one endpoint is expected to answer.
struct Expect<'a> {
    /// `ldp.delegate_id` of the card.
    card_id: &'a str,
    /// `produced_by` of results.
    produced_by: &'a str,
    /// The payload mode results come in.
    mode: PayloadMode,
    /// The `(progress, message)` updates a stream relays before its result.
    progress: Vec<Update>,
}

/// The sim's two updates (`started` at 0, `working` at 0.5).
fn sim_progress() -> Vec<Update> {
    vec![
        (Some(0.0), Some("started".into())),
        (Some(0.5), Some("working".into())),
    ]
}

/// discover, invoke (with status before and after), stream, status of an unknown task.
async fn discover_invoke_stream_status(
    a: &Adapter,
    url: &str,
    input: &Value,
    expect: &Expect<'_>,
) -> Outcome {
    let found = within("discover", a.discover(url)).await.expect("discover");
    assert_eq!(found.labels["ldp.delegate_id"], expect.card_id, "{found:?}");
    assert_eq!(found.labels["ldp.trust_domain"], "default");
    for key in ["ldp.model_family", "ldp.model_version", "ldp.payload_modes"] {
        assert!(
            found.labels.contains_key(key),
            "{key} in {:?}",
            found.labels
        );
    }
    assert!(
        found.labels.keys().all(|k| k.starts_with("ldp.")),
        "{:?}",
        found.labels
    );
    assert!(found.untrusted.is_none(), "{:?}", found.untrusted);
    assert!(
        found.card.capability(SKILL).is_some(),
        "{SKILL} on the card"
    );

    let handle = within("invoke", a.invoke(url, Task::new(SKILL, input.clone())))
        .await
        .expect("invoke");
    let id = handle.task_id().clone();
    let early = a.status(&id).expect("status while running");
    assert!(
        matches!(
            early,
            TaskState::Submitted | TaskState::Running | TaskState::Completed
        ),
        "{early:?}"
    );
    let out = within("result", handle.result()).await.expect("result");
    assert_eq!(out.task_id, id);
    assert_eq!(out.answered_by, expect.card_id);
    assert_eq!(out.payload_mode, expect.mode);
    let p = output_provenance(&out);
    assert_eq!(p["produced_by"], expect.produced_by, "{p}");
    assert_eq!(a.status(&id).expect("status"), TaskState::Completed);

    let stream = within("stream", a.stream(url, Task::new(SKILL, input.clone())))
        .await
        .expect("stream");
    let sid = stream.task_id().clone();
    let (progress, streamed) = progress_then_outcome(drain(stream).await);
    assert_eq!(progress, expect.progress, "the stream's updates");
    assert_eq!(streamed.task_id, sid);
    assert_eq!(
        output_provenance(&streamed)["produced_by"],
        expect.produced_by
    );
    assert_eq!(a.status(&sid).expect("status"), TaskState::Completed);

    let unknown = TaskId::from("never-submitted");
    assert!(matches!(a.status(&unknown), Err(Error::UnknownTask { .. })));
    assert!(matches!(
        a.cancel(&unknown).await,
        Err(Error::UnknownTask { .. })
    ));
    out
}

/// Cancels a task the sim `d` is running (its latency is [`LONG`]): the handle's result is
/// `Cancelled`, so is its status, and the TASK_CANCEL reached the task at the sim.
async fn cancel_running(a: &Adapter, url: &str, d: &SimHandle, input: &Value) {
    let before = d.stats();
    d.set_latency(LONG);
    let handle = within("invoke", a.invoke(url, Task::new(SKILL, input.clone())))
        .await
        .expect("invoke");
    let id = handle.task_id().clone();
    assert!(
        eventually(WITHIN, || d.stats().in_flight == 1).await,
        "the task never ran: {:?}",
        d.stats()
    );
    assert_eq!(a.status(&id).expect("status"), TaskState::Running);
    within("cancel", a.cancel(&id)).await.expect("cancel");
    assert_eq!(a.status(&id).expect("status"), TaskState::Cancelled);
    assert_cancelled(within("result", handle.result()).await, &id);
    assert!(
        eventually(WITHIN, || d.stats().cancels == before.cancels + 1
            && d.stats().in_flight == 0)
        .await,
        "the sim never saw the cancel: {:?}",
        d.stats()
    );
    assert_eq!(
        d.stats().results,
        before.results,
        "no result after a cancel"
    );
    // Cancelling a cancelled task changes nothing.
    within("cancel again", a.cancel(&id)).await.expect("again");
    assert_eq!(a.status(&id).expect("status"), TaskState::Cancelled);
    d.set_latency(Duration::ZERO);
}

// ---------------------------------------------------------------------------------------------
// The reference SDK's Python delegates
// ---------------------------------------------------------------------------------------------

/// A `ref_delegate.py` subprocess (killed on drop; it also exits when its stdin closes).
struct PyDelegate {
    url: String,
    _process: Running,
}

async fn spawn_py(py: &std::path::Path, id: &str, delay_ms: u64) -> PyDelegate {
    let mut cmd = py_script(py, "ref_delegate.py");
    cmd.arg("--watch-stdin")
        .args(["--id", id, "--skill", SKILL, "--trust-domain", "default"])
        .args(["--delay-ms", &delay_ms.to_string()])
        .stdin(Stdio::piped());
    let mut process = Running::spawn(cmd);
    let line = process.line(PY_READY, |_| true).await;
    let url = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected readiness line {line:?}"))
        .trim()
        .to_owned();
    PyDelegate {
        url,
        _process: process,
    }
}

/// The five operations against `sdk`'s reference delegate. It has no `/ldp/stream`: the
/// stream falls back to one exchange and is the result alone. It does not stop a task on
/// TASK_CANCEL (it only acknowledges), so the cancel is seen in the adapter: a task that
/// would take two minutes ends at once as cancelled.
async fn python_delegate(sdk: Sdk) {
    let Some(py) = python(sdk, "adapter against the reference delegate") else {
        return;
    };
    let id = format!("ldp:delegate:py-{}", sdk.label());
    let slow_id = format!("{id}-slow");
    let (fast, slow) = tokio::join!(
        spawn_py(&py, &id, 0),
        spawn_py(&py, &slow_id, LONG.as_millis() as u64)
    );
    let a = adapter();
    let input = json!({"text": "hello from the adapter"});
    let out = discover_invoke_stream_status(
        &a,
        &fast.url,
        &input,
        &Expect {
            card_id: &id,
            produced_by: &id,
            // The adapter's default proposal names no modes; the SDK then settles on text.
            mode: PayloadMode::Text,
            progress: Vec::new(),
        },
    )
    .await;
    assert_eq!(out.output["echo"], input, "{}", out.output);
    assert_eq!(out.output["by"], id.as_str());
    let p = output_provenance(&out);
    assert_eq!(p["confidence"], 0.8, "{p}");
    if sdk == Sdk::Bundled {
        assert_eq!(p["verification_status"], "self_verified", "{p}");
    }
    assert_eq!(found_model_family(&a, &fast.url).await, "pyref");

    let handle = within(
        "invoke",
        a.invoke(&slow.url, Task::new(SKILL, input.clone())),
    )
    .await
    .expect("invoke");
    let task_id = handle.task_id().clone();
    within("cancel", a.cancel(&task_id)).await.expect("cancel");
    assert_eq!(a.status(&task_id).expect("status"), TaskState::Cancelled);
    assert_cancelled(within("result", handle.result()).await, &task_id);

    // A cancelled stream ends with `Failed(Cancelled)`.
    let stream = within("stream", a.stream(&slow.url, Task::new(SKILL, input)))
        .await
        .expect("stream");
    let stream_id = stream.task_id().clone();
    within("cancel", a.cancel(&stream_id))
        .await
        .expect("cancel");
    let events = drain(stream).await;
    assert!(
        matches!(events.as_slice(), [Event::Failed(Error::Cancelled { .. })]),
        "{events:?}"
    );
    assert_eq!(a.status(&stream_id).expect("status"), TaskState::Cancelled);
}

async fn found_model_family(a: &Adapter, url: &str) -> String {
    let found = within("discover", a.discover(url)).await.expect("discover");
    found.labels["ldp.model_family"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wheel_reference_delegate() {
    python_delegate(Sdk::Wheel).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_reference_delegate() {
    python_delegate(Sdk::Bundled).await
}

// ---------------------------------------------------------------------------------------------
// Our simulated delegate, in each dialect
// ---------------------------------------------------------------------------------------------

/// A frame the sim accepts in `semantic_frame` mode.
fn frame(text: &str) -> Value {
    json!({"task_type": "summarization", "instruction": "Summarize", "input": text})
}

/// An RFC card: `quality_hint`, `latency_hint_ms_p50`, a `cost_hint` tier, the trust domain
/// as a bare string, frames and text.
fn rfc_card(id: &str) -> IdentityCard {
    Card::new(id)
        .set("trust_domain", json!("default"))
        .modes(&["semantic_frame", "text"])
        .capability(
            json!({"name": SKILL, "quality_hint": 0.9, "latency_hint_ms_p50": 40,
                           "cost_hint": "low"}),
        )
        .build()
}

/// A reference (SDK 0.2.0) card: a `quality` object, the trust domain as an object, text.
fn reference_card(id: &str) -> IdentityCard {
    Card::new(id)
        .set(
            "trust_domain",
            json!({"name": "default", "allow_cross_domain": false, "trusted_peers": []}),
        )
        .modes(&["text"])
        .capability(json!({"name": SKILL, "quality": {"quality_score": 0.8,
            "latency_p50_ms": 40, "cost_per_call_usd": 0.002, "supports_streaming": true}}))
        .build()
}

#[tokio::test]
async fn sim_in_the_rfc_dialect() {
    let d = sim(SimOptions::new(rfc_card("rfc"))).await;
    // RFC proposal: preferred modes and the responder's required domain.
    let a = adapter_with(|c| {
        c.session = SessionConfig {
            preferred_payload_modes: Some(vec![PayloadMode::SemanticFrame, PayloadMode::Text]),
            ttl_secs: Some(600),
            required_trust_domain: Some("default".into()),
            ..SessionConfig::default()
        };
    });
    let found = a.discover(&d.url()).await.expect("discover");
    let hints = &found.card.capability(SKILL).expect("skill").hints;
    assert_eq!(hints.quality, Some(0.9));
    assert_eq!(hints.latency_p50_ms, Some(40));
    let expect = Expect {
        card_id: "ldp:delegate:rfc",
        produced_by: "ldp:delegate:rfc",
        mode: PayloadMode::SemanticFrame,
        progress: sim_progress(),
    };
    let out = discover_invoke_stream_status(&a, &d.url(), &frame("a long text"), &expect).await;
    assert_eq!(
        out.output["payload_mode"], "semantic_frame",
        "{}",
        out.output
    );
    assert_eq!(
        output_provenance(&out)["payload_mode_used"],
        "semantic_frame"
    );
    cancel_running(&a, &d.url(), &d, &frame("slow")).await;
    let s = d.stats();
    assert_eq!((s.hellos, s.proposals, s.accepted), (1, 1, 1), "{s:?}");
    assert_eq!(s.results, 2, "{s:?}");
    d.shutdown().await;
}

#[tokio::test]
async fn sim_in_the_reference_dialect() {
    let d = sim(SimOptions::new(reference_card("reference"))).await;
    // Reference proposal: one `payload_mode` and the initiator's own domain.
    let a = adapter_with(|c| {
        c.session = SessionConfig {
            payload_mode: Some(PayloadMode::Text),
            trust_domain: Some("default".into()),
            ttl_secs: Some(3600),
            ..SessionConfig::default()
        };
    });
    let found = a.discover(&d.url()).await.expect("discover");
    let hints = &found.card.capability(SKILL).expect("skill").hints;
    assert_eq!(hints.cost_per_call_usd, Some(0.002));
    assert_eq!(hints.supports_streaming, Some(true));
    let expect = Expect {
        card_id: "ldp:delegate:reference",
        produced_by: "ldp:delegate:reference",
        mode: PayloadMode::Text,
        progress: sim_progress(),
    };
    let out = discover_invoke_stream_status(&a, &d.url(), &json!("plain text"), &expect).await;
    let p = output_provenance(&out);
    assert_eq!(p["payload_mode_used"], "text", "{p}");
    assert!(p["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "{p}");
    // A string output is wrapped beside its provenance; here the sim's object output gains it.
    assert!(out.output["text"].as_str().is_some(), "{}", out.output);
    cancel_running(&a, &d.url(), &d, &json!("slow")).await;
    let s = d.stats();
    assert_eq!((s.hellos, s.proposals, s.accepted), (1, 1, 1), "{s:?}");
    d.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// The gateway
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_gateway() {
    // The gateway streams from a delegate whose skill says it streams.
    let gw = TestGateway::builder()
        .sim(SimOptions::new(reference_card("behind")))
        .spawn()
        .await;
    let a = adapter();
    let url = gw.ldp_url();
    let expect = Expect {
        card_id: "ldp:delegate:gateway",
        produced_by: "ldp:delegate:behind",
        // The gateway speaks frames (and translates them for its text-only delegate).
        mode: PayloadMode::SemanticFrame,
        // Its own update, then the delegate's.
        progress: [(Some(0.0), Some("routed to d0".to_owned()))]
            .into_iter()
            .chain(sim_progress())
            .collect(),
    };
    let out = discover_invoke_stream_status(&a, &url, &frame("hi"), &expect).await;
    let p = output_provenance(&out);
    assert_eq!(p["lineage"][0]["step"], "route", "{p}");
    assert_eq!(
        p["lineage"][0]["delegate_id"], "ldp:delegate:gateway",
        "{p}"
    );
    cancel_running(&a, &url, gw.sim(0), &frame("slow")).await;
    assert_eq!(gw.sessions(), 1, "one client session at the gateway");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_api_key_decides_the_tenant_and_a_wrong_key_is_refused() {
    let key = crate::support::unique("adapter-key");
    let gw = TestGateway::builder()
        .sim(SimOptions::new(card(
            "behind",
            "default",
            &[(SKILL, 0.9)],
            &["text"],
        )))
        .tenant(TenantConfig {
            api_key_sha256: vec![hash_key(&key)],
            trust_domains: vec!["default".into()],
            ..TenantConfig::new("alpha")
        })
        .spawn()
        .await;
    let url = gw.ldp_url();
    let keyed = adapter_with(|c| c.api_key = Some(Secret::new(key.as_bytes())));
    let out = keyed
        .call(&url, Task::new(SKILL, json!({"text": "with a key"})))
        .await
        .expect("a tenant's key is served");
    output_provenance(&out);
    assert_eq!(gw.tenant_sessions("alpha"), 1);

    let wrong = adapter_with(|c| c.api_key = Some(Secret::new("not-the-key")));
    // The card is public; the first message is not.
    wrong.discover(&url).await.expect("the card needs no key");
    let err = wrong
        .call(&url, Task::new(SKILL, json!({"text": "wrong key"})))
        .await
        .expect_err("a wrong key");
    match &err {
        Error::Status { status, error, .. } => {
            assert_eq!(*status, 401, "{err}");
            let code = error.as_ref().map(|e| e.code.as_str());
            assert_eq!(code, Some("UNAUTHENTICATED"), "{err}");
        }
        other => panic!("expected HTTP 401, got {other:?}"),
    }
    assert_eq!(err.kind(), ErrorKind::Refused);
    // Refused by this endpoint, yet not the request's own fault (as a 400 would be): another
    // endpoint may take it, as a gateway fails over from a delegate that refuses its key.
    assert!(err.retryable());
    let streamed = wrong
        .stream(&url, Task::new(SKILL, json!("x")))
        .await
        .expect_err("a wrong key, streaming");
    assert!(
        matches!(streamed, Error::Status { status: 401, .. }),
        "{streamed:?}"
    );
    let none = adapter();
    let err = none
        .call(&url, Task::new(SKILL, json!("no key")))
        .await
        .expect_err("no key");
    assert!(matches!(err, Error::Status { status: 401, .. }), "{err:?}");
    assert_eq!(
        gw.sim(0).stats().tasks,
        1,
        "only the keyed task went upstream"
    );
    gw.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------------

fn text_sim_options(id: &str) -> SimOptions {
    SimOptions::new(card(id, "default", &[(SKILL, 0.9)], &["text"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_handshake_for_many_invokes() {
    let d = sim(text_sim_options("many")).await;
    let a = adapter();
    // Concurrent first invokes share the one handshake.
    let calls = (0..8).map(|i| {
        let a = a.clone();
        let url = d.url();
        tokio::spawn(async move { a.call(&url, Task::new(SKILL, json!({"n": i}))).await })
    });
    let mut sessions = std::collections::BTreeSet::new();
    for call in calls {
        let out = within("call", call).await.expect("join").expect("call");
        sessions.insert(out.provenance.expect("provenance").session_id);
    }
    for i in 0..4 {
        a.call(&d.url(), Task::new(SKILL, json!({"more": i})))
            .await
            .expect("call");
    }
    let s = d.stats();
    assert_eq!((s.hellos, s.proposals, s.accepted), (1, 1, 1), "{s:?}");
    assert_eq!(s.results, 12, "{s:?}");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    d.shutdown().await;
}

#[tokio::test]
async fn a_new_handshake_after_the_sessions_ttl() {
    let mut opts = text_sim_options("ttl");
    opts.sweep_interval = Duration::from_millis(50);
    let d = sim(opts).await;
    let a = adapter_with(|c| c.session.ttl_secs = Some(1));
    let first = a
        .call(&d.url(), Task::new(SKILL, json!("one")))
        .await
        .expect("first");
    // The delegate forgets the session once it has been idle for its TTL.
    assert!(
        eventually(WITHIN, || d.stats().expired == 1).await,
        "{:?}",
        d.stats()
    );
    let second = a
        .call(&d.url(), Task::new(SKILL, json!("two")))
        .await
        .expect("after the TTL");
    let s = d.stats();
    assert_eq!(s.accepted, 2, "{s:?}");
    // The adapter knew the TTL: no task was sent into the forgotten session.
    assert_eq!((s.tasks, s.failures), (2, 0), "{s:?}");
    let session = |o: &Outcome| o.provenance.as_ref().and_then(|p| p.session_id.clone());
    assert_ne!(session(&first), session(&second));
    d.shutdown().await;
}

/// Makes the sim forget `session_id` as a restart would (a SESSION_CLOSE the adapter does not
/// know about).
async fn forget(a: &Adapter, d: &SimHandle, session_id: &str) {
    let closes = d.stats().closes;
    let close = Envelope::new(
        session_id,
        "ldp:delegate:someone-else",
        d.state().card().delegate_id.as_str(),
        Body::SessionClose { reason: None },
        PayloadMode::Text,
    );
    a.transport()
        .send(&d.url(), &close, WITHIN)
        .await
        .expect("SESSION_CLOSE");
    assert_eq!(d.stats().closes, closes + 1, "the sim closed {session_id}");
}

fn session_of(out: &Outcome) -> String {
    out.provenance
        .as_ref()
        .and_then(|p| p.session_id.clone())
        .expect("the sim names its session")
}

#[tokio::test]
async fn a_forgotten_session_is_opened_again_once() {
    let d = sim(text_sim_options("forgetful")).await;
    // The adapter's own limits are far longer than the delegate's memory.
    let a = adapter_with(|c| c.session_idle = Duration::from_secs(3600));
    let first = a
        .call(&d.url(), Task::new(SKILL, json!("one")))
        .await
        .expect("first");
    forget(&a, &d, &session_of(&first)).await;

    // invoke: SESSION_NOT_FOUND, one new handshake, the same task again.
    let second = a
        .call(&d.url(), Task::new(SKILL, json!("two")))
        .await
        .expect("the adapter re-handshakes");
    assert_ne!(session_of(&first), session_of(&second));
    let s = d.stats();
    assert_eq!(
        (s.accepted, s.tasks, s.failures, s.results),
        (2, 3, 1, 2),
        "{s:?}"
    );

    // stream: the same, and the retry is streamed too.
    forget(&a, &d, &session_of(&second)).await;
    let stream = a
        .stream(&d.url(), Task::new(SKILL, json!("three")))
        .await
        .expect("stream");
    let (progress, third) = progress_then_outcome(drain(stream).await);
    assert_eq!(progress, sim_progress());
    assert_ne!(session_of(&third), session_of(&second));
    let s = d.stats();
    assert_eq!((s.accepted, s.failures, s.results), (3, 2, 3), "{s:?}");

    // A cancel after a re-handshake names the new session (the sim only cancels a task of
    // the session the TASK_CANCEL names).
    forget(&a, &d, &session_of(&third)).await;
    cancel_running(&a, &d.url(), &d, &json!("slow")).await;
    assert_eq!(d.stats().accepted, 4);
    d.shutdown().await;
}

/// A delegate that accepts every session and forgets it at once: every TASK_SUBMIT is
/// answered `SESSION_NOT_FOUND`. Counts `(proposals, tasks)`.
async fn amnesiac() -> (String, Arc<Mutex<(u32, u32)>>) {
    let counts: Arc<Mutex<(u32, u32)>> = Arc::default();
    let card = serde_json::to_value(card("amnesiac", "default", &[(SKILL, 0.9)], &["text"]))
        .expect("card");
    let seen = counts.clone();
    let messages = move |body: axum::body::Bytes| {
        let seen = seen.clone();
        async move {
            let env = Envelope::from_slice(&body).expect("an envelope");
            let me = "ldp:delegate:amnesiac";
            let reply = match &env.body {
                Body::Hello { .. } => env.reply(
                    me,
                    Body::CapabilityManifest {
                        capabilities: Default::default(),
                    },
                    PayloadMode::Text,
                ),
                Body::SessionPropose { .. } => {
                    seen.lock().expect("counts").0 += 1;
                    let session_id = ldp_client::ldp_wire::new_id();
                    let mut reply = env.reply(
                        me,
                        Body::SessionAccept {
                            session_id: session_id.clone(),
                            negotiated_mode: PayloadMode::Text,
                            fallback_chain: Vec::new(),
                        },
                        PayloadMode::Text,
                    );
                    reply.session_id = session_id.into();
                    reply
                }
                Body::TaskSubmit { task_id, .. } => {
                    seen.lock().expect("counts").1 += 1;
                    let error = LdpError::new(
                        "SESSION_NOT_FOUND",
                        ErrorCategory::Session,
                        ErrorSeverity::Error,
                        false,
                        "no such session",
                    );
                    env.reply(
                        me,
                        Body::TaskFailed {
                            task_id: task_id.clone(),
                            error,
                        },
                        PayloadMode::Text,
                    )
                }
                _ => env.reply(me, Body::SessionClose { reason: None }, PayloadMode::Text),
            };
            axum::Json(reply)
        }
    };
    let app = axum::Router::new()
        .route(
            "/.well-known/ldp-identity",
            axum::routing::get(move || async move { axum::Json(card) }),
        )
        .route("/ldp/messages", axum::routing::post(messages));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, counts)
}

#[tokio::test]
async fn a_session_forgotten_twice_is_an_error_not_a_loop() {
    let (url, counts) = amnesiac().await;
    let a = adapter();
    let err = a
        .call(&url, Task::new(SKILL, json!("x")))
        .await
        .expect_err("never served");
    match &err {
        Error::Failed { error } => assert_eq!(error.code, "SESSION_NOT_FOUND", "{err}"),
        other => panic!("expected the delegate's TASK_FAILED, got {other:?}"),
    }
    assert_eq!(
        err.kind(),
        ErrorKind::Refused,
        "a session error is a refusal"
    );
    assert_eq!(
        *counts.lock().expect("counts"),
        (2, 2),
        "one handshake and one retry, no more"
    );
    // Streaming: no stream route here (404), one plain exchange, one retry.
    let events = drain(
        a.stream(&url, Task::new(SKILL, json!("y")))
            .await
            .expect("stream"),
    )
    .await;
    assert!(
        matches!(events.as_slice(), [Event::Failed(Error::Failed { .. })]),
        "{events:?}"
    );
    assert_eq!(*counts.lock().expect("counts"), (3, 4));
}

// ---------------------------------------------------------------------------------------------
// Trust, URLs, backpressure
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn trust_refusal_before_any_session() {
    let d = sim(text_sim_options("trusted")).await;
    let a = adapter_with(|c| c.required_trust_domain = Some("other".into()));
    let found = a
        .discover(&d.url())
        .await
        .expect("discover still reads the card");
    assert_eq!(
        found.untrusted,
        Some(TrustViolation::RequiredDomainMismatch {
            required: "other".into(),
            actual: "default".into()
        })
    );
    let check = |err: Error| {
        match &err {
            Error::Untrusted { url, violation } => {
                assert_eq!(url, &d.url());
                assert!(
                    matches!(violation, TrustViolation::RequiredDomainMismatch { required, actual }
                        if required == "other" && actual == "default"),
                    "{violation:?}"
                );
            }
            other => panic!("expected Error::Untrusted, got {other:?}"),
        }
        assert_eq!(err.kind(), ErrorKind::Refused);
        assert!(!err.retryable());
    };
    check(
        a.invoke(&d.url(), Task::new(SKILL, json!("x")))
            .await
            .expect_err("untrusted"),
    );
    check(
        a.stream(&d.url(), Task::new(SKILL, json!("x")))
            .await
            .expect_err("untrusted"),
    );
    // A task's own session config may carry the requirement too.
    let open = adapter();
    let mut task = Task::new(SKILL, json!("x"));
    task.session = Some(SessionConfig {
        required_trust_domain: Some("other".into()),
        ..SessionConfig::default()
    });
    check(open.call(&d.url(), task).await.expect_err("untrusted"));
    let s = d.stats();
    assert_eq!((s.hellos, s.proposals, s.tasks), (0, 0, 0), "{s:?}");
    // The same adapter without the requirement is served.
    open.call(&d.url(), Task::new(SKILL, json!("x")))
        .await
        .expect("trusted");
    d.shutdown().await;
}

#[tokio::test]
async fn ldp_urls_are_plain_http() {
    let d = sim(text_sim_options("ldp-url")).await;
    let a = adapter();
    let ldp = d.url().replace("http://", "ldp://");
    assert!(ldp.starts_with("ldp://127.0.0.1:"), "{ldp}");
    let found = a.discover(&format!("{ldp}/")).await.expect("discover");
    assert_eq!(found.url, d.url());
    let out = a
        .call(&ldp, Task::new(SKILL, json!("over ldp://")))
        .await
        .expect("call");
    output_provenance(&out);
    let stream = a
        .stream(&ldp, Task::new(SKILL, json!("streamed")))
        .await
        .expect("stream");
    let (progress, _) = progress_then_outcome(drain(stream).await);
    assert_eq!(progress, sim_progress());
    // `ldp://` and `http://` are one endpoint: one session for both.
    a.call(&d.url(), Task::new(SKILL, json!("over http://")))
        .await
        .expect("call");
    assert_eq!(d.stats().accepted, 1);
    let err = a
        .call("ftp://127.0.0.1:1", Task::new(SKILL, json!("x")))
        .await
        .expect_err("not an LDP URL");
    assert!(matches!(err, Error::Url { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Transport);
    d.shutdown().await;
}

#[tokio::test]
async fn a_stream_nobody_reads_stops_reading_the_delegate() {
    let d = sim(text_sim_options("backpressure")).await;
    let a = adapter_with(|c| c.stream_buffer = 1);
    let mut stream = a
        .stream(&d.url(), Task::new(SKILL, json!("slow reader")))
        .await
        .expect("stream");
    let id = stream.task_id().clone();
    // The delegate has sent everything (two updates and the result)…
    assert!(
        eventually(WITHIN, || d.stats().results == 1).await,
        "{:?}",
        d.stats()
    );
    // …but with one update buffered and nobody reading, the adapter reads no further: the
    // result is not settled.
    let settled = eventually(Duration::from_millis(500), || {
        a.status(&id).is_ok_and(TaskState::is_final)
    })
    .await;
    assert!(!settled, "the adapter read past a full buffer");
    assert_eq!(a.status(&id).expect("status"), TaskState::Running);
    let first = within("first event", stream.next()).await;
    assert!(matches!(first, Some(Event::Progress { .. })), "{first:?}");
    let (progress, out) = progress_then_outcome(drain(stream).await);
    assert_eq!(progress.len(), 1, "the second update: {progress:?}");
    assert_eq!(out.task_id, id);
    assert_eq!(a.status(&id).expect("status"), TaskState::Completed);
    d.shutdown().await;
}

#[tokio::test]
async fn close_ends_every_cached_session_and_the_adapter_stays_usable() {
    let d = sim(SimOptions::new(card(
        "a",
        "default",
        &[("echo", 0.9)],
        &["text"],
    )))
    .await;
    let a = adapter();
    a.call(&d.url(), Task::new("echo", json!({"text": "one"})))
        .await
        .expect("call");
    assert_eq!(d.stats().active_sessions, 1);
    a.close().await;
    let stats = d.stats();
    assert_eq!((stats.closes, stats.active_sessions), (1, 0), "{stats:?}");
    a.call(&d.url(), Task::new("echo", json!({"text": "two"})))
        .await
        .expect("a new session after close");
    assert_eq!(d.stats().accepted, 2);
}
