//! The A2A front end (issue 27, item 1): the gateway as one A2A agent. Its Agent
//! Card lists the skills some healthy delegate offers now; each A2A message is one LDP task
//! through the governed pipeline, and its trip comes back as an A2A `Task`.
//!
//! Wire types and JSON-RPC checks are the `a2a-wire` crate's; this file decides:
//!
//! - Methods: `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
//!   `SubscribeToTask` and their v0.3 names (`message/send`, `message/stream`, `tasks/get`,
//!   `tasks/cancel`, `tasks/resubscribe`), answered in the caller's version's shapes. Push
//!   config methods and a send asking for push notifications: -32003; `ListTasks` and
//!   `GetExtendedAgentCard`: -32004. `acceptedOutputModes` is not checked (the output is a
//!   text or a data part).
//! - A notification (a request without an `id` member, JSON-RPC 2.0 §4.1) is never answered
//!   (HTTP 204, no body), its errors neither: a `CancelTask` is done (safe, and a fire-and-forget
//!   cancel is what one means); a send is not run (its task could be neither followed nor
//!   read: the caller never learns its id, and it would be charged), and reads have nothing to
//!   do. `"id": null` is a request with a null id (the spec defines a notification by the
//!   member's absence only), answered with `id: null`. A batch is one -32600 error (`id:
//!   null`), as a batch the server cannot process is (§6), and as the SDK's server answers one.
//! - `A2A-Version`, as the SDK's server checks it: v1.0 names need major version 1, v0.3
//!   names major version 0 (absent or empty means 0.3, spec §3.6.2); else -32009 (which a
//!   v0.3 caller receives as -32603, v0.3 having no -32009).
//! - The task's input: the message's text parts joined by newlines (a lone data part: its
//!   value; data parts among text: their JSON text, in order). File parts: -32005.
//! - The skill: the message's `metadata.skill`, else the request's, else `[a2a]
//!   default_skill`, else -32602. The policy: the message's (else the request's)
//!   `metadata.policy`, else `x-ldp-policy`, else the tenant's.
//! - `contextId` is the session: each context of a tenant runs in its own gateway session
//!   ([`Proxy::ingress_task_in_session`]), so its tasks keep their delegate per skill and an
//!   OpenAI-backed delegate's conversation. A message without one starts a new context (its
//!   id the task's). A context's first task runs on the upstream sessions of the tenant's
//!   A2A session (an LDP delegate's upstream session is opened by the context's second task,
//!   with the same delegate while it fits): a context of one message costs no upstream
//!   handshake or close. A message naming an existing `taskId` is refused (-32004): the gateway
//!   answers every message with a new task, never holds one for more input.
//! - The result: `TASK_STATE_COMPLETED`, one artifact `output` (a string output as a text
//!   part, anything else as a data part), the provenance in `metadata.ldp_provenance` of the
//!   task, of the artifact and of the final status event. A TASK_FAILED: `TASK_STATE_REJECTED`
//!   for the refusals ([`rejects`]), else `TASK_STATE_FAILED`, with an agent message
//!   `LDP <CODE>: <message>` and `metadata.ldp_error`.
//! - `returnImmediately` (v0.3 `blocking: false`) answers the `SUBMITTED` task at once;
//!   `GetTask` polls it. A blocking send whose client leaves does not cancel the task.
//! - Cancel: the task is `CANCELED` at once (its listeners told) and the gateway cancels it
//!   upstream; whatever it still produces is dropped. A terminal task: -32002.
//! - `SubscribeToTask` of a terminal task: -32004 (spec §3.1.6: nothing left to stream).
//! - A task or context is visible only to its tenant: another tenant's id is -32001.
//! - Tasks and contexts are kept in tenant-fair tables bounded in bytes (`[a2a]
//!   max_task_bytes`, `max_context_bytes`; at most [`MAX_CONTEXTS_PER_TENANT`] contexts a
//!   tenant): a tenant over its share forgets its oldest finished tasks and least recently
//!   used contexts first, a running task is never forgotten, and a tenant whose share is full
//!   of running tasks has its next message refused (HTTP 429 with `Retry-After`). In this
//!   process: a restart or another replica does not know them. A task's history is the
//!   user's message, when its input is at most [`MAX_HISTORY_BYTES`].
//!
//! Its routes: `GET /.well-known/agent-card.json` (`agent_card.rs`) and `POST /a2a`,
//! JSON-RPC 2.0 with the tenant Bearer key (this file reads and dispatches; `incoming.rs`
//! reads a request, `lifecycle.rs` runs a send's task and cancels, `rpc.rs` writes the
//! answers, `tasks.rs` keeps the tasks and contexts). JSON-RPC errors are answered with HTTP
//! 200 (as the A2A SDK's server does, and its clients expect); a request refused before it is
//! read is answered with its HTTP status and a JSON-RPC error body (`id: null`, -32600): 401
//! (no or bad key, with `WWW-Authenticate: Bearer`), 413, 400, 408; a panic, 500 with -32603.
//! `SendStreamingMessage` and `SubscribeToTask` answer Server-Sent Events, each `data:` one
//! JSON-RPC response, closed after the terminal state.

