//! The LADP front end (seed `004_…`, LADP v1.9): a `(msg …)` s-expression in, read
//! by the `ladp` crate; a `task-init` as one task (skill, text, policy, deadline, quorum); the
//! task's trip back as the seed's chain of verification (`synthesis`, `verify` + `vote` per
//! verifier, `integration-verified` or `reject-proposal` per round, `meta abort` after the
//! retry limit), or `synthesis` then `integration` without `[verify]`.
//!
//! Choices where the seed is silent (the `ladp` crate lists the reader's):
//! - Every answer is a `(msg <kind> gateway <sender> <epoch-ms> (data …))` form, one per line;
//!   a `(meta …)` answer rides inside one as `(msg meta … (data (meta abort|halt …)))`.
//! - A round's proposal id (`msg-id`, `target-msg`, `proposal`, `reference`) is
//!   `<task-id>-r<round>`. A `task-init` is known by its `<epoch-ms>`.
//! - `status-request` may name `(task-id "…")` or `(target-msg <epoch-ms of the task-init>)`,
//!   else it asks about the sender's latest task; the phase is `running`, `done`, `failed`, or
//!   `idle` when the gateway remembers no task of the sender.
//! - A failure other than the verification retry limit (no delegate, budget, cancel, …) ends
//!   the answer with `(msg error … (data (reason "<CODE>: <message>") (task-id "…")))`.
//! - A vote's `weight` is the verifier's weight (its quality at the verify skill); the
//!   quorum is reached when the weighted yes is at least `quorum` of the round's total weight
//!   and some verifier said yes. A `quorum` below the policy's `[verify] threshold` is raised
//!   to it: a client may ask for more agreement than the operator's, never less.
//! - The recipient of a message is not checked: the gateway answers whatever it is called.
//!
//! The route, `POST /ladp` (`text/plain`, the tenant's Bearer key), takes one `(msg …)`
//! s-expression and answers the gateway's `msg` forms, one a line. A refused message is
//! answered `(msg error gateway <sender> <ms> (data (reason "…") [(at "L:C")]))` with its 4xx
//! (400 malformed, 401 no key, 403 unknown policy, 413 over 64 KiB, 429 rate); a failed task
//! with its LDP status (as on the LDP routes) and the forms it got to. Files: `message.rs`
//! (reading, refusals), `forms.rs` (answers), `book.rs` (agents' rates and tasks; in cluster
//! mode both in Redis, so the rate holds across replicas and any replica answers a
//! `status-request` or `halt` for a task another started; Redis silent: 503, retryable).

pub mod book;
mod forms;
mod message;

pub use book::{LadpState, Phase, RateRefusal, Which, MAX_SENDER_BYTES};
pub use forms::{answer, halted, proposal_id, reply_to, status, task_error, Answer};
pub use message::{read, status_target, LadpError, Request};

