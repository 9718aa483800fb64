//! OpenAI-compatible models as delegates (`kind = "openai"`): the identity card built from
//! what an operator declares (`card.rs`), the calls to such a delegate (`backend.rs`), and the
//! task's translation to a chat completion and back. The wire is the `openai-wire` crate's.

pub mod backend;
pub mod card;

pub use backend::{
    Backend, BackendError, ChatError, ChatSummary, Params, Piece, Reply, Stopped, Streamed,
};
pub use card::Prices;
pub use openai_wire::{estimate_tokens, Usage};

use crate::config::DelegateConfig;
use crate::ldp::IdentityCard;
use std::sync::Arc;

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
    ) -> Result<OpenAi, BackendError> {
        let backend = Backend::from_config(cfg, name)?;
        let card = card::build(
            cfg.name.as_deref().unwrap_or(&backend.model),
            base_url,
            &backend.model,
            cfg.card.as_ref().unwrap_or(&EMPTY_CARD),
        );
        Ok(OpenAi {
            backend,
            card: Arc::new(card),
        })
    }
}

/// The card of an `openai` entry without `[delegates.card]` (`check` refuses one; a
/// registration through the API has none).
static EMPTY_CARD: crate::config::DeclaredCard = crate::config::DeclaredCard {
    skills: Vec::new(),
    quality: None,
    price_per_mtok_input: None,
    price_per_mtok_output: None,
    latency_p50_ms: None,
    jurisdiction: None,
    trust_domain: None,
    context_window: None,
    model_family: None,
};

use super::{Answered, Call, Called, Failure, Health, Outcome, Relay, Update};
use crate::chat::Turn;
use crate::chat::{self, Chat};
use crate::config::MaxTokensParam;
use crate::ldp::error::GatewayCode;
use crate::ldp::{ErrorCategory, ErrorSeverity, Json, LdpError, PayloadMode, Provenance};
use crate::translate::{render_text, translate_input};
use openai_wire as wire;
use tokio::time::Instant;

/// What is sent: a chat front end's messages, or remembered turns and the input (either way
/// written as the `messages` array).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Chat(&'a [chat::Message]),
    Turns(Vec<wire::Turn<'a>>),
}

impl OpenAi {
    /// The most output tokens a completion here is asked for, which is what its budget hold
    /// assumes and what its request allows: the chat client's `max_tokens` (or
    /// `max_completion_tokens`), held for however large, within the context window; else
    /// `default`, within the room left for the answer (a quarter of the window).
    pub fn output_tokens(&self, chat: Option<&Chat>, default: u64) -> u64 {
        let asked = chat.and_then(|c| c.max_output_tokens);
        match (asked, self.backend.context_window) {
            (Some(asked), Some(window)) => asked.min(window),
            (Some(asked), None) => asked,
            (None, Some(window)) => default.min(window / 4).max(1),
            (None, None) => default,
        }
    }

    /// How many of the newest `turns` fit the context window with `user`'s text and room
    /// for an answer of `answer` tokens (all of them without a declared window).
    pub fn turns_that_fit(&self, turns: &[Turn], user: &str, answer: u64) -> usize {
        let Some(window) = self.backend.context_window else {
            return turns.len();
        };
        let mut room = window
            .saturating_sub(answer)
            .saturating_sub(estimate_tokens(user.len()));
        let mut keep = 0;
        for turn in turns.iter().rev() {
            let need = estimate_tokens(turn.user.len()) + estimate_tokens(turn.assistant.len());
            if need > room {
                break;
            }
            room -= need;
            keep += 1;
        }
        keep
    }

