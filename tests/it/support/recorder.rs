//! Upstreams that record and answer fixed bytes, for the golden tests (`tests/it/golden`): an
//! HTTP server on a loopback port keeping every request exactly as it came (method, path,
//! headers, body) with the answer its script gave, and scripts for the three kinds of
//! delegate — an LDP delegate (card, handshake, `TASK_SUBMIT` on `/ldp/messages` and
//! `/ldp/stream`), an OpenAI-compatible model (`/v1/models`, `/v1/chat/completions`) and an
//! A2A agent (Agent Card, JSON-RPC) — whose answers depend on the request only through the
//! ids they must echo, so that what the gateway makes of them is the same on every run.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// The `timestamp` of every envelope a scripted delegate sends (and of the clients' fixtures):
/// a fixed instant, so that it reads as ours in a snapshot.
pub const FIXED_TIME: &str = "2026-01-01T00:00:00Z";

/// [`FIXED_TIME`] in seconds since the epoch (an OpenAI answer's `created`).
pub const FIXED_UNIX: u64 = 1_767_225_600;

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Asked {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Every header, names in lower case, in the order they came.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Asked {
    /// The body as JSON, `null` when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The LDP message type of the envelope it carries (`HELLO`, `TASK_SUBMIT`, …).
    pub fn ldp_type(&self) -> Option<String> {
        self.json()["body"]["type"].as_str().map(str::to_owned)
    }
}

/// One answer: status, content type and the exact body bytes.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Reply {
    /// 200 with `v` as JSON.
    pub fn json(v: &Value) -> Reply {
        Reply::status_json(200, v)
    }

    /// `status` with `v` as JSON.
    pub fn status_json(status: u16, v: &Value) -> Reply {
        Reply {
            status,
            content_type: "application/json".into(),
            body: v.to_string().into_bytes(),
        }
    }

    /// 200 `text/event-stream`: one `data:` event per value (a string is sent as it is, so
    /// `[DONE]` can end a chat stream), the whole stream at once.
    pub fn sse(events: &[Value]) -> Reply {
        let body: String = events
            .iter()
            .map(|e| match e {
                Value::String(s) => format!("data: {s}\n\n"),
                other => format!("data: {other}\n\n"),
            })
            .collect();
        Reply {
            status: 200,
            content_type: "text/event-stream".into(),
            body: body.into_bytes(),
        }
    }

    /// 200 `text/event-stream` of named events, `event:` line then `data:`, as Anthropic
    /// streams; the whole stream at once.
    pub fn named_sse(events: &[(&str, Value)]) -> Reply {
        let body: String = events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect();
        Reply {
            status: 200,
            content_type: "text/event-stream".into(),
            body: body.into_bytes(),
        }
    }

    /// 404 with no body: what a script answers a request it does not expect.
    pub fn not_found() -> Reply {
        Reply {
            status: 404,
            content_type: "text/plain".into(),
            body: Vec::new(),
        }
    }
}

/// A request and the answer it got.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub asked: Asked,
    pub reply: Reply,
}

/// Every exchange of one recorder so far, shared with whoever renders them.
pub type Log = Arc<Mutex<Vec<Exchange>>>;

type Script = dyn Fn(&Asked) -> Reply + Send + Sync;

/// A running recorder: its base URL and its log. Stops when dropped.
pub struct Recorder {
    addr: std::net::SocketAddr,
    log: Log,
    task: JoinHandle<()>,
}

