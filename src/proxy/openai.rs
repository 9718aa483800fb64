//! One attempt at an OpenAI-backed delegate: the task becomes a chat completion (the
//! session's remembered turns, fitted to the context window, then the input as the user
//! message; or the OpenAI ingress's messages as they came), streamed when the client streams;
//! the answer becomes a result with the delegate's provenance, tokens and cost from usage ×
//! the declared prices. A 429 pauses the delegate for its `Retry-After`; 5xx, timeouts and
//! transport failures fail over; a 4xx about the request is the client's answer.

use super::attempt::{Attempt, Failure, Health};
use super::chat::ChatDelta;
use super::task::{Answer, Progress, TaskCtx, TaskRun};
use super::Proxy;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Json, LdpError, PayloadMode, Provenance};
use crate::openai::conversation::Turn;
use crate::openai::wire::{self, Usage};
use crate::openai::{estimate_tokens, ChatError, Params, Reply};
use crate::registry::{Delegate, OpenAiDelegate};
use crate::session::Binding;
use crate::translate::{render_text, translate_input};
use std::sync::Arc;
use tokio::time::Instant;

/// What is sent: the ingress's messages, or remembered turns and the input (either way
/// written as the `messages` array).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Prompt<'a> {
    Chat(&'a [wire::Message]),
    Turns(Vec<wire::Turn<'a>>),
}

impl Proxy {
    /// One OpenAI-backed delegate's handling of the task; `charged` gets its cost.
    pub(super) async fn complete(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: Binding,
        openai: &OpenAiDelegate,
        deadline: Instant,
        charged: &mut f64,
    ) -> Attempt {
        let delegate = binding.delegate.clone();
        run.attempts += 1;
        run.mode = Some(PayloadMode::Text);
        run.binding = Some(binding.clone());
        t.tell(
            self.id(),
            Some(0.0),
            format_args!("routed to {}", delegate.name),
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let e = crate::upstream::UpstreamError::Timeout {
                url: delegate.base_url.clone(),
                after: left,
            };
            return Attempt::Failed(Failure {
                reason: "timeout",
                retryable: false,
                ..Failure::upstream(&delegate, &e)
            });
        }
        // An LDP task: its input as the user's text (a frame rendered as across the LDP hop),
        // after the session's remembered turns. The ingress sends its own messages.
        let (user, turns) = match t.task.chat {
            Some(_) => (String::new(), Vec::new()),
            None => match user_text(t) {
                // A verification is judged on its own: no conversation read or kept.
                Ok(user) if t.task.verifying => (user, Vec::new()),
                Ok(user) => {
                    let turns = self.fitted_turns(t, openai, &user);
                    (user, turns)
                }
                Err(error) => return Attempt::Done(Answer::Failed(error)),
            },
        };
        let prompt = match t.task.chat {
            Some(chat) => Prompt::Chat(&chat.messages),
            None => {
                let mut m = Vec::with_capacity(turns.len() * 2 + 1);
                for turn in &turns {
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
        let mut params = t.task.chat.map_or_else(Params::default, |c| Params {
            max_tokens: c.max_tokens,
            max_completion_tokens: c.max_completion_tokens,
            extra: Some(&c.extra),
            ..Params::default()
        });
        // As over LDP: a gateway behind this delegate (this one, say, by a URL that is its
        // own `/v1`) counts the hop and refuses a loop at `upstream.max_hops`.
        params.hops = Some(t.hops.saturating_add(1));
        let limit = Self::attempt_timeout(&t.policy, left);
        let sent = Instant::now();
        let answered = self
            .call(t, &delegate, openai, &prompt, params, limit)
            .await;
        let took = sent.elapsed();
        run.upstream += took;
        match answered {
            Ok(reply) => {
                self.judge(&delegate, Health::Answered(took));
                let usage = reply
                    .usage
                    .unwrap_or_else(|| estimate_usage(&prompt, &reply));
                let cost = openai
                    .backend
                    .prices
                    .cost(usage.prompt_tokens, usage.completion_tokens);
                *charged = cost;
                run.usage = Some(usage);
                run.finish_reason = reply.finish_reason.clone();
                let mut p = Provenance::new(
                    openai.card.delegate_id.clone(),
                    reply.model.clone(),
                    PayloadMode::Text,
                );
                p.tokens_used = Some(usage.total_tokens);
                p.cost_usd = Some(cost);
                let provenance =
                    self.route_provenance(t, &binding, PayloadMode::Text, Some(p), run);
                if t.task.chat.is_none() && !t.task.verifying {
                    let turn = Turn {
                        user: user.into(),
                        assistant: reply.content.as_str().into(),
                    };
                    self.remember(t, turn);
                }
                let output = Json::from(serde_json::Value::String(reply.content));
                Attempt::Done(Answer::Result { output, provenance })
            }
            Err(e) => self.chat_failed(&delegate, run, e, took),
        }
    }

    /// Sends the prompt, streamed when the client streams.
    async fn call(
        &self,
        t: &TaskCtx<'_>,
        delegate: &Arc<Delegate>,
        openai: &OpenAiDelegate,
        prompt: &Prompt<'_>,
        params: Params<'_>,
        limit: std::time::Duration,
    ) -> Result<Reply, ChatError> {
        let (b, client, base) = (&openai.backend, &self.upstream, delegate.base_url.as_str());
        match t.progress {
            Progress::Quiet => b.complete(client, base, prompt, params, limit).await,
            Progress::Deltas(tx) => {
                // The answer's text itself: waited for, never dropped (a slow client slows
                // the read; one that left is not waited for).
                let relay = |text: String| {
                    let delta = ChatDelta {
                        text,
                        delegate: Arc::clone(delegate),
                        policy: Arc::clone(&t.policy),
                    };
                    async move {
                        let _ = tx.send(delta).await;
                    }
                };
                b.stream(client, base, prompt, params, limit, relay).await
            }
            Progress::Updates(tx) => {
                let relay = |delta: String| {
                    let update = t.env.reply(
                        self.id(),
                        Body::TaskUpdate {
                            task_id: t.task.task_id.clone(),
                            progress: None,
                            message: Some(delta),
                        },
                        PayloadMode::Text,
                    );
                    // Dropped if the client is not keeping up: its TASK_RESULT carries the
                    // whole answer.
                    let _ = tx.try_send(update);
                    std::future::ready(())
                };
                b.stream(client, base, prompt, params, limit, relay).await
            }
        }
    }

    /// The session's turns for the skill that fit the delegate's context window with the
    /// input and room for an answer (a quarter of the window, at most
    /// `openai.default_max_tokens`); older ones are forgotten and counted.
    fn fitted_turns(&self, t: &TaskCtx<'_>, openai: &OpenAiDelegate, user: &str) -> Vec<Turn> {
        let conversation = &t.session.conversation;
        let mut turns = conversation.turns(t.task.skill);
        let Some(window) = openai.backend.context_window else {
            return turns;
        };
        let answer = (window / 4).min(self.cfg.openai.default_max_tokens);
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
        let drop = turns.len() - keep;
        if drop > 0 {
            let forgotten = conversation.forget_oldest(t.task.skill, drop);
            self.metrics
                .openai_turns_dropped
                .with_label_values(&["context_window"])
                .inc_by(forgotten as u64);
            turns.drain(..drop);
        }
        turns
    }

    /// Adds the task's turn to its session's conversation, within `openai.session_memory_bytes`.
    fn remember(&self, t: &TaskCtx<'_>, turn: Turn) {
        let cap = usize::try_from(self.cfg.openai.session_memory_bytes).unwrap_or(usize::MAX);
        let dropped = t.session.conversation.push(t.task.skill, turn, cap);
        if dropped > 0 {
            self.metrics
                .openai_turns_dropped
                .with_label_values(&["memory_cap"])
                .inc_by(dropped as u64);
        }
    }

    /// A failed completion: a 429 pauses the delegate; its health is judged; a failure of the
    /// delegate's may fail over, a refusal of the request is the client's answer.
    fn chat_failed(
        &self,
        delegate: &Delegate,
        run: &mut TaskRun,
        e: ChatError,
        took: std::time::Duration,
    ) -> Attempt {
        let pause = e.pause();
        let health = if pause.is_some() {
            Health::Unknown
        } else if e.is_delegate_fault() {
            Health::Faulted(e.timed_out().then_some(took))
        } else {
            Health::Answered(took)
        };
        if let Some(p) = pause {
            delegate.pause(p);
        }
        self.judge(delegate, health);
        let retryable = e.retryable();
        match e {
            // The request's own refusal (400, 413, 422): the client's answer, with the
            // delegate's words (they are about the request).
            ChatError::Status { status, detail, .. } if !retryable => {
                let message = format!(
                    "delegate '{}' refused the request (HTTP {status}): {}",
                    delegate.name, detail.message
                );
                run.refused_upstream = Some((status, *detail));
                Attempt::Done(Answer::Failed(LdpError::gateway(
                    GatewayCode::BadRequest,
                    message,
                )))
            }
            e => {
                // The client hears the delegate's name and a generic reason; the log and the
                // ledger row get the rest (its address, the provider's message).
                let error = match pause {
                    // What the client hears if no other delegate can take it: a rate limit.
                    Some(p) => LdpError::gateway(
                        GatewayCode::RateLimited,
                        format!(
                            "delegate '{}' is rate-limited (HTTP 429); retry after {} s",
                            delegate.name,
                            p.as_secs_f64().ceil()
                        ),
                    ),
                    None => LdpError::upstream_failed(
                        format!("delegate '{}' {}", delegate.name, e.summary()),
                        retryable,
                    ),
                };
                Attempt::Failed(Failure {
                    error,
                    reason: e.reason(),
                    retryable,
                    detail: e.to_string(),
                    pause,
                })
            }
        }
    }
}

/// The task's input as the user's text: a string as it is, anything else (a frame) rendered
/// field by field, as across the LDP hop.
fn user_text(t: &TaskCtx<'_>) -> Result<String, LdpError> {
    let bad = |e: serde_json::Error| {
        LdpError::gateway(
            GatewayCode::BadRequest,
            format!("the task input cannot be read as text: {e}"),
        )
    };
    let text = translate_input(t.task.input, t.env.payload_mode, PayloadMode::Text).map_err(bad)?;
    Ok(render_text(&text.to_value().map_err(bad)?))
}

/// Usage estimated from the text sent and answered, for a delegate that reports none.
fn estimate_usage(prompt: &Prompt<'_>, reply: &Reply) -> Usage {
    let sent: usize = match prompt {
        Prompt::Chat(m) => m.iter().map(|m| m.text().len()).sum(),
        Prompt::Turns(m) => m.iter().map(|m| m.content.len()).sum(),
    };
    Usage::new(estimate_tokens(sent), estimate_tokens(reply.content.len()))
}