use super::api_error::ApiError;
use super::request::{read_body, refuse, request_ctx, CancelIngressTasksOnDrop};
use super::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::{DelegationContract, Json, LdpError, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ladp::TaskInit;

/// The gateway's name as the sender of its answers.
pub const GATEWAY: &str = "gateway";
/// The recipient of an answer to a message whose sender could not be read.
pub const UNKNOWN_SENDER: &str = "unknown";

const TEXT: &str = "text/plain; charset=utf-8";

/// `e` as the LADP route answers a message it could not read: an `error` form to an unknown
/// sender.
pub(crate) fn error_answer(e: ApiError) -> Response {
    told(e, UNKNOWN_SENDER, None)
}

/// `POST /ladp`.
pub(crate) async fn ladp(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    let mut ctx = match request_ctx(&s, &headers) {
        Ok(ctx) => ctx,
        Err(e) => return told(e, UNKNOWN_SENDER, None),
    };
    let bytes = match read_body(&s, &headers, body).await {
        Ok(b) => b,
        Err(e) => return told(e, UNKNOWN_SENDER, None),
    };
    let request = match read(&bytes) {
        Ok(r) => r,
        Err((sender, e)) => return refused(&e, sender.as_deref().unwrap_or(UNKNOWN_SENDER)),
    };
    let sender = request.msg().sender.clone();
    if let Err(r) = s.ladp.admit(&ctx.tenant.name, &sender).await {
        if let RateRefusal::Agents(_) = r {
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
            let which = match status_target(&msg) {
                Ok(w) => w,
                Err(e) => return refused(&e, &sender),
            };
            let entry = match s.ladp.find(&ctx.tenant.name, &sender, which).await {
                Ok(entry) => entry,
                Err(e) => return told(unavailable("status not read", &e), &sender, None),
            };
            let m = status(&reply_to(&sender), entry.as_ref());
            ok(m.write() + "\n")
        }
        Request::Halt(msg) => {
            let running = match s.ladp.running(&ctx.tenant.name, &sender).await {
                Ok(ids) => ids,
                Err(e) => return told(unavailable("nothing halted", &e), &sender, None),
            };
            let n = halt(&s.proxy, &ctx.tenant.name, &running).await;
            let m = halted(&reply_to(&sender), &msg, n);
            ok(m.write() + "\n")
        }
    }
}

/// Runs a `task-init` and answers its forms.
async fn task(s: &AppState, ctx: RequestCtx, msg: ladp::Msg, init: ladp::TaskInit) -> Response {
    let task_id: TaskId = crate::ldp::new_task_id().into();
    let tenant = ctx.tenant.name.clone();
    let sender = msg.sender.clone();
    // Running before `halt` can see it in the book, for a cancel to find, until the task's
    // future ends.
    let registered = s
        .proxy
        .ingress_task_arrived(&tenant, Ingress::Ladp, &task_id);
    match s
        .ladp
        .start(&tenant, &sender, msg.epoch_ms, task_id.clone())
        .await
    {
        Ok(Ok(())) => {}
        Ok(Err(wait)) => {
            count_share_refusal(s);
            return refused(&LadpError::RateLimited(RateRefusal::Agents(wait)), &sender);
        }
        // A task no `halt` could find is not started.
        Err(e) => return told(unavailable("task not started", &e), &sender, None),
    }
    // A client that leaves before its answer cancels the task.
    let guard = CancelIngressTasksOnDrop::new(s, &tenant, Ingress::Ladp, [task_id.clone()]);
    let proxy = s.proxy.clone();
    let (id, quorum) = (task_id.clone(), init.quorum);
    // Its own (tracked) task: a client that leaves does not stop its settling and ledger row.
    let spawned = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        crate::proxy::boxed(|| run(&proxy, &ctx, &init, id)).await
    });
    let Some(handle) = spawned else {
        s.ladp
            .finish(&tenant, &sender, &task_id, Phase::Failed)
            .await;
        let e = ApiError::new(GatewayCode::Unavailable, "the gateway is stopping");
        return told(e, &sender, None);
    };
    let joined = handle.await;
    guard.done();
    let trip = match joined {
        Ok(Ok(trip)) => trip,
        Ok(Err(refusal)) => {
            s.ladp
                .finish(&tenant, &sender, &task_id, Phase::Failed)
                .await;
            return told(ApiError::from(refusal), &sender, Some(&task_id));
        }
        Err(e) => {
            s.ladp
                .finish(&tenant, &sender, &task_id, Phase::Failed)
                .await;
            let e = super::api_error::task_lost(&s.metrics, e);
            return told(e, &sender, Some(&task_id));
        }
    };
    let answer = answer(&trip, &reply_to(&sender), quorum);
    let phase = match answer.failed {
        None => Phase::Done,
        Some(_) => Phase::Failed,
    };
    s.ladp.finish(&tenant, &sender, &task_id, phase).await;
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

