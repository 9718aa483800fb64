//! The A2A front end's answers: JSON-RPC results and errors in the caller's version's shapes
//! (HTTP 200), Server-Sent Events of a task's updates, and a request refused before it was
//! read (its HTTP status, a JSON-RPC error body with `id: null`).

use super::{is_final, A2aRequestError};
use crate::frontend::api_error::ApiError;
use crate::frontend::request::refuse;
use a2a_wire::v1::{self, StreamResponse, Task};
use a2a_wire::{v03, Dialect, ErrorCode, ErrorObject, Id, Response as RpcResponse};
use axum::body::Body as HttpBody;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::convert::Infallible;
use tokio::sync::broadcast;

/// The answer to a request in the caller's shapes: a `SendMessage` result (`{"task": …}` in
/// v1.0, the task with `kind` in v0.3), serialised as it is (no `Value` tree in between).
pub fn send_result(task: Task, dialect: Dialect) -> SendResult {
    let r = v1::SendMessageResponse::Task(Box::new(task));
    match dialect {
        Dialect::V1 => SendResult::V1(r),
        Dialect::V03 => SendResult::V03(v03::SendMessageResult::from(r)),
    }
}

/// A `SendMessage` result in the caller's dialect ([`send_result`]).
pub enum SendResult {
    V1(v1::SendMessageResponse),
    V03(v03::SendMessageResult),
}

impl serde::Serialize for SendResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SendResult::V1(r) => r.serialize(s),
            SendResult::V03(r) => r.serialize(s),
        }
    }
}

/// A task (`GetTask`, `CancelTask`) in the caller's shapes, its history cut to the last
/// `history_length` messages when given.
pub fn task_result(mut task: Task, history_length: Option<i32>, dialect: Dialect) -> Value {
    if let Some(n) = history_length {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        let drop = task.history.len().saturating_sub(keep);
        task.history.drain(..drop);
    }
    match dialect {
        Dialect::V1 => serde_json::to_value(task),
        Dialect::V03 => serde_json::to_value(v03::Task::from(task)),
    }
    .unwrap_or(Value::Null)
}

/// A stream event in the caller's shapes.
pub fn event_result(ev: StreamResponse, dialect: Dialect) -> Value {
    match dialect {
        Dialect::V1 => serde_json::to_value(ev),
        Dialect::V03 => serde_json::to_value(v03::StreamResult::from(ev)),
    }
    .unwrap_or(Value::Null)
}

/// An SSE answer: `first` (the task as it is), then its events until one ends it.
pub(super) fn sse(
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
        let last = is_final(&ev);
        let body = RpcResponse::success(id.clone(), event_result(ev, dialect));
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
pub(super) fn rpc<T: serde::Serialize>(body: RpcResponse<T>) -> Response {
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

pub(super) fn rpc_ok(id: Id, result: Value) -> Response {
    rpc(RpcResponse::success(id, result))
}

pub(super) fn rpc_error(id: Id, dialect: Dialect, e: &A2aRequestError) -> Response {
    rpc(RpcResponse::<Value>::error(id, e.to_error(dialect)))
}

/// A request refused before it was read: its HTTP status (counted and logged as the LDP
/// routes' are), a JSON-RPC error body (-32600, `id: null`).
pub(super) fn refused(e: ApiError) -> Response {
    rpc_failure(e, ErrorCode::InvalidRequest)
}

/// `e`'s HTTP status (counted and logged as the LDP routes' are) with a JSON-RPC error body
/// of `code` (`id: null`).
pub(super) fn rpc_failure(e: ApiError, code: ErrorCode) -> Response {
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

/// What a notification gets: no JSON-RPC body at all (JSON-RPC 2.0 §4.1: the server must not
/// reply), HTTP 204.
pub(super) fn notified() -> Response {
    StatusCode::NO_CONTENT.into_response()
}
