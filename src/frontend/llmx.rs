//! The LLMX front end (seed `003_…`, LLMX v1.0): a message's `REQ` blocks (with the
//! message's `CTX` and `PLAN`) as tasks, and each task's trip back as LLMX answer blocks.
//!
//! Reading and writing are the `llmx` crate's; this front end decides what a message asks of the
//! gateway and what it is answered:
//!
//! - `HEADER` is required (its `t` is not checked: `ALL`, the gateway's id or any name); its
//!   `s` must rise per sender `f` of the tenant (a repeat is a replay), remembered in a
//!   tenant-fair table (`[llmx] max_sender_bytes`, [`crate::fair`]: a tenant over its share
//!   forgets its least recently heard senders first, never another tenant's), or in cluster
//!   mode in Redis (`crate::state::Sequences`), so a replay is refused on every replica. The
//!   gateway's answers to a sender are numbered from 1 per tenant and sender, in the same
//!   step as the check (one round trip in cluster mode; Redis silent: NACK 503, retryable).
//! - Each `REQ` is one task. Its skill is the first `exp` entry that is a skill some delegate
//!   offers, or else names a registered delegate (registry name or card `delegate_id`): then
//!   the first of that delegate's skills no other delegate offers, else its first skill. The
//!   policy chooses among the delegates offering that skill (routing has no way to pin one
//!   delegate): naming a delegate with a skill of its own reaches that delegate.
//! - The task's input is the objective `o`, then the message's `CTX` and `PLAN` blocks as
//!   LLMX lines (every `REQ` of a message shares them, as §6.2 sends them together).
//! - `pr` is a deadline class ([`deadline_for`]): 1 → 10 s, 2 → 30 s, 3 → 60 s, 4 → 120 s,
//!   5 → `upstream.task_timeout`, each at most `upstream.task_timeout`; sent as the task's
//!   contract `deadline` (RFC 3339), which routing and the task's timeout honour.
//! - The policy: the REQ's `x_policy`, else the `x-ldp-policy` header, else the tenant's.
//! - Each `REQ` is answered with blocks carrying its reference `ai` (its `i`, else `R<n>`, its
//!   place among the message's REQs): `OBS:{ai,s:OK,c:{out:…},x_prov:{…}}` for a result;
//!   `BLK:{ai,w,a,esc:false,…}` for a refusal (no eligible delegate, budget, trust, limits),
//!   `a` listing the skills that would be served now under the same policy (for an unknown
//!   policy: the policies there are); `OBS` with `s:ERR` for a task that ran and failed.
//! - Unknown block types get `RES:{o:"WARN",…}` (§7.3); `X_` blocks are ignored (§8.1); other
//!   standard blocks (ACT, OBS, …) are not the gateway's to act on and get a WARN too.
//!
//! The route, `POST /llmx` (`text/plain`, the tenant's Bearer key), answers one LLMX message
//! from the gateway, `HEADER:{f:<gateway id>,t:<sender>,s:<n>[,b:<batch>]}`, then any WARN,
//! then each REQ's answer block. A lone REQ is answered whole; a batch is streamed (chunked),
//! each REQ's answer written as it completes, so answers come in completion order. A message
//! refused whole is answered `RES:{o:"NACK",msg:"…"}` with a 4xx: 400 (grammar, `parse error
//! at L:C: …`), 401 (no or bad key), 409 (sequence not above the sender's last), 413 (over the
//! size limit). Files: `inbound.rs` (a message read into jobs), `req.rs` (each job as a task
//! and its answer block), `senders.rs` (the sequence numbers).

mod inbound;
mod req;
mod senders;

pub use inbound::{limits, read, read_unchecked, salvage_header, Inbound, Job, Nack, MAX_REQS};
pub use req::{deadline_for, run, Answered, DEADLINE_CLASSES, MAX_ALTERNATIVES};
pub use senders::LlmxState;

use super::api_error::{ApiError, ErrorKind};
use super::request::{read_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::TaskId;
use crate::provenance::Ingress;
use crate::proxy::RequestCtx;
use axum::body::{Body as HttpBody, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use llmx::{Block, Header, Message};
use std::convert::Infallible;
use tokio::sync::mpsc;

/// `e` as the LLMX route answers a message it could not read: a NACK to an unknown sender.
pub(crate) fn error_answer(s: &AppState, e: ApiError) -> Response {
    nacked(Header::new(from_id(s), UNKNOWN, s.llmx.next_unread()), e)
}

/// `POST /llmx`.
pub(crate) async fn llmx(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    let ctx = match request_ctx(&s, &headers) {
        Ok(ctx) => ctx,
        Err(e) => return error_answer(&s, e),
    };
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return nack(&s, Some(&ctx.tenant.name), None, e).await,
    };
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            let valid = String::from_utf8_lossy(&bytes[..e.valid_up_to()]);
            let line = valid.matches('\n').count() + 1;
            let column = valid.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            let err = llmx::ParseError::at(line, column, "the message is not UTF-8");
            let e = ApiError::new(GatewayCode::BadRequest, err.to_string());
            return nack(&s, Some(&ctx.tenant.name), None, e).await;
        }
    };
    let limits = limits(s.config.server.body_limit_bytes);
    let tenant = ctx.tenant.name.as_str();
    let refused = |e: Nack| {
        let msg = e.to_string();
        match &e {
            Nack::Parse(_) => ApiError::new(GatewayCode::BadRequest, msg),
            Nack::TooLarge { .. } => ApiError::new(GatewayCode::PayloadTooLarge, msg),
            Nack::Sequence(_) => ApiError::of(ErrorKind::Conflict, msg),
        }
    };
    let inbound = match read_unchecked(text, &limits) {
        Ok(i) => i,
        Err(e) => {
            let to = salvage_header(text);
            return nack(&s, Some(tenant), to.as_ref(), refused(e)).await;
        }
    };
    // The sequence number checked and the answer numbered in one step of the store (one
    // round trip in cluster mode, where a failure refuses the message: a replay is never
    // guessed).
    let h = &inbound.header;
    let seq = match s.llmx.accept(tenant, &h.from, h.seq).await {
        Ok((Ok(()), n)) => n,
        Ok((Err(e), n)) => return nacked(h.reply(from_id(&s), n), refused(e.into())),
        Err(e) => {
            let e = ApiError::new(
                GatewayCode::Unavailable,
                format!("sequence number not checked: {e}; retry with a higher s"),
            );
            return nacked(h.reply(from_id(&s), 0), e);
        }
    };
    let header = h.reply(from_id(&s), seq);
    answer(s, ctx, inbound, header).await
}

