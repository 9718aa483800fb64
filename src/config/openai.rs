//! `[openai]`: how the gateway treats OpenAI-backed delegates (their conversations, their
//! estimated cost) and the OpenAI-compatible ingress.

use super::checks::Checks;
use serde::{Deserialize, Serialize};

/// `[openai]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiConfig {
    /// Output tokens a task is allowed when it names no `max_tokens`: sent as the request's
    /// output bound, and what the budget hold of a token-priced delegate assumes (its input
    /// estimate plus this, at the declared prices). Within a quarter of a declared context
    /// window.
    pub default_max_tokens: u64,
    /// Most bytes of conversation kept per client session for OpenAI-backed delegates
    /// (user and assistant turns of every skill together; the oldest turns go first).
    pub session_memory_bytes: u64,
    /// Most bytes of conversation kept for OpenAI-backed delegates, every session together
    /// (this node's; cluster mode: the shared Redis's): past it, the least recently used
    /// sessions' conversations are dropped (`ldp_gateway_conversations_evicted_total`).
    pub memory_bytes: u64,
    /// Serve `POST /v1/chat/completions` and `GET /v1/models` on the LDP listener.
    pub ingress: bool,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            default_max_tokens: 1024,
            session_memory_bytes: 256 * 1024,
            memory_bytes: 256 * 1024 * 1024,
            ingress: true,
        }
    }
}

/// The largest `default_max_tokens` accepted (a ten-million-token answer is no estimate).
const MAX_TOKENS_CEILING: u64 = 10_000_000;

impl OpenAiConfig {
    pub(super) fn check(&self, c: &mut Checks) {
        if !(1..=MAX_TOKENS_CEILING).contains(&self.default_max_tokens) {
            c.push(
                "openai.default_max_tokens",
                format!(
                    "must be between 1 and {MAX_TOKENS_CEILING}, got {}",
                    self.default_max_tokens
                ),
            );
        }
        let max = 1 << 30;
        if self.session_memory_bytes > max {
            c.push(
                "openai.session_memory_bytes",
                format!(
                    "must be at most {max} (1 GiB), got {}",
                    self.session_memory_bytes
                ),
            );
        }
        let most = 1 << 40;
        if self.memory_bytes < self.session_memory_bytes || self.memory_bytes > most {
            c.push(
                "openai.memory_bytes",
                format!(
                    "must be between openai.session_memory_bytes ({}) and {most} (1 TiB), got {}",
                    self.session_memory_bytes, self.memory_bytes
                ),
            );
        }
    }
}
