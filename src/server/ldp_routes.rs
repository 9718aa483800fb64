//! The LDP listener's routes: identity card, capabilities, messages, stream, feedback
//! (`feedback.rs`), healthz.

use super::{ApiError, AppState, ErrorKind};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, SessionId, TaskId};
use crate::proxy::{RequestCtx, GATEWAY_MODES};
use axum::body::Body as HttpBody;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::convert::Infallible;
use std::time::Duration;

/// The LDP router (no socket needed: tests may drive it with `tower::ServiceExt`).
pub fn router(state: AppState) -> Router {
    let limit = state.config.server.body_limit_bytes;
    Router::new()
        .route("/.well-known/ldp-identity", get(identity))
        .route("/ldp/identity", get(identity))
        .route("/ldp/capabilities", get(capabilities))
        .route("/ldp/messages", post(messages))
        .route("/ldp/stream", post(stream))
        .route("/ldp/feedback", post(super::feedback::feedback))
        .route("/healthz", get(|| async { "ok" }))
        .merge(super::openai_routes::router(&state))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(limit))
        // Inside the counting layer: a panic's 500 is counted and reported like any error.
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            super::api_error::catch_panics,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state)
}

/// The route labels of `ldp_gateway_http_requests_total` for the LDP listener's routes (those
/// `count_requests` names), exported at 0 from the start.
pub(super) const ROUTES: [&str; 8] = [
    "/ldp/messages",
    "/ldp/stream",
    "/ldp/feedback",
    "/.well-known/ldp-identity",
    "/ldp/identity",
    "/ldp/capabilities",
    "/v1/chat/completions",
    "/v1/models",
];

/// Counts every request by route template (never the raw path: bounded labels) and status.
async fn count_requests(
    State(s): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route =
        req.extensions()
            .get::<axum::extract::MatchedPath>()
            .map_or("unmatched", |p| match p.as_str() {
                "/ldp/messages" => "/ldp/messages",
                "/ldp/stream" => "/ldp/stream",
                "/ldp/feedback" => "/ldp/feedback",
                "/.well-known/ldp-identity" => "/.well-known/ldp-identity",
                "/ldp/identity" => "/ldp/identity",
                "/ldp/capabilities" => "/ldp/capabilities",
                "/healthz" => "/healthz",
                "/v1/chat/completions" => "/v1/chat/completions",
                "/v1/models" => "/v1/models",
                _ => "other",
            });
    let resp = next.run(req).await;
    let metrics = &s.metrics;
    metrics
        .http_requests
        .with_label_values(&[route, resp.status().as_str()])
        .inc();
    super::api_error::report(metrics, route, &resp);
    resp
}

