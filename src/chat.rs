//! What the pipeline knows of a chat, in no front end's or upstream's words. A chat front
//! end's request travels as it came ([`Chat`]: its messages and parameters in its
//! [`Dialect`]), so a delegate of the same dialect is sent it untouched; a delegate of another
//! reads it as a [`Conversation`], the neutral form every dialect reads into and writes from.
//! A chat delegate's answer comes back the same way: its text and [`Usage`], the neutral
//! [`Answer`] (finish, tool calls) and its own parts as they came ([`Native`]), for a client
//! of its dialect. Streams likewise ([`Delta`]).
//!
//! Each dialect's translation, both ways, is one room: `openai.rs` and `anthropic.rs`. The
//! front ends and upstream kinds call them; the pipeline carries these types and reads none
//! of the wire.

pub mod anthropic;
pub mod openai;

use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;

/// Weight of a turn beyond its text (so that empty turns are not free).
pub const TURN_OVERHEAD: usize = 32;

/// One exchange the gateway remembers for a delegate that keeps no conversation: what the
/// user sent and what the assistant answered.
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

/// Rough token count of `bytes` of text: a quarter of its bytes, rounded up (what budgets
/// and context windows are estimated with; usage, when a delegate reports it, is the truth).
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// The wire a chat's messages, or an answer's own parts, are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's chat completions.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// A chat front end's request as the pipeline carries it: the conversation and its
/// parameters as they came, in the client's dialect, and what the gateway reads of them.
#[derive(Debug)]
pub struct Chat {
    /// The dialect of `messages` and `params`.
    pub dialect: Dialect,
    /// The conversation, oldest first, as it came.
    pub messages: Vec<Message>,
    /// The most output tokens the client asked for, if it did.
    pub max_output_tokens: Option<u64>,
    /// Whether the client named that bound the newer way (OpenAI's `max_completion_tokens`,
    /// which reasoning models take) rather than the older (`max_tokens`).
    pub newer_bound: bool,
    /// Every other parameter (`temperature`, `tools`, `tool_choice`, Anthropic's `system`,
    /// …), as it came.
    pub params: Map<String, Value>,
    /// Headers a delegate of the client's dialect is sent as they came (Anthropic's
    /// `anthropic-beta`), name and value.
    pub headers: Vec<(String, String)>,
}

impl Chat {
    /// The size of the prompt a delegate reads, in bytes ([`content_bytes`]): each
    /// message's content (tool results and documents included) and calls, and the system
    /// prompt and tools sent beside the messages (Anthropic's `system`, either dialect's
    /// `tools`).
    pub fn prompt_bytes(&self) -> usize {
        let said: usize = self
            .messages
            .iter()
            .map(|m| {
                content_bytes(&m.content) + m.fields.get("tool_calls").map_or(0, content_bytes)
            })
            .sum();
        let beside: usize = ["system", "tools"]
            .iter()
            .filter_map(|k| self.params.get(*k))
            .map(content_bytes)
            .sum();
        said + beside
    }

    /// An empty chat in `dialect`.
    pub fn new(dialect: Dialect) -> Chat {
        Chat {
            dialect,
            messages: Vec::new(),
            max_output_tokens: None,
            newer_bound: false,
            params: Map::new(),
            headers: Vec::new(),
        }
    }

    /// The conversation in no dialect's words, for a delegate of another dialect.
    pub fn conversation(&self) -> Conversation {
        match self.dialect {
            Dialect::OpenAi => openai::read(self),
            Dialect::Anthropic => anthropic::read(self),
        }
    }
}

/// One message as it came: its role, its content (a string, an array of parts or blocks, or
/// null), and its other fields (`name`, `tool_calls`, `tool_call_id`, …).
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// A string, an array of parts or blocks, or null.
    pub content: Value,
    /// Every other field.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl Message {
    /// The content's text: the string, or the `text` of each text part, joined.
    pub fn text(&self) -> String {
        text_of(&self.content)
    }
}

/// What an image part counts for in an estimate, in bytes: about 1,600 tokens (what a
/// 1.15-megapixel image costs at Anthropic; OpenAI's high-detail tiles are of that order),
/// not its encoded size.
const IMAGE_BYTES: usize = 6_400;

/// The size of what a model reads of a content value, in bytes: its text and every other
/// string it carries (a tool's result, a call's input, a document's text), an image at
/// [`IMAGE_BYTES`]. Recursion is bounded by the request's nesting limit.
pub fn content_bytes(content: &Value) -> usize {
    match content {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(content_bytes).sum(),
        Value::Object(m) => {
            let kind = m.get("type").and_then(Value::as_str);
            if matches!(kind, Some("image" | "image_url")) {
                return IMAGE_BYTES;
            }
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "type" | "cache_control"))
                .map(|(_, v)| content_bytes(v))
                .sum()
        }
        Value::Number(_) | Value::Bool(_) => 4,
        Value::Null => 0,
    }
}

