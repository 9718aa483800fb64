//! The Anthropic Messages API wire: what the Anthropic front end reads and writes, and what an
//! Anthropic-API delegate is sent and answers. Pass-through types: a message's content blocks
//! and every parameter the gateway does not read are kept as they came (`cache_control`,
//! thinking blocks, server tools, what a later API version adds), so that an Anthropic client
//! behind the gateway reaches an Anthropic model with nothing lost.
//!
//! Versions: API `2023-06-01` (SDK 1.x, the key in `x-api-key`) and `2026-10-21` (SDK 2.x, the
//! key as `Authorization: Bearer`) share these shapes; the gateway reads both and writes what
//! both SDKs read.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The older API version (SDK 1.x), and what an Anthropic delegate is sent by default.
pub const VERSION_2023: &str = "2023-06-01";
/// The newer API version (SDK 2.x).
pub const VERSION_2026: &str = "2026-10-21";
/// The header naming the API version.
pub const VERSION_HEADER: &str = "anthropic-version";
/// The header naming beta features, carried to an Anthropic delegate unchanged.
pub const BETA_HEADER: &str = "anthropic-beta";
/// The header the older SDKs send their key in.
pub const KEY_HEADER: &str = "x-api-key";
/// The Messages endpoint, under the SDK's base URL.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// The token-counting endpoint.
pub const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";
/// The model list.
pub const MODELS_PATH: &str = "/v1/models";

/// A `POST /v1/messages` body as read. `max_tokens` is required, as Anthropic requires it.
/// Every parameter the gateway does not read (`tools`, `tool_choice`, `stop_sequences`,
/// `temperature`, `top_p`, `metadata`, `thinking`, …) is kept in `extra`, as it came.
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    /// A skill (`"chat"`) or a skill and a policy (`"chat@cheapest"`) at the gateway; the
    /// model at an Anthropic delegate.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Most output tokens.
    pub max_tokens: u64,
    /// Answer as named server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The system prompt: a string, or text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    /// Every other parameter, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `POST /v1/messages/count_tokens` body: a request without `max_tokens`.
#[derive(Debug, Deserialize)]
pub struct CountTokensRequest {
    /// A skill, or a skill and a policy.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The system prompt.
    #[serde(default)]
    pub system: Option<Value>,
    /// Every other parameter (`tools`, …), as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One message: its role (`user` or `assistant`), its content (a string, or content blocks:
/// `text`, `image`, `tool_use`, `tool_result`, `thinking`, `document`, …), and any other field
/// kept as it came.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    /// A string, or an array of content blocks.
    pub content: Value,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The text of a content value: the string, or the `text` of each `text` block, joined.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// A message as a delegate answers it (`type: "message"`). What the gateway does not read is
/// ignored; the content blocks are kept as they came, for an Anthropic client.
#[derive(Debug, Deserialize)]
pub struct MessageResponse {
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// The content blocks: required, so that a 2xx body that is no message (`{}`, an error
    /// object, another API's answer) is told apart from an empty answer.
    pub content: Vec<Value>,
    /// Why it stopped (`end_turn`, `max_tokens`, `stop_sequence`, `tool_use`, `refusal`, …).
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence met, if one was.
    #[serde(default)]
    pub stop_sequence: Option<String>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Token counts. `input_tokens` are the uncached ones: cache reads and writes are counted
/// apart (and priced apart). Read leniently, as a delegate reports them: any JSON number is
/// taken, saturated into `0..=u64::MAX`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens not read from or written to the cache.
    #[serde(default, deserialize_with = "saturating_count")]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default, deserialize_with = "saturating_count")]
    pub output_tokens: u64,
    /// Input tokens written to the cache.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Input tokens read from the cache.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub cache_read_input_tokens: Option<u64>,
}

/// A count as any JSON number (or null: 0), saturated into `u64`.
fn saturating_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(saturating_opt(d)?.unwrap_or(0))
}

/// An optional count as any JSON number, saturated into `u64`.
fn saturating_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(Option::<serde_json::Number>::deserialize(d)?.map(|n| {
        n.as_u64().unwrap_or_else(|| match n.as_f64() {
            // `as` saturates a float (and takes NaN to 0); a negative i64 is below 0.
            Some(f) => f as u64,
            None => 0,
        })
    }))
}

/// One event of a streamed message, read by its `type` (the data of every event names it,
/// so the SSE `event:` line need not be read). Unknown types are skipped.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The message begins: its model and the input's usage.
    MessageStart {
        /// The message so far.
        message: StartedMessage,
    },
    /// A content block begins (`text`, `tool_use` with its id and name, `thinking`, …).
    ContentBlockStart {
        /// Its index.
        index: u32,
        /// The block as it begins.
        content_block: Value,
    },
    /// A piece of a block (`text_delta`, `input_json_delta`, `thinking_delta`, …).
    ContentBlockDelta {
        /// The block's index.
        index: u32,
        /// The piece.
        delta: Value,
    },
    /// A block ends.
    ContentBlockStop {
        /// Its index.
        index: u32,
    },
    /// The message's end: why it stopped, and the usage so far (cumulative).
    MessageDelta {
        /// Why it stopped.
        delta: MessageDeltaBody,
        /// Usage counts (cumulative; absent ones keep `message_start`'s).
        #[serde(default)]
        usage: Option<DeltaUsage>,
    },
    /// The stream's end.
    MessageStop,
    /// A keep-alive.
    Ping,
    /// An error mid-stream.
    Error {
        /// What went wrong.
        error: ErrorDetail,
    },
    /// A type this reader does not know.
    #[serde(other)]
    Unknown,
}

