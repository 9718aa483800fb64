//! An A2A task's life, one function per method: a send starts the task (in its tenant's
//! table, its context's session), runs it through the pipeline with its updates told to its
//! listeners and ends it completed, failed, rejected or canceled, answering the task once it
//! ends, at once, or as a stream; a get reads it, a cancel cancels it, a subscribe follows
//! it; a notification is done (a cancel) or dropped, never answered.

use super::incoming::{job, Call, Job};
use super::rpc::{notified, rpc, rpc_error, rpc_failure, rpc_ok, send_result, sse, task_result};
use super::tasks::{A2aState, Cancel, Inserted};
use super::{cut, status, A2aRequestError, MAX_ID_BYTES};
use crate::frontend::api_error::ApiError;
use crate::frontend::AppState;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, SessionId, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use a2a_wire::v1::{
    self, Artifact, Message, Part, Role, StreamResponse, Task, TaskState, TaskStatus,
};
use a2a_wire::{Dialect, ErrorCode, ErrorObject, Id, Map, Response as RpcResponse};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::mpsc;

/// TASK_UPDATEs buffered between the task and its listeners.
const UPDATES_BUFFERED: usize = 64;

/// `SendMessage` / `SendStreamingMessage` (`stream`): the message checked and made a task
/// (its policy the message's, when it names one), started and answered.
pub(super) async fn send(
    s: AppState,
    mut ctx: RequestCtx,
    id: Id,
    dialect: Dialect,
    req: Box<v1::SendMessageRequest>,
    stream: bool,
) -> Response {
    let now = req
        .configuration
        .as_ref()
        .is_some_and(|c| c.return_immediately);
    let job = match job(*req, s.config.a2a.default_skill.as_deref()) {
        Ok(j) => j,
        Err(e) => return rpc_error(id, dialect, &e),
    };
    if let Some(p) = &job.policy {
        ctx.policy = Some(p.clone());
    }
    start(s, ctx, id, dialect, job, stream, now).await
}

/// `GetTask`: the task as it is now, its history cut to the last `historyLength` messages.
pub(super) async fn get(
    s: &AppState,
    tenant: &str,
    id: Id,
    dialect: Dialect,
    g: v1::GetTaskRequest,
) -> Response {
    match s.a2a.read(tenant, &g.id).await {
        Ok(Some(t)) => rpc_ok(id, task_result(t, g.history_length, dialect)),
        Ok(None) => rpc_error(id, dialect, &A2aRequestError::TaskNotFound(g.id)),
        Err(e) => rpc_error(id, dialect, &A2aRequestError::Unavailable(e.to_string())),
    }
}

/// `CancelTask`: the task canceled ([`cancel`]), or why not.
pub(super) async fn canceled(
    s: &AppState,
    tenant: &str,
    id: Id,
    dialect: Dialect,
    c: v1::CancelTaskRequest,
) -> Response {
    match cancel(&s.proxy, &s.a2a, tenant, &c.id).await {
        Ok(t) => rpc_ok(id, task_result(t, None, dialect)),
        Err(e) => rpc_error(id, dialect, &e),
    }
}

/// `SubscribeToTask`: the task as it is, then its events until one ends it; a terminal task
/// has nothing left to stream.
pub(super) async fn subscribe(
    s: &AppState,
    tenant: &str,
    id: Id,
    dialect: Dialect,
    r: v1::SubscribeToTaskRequest,
) -> Response {
    let found = match s.a2a.follow(tenant, &r.id).await {
        Ok(found) => found,
        Err(e) => return rpc_error(id, dialect, &A2aRequestError::Unavailable(e.to_string())),
    };
    match found {
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
    }
}

/// A notification (no `id`): never answered. A cancel is done; a send is not run (nobody
/// could follow or read its task, which would be charged); reads have nothing to do.
pub(super) async fn notification(s: &AppState, tenant: &str, call: Call) -> Response {
    match call {
        Call::Cancel(c) => {
            if let Err(e) = cancel(&s.proxy, &s.a2a, tenant, &c.id).await {
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

/// Starts `job` and answers: an SSE stream, the submitted task at once, or the task once it
/// ends.
async fn start(
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
    let Inserted {
        events: rx,
        session,
        evicted,
    } = match s.a2a.open(&tenant, job.task.clone()).await {
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
                close_context(&proxy, &tenant, &old).await;
            }
        });
    }
    let runner = s.clone();
    let cancelled = registered.cancelled();
    // Tracked: a client that leaves does not stop the task, its settling or its ledger row.
    let spawned = s.proxy.spawn_tracked(async move {
        let _registered = registered;
        crate::proxy::boxed(|| run(&runner.proxy, &runner.a2a, &ctx, job, session)).await;
    });
    let Some(ran) = spawned else {
        let e = ErrorObject::new(ErrorCode::Internal, "the gateway is stopping");
        return rpc(RpcResponse::<Value>::error(id, e));
    };
    if let Some(submitted) = submitted {
        return sse(id, dialect, submitted, rx);
    }
    // Only a stream follows the events (each a copy for its receiver): a blocking send waits
    // for the task's end, or for a cancel, which made it `CANCELED` before it reached the
    // task.
    drop(rx);
    if !now {
        tokio::select! {
            _ = ran => {}
            () = cancelled.cancelled() => {}
        }
    }
    match s.a2a.read(&tenant, &task_id).await {
        Ok(Some(t)) => rpc(RpcResponse::success(id, send_result(t, dialect))),
        Ok(None) => rpc_error(id, dialect, &A2aRequestError::TaskNotFound(task_id)),
        Err(e) => rpc_error(id, dialect, &A2aRequestError::Unavailable(e.to_string())),
    }
}

/// An agent message of `text` in `task`'s context.
fn agent_message(task_id: &str, context_id: &str, text: String) -> Message {
    let mut m = Message::new(crate::ldp::new_id(), Role::Agent, vec![Part::text(text)]);
    m.task_id = task_id.to_owned();
    m.context_id = context_id.to_owned();
    m
}

/// A status event of `task`'s.
fn status_event(
    task_id: &str,
    context_id: &str,
    s: TaskStatus,
    meta: Option<Map>,
) -> StreamResponse {
    StreamResponse::StatusUpdate(Box::new(v1::TaskStatusUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status: s,
        metadata: meta,
        rest: Map::new(),
    }))
}

