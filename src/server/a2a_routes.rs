//! The A2A bridge on the LDP listener (`crate::frontend::a2a`):
//!
//! - `GET /.well-known/agent-card.json`: the gateway's Agent Card (public, as card discovery
//!   is: it says how to authenticate), with an `ETag` (a `If-None-Match` that matches is
//!   answered 304) and `Cache-Control: max-age` (`[a2a] card_max_age_secs`).
//! - `POST /a2a`: JSON-RPC 2.0 with the tenant Bearer key. JSON-RPC errors are answered with
//!   HTTP 200 (as the A2A SDK's server does, and its clients expect); a request refused before
//!   it is read is answered with its HTTP status and a JSON-RPC error body (`id: null`,
//!   -32600): 401 (no or bad key, with `WWW-Authenticate: Bearer`), 413, 400, 408.
//!   `SendStreamingMessage` and `SubscribeToTask` answer Server-Sent Events, each `data:`
//!   one JSON-RPC response, closed after the terminal state. A notification (no `id`) is
//!   answered 204 with no body, whatever it asked or got wrong (a cancel is still done).

use super::api_error::{catch_panics_shaped, ApiError, Shape};
use super::request::{read_json_body, refuse, request_ctx};
use super::AppState;
use crate::frontend::a2a::{self as bridge, A2aRequestError, Call, Job};
use crate::proxy::RequestCtx;
use a2a_wire::consts::{AGENT_CARD_PATH, VERSION_HEADER};
use a2a_wire::v1::StreamResponse;
use a2a_wire::{Dialect, ErrorCode, ErrorObject, Id, Response as RpcResponse};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;
use sha2::Digest;
use std::convert::Infallible;
use tokio::sync::broadcast;

/// The card and JSON-RPC routes (a panic of their handlers answered with a JSON-RPC
/// internal error, -32603).
pub(super) fn router(state: &AppState) -> Router<AppState> {
    let shape: Shape = std::sync::Arc::new(|e| rpc_failure(e, ErrorCode::Internal));
    Router::new()
        .route(AGENT_CARD_PATH, get(card))
        .route(bridge::ROUTE, post(a2a))
        .layer(axum::middleware::from_fn_with_state(
            (state.metrics.clone(), shape),
            catch_panics_shaped,
        ))
}

