//! Simulated Anthropic Messages API server: `GET /v1/models`, `POST /v1/messages` (whole, and
//! streamed as named SSE events) and `POST /v1/messages/count_tokens`, with knobs for latency,
//! rate limits, overload, failures and broken streams. A faithful peer for the gateway's
//! `kind = "anthropic"` upstream, its tests, demo and benches (`ldp-gateway delegate --anthropic`).
//!
//! A message is checked in Anthropic's order, each refusal in Anthropic's error shape
//! `{"type": "error", "error": {"type", "message"}}`: the key (when one is required), from
//! `x-api-key` or `Authorization: Bearer` → 401 `authentication_error`; `anthropic-version`
//! present → else 400; a JSON object with `model`, `max_tokens` (≥ 1) and a non-empty `messages`
//! array of `user`/`assistant` turns → else 400 `invalid_request_error`; `model` served → else
//! 404 `not_found_error`; then with probability `rate_limit_rate` → 429 `rate_limit_error` with
//! `retry-after`, with probability `overload_rate` → 529 `overloaded_error`; then the latency;
//! then with probability `fail_rate` → 500 `api_error`.
//!
//! The answer is deterministic: one text block `"echo: " + the text of the last user turn` (its
//! text blocks, or its `tool_result` blocks' text), cut at the first of `stop_sequences` it
//! contains (`stop_reason: "stop_sequence"`) or at `4 × max_tokens` bytes (`"max_tokens"`),
//! else `"end_turn"`. A request offering `tools` whose last turn carries no `tool_result` is
//! answered with a `tool_use` of the first tool, `input = {"text": <that text>}`,
//! `stop_reason: "tool_use"`. With `thinking` enabled a `thinking` block (signed `sim`) comes
//! first. Tokens are estimates, `ceil(bytes / 4)` each at least 1, of the `system` and message
//! texts; the prompt up to its last block marked `cache_control` is a cached prefix: the first
//! request with a given prefix writes it (`cache_creation_input_tokens`), later ones read it
//! (`cache_read_input_tokens`), and `input_tokens` counts the rest, as Anthropic counts.
//!
//! A stream sends `message_start`, per block `content_block_start`, (after the first) `ping`,
//! `content_block_delta`s (`text_delta`, `input_json_delta`, `thinking_delta` then
//! `signature_delta`) in up to [`STREAM_PIECES`] pieces, `content_block_stop`, then
//! `message_delta` (stop reason, cumulative usage) and `message_stop`, each with its `event:`
//! line. `break_stream_after = Some(n)` ends the response cleanly after `n` content deltas, with
//! no `message_delta` or `message_stop`.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{clamp_rate, lock, split, tokens, url_of, Record};
use anthropic_wire::{ErrorBody, ModelInfo, ModelList, BETA_HEADER, KEY_HEADER, VERSION_HEADER};
use ldp_client::Secret;

/// How many deltas a stream splits each block into (fewer for short ones).
pub const STREAM_PIECES: usize = 4;

/// `created_at` of every model listed (fixed, so answers are deterministic).
const MODEL_CREATED: &str = "2025-09-29T00:00:00Z";

/// How many cached prefixes are remembered (then the cache starts over, as a cache may).
const CACHE_ENTRIES: usize = 4096;

/// Everything a simulated Anthropic server is configured with.
#[derive(Clone, Debug)]
pub struct AnthropicOptions {
    /// The models it serves (the first is the CLI's default); others get a 404.
    pub models: Vec<String>,
    /// The key required on `/v1/*` (as `x-api-key` or `Authorization: Bearer`); `None`: any.
    pub api_key: Option<Secret>,
    /// Latency before every message is answered (before its first event when streamed).
    pub latency: Duration,
    /// Probability (0..=1) of a 500 `api_error`.
    pub fail_rate: f64,
    /// Probability (0..=1) of a 429 `rate_limit_error`.
    pub rate_limit_rate: f64,
    /// Probability (0..=1) of a 529 `overloaded_error`.
    pub overload_rate: f64,
    /// `retry-after` of a 429, in whole seconds.
    pub retry_after_secs: u64,
    /// Streams end after this many content deltas, without `message_delta` or `message_stop`.
    pub break_stream_after: Option<usize>,
    /// How many requests (body and headers) are kept for [`AnthropicHandle::requests`].
    pub record: usize,
}

