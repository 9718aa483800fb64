//! The OpenAI chat-completions wire: what the ingress reads and writes, and what an
//! OpenAI-compatible delegate is sent and answers. Unknown fields are kept where they are
//! the caller's (request parameters, message fields) and ignored where they are not.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A `POST /v1/chat/completions` body as the ingress reads it. Parameters the gateway does
/// not interpret (`temperature`, `top_p`, `stop`, `seed`, …) are kept in `extra` and passed to
/// an OpenAI-backed delegate as they came.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// A skill (`"chat"`) or a skill and a policy (`"chat@cheapest"`).
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Answer as a stream of `chat.completion.chunk` events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Stream options (`include_usage`).
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Most output tokens (the older name).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Most output tokens (the newer name).
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// Every other parameter, passed on verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    /// Most output tokens asked for, by either name.
    pub fn max_output_tokens(&self) -> Option<u64> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk carrying the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// One message: its role and content (a string, or an array of parts), and any other field
/// (`name`, `tool_calls`, …) kept as it came.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// A string, an array of parts, or null.
    #[serde(default)]
    pub content: Value,
    /// Every other field.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// The content's text: the string, or the `text` of each part, joined.
    pub fn text(&self) -> String {
        text_of(&self.content)
    }
}

/// A content value's text: a string, or the `text` of each part of an array, concatenated.
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// One turn the gateway sends upstream (a remembered turn, or a task's input).
#[derive(Debug, Serialize)]
pub struct Turn<'a> {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// The text.
    pub content: &'a str,
}

/// The body sent to an OpenAI-backed delegate.
#[derive(Debug, Serialize)]
pub struct UpstreamRequest<'a, M: Serialize> {
    /// The upstream model.
    pub model: &'a str,
    /// The conversation.
    pub messages: M,
    /// Whether to stream.
    pub stream: bool,
    /// Asks for the usage at the end of a stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// The client's output bound, if it gave one (by this name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The client's output bound, if it gave one by the newer name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// The client's other parameters (ingress only).
    #[serde(flatten)]
    pub extra: Option<&'a Map<String, Value>>,
}

/// Token counts. Read leniently, as a delegate reports them: any JSON number is taken,
/// saturated into `0..=u64::MAX` (a negative, fractional or astronomical count is no reason
/// to lose the answer; what is charged is bounded by the proxy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, deserialize_with = "saturating_count")]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default, deserialize_with = "saturating_count")]
    pub completion_tokens: u64,
    /// Both.
    #[serde(default, deserialize_with = "saturating_count")]
    pub total_tokens: u64,
    /// What the prompt's count includes (its tokens read from the provider's cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens read from the provider's cache (within `prompt_tokens`).
    #[serde(default, deserialize_with = "saturating_count")]
    pub cached_tokens: u64,
}

/// A count as any JSON number (or null: 0), saturated into `u64`.
fn saturating_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(match Option::<serde_json::Number>::deserialize(d)? {
        None => 0,
        Some(n) => n.as_u64().unwrap_or_else(|| match n.as_f64() {
            // `as` saturates a float (and takes NaN to 0); a negative i64 is below 0.
            Some(f) => f as u64,
            None => 0,
        }),
    })
}

impl Usage {
    /// Usage of `prompt` and `completion` tokens.
    pub fn new(prompt: u64, completion: u64) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt.saturating_add(completion),
            prompt_tokens_details: None,
        }
    }
}

/// A `chat.completion` as a delegate answers it (only what the gateway reads).
#[derive(Debug, Deserialize)]
pub struct Completion {
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// The choices; the first is used.
    #[serde(default)]
    pub choices: Vec<Choice>,
    /// Token counts.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// One choice of a completion.
#[derive(Debug, Deserialize)]
pub struct Choice {
    /// The assistant's message.
    #[serde(default)]
    pub message: Option<ChoiceMessage>,
    /// Why it stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// An answered message: its content, and every other field (`tool_calls`, the legacy
/// `function_call`, `refusal`, …) kept as it came, for the ingress's client.
#[derive(Debug, Deserialize)]
pub struct ChoiceMessage {
    /// The text (null when the answer is a tool call).
    #[serde(default)]
    pub content: Option<String>,
    /// Every other field (`role` included).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// A `chat.completion.chunk` as a delegate streams it.
#[derive(Debug, Deserialize)]
pub struct Chunk {
    /// The model that answers.
    #[serde(default)]
    pub model: String,
    /// The choices' deltas.
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Token counts (the last chunk, with `include_usage`).
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// One choice's delta.
#[derive(Debug, Deserialize)]
pub struct ChunkChoice {
    /// What is new.
    #[serde(default)]
    pub delta: Option<Delta>,
    /// Why it stopped (the last content chunk).
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// New content: text, and every other field of the delta (a piece of `tool_calls` or of a
/// legacy `function_call`, …) kept as it came.
#[derive(Debug, Deserialize)]
pub struct Delta {
    /// The text added.
    #[serde(default)]
    pub content: Option<String>,
    /// Every other field (`role` included).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error's fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// What went wrong, for people.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `rate_limit_error`, …
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The request field at fault.
    #[serde(default)]
    pub param: Option<String>,
    /// A machine-readable code (`invalid_api_key`, `model_not_found`, …); some servers send
    /// a number.
    #[serde(default)]
    pub code: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_counts_saturate_whatever_number_they_are() {
        let u: Usage = serde_json::from_value(json!({"prompt_tokens": u64::MAX,
            "completion_tokens": 1e30, "total_tokens": -5}))
        .unwrap();
        assert_eq!(u.prompt_tokens, u64::MAX);
        assert_eq!(u.completion_tokens, u64::MAX);
        assert_eq!(u.total_tokens, 0);
        let u: Usage =
            serde_json::from_value(json!({"prompt_tokens": null, "completion_tokens": 2.5}))
                .unwrap();
        assert_eq!(
            u,
            Usage {
                prompt_tokens: 0,
                completion_tokens: 2,
                total_tokens: 0,
                prompt_tokens_details: None,
            }
        );
        assert!(serde_json::from_value::<Usage>(json!({"prompt_tokens": "lots"})).is_err());
    }

    #[test]
    fn messages_and_deltas_keep_the_fields_they_do_not_model() {
        let call = json!([{"id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": "{}"}}]);
        let m: ChoiceMessage = serde_json::from_value(
            json!({"role": "assistant", "content": null, "tool_calls": call}),
        )
        .unwrap();
        assert_eq!(m.content, None);
        assert_eq!(m.rest["tool_calls"], call);
        let d: Delta = serde_json::from_value(
            json!({"function_call": {"arguments": "{\"a\""}, "content": "x"}),
        )
        .unwrap();
        assert_eq!(d.content.as_deref(), Some("x"));
        assert_eq!(d.rest["function_call"]["arguments"], "{\"a\"");
    }
}