    /// One completion: the chat front end's messages as they came, else the remembered turns
    /// then the input as the user's text; streamed when the client streams. The answer is a
    /// result with the delegate's provenance, tokens and cost from usage (bounded by what the
    /// request allowed) × the declared prices, and the turn to remember; a 429 asks for a
    /// pause; a 4xx about the request is the client's answer; anything else fails over.
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
        let prompt = match call.chat {
            Some(chat) => Prompt::Chat(&chat.messages),
            None => {
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
        let backend = &self.backend;
        let most_out = call.max_output_tokens;
        let mut params = bounded_params(call.chat, backend, most_out);
        // As over LDP: a gateway behind this delegate (this one, say, by a URL that is its
        // own `/v1`) counts the hop and refuses a loop at `upstream.max_hops`.
        params.hops = call.forward.hops;
        params.trace = call.forward.trace;
        let sent = Instant::now();
        let mut used = Streamed::default();
        let (client, base, limit) = (call.client, call.base_url, call.limit);
        let answered = match relay {
            Relay::Quiet => backend.complete(client, base, &prompt, params, limit).await,
            Relay::Pieces(send) => {
                let relay = |piece: Piece| send(piece);
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
            Relay::Updates(tell) => {
                // Every piece, empty or not: the relay stops the read when nobody listens.
                let relay = |piece: Piece| std::future::ready(tell(Update::Note(piece.text)));
                backend
                    .stream(client, base, &prompt, params, limit, &mut used, relay)
                    .await
            }
        };
        let took = sent.elapsed();
        // What the delegate could have used: the output the request allowed, and a prompt
        // within its context window (undeclared: no more tokens than the request's bytes).
        let most = |request_bytes: usize| {
            Usage::new(
                backend.context_window.unwrap_or(request_bytes as u64),
                most_out,
            )
        };
        let mut notes = Vec::new();
        let mut clamped = false;
        let mut reply = match answered {
            Ok(reply) => reply,
            Err(e) => {
                // An answer cut short (the client left, the cap, a break) was used all the
                // same: it is charged and recorded.
                let used_up = (used.bytes > 0 || used.usage.is_some()).then(|| {
                    let estimated = estimate_usage(&prompt, used.bytes);
                    let (usage, note) =
                        charged_usage(call, used.usage, estimated, most(used.request_bytes));
                    clamped |= note.is_some();
                    notes.extend(note);
                    let cost = backend
                        .prices
                        .cost(usage.prompt_tokens, usage.completion_tokens);
                    (neutral(usage), cost)
                });
                let mut outcome = match used.stopped {
                    Some(Stopped::Unheard) => {
                        // No failover, no fault: nobody is left to answer.
                        let error = LdpError::new(
                            "CANCELLED",
                            ErrorCategory::Runtime,
                            ErrorSeverity::Error,
                            false,
                            format!(
                                "the client went away; the answer from delegate '{}' was stopped after {} bytes",
                                call.told, used.bytes
                            ),
                        );
                        Outcome::of(Called::Refused(error, None), Health::Unknown, took)
                    }
                    Some(Stopped::Cap(cap)) => {
                        let mut failed = chat_failed(call.told, e, took);
                        if let Called::Failed(f) = &mut failed.called {
                            f.error.message = format!(
                                "delegate '{}' streamed an answer larger than {cap} bytes; stopped reading",
                                call.told
                            );
                        }
                        failed
                    }
                    None => chat_failed(call.told, e, took),
                };
                outcome.used = used_up;
                outcome.notes = notes;
                outcome.clamped = clamped;
                return outcome;
            }
        };
        let estimated = estimate_usage(&prompt, reply.content.len());
        let (usage, note) = charged_usage(call, reply.usage, estimated, most(reply.request_bytes));
        clamped |= note.is_some();
        notes.extend(note);
        let cost = backend
            .prices
            .cost(usage.prompt_tokens, usage.completion_tokens);
        let mut p = Provenance::new(
            self.card.delegate_id.clone(),
            reply.model.clone(),
            PayloadMode::Text,
        );
        p.tokens_used = Some(usage.total_tokens);
        p.cost_usd = Some(cost);
        let turn = call.session.map(|_| Turn {
            user: user.into(),
            assistant: reply.content.as_str().into(),
        });
        let fields = (!reply.other.is_empty()).then(|| std::mem::take(&mut reply.other));
        let answered = Answered {
            output: Json::from(serde_json::Value::String(reply.content)),
            provenance: Some(p),
            usage: Some(neutral(usage)),
            finish_reason: reply.finish_reason,
            fields,
            turn,
        };
        Outcome {
            notes,
            clamped,
            ..Outcome::of(
                Called::Answered(Box::new(answered)),
                Health::Answered(took),
                took,
            )
        }
    }
}

/// A failed completion: a 429 asks for a pause; the delegate's health is judged; a failure
/// of the delegate's may fail over, a refusal of the request is the client's answer.
fn chat_failed(told: &str, e: ChatError, took: std::time::Duration) -> Outcome {
    let pause = e.pause();
    let health = if pause.is_some() {
        Health::Unknown
    } else if e.is_delegate_fault() {
        Health::Faulted(e.timed_out().then_some(took))
    } else {
        Health::Answered(took)
    };
    let retryable = e.retryable();
    let called = match e {
        // The request's own refusal (400, 413, 422): the client's answer, with the delegate's
        // words (they are about the request).
        ChatError::Status { status, detail, .. } if !retryable => {
            let message = format!(
                "delegate '{told}' refused the request (HTTP {status}): {}",
                detail.message
            );
            let error = LdpError::gateway(GatewayCode::BadRequest, message);
            let refusal = chat::Refusal {
                status,
                message: detail.message,
                kind: detail.kind,
                param: detail.param,
                code: detail.code,
            };
            Called::Refused(error, Some(refusal))
        }
        e => {
            // The client hears the delegate's name and a generic reason; the log and the
            // ledger row get the rest (its address, the provider's message).
            let error = match pause {
                // What the client hears if no other delegate can take it: a rate limit.
                Some(p) => LdpError::gateway(
                    GatewayCode::RateLimited,
                    format!(
                        "delegate '{told}' is rate-limited (HTTP 429); retry after {} s",
                        p.as_secs_f64().ceil()
                    ),
                ),
                None => LdpError::upstream_failed(
                    format!("delegate '{told}' {}", e.summary()),
                    retryable,
                ),
            };
            Called::Failed(Box::new(Failure {
                error,
                reason: e.reason(),
                retryable,
                detail: e.to_string(),
                pause,
            }))
        }
    };
    Outcome {
        pause,
        ..Outcome::of(called, health, took)
    }
}

/// Usage as charged: `reported` (else `estimated` from the text) within `most`, what the
/// delegate could have used; and, when a reported count was beyond it (a delegate's error or
/// lie), the note that says so (it is clamped, logged, counted and noted in the row).
fn charged_usage(
    call: &Call<'_>,
    reported: Option<Usage>,
    estimated: Usage,
    most: Usage,
) -> (Usage, Option<String>) {
    let within = |u: Usage| {
        Usage::new(
            u.prompt_tokens.min(most.prompt_tokens),
            u.completion_tokens.min(most.completion_tokens),
        )
    };
    let Some(r) = reported else {
        return (within(estimated), None);
    };
    let usage = within(r);
    if usage == Usage::new(r.prompt_tokens, r.completion_tokens) {
        return (usage, None);
    }
    tracing::warn!(
        delegate = %call.name,
        reported_prompt = r.prompt_tokens,
        reported_completion = r.completion_tokens,
        most_prompt = most.prompt_tokens,
        most_completion = most.completion_tokens,
        "a delegate reported more tokens than it could have used; charged within the bound"
    );
    let note = format!(
        "usage clamped: {} reported {} prompt and {} completion tokens, at most {} and {} possible",
        call.told, r.prompt_tokens, r.completion_tokens, most.prompt_tokens, most.completion_tokens
    );
    (usage, Some(note))
}

/// The task's input as the user's text: a string as it is, anything else (a frame) rendered
/// field by field, as across the LDP hop.
pub fn user_text(input: &Json, mode: PayloadMode) -> Result<String, LdpError> {
    let bad = |e: serde_json::Error| {
        LdpError::gateway(
            GatewayCode::BadRequest,
            format!("the task input cannot be read as text: {e}"),
        )
    };
    let text = translate_input(input, mode, PayloadMode::Text).map_err(bad)?;
    Ok(render_text(&text.to_value().map_err(bad)?))
}

/// The wire's token counts in the pipeline's words.
fn neutral(u: Usage) -> chat::Usage {
    chat::Usage {
        input_tokens: u.prompt_tokens,
        output_tokens: u.completion_tokens,
        total_tokens: u.total_tokens,
    }
}

/// Usage estimated from the text sent and `answered` bytes, for a delegate that reports none.
fn estimate_usage(prompt: &Prompt<'_>, answered: usize) -> Usage {
    let sent: usize = match prompt {
        Prompt::Chat(m) => m.iter().map(|m| m.text().len()).sum(),
        Prompt::Turns(m) => m.iter().map(|m| m.content.len()).sum(),
    };
    Usage::new(estimate_tokens(sent), estimate_tokens(answered))
}

/// The request's parameters, its output bound `most_out` sent in the field the delegate is
/// configured for (else the one the chat client named, else `max_tokens`).
fn bounded_params<'a>(chat: Option<&'a Chat>, backend: &Backend, most_out: u64) -> Params<'a> {
    let newer = match backend.max_tokens_param {
        Some(p) => p == MaxTokensParam::MaxCompletionTokens,
        None => chat.is_some_and(|c| c.newer_bound),
    };
    Params {
        max_tokens: (!newer).then_some(most_out),
        max_completion_tokens: newer.then_some(most_out),
        extra: chat.map(|c| &c.params),
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

    #[test]
    fn the_output_bound_goes_in_the_field_the_delegate_or_the_client_names() {
        let messages = serde_json::json!([{"role": "user", "content": "hi"}]);
        let plain = chat(serde_json::json!({"model": "m", "messages": messages}));
        let newer = chat(serde_json::json!({"model": "m", "messages": messages,
            "max_completion_tokens": 9}));
        let sent = |p: Params<'_>| (p.max_tokens, p.max_completion_tokens);
        assert_eq!(
            sent(bounded_params(None, &backend(None), 7)),
            (Some(7), None)
        );
        assert_eq!(
            sent(bounded_params(Some(&plain), &backend(None), 7)),
            (Some(7), None)
        );
        assert_eq!(
            sent(bounded_params(Some(&newer), &backend(None), 7)),
            (None, Some(7))
        );
        let reasoning = backend(Some(MaxTokensParam::MaxCompletionTokens));
        assert_eq!(sent(bounded_params(None, &reasoning, 7)), (None, Some(7)));
        let classic = backend(Some(MaxTokensParam::MaxTokens));
        assert_eq!(
            sent(bounded_params(Some(&newer), &classic, 7)),
            (Some(7), None)
        );
        // The client's other parameters still go.
        assert!(bounded_params(Some(&plain), &classic, 7).extra.is_some());
    }
}