/// Whether a TASK_FAILED of `code` is a refusal (`TASK_STATE_REJECTED`): the task was not
/// run because a policy, trust, budget, limit or key said no.
pub fn rejects(code: &str) -> bool {
    [
        GatewayCode::BadRequest,
        GatewayCode::Unauthenticated,
        GatewayCode::RateLimited,
        GatewayCode::TrustViolation,
        GatewayCode::NoEligibleDelegate,
        GatewayCode::BudgetExceeded,
        GatewayCode::UnknownPolicy,
        GatewayCode::SessionLimit,
        GatewayCode::LoopDetected,
    ]
    .iter()
    .any(|c| c.as_str() == code)
}

/// The LDP error of a refusal before the task ran.
fn refusal_error(r: &Refusal) -> LdpError {
    let code = match r {
        Refusal::BadRequest(_) => GatewayCode::BadRequest,
        Refusal::Unauthenticated(_) => GatewayCode::Unauthenticated,
        Refusal::RateLimited { .. } => GatewayCode::RateLimited,
        Refusal::Unavailable(_) => GatewayCode::Unavailable,
    };
    LdpError::gateway(code, r.to_string())
}

/// Runs `job` (already in `state` as `SUBMITTED`, its context's session `session` if it
/// has one) for `ctx`'s tenant to its end, telling its listeners as it goes.
pub async fn run(
    proxy: &Proxy,
    state: &A2aState,
    ctx: &RequestCtx,
    job: Job,
    session: Option<crate::ldp::SessionId>,
) {
    let tenant = ctx.tenant.name.as_str();
    let (id, context) = (job.task.id.clone(), job.task.context_id.clone());
    let (session, new) = match session {
        Some(s) => (s, false),
        None => match proxy.open_ingress_session(ctx, Ingress::A2a).await {
            Ok(s) => (s, true),
            Err(e) => return finish_failed(state, tenant, &id, &context, &e, None).await,
        },
    };
    state.bind(tenant, &context, &id, &session, new).await;
    let working = |t: &mut Task| t.status = status(TaskState::Working, None);
    let ev = status_event(&id, &context, status(TaskState::Working, None), None);
    if !state.change(tenant, &id, working, Some(ev)).await {
        return; // canceled (or forgotten) before it started
    }
    let (tx, mut rx) = mpsc::channel::<Envelope>(UPDATES_BUFFERED);
    let task = IngressTask {
        ingress: Ingress::A2a,
        task_id: TaskId::from(id.clone()),
        skill: &job.skill,
        input: job.input,
        chat: None,
        contract: None,
        quorum: None,
        keep_rounds: false,
        ledger_input: None,
    };
    let relay = |env: Envelope| async {
        if let Body::TaskUpdate {
            message: Some(m), ..
        } = env.body
        {
            let s = status(TaskState::Working, Some(agent_message(&id, &context, m)));
            let ev = status_event(&id, &context, s.clone(), None);
            state.change(tenant, &id, |t| t.status = s, Some(ev)).await;
        }
    };
    let fut = proxy.ingress_task_in_session(ctx, task, session.clone(), new, Some(&tx));
    tokio::pin!(fut);
    let outcome = loop {
        tokio::select! {
            r = &mut fut => break r,
            Some(env) = rx.recv() => relay(env).await,
        }
    };
    while let Ok(env) = rx.try_recv() {
        relay(env).await;
    }
    match outcome {
        Ok((trip, ran_in)) => {
            // A fresh session, when the context's had ended.
            let renewed = ran_in != session;
            state.bind(tenant, &context, &id, &ran_in, renewed).await;
            finish(state, tenant, &id, &context, &trip).await;
        }
        Err(r) => finish_failed(state, tenant, &id, &context, &refusal_error(&r), None).await,
    }
}

