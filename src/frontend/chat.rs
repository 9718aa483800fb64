//! What the chat front ends (OpenAI's, Anthropic's) share: a chat as one task through the
//! pipeline and its trip as a neutral outcome (the text, the model, the usage reported or
//! estimated, the rest of the answer, or the refusal with a chat delegate's own), the
//! conversation as one text input for a delegate that reads text, the task's own task (a
//! client that leaves does not stop its settling), and the `x-ldp-*` headers of an answer.

use super::api_error::ApiError;
use super::AppState;
use crate::chat::{self, estimate_tokens, Chat, Usage};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Json, LdpError, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{ChatDelta, IngressTask, Proxy, Refusal, RequestCtx};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How a chat through the gateway ended.
#[derive(Debug)]
pub(crate) struct ChatOutcome {
    /// The policy it ran under.
    pub(crate) policy: String,
    /// The delegate that answered (or last failed), as clients are told of it.
    pub(crate) delegate: Option<String>,
    /// The answer, or why there is none.
    pub(crate) result: Result<Answered, ChatRefusal>,
}

/// An answered chat.
#[derive(Debug)]
pub(crate) struct Answered {
    /// The assistant's text: a result's output if it is a string, else its JSON text.
    pub(crate) text: String,
    /// The model that answered (its provenance's `model_version`).
    pub(crate) model: String,
    /// Token counts: a chat delegate's usage, else estimated from the text.
    pub(crate) usage: Usage,
    /// A chat delegate's answer besides its text (none from other delegates).
    pub(crate) answer: chat::Answer,
}

/// A chat refused or failed.
#[derive(Debug)]
pub(crate) struct ChatRefusal {
    /// The LDP error (its code gives the HTTP status, as on the LDP routes).
    pub(crate) error: LdpError,
    /// A chat delegate's own refusal of the request, to pass on as it came.
    pub(crate) upstream: Option<chat::Refusal>,
    /// A delegate's rate limit: how long it asked to wait (`Retry-After`).
    pub(crate) retry_after: Option<std::time::Duration>,
}

/// The task running a chat, which a leaving client does not stop.
pub(crate) type ChatTask = JoinHandle<Result<ChatOutcome, Refusal>>;

/// Runs `chat` (sent to a delegate that reads text as `input`) for `skill` as task `task_id`
/// of `ctx`'s tenant through `ingress`; pieces go to `deltas` as they come when the client
/// streams.
#[expect(
    clippy::too_many_arguments,
    reason = "one task, every part of it needed"
)]
pub(crate) async fn run(
    proxy: &Proxy,
    ctx: &RequestCtx,
    ingress: Ingress,
    chat: &Chat,
    input: String,
    skill: &str,
    task_id: TaskId,
    deltas: Option<&mpsc::Sender<ChatDelta>>,
) -> Result<ChatOutcome, Refusal> {
    let input = Json::from(Value::String(input));
    let input_tokens = estimate_tokens(input.get().len());
    let task = IngressTask {
        ingress,
        task_id,
        skill,
        input,
        chat: Some(chat),
        contract: None,
        quorum: None,
        keep_rounds: false,
        ledger_input: None,
    };
    let mut trip = proxy.ingress_task(ctx, task, deltas).await?;
    let result = match &trip.reply.body {
        Body::TaskResult {
            output, provenance, ..
        } => {
            let text = output
                .as_string()
                .unwrap_or_else(|| output.get().to_owned());
            let usage = trip
                .usage
                .unwrap_or_else(|| Usage::new(input_tokens, estimate_tokens(text.len())));
            let model = provenance
                .as_ref()
                .map(|p| p.model_version.clone())
                .unwrap_or_default();
            Ok(Answered {
                text,
                model,
                usage,
                answer: trip.chat.take().unwrap_or_default(),
            })
        }
        Body::TaskFailed { error, .. } => Err(ChatRefusal {
            retry_after: trip
                .retry_after
                .filter(|_| error.code == GatewayCode::RateLimited.as_str()),
            error: error.clone(),
            upstream: trip.refused_upstream.take(),
        }),
        other => Err(ChatRefusal {
            error: LdpError::gateway(
                GatewayCode::Internal,
                format!("unexpected {} for a task", other.message_type().as_str()),
            ),
            upstream: None,
            retry_after: None,
        }),
    };
    Ok(ChatOutcome {
        policy: trip.policy.name.0.clone(),
        delegate: trip.delegate.map(|d| d.client_name()),
        result,
    })
}

