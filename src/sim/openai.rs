//! Simulated OpenAI-compatible server: `GET /v1/models` and `POST /v1/chat/completions`
//! (plain and SSE streaming), with knobs for latency, failures, rate limits, broken streams and a
//! context window. A faithful peer for the gateway's OpenAI upstream, its tests, demo and benches.
//!
//! A chat completion is checked in OpenAI's order, each refusal in OpenAI's error shape
//! `{"error": {"message", "type", "param", "code"}}`: API key (when one is required) → 401
//! `invalid_api_key`; JSON body, `model` present, `messages` a non-empty array of objects with a
//! `role` → 400; `model` served → 404 `model_not_found`; prompt estimate within the context window
//! → 400 `context_length_exceeded`; then with probability `rate_limit_rate` → 429
//! `rate_limit_exceeded` with `Retry-After`; then the latency; then with probability `fail_rate`
//! → 500 `server_error`.
//!
//! The answer is deterministic: `content = "echo: " + the text of the last user (or tool)
//! message` (a string, or the `text` parts of an array, concatenated). Token counts are
//! estimates, `tokens(s) = ceil(bytes(s) / 4)`: `prompt_tokens` = tokens of all message texts
//! joined, `completion_tokens` = tokens of the content, each at least 1. With `max_tokens` (or
//! `max_completion_tokens`) below the estimate the content is cut to `4 × max_tokens` bytes
//! and `finish_reason` is `"length"`, else `"stop"`.
//!
//! Tools: a request offering `tools` whose last message is not a tool's result is answered
//! with a call of the first tool, `arguments = {"text": <the last user message's text>}` and
//! content null,
//! `finish_reason: "tool_calls"`; with the legacy `functions` instead, a `function_call`, and
//! `finish_reason: "function_call"` (`completion_tokens` = tokens of the name and arguments).
//! A tool's result is then echoed like a user message.
//!
//! A stream (`"stream": true`) sends a `chat.completion.chunk` with `delta.role`, the content in
//! up to [`STREAM_PIECES`] deltas (a call: its name and id first, then its arguments in up to
//! as many pieces), a chunk with `finish_reason`, then `data: [DONE]`; with
//! `stream_options.include_usage` every chunk carries `"usage": null` and one more chunk with
//! empty `choices` carries the usage. `break_stream_after = Some(n)` ends the response cleanly
//! after `n` content deltas: no `finish_reason`, no usage, no `[DONE]`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{clamp_rate, lock, split, tokens, url_of, Record};
use ldp_client::Secret;

/// How many content deltas a stream splits its answer into (fewer for short answers).
pub const STREAM_PIECES: usize = 4;

/// `created` of every entry of `GET /v1/models` (fixed, so answers are deterministic).
const MODEL_CREATED: u64 = 1_700_000_000;

/// Everything a simulated OpenAI server is configured with.
#[derive(Clone, Debug)]
pub struct OpenAiOptions {
    /// The models it serves (the first is the default of the CLI); others get a 404.
    pub models: Vec<String>,
    /// `owned_by` of the models list.
    pub owned_by: String,
    /// `Authorization: Bearer` key required on every route; `None` accepts any or none.
    pub api_key: Option<Secret>,
    /// Latency before every chat completion is answered (before its first byte when streamed).
    pub latency: Duration,
    /// Probability (0..=1) of a 500.
    pub fail_rate: f64,
    /// Probability (0..=1) of a 429.
    pub rate_limit_rate: f64,
    /// `Retry-After` of a 429, in whole seconds.
    pub retry_after_secs: u64,
    /// Streams end after this many content deltas, without finish, usage or `[DONE]`.
    pub break_stream_after: Option<usize>,
    /// Prompt estimates above this many tokens are refused with `context_length_exceeded`.
    pub context_window: Option<u64>,
    /// How many request bodies are kept for [`OpenAiHandle::requests`].
    pub record: usize,
}