mod agent_card;
mod incoming;
mod lifecycle;
mod rpc;
mod tasks;

pub(crate) use agent_card::card;
pub use agent_card::{agent_card, IDENTITY_EXTENSION_URI};
pub use incoming::{job, read, Call, Incoming, Job};
pub use lifecycle::{cancel, close_context, rejects, run};
pub use rpc::{event_result, send_result, task_result, SendResult};
pub use tasks::{task_weight, A2aState, Cancel, Inserted, MAX_CONTEXTS_PER_TENANT};

use crate::frontend::api_error::ApiError;
use crate::frontend::request::{read_json_body, request_ctx};
use crate::frontend::AppState;
use a2a_wire::consts::VERSION_HEADER;
use a2a_wire::v1::{Message, StreamResponse, TaskState, TaskStatus};
use a2a_wire::{Dialect, ErrorCode, ErrorObject, Map};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use rpc::{notified, refused, rpc_error, rpc_failure};

/// The A2A endpoint's path (the card's interface URL).
pub const ROUTE: &str = "/a2a";
/// Longest `contextId`, `taskId` or skill a client may send (bytes).
pub const MAX_ID_BYTES: usize = 256;
/// Most parts in one message.
pub const MAX_PARTS: usize = 64;
/// Largest task input kept as the task's history (the user's message) for `GetTask`; a
/// larger one leaves the history empty.
pub const MAX_HISTORY_BYTES: usize = 16 * 1024;

/// Why a request is answered with a JSON-RPC error.
#[derive(Debug, thiserror::Error)]
pub enum A2aRequestError {
    /// Not JSON, or not one JSON-RPC request (-32700, -32600).
    #[error(transparent)]
    Request(#[from] a2a_wire::RequestError),
    /// No such method (-32601).
    #[error("method {0:?} not found")]
    MethodNotFound(String),
    /// The params do not fit the method (-32602).
    #[error("{0}")]
    InvalidParams(String),
    /// No such task of the caller's (-32001).
    #[error("task {0:?} not found")]
    TaskNotFound(String),
    /// The task is terminal (-32002).
    #[error("task {id:?} is {state} and cannot be canceled")]
    NotCancelable {
        /// The task.
        id: String,
        /// Its state's name.
        state: String,
    },
    /// Push notification config methods (-32003).
    #[error("push notifications are not supported")]
    PushNotSupported,
    /// What the gateway does not offer (-32004).
    #[error("{0}")]
    Unsupported(String),
    /// A part the gateway cannot pass on (-32005).
    #[error("{0}")]
    ContentType(String),
    /// An `A2A-Version` it does not speak for the method (-32009).
    #[error(
        "A2A-Version {0:?} is not supported for this method (v1.0 names need 1.0, v0.3 names 0.3)"
    )]
    Version(String),
    /// Cluster mode: the shared state did not answer (-32603; retry).
    #[error("the shared state is unavailable; retry: {0}")]
    Unavailable(String),
}

