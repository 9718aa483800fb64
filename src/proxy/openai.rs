//! One attempt at an OpenAI-backed delegate: the task becomes a chat completion (the
//! session's remembered turns, fitted to the context window, then the input as the user
//! message; or the OpenAI ingress's messages as they came), streamed when the client streams;
//! the answer becomes a result with the delegate's provenance, tokens and cost from usage ×
//! the declared prices. A 429 pauses the delegate for its `Retry-After`; 5xx, timeouts and
//! transport failures fail over; a 4xx about the request is the client's answer.

use super::attempt::{Attempt, Failure, Health};
use super::task::{Answer, ChatDelta, Progress, TaskCtx, TaskRun, Unfinished};
use super::Proxy;
use crate::chat::Turn;
use crate::config::MaxTokensParam;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, ErrorCategory, ErrorSeverity, Json, LdpError, PayloadMode, Provenance};
use crate::registry::Delegate;
use crate::session::Binding;
use crate::state::ConversationStore as _;
use crate::translate::{render_text, translate_input};
use crate::upstream::openai::OpenAi as OpenAiDelegate;
use crate::upstream::openai::{
    estimate_tokens, Backend, ChatError, Params, Piece, Reply, Stopped, Streamed,
};
use openai_wire::{self as wire, ChatRequest, Usage};
use std::ops::ControlFlow;
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
        let left = match self.begin_attempt(t, run, &binding, deadline) {
            Ok(left) => left,
            Err(timed_out) => return Attempt::Failed(*timed_out),
        };
        // An LDP task: its input as the user's text (a frame rendered as across the LDP hop),
        // after the session's remembered turns. The ingress sends its own messages.
        let (user, turns) = match t.task.chat {
            Some(_) => (String::new(), Vec::new()),
            None => match user_text(t) {
                // A verification is judged on its own, and a front end's task carries its
                // whole context (the tenant's one session is every agent's): no
                // conversation read or kept.
                Ok(user) if t.stateless() => (user, Vec::new()),
                Ok(user) => {
                    let turns = self.fitted_turns(t, openai, &user).await;
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
        let backend = &openai.backend;
        // The output bound the budget hold assumed: the request allows no more.
        let most_out = self.output_tokens(t.task.chat, backend);
        let trace = run.span.headers();
        let mut params = bounded_params(t.task.chat, backend, most_out);
        // As over LDP: a gateway behind this delegate (this one, say, by a URL that is its
        // own `/v1`) counts the hop and refuses a loop at `upstream.max_hops`.
        params.hops = Some(t.hops.saturating_add(1));
        params.trace = &trace;
        let limit = Self::attempt_timeout(&t.policy, left);
        let sent = Instant::now();
        let mut used = Streamed::default();
        let answered = self
            .call(t, &delegate, openai, &prompt, params, limit, &mut used)
            .await;
        let took = sent.elapsed();
        run.upstream += took;
        // What the delegate could have used: the output the request allowed, and a prompt
        // within its context window (undeclared: no more tokens than the request's bytes).
        let most = |request_bytes: usize| {
            Usage::new(
                backend.context_window.unwrap_or(request_bytes as u64),
                most_out,
            )
        };
        let mut reply = match answered {
            Ok(reply) => reply,
            Err(e) => {
                // An answer cut short (the client left, the cap, a break) was used all the
                // same: it is charged and recorded.
                if used.bytes > 0 || used.usage.is_some() {
                    let estimated = estimate_usage(&prompt, used.bytes);
                    let usage = self.charged_usage(
                        run,
                        &delegate,
                        used.usage,
                        estimated,
                        most(used.request_bytes),
                    );
                    let cost = backend
                        .prices
                        .cost(usage.prompt_tokens, usage.completion_tokens);
                    *charged = cost;
                    run.usage = Some(usage);
                    run.unfinished = Some(Unfinished {
                        tokens: usage.total_tokens,
                        cost_usd: cost,
                    });
                }
                return match used.stopped {
                    Some(Stopped::Unheard) => {
                        // No failover, no fault: nobody is left to answer.
                        let error = LdpError::new(
                            "CANCELLED",
                            ErrorCategory::Runtime,
                            ErrorSeverity::Error,
                            false,
                            format!(
                                "the client went away; the answer from delegate '{}' was stopped after {} bytes",
                                delegate.client_name(), used.bytes
                            ),
                        );
                        Attempt::Done(Answer::Failed(error))
                    }
                    Some(Stopped::Cap(cap)) => {
                        let mut failed = self.chat_failed(&delegate, run, e, took);
                        if let Attempt::Failed(f) = &mut failed {
                            f.error.message = format!(
                                "delegate '{}' streamed an answer larger than {cap} bytes; stopped reading",
                                delegate.client_name()
                            );
                        }
                        failed
                    }
                    None => self.chat_failed(&delegate, run, e, took),
                };
            }
        };
        self.judge(&delegate, Health::Answered(took));
        let estimated = estimate_usage(&prompt, reply.content.len());
        let usage = self.charged_usage(
            run,
            &delegate,
            reply.usage,
            estimated,
            most(reply.request_bytes),
        );
        let cost = backend
            .prices
            .cost(usage.prompt_tokens, usage.completion_tokens);
        *charged = cost;
        run.usage = Some(usage);
        run.finish_reason = reply.finish_reason.clone();
        run.reply_fields = (!reply.other.is_empty()).then(|| std::mem::take(&mut reply.other));
        let mut p = Provenance::new(
            openai.card.delegate_id.clone(),
            reply.model.clone(),
            PayloadMode::Text,
        );
        p.tokens_used = Some(usage.total_tokens);
        p.cost_usd = Some(cost);
        let provenance = self.route_provenance(t, &binding, PayloadMode::Text, Some(p), run);
        if !t.stateless() {
            let turn = Turn {
                user: user.into(),
                assistant: reply.content.as_str().into(),
            };
            self.remember(t, turn).await;
        }
        let output = Json::from(serde_json::Value::String(reply.content));
        Attempt::Done(Answer::Result { output, provenance })
    }

    /// The most output tokens a completion at `backend` is asked for, which is what its
    /// budget hold assumes and what its request allows: the ingress client's `max_tokens` (or
    /// `max_completion_tokens`), held for however large, within the context window; else
    /// `openai.default_max_tokens`, within the room left for the answer (a quarter of the
    /// window).
    pub(super) fn output_tokens(&self, chat: Option<&ChatRequest>, backend: &Backend) -> u64 {
        let asked = chat.and_then(ChatRequest::max_output_tokens);
        let default = self.cfg.openai.default_max_tokens;
        match (asked, backend.context_window) {
            (Some(asked), Some(window)) => asked.min(window),
            (Some(asked), None) => asked,
            (None, Some(window)) => default.min(window / 4).max(1),
            (None, None) => default,
        }
    }

    /// Usage as charged: `reported` (else `estimated` from the text) within `most`, what the
    /// delegate could have used. A reported count beyond it is a delegate's error or lie:
    /// clamped, logged, counted (`ldp_gateway_usage_clamped_total`) and noted in the row.
    fn charged_usage(
        &self,
        run: &mut TaskRun,
        delegate: &Delegate,
        reported: Option<Usage>,
        estimated: Usage,
        most: Usage,
    ) -> Usage {
        let within = |u: Usage| {
            Usage::new(
                u.prompt_tokens.min(most.prompt_tokens),
                u.completion_tokens.min(most.completion_tokens),
            )
        };
        let Some(r) = reported else {
            return within(estimated);
        };
        let usage = within(r);
        if usage != Usage::new(r.prompt_tokens, r.completion_tokens) {
            tracing::warn!(
                delegate = %delegate.name,
                reported_prompt = r.prompt_tokens,
                reported_completion = r.completion_tokens,
                most_prompt = most.prompt_tokens,
                most_completion = most.completion_tokens,
                "a delegate reported more tokens than it could have used; charged within the bound"
            );
            self.metrics
                .usage_clamped
                .with_label_values(&[delegate.name.as_str()])
                .inc();
            run.notes.push(format!(
                "usage clamped: {} reported {} prompt and {} completion tokens, at most {} and {} possible",
                delegate.client_name(),
                r.prompt_tokens,
                r.completion_tokens,
                most.prompt_tokens,
                most.completion_tokens
            ));
        }
        usage
    }

    /// Sends the prompt, streamed when the client streams (`used` says what a stream used).
    #[expect(
        clippy::too_many_arguments,
        reason = "one call, every part of it needed"
    )]
    async fn call(
        &self,
        t: &TaskCtx<'_>,
        delegate: &Arc<Delegate>,
        openai: &OpenAiDelegate,
        prompt: &Prompt<'_>,
        params: Params<'_>,
        limit: std::time::Duration,
        used: &mut Streamed,
    ) -> Result<Reply, ChatError> {
        let (b, client, base) = (&openai.backend, &self.upstream, delegate.base_url.as_str());
        match t.progress {
            Progress::Quiet => b.complete(client, base, prompt, params, limit).await,
            Progress::Deltas(tx) => {
                let relay = |piece: Piece| {
                    let delta = (!piece.is_empty()).then(|| ChatDelta {
                        text: piece.text,
                        other: piece.other,
                        delegate: Arc::clone(delegate),
                        policy: Arc::clone(&t.policy),
                    });
                    let cancelled = t.cancelled();
                    async move {
                        match delta {
                            // Cancelled: nobody is to be answered.
                            _ if cancelled => ControlFlow::Break(()),
                            // The answer itself: waited for, never dropped (a slow client
                            // slows the read); nobody to take it stops the read.
                            Some(d) => match tx.send(d).await {
                                Ok(()) => ControlFlow::Continue(()),
                                Err(_) => ControlFlow::Break(()),
                            },
                            None if tx.is_closed() => ControlFlow::Break(()),
                            None => ControlFlow::Continue(()),
                        }
                    }
                };
                b.stream(client, base, prompt, params, limit, used, relay)
                    .await
            }
            Progress::Updates(tx) => {
                let relay = |piece: Piece| {
                    if tx.is_closed() || t.cancelled() {
                        // The client left (or cancelled): nobody reads the rest.
                        return std::future::ready(ControlFlow::Break(()));
                    }
                    if !piece.text.is_empty() {
                        let update = t.env.reply(
                            self.id(),
                            Body::TaskUpdate {
                                task_id: t.task.task_id.clone(),
                                progress: None,
                                message: Some(piece.text),
                            },
                            PayloadMode::Text,
                        );
                        // Dropped if the client is not keeping up: its TASK_RESULT carries
                        // the whole answer.
                        let _ = tx.try_send(update);
                    }
                    std::future::ready(ControlFlow::Continue(()))
                };
                b.stream(client, base, prompt, params, limit, used, relay)
                    .await
            }
        }
    }

    /// The session's turns for the skill that fit the delegate's context window with the
    /// input and room for an answer (a quarter of the window, at most
    /// `openai.default_max_tokens`); older ones are forgotten and counted.
    async fn fitted_turns(
        &self,
        t: &TaskCtx<'_>,
        openai: &OpenAiDelegate,
        user: &str,
    ) -> Vec<Turn> {
        let session = &t.session.id;
        let tenant = &t.session.tenant;
        let mut turns = self
            .conversations
            .turns(tenant, session, t.task.skill)
            .await;
        let Some(window) = openai.backend.context_window else {
            return turns;
        };
        let answer = self.output_tokens(None, &openai.backend);
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
            let forgotten = self
                .conversations
                .forget_oldest(tenant, session, t.task.skill, drop)
                .await;
            self.metrics
                .openai_turns_dropped
                .with_label_values(&["context_window"])
                .inc_by(forgotten as u64);
            turns.drain(..drop);
        }
        turns
    }

    /// Adds the task's turn to its session's conversation, within `openai.session_memory_bytes`
    /// and, every session together, `openai.memory_bytes`.
    async fn remember(&self, t: &TaskCtx<'_>, turn: Turn) {
        let cap = usize::try_from(self.cfg.openai.session_memory_bytes).unwrap_or(usize::MAX);
        let (session, skill) = (&t.session.id, t.task.skill);
        let pushed = self
            .conversations
            .push(&t.session.tenant, session, skill, turn, cap, t.session.ttl)
            .await;
        if pushed.dropped > 0 {
            self.metrics
                .openai_turns_dropped
                .with_label_values(&["memory_cap"])
                .inc_by(pushed.dropped as u64);
        }
        if pushed.evicted > 0 {
            self.metrics
                .conversations_evicted
                .inc_by(pushed.evicted as u64);
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
                    delegate.client_name(),
                    detail.message
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
                            delegate.client_name(),
                            p.as_secs_f64().ceil()
                        ),
                    ),
                    None => LdpError::upstream_failed(
                        format!("delegate '{}' {}", delegate.client_name(), e.summary()),
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

/// Usage estimated from the text sent and `answered` bytes, for a delegate that reports none.
fn estimate_usage(prompt: &Prompt<'_>, answered: usize) -> Usage {
    let sent: usize = match prompt {
        Prompt::Chat(m) => m.iter().map(|m| m.text().len()).sum(),
        Prompt::Turns(m) => m.iter().map(|m| m.content.len()).sum(),
    };
    Usage::new(estimate_tokens(sent), estimate_tokens(answered))
}

/// The request's parameters, its output bound `most_out` sent in the field the delegate is
/// configured for (else the one the ingress client named, else `max_tokens`).
fn bounded_params<'a>(
    chat: Option<&'a ChatRequest>,
    backend: &Backend,
    most_out: u64,
) -> Params<'a> {
    let newer = match backend.max_tokens_param {
        Some(p) => p == MaxTokensParam::MaxCompletionTokens,
        None => chat.is_some_and(|c| c.max_completion_tokens.is_some() && c.max_tokens.is_none()),
    };
    Params {
        max_tokens: (!newer).then_some(most_out),
        max_completion_tokens: newer.then_some(most_out),
        extra: chat.map(|c| &c.extra),
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

    fn chat(v: serde_json::Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
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