impl OpenAiOptions {
    /// Serves `model`: no key, no latency, no failures, the last 64 requests kept.
    pub fn new(model: impl Into<String>) -> Self {
        OpenAiOptions {
            models: vec![model.into()],
            owned_by: "ldp-gateway-sim".to_owned(),
            api_key: None,
            latency: Duration::ZERO,
            fail_rate: 0.0,
            rate_limit_rate: 0.0,
            retry_after_secs: 1,
            break_stream_after: None,
            context_window: None,
            record: 64,
        }
    }
}

/// A snapshot of what the server has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenAiStats {
    /// `POST /v1/chat/completions` received.
    pub requests: u64,
    /// Non-stream completions answered (200).
    pub completions: u64,
    /// Streams started (200), broken or not.
    pub streams: u64,
    /// Streams broken on purpose (`break_stream_after`).
    pub broken_streams: u64,
    /// `GET /v1/models` answered (200).
    pub model_lists: u64,
    /// 400s (malformed body, missing field, context too long).
    pub bad_requests: u64,
    /// 401s.
    pub unauthorized: u64,
    /// 404s for a model it does not serve.
    pub unknown_models: u64,
    /// 429s.
    pub rate_limited: u64,
    /// 500s.
    pub server_errors: u64,
}

/// The knobs that can change while serving.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    latency: Duration,
    fail_rate: f64,
    rate_limit_rate: f64,
    retry_after_secs: u64,
    break_stream_after: Option<usize>,
    context_window: Option<u64>,
}

/// Shared state of one simulated OpenAI server; cheap to clone. Build it for [`router`].
#[derive(Clone)]
pub struct OpenAiState(Arc<Inner>);

struct Inner {
    models: Vec<String>,
    owned_by: String,
    api_key: Option<Secret>,
    record_len: usize,
    knobs: Mutex<Knobs>,
    counters: Mutex<OpenAiStats>,
    record: Mutex<Record<Value>>,
    shutdown: watch::Sender<bool>,
}

impl OpenAiState {
    /// State for a server with these options.
    pub fn new(opts: OpenAiOptions) -> Self {
        let knobs = Knobs {
            latency: opts.latency,
            fail_rate: clamp_rate(opts.fail_rate),
            rate_limit_rate: clamp_rate(opts.rate_limit_rate),
            retry_after_secs: opts.retry_after_secs,
            break_stream_after: opts.break_stream_after,
            context_window: opts.context_window,
        };
        OpenAiState(Arc::new(Inner {
            models: opts.models,
            owned_by: opts.owned_by,
            api_key: opts.api_key,
            record_len: opts.record,
            knobs: Mutex::new(knobs),
            counters: Mutex::new(OpenAiStats::default()),
            record: Mutex::new(Record::default()),
            shutdown: watch::channel(false).0,
        }))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> OpenAiStats {
        *lock(&self.0.counters)
    }

    /// The last request bodies of `POST /v1/chat/completions` that were JSON, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.0.record).items().cloned().collect()
    }

    fn count(&self, field: impl FnOnce(&mut OpenAiStats) -> &mut u64) {
        *field(&mut lock(&self.0.counters)) += 1;
    }

    fn remember(&self, body: Value, size: usize) {
        lock(&self.0.record).push(self.0.record_len, body, size);
    }

    fn knobs(&self) -> Knobs {
        *lock(&self.0.knobs)
    }
}

/// A server running in the background. Dropping it stops the server without waiting;
/// [`OpenAiHandle::shutdown`] stops it and waits.
pub struct OpenAiHandle {
    addr: SocketAddr,
    state: OpenAiState,
    server: Option<JoinHandle<()>>,
}

