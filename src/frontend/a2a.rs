//! The A2A bridge's translation (issue 27, item 1): the gateway as one A2A agent. Its Agent
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
//!   id the task's). A message naming an existing `taskId` is refused (-32004): the gateway
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

mod tasks;

pub use tasks::{task_weight, A2aState, Cancel, Inserted, MAX_CONTEXTS_PER_TENANT};

use crate::ldp::error::GatewayCode;
use crate::ldp::text::cut;
use crate::ldp::{Body, Envelope, Json, LdpError, SessionId, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{IngressTask, Proxy, Refusal, RequestCtx, Trip};
use a2a_wire::v1::{
    self, Artifact, Message, Part, PartContent, Role, StreamResponse, Task, TaskState, TaskStatus,
};
use a2a_wire::{
    v03, AgentCard, AgentExtension, AgentInterface, AgentSkill, Dialect, ErrorCode, ErrorObject,
    Id, IncomingRequest, Map, Method, ProtocolVersion, SecurityScheme,
};
use serde_json::Value;
use tokio::sync::mpsc;

/// The A2A endpoint's path (the card's interface URL).
pub const ROUTE: &str = "/a2a";
/// The URI of the card extension carrying the gateway's LDP identity as the RFC §9.1
/// `ldp.*` labels (in its `params`).
pub const IDENTITY_EXTENSION_URI: &str = "urn:ldp:a2a:identity:v1";
/// Longest `contextId`, `taskId` or skill a client may send (bytes).
pub const MAX_ID_BYTES: usize = 256;
/// Most parts in one message.
pub const MAX_PARTS: usize = 64;
/// Largest task input kept as the task's history (the user's message) for `GetTask`; a
/// larger one leaves the history empty.
pub const MAX_HISTORY_BYTES: usize = 16 * 1024;
/// TASK_UPDATEs buffered between the task and its listeners.
const UPDATES_BUFFERED: usize = 64;
/// The security scheme's name on the card.
const BEARER: &str = "bearer";

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
        }
    }

    /// The error object for a caller of `dialect`: JSON-RPC's own codes plain (as the SDK's
    /// dispatcher writes them), A2A's with an `ErrorInfo` detail (v1.0) or as the SDK's v0.3
    /// adapter writes them.
    pub fn to_error(&self, dialect: Dialect) -> ErrorObject {
        let code = self.code();
        let message = cut(&self.to_string(), 512).to_owned();
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

/// One request read: its id, its caller's version and what it asks.
#[derive(Debug)]
pub struct Incoming {
    /// The id to answer with; `None` for a notification (no `id` member), which is never
    /// answered (JSON-RPC 2.0 §4.1). `"id": null` is a request, answered with `id: null`.
    pub id: Option<Id>,
    /// The caller's shapes.
    pub dialect: Dialect,
    /// What it asks.
    pub call: Call,
}

/// What a request asks (in v1.0 terms, whatever its version).
#[derive(Debug)]
pub enum Call {
    /// `SendMessage` / `SendStreamingMessage`.
    Send {
        /// The request.
        req: Box<v1::SendMessageRequest>,
        /// Answered as SSE.
        stream: bool,
    },
    /// `GetTask`.
    Get(v1::GetTaskRequest),
    /// `CancelTask`.
    Cancel(v1::CancelTaskRequest),
    /// `SubscribeToTask`.
    Subscribe(v1::SubscribeToTaskRequest),
}

/// Reads a JSON-RPC request (`version`: the `A2A-Version` header). On error: the id to
/// answer with (`None` for a notification's error, which is not answered: JSON-RPC 2.0 §4.1
/// lets a notification's caller learn of no error; a body that is no request at all is
/// answered, `id: null`, §5.1), the dialect, and why.
pub fn read(
    body: &[u8],
    version: Option<&str>,
) -> Result<Incoming, (Option<Id>, Dialect, A2aRequestError)> {
    let req = IncomingRequest::parse(body).map_err(|e| (Some(e.id()), Dialect::V1, e.into()))?;
    let id = req.id.clone();
    let Some((method, dialect)) = Method::from_name(&req.method) else {
        let name = cut(&req.method, MAX_ID_BYTES).to_owned();
        return Err((id, Dialect::V1, A2aRequestError::MethodNotFound(name)));
    };
    let fail = |e| (id.clone(), dialect, e);
    let spoken = ProtocolVersion::from_header(version).and_then(ProtocolVersion::dialect);
    if spoken != Some(dialect) {
        let v = cut(version.unwrap_or_default(), MAX_ID_BYTES).to_owned();
        return Err(fail(A2aRequestError::Version(v)));
    }
    let bad = |e: a2a_wire::ParamsError| A2aRequestError::InvalidParams(e.to_string());
    let call = match (method, dialect) {
        (Method::SendMessage | Method::SendStreamingMessage, Dialect::V1) => Call::Send {
            req: Box::new(req.params().map_err(|e| fail(bad(e)))?),
            stream: method == Method::SendStreamingMessage,
        },
        (Method::SendMessage | Method::SendStreamingMessage, Dialect::V03) => {
            let p: v03::MessageSendParams = req.params().map_err(|e| fail(bad(e)))?;
            Call::Send {
                req: Box::new(p.into()),
                stream: method == Method::SendStreamingMessage,
            }
        }
        (Method::GetTask, Dialect::V1) => Call::Get(req.params().map_err(|e| fail(bad(e)))?),
        (Method::GetTask, Dialect::V03) => {
            let p: v03::TaskQueryParams = req.params().map_err(|e| fail(bad(e)))?;
            Call::Get(p.into())
        }
        (Method::CancelTask, Dialect::V1) => Call::Cancel(req.params().map_err(|e| fail(bad(e)))?),
        (Method::CancelTask, Dialect::V03) => {
            let p: v03::TaskIdParams = req.params().map_err(|e| fail(bad(e)))?;
            Call::Cancel(p.into())
        }
        (Method::SubscribeToTask, Dialect::V1) => {
            Call::Subscribe(req.params().map_err(|e| fail(bad(e)))?)
        }
        (Method::SubscribeToTask, Dialect::V03) => {
            let p: v03::TaskIdParams = req.params().map_err(|e| fail(bad(e)))?;
            Call::Subscribe(p.into())
        }
        (
            Method::CreateTaskPushNotificationConfig
            | Method::GetTaskPushNotificationConfig
            | Method::ListTaskPushNotificationConfigs
            | Method::DeleteTaskPushNotificationConfig,
            _,
        ) => return Err(fail(A2aRequestError::PushNotSupported)),
        (Method::ListTasks | Method::GetExtendedAgentCard, _) => {
            let name = method.name(dialect).unwrap_or_default();
            return Err(fail(A2aRequestError::Unsupported(format!(
                "{name} is not offered by the gateway"
            ))));
        }
    };
    Ok(Incoming { id, dialect, call })
}

/// A message checked and turned into a task to run.
#[derive(Debug)]
pub struct Job {
    /// The new task's snapshot (`SUBMITTED`, the user's message as its history).
    pub task: Task,
    /// Its skill.
    pub skill: String,
    /// Its input.
    pub input: Json,
    /// The policy it names (`metadata.policy`).
    pub policy: Option<String>,
}

/// Checks a send request and makes the task it asks for.
pub fn job(
    req: v1::SendMessageRequest,
    default_skill: Option<&str>,
) -> Result<Job, A2aRequestError> {
    let v1::SendMessageRequest {
        message,
        metadata,
        configuration,
        ..
    } = req;
    if configuration.is_some_and(|c| c.task_push_notification_config.is_some()) {
        return Err(A2aRequestError::PushNotSupported);
    }
    if !message.task_id.is_empty() {
        return Err(A2aRequestError::Unsupported(
            "the gateway answers each message with a new task and does not continue one: \
             send it without taskId (in the same contextId)"
                .into(),
        ));
    }
    let meta = |key: &str| -> Result<Option<String>, A2aRequestError> {
        let v = [message.metadata.as_ref(), metadata.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|m| m.get(key));
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= MAX_ID_BYTES => {
                Ok(Some(s.trim().to_owned()))
            }
            Some(_) => Err(A2aRequestError::InvalidParams(format!(
                "metadata.{key} must be a non-empty string of at most {MAX_ID_BYTES} bytes"
            ))),
        }
    };
    let skill = match meta("skill")?.or_else(|| default_skill.map(str::to_owned)) {
        Some(s) => s,
        None => {
            return Err(A2aRequestError::InvalidParams(
                "no skill: set metadata.skill (the gateway has no default A2A skill)".into(),
            ))
        }
    };
    let policy = meta("policy")?;
    if message.context_id.len() > MAX_ID_BYTES {
        return Err(A2aRequestError::InvalidParams(format!(
            "contextId is over {MAX_ID_BYTES} bytes"
        )));
    }
    let input = input_of(&message.parts)?;
    let id = crate::ldp::new_id();
    let context_id = if message.context_id.is_empty() {
        id.clone()
    } else {
        message.context_id.clone()
    };
    let mut user = message;
    user.context_id = context_id.clone();
    user.task_id = id.clone();
    let history = if input.get().len() <= MAX_HISTORY_BYTES {
        vec![user]
    } else {
        Vec::new()
    };
    let task = Task {
        id,
        context_id,
        status: status(TaskState::Submitted, None),
        artifacts: Vec::new(),
        history,
        metadata: None,
        rest: Map::new(),
    };
    Ok(Job {
        task,
        skill,
        input,
        policy,
    })
}

