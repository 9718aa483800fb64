//! The OpenAI ingress's translation: one chat completion as one task, and the task's answer
//! as the completion's parts (text, model, usage, finish reason, the delegate's other message
//! fields) or its refusal.

use crate::chat;
use crate::chat::estimate_tokens;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Json, LdpError, TaskId};
use crate::provenance::Ingress;
use crate::proxy::{ChatDelta, IngressTask, Proxy, Refusal, RequestCtx};
use openai_wire::{ChatRequest, ErrorDetail, PromptTokensDetails, Usage};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

/// How a chat completion through the gateway ended.
#[derive(Debug)]
pub struct ChatOutcome {
    /// The task's id (its ledger row's).
    pub task_id: TaskId,
    /// The policy it ran under.
    pub policy: String,
    /// The delegate that answered (or last failed), if one was routed to.
    pub delegate: Option<String>,
    /// The answer, or why there is none.
    pub result: Result<ChatReply, ChatRefusal>,
}

/// An answered completion.
#[derive(Debug)]
pub struct ChatReply {
    /// The assistant's text: an LDP result's output if it is a string, else its JSON text.
    pub content: String,
    /// The model that answered (its provenance's `model_version`).
    pub model: String,
    /// Token counts: an OpenAI-backed delegate's usage, else estimated from the text.
    pub usage: Usage,
    /// Why the answer stopped: an OpenAI-backed delegate's `finish_reason`, else `stop`.
    pub finish_reason: String,
    /// An OpenAI-backed delegate's message fields besides its text (`tool_calls`,
    /// `function_call`, `refusal`, …), as it sent them.
    pub other: Map<String, Value>,
}

/// A completion refused or failed.
#[derive(Debug)]
pub struct ChatRefusal {
    /// The LDP error (its code gives the HTTP status, as on the LDP routes).
    pub error: LdpError,
    /// An OpenAI-backed delegate's own refusal of the request (status and error), to pass
    /// on as it came.
    pub upstream: Option<(u16, ErrorDetail)>,
    /// A delegate's rate limit: how long it asked to wait (`Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

/// Runs `req` for `skill` as task `task_id` of `ctx`'s tenant; content deltas go to `deltas`
/// as they come when the client streams.
pub async fn chat(
    proxy: &Proxy,
    ctx: &RequestCtx,
    req: ChatRequest,
    skill: &str,
    task_id: TaskId,
    deltas: Option<&mpsc::Sender<ChatDelta>>,
) -> Result<ChatOutcome, Refusal> {
    let req = chat::Chat::from(req);
    let input = Json::from(Value::String(input_text(&req.messages)));
    let input_len = input.get().len();
    let task = IngressTask {
        ingress: Ingress::Openai,
        task_id,
        skill,
        input,
        chat: Some(&req),
        contract: None,
        quorum: None,
        keep_rounds: false,
        ledger_input: None,
    };
    let mut trip = proxy.ingress_task(ctx, task, deltas).await?;
    let answer = trip.chat.take().unwrap_or_default();
    let result = match &trip.reply.body {
        Body::TaskResult {
            output, provenance, ..
        } => {
            let content = output
                .as_string()
                .unwrap_or_else(|| output.get().to_owned());
            let usage = match trip.usage {
                Some(u) => Usage {
                    prompt_tokens: u.prompt_tokens(),
                    completion_tokens: u.output_tokens,
                    total_tokens: u.total_tokens,
                    prompt_tokens_details: (u.cache_read_tokens > 0).then_some(
                        PromptTokensDetails {
                            cached_tokens: u.cache_read_tokens,
                        },
                    ),
                },
                None => Usage::new(estimate_tokens(input_len), estimate_tokens(content.len())),
            };
            let model = provenance
                .as_ref()
                .map(|p| p.model_version.clone())
                .unwrap_or_default();
            Ok(ChatReply {
                content,
                model,
                usage,
                finish_reason: answer
                    .finish
                    .as_ref()
                    .map_or("stop", chat::openai::finish_reason)
                    .to_owned(),
                other: chat::openai::message_fields(&answer),
            })
        }
        Body::TaskFailed { error, .. } => Err(ChatRefusal {
            retry_after: trip
                .retry_after
                .filter(|_| error.code == GatewayCode::RateLimited.as_str()),
            error: error.clone(),
            upstream: trip.refused_upstream.take().map(|r| {
                let detail = ErrorDetail {
                    message: r.message,
                    kind: r.kind,
                    param: r.param,
                    code: r.code,
                };
                (r.status, detail)
            }),
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
        task_id: trip.task_id,
        policy: trip.policy.name.0.clone(),
        delegate: trip.delegate.map(|d| d.client_name()),
        result,
    })
}

/// The request in the pipeline's words: its messages, its output bound and its other
/// parameters as they came (`model`, `stream` and `stream_options` are the front end's).
impl From<ChatRequest> for chat::Chat {
    fn from(req: ChatRequest) -> chat::Chat {
        let max_output_tokens = req.max_output_tokens();
        let newer_bound = req.max_completion_tokens.is_some() && req.max_tokens.is_none();
        chat::Chat {
            dialect: chat::Dialect::OpenAi,
            headers: Vec::new(),
            messages: req
                .messages
                .into_iter()
                .map(|m| chat::Message {
                    role: m.role,
                    content: m.content,
                    fields: m.extra,
                })
                .collect(),
            max_output_tokens,
            newer_bound,
            params: req.extra,
        }
    }
}

/// The conversation as one text task for an LDP delegate: a lone message's text as it is;
/// several as a transcript, one `role: text` line each.
fn input_text(messages: &[chat::Message]) -> String {
    if let [only] = messages {
        return only.text();
    }
    let mut out = String::new();
    for m in messages {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&m.role);
        out.push_str(": ");
        out.push_str(&m.text());
    }
    out
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
        assert_eq!(input_text(&[m("user", "hi".into())]), "hi");
        let parts =
            serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        let t = input_text(&[m("system", "be brief".into()), m("user", parts)]);
        assert_eq!(t, "system: be brief\nuser: ab");
    }
}