impl OpenAiHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL as OpenAI clients take it: `http://ADDR/v1`.
    pub fn url(&self) -> String {
        format!("{}/v1", url_of(self.addr))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> OpenAiStats {
        self.state.stats()
    }

    /// The last request bodies of `POST /v1/chat/completions`, oldest first.
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests()
    }

    /// The shared state.
    pub fn state(&self) -> &OpenAiState {
        &self.state
    }

    /// Changes the latency of requests from now on.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state.0.knobs).latency = latency;
    }

    /// Changes the probability (clamped to 0..=1) of a 500.
    pub fn set_fail_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).fail_rate = clamp_rate(rate);
    }

    /// Changes the probability (clamped to 0..=1) of a 429, and its `Retry-After` seconds.
    pub fn set_rate_limit(&self, rate: f64, retry_after_secs: u64) {
        let mut k = lock(&self.state.0.knobs);
        k.rate_limit_rate = clamp_rate(rate);
        k.retry_after_secs = retry_after_secs;
    }

    /// Makes streams end after `n` content deltas (or not, with `None`).
    pub fn set_break_stream_after(&self, n: Option<usize>) {
        lock(&self.state.0.knobs).break_stream_after = n;
    }

    /// Changes the context window (`None`: unlimited).
    pub fn set_context_window(&self, tokens: Option<u64>) {
        lock(&self.state.0.knobs).context_window = tokens;
    }

    /// Stops accepting connections and waits (up to a grace period) for open ones.
    pub async fn shutdown(mut self) {
        self.state.0.shutdown.send_replace(true);
        if let Some(server) = self.server.take() {
            super::stop(server).await;
        }
    }
}

impl Drop for OpenAiHandle {
    fn drop(&mut self) {
        self.state.0.shutdown.send_replace(true);
    }
}

/// Serves a simulated OpenAI server on `listener` in a background task.
pub async fn spawn(listener: TcpListener, opts: OpenAiOptions) -> std::io::Result<OpenAiHandle> {
    let addr = listener.local_addr()?;
    let state = OpenAiState::new(opts);
    let server = super::serve(
        listener,
        router(state.clone()),
        state.0.shutdown.subscribe(),
        "simulated OpenAI server",
    );
    Ok(OpenAiHandle {
        addr,
        state,
        server: Some(server),
    })
}

/// The server's HTTP routes, without a socket; `GET /sim/stats` gives the counters.
pub fn router(state: OpenAiState) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/sim/stats", get(stats))
        .with_state(state)
}

/// A refusal in OpenAI's error shape.
struct ApiError {
    status: StatusCode,
    message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
    retry_after: Option<u64>,
}

impl ApiError {
    fn invalid(message: String, param: Option<&'static str>, code: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message,
            kind: "invalid_request_error",
            param,
            code,
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }}));
        match self.retry_after {
            Some(secs) => {
                (self.status, [(header::RETRY_AFTER, secs.to_string())], body).into_response()
            }
            None => (self.status, body).into_response(),
        }
    }
}

/// 401 unless the `Authorization: Bearer` key matches the required one (if any).
fn authorize(state: &OpenAiState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(want) = &state.0.api_key else {
        return Ok(());
    };
    let got = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if got.is_some_and(|k| k.as_bytes() == want.expose()) {
        return Ok(());
    }
    state.count(|s| &mut s.unauthorized);
    let message = match got {
        None => "You didn't provide an API key. You need to provide your API key in an \
                 Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
            .to_owned(),
        Some(_) => "Incorrect API key provided.".to_owned(),
    };
    Err(ApiError {
        status: StatusCode::UNAUTHORIZED,
        message,
        kind: "invalid_request_error",
        param: None,
        code: Some("invalid_api_key"),
        retry_after: None,
    })
}

async fn stats(State(state): State<OpenAiState>) -> Json<OpenAiStats> {
    Json(state.stats())
}