impl AnthropicOptions {
    /// Serves `model`: no key, no latency, no failures, the last 64 requests kept.
    pub fn new(model: impl Into<String>) -> Self {
        AnthropicOptions {
            models: vec![model.into()],
            api_key: None,
            latency: Duration::ZERO,
            fail_rate: 0.0,
            rate_limit_rate: 0.0,
            overload_rate: 0.0,
            retry_after_secs: 1,
            break_stream_after: None,
            record: 64,
        }
    }
}

/// A snapshot of what the server has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnthropicStats {
    /// `POST /v1/messages` received.
    pub requests: u64,
    /// Whole messages answered (200).
    pub messages: u64,
    /// Streams started (200), broken or not.
    pub streams: u64,
    /// Streams broken on purpose (`break_stream_after`).
    pub broken_streams: u64,
    /// `GET /v1/models` answered (200).
    pub model_lists: u64,
    /// `POST /v1/messages/count_tokens` answered (200).
    pub token_counts: u64,
    /// 400s.
    pub bad_requests: u64,
    /// 401s.
    pub unauthorized: u64,
    /// 404s for a model it does not serve.
    pub unknown_models: u64,
    /// 429s.
    pub rate_limited: u64,
    /// 529s.
    pub overloaded: u64,
    /// 500s.
    pub server_errors: u64,
}

/// One request as received: its JSON body and the headers the API reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Received {
    /// The body.
    pub body: Value,
    /// `anthropic-version`.
    pub version: Option<String>,
    /// `anthropic-beta`.
    pub beta: Option<String>,
    /// The key it came with (`x-api-key`, else a Bearer token).
    pub key: Option<String>,
}

/// The knobs that can change while serving.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    latency: Duration,
    fail_rate: f64,
    rate_limit_rate: f64,
    overload_rate: f64,
    retry_after_secs: u64,
    break_stream_after: Option<usize>,
}

/// Shared state of one simulated Anthropic server; cheap to clone. Build it for [`router`].
#[derive(Clone)]
pub struct AnthropicState(Arc<Inner>);

struct Inner {
    models: Vec<String>,
    api_key: Option<Secret>,
    record_len: usize,
    knobs: Mutex<Knobs>,
    counters: Mutex<AnthropicStats>,
    record: Mutex<Record<Received>>,
    /// Digests of the cached prefixes seen.
    cache: Mutex<HashSet<[u8; 32]>>,
    shutdown: watch::Sender<bool>,
}