/// `GET /.well-known/agent-card.json`.
async fn card(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let url = format!("{}{}", s.public_url, bridge::ROUTE);
    let card = bridge::agent_card(&s.proxy, &url);
    let bytes = match serde_json::to_vec(&card) {
        Ok(b) => b,
        Err(e) => {
            let e = ApiError::new(crate::ldp::error::GatewayCode::Internal, e.to_string());
            return refuse(e);
        }
    };
    let digest = sha2::Sha256::digest(&bytes);
    let etag = format!("\"{}\"", hex::encode(&digest[..16]));
    let max_age = format!("max-age={}", s.config.a2a.card_max_age_secs);
    let matched = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let status = if matched {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let mut resp = if matched {
        status.into_response()
    } else {
        (status, bytes).into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in [(header::ETAG, etag), (header::CACHE_CONTROL, max_age)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
}

/// `POST /a2a`.
async fn a2a(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    let mut ctx = match request_ctx(&s, &headers) {
        Ok(ctx) => ctx,
        Err(e) => {
            let mut resp = refused(e);
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return resp;
        }
    };
    let bytes = match read_json_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    let version = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok());
    let incoming = match bridge::read(&bytes, version) {
        Ok(i) => i,
        Err((Some(id), dialect, e)) => return rpc_error(id, dialect, &e),
        Err((None, _, e)) => {
            tracing::debug!(error = %e, "an A2A notification was refused; not answered");
            return notified();
        }
    };
    let tenant = ctx.tenant.name.clone();
    let dialect = incoming.dialect;
    let Some(id) = incoming.id else {
        return notification(&s, &tenant, incoming.call).await;
    };
    match incoming.call {
        Call::Send { req, stream } => {
            let now = req
                .configuration
                .as_ref()
                .is_some_and(|c| c.return_immediately);
            let job = match bridge::job(*req, s.config.a2a.default_skill.as_deref()) {
                Ok(j) => j,
                Err(e) => return rpc_error(id, dialect, &e),
            };
            if let Some(p) = &job.policy {
                ctx.policy = Some(p.clone());
            }
            send(s, ctx, id, dialect, job, stream, now).await
        }
        Call::Get(g) => match s.a2a.get(&tenant, &g.id) {
            Some(t) => rpc_ok(id, bridge::task_result(t, g.history_length, dialect)),
            None => rpc_error(id, dialect, &A2aRequestError::TaskNotFound(g.id)),
        },
        Call::Cancel(c) => match bridge::cancel(&s.proxy, &s.a2a, &tenant, &c.id).await {
            Ok(t) => rpc_ok(id, bridge::task_result(t, None, dialect)),
            Err(e) => rpc_error(id, dialect, &e),
        },
        Call::Subscribe(r) => match s.a2a.subscribe(&tenant, &r.id) {
            None => rpc_error(id, dialect, &A2aRequestError::TaskNotFound(r.id)),
            Some((t, None)) => {
                let e = A2aRequestError::Unsupported(format!(
                    "task {:?} is {}: nothing left to stream",
                    t.id,
                    t.status.state.as_str()
                ));
                rpc_error(id, dialect, &e)
            }
            Some((t, Some(rx))) => sse(id, dialect, t, rx),
        },
    }
}

/// A notification (no `id`): never answered. A cancel is done; a send is not run (nobody
/// could follow or read its task, which would be charged); reads have nothing to do.
async fn notification(s: &AppState, tenant: &str, call: Call) -> Response {
    match call {
        Call::Cancel(c) => {
            if let Err(e) = bridge::cancel(&s.proxy, &s.a2a, tenant, &c.id).await {
                tracing::debug!(error = %e, "an A2A cancel notification did nothing");
            }
        }
        Call::Send { .. } => {
            tracing::debug!("an A2A send notification was not run (nobody could read its task)");
        }
        Call::Get(_) | Call::Subscribe(_) => {}
    }
    notified()
}

/// What a notification gets: no JSON-RPC body at all (JSON-RPC 2.0 §4.1: the server must not
/// reply), HTTP 204.
fn notified() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// Starts `job` and answers: an SSE stream, the submitted task at once, or the task once it
/// ends.
async fn send(
    s: AppState,
    ctx: RequestCtx,
    id: Id,
    dialect: Dialect,
    job: Job,
    stream: bool,
    now: bool,
) -> Response {
    let tenant = ctx.tenant.name.clone();
    let task_id = job.task.id.clone();
    // The task as submitted: the stream's first event.
    let submitted = stream.then(|| job.task.clone());
    // Running before `CancelTask` can see it, for a cancel to find, until the task's future
    // ends.
    let registered = s.proxy.ingress_task_arrived(
        &tenant,
        crate::provenance::Ingress::A2a,
        &crate::ldp::TaskId::from(task_id.clone()),
    );
    let bridge::Inserted {
        events: mut rx,
        session,
        evicted,
    } = match s.a2a.insert(&tenant, job.task.clone()) {
        Ok(inserted) => inserted,
        Err(full) => {
            s.metrics
                .rate_limited
                .with_label_values(&[crate::limits::Scope::TenantShare.as_str()])
                .inc();
            let wait = full
                .retry_after
                .unwrap_or(std::time::Duration::from_secs(1));
            let e = ApiError::rate_limited(crate::limits::Scope::TenantShare, wait);
            return rpc_failure(e, ErrorCode::Internal);
        }
    };
    if !evicted.is_empty() {
        let (proxy, tenant) = (s.proxy.clone(), tenant.clone());
        s.proxy.spawn_tracked(async move {
            for old in evicted {
                bridge::close_context(&proxy, &tenant, &old).await;
            }
        });
    }
    let runner = s.clone();
    // Tracked: a client that leaves does not stop the task, its settling or its ledger row.
    let spawned = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        bridge::run(&runner.proxy, &runner.a2a, &ctx, job, session).await;
    });
    if spawned.is_none() {
        let e = ErrorObject::new(ErrorCode::Internal, "the gateway is stopping");
        return rpc(RpcResponse::<Value>::error(id, e));
    }
    if let Some(submitted) = submitted {
        return sse(id, dialect, submitted, rx);
    }
    if !now {
        loop {
            match rx.recv().await {
                Ok(ev) if bridge::is_final(&ev) => break,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let done = s
                        .a2a
                        .get(&tenant, &task_id)
                        .is_none_or(|t| t.status.state.is_terminal());
                    if done {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    match s.a2a.get(&tenant, &task_id) {
        Some(t) => rpc(RpcResponse::success(id, bridge::send_result(t, dialect))),
        None => rpc_error(id, dialect, &A2aRequestError::TaskNotFound(task_id)),
    }
}

/// An SSE answer: `first` (the task as it is), then its events until one ends it.
fn sse(
    id: Id,
    dialect: Dialect,
    first: a2a_wire::v1::Task,
    rx: broadcast::Receiver<StreamResponse>,
) -> Response {
    let first = StreamResponse::Task(Box::new(first));
    let state = (Some(first), Some(rx), id, dialect);
    let events = futures_util::stream::unfold(state, |(first, rx, id, dialect)| async move {
        let mut rx = rx?;
        let ev = match first {
            Some(ev) => ev,
            None => loop {
                match rx.recv().await {
                    Ok(ev) => break ev,
                    // Behind: the events skipped are gone; the next one still comes.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            },
        };
        let last = bridge::is_final(&ev);
        let body = RpcResponse::success(id.clone(), bridge::event_result(ev, dialect));
        let data = serde_json::to_string(&body).unwrap_or_default();
        let next = (!last).then_some(rx);
        Some((
            Ok::<Event, Infallible>(Event::default().data(data)),
            (None, next, id, dialect),
        ))
    });
    Sse::new(events).into_response()
}

/// A JSON-RPC answer (HTTP 200).
fn rpc<T: serde::Serialize>(body: RpcResponse<T>) -> Response {
    match serde_json::to_vec(&body) {
        Ok(b) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            b,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn rpc_ok(id: Id, result: Value) -> Response {
    rpc(RpcResponse::success(id, result))
}

fn rpc_error(id: Id, dialect: Dialect, e: &A2aRequestError) -> Response {
    rpc(RpcResponse::<Value>::error(id, e.to_error(dialect)))
}

/// A request refused before it was read: its HTTP status (counted and logged as the LDP
/// routes' are), a JSON-RPC error body (-32600, `id: null`).
fn refused(e: ApiError) -> Response {
    rpc_failure(e, ErrorCode::InvalidRequest)
}

/// `e`'s HTTP status (counted and logged as the LDP routes' are) with a JSON-RPC error body
/// of `code` (`id: null`).
fn rpc_failure(e: ApiError, code: ErrorCode) -> Response {
    let message = e.error().message.clone();
    let mut resp = refuse(e);
    let body = RpcResponse::<Value>::error(Id::Null, ErrorObject::new(code, message));
    *resp.body_mut() = HttpBody::from(serde_json::to_vec(&body).unwrap_or_default());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
