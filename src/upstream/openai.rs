//! OpenAI-compatible models as delegates (`kind = "openai"`): the identity card built from
//! what an operator declares (`super::declared`), the calls to such a delegate
//! (`backend.rs`), and the task's translation to a chat completion and back: an OpenAI
//! client's messages as they came, another chat dialect's through `crate::chat::openai`, else
//! the remembered turns and the task's input. The wire is the `openai-wire` crate's.

pub mod backend;

pub use backend::{Backend, Params, Reply};

use super::chat::{answered, charged, unanswered, user_text, Most, Streamed};
use super::declared::{self, Prices};
use super::KeyError;
use super::{Call, Called, Health, Outcome, Relay, Update};
use crate::chat::{self, estimate_tokens, Chat, Dialect, Native, Turn};
use crate::config::{DelegateConfig, MaxTokensParam};
use crate::ldp::IdentityCard;
use openai_wire as wire;
use serde_json::{Map, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// What makes a delegate OpenAI-compatible: how it is called, and the card declared for it.
#[derive(Debug)]
pub struct OpenAi {
    /// How it is called.
    pub backend: Backend,
    /// The card built from `[delegates.card]`.
    pub card: Arc<IdentityCard>,
}

impl OpenAi {
    /// The entry `cfg` (named `name`, at `base_url`), its key read from `api_key_env`. The
    /// declared card of a delegate without a configured name is named after its model, not
    /// its URL: the card's id is what clients see of it.
    pub fn from_config(
        cfg: &DelegateConfig,
        name: &str,
        base_url: &str,
    ) -> Result<OpenAi, KeyError> {
        let backend = Backend::from_config(cfg, name)?;
        let card = declared::build(
            "openai",
            cfg.name.as_deref().unwrap_or(&backend.model),
            base_url,
            &backend.model,
            cfg.card.as_ref().unwrap_or(&declared::EMPTY_CARD),
        );
        Ok(OpenAi {
            backend,
            card: Arc::new(card),
        })
    }

    /// The most output tokens a completion here is asked for (see
    /// [`super::chat::output_tokens`]).
    pub fn output_tokens(&self, chat: Option<&Chat>, default: u64) -> u64 {
        super::chat::output_tokens(self.backend.context_window, chat, default)
    }

    /// How many of the newest `turns` fit the context window (see
    /// [`super::chat::turns_that_fit`]).
    pub fn turns_that_fit(&self, turns: &[Turn], user: &str, answer: u64) -> usize {
        super::chat::turns_that_fit(self.backend.context_window, turns, user, answer)
    }

    /// One completion: an OpenAI client's messages as they came (another chat dialect's in
    /// OpenAI's words), else the remembered turns then the input as the user's text; streamed
    /// when the client streams. The answer is a result with the delegate's provenance, tokens
    /// and cost from usage (bounded by what the request allowed) × the declared prices, and
    /// the turn to remember; a 429 asks for a pause; a 4xx about the request is the client's
    /// answer; anything else fails over.
    pub async fn call(&self, call: &Call<'_>, relay: &Relay<'_>) -> Outcome {
        let user = match call.chat {
            Some(_) => String::new(),
            None => match user_text(call.input, call.input_mode) {
                Ok(user) => user,
                Err(error) => {
                    return Outcome::of(
                        Called::Refused(error, None),
                        Health::Unknown,
                        Default::default(),
                    )
                }
            },
        };
        // Another dialect's chat, in OpenAI's words.
        let converted = call
            .chat
            .filter(|c| c.dialect != Dialect::OpenAi)
            .map(|c| chat::openai::write(&c.conversation()));
        let prompt = match (call.chat, &converted) {
            (_, Some((messages, _))) => Prompt::Converted(messages),
            (Some(chat), None) => Prompt::Chat(&chat.messages),
            (None, None) => {
                let mut m = Vec::with_capacity(call.turns.len() * 2 + 1);
                for turn in call.turns {
                    m.push(wire::Turn {
                        role: "user",
                        content: &turn.user,
                    });
                    m.push(wire::Turn {
                        role: "assistant",
                        content: &turn.assistant,
                    });
                }
                m.push(wire::Turn {
                    role: "user",
                    content: &user,
                });
                Prompt::Turns(m)
            }
        };
        let extra = match (&converted, call.chat) {
            (Some((_, params)), _) => Some(params),
            (None, chat) => chat.map(|c| &c.params),
        };
        let backend = &self.backend;
        let most_out = call.max_output_tokens;
        let mut params = bounded_params(call.chat, extra, backend, most_out);
        // As over LDP: a gateway behind this delegate (this one, say, by a URL that is its
        // own `/v1`) counts the hop and refuses a loop at `upstream.max_hops`.
        params.hops = call.forward.hops;
        params.trace = call.forward.trace;
        let sent = Instant::now();
        let mut used = Streamed::default();
        let (client, base, limit) = (call.client, call.base_url, call.limit);
        let answered_ = match relay {
            Relay::Quiet => backend.complete(client, base, &prompt, params, limit).await,
            Relay::Pieces(send) => {
                let relay = |piece: chat::Delta| send(piece);
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
            Relay::Updates(tell) => {
                // Every piece, empty or not: the relay stops the read when nobody listens.
                let relay = |piece: chat::Delta| std::future::ready(tell(Update::Note(piece.text)));
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
        };
        let took = sent.elapsed();
        let window = backend.context_window;
        let prices = &backend.prices;
        let mut reply = match answered_ {
            Ok(reply) => reply,
            Err(e) => {
                let estimated = estimate_usage(&prompt, used.bytes);
                let most = Most::of(window, used.request_bytes, most_out);
                return unanswered(call, e, &used, estimated, most, prices, took);
            }
        };
        let estimated = estimate_usage(&prompt, reply.content.len());
        let most = Most::of(window, reply.request_bytes, most_out);
        let (charged, note) = charged(call, reply.usage.map(neutral), estimated, most, prices);
        let other = std::mem::take(&mut reply.other);
        let answer = chat::Answer {
            finish: reply.finish_reason.as_deref().map(chat::openai::finish),
            tool_calls: chat::openai::tool_calls(&other),
            native: (!other.is_empty()).then_some(Native {
                dialect: Dialect::OpenAi,
                fields: other,
            }),
        };
        let card = &self.card.delegate_id;
        let a = answered(
            call,
            card,
            &reply.model,
            user,
            reply.content,
            charged,
            answer,
        );
        Outcome {
            clamped: note.is_some(),
            notes: note.into_iter().collect(),
            ..Outcome::of(Called::Answered(Box::new(a)), Health::Answered(took), took)
        }
    }

    /// The prices it declared.
    pub fn prices(&self) -> &Prices {
        &self.backend.prices
    }
}

/// What is sent: an OpenAI client's messages, another dialect's in OpenAI's words, or
/// remembered turns and the input (either way written as the `messages` array).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Chat(&'a [chat::Message]),
    Converted(&'a [Value]),
    Turns(Vec<wire::Turn<'a>>),
}

/// The wire's token counts in the pipeline's words: the prompt's cached tokens
/// (`prompt_tokens_details.cached_tokens`, within the prompt) counted as cache reads.
pub fn neutral(u: wire::Usage) -> chat::Usage {
    let cached = u
        .prompt_tokens_details
        .map_or(0, |d| d.cached_tokens)
        .min(u.prompt_tokens);
    chat::Usage::with_cache(u.prompt_tokens - cached, u.completion_tokens, cached, 0)
}

/// Usage estimated from the text sent and `answered` bytes, for a delegate that reports none.
fn estimate_usage(prompt: &Prompt<'_>, answered: usize) -> chat::Usage {
    let sent: usize = match prompt {
        Prompt::Chat(m) => m.iter().map(|m| m.text().len()).sum(),
        Prompt::Converted(m) => m
            .iter()
            .map(|m| m.get("content").map_or(0, |c| chat::text_of(c).len()))
            .sum(),
        Prompt::Turns(m) => m.iter().map(|m| m.content.len()).sum(),
    };
    chat::Usage::new(estimate_tokens(sent), estimate_tokens(answered))
}

/// The request's parameters `extra`, its output bound `most_out` sent in the field the
/// delegate is configured for (else the one the chat client named, else `max_tokens`).
fn bounded_params<'a>(
    chat: Option<&Chat>,
    extra: Option<&'a Map<String, Value>>,
    backend: &Backend,
    most_out: u64,
) -> Params<'a> {
    let newer = match backend.max_tokens_param {
        Some(p) => p == MaxTokensParam::MaxCompletionTokens,
        None => chat.is_some_and(|c| c.newer_bound),
    };
    Params {
        max_tokens: (!newer).then_some(most_out),
        max_completion_tokens: newer.then_some(most_out),
        extra,
        hops: None,
        trace: &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DelegateConfig, DelegateKind};

    fn backend(param: Option<MaxTokensParam>) -> Backend {
        let mut cfg = DelegateConfig::new("http://127.0.0.1:1/v1");
        cfg.kind = DelegateKind::OpenAi;
        cfg.max_tokens_param = param;
        Backend::new(&cfg, "d", None).unwrap()
    }

    fn chat(v: serde_json::Value) -> Chat {
        Chat::from(serde_json::from_value::<wire::ChatRequest>(v).unwrap())
    }

    fn sent_params<'a>(chat: Option<&'a Chat>, backend: &Backend, most: u64) -> Params<'a> {
        bounded_params(chat, chat.map(|c| &c.params), backend, most)
    }

    #[test]
    fn the_output_bound_goes_in_the_field_the_delegate_or_the_client_names() {
        let messages = serde_json::json!([{"role": "user", "content": "hi"}]);
        let plain = chat(serde_json::json!({"model": "m", "messages": messages}));
        let newer = chat(serde_json::json!({"model": "m", "messages": messages,
            "max_completion_tokens": 9}));
        let bound = |p: Params<'_>| (p.max_tokens, p.max_completion_tokens);
        assert_eq!(bound(sent_params(None, &backend(None), 7)), (Some(7), None));
        assert_eq!(
            bound(sent_params(Some(&plain), &backend(None), 7)),
            (Some(7), None)
        );
        assert_eq!(
            bound(sent_params(Some(&newer), &backend(None), 7)),
            (None, Some(7))
        );
        let reasoning = backend(Some(MaxTokensParam::MaxCompletionTokens));
        assert_eq!(bound(sent_params(None, &reasoning, 7)), (None, Some(7)));
        let classic = backend(Some(MaxTokensParam::MaxTokens));
        assert_eq!(
            bound(sent_params(Some(&newer), &classic, 7)),
            (Some(7), None)
        );
        // The client's other parameters still go.
        assert!(sent_params(Some(&plain), &classic, 7).extra.is_some());
    }
}