impl AnthropicState {
    /// State for a server with these options.
    pub fn new(opts: AnthropicOptions) -> Self {
        let knobs = Knobs {
            latency: opts.latency,
            fail_rate: clamp_rate(opts.fail_rate),
            rate_limit_rate: clamp_rate(opts.rate_limit_rate),
            overload_rate: clamp_rate(opts.overload_rate),
            retry_after_secs: opts.retry_after_secs,
            break_stream_after: opts.break_stream_after,
        };
        AnthropicState(Arc::new(Inner {
            models: opts.models,
            api_key: opts.api_key,
            record_len: opts.record,
            knobs: Mutex::new(knobs),
            counters: Mutex::new(AnthropicStats::default()),
            record: Mutex::new(Record::default()),
            cache: Mutex::new(HashSet::new()),
            shutdown: watch::channel(false).0,
        }))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AnthropicStats {
        *lock(&self.0.counters)
    }

    /// The last requests of `POST /v1/messages` (and `count_tokens`) that were JSON, oldest
    /// first.
    pub fn requests(&self) -> Vec<Received> {
        lock(&self.0.record).items().cloned().collect()
    }

    fn count(&self, field: impl FnOnce(&mut AnthropicStats) -> &mut u64) {
        *field(&mut lock(&self.0.counters)) += 1;
    }

    fn knobs(&self) -> Knobs {
        *lock(&self.0.knobs)
    }

    /// Whether the prefix with this digest was cached before (and caches it now).
    fn cached(&self, digest: [u8; 32]) -> bool {
        let mut cache = lock(&self.0.cache);
        if cache.contains(&digest) {
            return true;
        }
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(digest);
        false
    }
}

/// A server running in the background. Dropping it stops the server without waiting;
/// [`AnthropicHandle::shutdown`] stops it and waits.
pub struct AnthropicHandle {
    addr: SocketAddr,
    state: AnthropicState,
    server: Option<JoinHandle<()>>,
}

impl AnthropicHandle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL as the Anthropic SDK takes it (`base_url`): `http://ADDR`.
    pub fn url(&self) -> String {
        url_of(self.addr)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AnthropicStats {
        self.state.stats()
    }

    /// The last requests, oldest first.
    pub fn requests(&self) -> Vec<Received> {
        self.state.requests()
    }

    /// Changes the latency of requests from now on.
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state.0.knobs).latency = latency;
    }

    /// Changes the probability (clamped to 0..=1) of a 500.
    pub fn set_fail_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).fail_rate = clamp_rate(rate);
    }

    /// Changes the probability (clamped to 0..=1) of a 429, and its `retry-after` seconds.
    pub fn set_rate_limit(&self, rate: f64, retry_after_secs: u64) {
        let mut k = lock(&self.state.0.knobs);
        k.rate_limit_rate = clamp_rate(rate);
        k.retry_after_secs = retry_after_secs;
    }

    /// Changes the probability (clamped to 0..=1) of a 529.
    pub fn set_overload_rate(&self, rate: f64) {
        lock(&self.state.0.knobs).overload_rate = clamp_rate(rate);
    }

    /// Makes streams end after `n` content deltas (or not, with `None`).
    pub fn set_break_stream_after(&self, n: Option<usize>) {
        lock(&self.state.0.knobs).break_stream_after = n;
    }

    /// Stops accepting connections and waits (up to a grace period) for open ones.
    pub async fn shutdown(mut self) {
        self.state.0.shutdown.send_replace(true);
        if let Some(server) = self.server.take() {
            super::stop(server).await;
        }
    }
}

impl Drop for AnthropicHandle {
    fn drop(&mut self) {
        self.state.0.shutdown.send_replace(true);
    }
}

/// Serves a simulated Anthropic server on `listener` in a background task.
pub async fn spawn(
    listener: TcpListener,
    opts: AnthropicOptions,
) -> std::io::Result<AnthropicHandle> {
    let addr = listener.local_addr()?;
    let state = AnthropicState::new(opts);
    let server = super::serve(
        listener,
        router(state.clone()),
        state.0.shutdown.subscribe(),
        "simulated Anthropic server",
    );
    Ok(AnthropicHandle {
        addr,
        state,
        server: Some(server),
    })
}

/// The server's HTTP routes, without a socket; `GET /sim/stats` gives the counters.
pub fn router(state: AnthropicState) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/sim/stats", get(stats))
        .with_state(state)
}

/// A refusal in Anthropic's error shape.
struct ApiError {
    status: StatusCode,
    message: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let kind = anthropic_wire::error_type(self.status.as_u16());
        let body = Json(ErrorBody::new(kind, self.message));
        match self.retry_after {
            Some(secs) => {
                (self.status, [(header::RETRY_AFTER, secs.to_string())], body).into_response()
            }
            None => (self.status, body).into_response(),
        }
    }
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The key a request came with: `x-api-key`, else a Bearer token.
fn key_of(headers: &HeaderMap) -> Option<String> {
    header_str(headers, KEY_HEADER).or_else(|| {
        header_str(headers, header::AUTHORIZATION)
            .and_then(|v| v.strip_prefix("Bearer ").map(str::to_owned))
    })
}

