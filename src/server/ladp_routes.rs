//! The LADP bridge on the LDP listener: `POST /ladp` (`text/plain`, the tenant's Bearer key).
//! One `(msg …)` s-expression in; the gateway's `msg` forms out, one a line. A refused
//! message is answered `(msg error gateway <sender> <ms> (data (reason "…") [(at "L:C")]))`
//! with its 4xx (400 malformed, 401 no key, 403 unknown policy, 413 over 64 KiB, 429 rate);
//! a failed task with its LDP status (as on the LDP routes) and the forms it got to.

use super::api_error::{catch_panics_shaped, ApiError, Shape};
use super::request::{read_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::frontend::ladp::{self as bridge, LadpError, Phase, Request, UNKNOWN_SENDER};
use crate::ldp::error::GatewayCode;
use crate::ldp::{LdpError, TaskId};
use crate::provenance::Ingress;
use crate::proxy::RequestCtx;
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use std::sync::Arc;

/// The route (a panic of its handler answered with an LADP error).
pub(super) fn router(state: &AppState) -> Router<AppState> {
    let shape: Shape = Arc::new(|e| told(e, UNKNOWN_SENDER, None));
    Router::new()
        .route("/ladp", post(ladp))
        .layer(axum::middleware::from_fn_with_state(
            (state.metrics.clone(), shape),
            catch_panics_shaped,
        ))
}

const TEXT: &str = "text/plain; charset=utf-8";

/// `POST /ladp`.
async fn ladp(State(s): State<AppState>, headers: HeaderMap, body: HttpBody) -> Response {
    let mut ctx = match request_ctx(&s, &headers) {
        Ok(ctx) => ctx,
        Err(e) => return told(e, UNKNOWN_SENDER, None),
    };
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return told(e, UNKNOWN_SENDER, None),
    };
    let request = match bridge::read(&bytes) {
        Ok(r) => r,
        Err((sender, e)) => return refused(&e, sender.as_deref().unwrap_or(UNKNOWN_SENDER)),
    };
    let sender = request.msg().sender.clone();
    if let Err(r) = s.ladp.admit(&ctx.tenant.name, &sender) {
        if let bridge::RateRefusal::Agents(_) = r {
            count_share_refusal(&s);
        }
        return refused(&LadpError::RateLimited(r), &sender);
    }
    match request {
        Request::TaskInit(msg, init) => {
            if let Some(p) = &init.policy {
                if s.proxy.policies().get(p).is_none() {
                    return refused(&LadpError::UnknownPolicy(p.clone()), &sender);
                }
                ctx.policy = Some(p.clone());
            }
            task(&s, ctx, msg, init).await
        }
        Request::Status(msg) => {
            let which = match bridge::status_target(&msg) {
                Ok(w) => w,
                Err(e) => return refused(&e, &sender),
            };
            let entry = s.ladp.find(&ctx.tenant.name, &sender, which);
            let m = bridge::status(&bridge::reply_to(&sender), entry.as_ref());
            ok(m.write() + "\n")
        }
        Request::Halt(msg) => {
            let running = s.ladp.running(&ctx.tenant.name, &sender);
            let n = bridge::halt(&s.proxy, &ctx.tenant.name, &running).await;
            let m = bridge::halted(&bridge::reply_to(&sender), &msg, n);
            ok(m.write() + "\n")
        }
    }
}

