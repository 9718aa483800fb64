//! What the pipeline knows of a chat, in no front end's or upstream's words: the turns of a
//! conversation the gateway keeps for a delegate that keeps none. The front ends and the
//! upstream kinds translate their own wire to and from these.

use std::sync::Arc;

/// Weight of a turn beyond its text (so that empty turns are not free).
pub const TURN_OVERHEAD: usize = 32;

/// One exchange: what the user sent and what the assistant answered.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The task's input as text.
    pub user: Arc<str>,
    /// The answer's text.
    pub assistant: Arc<str>,
}

impl Turn {
    /// Its weight: its text and [`TURN_OVERHEAD`].
    pub fn bytes(&self) -> usize {
        self.user.len() + self.assistant.len() + TURN_OVERHEAD
    }
}

use serde::Serialize;
use serde_json::{Map, Value};

/// A chat front end's request as the pipeline carries it: the conversation and what the client
/// asked of the answer. What the gateway does not read is kept as it came (a message's other
/// fields, the request's other parameters), for a delegate that speaks the client's protocol.
#[derive(Debug, Default)]
pub struct Chat {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The most output tokens the client asked for, if it did.
    pub max_output_tokens: Option<u64>,
    /// Whether the client named that bound the newer way (OpenAI's `max_completion_tokens`,
    /// which reasoning models take) rather than the older (`max_tokens`).
    pub newer_bound: bool,
    /// Every other parameter (`temperature`, `tools`, `tool_choice`, …), as it came.
    pub params: Map<String, Value>,
}

/// One message of a conversation: its role, its content (a string, an array of parts, or
/// null), and its other fields (`name`, `tool_calls`, `tool_call_id`, …) as they came.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// A string, an array of parts, or null.
    pub content: Value,
    /// Every other field.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Message {
    /// The content's text: the string, or the `text` of each part, joined.
    pub fn text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect(),
            _ => String::new(),
        }
    }
}

/// Token counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// Both.
    pub total_tokens: u64,
}

impl Usage {
    /// Usage of `input` and `output` tokens.
    pub fn new(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input.saturating_add(output),
        }
    }
}

/// A chat delegate's refusal of the request itself (a 4xx about what was asked), as it gave
/// it, for a chat front end to pass on.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// Its HTTP status.
    pub status: u16,
    /// What went wrong, for people.
    pub message: String,
    /// Its kind (`invalid_request_error`, …).
    pub kind: Option<String>,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code (some servers send a number).
    pub code: Option<Value>,
}