/// The task input of a message's parts.
fn input_of(parts: &[Part]) -> Result<Json, A2aRequestError> {
    if parts.is_empty() {
        return Err(A2aRequestError::InvalidParams(
            "the message has no parts".into(),
        ));
    }
    if parts.len() > MAX_PARTS {
        return Err(A2aRequestError::InvalidParams(format!(
            "the message has more than {MAX_PARTS} parts"
        )));
    }
    if let [Part {
        content: PartContent::Data(v),
        ..
    }] = parts
    {
        return Ok(Json::from_value(v));
    }
    let mut text = String::new();
    for p in parts {
        if !text.is_empty() {
            text.push('\n');
        }
        match &p.content {
            PartContent::Text(t) => text.push_str(t),
            PartContent::Data(v) => text.push_str(&v.to_string()),
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(A2aRequestError::ContentType(
                    "file parts are not accepted: send text or data parts".into(),
                ))
            }
        }
    }
    Ok(Json::from(Value::String(text)))
}

/// A status of `state` now, with `message`.
fn status(state: TaskState, message: Option<Message>) -> TaskStatus {
    let mut s = TaskStatus::new(state);
    s.message = message;
    s.timestamp = Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    s
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

/// The agent's Agent Card (v1.0 shape) for the A2A endpoint at `url`.
pub fn agent_card(proxy: &Proxy, url: &str) -> AgentCard {
    let id = proxy.identity_card(None);
    let mut labels = Map::new();
    let mut label = |k: &str, v: Option<String>| {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            labels.insert(format!("ldp.{k}"), Value::String(v));
        }
    };
    label("delegate_id", Some(id.delegate_id.clone()));
    label("model_family", Some(id.model_family.clone()));
    label("model_version", Some(id.model_version.clone()));
    label("trust_domain", Some(id.trust_domain.name.clone()));
    label("context_window", id.context_window.map(|w| w.to_string()));
    label("weights_fingerprint", id.weights_fingerprint.clone());
    label("reasoning_profile", id.reasoning_profile.clone());
    label("cost_profile", id.cost_profile.clone());
    label("latency_profile", id.latency_profile.clone());
    label("jurisdiction", id.jurisdiction.clone());
    let modes: Vec<String> = id
        .supported_payload_modes
        .iter()
        .map(|m| m.to_string())
        .collect();
    label("payload_modes", Some(modes.join(",")));
    let skills = id
        .capabilities
        .iter()
        .map(|c| AgentSkill {
            id: c.name.clone(),
            name: c.name.clone(),
            description: c
                .description
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| format!("The {} skill, routed by policy", c.name)),
            tags: vec!["ldp".into(), c.name.clone()],
            ..AgentSkill::default()
        })
        .collect();
    let requirement = a2a_wire::card::SecurityRequirement {
        schemes: [(BEARER.to_owned(), Default::default())].into(),
        rest: Map::new(),
    };
    AgentCard {
        name: id.name.clone(),
        description: id.description.clone().unwrap_or_default(),
        supported_interfaces: vec![AgentInterface {
            url: url.to_owned(),
            protocol_binding: a2a_wire::consts::BINDING_JSONRPC.into(),
            tenant: String::new(),
            protocol_version: a2a_wire::consts::PROTOCOL_VERSION_1_0.into(),
            rest: Map::new(),
        }],
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: Some(a2a_wire::card::AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: vec![AgentExtension {
                uri: IDENTITY_EXTENSION_URI.into(),
                description: "The gateway's LDP identity (LDP RFC §9.1 labels)".into(),
                required: None,
                params: Some(labels),
                rest: Map::new(),
            }],
            ..Default::default()
        }),
        security_schemes: [(
            BEARER.to_owned(),
            SecurityScheme::http_bearer("The tenant's API key"),
        )]
        .into(),
        security_requirements: vec![requirement],
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills,
        ..AgentCard::default()
    }
}

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
    let session = match session {
        Some(s) => s,
        None => match proxy.open_ingress_session(ctx, Ingress::A2a).await {
            Ok(s) => s,
            Err(e) => return finish_failed(state, tenant, &id, &context, &e, None),
        },
    };
    state.set_session(tenant, &context, &id, &session);
    let working = |t: &mut Task| t.status = status(TaskState::Working, None);
    let ev = status_event(&id, &context, status(TaskState::Working, None), None);
    if !state.update(tenant, &id, working, Some(ev)) {
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
    let relay = |env: Envelope| {
        if let Body::TaskUpdate {
            message: Some(m), ..
        } = env.body
        {
            let s = status(TaskState::Working, Some(agent_message(&id, &context, m)));
            let ev = status_event(&id, &context, s.clone(), None);
            state.update(tenant, &id, |t| t.status = s, Some(ev));
        }
    };
    let fut = proxy.ingress_task_in_session(ctx, task, session, Some(&tx));
    tokio::pin!(fut);
    let outcome = loop {
        tokio::select! {
            r = &mut fut => break r,
            Some(env) = rx.recv() => relay(env),
        }
    };
    while let Ok(env) = rx.try_recv() {
        relay(env);
    }
    match outcome {
        Ok((trip, session)) => {
            state.set_session(tenant, &context, &id, &session);
            finish(state, tenant, &id, &context, &trip);
        }
        Err(r) => finish_failed(state, tenant, &id, &context, &refusal_error(&r), None),
    }
}

