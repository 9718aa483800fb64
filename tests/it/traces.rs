//! OpenTelemetry traces (`[telemetry]`): the spans a task makes, as a real OTLP/HTTP receiver
//! decodes them (tests/interop/otlp_receiver.py, on the PyPI `opentelemetry-proto` package),
//! the W3C trace context kept from clients and sent to delegates and chained gateways, the
//! trace id on the ledger row, and a collector that hangs or is absent costing nothing.
//!
//! The receiver runs on `$LDP_PY_OTEL` (`eval "$(bash .ci/run venvs)"`), else the venv
//! `.ci/run` builds; without either the tests are skipped (a failure under
//! `LDP_INTEROP_REQUIRED=1`).

use crate::support::openai::{declared, entry, start};
use crate::support::process::{py_script, run, text, Running};
use crate::support::{eventually, eventually_async, Client, TestGateway};
use crate::verify::{card, policy, producer, question, verifier};
use ldp_gateway::sim::openai::OpenAiOptions;
use ldp_gateway::sim::SimOptions;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long spans may take to reach the receiver (batches go out every second).
const SPANS_WITHIN: Duration = Duration::from_secs(30);

/// A client's trace: its id, and the span its request comes from.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str, span: &str, sampled: bool) -> String {
    format!("00-{trace}-{span}-{}", if sampled { "01" } else { "00" })
}

/// The receiver's interpreter (see the module's doc).
fn otel_python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LDP_PY_OTEL").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("LDP_CI_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ldp-gateway-ci")));
    if let Some(p) = cache.map(|c| c.join("venv-otel/bin/python")) {
        if p.exists() {
            return Some(p);
        }
    }
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(!required, "LDP_PY_OTEL is not set and no venv-otel exists");
    eprintln!("skipping the tracing tests: LDP_PY_OTEL is not set and no venv-otel exists");
    None
}