impl Recorder {
    /// Serves every request with `script`, keeping each with its answer.
    pub async fn start(script: impl Fn(&Asked) -> Reply + Send + Sync + 'static) -> Recorder {
        let script: Arc<Script> = Arc::new(script);
        let log: Log = Arc::default();
        let kept = log.clone();
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: axum::http::HeaderMap,
                  body: axum::body::Bytes| {
                let (script, kept) = (script.clone(), kept.clone());
                async move {
                    let asked = Asked {
                        method: method.as_str().to_owned(),
                        path: uri
                            .path_and_query()
                            .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned()),
                        headers: headers
                            .iter()
                            .map(|(k, v)| {
                                (
                                    k.as_str().to_owned(),
                                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                                )
                            })
                            .collect(),
                        body: body.to_vec(),
                    };
                    let reply = script(&asked);
                    let resp = axum::response::Response::builder()
                        .status(reply.status)
                        .header("content-type", reply.content_type.as_str())
                        .body(axum::body::Body::from(reply.body.clone()))
                        .expect("a response");
                    kept.lock().expect("log").push(Exchange { asked, reply });
                    resp
                }
            },
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind recorder");
        let addr = l.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(l, app).await;
        });
        Recorder { addr, log, task }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The log, to read as exchanges come.
    pub fn log(&self) -> Log {
        self.log.clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- an LDP delegate ----

/// An envelope from the scripted LDP delegate `id` in `session`, with a fixed message id and
/// [`FIXED_TIME`].
pub fn ldp_envelope(id: &str, session: &str, n: &str, body: Value) -> Value {
    json!({
        "message_id": format!("{id}-msg-{n}"), "session_id": session,
        "from": format!("ldp:delegate:{id}"), "to": "ldp:delegate:gateway", "body": body,
        "payload_mode": "text", "timestamp": FIXED_TIME, "provenance": null
    })
}

/// What a scripted LDP delegate answers a `TASK_SUBMIT` with: envelope bodies, the last one
/// final (`TASK_RESULT` or `TASK_FAILED`); the others are streamed first as `TASK_UPDATE`s on
/// `/ldp/stream` and dropped on `/ldp/messages`.
pub type LdpAnswer = dyn Fn(&Value) -> Vec<Value> + Send + Sync;

/// An LDP delegate `id` serving `card` (its `endpoint` filled in), answering the handshake
/// (session `{id}-session`) and every `TASK_SUBMIT` envelope with what `answer` says.
pub async fn ldp_delegate(
    id: &'static str,
    card: Value,
    answer: impl Fn(&Value) -> Vec<Value> + Send + Sync + 'static,
) -> Recorder {
    let answer: Arc<LdpAnswer> = Arc::new(answer);
    Recorder::start(move |asked| {
        let session = format!("{id}-session");
        if asked.method == "GET" {
            return match asked.path.as_str() {
                "/.well-known/ldp-identity" | "/ldp/identity" => Reply::json(&card),
                _ => Reply::not_found(),
            };
        }
        let env = asked.json();
        let body = match asked.ldp_type().as_deref() {
            Some("HELLO") => vec![json!({"type": "CAPABILITY_MANIFEST",
                "capabilities": {"capabilities": card["capabilities"], "supported_modes": ["text"]}})],
            Some("SESSION_PROPOSE") => vec![json!({"type": "SESSION_ACCEPT",
                "session_id": session, "negotiated_mode": "text"})],
            Some("SESSION_CLOSE") => vec![json!({"type": "SESSION_CLOSE", "reason": "closed"})],
            Some("TASK_SUBMIT") => answer(&env),
            _ => return Reply::not_found(),
        };
        let envelopes: Vec<Value> = body
            .into_iter()
            .enumerate()
            .map(|(i, b)| ldp_envelope(id, &session, &(i + 1).to_string(), b))
            .collect();
        match asked.path.as_str() {
            "/ldp/stream" => Reply::sse(&envelopes),
            _ => Reply::json(envelopes.last().expect("an answer")),
        }
    })
    .await
}

/// A card for the scripted LDP delegate `id` of model family `family`: `skills` as
/// `(name, quality, streams)`, 0.002 USD a call, 50 ms at p50, text only.
pub fn ldp_card(id: &str, family: &str, skills: &[(&str, f64, bool)]) -> Value {
    let caps: Vec<Value> = skills
        .iter()
        .map(|(name, quality, streams)| {
            json!({"name": name, "quality": {"quality_score": quality,
                "cost_per_call_usd": 0.002, "latency_p50_ms": 50, "supports_streaming": streams}})
        })
        .collect();
    json!({
        "delegate_id": format!("ldp:delegate:{id}"), "name": id, "model_family": family,
        "model_version": format!("{id}-1"), "trust_domain": "default", "context_window": 8192,
        "capabilities": caps, "supported_payload_modes": ["text"], "endpoint": ""
    })
}

// ---- an OpenAI-compatible model ----

/// An OpenAI-compatible server offering `model` (`GET …/models`) and answering every chat
/// completion with what `answer` says, given the request's body. Its base URL for an entry
/// is `{url}/v1`.
pub async fn openai_model(
    model: &'static str,
    answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Recorder {
    Recorder::start(
        move |asked| match (asked.method.as_str(), asked.path.as_str()) {
            ("GET", "/v1/models") => Reply::json(&json!({"object": "list",
            "data": [{"id": model, "object": "model", "created": 0, "owned_by": "golden"}]})),
            ("POST", "/v1/chat/completions") => answer(&asked.json()),
            _ => Reply::not_found(),
        },
    )
    .await
}

// ---- an Anthropic-API model ----

/// An Anthropic Messages API server offering `model` (`GET /v1/models`) and answering every
/// `POST /v1/messages` with what `answer` says, given the request's body. Its base URL is the
/// entry's `url`.
pub async fn anthropic_model(
    model: &'static str,
    answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Recorder {
    Recorder::start(
        move |asked| match (asked.method.as_str(), asked.path.as_str()) {
            ("GET", "/v1/models") => Reply::json(&json!({"data": [{"type": "model", "id": model,
                "display_name": model, "created_at": "2025-09-29T00:00:00Z"}],
                "has_more": false, "first_id": model, "last_id": model})),
            ("POST", "/v1/messages") => answer(&asked.json()),
            _ => Reply::not_found(),
        },
    )
    .await
}

// ---- an A2A agent ----

/// An A2A agent serving `card` at the v1.0 path (or, `legacy`, at the v0.3 one only) and
/// answering every JSON-RPC call on `rpc_path` with what `answer` says, given the request.
pub async fn a2a_agent(
    card: Value,
    legacy: bool,
    rpc_path: &'static str,
    answer: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> Recorder {
    Recorder::start(
        move |asked| match (asked.method.as_str(), asked.path.as_str()) {
            ("GET", "/.well-known/agent-card.json") if !legacy => Reply::json(&card),
            ("GET", "/.well-known/agent.json") if legacy => Reply::json(&card),
            ("POST", p) if p == rpc_path => answer(&asked.json()),
            _ => Reply::not_found(),
        },
    )
    .await
}