/// Ends the task with its trip's answer.
fn finish(state: &A2aState, tenant: &str, id: &str, context: &str, trip: &Trip) {
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
            state.update(tenant, id, |t| t.artifacts = vec![artifact], Some(art_ev));
            let s = status(TaskState::Completed, None);
            let ev = status_event(id, context, s.clone(), Some(meta.clone()));
            state.update(
                tenant,
                id,
                |t| {
                    t.status = s;
                    t.metadata = Some(meta);
                },
                Some(ev),
            );
        }
        Body::TaskFailed { error, .. } => {
            finish_failed(state, tenant, id, context, error, Some(policy))
        }
        other => {
            let e = LdpError::gateway(
                GatewayCode::Internal,
                format!("unexpected {} for a task", other.message_type().as_str()),
            );
            finish_failed(state, tenant, id, context, &e, Some(policy))
        }
    }
}

/// Ends the task `FAILED` or `REJECTED` with `error`.
fn finish_failed(
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
    state.update(
        tenant,
        id,
        |t| {
            t.status = st;
            t.metadata = Some(meta);
        },
        Some(ev),
    );
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
    match state.cancel(tenant, id, change) {
        Cancel::NotFound => Err(A2aRequestError::TaskNotFound(
            cut(id, MAX_ID_BYTES).to_owned(),
        )),
        Cancel::Terminal(s) => Err(A2aRequestError::NotCancelable {
            id: cut(id, MAX_ID_BYTES).to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn send(body: Value, version: Option<&str>) -> Result<Incoming, i64> {
        read(body.to_string().as_bytes(), version).map_err(|(_, _, e)| e.code().code())
    }

    #[test]
    fn versions_methods_and_params_are_checked_in_order() {
        let msg = serde_json::json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "hi"}]}});
        let req = |m: &str, p: &Value| serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": m, "params": p});
        assert!(send(req("SendMessage", &msg), Some("1.0")).is_ok());
        assert_eq!(send(req("SendMessage", &msg), None).unwrap_err(), -32009);
        assert_eq!(
            send(req("SendMessage", &msg), Some("2.0")).unwrap_err(),
            -32009
        );
        assert_eq!(send(req("Nope", &msg), Some("1.0")).unwrap_err(), -32601);
        assert_eq!(send(req("GetTask", &msg), Some("1.0")).unwrap_err(), -32602);
        let v03 = serde_json::json!({"message": {"kind": "message", "messageId": "m",
            "role": "user", "parts": [{"kind": "text", "text": "hi"}]}});
        assert!(send(req("message/send", &v03), None).is_ok());
        let push = serde_json::json!({"taskId": "t"});
        assert_eq!(
            send(req("tasks/pushNotificationConfig/get", &push), None).unwrap_err(),
            -32003
        );
        assert_eq!(
            send(req("ListTasks", &push), Some("1.0")).unwrap_err(),
            -32004
        );
        assert_eq!(
            read(b"{", None).map_err(|e| e.2.code().code()).unwrap_err(),
            -32700
        );
    }

    #[test]
    fn a_notification_has_no_id_to_answer_with_and_a_null_id_is_a_request() {
        let get = |id: Option<Value>, method: &str| {
            let mut r = serde_json::json!({"jsonrpc": "2.0", "method": method,
                "params": {"id": "t"}});
            if let Some(id) = id {
                r["id"] = id;
            }
            read(r.to_string().as_bytes(), Some("1.0"))
        };
        assert_eq!(get(None, "GetTask").unwrap().id, None);
        assert_eq!(
            get(Some(Value::Null), "GetTask").unwrap().id,
            Some(Id::Null)
        );
        assert_eq!(
            get(Some(7.into()), "GetTask").unwrap().id,
            Some(Id::from(7))
        );
        // A notification's errors have no id: they are not answered.
        let (id, _, e) = get(None, "Nope").unwrap_err();
        assert_eq!((id, e.code()), (None, ErrorCode::MethodNotFound));
        let (id, _, _) = get(Some(Value::Null), "Nope").unwrap_err();
        assert_eq!(id, Some(Id::Null));
        // A body that is no request is answered, `id: null`.
        let (id, _, e) = read(br#"{"method": "GetTask"}"#, None).unwrap_err();
        assert_eq!((id, e.code()), (Some(Id::Null), ErrorCode::InvalidRequest));
        let (id, _, _) = read(br#"[{"jsonrpc": "2.0", "method": "GetTask"}]"#, None).unwrap_err();
        assert_eq!(id, Some(Id::Null));
    }

    #[test]
    fn a_message_needs_a_skill_and_no_task_id() {
        let m = |meta: Value, task: &str| {
            let mut m = Message::new("m", Role::User, vec![Part::text("hi")]);
            m.metadata = meta.as_object().cloned();
            m.task_id = task.into();
            v1::SendMessageRequest {
                tenant: String::new(),
                message: m,
                configuration: None,
                metadata: None,
                rest: Map::new(),
            }
        };
        let no_skill = job(m(serde_json::json!({}), ""), None);
        assert!(matches!(no_skill, Err(A2aRequestError::InvalidParams(_))));
        let j = job(m(serde_json::json!({}), ""), Some("sum")).unwrap();
        assert_eq!(
            (j.skill.as_str(), j.task.context_id == j.task.id),
            ("sum", true)
        );
        let j = job(
            m(serde_json::json!({"skill": "x", "policy": "p"}), ""),
            Some("sum"),
        )
        .unwrap();
        assert_eq!((j.skill.as_str(), j.policy.as_deref()), ("x", Some("p")));
        let bad = job(m(serde_json::json!({"skill": 3}), ""), None);
        assert!(matches!(bad, Err(A2aRequestError::InvalidParams(_))));
        let cont = job(m(serde_json::json!({}), "t1"), Some("sum"));
        assert!(matches!(cont, Err(A2aRequestError::Unsupported(_))));
    }

    #[test]
    fn parts_become_the_input() {
        let text = input_of(&[Part::text("a"), Part::data(serde_json::json!({"k": 1}))]);
        assert_eq!(text.unwrap().as_string().as_deref(), Some("a\n{\"k\":1}"));
        let data = input_of(&[Part::data(serde_json::json!({"k": 1}))]).unwrap();
        assert_eq!(data.get(), "{\"k\":1}");
        assert!(matches!(
            input_of(&[]),
            Err(A2aRequestError::InvalidParams(_))
        ));
        let file = Part {
            content: PartContent::Url("https://example.com/f".into()),
            ..Part::text("")
        };
        assert!(matches!(
            input_of(&[file]),
            Err(A2aRequestError::ContentType(_))
        ));
    }
}