/// Ends the task with its trip's answer.
async fn finish(state: &A2aState, tenant: &str, id: &str, context: &str, trip: &Trip) {
    let policy = trip.policy.name.0.clone();
    match &trip.reply.body {
        Body::TaskResult {
            output, provenance, ..
        } => {
            let mut meta = Map::new();
            meta.insert("ldp_policy".into(), Value::String(policy));
            if let Some(d) = &trip.delegate {
                meta.insert("ldp_delegate".into(), Value::String(d.client_name()));
            }
            if let Some(p) = provenance {
                meta.insert(
                    "ldp_provenance".into(),
                    serde_json::to_value(p).unwrap_or(Value::Null),
                );
            }
            let part = match output.as_string() {
                Some(text) => Part::text(text),
                None => Part::data(serde_json::from_str(output.get()).unwrap_or(Value::Null)),
            };
            let artifact = Artifact {
                artifact_id: format!("{id}-output"),
                name: "output".into(),
                description: String::new(),
                parts: vec![part],
                metadata: Some(meta.clone()),
                extensions: Vec::new(),
                rest: Map::new(),
            };
            let art_ev = StreamResponse::ArtifactUpdate(Box::new(v1::TaskArtifactUpdateEvent {
                task_id: id.to_owned(),
                context_id: context.to_owned(),
                artifact: artifact.clone(),
                append: false,
                last_chunk: true,
                metadata: None,
                rest: Map::new(),
            }));
            // The artifact first, then the state that ends the stream.
            let s = status(TaskState::Completed, None);
            let ev = status_event(id, context, s.clone(), Some(meta.clone()));
            // The artifact first, then the state that ends the stream: one change.
            state
                .change_told(
                    tenant,
                    id,
                    |t| {
                        t.artifacts = vec![artifact];
                        t.status = s;
                        t.metadata = Some(meta);
                    },
                    vec![art_ev, ev],
                )
                .await;
        }
        Body::TaskFailed { error, .. } => {
            finish_failed(state, tenant, id, context, error, Some(policy)).await
        }
        other => {
            let e = LdpError::gateway(
                GatewayCode::Internal,
                format!("unexpected {} for a task", other.message_type().as_str()),
            );
            finish_failed(state, tenant, id, context, &e, Some(policy)).await
        }
    }
}

/// Ends the task `FAILED` or `REJECTED` with `error`.
async fn finish_failed(
    state: &A2aState,
    tenant: &str,
    id: &str,
    context: &str,
    error: &LdpError,
    policy: Option<String>,
) {
    let s = if rejects(&error.code) {
        TaskState::Rejected
    } else {
        TaskState::Failed
    };
    let text = format!("LDP {}: {}", error.code, error.message);
    let mut meta = Map::new();
    meta.insert(
        "ldp_error".into(),
        serde_json::json!({"code": error.code, "message": error.message}),
    );
    if let Some(p) = policy {
        meta.insert("ldp_policy".into(), Value::String(p));
    }
    let st = status(s, Some(agent_message(id, context, text)));
    let ev = status_event(id, context, st.clone(), Some(meta.clone()));
    state
        .change(
            tenant,
            id,
            |t| {
                t.status = st;
                t.metadata = Some(meta);
            },
            Some(ev),
        )
        .await;
}

/// Closes the session of `tenant`'s context forgotten to make room for a new one.
pub async fn close_context(proxy: &Proxy, tenant: &str, session: &SessionId) {
    proxy
        .close_ingress_session(tenant, Ingress::A2a, session)
        .await;
}

/// Cancels `ctx`'s tenant's task `id`: marked `CANCELED` (its listeners told), then
/// cancelled upstream. Answers the canceled task.
pub async fn cancel(
    proxy: &Proxy,
    state: &A2aState,
    tenant: &str,
    id: &str,
) -> Result<Task, A2aRequestError> {
    let change = |t: &mut Task| {
        let text = "canceled by the client".to_owned();
        t.status = status(
            TaskState::Canceled,
            Some(agent_message(&t.id, &t.context_id, text)),
        );
        status_event(&t.id, &t.context_id, t.status.clone(), None)
    };
    let canceled = state
        .stop(tenant, id, change)
        .await
        .map_err(|e| A2aRequestError::Unavailable(e.to_string()))?;
    match canceled {
        Cancel::NotFound => Err(A2aRequestError::TaskNotFound(cut(id, MAX_ID_BYTES))),
        Cancel::Terminal(s) => Err(A2aRequestError::NotCancelable {
            id: cut(id, MAX_ID_BYTES),
            state: s.as_str().to_owned(),
        }),
        Cancel::Canceled(task, session) => {
            if let Some(session) = session {
                let task_id = TaskId::from(id.to_owned());
                proxy
                    .cancel_task_in_session(tenant, Ingress::A2a, &session, &task_id)
                    .await;
            }
            Ok(*task)
        }
    }
}