/// 401 unless the key matches the required one (if any); 400 without `anthropic-version`.
fn authorize(state: &AnthropicState, headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(want) = &state.0.api_key {
        if key_of(headers).is_none_or(|k| k.as_bytes() != want.expose()) {
            state.count(|s| &mut s.unauthorized);
            return Err(ApiError::new(StatusCode::UNAUTHORIZED, "invalid x-api-key"));
        }
    }
    if headers.get(VERSION_HEADER).is_none() {
        state.count(|s| &mut s.bad_requests);
        return Err(ApiError::invalid("anthropic-version: header is required"));
    }
    Ok(())
}

async fn stats(State(state): State<AnthropicState>) -> Json<AnthropicStats> {
    Json(state.stats())
}

async fn models(State(state): State<AnthropicState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    state.count(|s| &mut s.model_lists);
    let data: Vec<ModelInfo> = state
        .0
        .models
        .iter()
        .map(|id| ModelInfo {
            kind: "model".to_owned(),
            id: id.clone(),
            display_name: id.clone(),
            created_at: MODEL_CREATED.to_owned(),
            lifecycle: "active".to_owned(),
        })
        .collect();
    Json(ModelList {
        first_id: data.first().map(|m| m.id.clone()),
        last_id: data.last().map(|m| m.id.clone()),
        data,
        has_more: false,
    })
    .into_response()
}

/// The text of a content value: a string, or its `text` blocks and its `tool_result` blocks'
/// text.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                Some("tool_result") => text_of(&b["content"]),
                _ => String::new(),
            })
            .collect(),
        _ => String::new(),
    }
}

/// The input's token counts: (uncached, cache written, cache read).
struct Input {
    fresh: u64,
    written: u64,
    read: u64,
}

/// The input's texts in order (system, then each turn's blocks), with whether each ends a
/// cached prefix; priced as Anthropic prices it.
fn input_of(state: &AnthropicState, body: &Map<String, Value>) -> Input {
    let mut pieces: Vec<(String, bool)> = Vec::new();
    let mut push = |content: &Value| match content {
        Value::String(s) => pieces.push((s.clone(), false)),
        Value::Array(blocks) => {
            for b in blocks {
                let text = match b["type"].as_str() {
                    Some("text") => b["text"].as_str().unwrap_or_default().to_owned(),
                    _ => b.to_string(),
                };
                pieces.push((text, b.get("cache_control").is_some()));
            }
        }
        _ => {}
    };
    if let Some(tools) = body.get("tools") {
        push(tools);
    }
    if let Some(system) = body.get("system") {
        push(system);
    }
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(&m["content"]);
    }
    let total: usize = pieces.iter().map(|(t, _)| t.len()).sum();
    let Some(last) = pieces.iter().rposition(|(_, marked)| *marked) else {
        return Input {
            fresh: tokens(total),
            written: 0,
            read: 0,
        };
    };
    let mut digest = Sha256::new();
    let mut prefix = 0;
    for (text, _) in &pieces[..=last] {
        digest.update(text.as_bytes());
        digest.update([0]);
        prefix += text.len();
    }
    let key: [u8; 32] = digest.finalize().into();
    let cached = tokens(prefix);
    let fresh = tokens(total - prefix);
    if state.cached(key) {
        Input {
            fresh,
            written: 0,
            read: cached,
        }
    } else {
        Input {
            fresh,
            written: cached,
            read: 0,
        }
    }
}

/// What a valid request asks for.
struct Ask {
    model: String,
    /// The content blocks of the answer, whole.
    blocks: Vec<Value>,
    stop_reason: &'static str,
    stop_sequence: Option<String>,
    input: Input,
    output_tokens: u64,
    stream: bool,
}