async fn not_found() -> ApiError {
    ApiError::of(ErrorKind::NoRoute, "no such route")
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

async fn identity(State(s): State<AppState>) -> Response {
    let card = s.proxy.identity_card(Some(s.public_url.to_string()));
    match serde_json::to_vec(&card) {
        Ok(b) => json_bytes(StatusCode::OK, b),
        Err(e) => ApiError::new(GatewayCode::Internal, e.to_string()).into_response(),
    }
}

async fn capabilities(State(s): State<AppState>) -> Response {
    let card = s.proxy.identity_card(None);
    let manifest = crate::ldp::CapabilityManifest {
        capabilities: card.capabilities,
        supported_modes: GATEWAY_MODES.to_vec(),
    };
    match serde_json::to_vec(&manifest) {
        Ok(b) => json_bytes(StatusCode::OK, b),
        Err(e) => ApiError::new(GatewayCode::Internal, e.to_string()).into_response(),
    }
}

/// Most bytes read and thrown away after a body went over the limit. A server that closes
/// with unread input sends a reset, and a client still sending (or not yet reading) loses the
/// 413 it was sent; so, as nginx's lingering close does, the 413 goes out at once and the rest
/// of the body is read and discarded in the background, up to this and the body deadline,
/// before the connection closes.
const LINGER_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Reads the body and parses the envelope; or the 4xx that explains why not.
async fn read_envelope(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<Envelope, ApiError> {
    let bytes = read_body(s, headers, body).await?;
    Envelope::from_slice(&bytes).map_err(|e| ApiError::new(GatewayCode::BadRequest, e.to_string()))
}

/// Reads the body within the size limit and the body deadline and checks its JSON nesting
/// cheaply; or the 4xx that explains why not.
pub(super) async fn read_body(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<axum::body::Bytes, ApiError> {
    use http_body_util::BodyExt;
    let limit = s.config.server.body_limit_bytes;
    let too_large = || {
        ApiError::new(
            GatewayCode::PayloadTooLarge,
            format!("request body is over the {limit}-byte limit"),
        )
    };
    let deadline = tokio::time::Instant::now() + s.config.server.body_read_timeout;
    let mut body = body;
    if axum::body::HttpBody::size_hint(&body).lower() > limit as u64 {
        // Declared too large, nothing read yet. A client waiting for `100 Continue` has not
        // sent the body: reading would ask for it. Unanswered, hyper closes without it.
        if !expects_continue(headers) {
            s.proxy.spawn_tracked(linger(body, deadline));
        }
        return Err(too_large());
    }
    let collect = http_body_util::Limited::new(&mut body, limit).collect();
    let bytes = match tokio::time::timeout_at(deadline, collect).await {
        Err(_) => {
            return Err(ApiError::of(
                ErrorKind::BodyTimeout,
                "request body was not received in time",
            ))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            s.proxy.spawn_tracked(linger(body, deadline));
            return Err(too_large());
        }
        Ok(Err(e)) => {
            return Err(ApiError::new(
                GatewayCode::BadRequest,
                format!("cannot read body: {e}"),
            ))
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let depth = s.config.security.max_json_depth;
    if json_depth_exceeds(&bytes, depth) {
        return Err(ApiError::new(
            GatewayCode::BadRequest,
            format!("JSON nesting deeper than {depth} levels"),
        ));
    }
    Ok(bytes)
}

/// Reads and discards the rest of an oversized body (while hyper sends the 413), up to
/// [`LINGER_MAX_BYTES`] and the body deadline. A body declared larger than that is not read at
/// all. Dropping the body ends the connection.
async fn linger(mut body: HttpBody, deadline: tokio::time::Instant) {
    use http_body_util::BodyExt;
    if axum::body::HttpBody::size_hint(&body).lower() > LINGER_MAX_BYTES {
        return;
    }
    let mut left = LINGER_MAX_BYTES;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        let n = frame.data_ref().map_or(0, |d| d.len() as u64);
        match left.checked_sub(n) {
            Some(l) => left = l,
            None => return,
        }
    }
}

fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// The response for a refused request. After an oversized body the connection is closed once
/// the rest of the body has been discarded: its input is not worth reading further.
pub(super) fn refuse(e: ApiError) -> Response {
    let too_large = e.telling().status == StatusCode::PAYLOAD_TOO_LARGE;
    let mut resp = e.into_response();
    if too_large {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Whether `bytes` nest `[`/`{` deeper than `max` (outside strings): one linear pass, no
/// allocation, before any parsing.
pub fn json_depth_exceeds(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Who is calling (the tenant of its API key) and what the headers add (`x-ldp-policy`).
pub(super) fn request_ctx(s: &AppState, headers: &HeaderMap) -> Result<RequestCtx, ApiError> {
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let tenant = s
        .proxy
        .tenants()
        .authenticate(auth)
        .map_err(|e| ApiError::new(GatewayCode::Unauthenticated, e.to_string()))?;
    Ok(RequestCtx {
        tenant,
        policy: headers
            .get("x-ldp-policy")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        // Absent or unreadable: a first hop. Gateways set it when they forward a task; a
        // client that sends one only brings a refusal closer.
        hops: headers
            .get(crate::upstream::HOPS_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    })
}

async fn answer(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<std::sync::Arc<Envelope>, ApiError> {
    let ctx = request_ctx(s, headers)?;
    let env = read_envelope(s, headers, body).await?;
    let Body::TaskSubmit { task_id, .. } = &env.body else {
        // Short exchanges: run in the request, boxed: inline, `handle`'s future (the task path
        // included) would make every request's handler future as large and copy it at each
        // layer it passes through.
        return Ok(Box::pin(s.proxy.handle(env, &ctx)).await?);
    };
    // A task runs on as its own (tracked) task, as on `/ldp/stream`: if the client goes away
    // this future is dropped, and the task must still settle its budget reservation and write
    // its ledger row, while the guard cancels it upstream.
    let mut guard = CancelOnDrop::new(s, &ctx, &env, task_id);
    let proxy = s.proxy.clone();
    let task = s
        .proxy
        .spawn_tracked(async move { proxy.handle(env, &ctx).await })
        .ok_or_else(|| ApiError::new(GatewayCode::Unavailable, "the gateway is stopping"))?;
    let joined = task.await;
    guard.done = true;
    match joined {
        Ok(answer) => Ok(answer?),
        Err(e) => Err(super::api_error::task_lost(&s.metrics, e)),
    }
}

async fn messages(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    match answer(&s, &headers, body).await {
        Ok(reply) => match reply.to_vec() {
            Ok(b) => json_bytes(StatusCode::OK, b),
            Err(e) => ApiError::new(GatewayCode::Internal, e.to_string()).into_response(),
        },
        Err(e) => refuse(e),
    }
}

/// How often a running stream carries a heartbeat comment. Short, because a write is how a
/// vanished client is noticed: its task is then cancelled upstream within about a second.
const HEARTBEAT: Duration = Duration::from_millis(400);

/// Cancels the task upstream if its request is dropped (client gone) before the answer.
struct CancelOnDrop {
    proxy: std::sync::Arc<crate::proxy::Proxy>,
    session_id: SessionId,
    owner: String,
    task_id: TaskId,
    done: bool,
}

impl CancelOnDrop {
    fn new(s: &AppState, ctx: &RequestCtx, env: &Envelope, task_id: &TaskId) -> CancelOnDrop {
        CancelOnDrop {
            proxy: s.proxy.clone(),
            session_id: env.session_id.clone(),
            // The same owner key the session table uses (tenant + `from`).
            owner: crate::proxy::owner(ctx, env),
            task_id: task_id.clone(),
            done: false,
        }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (proxy, session, owner, task) = (
            self.proxy.clone(),
            std::mem::take(&mut self.session_id),
            std::mem::take(&mut self.owner),
            std::mem::take(&mut self.task_id),
        );
        self.proxy.spawn_tracked(async move {
            proxy.cancel_for_disconnect(&session, &owner, &task).await;
        });
    }
}

/// SSE: TASK_UPDATE events (the gateway's "routed", the delegate's own updates when it
/// streams, "retrying" on failover), then the final TASK_RESULT/TASK_FAILED. A stream never
/// ends without a final event unless the client left. Other message types get their one
/// answer as a single event.
async fn stream(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    let ctx = match request_ctx(&s, &headers) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let env = match read_envelope(&s, &headers, body).await {
        Ok(env) => env,
        Err(e) => return refuse(e),
    };
    let guard = match &env.body {
        Body::TaskSubmit { task_id, .. } => Some(CancelOnDrop::new(&s, &ctx, &env, task_id)),
        _ => None,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Envelope>(64);
    let proxy = s.proxy.clone();
    let metrics = s.metrics.clone();
    let Some(task) = s
        .proxy
        .spawn_tracked(async move { proxy.handle_with(env, &ctx, Some(&tx)).await })
    else {
        return refuse(ApiError::new(
            GatewayCode::Unavailable,
            "the gateway is stopping",
        ));
    };
    let events = futures_util::stream::unfold(
        (rx, Some(task), guard),
        move |(mut rx, task, mut guard)| {
            let metrics = metrics.clone();
            async move {
                let mut task = task?;
                let heartbeat = tokio::time::sleep(HEARTBEAT);
                tokio::select! {
                    biased;
                    Some(update) = rx.recv() => {
                        Some((Ok::<Event, Infallible>(event(&update)), (rx, Some(task), guard)))
                    }
                    joined = &mut task => {
                        // `biased`: queued updates always went out before this branch runs.
                        if let Some(g) = guard.as_mut() {
                            g.done = true;
                        }
                        let ev = match joined {
                            Ok(Ok(env)) => event(&env),
                            Ok(Err(e)) => error_event(&ApiError::from(e)),
                            Err(e) => error_event(&super::api_error::task_lost(&metrics, e)),
                        };
                        Some((Ok(ev), (rx, None, guard)))
                    }
                    _ = heartbeat => Some((Ok(Event::default().comment("")), (rx, Some(task), guard))),
                }
            }
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn event(env: &Envelope) -> Event {
    Event::default()
        .data(serde_json::to_string(env).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}")))
}

fn error_event(e: &ApiError) -> Event {
    Event::default()
        .event("error")
        .data(serde_json::json!({ "error": e.error() }).to_string())
}
