//! An A2A request read: the JSON-RPC envelope and method (`a2a-wire`), the caller's version
//! (`A2A-Version`), the params as a [`Call`]; a send's message checked and made a [`Job`]
//! (skill, policy, input, the submitted task).

use super::{cut, status, A2aRequestError, MAX_HISTORY_BYTES, MAX_ID_BYTES, MAX_PARTS};
use crate::ldp::Json;
use a2a_wire::v1::{self, Part, PartContent, Task, TaskState};
use a2a_wire::{v03, Dialect, Id, IncomingRequest, Map, Method, ProtocolVersion};
use serde_json::Value;

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
        let name = cut(&req.method, MAX_ID_BYTES);
        return Err((id, Dialect::V1, A2aRequestError::MethodNotFound(name)));
    };
    let fail = |e| (id.clone(), dialect, e);
    let spoken = ProtocolVersion::from_header(version).and_then(ProtocolVersion::dialect);
    if spoken != Some(dialect) {
        let v = cut(version.unwrap_or_default(), MAX_ID_BYTES);
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
    let id = crate::ldp::new_task_id();
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

#[cfg(test)]
mod tests {
    use super::*;
    use a2a_wire::v1::{Message, Role};
    use a2a_wire::ErrorCode;

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
