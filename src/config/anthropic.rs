//! `[anthropic]`: the Anthropic-compatible ingress. (An Anthropic delegate's own settings are
//! its `[[delegates]]` entry's; the output bound of a task that names none is
//! `[openai] default_max_tokens`, every chat delegate's.)

use serde::{Deserialize, Serialize};

/// `[anthropic]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnthropicConfig {
    /// Serve `POST /v1/messages`, `POST /v1/messages/count_tokens` and `GET /v1/models` in
    /// Anthropic's shape (to a request naming an `anthropic-version`) on the LDP listener.
    pub ingress: bool,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        AnthropicConfig { ingress: true }
    }
}
