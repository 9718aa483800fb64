//! Anthropic-API models as delegates (`kind = "anthropic"`): the identity card built from
//! what an operator declares (`super::declared`, cache prices included), the calls to such a
//! delegate (`backend.rs`), and the task's translation to a message and back: an Anthropic
//! client's request as it came (unknown fields and blocks included: `cache_control`, thinking
//! blocks, what a later API version adds), another chat dialect's through
//! `crate::chat::anthropic`, else the remembered turns and the task's input as one user
//! message. The wire is the `anthropic-wire` crate's.

pub mod backend;

pub use backend::{Backend, Params, Reply};

use super::chat::{answered, charged, unanswered, user_text, Most, Streamed};
use super::declared::{self, Prices};
use super::KeyError;
use super::{Call, Called, Health, Outcome, Relay, Update};
use crate::chat::{self, estimate_tokens, Chat, Dialect, Native, Turn};
use crate::config::DelegateConfig;
use crate::ldp::IdentityCard;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio::time::Instant;

/// What makes a delegate an Anthropic model: how it is called, and the card declared for it.
#[derive(Debug)]
pub struct Anthropic {
    /// How it is called.
    pub backend: Backend,
    /// The card built from `[delegates.card]`.
    pub card: Arc<IdentityCard>,
}

impl Anthropic {
    /// The entry `cfg` (named `name`, at `base_url`), its key read from `api_key_env`. The
    /// declared card of a delegate without a configured name is named after its model.
    pub fn from_config(
        cfg: &DelegateConfig,
        name: &str,
        base_url: &str,
    ) -> Result<Anthropic, KeyError> {
        let backend = Backend::from_config(cfg, name)?;
        let card = declared::build(
            "anthropic",
            cfg.name.as_deref().unwrap_or(&backend.model),
            base_url,
            &backend.model,
            cfg.card.as_ref().unwrap_or(&declared::EMPTY_CARD),
        );
        Ok(Anthropic {
            backend,
            card: Arc::new(card),
        })
    }

    /// The most output tokens a message here is asked for (see
    /// [`super::chat::output_tokens`]).
    pub fn output_tokens(&self, chat: Option<&Chat>, default: u64) -> u64 {
        super::chat::output_tokens(self.backend.context_window, chat, default)
    }

    /// How many of the newest `turns` fit the context window (see
    /// [`super::chat::turns_that_fit`]).
    pub fn turns_that_fit(&self, turns: &[Turn], user: &str, answer: u64) -> usize {
        super::chat::turns_that_fit(self.backend.context_window, turns, user, answer)
    }

    /// The prices it declared.
    pub fn prices(&self) -> &Prices {
        &self.backend.prices
    }

    /// One message: an Anthropic client's request as it came (with its `anthropic-beta`),
    /// another chat dialect's in Anthropic's words, else the remembered turns then the input
    /// as the user's text; streamed when the client streams. The answer is a result with the
    /// delegate's provenance, tokens (cache reads and writes apart) and cost from usage
    /// (bounded by what the request allowed) × the declared prices, and the turn to remember;
    /// a 429 asks for a pause; a 4xx about the request is the client's answer; anything else
    /// (529 overloaded included) fails over.
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
        // Another dialect's chat, in Anthropic's words.
        let converted = call
            .chat
            .filter(|c| c.dialect != Dialect::Anthropic)
            .map(|c| chat::anthropic::write(&c.conversation()));
        let prompt = match (call.chat, &converted) {
            (_, Some((_, messages, _))) => Prompt::Converted(messages),
            (Some(chat), None) => Prompt::Chat(&chat.messages),
            (None, None) => {
                let mut m = Vec::with_capacity(call.turns.len() * 2 + 1);
                for turn in call.turns {
                    m.push(Said {
                        role: "user",
                        content: &turn.user,
                    });
                    m.push(Said {
                        role: "assistant",
                        content: &turn.assistant,
                    });
                }
                m.push(Said {
                    role: "user",
                    content: &user,
                });
                Prompt::Turns(m)
            }
        };
        let (system, extra) = match (&converted, call.chat) {
            (Some((system, _, params)), _) => (system.as_ref(), Some(params)),
            // An Anthropic client's `system` is among its parameters, as it came.
            (None, chat) => (None, chat.map(|c| &c.params)),
        };
        let client_headers = match call.chat {
            Some(c) if c.dialect == Dialect::Anthropic => c.headers.as_slice(),
            _ => &[],
        };
        let backend = &self.backend;
        let most_out = call.max_output_tokens;
        let params = Params {
            max_tokens: most_out,
            system,
            extra,
            client_headers,
            forward: call.forward,
        };
        let sent = Instant::now();
        let mut used = Streamed::default();
        let (client, base, limit) = (call.client, call.base_url, call.limit);
        let answer = match relay {
            Relay::Quiet => backend.complete(client, base, &prompt, params, limit).await,
            Relay::Pieces(send) => {
                let relay = |piece: chat::Delta| send(piece);
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
            Relay::Updates(tell) => {
                let relay = |piece: chat::Delta| std::future::ready(tell(Update::Note(piece.text)));
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
        };
        let took = sent.elapsed();
        let window = backend.context_window;
        let prices = &backend.prices;
        let sent_text = estimate_sent(&prompt, system.or(extra.and_then(|p| p.get("system"))));
        let mut reply = match answer {
            Ok(reply) => reply,
            Err(e) => {
                let estimated = chat::Usage::new(sent_text, estimate_tokens(used.written));
                let most = Most::of(window, used.request_bytes, most_out);
                return unanswered(call, e, &used, estimated, most, prices, took);
            }
        };
        let estimated = chat::Usage::new(sent_text, estimate_tokens(reply.content.len()));
        let most = Most::of(window, reply.request_bytes, most_out);
        let (charged, note) = charged(call, reply.usage, estimated, most, prices);
        let blocks = std::mem::take(&mut reply.blocks);
        let answer = chat::Answer {
            finish: reply.finish.take(),
            tool_calls: chat::anthropic::tool_calls(&blocks),
            // A stream's blocks went as its events.
            native: (!blocks.is_empty()).then(|| {
                let mut fields = Map::new();
                fields.insert("content".into(), Value::Array(blocks));
                fields.insert("stop_sequence".into(), json!(reply.stop_sequence));
                Native {
                    dialect: Dialect::Anthropic,
                    fields,
                }
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
}

/// What is sent as `messages`: an Anthropic client's as they came, another dialect's in
/// Anthropic's words, or remembered turns and the input.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Chat(&'a [chat::Message]),
    Converted(&'a [Value]),
    Turns(Vec<Said<'a>>),
}

/// One remembered turn, or the input, as a message.
#[derive(serde::Serialize)]
struct Said<'a> {
    role: &'static str,
    content: &'a str,
}

/// Input tokens estimated from what was sent (the messages' content, tool results and calls
/// included, and the system prompt: [`chat::content_bytes`]), for a delegate that reports
/// none.
fn estimate_sent(prompt: &Prompt<'_>, system: Option<&Value>) -> u64 {
    let size = |c: Option<&Value>| c.map_or(0, chat::content_bytes);
    let messages: usize = match prompt {
        Prompt::Chat(m) => m.iter().map(|m| chat::content_bytes(&m.content)).sum(),
        Prompt::Converted(m) => m.iter().map(|m| size(m.get("content"))).sum(),
        Prompt::Turns(m) => m.iter().map(|m| m.content.len()).sum(),
    };
    estimate_tokens(messages + size(system))
}
