//! The Anthropic-compatible front end on the LDP listener: `POST /v1/messages` (whole or as
//! named events), `POST /v1/messages/count_tokens`, and `GET /v1/models` in Anthropic's shape
//! when the request names an `anthropic-version` (routes served while `anthropic.ingress` is
//! on). The tenant's key comes in `x-api-key` (SDK 1.x, API `2023-06-01`) or as
//! `Authorization: Bearer` (SDK 2.x, API `2026-10-21`). `model` names a skill (`"chat"`) or a
//! skill and a policy (`"chat@cheapest"`; else `x-ldp-policy`, else the tenant's default).
//! Each message is one task through the whole pipeline (`messages.rs`: the request as a chat
//! in Anthropic's dialect, passed as it came to an Anthropic delegate, with its
//! `anthropic-beta`); the answer is a message (or its events, `reply.rs`) with
//! `x-ldp-delegate`, `x-ldp-policy` and `x-ldp-task-id`. Errors are Anthropic's form
//! (`refusal.rs`).

mod messages;
mod refusal;
mod reply;

pub(crate) use refusal::AnthropicErrors;

use super::api_error::{ApiError, ErrorKind};
use super::chat::run;
use super::request::{refuse, request_ctx_keyed, CancelIngressTasksOnDrop};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::TaskId;
use crate::provenance::Ingress;
use crate::proxy::ChatDelta;
use anthropic_wire::{ModelInfo, ModelList, KEY_HEADER, VERSION_HEADER};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

/// `e` as the Anthropic routes answer it: Anthropic's form, its kind's status.
pub(crate) fn error_answer(e: ApiError) -> Response {
    e.anthropic().into_response()
}

/// Whether a request speaks Anthropic's API: it names an API version (both SDK lines send
/// one on every request).
pub(crate) fn speaks_anthropic(headers: &HeaderMap) -> bool {
    headers.contains_key(VERSION_HEADER)
}

/// Deltas buffered between the task and a slow client (then the task's read waits).
const DELTA_BUFFER: usize = 64;

/// Any other `/v1/…` path asked in Anthropic's API: a 404 in its form.
pub(crate) async fn unknown(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("Not found: {method} {}", uri.path());
    refuse(ApiError::of(ErrorKind::NoRoute, message).anthropic())
}

/// `GET /v1/models` in Anthropic's shape: the skills some healthy delegate offers.
pub(crate) async fn models(s: &AppState, headers: &HeaderMap) -> Response {
    if let Err(e) = request_ctx_keyed(s, headers, KEY_HEADER) {
        return refuse(e.anthropic());
    }
    let index = s.registry.index();
    let data: Vec<ModelInfo> = index
        .skills()
        .into_iter()
        .filter(|skill| index.offers(skill).iter().any(|o| o.delegate.is_healthy()))
        .map(|id| ModelInfo {
            kind: "model".into(),
            display_name: id.to_string(),
            id: id.to_string(),
            created_at: "1970-01-01T00:00:00Z".into(),
            lifecycle: "active".into(),
        })
        .collect();
    let list = ModelList {
        first_id: data.first().map(|m| m.id.clone()),
        last_id: data.last().map(|m| m.id.clone()),
        has_more: false,
        data,
    };
    axum::Json(list).into_response()
}

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    match message(&s, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => refuse(e.anthropic()),
    }
}

async fn message(s: &AppState, headers: &HeaderMap, body: HttpBody) -> Result<Response, ApiError> {
    let req = messages::read_request(s, headers, body).await?;
    let task_id: TaskId = crate::ldp::new_task_id().into();
    // Only a stream has deltas to carry.
    let (tx, rx) = match req.stream {
        true => {
            let (tx, rx) = mpsc::channel::<ChatDelta>(DELTA_BUFFER);
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let reply = reply::Reply {
        id: format!("msg_{task_id}"),
        model: req.model,
        input_tokens: crate::chat::estimate_tokens(req.input.len()),
    };
    let ctx = req.ctx;
    let proxy = s.proxy.clone();
    let id = task_id.clone();
    // A client that leaves before its answer (or its first event) cancels the task.
    let guard =
        CancelIngressTasksOnDrop::new(s, &ctx.tenant.name, Ingress::Anthropic, [task_id.clone()]);
    // Running from now on, for a cancel to find, until the task's future ends.
    let registered = s
        .proxy
        .ingress_task_arrived(&ctx.tenant.name, Ingress::Anthropic, &task_id);
    let (chat, input, skill) = (req.chat, req.input, req.skill);
    // The task runs as its own (tracked) task: a client that leaves does not stop its
    // settling and its ledger row.
    let task = s
        .proxy
        .spawn_tracked(async move {
            let _registered = registered;
            let deltas = tx.as_ref();
            let ingress = Ingress::Anthropic;
            crate::proxy::boxed(|| run(&proxy, &ctx, ingress, &chat, input, &skill, id, deltas))
                .await
        })
        .ok_or_else(|| ApiError::new(GatewayCode::Unavailable, "the gateway is stopping"))?;
    let answered = match rx {
        Some(rx) => reply::stream(s, reply, task_id, rx, task).await,
        None => reply::whole(s, reply, &task_id, task).await,
    };
    guard.done();
    answered
}

/// `POST /v1/messages/count_tokens`: asked of an Anthropic delegate offering the skill, else
/// estimated from the request's text.
pub(crate) async fn count_tokens(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    match messages::count_tokens(&s, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => refuse(e.anthropic()),
    }
}