/// The message of a `message_start` event (only what the gateway reads).
#[derive(Debug, Deserialize)]
pub struct StartedMessage {
    /// The model answering.
    #[serde(default)]
    pub model: String,
    /// The input's usage.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// The body of a `message_delta` event.
#[derive(Debug, Deserialize)]
pub struct MessageDeltaBody {
    /// Why it stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence met.
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// The usage of a `message_delta` event: cumulative counts, each present when it applies.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct DeltaUsage {
    /// Output tokens so far.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub output_tokens: Option<u64>,
    /// Input tokens.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub input_tokens: Option<u64>,
    /// Input tokens written to the cache.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Input tokens read from the cache.
    #[serde(default, deserialize_with = "saturating_opt")]
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// These counts updated by a `message_delta`'s (which overwrite: they are cumulative).
    pub fn updated(mut self, d: &DeltaUsage) -> Usage {
        if let Some(n) = d.output_tokens {
            self.output_tokens = n;
        }
        if let Some(n) = d.input_tokens {
            self.input_tokens = n;
        }
        if d.cache_creation_input_tokens.is_some() {
            self.cache_creation_input_tokens = d.cache_creation_input_tokens;
        }
        if d.cache_read_input_tokens.is_some() {
            self.cache_read_input_tokens = d.cache_read_input_tokens;
        }
        self
    }
}

/// Anthropic's error body, `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The error.
    pub error: ErrorDetail,
}

impl ErrorBody {
    /// An error of `kind` (`invalid_request_error`, …) saying `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            kind: "error".to_owned(),
            error: ErrorDetail {
                kind: kind.to_owned(),
                message: message.into(),
            },
        }
    }
}

/// The error's fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `permission_error`,
    /// `not_found_error`, `rate_limit_error`, `api_error`, `overloaded_error`, …
    #[serde(rename = "type", default)]
    pub kind: String,
    /// What went wrong, for people.
    #[serde(default)]
    pub message: String,
}

/// The error type Anthropic gives an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `GET /v1/models`: a page of models.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelList {
    /// The models.
    pub data: Vec<ModelInfo>,
    /// Whether there are more (never: the gateway lists every skill at once).
    pub has_more: bool,
    /// The first model's id.
    pub first_id: Option<String>,
    /// The last model's id.
    pub last_id: Option<String>,
}

/// One model of a list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    /// `model`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its id (at the gateway, a skill).
    pub id: String,
    /// Its name for people.
    pub display_name: String,
    /// When it was released, RFC 3339.
    pub created_at: String,
    /// `active` (the newer SDKs read it).
    pub lifecycle: String,
}

/// The answer of `count_tokens`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TokenCount {
    /// Input tokens the request would use.
    pub input_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_keeps_what_it_does_not_read_and_requires_max_tokens() {
        let body = json!({
            "model": "chat@cheapest",
            "max_tokens": 64,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                {"type": "thinking", "thinking": "…", "signature": "sig"}]}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        });
        let r: MessagesRequest = serde_json::from_value(body).unwrap();
        assert_eq!(r.max_tokens, 64);
        assert_eq!(r.extra["thinking"]["budget_tokens"], 1024);
        assert_eq!(r.messages[0].content[1]["signature"], "sig");
        assert_eq!(text_of(&r.messages[0].content), "hi");
        let missing = serde_json::from_value::<MessagesRequest>(json!({
            "model": "m", "messages": []}))
        .unwrap_err();
        assert!(missing.to_string().contains("max_tokens"), "{missing}");
    }

    #[test]
    fn events_are_read_by_their_type_and_counts_saturate() {
        let e: StreamEvent = serde_json::from_value(json!({"type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 7, "cache_read_input_tokens": -3}}))
        .unwrap();
        let StreamEvent::MessageDelta { delta, usage } = e else {
            panic!("{e:?}")
        };
        assert_eq!(delta.stop_reason.as_deref(), Some("tool_use"));
        let u = Usage {
            input_tokens: 5,
            ..Usage::default()
        }
        .updated(&usage.unwrap());
        assert_eq!((u.input_tokens, u.output_tokens), (5, 7));
        assert_eq!(u.cache_read_input_tokens, Some(0));
        let unknown: StreamEvent =
            serde_json::from_value(json!({"type": "something_new", "x": 1})).unwrap();
        assert!(matches!(unknown, StreamEvent::Unknown));
        let big: Usage =
            serde_json::from_value(json!({"input_tokens": 1e30, "output_tokens": 2.5})).unwrap();
        assert_eq!((big.input_tokens, big.output_tokens), (u64::MAX, 2));
    }

    #[test]
    fn errors_have_anthropics_shape_and_types() {
        let e = serde_json::to_value(ErrorBody::new("rate_limit_error", "slow down")).unwrap();
        assert_eq!(
            e,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
        let types = [400, 401, 403, 404, 429, 500, 529].map(error_type);
        assert_eq!(
            types,
            [
                "invalid_request_error",
                "authentication_error",
                "permission_error",
                "not_found_error",
                "rate_limit_error",
                "api_error",
                "overloaded_error"
            ]
        );
    }
}
