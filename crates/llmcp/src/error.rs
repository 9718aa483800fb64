//! The crate's errors: a request that cannot be read, a model's answer that breaks the
//! response schema, a tool call the validator refuses.

/// Why a request packet is refused.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not JSON, or not the request schema (serde's message: field and line:column).
    #[error("invalid LLMCP request: {0}")]
    Invalid(String),
    /// No `protocol` object.
    #[error("missing `protocol`: this endpoint speaks `laika.llmcp` version 1")]
    NoProtocol,
    /// Another protocol or version.
    #[error("unsupported protocol {name:?} version {version}: this endpoint speaks `laika.llmcp` version 1")]
    Unsupported { name: String, version: String },
    /// A packet that is not a request.
    #[error("`type` must be \"request\", not {0:?}")]
    NotARequest(String),
    /// A field present but unusable (empty task name, too many documents, …).
    #[error("invalid LLMCP request: {0}")]
    Field(String),
}

/// Why a model's answer is not a valid JSON-mode answer (told to the model when it is
/// asked to repair it).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("the answer is not JSON: {0}")]
    NotJson(String),
    #[error("the answer is not a JSON object")]
    NotObject,
    #[error("the answer has no `assistant` object")]
    NoAssistant,
    #[error("the answer does not match the response schema: {0}")]
    Schema(String),
    #[error("tool_calls[{0}] is refused: {1}")]
    Tool(usize, ToolError),
}

/// Why the validator refuses a tool call.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    #[error("unknown key `{key}` for `{tool}`")]
    UnknownKey { tool: String, key: String },
    #[error("`{tool}` is missing `{key}`")]
    Missing { tool: String, key: &'static str },
    #[error("`{tool}`'s `{key}` must be {expected}")]
    WrongType {
        tool: String,
        key: &'static str,
        expected: String,
    },
}