/// The shared state (Redis) did not answer: 503, retryable (the `SHARED_STATE_UNAVAILABLE`
/// rule of cluster mode).
fn unavailable(what: &str, e: &crate::state::StoreError) -> ApiError {
    ApiError::new(GatewayCode::Unavailable, format!("{what}: {e}"))
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
    let m = reply_to(sender).error(&e.reason(), e.at());
    with_text(refuse(api), m.write() + "\n")
}

/// An error of the HTTP layer (key, body, a refusal of the task) as the LADP error.
fn told(e: ApiError, sender: &str, task_id: Option<&TaskId>) -> Response {
    let r = reply_to(sender);
    let m = match task_id {
        Some(id) => task_error(&r, id, e.error()),
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

/// Runs `init` as task `task_id` of `ctx`'s tenant (the policy, when named, already set in
/// `ctx`): its text as the input, its deadline and timeout (the earlier) as the contract's
/// deadline, its quorum as a raise of the policy's verification threshold, every round kept.
pub async fn run(
    proxy: &Proxy,
    ctx: &RequestCtx,
    init: &TaskInit,
    task_id: TaskId,
) -> Result<Trip, Refusal> {
    let task = IngressTask {
        ingress: Ingress::Ladp,
        task_id,
        skill: &init.skill,
        input: Json::from(serde_json::Value::String(init.task.clone())),
        chat: None,
        contract: contract(init, chrono::Utc::now()),
        quorum: init.quorum,
        keep_rounds: true,
        ledger_input: None,
    };
    proxy.ingress_task(ctx, task, None).await
}

/// The contract of a `task-init` with a `deadline` or a `timeout`: the earlier of the two.
fn contract(init: &TaskInit, now: chrono::DateTime<chrono::Utc>) -> Option<DelegationContract> {
    let by_timeout = init
        .timeout
        .and_then(|t| chrono::Duration::from_std(t).ok())
        .and_then(|t| now.checked_add_signed(t));
    let deadline = match (init.deadline, by_timeout) {
        (Some(a), Some(b)) => a.min(b),
        (Some(d), None) | (None, Some(d)) => d,
        (None, None) => return None,
    };
    Some(DelegationContract {
        contract_id: String::new(),
        policy: Default::default(),
        deadline: Some(deadline.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        extra: Default::default(),
    })
}

/// Cancels the tasks `ids` of `tenant` (a `halt`); how many were stopped.
pub async fn halt(proxy: &Proxy, tenant: &str, ids: &[TaskId]) -> usize {
    let mut stopped = 0;
    for id in ids {
        if proxy.cancel_ingress_task(tenant, Ingress::Ladp, id).await {
            stopped += 1;
        }
    }
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn init(deadline: Option<&str>, timeout: Option<u64>) -> TaskInit {
        TaskInit {
            skill: "qa".into(),
            task: "t".into(),
            policy: None,
            deadline: deadline.map(|d| d.parse().unwrap()),
            quorum: None,
            timeout: timeout.map(Duration::from_secs),
        }
    }

    #[test]
    fn the_earlier_of_deadline_and_timeout_is_the_contract_s_deadline() {
        let now: chrono::DateTime<chrono::Utc> = "2025-05-01T12:00:00Z".parse().unwrap();
        let d = |i: &TaskInit| contract(i, now).and_then(|c| c.deadline);
        assert_eq!(d(&init(None, None)), None);
        assert_eq!(
            d(&init(Some("2025-05-01T12:00:30Z"), Some(60))).as_deref(),
            Some("2025-05-01T12:00:30.000Z")
        );
        assert_eq!(
            d(&init(Some("2025-05-01T13:00:00Z"), Some(60))).as_deref(),
            Some("2025-05-01T12:01:00.000Z")
        );
        assert_eq!(
            d(&init(None, Some(5))).as_deref(),
            Some("2025-05-01T12:00:05.000Z")
        );
    }
}
