//! The OpenAI-compatible front end on the LDP listener: `POST /v1/chat/completions` (whole or
//! streamed) and `GET /v1/models` (routes served while `openai.ingress` is on). `model` names
//! a skill (`"chat"`) or a skill and a policy (`"chat@cheapest"`; else `x-ldp-policy`, else
//! the tenant's default). Each completion is one task through the whole pipeline (`chat.rs`:
//! the request as the task, its trip as the completion's parts); the answer is a
//! `chat.completion` (or `chat.completion.chunk` events ending in `data: [DONE]`, `reply.rs`)
//! with `x-ldp-delegate`, `x-ldp-policy` and `x-ldp-task-id`. Errors are OpenAI's form with the
//! LDP routes' statuses (`refusal.rs`); any other `/v1/…` path is OpenAI's 404.
//!
//! The OpenAI wire types the pipeline carries for this front end (the request beside the
//! task, the trip's usage, finish reason, message fields and an upstream's own refusal) are
//! read and written in `chat.rs` only.

mod chat;
mod refusal;
mod reply;

pub(crate) use chat::chat;
use refusal::OpenAiErrors;

use super::api_error::{ApiError, ErrorKind};
use super::chat::skill_and_policy;
use super::request::{read_json_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::TaskId;
use crate::provenance::Ingress;
use crate::proxy::ChatDelta;
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use openai_wire::{ChatRequest, ErrorDetail};
use reply::Reply;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// `e` as the OpenAI routes answer it: OpenAI's form, its kind's status.
pub(crate) fn error_answer(e: ApiError) -> Response {
    e.openai().into_response()
}

/// Any other `/v1/…` path (and another method on a route): a 404 as OpenAI answers it, in
/// its form (an OpenAI client reads no other).
pub(crate) async fn unknown(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("Invalid URL ({method} {})", uri.path());
    let detail = ErrorDetail {
        message: message.clone(),
        kind: Some("invalid_request_error".into()),
        param: None,
        code: None,
    };
    refuse(ApiError::of(ErrorKind::NoRoute, message).openai_detail(detail))
}

/// Deltas buffered between the task and a slow client (then the task's read waits).
const DELTA_BUFFER: usize = 64;

/// `GET /v1/models`: the skills some healthy delegate offers.
pub(crate) async fn models(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = request_ctx(&s, &headers) {
        return refuse(e.openai());
    }
    let index = s.registry.index();
    let data: Vec<Value> = index
        .skills()
        .into_iter()
        .filter(|skill| index.offers(skill).iter().any(|o| o.delegate.is_healthy()))
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "ldp-gateway"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /v1/chat/completions`.
pub(crate) async fn completions(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    match completion(&s, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => refuse(e.openai()),
    }
}

/// What a request asks for, checked: the skill, the policy it names, the request.
async fn read_request(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<(crate::proxy::RequestCtx, String, ChatRequest), ApiError> {
    let mut ctx = request_ctx(s, headers)?;
    let bytes = read_json_body(s, headers, body).await?;
    let req: ChatRequest = serde_json::from_slice(&bytes).map_err(|e| {
        let text = e.to_string();
        // serde names a missing or mistyped field between backticks.
        let param = text
            .split('`')
            .nth(1)
            .filter(|p| ["model", "messages", "stream", "role", "content"].contains(p))
            .map(str::to_owned);
        let err = ApiError::new(
            GatewayCode::BadRequest,
            format!("invalid request body: {text}"),
        );
        match param {
            Some(p) => err.openai_param(p),
            None => err,
        }
    })?;
    let Some((skill, policy)) = skill_and_policy(&req.model) else {
        return Err(ApiError::new(
            GatewayCode::BadRequest,
            "`model` must name a skill, or a skill and a policy as `skill@policy`",
        )
        .openai_param("model"));
    };
    if req.messages.is_empty() {
        return Err(
            ApiError::new(GatewayCode::BadRequest, "`messages` must not be empty")
                .openai_param("messages"),
        );
    }
    // An output bound is what the budget holds for and the request allows: at least a token
    // (some servers read 0 as no bound at all).
    for (param, bound) in [
        ("max_tokens", req.max_tokens),
        ("max_completion_tokens", req.max_completion_tokens),
    ] {
        if bound == Some(0) {
            return Err(ApiError::new(
                GatewayCode::BadRequest,
                format!("`{param}` must be at least 1"),
            )
            .openai_param(param));
        }
    }
    // One choice per request: several would each be charged, and one answered.
    match req.extra.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(ApiError::new(
                GatewayCode::BadRequest,
                format!("`n` must be 1 (got {n}): the gateway answers one choice per request"),
            )
            .openai_param("n"))
        }
    }
    let unknown = |what: String| {
        ApiError::of(
            ErrorKind::NoRoute,
            format!("The model `{}` does not exist: {what}", req.model),
        )
        .openai_param("model")
    };
    if s.registry.index().offers(skill).is_empty() {
        return Err(unknown(format!("no delegate offers the skill '{skill}'")));
    }
    if let Some(p) = policy {
        if s.proxy.policies().get(p).is_none() {
            return Err(unknown(format!("there is no policy '{p}'")));
        }
        ctx.policy = Some(p.to_owned());
    }
    let skill = skill.to_owned();
    Ok((ctx, skill, req))
}

async fn completion(
    s: &AppState,
    headers: &HeaderMap,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let (ctx, skill, req) = read_request(s, headers, body).await?;
    let task_id: TaskId = crate::ldp::new_task_id().into();
    let streaming = req.stream.unwrap_or(false);
    let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
    let model = req.model.clone();
    // Only a stream has deltas to carry.
    let (tx, rx) = match streaming {
        true => {
            let (tx, rx) = mpsc::channel::<ChatDelta>(DELTA_BUFFER);
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    let proxy = s.proxy.clone();
    let id = task_id.clone();
    // A client that leaves before its answer (or its first delta) cancels the task.
    let guard =
        CancelIngressTasksOnDrop::new(s, &ctx.tenant.name, Ingress::Openai, [task_id.clone()]);
    // Running from now on, for a cancel to find, until the task's future ends.
    let registered = s
        .proxy
        .ingress_task_arrived(&ctx.tenant.name, Ingress::Openai, &task_id);
    // The task runs as its own (tracked) task: a client that leaves does not stop its
    // settling and its ledger row.
    let task = s
        .proxy
        .spawn_tracked(async move {
            let _registered = registered;
            let deltas = tx.as_ref();
            crate::proxy::boxed(|| chat(&proxy, &ctx, req, &skill, id, deltas)).await
        })
        .ok_or_else(|| ApiError::new(GatewayCode::Unavailable, "the gateway is stopping"))?;
    let reply = Reply {
        id: format!("chatcmpl-{task_id}"),
        created: chrono::Utc::now().timestamp(),
        model,
        include_usage,
    };
    let answered = match rx {
        Some(rx) => reply::stream(s, reply, task_id, rx, task).await,
        None => reply::whole(s, reply, &task_id, task).await,
    };
    guard.done();
    answered
}
