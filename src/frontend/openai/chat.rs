//! The OpenAI front end's translation: one chat completion as one task (the request as a
//! chat in OpenAI's dialect, its messages as one text input for a delegate that reads text),
//! and the task's answer as the completion's parts (text, model, usage, finish reason, the
//! message's other fields) or its refusal.

use crate::chat;
use crate::frontend::chat::{run, transcript, Answered, ChatOutcome};
use crate::ldp::TaskId;
use crate::provenance::Ingress;
use crate::proxy::{ChatDelta, Proxy, Refusal, RequestCtx};
use openai_wire::{ChatRequest, PromptTokensDetails, Usage};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

/// An answered completion, in OpenAI's words.
#[derive(Debug)]
pub(crate) struct ChatReply {
    /// The assistant's text: a result's output if it is a string, else its JSON text.
    pub(crate) content: String,
    /// The model that answered (its provenance's `model_version`).
    pub(crate) model: String,
    /// Token counts: a chat delegate's usage, else estimated from the text.
    pub(crate) usage: Usage,
    /// Why the answer stopped: a chat delegate's reason in OpenAI's words, else `stop`.
    pub(crate) finish_reason: String,
    /// The message's fields besides its text (`tool_calls`, `function_call`, `refusal`, …): an
    /// OpenAI-backed delegate's as it sent them, another chat delegate's tool calls.
    pub(crate) other: Map<String, Value>,
}

/// Runs `req` for `skill` as task `task_id` of `ctx`'s tenant; pieces go to `deltas` as they
/// come when the client streams.
pub(crate) async fn chat(
    proxy: &Proxy,
    ctx: &RequestCtx,
    req: ChatRequest,
    skill: &str,
    task_id: TaskId,
    deltas: Option<&mpsc::Sender<ChatDelta>>,
) -> Result<ChatOutcome, Refusal> {
    let chat = chat::Chat::from(req);
    // OpenAI's system prompt is among its messages.
    let input = transcript("", &chat.messages);
    run(
        proxy,
        ctx,
        Ingress::Openai,
        &chat,
        input,
        skill,
        task_id,
        deltas,
    )
    .await
}

/// An answer in OpenAI's words.
pub(super) fn reply_of(a: Answered) -> ChatReply {
    let u = a.usage;
    ChatReply {
        usage: Usage {
            prompt_tokens: u.prompt_tokens(),
            completion_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            prompt_tokens_details: (u.cache_read_tokens > 0).then_some(PromptTokensDetails {
                cached_tokens: u.cache_read_tokens,
            }),
        },
        finish_reason: a
            .answer
            .finish
            .as_ref()
            .map_or("stop", chat::openai::finish_reason)
            .to_owned(),
        other: chat::openai::message_fields(&a.answer),
        content: a.text,
        model: a.model,
    }
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
