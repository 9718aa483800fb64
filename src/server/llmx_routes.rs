//! The LLMX bridge on the LDP listener: `POST /llmx` (`text/plain`, tenant Bearer key). The
//! answer is one LLMX message from the gateway, `HEADER:{f:<gateway id>,t:<sender>,s:<n>
//! [,b:<batch>]}`, then any WARN, then each REQ's answer block (`crate::frontend::llmx`). A
//! lone REQ is answered whole; a batch is streamed (chunked), each REQ's answer written as it
//! completes, so answers come in completion order. A message refused whole is answered
//! `RES:{o:"NACK",msg:"…"}` with a 4xx: 400 (grammar, `parse error at L:C: …`), 401 (no or
//! bad key), 409 (sequence not above the sender's last), 413 (over the size limit).

use super::api_error::ApiError;
use super::request::{read_body, request_ctx};
use super::AppState;
use crate::frontend::llmx::{self as bridge, Answered, Inbound, Nack};
use crate::ldp::TaskId;
use crate::proxy::{Proxy, RequestCtx};
use axum::body::{Body as HttpBody, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use llmx::{Block, Header, Message};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// The `/llmx` route.
pub(super) fn router() -> Router<AppState> {
    Router::new().route("/llmx", post(llmx))
}

/// `POST /llmx`.
async fn llmx(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    let ctx = match request_ctx(&s, &headers) {
        Ok(ctx) => ctx,
        Err(e) => return api_nack(&s, None, e),
    };
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return api_nack(&s, None, e),
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid = String::from_utf8_lossy(&bytes[..e.valid_up_to()]);
            let line = valid.matches('\n').count() + 1;
            let column = valid.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let err = llmx::ParseError::at(line, column, "the message is not UTF-8");
            return nack(&s, None, StatusCode::BAD_REQUEST, &err.to_string());
        }
    };
    let limits = bridge::limits(s.config.server.body_limit_bytes);
    let inbound = match bridge::read(text, &limits, &s.llmx, &ctx.tenant.name) {
        Ok(i) => i,
        Err(e) => {
            let status = match &e {
                Nack::Parse(_) => StatusCode::BAD_REQUEST,
                Nack::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                Nack::Sequence(_) => StatusCode::CONFLICT,
            };
            let to = bridge::salvage_header(text);
            return nack(&s, to.as_ref(), status, &e.to_string());
        }
    };
    answer(s, ctx, inbound).await
}

/// The `HEADER` of the gateway's answer to `to` (a sender that could not be read: `unknown`).
fn reply_header(s: &AppState, to: Option<&Header>) -> Header {
    let seq = s.llmx.next_seq();
    let from = s.config.identity.delegate_id.as_str();
    match to {
        Some(h) => h.reply(from, seq),
        None => Header::new(from, "unknown", seq),
    }
}

/// A whole LLMX answer with `status`.
fn whole(status: StatusCode, message: &Message) -> Response {
    let mut resp = (status, llmx::write(message)).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// `RES:{o:"NACK",msg}` with `status`.
fn nack(s: &AppState, to: Option<&Header>, status: StatusCode, msg: &str) -> Response {
    let message = Message {
        header: reply_header(s, to),
        blocks: vec![Block::res("NACK", Some(msg))],
    };
    let mut resp = whole(status, &message);
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        // As `request::refuse`: the rest of an oversized body is not worth reading.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// The plumbing's refusal (key, body size, body deadline) as a NACK with its status.
fn api_nack(s: &AppState, to: Option<&Header>, e: ApiError) -> Response {
    nack(s, to, e.telling().status, &e.error().message)
}

/// Runs the message's REQs: a lone one answered whole, a batch streamed.
async fn answer(s: AppState, ctx: RequestCtx, inbound: Inbound) -> Response {
    let Inbound {
        header: theirs,
        jobs,
        warnings,
    } = inbound;
    let header = reply_header(&s, Some(&theirs));
    let ids: Vec<TaskId> = jobs.iter().map(|_| crate::ldp::new_id().into()).collect();
    let guard = CancelOnDrop {
        proxy: s.proxy.clone(),
        tenant: ctx.tenant.name.clone(),
        pending: Arc::new(Mutex::new(ids.iter().cloned().map(Some).collect())),
    };
    let (tx, mut rx) = mpsc::channel::<Answered>(jobs.len().max(1));
    let timeout = s.config.upstream.task_timeout;
    for (i, (job, task_id)) in jobs.into_iter().zip(ids).enumerate() {
        let (proxy, registry, ctx, tx) =
            (s.proxy.clone(), s.registry.clone(), ctx.clone(), tx.clone());
        let pending = guard.pending.clone();
        // Each REQ runs as its own tracked task: a client that leaves does not stop its
        // settling and its ledger row.
        let spawned = s.proxy.spawn_tracked(async move {
            let a = bridge::run(&proxy, &registry, &ctx, &job, task_id, timeout).await;
            if let Some(slot) = pending.lock().unwrap_or_else(|p| p.into_inner()).get_mut(i) {
                *slot = None;
            }
            let _ = tx.send(a).await;
        });
        if spawned.is_none() {
            return nack(
                &s,
                Some(&theirs),
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway is stopping",
            );
        }
    }
    drop(tx);
    let mut first = Message {
        header,
        blocks: warnings,
    };
    if theirs.batch.is_none() {
        // A lone REQ: answered whole, with the status of a refusal before it ran. (The
        // guard cancels it if the client leaves first.)
        let Some(a) = rx.recv().await else {
            return nack(
                &s,
                Some(&theirs),
                StatusCode::INTERNAL_SERVER_ERROR,
                "the task was lost",
            );
        };
        let status = a
            .refusal
            .map_or(StatusCode::OK, |r| ApiError::from(r).telling().status);
        first.blocks.extend(a.blocks);
        return whole(status, &first);
    }
    let head = Bytes::from(llmx::write(&first));
    let stream = futures_util::stream::unfold(
        (Some(head), rx, guard),
        |(head, mut rx, guard)| async move {
            if let Some(h) = head {
                return Some((Ok::<_, Infallible>(h), (None, rx, guard)));
            }
            let a = rx.recv().await?;
            let mut text = String::new();
            for b in &a.blocks {
                llmx::write_block(&mut text, b);
            }
            Some((Ok(Bytes::from(text)), (None, rx, guard)))
        },
    );
    let mut resp = HttpBody::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Cancels the message's tasks still running when its answer is dropped (the client left).
struct CancelOnDrop {
    proxy: Arc<Proxy>,
    tenant: String,
    /// Each REQ's task, `None` once answered.
    pending: Arc<Mutex<Vec<Option<TaskId>>>>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let left: Vec<TaskId> = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        if left.is_empty() {
            return;
        }
        let (proxy, tenant) = (self.proxy.clone(), std::mem::take(&mut self.tenant));
        self.proxy.spawn_tracked(async move {
            for task_id in left {
                bridge::cancel(&proxy, &tenant, &task_id).await;
            }
        });
    }
}
