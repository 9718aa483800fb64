//! The LDP front end: the identity card (`/.well-known/ldp-identity`, `/ldp/identity`),
//! capabilities, `/ldp/messages` (one envelope in, its answer out), `/ldp/stream` (the task's
//! updates as Server-Sent Events), client feedback (`feedback.rs`), `/healthz`. Refusals are
//! `{"error": LdpError}` with the status of the gateway's one table.

mod feedback;

pub(crate) use feedback::feedback;

use super::api_error::ApiError;
use super::request::{read_json_body, refuse, request_ctx};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, SessionId, TaskId};
use crate::proxy::{RequestCtx, GATEWAY_MODES};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::convert::Infallible;
use std::time::Duration;

/// `e` as the LDP routes answer it: `{"error": LdpError}` with its kind's status.
pub(crate) fn error_answer(e: ApiError) -> Response {
    e.into_response()
}

/// `GET /healthz`: the listener is up.
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

fn json_bytes(status: StatusCode, bytes: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

pub(crate) async fn identity(State(s): State<AppState>) -> Response {
    let card = s.proxy.identity_card(Some(s.public_url.to_string()));
    match serde_json::to_vec(&card) {
        Ok(b) => json_bytes(StatusCode::OK, b),
        Err(e) => ApiError::new(GatewayCode::Internal, e.to_string()).into_response(),
    }
}

pub(crate) async fn capabilities(State(s): State<AppState>) -> Response {
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

/// Reads the body and parses the envelope; or the 4xx that explains why not.
async fn read_envelope(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<Envelope, ApiError> {
    let bytes = read_json_body(s, headers, body).await?;
    Envelope::from_slice(&bytes).map_err(|e| ApiError::new(GatewayCode::BadRequest, e.to_string()))
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
        return Ok(crate::proxy::boxed(|| s.proxy.handle(env, &ctx)).await?);
    };
    // A task runs on as its own (tracked) task, as on `/ldp/stream`: if the client goes away
    // this future is dropped, and the task must still settle its budget reservation and write
    // its ledger row, while the guard cancels it upstream.
    let mut guard = CancelLdpTaskOnDrop::new(s, &ctx, &env, task_id);
    // Running from now on, for a cancel to find, until the task's future ends.
    let registered = s.proxy.task_arrived(&ctx, &env);
    let proxy = s.proxy.clone();
    let task = s
        .proxy
        .spawn_tracked(async move {
            let _registered = registered;
            crate::proxy::boxed(|| proxy.handle(env, &ctx)).await
        })
        .ok_or_else(|| ApiError::new(GatewayCode::Unavailable, "the gateway is stopping"))?;
    let joined = task.await;
    guard.done = true;
    match joined {
        Ok(answer) => Ok(answer?),
        Err(e) => Err(super::api_error::task_lost(&s.metrics, e)),
    }
}

pub(crate) async fn messages(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
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
struct CancelLdpTaskOnDrop {
    proxy: std::sync::Arc<crate::proxy::Proxy>,
    session_id: SessionId,
    owner: String,
    task_id: TaskId,
    done: bool,
}

impl CancelLdpTaskOnDrop {
    fn new(
        s: &AppState,
        ctx: &RequestCtx,
        env: &Envelope,
        task_id: &TaskId,
    ) -> CancelLdpTaskOnDrop {
        CancelLdpTaskOnDrop {
            proxy: s.proxy.clone(),
            session_id: env.session_id.clone(),
            // The same owner key the session table uses (tenant + `from`).
            owner: crate::proxy::owner(ctx, env),
            task_id: task_id.clone(),
            done: false,
        }
    }
}

impl Drop for CancelLdpTaskOnDrop {
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
pub(crate) async fn stream(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    let ctx = match request_ctx(&s, &headers) {
        Ok(c) => c,
        Err(e) => return refuse(e),
    };
    let env = match read_envelope(&s, &headers, body).await {
        Ok(env) => env,
        Err(e) => return refuse(e),
    };
    let guard = match &env.body {
        Body::TaskSubmit { task_id, .. } => Some(CancelLdpTaskOnDrop::new(&s, &ctx, &env, task_id)),
        _ => None,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Envelope>(64);
    // Running from now on, for a cancel to find, until the task's future ends.
    let registered = s.proxy.task_arrived(&ctx, &env);
    let proxy = s.proxy.clone();
    let metrics = s.metrics.clone();
    let Some(task) = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        crate::proxy::boxed(|| proxy.handle_with(env, &ctx, Some(&tx))).await
    }) else {
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