/// The gateway's name in its answers' `f`.
fn from_id(s: &AppState) -> &str {
    s.config.identity.delegate_id.as_str()
}

/// The `HEADER` of the gateway's answer to `tenant`'s `to` (a sender that could not be read:
/// `unknown`; no tenant yet: the unauthenticated, numbered together).
async fn reply_header(s: &AppState, tenant: Option<&str>, to: Option<&Header>) -> Header {
    let recipient = to.map_or(UNKNOWN, |h| h.from.as_str());
    let seq = s.llmx.next_seq(tenant.unwrap_or_default(), recipient).await;
    match to {
        Some(h) => h.reply(from_id(s), seq),
        None => Header::new(from_id(s), UNKNOWN, seq),
    }
}

/// The recipient of an answer to a message whose sender could not be read.
const UNKNOWN: &str = "unknown";

/// A whole LLMX answer: 200 with `message`.
fn whole(message: &Message) -> Response {
    in_llmx(StatusCode::OK.into_response(), message)
}

/// `resp` (its status and headers, and the error it tells the counting layer) with `message`
/// as its body.
fn in_llmx(mut resp: Response, message: &Message) -> Response {
    *resp.body_mut() = HttpBody::from(llmx::write(message));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A refusal of the whole message, `RES:{o:"NACK",msg}`, with the status (and `Retry-After`,
/// `Connection: close`) the LDP routes answer it with, counted and logged as they are.
async fn nack(s: &AppState, tenant: Option<&str>, to: Option<&Header>, e: ApiError) -> Response {
    nacked(reply_header(s, tenant, to).await, e)
}

/// [`nack`] with its header numbered.
fn nacked(header: Header, e: ApiError) -> Response {
    let message = Message {
        header,
        blocks: vec![Block::res("NACK", Some(&e.error().message))],
    };
    in_llmx(refuse(e), &message)
}

/// Runs the message's REQs: a lone one answered whole, a batch streamed.
async fn answer(s: AppState, ctx: RequestCtx, inbound: Inbound, header: Header) -> Response {
    let Inbound {
        header: theirs,
        jobs,
        warnings,
    } = inbound;
    let ids: Vec<TaskId> = jobs
        .iter()
        .map(|_| crate::ldp::new_task_id().into())
        .collect();
    let guard =
        CancelIngressTasksOnDrop::new(&s, &ctx.tenant.name, Ingress::Llmx, ids.iter().cloned());
    // Each running from now on, for a cancel to find, until its task's future ends.
    let tenant = ctx.tenant.name.clone();
    let registered = ids
        .iter()
        .map(|id| s.proxy.ingress_task_arrived(&tenant, Ingress::Llmx, id))
        .collect::<Vec<_>>();
    let (tx, mut rx) = mpsc::channel::<Answered>(jobs.len().max(1));
    let timeout = s.config.upstream.task_timeout;
    for (i, ((job, task_id), registered)) in jobs.into_iter().zip(ids).zip(registered).enumerate() {
        let (proxy, registry, ctx, tx) =
            (s.proxy.clone(), s.registry.clone(), ctx.clone(), tx.clone());
        let answered = guard.answered();
        // Each REQ runs as its own tracked task: a client that leaves does not stop its
        // settling and its ledger row.
        let spawned = s.proxy.spawn_tracked(async move {
            let _registered = registered;
            let a =
                crate::proxy::boxed(|| run(&proxy, &registry, &ctx, &job, task_id, timeout)).await;
            answered(i);
            let _ = tx.send(a).await;
        });
        if spawned.is_none() {
            let e = ApiError::new(GatewayCode::Unavailable, "the gateway is stopping");
            return nack(&s, Some(&tenant), Some(&theirs), e).await;
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
            let e = ApiError::new(GatewayCode::Internal, "the task was lost");
            return nack(&s, Some(&tenant), Some(&theirs), e).await;
        };
        first.blocks.extend(a.blocks);
        return match a.refusal {
            None => whole(&first),
            // Its status and `Retry-After`, as the LDP routes answer it.
            Some(r) => in_llmx(refuse(ApiError::from(r)), &first),
        };
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