/// A running OTLP receiver and the spans it decoded.
struct Receiver {
    _process: Running,
    url: String,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts one (`hang`: it reads each export and never answers); `None`: skipped.
    async fn start(hang: bool) -> Option<Receiver> {
        let py = otel_python()?;
        let dir = tempfile::tempdir().expect("receiver dir");
        let file = dir.path().join("spans.jsonl");
        let mut cmd = py_script(&py, "otlp_receiver.py");
        cmd.arg(&file);
        if hang {
            cmd.arg("--hang");
        }
        let mut process = Running::spawn(cmd);
        let line = process
            .line(Duration::from_secs(30), |l| l.starts_with("listening "))
            .await;
        let port = line.trim_start_matches("listening ").trim().to_owned();
        Some(Receiver {
            _process: process,
            url: format!("http://127.0.0.1:{port}"),
            file,
            _dir: dir,
        })
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The spans of `trace` once `done` says they are all in (panics after [`SPANS_WITHIN`]).
    async fn trace(&self, trace: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let of = || -> Vec<Value> {
            self.spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect()
        };
        let came = eventually(SPANS_WITHIN, || done(&of())).await;
        let spans = of();
        assert!(came, "trace {trace} incomplete: {spans:#?}");
        spans
    }
}

/// `[telemetry]` exporting to `url` at `ratio`, as `service`.
fn traced(c: &mut ldp_gateway::config::Config, url: &str, service: &str, ratio: f64) {
    c.telemetry.otlp_endpoint = Some(url.to_owned());
    c.telemetry.service_name = service.to_owned();
    c.telemetry.sample_ratio = ratio;
}

fn named<'s>(spans: &'s [Value], name: &str) -> Vec<&'s Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'s>(spans: &'s [Value], name: &str) -> &'s Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

/// An LDP TASK_SUBMIT of `qa` with `input` from `c` in `session`, with `headers`.
async fn submit(c: &Client, session: &str, input: Value, headers: &[(&str, &str)]) -> Value {
    submit_skill(c, session, "qa", input, headers).await
}

/// [`submit`] of `skill`.
async fn submit_skill(
    c: &Client,
    session: &str,
    skill: &str,
    input: Value,
    headers: &[(&str, &str)],
) -> Value {
    let task_id = uuid::Uuid::new_v4().to_string();
    let body = json!({"type": "TASK_SUBMIT", "task_id": task_id, "skill": skill, "input": input});
    let env = c.envelope_json(session, body, "text");
    let r = c
        .post_with("/ldp/messages", serde_json::to_vec(&env).unwrap(), headers)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json["body"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_is_one_span_tree_from_the_client_to_each_vote() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    // d0 is the cheapest (picked first) and fails every task: a failover to d1; d2 votes.
    let broken = SimOptions {
        error_500_rate: 1.0,
        ..producer("p-broken", "alpha", 0.9, 0.0001, 1.0)
    };
    let gw = TestGateway::builder()
        .sim(broken)
        .sim(producer("p-good", "alpha", 0.9, 0.01, 1.0))
        .sim(verifier("v-beta", "beta", 1.0))
        .policy("verified.toml", &policy(1, 1, 1.0))
        .config(|c| {
            c.policies.default = "verified".into();
            traced(c, &rx.url, "gw", 1.0);
        })
        .spawn()
        .await;
    let c = gw.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    let body = submit(&c, &session, question(4), &[("traceparent", &parent)]).await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    let task_id = body["task_id"].as_str().unwrap().to_owned();

    let spans = rx
        .trace(CLIENT_TRACE, |s| {
            !named(s, "POST /ldp/messages").is_empty()
                && !named(s, "invoke_agent d2").is_empty()
                && !named(s, "verify qa").is_empty()
        })
        .await;
    // The request's SERVER span, under the client's span.
    let server = one(&spans, "POST /ldp/messages");
    assert_eq!(server["kind"], "server");
    assert_eq!(server["parent_span_id"], CLIENT_SPAN, "{server}");
    let a = &server["attributes"];
    assert_eq!(a["http.route"], "/ldp/messages");
    assert_eq!(a["http.request.method"], "POST");
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["ldp.tenant"], "anonymous");
    assert_eq!(server["resource"]["service.name"], "gw");
    let server_id = server["span_id"].as_str().unwrap();

    // Routing decisions: INTERNAL, under the request's span, with their reasons.
    let routes = named(&spans, "route qa");
    assert!(routes.len() >= 2, "a decision per producer: {spans:#?}");
    let first = routes
        .iter()
        .find(|r| r["attributes"]["ldp.route.pick"] == "d0")
        .expect("d0 picked first");
    assert_eq!(first["kind"], "internal");
    assert_eq!(first["parent_span_id"], server_id);
    let r = &first["attributes"];
    assert_eq!(r["ldp.policy"], "verified");
    assert_eq!(r["ldp.route.candidates"], 2, "{r}");
    for key in [
        "ldp.route.eligible",
        "ldp.route.band",
        "ldp.route.score",
        "ldp.route.score.quality",
        "ldp.route.score.cost",
        "ldp.route.score.latency",
    ] {
        assert!(r.get(key).is_some(), "{key} in {r}");
    }
    // The failover: two sibling CLIENT attempts, the first failed.
    let failed = one(&spans, "invoke_agent d0");
    let good = one(&spans, "invoke_agent d1");
    for attempt in [failed, good] {
        assert_eq!(attempt["kind"], "client");
        assert_eq!(attempt["parent_span_id"], server_id, "{attempt}");
        let a = &attempt["attributes"];
        assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(a["gen_ai.conversation.id"], session.as_str());
        assert_eq!(a["server.address"], "127.0.0.1");
        assert_eq!(a["gen_ai.agent.version"], "sim-1");
    }
    assert_eq!(
        failed["attributes"]["gen_ai.agent.id"],
        "ldp:delegate:p-broken"
    );
    assert_eq!(failed["status"], 2, "an error status: {failed}");
    assert!(failed["attributes"]["error.type"].is_string(), "{failed}");
    assert_eq!(good["status"], 0, "{good}");
    assert!(good["attributes"].get("error.type").is_none());
    assert!(
        good["attributes"].get("gen_ai.input.messages").is_none(),
        "no prompt text unless asked"
    );
    // The verification round and its vote, the verifier's attempt under the vote.
    let round = one(&spans, "verify qa");
    assert_eq!(round["parent_span_id"], server_id);
    assert_eq!(round["attributes"]["ldp.verify.result"], "passed");
    assert_eq!(round["attributes"]["ldp.verify.producer"], "d1");
    let vote = one(&spans, "vote d2");
    assert_eq!(vote["parent_span_id"], round["span_id"]);
    assert_eq!(vote["attributes"]["ldp.vote.passed"], true);
    let judge = one(&spans, "invoke_agent d2");
    assert_eq!(judge["parent_span_id"], vote["span_id"]);

    // The delegate that answered was sent the context of the attempt that called it.
    let sent = gw.sim(1).state().traceparents();
    assert!(
        sent.contains(&traceparent(
            CLIENT_TRACE,
            good["span_id"].as_str().unwrap(),
            true
        )),
        "{sent:?} vs {good}"
    );
    // The ledger row names the trace, and the trace finds the row.
    let row = gw.ledger_row(&task_id).await;
    assert_eq!(row.trace_id.as_deref(), Some(CLIENT_TRACE));
    let rows = gw
        .ledger(&format!("trace_id={}", CLIENT_TRACE.to_uppercase()))
        .await;
    assert!(rows.iter().any(|r| r.task_id == task_id), "{rows:?}");
    // The GenAI metrics, by bounded labels.
    let m = gw.metrics().await;
    assert!(
        m.sum("gen_ai_client_operation_duration_count{error_type=\"\",gen_ai_operation_name=\"invoke_agent\"") >= 2.0,
        "{}",
        m.text()
    );
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_backed_attempt_is_a_chat_span_and_the_answer_names_its_trace() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    let oa = start(OpenAiOptions::new("sim-mini")).await;
    let gw = TestGateway::builder()
        .entry(entry(
            "mini",
            &oa.url(),
            "sim-mini",
            declared(&["chat"], 0.8),
        ))
        .config(|c| {
            traced(c, &rx.url, "gw", 1.0);
            c.telemetry.capture_content = true;
        })
        .spawn()
        .await;
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    let ask = json!({"model": "chat", "messages": [{"role": "user", "content": "hello there"}]});
    let r = gw
        .client()
        .post_with(
            "/v1/chat/completions",
            ask.to_string().into_bytes(),
            &[("traceparent", &parent)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = r.headers["traceparent"].to_str().unwrap().to_owned();
    assert!(
        answered.starts_with(&format!("00-{CLIENT_TRACE}-")),
        "{answered}"
    );
    assert!(r.headers.contains_key("x-ldp-task-id"));

    let spans = rx
        .trace(CLIENT_TRACE, |s| !named(s, "chat sim-mini").is_empty())
        .await;
    let chat = one(&spans, "chat sim-mini");
    assert_eq!(chat["kind"], "client");
    let a = &chat["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "sim-mini");
    assert_eq!(a["gen_ai.response.model"], "sim-mini");
    assert!(a["gen_ai.usage.input_tokens"].as_i64() > Some(0), "{a}");
    assert!(a["gen_ai.usage.output_tokens"].as_i64() > Some(0), "{a}");
    assert_eq!(a["gen_ai.response.finish_reasons"], json!(["stop"]));
    assert_eq!(a["server.address"], "127.0.0.1");
    // Content was asked for: the prompt is on the span.
    assert!(
        a["gen_ai.input.messages"]
            .as_str()
            .is_some_and(|m| m.contains("hello there")),
        "{a}"
    );
    // The answer's traceparent is the request's SERVER span.
    let server = one(&spans, "POST /v1/chat/completions");
    assert!(answered.contains(server["span_id"].as_str().unwrap()));
    assert_eq!(chat["parent_span_id"], server["span_id"]);
    let m = gw.metrics().await;
    assert!(
        m.sum("gen_ai_client_token_usage_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"sim-mini\",gen_ai_token_type=\"input\"}") >= 1.0,
        "{}",
        m.text()
    );
    gw.shutdown().await;
}

/// An Anthropic-API attempt is a `chat {model}` span too, its provider `anthropic`, its
/// input tokens counting the cache's, its finish reason in Anthropic's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_attempt_is_a_chat_span_with_its_provider() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    let sim = crate::support::anthropic::start(ldp_gateway::sim::anthropic::AnthropicOptions::new(
        "sim-claude",
    ))
    .await;
    let gw = TestGateway::builder()
        .entry(crate::support::anthropic::entry(
            "claude",
            &sim.url(),
            "sim-claude",
            declared(&["assist"], 0.8),
        ))
        .config(|c| traced(c, &rx.url, "gw", 1.0))
        .spawn()
        .await;
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    let ask = json!({"model": "assist", "max_tokens": 64,
        "system": [{"type": "text", "text": "cached ".repeat(40),
            "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hello there"}]});
    let r = gw
        .client()
        .post_with(
            "/v1/messages",
            ask.to_string().into_bytes(),
            &[
                ("traceparent", &parent),
                ("anthropic-version", "2023-06-01"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let u = &r.json["usage"];
    let input = [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .iter()
    .map(|k| u[*k].as_i64().unwrap())
    .sum::<i64>();

    let spans = rx
        .trace(CLIENT_TRACE, |s| !named(s, "chat sim-claude").is_empty())
        .await;
    let chat = one(&spans, "chat sim-claude");
    assert_eq!(chat["kind"], "client");
    let a = &chat["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "anthropic");
    assert_eq!(a["gen_ai.request.model"], "sim-claude");
    assert_eq!(a["gen_ai.usage.input_tokens"].as_i64(), Some(input), "{a}");
    assert_eq!(a["gen_ai.response.finish_reasons"], json!(["end_turn"]));
    let server = one(&spans, "POST /v1/messages");
    assert_eq!(chat["parent_span_id"], server["span_id"]);
    gw.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_through_two_gateways_is_one_trace() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    let inner = TestGateway::builder()
        .sim(producer("p", "alpha", 0.9, 0.001, 1.0))
        .config(|c| {
            // Another gateway's card: the outer one refuses its own.
            c.identity.delegate_id = "ldp:delegate:inner-gateway".into();
            traced(c, &rx.url, "inner", 1.0);
        })
        .spawn()
        .await;
    let inner_url = inner.client().url("");
    let outer = TestGateway::builder()
        .delegate(inner_url.trim_end_matches('/'))
        .config(|c| traced(c, &rx.url, "outer", 1.0))
        .spawn()
        .await;
    let c = outer.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    let body = submit(&c, &session, question(2), &[("traceparent", &parent)]).await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");

    let spans = rx
        .trace(CLIENT_TRACE, |s| {
            s.iter()
                .any(|x| x["resource"]["service.name"] == "inner" && x["name"] == "invoke_agent d0")
                && s.iter()
                    .any(|x| x["resource"]["service.name"] == "outer" && x["kind"] == "client")
        })
        .await;
    let outer_attempt = spans
        .iter()
        .find(|x| x["resource"]["service.name"] == "outer" && x["kind"] == "client")
        .unwrap();
    // The inner gateway's request span continues the outer's attempt.
    let inner_server = spans
        .iter()
        .find(|x| {
            x["resource"]["service.name"] == "inner"
                && x["kind"] == "server"
                && x["parent_span_id"] == outer_attempt["span_id"]
        })
        .unwrap_or_else(|| panic!("inner server span under {outer_attempt}: {spans:#?}"));
    let inner_attempt = spans
        .iter()
        .find(|x| x["resource"]["service.name"] == "inner" && x["kind"] == "client")
        .unwrap();
    assert_eq!(inner_attempt["parent_span_id"], inner_server["span_id"]);
    // And the delegate behind the inner gateway got the same trace.
    let sent = inner.sim(0).state().traceparents();
    assert!(sent.iter().any(|p| p.contains(CLIENT_TRACE)), "{sent:?}");
    outer.shutdown().await;
    inner.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_at_zero_exports_nothing_but_a_sampled_parent_and_at_one_every_task() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    let zero = TestGateway::builder()
        .sim(producer("p", "alpha", 0.9, 0.001, 1.0))
        .config(|c| traced(c, &rx.url, "zero", 0.0))
        .spawn()
        .await;
    let c = zero.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let mut rows = Vec::new();
    for i in 0..5 {
        let body = submit(&c, &session, question(i), &[]).await;
        assert_eq!(body["type"], "TASK_RESULT", "{body}");
        rows.push(body["task_id"].as_str().unwrap().to_owned());
    }
    // A client's sampled trace is kept (parent-based); its spans come after the others'
    // (one queue, sent in order), so once they are in, nothing else of this gateway came.
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    submit(&c, &session, question(9), &[("traceparent", &parent)]).await;
    rx.trace(CLIENT_TRACE, |s| !named(s, "invoke_agent d0").is_empty())
        .await;
    let others: Vec<Value> = rx
        .spans()
        .into_iter()
        .filter(|s| s["resource"]["service.name"] == "zero" && s["trace_id"] != CLIENT_TRACE)
        .collect();
    assert!(others.is_empty(), "nothing sampled at 0: {others:#?}");
    // An unsampled task still names its trace on its row (for a client that traced it).
    let row = zero.ledger_row(&rows[0]).await;
    assert_eq!(row.trace_id.as_ref().map(String::len), Some(32));
    zero.shutdown().await;

    let all = TestGateway::builder()
        .sim(producer("p", "alpha", 0.9, 0.001, 1.0))
        .config(|c| traced(c, &rx.url, "one", 1.0))
        .spawn()
        .await;
    let c = all.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let mut traces = Vec::new();
    for i in 0..5 {
        let body = submit(&c, &session, question(i), &[]).await;
        let row = all.ledger_row(body["task_id"].as_str().unwrap()).await;
        traces.push(row.trace_id.expect("a trace id"));
    }
    let every = eventually(SPANS_WITHIN, || {
        let spans = rx.spans();
        traces.iter().all(|t| {
            spans
                .iter()
                .any(|s| s["trace_id"] == t.as_str() && s["name"] == "invoke_agent d0")
        })
    })
    .await;
    assert!(every, "every task's trace at 1: {traces:?}");
    all.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_agent_is_sent_its_attempt_s_trace_context() {
    let Some(rx) = Receiver::start(false).await else {
        return;
    };
    let Some(py) = crate::a2a_delegates::a2a_python() else {
        return;
    };
    let agent = crate::a2a_delegates::Agent::start(&py, "one", &[]).await;
    let gw = TestGateway::builder()
        .entry(crate::a2a_delegates::entry("one", &agent.url, 0.8))
        .config(|c| traced(c, &rx.url, "gw", 1.0))
        .spawn()
        .await;
    let c = gw.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let parent = traceparent(CLIENT_TRACE, CLIENT_SPAN, true);
    let body = submit_skill(
        &c,
        &session,
        "echo",
        json!("hello"),
        &[("traceparent", &parent)],
    )
    .await;
    assert_eq!(body["type"], "TASK_RESULT", "{body}");
    let spans = rx
        .trace(CLIENT_TRACE, |s| !named(s, "invoke_agent one").is_empty())
        .await;
    let attempt = one(&spans, "invoke_agent one");
    assert_eq!(attempt["attributes"]["gen_ai.provider.name"], "a2a");
    assert_eq!(attempt["attributes"]["gen_ai.agent.id"], "ldp:delegate:one");
    let log = Client::new(&agent.url).get("/log").await.json;
    let sent: Vec<&str> = log["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["traceparent"].as_str())
        .collect();
    let want = traceparent(CLIENT_TRACE, attempt["span_id"].as_str().unwrap(), true);
    assert!(sent.contains(&want.as_str()), "{want} in {sent:?}");
    gw.shutdown().await;
}

/// Resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A gateway process exporting to `endpoint` (given as the standard variable), over one
/// simulated delegate; `tasks` tasks, each answered; then the drops counted, the memory
/// bounded and the exit within its grace.
async fn collector_costs_nothing(endpoint: &str, tasks: usize) {
    let sim = crate::support::sim(SimOptions::new(card("p", "alpha", &[("qa", 0.9, 0.001)]))).await;
    let served = TestGateway::builder()
        .delegate(&sim.url())
        .config(|c| c.server.shutdown_grace = Duration::from_secs(5))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_TRACES_SAMPLER_ARG", "1")
        .spawn_process()
        .await;
    let c = served.client();
    let session = c.accepted(json!({"payload_mode": "text"})).await;
    let started = Instant::now();
    for i in 0..tasks {
        let body = submit(&c, &session, question(i), &[]).await;
        assert_eq!(body["type"], "TASK_RESULT", "{body}");
    }
    let took = started.elapsed();
    let admin = served.admin();
    let dropped = eventually_async(SPANS_WITHIN, || async {
        let m = admin.get("/metrics").await.text();
        m.lines()
            .find_map(|l| l.strip_prefix("ldp_gateway_otel_spans_dropped_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|n| n > 0.0)
    })
    .await;
    assert!(dropped, "drops counted");
    let rss = rss_kib(served.process.pid());
    assert!(rss < 512 * 1024, "{rss} KiB resident after {tasks} tasks");
    eprintln!("{tasks} tasks in {took:?} with the collector at {endpoint}; {rss} KiB resident");
    // SIGTERM: out within the shutdown grace (5 s) and the export's (2 s), with room to spare.
    let stopping = Instant::now();
    let said = served.stop().await;
    let stop = stopping.elapsed();
    assert!(
        stop < Duration::from_secs(20),
        "shutdown took {stop:?}: {said}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_costs_the_gateway_nothing() {
    let Some(rx) = Receiver::start(true).await else {
        return;
    };
    collector_costs_nothing(&rx.url, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_collector_costs_the_gateway_nothing() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    collector_costs_nothing(&format!("http://127.0.0.1:{port}"), 100).await;
}

#[tokio::test]
async fn check_names_a_bad_telemetry_key_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(
        &path,
        "[telemetry]\notlp_endpoint = \"collector:4318\"\nsample_ratio = 2.0\n",
    )
    .unwrap();
    let out = run(&["check", "--config", path.to_str().unwrap()], &[]).await;
    let said = text(&out.stderr) + &text(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("gateway.toml:2: telemetry.otlp_endpoint"),
        "{said}"
    );
    assert!(
        said.contains("gateway.toml:3: telemetry.sample_ratio: must be between 0 and 1, got 2"),
        "{said}"
    );
}