/// Checks the body in Anthropic's order (see the module doc) and works out the answer.
fn validate(state: &AnthropicState, body: &Value) -> Result<Ask, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(ApiError::invalid("model: Field required")),
    };
    let max_tokens = match obj.get("max_tokens").and_then(Value::as_u64) {
        Some(n) if n >= 1 => n,
        Some(_) => {
            return Err(ApiError::invalid(
                "max_tokens: Input should be greater than or equal to 1",
            ))
        }
        None => return Err(ApiError::invalid("max_tokens: Field required")),
    };
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "messages: at least one message is required",
            ))
        }
        _ => return Err(ApiError::invalid("messages: Field required")),
    };
    let mut last_user = &Value::Null;
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("user") => last_user = &m["content"],
            Some("assistant") => {}
            _ => {
                return Err(ApiError::invalid(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                )))
            }
        }
    }
    if !state.0.models.contains(&model) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("model: {model}"),
        ));
    }
    let text = text_of(last_user);
    let answered_tool = matches!(last_user, Value::Array(blocks)
        if blocks.iter().any(|b| b["type"] == "tool_result"));
    let first_tool = obj
        .get("tools")
        .and_then(Value::as_array)
        .and_then(|t| t.first());
    let mut blocks = Vec::new();
    if obj.get("thinking").is_some_and(|t| t["type"] == "enabled") {
        blocks.push(
            json!({"type": "thinking", "thinking": format!("The user said: {text}"),
            "signature": "sim"}),
        );
    }
    let (stop_reason, stop_sequence, answered) = match first_tool.filter(|_| !answered_tool) {
        Some(tool) => {
            let name = tool["name"].as_str().unwrap_or("tool");
            let input = json!({ "text": text });
            let answered = name.len() + input.to_string().len();
            blocks.push(json!({
                "type": "tool_use",
                "id": format!("toolu_{}", uuid::Uuid::new_v4().simple()),
                "name": name,
                "input": input,
            }));
            ("tool_use", None, answered)
        }
        None => {
            let mut content = format!("echo: {text}");
            let mut stop = ("end_turn", None);
            let met = obj
                .get("stop_sequences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .filter_map(|s| content.find(s).map(|at| (at, s)))
                .min();
            if let Some((at, seq)) = met {
                content.truncate(at);
                stop = ("stop_sequence", Some(seq.to_owned()));
            }
            let cap = usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
            if crate::ldp::text::truncate(&mut content, cap) {
                stop = ("max_tokens", None);
            }
            let answered = content.len();
            blocks.push(json!({"type": "text", "text": content}));
            (stop.0, stop.1, answered)
        }
    };
    Ok(Ask {
        model,
        blocks,
        stop_reason,
        stop_sequence,
        input: input_of(state, obj),
        output_tokens: tokens(answered),
        stream: obj.get("stream").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// Parses the body and keeps the request; a body that is no JSON is a 400.
fn received(state: &AnthropicState, headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let parsed: Value = serde_json::from_slice(body).map_err(|e| {
        state.count(|s| &mut s.bad_requests);
        ApiError::invalid(format!("the request body is not valid JSON: {e}"))
    })?;
    let seen = Received {
        body: parsed.clone(),
        version: header_str(headers, VERSION_HEADER),
        beta: header_str(headers, BETA_HEADER),
        key: key_of(headers),
    };
    lock(&state.0.record).push(state.0.record_len, seen, body.len());
    Ok(parsed)
}

async fn count_tokens(
    State(state): State<AnthropicState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let counted = authorize(&state, &headers)
        .and_then(|()| received(&state, &headers, &body))
        .and_then(|body| {
            let obj = body.as_object().filter(|o| o.get("messages").is_some());
            let obj = obj.ok_or_else(|| ApiError::invalid("messages: Field required"))?;
            let texts: usize = ["tools", "system"]
                .iter()
                .filter_map(|k| obj.get(*k))
                .map(text_len)
                .sum();
            let turns: usize = obj["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| text_len(&m["content"]))
                .sum();
            Ok(tokens(texts + turns))
        });
    match counted {
        Ok(n) => {
            state.count(|s| &mut s.token_counts);
            Json(anthropic_wire::TokenCount { input_tokens: n }).into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// The bytes a content value counts for: its text blocks' text, other blocks as JSON.
fn text_len(content: &Value) -> usize {
    match content {
        Value::String(s) => s.len(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().map_or(0, str::len),
                _ => b.to_string().len(),
            })
            .sum(),
        Value::Null => 0,
        other => other.to_string().len(),
    }
}

async fn messages(
    State(state): State<AnthropicState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.count(|s| &mut s.requests);
    match answer(&state, &headers, &body).await {
        Ok(r) => r,
        Err(e) => {
            match e.status.as_u16() {
                400 => state.count(|s| &mut s.bad_requests),
                404 => state.count(|s| &mut s.unknown_models),
                429 => state.count(|s| &mut s.rate_limited),
                529 => state.count(|s| &mut s.overloaded),
                500 => state.count(|s| &mut s.server_errors),
                // 401s and a missing version are counted where they are decided.
                _ => {}
            }
            e.into_response()
        }
    }
}

async fn answer(
    state: &AnthropicState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    if let Err(e) = authorize(state, headers) {
        // Counted already; answered as is.
        return Ok(e.into_response());
    }
    let parsed = match received(state, headers, body) {
        Ok(v) => v,
        Err(e) => return Ok(e.into_response()),
    };
    let ask = validate(state, &parsed)?;
    let knobs = state.knobs();
    if fastrand::f64() < knobs.rate_limit_rate {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "Number of request tokens has exceeded your per-minute rate limit for {} \
                 (simulated).",
                ask.model
            ),
            retry_after: Some(knobs.retry_after_secs),
        });
    }
    let overloaded = StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    if fastrand::f64() < knobs.overload_rate {
        return Err(ApiError::new(overloaded, "Overloaded"));
    }
    if !knobs.latency.is_zero() {
        let mut down = state.0.shutdown.subscribe();
        tokio::select! {
            () = tokio::time::sleep(knobs.latency) => {}
            _ = down.wait_for(|d| *d) => {}
        }
    }
    if fastrand::f64() < knobs.fail_rate {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Internal server error",
        ));
    }
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let mut usage = json!({
        "input_tokens": ask.input.fresh,
        "output_tokens": ask.output_tokens,
        "cache_creation_input_tokens": ask.input.written,
        "cache_read_input_tokens": ask.input.read,
    });
    if !ask.stream {
        state.count(|s| &mut s.messages);
        return Ok(Json(json!({
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": ask.model,
            "content": ask.blocks,
            "stop_reason": ask.stop_reason,
            "stop_sequence": ask.stop_sequence,
            "usage": usage,
        }))
        .into_response());
    }
    state.count(|s| &mut s.streams);
    let final_usage = usage.clone();
    usage["output_tokens"] = json!(1);
    let event = |name: &str, data: Value| Event::default().event(name).data(data.to_string());
    let mut events = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": id, "type": "message", "role": "assistant", "model": ask.model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    )];
    let mut budget = knobs.break_stream_after;
    let mut broken = false;
    'blocks: for (index, block) in ask.blocks.iter().enumerate() {
        let (start, deltas) = block_events(block);
        events.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            events.push(event("ping", json!({"type": "ping"})));
        }
        for delta in deltas {
            if let Some(left) = budget.as_mut() {
                if *left == 0 {
                    broken = true;
                    break 'blocks;
                }
                *left -= 1;
            }
            events.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if broken {
        state.count(|s| &mut s.broken_streams);
    } else {
        events.push(event(
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": ask.stop_reason, "stop_sequence": ask.stop_sequence},
                "usage": final_usage}),
        ));
        events.push(event("message_stop", json!({"type": "message_stop"})));
    }
    let events = futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    Ok(Sse::new(events).into_response())
}