/// The text of a content value: the string, or the `text` of each part that has one, joined
/// (an OpenAI `text` part, an Anthropic `text` block).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| {
                p.get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "text")
            })
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// A chat in no dialect's words.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Conversation {
    /// The system prompt (empty: none).
    pub system: String,
    /// What was said, oldest first.
    pub turns: Vec<Said>,
    /// The tools the model may call.
    pub tools: Vec<Tool>,
    /// Whether and which tool it must call.
    pub tool_choice: Option<ToolChoice>,
    /// Sequences that stop the answer.
    pub stop: Vec<String>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
}

/// What one side said.
#[derive(Debug, Clone, PartialEq)]
pub struct Said {
    /// Who.
    pub role: Role,
    /// What, in order.
    pub parts: Vec<Part>,
}

/// A side of the conversation (a system prompt is the conversation's, not a turn's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user (and the results of the tools it ran).
    User,
    /// The model.
    Assistant,
}

/// A part of what was said.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Text.
    Text(String),
    /// An image.
    Image(Image),
    /// The model's call of a tool.
    ToolUse(ToolCall),
    /// A tool's result, for the call `id`.
    ToolResult {
        /// The call it answers.
        id: String,
        /// Its text.
        text: String,
        /// Whether the tool failed.
        is_error: bool,
    },
}

/// An image, by reference or inline.
#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    /// At a URL.
    Url(String),
    /// Inline, base64.
    Data {
        /// `image/png`, …
        media_type: String,
        /// Base64.
        data: String,
    },
}

/// A call of a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id (a result names it).
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its input: a JSON object.
    pub input: Value,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// Its input's JSON Schema.
    pub schema: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// As it sees fit.
    Auto,
    /// Some tool.
    Any,
    /// None.
    None,
    /// This one.
    Named(String),
}

/// Why an answer stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// It was done.
    Done,
    /// It reached its output bound.
    Length,
    /// It met a stop sequence (which, when known).
    StopSequence(Option<String>),
    /// It called tools.
    ToolUse,
    /// It refused (a content filter, a refusal).
    Refused,
    /// Some other reason, as a delegate of that dialect named it (`pause_turn`, …): told as
    /// it came to a client of the same dialect, as a plain stop to another.
    Other(Dialect, String),
}

/// What a chat delegate answered besides its text and usage: in neutral words, and its own
/// parts as they came, for a client of its dialect.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Why it stopped.
    pub finish: Option<Finish>,
    /// The tools it called.
    pub tool_calls: Vec<ToolCall>,
    /// Its parts as it gave them.
    pub native: Option<Native>,
}

/// Parts of an answer (or of a streamed piece) as a delegate gave them: an OpenAI message's
/// or delta's fields besides its text (`tool_calls`, `refusal`, …), an Anthropic message's
/// `content` blocks and `stop_sequence`, or an Anthropic stream event whole.
#[derive(Debug, Clone)]
pub struct Native {
    /// Their dialect.
    pub dialect: Dialect,
    /// The fields.
    pub fields: Map<String, Value>,
}

impl Native {
    /// `fields` if they are in `dialect`.
    pub fn of(native: Option<&Native>, dialect: Dialect) -> Option<&Map<String, Value>> {
        native.filter(|n| n.dialect == dialect).map(|n| &n.fields)
    }
}

/// A piece of a streamed answer.
#[derive(Debug, Clone, Default)]
pub struct Delta {
    /// Text added (may be empty).
    pub text: String,
    /// Pieces of tool calls.
    pub tool_calls: Vec<ToolCallPiece>,
    /// The piece as the delegate gave it.
    pub native: Option<Native>,
}

impl Delta {
    /// Whether it adds nothing.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.tool_calls.is_empty() && self.native.is_none()
    }
}

/// A piece of a streamed tool call: the first names it, the others add to its arguments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallPiece {
    /// Which call of the answer (0 for the first).
    pub index: u32,
    /// Its id (the first piece).
    pub id: Option<String>,
    /// The tool (the first piece).
    pub name: Option<String>,
    /// A piece of its arguments' JSON text.
    pub arguments: String,
}

/// Token counts of one answer. Input counts exclude the cache's: a cache read or write is
/// counted (and priced) apart, never twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens not read from or written to a cache.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from a cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to a cache.
    pub cache_write_tokens: u64,
    /// Every one of them.
    pub total_tokens: u64,
}

impl Usage {
    /// Usage of `input` and `output` tokens, no cache.
    pub fn new(input: u64, output: u64) -> Usage {
        Usage::with_cache(input, output, 0, 0)
    }

    /// Usage of `input`, `output`, `cache_read` and `cache_write` tokens.
    pub fn with_cache(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            total_tokens: input
                .saturating_add(output)
                .saturating_add(cache_read)
                .saturating_add(cache_write),
        }
    }

    /// Every input token, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
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

/// A tool call's arguments as an input object: the JSON text parsed, kept whole under
/// `arguments` when it is not an object (a model's broken JSON is still the client's to see).
pub fn input_of(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(m)) => Value::Object(m),
        Ok(Value::Null) if arguments.trim().is_empty() => Value::Object(Map::new()),
        _ if arguments.trim().is_empty() => Value::Object(Map::new()),
        Ok(other) => serde_json::json!({ "arguments": other }),
        Err(_) => serde_json::json!({ "arguments": arguments }),
    }
}