async fn models(State(state): State<OpenAiState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    state.count(|s| &mut s.model_lists);
    let data: Vec<Value> = state
        .0
        .models
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": MODEL_CREATED, "owned_by": state.0.owned_by}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// A call the answer makes instead of text.
struct Call {
    /// `tool_calls` (a tool) or the legacy `function_call`.
    tool: bool,
    id: String,
    name: String,
    arguments: String,
}

impl Call {
    /// The call as a whole message's field: `(key, value)`.
    fn whole(&self) -> (&'static str, Value) {
        let function = json!({"name": self.name, "arguments": self.arguments});
        if self.tool {
            let call = json!({"id": self.id, "type": "function", "function": function});
            ("tool_calls", json!([call]))
        } else {
            ("function_call", function)
        }
    }

    /// The call's first streamed delta (name and id, no arguments yet), then one per piece of
    /// its arguments.
    fn deltas(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let head = json!({"name": self.name, "arguments": ""});
        if self.tool {
            out.push(json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": self.id, "type": "function", "function": head}]}));
        } else {
            out.push(json!({"role": "assistant", "content": null, "function_call": head}));
        }
        for piece in split(&self.arguments, STREAM_PIECES) {
            let args = json!({"arguments": piece});
            out.push(if self.tool {
                json!({"tool_calls": [{"index": 0, "function": args}]})
            } else {
                json!({"function_call": args})
            });
        }
        out
    }
}

/// The call a request with `tools` (or legacy `functions`) gets, unless it ends with a tool's
/// result.
fn call_for(obj: &serde_json::Map<String, Value>, last_role: &str, text: &str) -> Option<Call> {
    if last_role == "tool" || last_role == "function" {
        return None;
    }
    let first = |key: &str| {
        obj.get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .cloned()
    };
    let (tool, name) = match (first("tools"), first("functions")) {
        (Some(t), _) => (true, t["function"]["name"].as_str().map(str::to_owned)),
        (None, Some(f)) => (false, f["name"].as_str().map(str::to_owned)),
        (None, None) => return None,
    };
    Some(Call {
        tool,
        id: format!("call_{}", uuid::Uuid::new_v4().simple()),
        name: name.unwrap_or_else(|| "tool".to_owned()),
        arguments: json!({ "text": text }).to_string(),
    })
}

/// What a valid request asks for.
struct Ask {
    model: String,
    /// The completion's text, cut to `max_tokens`.
    content: String,
    /// A tool (or function) call instead of text.
    call: Option<Call>,
    finish_reason: &'static str,
    prompt_tokens: u64,
    completion_tokens: u64,
    stream: bool,
    include_usage: bool,
}

/// The text of a message's `content`: a string, or the `text` of its parts; else empty.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Checks the body in OpenAI's order (see the module doc) up to the context window.
fn validate(state: &OpenAiState, body: &Value, knobs: &Knobs) -> Result<Ask, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid(
            "We could not parse the JSON body of your request. The OpenAI API expects a JSON \
             payload."
                .to_owned(),
            None,
            None,
        ));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(ApiError::invalid(
                "you must provide a model parameter".to_owned(),
                None,
                None,
            ))
        }
    };
    let messages =
        match obj.get("messages") {
            None => {
                return Err(ApiError::invalid(
                    "Missing required parameter: 'messages'.".to_owned(),
                    Some("messages"),
                    Some("missing_required_parameter"),
                ))
            }
            Some(Value::Array(m)) if m.is_empty() => return Err(ApiError::invalid(
                "Invalid 'messages': empty array. Expected an array with minimum length 1, but \
                 got an empty array instead."
                    .to_owned(),
                Some("messages"),
                Some("empty_array"),
            )),
            Some(Value::Array(m)) => m,
            Some(_) => {
                return Err(ApiError::invalid(
                    "Invalid type for 'messages': expected an array.".to_owned(),
                    Some("messages"),
                    Some("invalid_type"),
                ))
            }
        };
    let mut prompt_bytes = 0;
    let mut last_user = String::new();
    let mut last_role = "";
    for (i, m) in messages.iter().enumerate() {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            return Err(ApiError::invalid(
                format!("Missing required parameter: 'messages[{i}].role'."),
                Some("messages"),
                Some("missing_required_parameter"),
            ));
        };
        let text = text_of(m.get("content"));
        prompt_bytes += text.len();
        last_role = role;
        if matches!(role, "user" | "tool" | "function") {
            last_user = text;
        }
    }
    if !state.0.models.contains(&model) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist or you do not have access to it."),
            kind: "invalid_request_error",
            param: None,
            code: Some("model_not_found"),
            retry_after: None,
        });
    }
    let prompt_tokens = tokens(prompt_bytes);
    if let Some(window) = knobs.context_window {
        if prompt_tokens > window {
            return Err(ApiError::invalid(
                format!(
                    "This model's maximum context length is {window} tokens. However, your \
                     messages resulted in {prompt_tokens} tokens. Please reduce the length of \
                     the messages."
                ),
                Some("messages"),
                Some("context_length_exceeded"),
            ));
        }
    }
    let mut content = format!("echo: {last_user}");
    let call = call_for(obj, last_role, &last_user);
    let mut finish_reason = match &call {
        Some(c) if c.tool => "tool_calls",
        Some(_) => "function_call",
        None => "stop",
    };
    if call.is_some() {
        content.clear();
    }
    let max_tokens = obj
        .get("max_completion_tokens")
        .or_else(|| obj.get("max_tokens"))
        .and_then(Value::as_u64);
    if let Some(max) = max_tokens {
        let cap = usize::try_from(max.saturating_mul(4)).unwrap_or(usize::MAX);
        if crate::ldp::text::truncate(&mut content, cap) {
            finish_reason = "length";
        }
    }
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = obj
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let answered = match &call {
        Some(c) => c.name.len() + c.arguments.len(),
        None => content.len(),
    };
    Ok(Ask {
        model,
        completion_tokens: tokens(answered),
        content,
        call,
        finish_reason,
        prompt_tokens,
        stream,
        include_usage,
    })
}