/// A block as its `content_block_start` shows it, and its deltas.
fn block_events(block: &Value) -> (Value, Vec<Value>) {
    match block["type"].as_str() {
        Some("tool_use") => {
            let mut start = block.clone();
            start["input"] = json!({});
            let deltas = split(&block["input"].to_string(), STREAM_PIECES)
                .into_iter()
                .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                .collect();
            (start, deltas)
        }
        Some("thinking") => {
            let text = block["thinking"].as_str().unwrap_or_default();
            let mut deltas: Vec<Value> = split(text, STREAM_PIECES)
                .into_iter()
                .map(|p| json!({"type": "thinking_delta", "thinking": p}))
                .collect();
            deltas.push(json!({"type": "signature_delta", "signature": block["signature"]}));
            (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                deltas,
            )
        }
        _ => {
            let text = block["text"].as_str().unwrap_or_default();
            let deltas = split(text, STREAM_PIECES)
                .into_iter()
                .map(|p| json!({"type": "text_delta", "text": p}))
                .collect();
            (json!({"type": "text", "text": ""}), deltas)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(state: &AnthropicState, body: Value) -> Ask {
        validate(state, &body).ok().unwrap()
    }

    #[test]
    fn the_answer_echoes_stops_where_asked_and_calls_the_first_tool() {
        let state = AnthropicState::new(AnthropicOptions::new("m"));
        let a = ask(
            &state,
            json!({"model": "m", "max_tokens": 2,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "ééééé"}]}]}),
        );
        assert_eq!(a.blocks, [json!({"type": "text", "text": "echo: é"})]);
        assert_eq!(a.stop_reason, "max_tokens");

        let a = ask(
            &state,
            json!({"model": "m", "max_tokens": 99, "stop_sequences": ["lo", "e"],
                "messages": [{"role": "user", "content": "hello"}]}),
        );
        assert_eq!(a.blocks[0]["text"], "");
        assert_eq!(
            (a.stop_reason, a.stop_sequence.as_deref()),
            ("stop_sequence", Some("e"))
        );

        let tools = json!([{"name": "lookup", "input_schema": {"type": "object"}}]);
        let a = ask(
            &state,
            json!({"model": "m", "max_tokens": 99, "tools": tools,
                "messages": [{"role": "user", "content": "héllo"}]}),
        );
        assert_eq!(a.stop_reason, "tool_use");
        assert_eq!(a.blocks[0]["name"], "lookup");
        assert_eq!(a.blocks[0]["input"], json!({"text": "héllo"}));
        let (start, deltas) = block_events(&a.blocks[0]);
        assert_eq!(start["input"], json!({}));
        let streamed: String = deltas
            .iter()
            .map(|d| d["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&streamed).unwrap(),
            a.blocks[0]["input"]
        );

        let a = ask(
            &state,
            json!({"model": "m", "max_tokens": 99, "tools": tools, "messages": [
                {"role": "user", "content": "héllo"},
                {"role": "assistant", "content": [a.blocks[0].clone()]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                    "content": [{"type": "text", "text": "42"}]}]}]}),
        );
        assert_eq!(
            (a.blocks[0]["text"].as_str(), a.stop_reason),
            (Some("echo: 42"), "end_turn")
        );
    }

    #[test]
    fn a_marked_prefix_is_written_once_then_read() {
        let state = AnthropicState::new(AnthropicOptions::new("m"));
        let body = json!({"model": "m", "max_tokens": 9,
            "system": [{"type": "text", "text": "x".repeat(400),
                "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "abcdefgh"}]});
        let first = ask(&state, body.clone()).input;
        assert_eq!((first.fresh, first.written, first.read), (2, 100, 0));
        let second = ask(&state, body).input;
        assert_eq!((second.fresh, second.written, second.read), (2, 0, 100));
        let plain = ask(
            &state,
            json!({"model": "m", "max_tokens": 9,
                "messages": [{"role": "user", "content": "abcdefgh"}]}),
        )
        .input;
        assert_eq!((plain.fresh, plain.written, plain.read), (2, 0, 0));
    }

    #[test]
    fn bad_requests_are_told_in_anthropics_words() {
        let state = AnthropicState::new(AnthropicOptions::new("m"));
        for (body, status) in [
            (json!([]), 400),
            (
                json!({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}),
                400,
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
                400,
            ),
            (
                json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}),
                400,
            ),
            (json!({"model": "m", "max_tokens": 1, "messages": []}), 400),
            (
                json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]}),
                400,
            ),
            (
                json!({"model": "z", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}),
                404,
            ),
        ] {
            let e = validate(&state, &body).err().unwrap();
            assert_eq!(e.status.as_u16(), status, "{body}");
        }
    }
}