impl A2aRequestError {
    /// Its A2A error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            A2aRequestError::Request(e) => e.code(),
            A2aRequestError::MethodNotFound(_) => ErrorCode::MethodNotFound,
            A2aRequestError::InvalidParams(_) => ErrorCode::InvalidParams,
            A2aRequestError::TaskNotFound(_) => ErrorCode::TaskNotFound,
            A2aRequestError::NotCancelable { .. } => ErrorCode::TaskNotCancelable,
            A2aRequestError::PushNotSupported => ErrorCode::PushNotificationNotSupported,
            A2aRequestError::Unsupported(_) => ErrorCode::UnsupportedOperation,
            A2aRequestError::ContentType(_) => ErrorCode::ContentTypeNotSupported,
            A2aRequestError::Version(_) => ErrorCode::VersionNotSupported,
            A2aRequestError::Unavailable(_) => ErrorCode::Internal,
        }
    }

    /// The error object for a caller of `dialect`: JSON-RPC's own codes plain (as the SDK's
    /// dispatcher writes them), A2A's with an `ErrorInfo` detail (v1.0) or as the SDK's v0.3
    /// adapter writes them.
    pub fn to_error(&self, dialect: Dialect) -> ErrorObject {
        let code = self.code();
        let message = cut(&self.to_string(), 512);
        if code.code() <= -32600 {
            return ErrorObject::new(code, message);
        }
        let e = ErrorObject::a2a(code, message, Map::new());
        match dialect {
            Dialect::V1 => e,
            Dialect::V03 => e.to_v03(),
        }
    }
}

/// Cluster mode: hands the events other replicas tell of their A2A tasks to this replica's
/// listeners until `shutdown` (`None` on a single node).
pub fn spawn_shared_events(
    s: AppState,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut events = s.a2a.shared_events()?;
    Some(tokio::spawn(async move {
        loop {
            let note = tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                n = events.recv() => n,
            };
            match note {
                Ok(note) => s.a2a.heard(&note),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        skipped = n,
                        "A2A events from other replicas skipped (behind)"
                    );
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    }))
}

/// `s` cut to at most `max` bytes at a character boundary, owned.
fn cut(s: &str, max: usize) -> String {
    crate::ldp::text::cut(s, max).to_owned()
}

/// A status of `state` now, with `message`.
fn status(state: TaskState, message: Option<Message>) -> TaskStatus {
    let mut s = TaskStatus::new(state);
    s.message = message;
    s.timestamp = Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    s
}

/// Whether an event ends its stream (a terminal or interrupted state).
pub fn is_final(ev: &StreamResponse) -> bool {
    match ev {
        StreamResponse::StatusUpdate(s) => {
            s.status.state.is_terminal() || s.status.state.is_interrupted()
        }
        StreamResponse::Task(t) => t.status.state.is_terminal(),
        _ => false,
    }
}

/// `e` as the A2A routes answer a request they could not read or finish: its HTTP status, a
/// JSON-RPC internal error (-32603, `id: null`).
pub(crate) fn error_answer(e: ApiError) -> Response {
    rpc_failure(e, ErrorCode::Internal)
}

/// `POST /a2a`.
pub(crate) async fn jsonrpc(
    State(s): State<AppState>,
    headers: HeaderMap,
    body: HttpBody,
) -> Response {
    let ctx = match request_ctx(&s, &headers) {
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
    let incoming = match read(&bytes, version) {
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
        return lifecycle::notification(&s, &tenant, incoming.call).await;
    };
    match incoming.call {
        Call::Send { req, stream } => lifecycle::send(s, ctx, id, dialect, req, stream).await,
        Call::Get(g) => lifecycle::get(&s, &tenant, id, dialect, g).await,
        Call::Cancel(c) => lifecycle::canceled(&s, &tenant, id, dialect, c).await,
        Call::Subscribe(r) => lifecycle::subscribe(&s, &tenant, id, dialect, r).await,
    }
}