async fn chat_completions(
    State(state): State<OpenAiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.count(|s| &mut s.requests);
    match answer(&state, &headers, &body).await {
        Ok(r) => r,
        Err(e) => {
            match e.status {
                StatusCode::BAD_REQUEST => state.count(|s| &mut s.bad_requests),
                StatusCode::NOT_FOUND => state.count(|s| &mut s.unknown_models),
                StatusCode::TOO_MANY_REQUESTS => state.count(|s| &mut s.rate_limited),
                StatusCode::INTERNAL_SERVER_ERROR => state.count(|s| &mut s.server_errors),
                // 401s are counted where they are decided, for `/v1/models` too.
                _ => {}
            }
            e.into_response()
        }
    }
}

async fn answer(
    state: &OpenAiState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    authorize(state, headers)?;
    let parsed: Value = serde_json::from_slice(body).map_err(|_| {
        ApiError::invalid(
            "We could not parse the JSON body of your request. The OpenAI API expects a JSON \
             payload."
                .to_owned(),
            None,
            None,
        )
    })?;
    let knobs = state.knobs();
    let ask = validate(state, &parsed, &knobs);
    state.remember(parsed, body.len());
    let ask = ask?;
    if fastrand::f64() < knobs.rate_limit_rate {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "Rate limit reached for {} (simulated). Please try again in {}s.",
                ask.model, knobs.retry_after_secs
            ),
            kind: "requests",
            param: None,
            code: Some("rate_limit_exceeded"),
            retry_after: Some(knobs.retry_after_secs),
        });
    }
    if !knobs.latency.is_zero() {
        let mut down = state.0.shutdown.subscribe();
        tokio::select! {
            () = tokio::time::sleep(knobs.latency) => {}
            _ = down.wait_for(|d| *d) => {}
        }
    }
    if fastrand::f64() < knobs.fail_rate {
        return Err(ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "The server had an error while processing your request. Sorry about that!"
                .to_owned(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        });
    }
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let usage = json!({
        "prompt_tokens": ask.prompt_tokens,
        "completion_tokens": ask.completion_tokens,
        "total_tokens": ask.prompt_tokens + ask.completion_tokens,
    });
    if !ask.stream {
        state.count(|s| &mut s.completions);
        let mut message = json!({"role": "assistant", "content": ask.content, "refusal": null});
        if let Some(call) = &ask.call {
            let (key, value) = call.whole();
            message["content"] = Value::Null;
            message[key] = value;
        }
        return Ok(Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": ask.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": ask.finish_reason,
            }],
            "usage": usage,
        }))
        .into_response());
    }
    state.count(|s| &mut s.streams);
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": ask.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if ask.include_usage {
            c["usage"] = Value::Null;
        }
        Event::default().data(c.to_string())
    };
    let deltas = match &ask.call {
        Some(call) => call.deltas(),
        None => {
            let mut d = vec![json!({"role": "assistant", "content": ""})];
            d.extend(
                split(&ask.content, STREAM_PIECES)
                    .into_iter()
                    .map(|piece| json!({ "content": piece })),
            );
            d
        }
    };
    // The first delta (the role) is no content delta.
    let broken = knobs.break_stream_after.filter(|n| *n + 1 < deltas.len());
    let mut events = Vec::with_capacity(deltas.len() + 3);
    for delta in deltas
        .into_iter()
        .take(broken.map_or(usize::MAX, |n| n + 1))
    {
        events.push(chunk(delta, None));
    }
    if broken.is_some() {
        state.count(|s| &mut s.broken_streams);
    } else {
        events.push(chunk(json!({}), Some(ask.finish_reason)));
        if ask.include_usage {
            let last = json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": ask.model,
                "choices": [],
                "usage": usage,
            });
            events.push(Event::default().data(last.to_string()));
        }
        events.push(Event::default().data("[DONE]"));
    }
    let events = futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Ok(Sse::new(events).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tokens_cuts_the_answer_at_a_char_boundary() {
        let state = OpenAiState::new(OpenAiOptions::new("m"));
        let body = json!({"model": "m", "max_tokens": 2,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "ééééé"}]}]});
        let ask = validate(&state, &body, &state.knobs()).ok().unwrap();
        assert_eq!(ask.content, "echo: é");
        assert_eq!(ask.finish_reason, "length");
        assert_eq!(ask.prompt_tokens, 3);
    }

    #[test]
    fn a_tool_is_called_and_its_result_echoed() {
        let state = OpenAiState::new(OpenAiOptions::new("m"));
        let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {}}}]);
        let asked = json!([{"role": "user", "content": "héllo"}]);
        let body = json!({"model": "m", "tools": tools, "messages": asked});
        let ask = validate(&state, &body, &state.knobs()).ok().unwrap();
        let call = ask.call.unwrap();
        assert!(call.tool);
        assert_eq!(
            (call.name.as_str(), ask.finish_reason),
            ("lookup", "tool_calls")
        );
        assert_eq!(call.arguments, r#"{"text":"héllo"}"#);
        assert_eq!(ask.content, "");
        let (key, whole) = call.whole();
        assert_eq!(key, "tool_calls");
        assert_eq!(whole[0]["function"]["arguments"], call.arguments);
        let deltas = call.deltas();
        assert_eq!(deltas[0]["tool_calls"][0]["id"], whole[0]["id"]);
        let streamed: String = deltas[1..]
            .iter()
            .map(|d| {
                d["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(streamed, call.arguments);

        let answered = json!([{"role": "user", "content": "héllo"},
            {"role": "assistant", "content": null, "tool_calls": whole},
            {"role": "tool", "tool_call_id": "x", "content": "42"}]);
        let body = json!({"model": "m", "tools": tools, "messages": answered});
        let ask = validate(&state, &body, &state.knobs()).ok().unwrap();
        assert!(ask.call.is_none());
        assert_eq!(
            (ask.content.as_str(), ask.finish_reason),
            ("echo: 42", "stop")
        );

        let functions = json!([{"name": "legacy", "parameters": {}}]);
        let body = json!({"model": "m", "functions": functions, "messages": asked});
        let ask = validate(&state, &body, &state.knobs()).ok().unwrap();
        assert_eq!(ask.finish_reason, "function_call");
        assert_eq!(ask.call.unwrap().whole().0, "function_call");
    }

    #[test]
    fn the_record_is_bounded_by_count() {
        let mut opts = OpenAiOptions::new("m");
        opts.record = 2;
        let state = OpenAiState::new(opts);
        for i in 0..5 {
            state.remember(json!(i), 1);
        }
        assert_eq!(state.requests(), [json!(3), json!(4)]);
    }
}