/// The conversation as one text task for a delegate that reads text: a lone message's text
/// as it is; a system prompt and several messages as a transcript, one `role: text` line each.
pub(crate) fn transcript(system: &str, messages: &[chat::Message]) -> String {
    if let ([only], "") = (messages, system) {
        return only.text();
    }
    let mut out = String::new();
    let lines = (!system.is_empty())
        .then(|| ("system", system.to_owned()))
        .into_iter()
        .chain(messages.iter().map(|m| (m.role.as_str(), m.text())));
    for (role, text) in lines {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(role);
        out.push_str(": ");
        out.push_str(&text);
    }
    out
}

/// The chat task's outcome, or the gateway's refusal of it.
pub(crate) fn joined(
    s: &AppState,
    j: Result<Result<ChatOutcome, Refusal>, tokio::task::JoinError>,
) -> Result<ChatOutcome, ApiError> {
    match j {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(refusal)) => Err(ApiError::from(refusal)),
        Err(e) => Err(super::api_error::task_lost(&s.metrics, e)),
    }
}

/// What a streamed chat gives first: a piece (`Ok`: the stream goes on, with a 200) or, when
/// the task ended before any, its outcome (`Err`).
pub(crate) async fn first_of(
    s: &AppState,
    rx: &mut mpsc::Receiver<ChatDelta>,
    task: &mut ChatTask,
) -> Result<Result<ChatDelta, ChatOutcome>, ApiError> {
    tokio::select! {
        biased;
        Some(d) = rx.recv() => Ok(Ok(d)),
        j = task => Ok(Err(joined(s, j)?)),
    }
}

/// `x-ldp-task-id`, `x-ldp-policy`, `x-ldp-delegate` (the last two when known).
pub(crate) fn ldp_headers(
    task_id: &TaskId,
    policy: Option<&str>,
    delegate: Option<&str>,
) -> HeaderMap {
    let mut h = HeaderMap::new();
    let pairs = [
        ("x-ldp-task-id", Some(task_id.as_str())),
        ("x-ldp-policy", policy),
        ("x-ldp-delegate", delegate),
    ];
    for (name, value) in pairs {
        if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static(name), v);
        }
    }
    h
}

/// A `model` naming a skill, or a skill and a policy as `skill@policy`; `None` when either
/// is empty.
pub(crate) fn skill_and_policy(model: &str) -> Option<(&str, Option<&str>)> {
    let (skill, policy) = match model.split_once('@') {
        Some((skill, policy)) => (skill.trim(), Some(policy.trim())),
        None => (model.trim(), None),
    };
    (!skill.is_empty() && !policy.is_some_and(str::is_empty)).then_some((skill, policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: &str, content: serde_json::Value) -> chat::Message {
        chat::Message {
            role: role.into(),
            content,
            fields: Default::default(),
        }
    }

    #[test]
    fn a_lone_message_is_its_text_and_several_a_transcript() {
        assert_eq!(transcript("", &[m("user", "hi".into())]), "hi");
        let parts =
            serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        let t = transcript("", &[m("system", "be brief".into()), m("user", parts)]);
        assert_eq!(t, "system: be brief\nuser: ab");
        assert_eq!(
            transcript("be brief", &[m("user", "hi".into())]),
            "system: be brief\nuser: hi"
        );
    }

    #[test]
    fn a_model_names_a_skill_and_maybe_a_policy() {
        assert_eq!(skill_and_policy("chat"), Some(("chat", None)));
        assert_eq!(
            skill_and_policy(" chat @ cheapest "),
            Some(("chat", Some("cheapest")))
        );
        assert_eq!(skill_and_policy("@p"), None);
        assert_eq!(skill_and_policy("chat@"), None);
    }
}