/// Runs a `task-init` and answers its forms.
async fn task(s: &AppState, ctx: RequestCtx, msg: ladp::Msg, init: ladp::TaskInit) -> Response {
    let task_id: TaskId = crate::ldp::new_id().into();
    let tenant = ctx.tenant.name.clone();
    let sender = msg.sender.clone();
    // Running before `halt` can see it in the book, for a cancel to find, until the task's
    // future ends.
    let registered = s
        .proxy
        .ingress_task_arrived(&tenant, Ingress::Ladp, &task_id);
    if let Err(wait) = s
        .ladp
        .start(&tenant, &sender, msg.epoch_ms, task_id.clone())
    {
        count_share_refusal(s);
        return refused(
            &LadpError::RateLimited(bridge::RateRefusal::Agents(wait)),
            &sender,
        );
    }
    // A client that leaves before its answer cancels the task.
    let guard = CancelIngressTasksOnDrop::new(s, &tenant, Ingress::Ladp, [task_id.clone()]);
    let proxy = s.proxy.clone();
    let (id, quorum) = (task_id.clone(), init.quorum);
    // Its own (tracked) task: a client that leaves does not stop its settling and ledger row.
    let spawned = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        bridge::run(&proxy, &ctx, &init, id).await
    });
    let Some(handle) = spawned else {
        s.ladp.finish(&tenant, &sender, &task_id, Phase::Failed);
        let e = ApiError::new(GatewayCode::Unavailable, "the gateway is stopping");
        return told(e, &sender, None);
    };
    let joined = handle.await;
    guard.done();
    let trip = match joined {
        Ok(Ok(trip)) => trip,
        Ok(Err(refusal)) => {
            s.ladp.finish(&tenant, &sender, &task_id, Phase::Failed);
            return told(ApiError::from(refusal), &sender, Some(&task_id));
        }
        Err(e) => {
            s.ladp.finish(&tenant, &sender, &task_id, Phase::Failed);
            let e = super::api_error::task_lost(&s.metrics, e);
            return told(e, &sender, Some(&task_id));
        }
    };
    let answer = bridge::answer(&trip, &bridge::reply_to(&sender), quorum);
    let phase = match answer.failed {
        None => Phase::Done,
        Some(_) => Phase::Failed,
    };
    s.ladp.finish(&tenant, &sender, &task_id, phase);
    let mut resp = match &answer.failed {
        None => ok(answer.write()),
        Some(e) => with_text(refuse(ApiError::task_failed(e.clone())), answer.write()),
    };
    let policy = trip.policy.name.0.as_str();
    let delegate = trip.delegate.as_ref().map(|d| d.client_name());
    let delegate = delegate.as_deref();
    for (name, value) in [
        ("x-ldp-task-id", Some(task_id.as_str())),
        ("x-ldp-policy", Some(policy)),
        ("x-ldp-delegate", delegate),
    ] {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            resp.headers_mut().insert(HeaderName::from_static(name), v);
        }
    }
    resp
}

/// `ldp_gateway_rate_limited_total{scope="tenant_share"}`: the tenant's share of the bridge's
/// tables is full of agents still refilling or running.
fn count_share_refusal(s: &AppState) {
    s.metrics
        .rate_limited
        .with_label_values(&[crate::limits::Scope::TenantShare.as_str()])
        .inc();
}

fn ok(text: String) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, TEXT)], text).into_response()
}

/// A refused message: its status from the gateway's one table, its body the LADP error.
fn refused(e: &LadpError, sender: &str) -> Response {
    let api = match e.retry_after() {
        // `task_failed` gives a rate limit its `Retry-After`, set to the wait here.
        Some(wait) => ApiError::task_failed(LdpError::gateway(e.code(), e.reason()))
            .with_retry_after(Some(wait)),
        None => ApiError::new(e.code(), e.reason()),
    };
    let m = bridge::reply_to(sender).error(&e.reason(), e.at());
    with_text(refuse(api), m.write() + "\n")
}

/// An error of the HTTP layer (key, body, a refusal of the task) as the LADP error.
fn told(e: ApiError, sender: &str, task_id: Option<&TaskId>) -> Response {
    let r = bridge::reply_to(sender);
    let m = match task_id {
        Some(id) => bridge::task_error(&r, id, e.error()),
        None => r.error(&e.error().message, None),
    };
    with_text(refuse(e), m.write() + "\n")
}

/// `resp` (status, headers, the error's report for the counting layer) with `text` as body.
fn with_text(resp: Response, text: String) -> Response {
    let (mut parts, _) = resp.into_parts();
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(TEXT));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, HttpBody::from(text))
}
