//! What the chat kinds (OpenAI-compatible and Anthropic models) share: the output bound a
//! task asks for, the remembered turns that fit the context window, the task's input as the
//! user's text, a call's failures classified once ([`ChatError`]) and what they say of the
//! delegate ([`chat_failed`]), what a stream used ([`Streamed`]), usage as charged (within
//! what the request allowed), and the answer and its provenance.

use super::{Answered, Call, Called, Failure, Health, Outcome, UpstreamError};
use crate::chat::{estimate_tokens, Answer, Chat, Refusal, Turn, Usage};
use crate::ldp::error::GatewayCode;
use crate::ldp::{ErrorCategory, ErrorSeverity, Json, LdpError, PayloadMode, Provenance};
use crate::translate::{render_text, translate_input};
use ldp_client::requests_own;
use std::time::Duration;

/// The most output tokens a chat task is asked for, which is what its budget hold assumes
/// and what its request allows: the chat client's bound, held for however large, within the
/// context `window`; else `default`, within the room left for the answer (a quarter of the
/// window).
pub fn output_tokens(window: Option<u64>, chat: Option<&Chat>, default: u64) -> u64 {
    let asked = chat.and_then(|c| c.max_output_tokens);
    match (asked, window) {
        (Some(asked), Some(window)) => asked.min(window),
        (Some(asked), None) => asked,
        (None, Some(window)) => default.min(window / 4).max(1),
        (None, None) => default,
    }
}

/// How many of the newest `turns` fit the context `window` with `user`'s text and room for
/// an answer of `answer` tokens (all of them without a declared window).
pub fn turns_that_fit(window: Option<u64>, turns: &[Turn], user: &str, answer: u64) -> usize {
    let Some(window) = window else {
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

/// What a delegate could have used: `prompt` input tokens (every kind together) and
/// `output` tokens.
#[derive(Debug, Clone, Copy)]
pub struct Most {
    /// Input tokens, cached or not.
    pub prompt: u64,
    /// Output tokens.
    pub output: u64,
}

impl Most {
    /// What a request of `request_bytes` allowing `output` tokens could use: a prompt within
    /// the context `window` (undeclared: no more tokens than the request's bytes).
    pub fn of(window: Option<u64>, request_bytes: usize, output: u64) -> Most {
        Most {
            prompt: window.unwrap_or(request_bytes as u64),
            output,
        }
    }
}

/// Usage as charged: `reported` (else `estimated` from the text) within `most`, what the
/// delegate could have used (input counted first, then cache reads, then cache writes); and,
/// when a reported count was beyond it (a delegate's error or lie), the note that says so (it
/// is clamped, logged, counted and noted in the row).
fn charged_usage(
    call: &Call<'_>,
    reported: Option<Usage>,
    estimated: Usage,
    most: Most,
) -> (Usage, Option<String>) {
    let within = |u: Usage| {
        let input = u.input_tokens.min(most.prompt);
        let read = u.cache_read_tokens.min(most.prompt - input);
        let write = u.cache_write_tokens.min(most.prompt - input - read);
        Usage::with_cache(input, u.output_tokens.min(most.output), read, write)
    };
    let Some(r) = reported else {
        return (within(estimated), None);
    };
    let usage = within(r);
    if usage == r {
        return (usage, None);
    }
    tracing::warn!(
        delegate = %call.name,
        reported_prompt = r.prompt_tokens(),
        reported_completion = r.output_tokens,
        most_prompt = most.prompt,
        most_completion = most.output,
        "a delegate reported more tokens than it could have used; charged within the bound"
    );
    let note = format!(
        "usage clamped: {} reported {} prompt and {} completion tokens, at most {} and {} possible",
        call.told,
        r.prompt_tokens(),
        r.output_tokens,
        most.prompt,
        most.output
    );
    (usage, Some(note))
}

/// A call that failed (`e`), after `took`: an answer cut short (the client left, the cap, a
/// break) was used all the same, and is charged and recorded — `used`, its usage reported
/// or `estimated` from its bytes, within `most`, at `prices`.
pub fn unanswered(
    call: &Call<'_>,
    e: ChatError,
    used: &Streamed,
    estimated: Usage,
    most: Most,
    prices: &super::declared::Prices,
    took: Duration,
) -> Outcome {
    let mut notes = Vec::new();
    // A report made before the end (Anthropic's `message_start`: the input, one output
    // token) counts the output written since as estimated.
    let reported = used.usage.map(|r| {
        let output = r.output_tokens.max(estimated.output_tokens);
        Usage::with_cache(
            r.input_tokens,
            output,
            r.cache_read_tokens,
            r.cache_write_tokens,
        )
    });
    let used_up = (used.bytes > 0 || used.usage.is_some()).then(|| {
        let (usage, note) = charged_usage(call, reported, estimated, most);
        notes.extend(note);
        (usage, prices.cost_of(&usage))
    });
    let mut outcome = match used.stopped {
        Some(Stopped::Unheard) => {
            let error = unheard(call.told, used.bytes);
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
    outcome.clamped = !notes.is_empty();
    outcome.used = used_up;
    outcome.notes = notes;
    outcome
}

/// An answer's usage as charged and its cost: `reported` (else `estimated`) within `most`,
/// at `prices`; with the note of a clamp, if there was one.
pub fn charged(
    call: &Call<'_>,
    reported: Option<Usage>,
    estimated: Usage,
    most: Most,
    prices: &super::declared::Prices,
) -> ((Usage, f64), Option<String>) {
    let (usage, note) = charged_usage(call, reported, estimated, most);
    ((usage, prices.cost_of(&usage)), note)
}

/// The error a task whose client went away is answered with (no failover, no fault: nobody
/// is left to answer), after `bytes` of the answer.
pub fn unheard(told: &str, bytes: usize) -> LdpError {
    LdpError::new(
        "CANCELLED",
        ErrorCategory::Runtime,
        ErrorSeverity::Error,
        false,
        format!(
            "the client went away; the answer from delegate '{told}' was stopped after {bytes} bytes"
        ),
    )
}

/// A chat model's answer: its `text` as the result, a provenance of the delegate `card_id`
/// and `model` with the tokens and `cost` charged, the turn to remember when the task keeps
/// a session, and the rest of the answer for a chat front end.
pub fn answered(
    call: &Call<'_>,
    card_id: &str,
    model: &str,
    user: String,
    text: String,
    (usage, cost): (Usage, f64),
    chat: Answer,
) -> Answered {
    let mut p = Provenance::new(card_id.to_owned(), model.to_owned(), PayloadMode::Text);
    p.tokens_used = Some(usage.total_tokens);
    p.cost_usd = Some(cost);
    let turn = call.session.map(|_| Turn {
        user: user.into(),
        assistant: text.as_str().into(),
    });
    Answered {
        output: Json::from(serde_json::Value::String(text)),
        provenance: Some(p),
        usage: Some(usage),
        chat: Some(chat),
        turn,
    }
}

/// How long the end of a finished stream is waited for, to keep its connection.
pub const DRAIN: Duration = Duration::from_secs(1);

/// How long a delegate that answered 429 without `Retry-After` is skipped.
const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

/// What a streamed completion used, kept up to date as it is read, so that a stream that
/// fails, or that the gateway stops reading, still says what it cost.
#[derive(Debug, Default, Clone, Copy)]
pub struct Streamed {
    /// Bytes of answer handed on: text, and the other fields' JSON (tool calls).
    pub bytes: usize,
    /// Bytes of what the model wrote among them (text, a call's arguments), where the kind
    /// tells them apart from the events' framing: what a cut-short answer is estimated from.
    pub written: usize,
    /// Bytes of the request sent.
    pub request_bytes: usize,
    /// Usage, if the delegate reported it.
    pub usage: Option<Usage>,
    /// Why the gateway stopped reading before the end, if it did.
    pub stopped: Option<Stopped>,
}

/// Why the gateway stopped reading a stream before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Nobody listens any more (the client left).
    Unheard,
    /// The answer grew past the transport's answer cap (`max_response_bytes`).
    Cap(usize),
}

/// Why a completion failed, and what that says.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// No connection, no answer in time, a connection that broke.
    #[error(transparent)]
    Transport(#[from] UpstreamError),
    /// A non-2xx answer, with the provider's error fields when the body had them.
    #[error("{url} answered HTTP {}: {}", refusal.status, refusal.message)]
    Status {
        /// Where.
        url: String,
        /// `Retry-After`.
        retry_after: Option<Duration>,
        /// The status and the error's fields (a generic message when the body was not the
        /// provider's shape).
        refusal: Box<Refusal>,
    },
    /// A 2xx answer that is no completion.
    #[error("{url} sent an unreadable answer: {reason}")]
    Malformed {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// A stream that ended (or failed) before it finished; `relayed` content deltas had
    /// already gone to the client.
    #[error("the stream from {url} ended before it finished")]
    Broken {
        /// Where.
        url: String,
        /// Whether part of the answer was already relayed.
        relayed: bool,
    },
}

impl ChatError {
    /// Whether another delegate may be tried: a delegate at fault (unreachable, 5xx, 429,
    /// its own key or model refused, a redirect, a proxy asking for credentials, nonsense)
    /// before anything reached the client. Only the request's own refusals (400 a bad
    /// request or a context too long, 413, 422) are not retried: they are the client's
    /// answer.
    pub fn retryable(&self) -> bool {
        match self {
            ChatError::Transport(e) => e.retryable(),
            ChatError::Status { refusal, .. } => !requests_own(refusal.status),
            ChatError::Malformed { .. } => true,
            ChatError::Broken { relayed, .. } => !relayed,
        }
    }

    /// Whether it says the delegate is unwell: any status but the request's own refusals
    /// and a 429 (which pauses the delegate instead).
    pub fn is_delegate_fault(&self) -> bool {
        match self {
            ChatError::Transport(e) => e.is_delegate_fault(),
            ChatError::Status { refusal, .. } => {
                !requests_own(refusal.status) && refusal.status != 429
            }
            ChatError::Malformed { .. } | ChatError::Broken { .. } => true,
        }
    }

    /// The reason code for the ledger row and `ldp_gateway_fallbacks_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            ChatError::Transport(e) => e.reason(),
            ChatError::Status { refusal, .. } if refusal.status == 429 => "rate_limited",
            ChatError::Status { refusal, .. } => ldp_client::status_reason(refusal.status),
            ChatError::Malformed { .. } => "malformed",
            ChatError::Broken { .. } => "stream_broken",
        }
    }

    /// How long the delegate asked not to be called (a 429's `Retry-After`).
    pub fn pause(&self) -> Option<Duration> {
        match self {
            ChatError::Status {
                refusal,
                retry_after,
                ..
            } if refusal.status == 429 => Some(retry_after.unwrap_or(DEFAULT_PAUSE)),
            _ => None,
        }
    }

    /// What it says without the delegate's address or its own words: fit for a client.
    /// Read as "the delegate {summary}".
    pub fn summary(&self) -> ChatSummary<'_> {
        ChatSummary(self)
    }

    /// Whether the delegate timed out.
    pub fn timed_out(&self) -> bool {
        matches!(self, ChatError::Transport(UpstreamError::Timeout { .. }))
    }
}

/// [`ChatError::summary`].
#[derive(Debug, Clone, Copy)]
pub struct ChatSummary<'a>(&'a ChatError);

impl std::fmt::Display for ChatSummary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ChatError::Transport(e) => e.summary().fmt(f),
            ChatError::Status { refusal, .. } => {
                write!(f, "answered {}", ldp_client::status_text(refusal.status))
            }
            ChatError::Malformed { .. } => f.write_str("sent an unreadable answer"),
            ChatError::Broken { .. } => f.write_str("ended its stream before it finished"),
        }
    }
}

/// A failed completion: a 429 asks for a pause; the delegate's health is judged; a failure
/// of the delegate's may fail over, a refusal of the request is the client's answer.
pub fn chat_failed(told: &str, e: ChatError, took: std::time::Duration) -> Outcome {
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
        ChatError::Status { refusal, .. } if !retryable => {
            let message = format!(
                "delegate '{told}' refused the request (HTTP {}): {}",
                refusal.status, refusal.message
            );
            let error = LdpError::gateway(GatewayCode::BadRequest, message);
            Called::Refused(error, Some(*refusal))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<Duration>) -> ChatError {
        ChatError::Status {
            url: "http://x/v1/chat/completions".into(),
            retry_after,
            refusal: Box::new(Refusal {
                status: code,
                message: "no".into(),
                kind: None,
                param: None,
                code: None,
            }),
        }
    }

    #[test]
    fn failures_of_the_delegate_fail_over_and_the_requests_own_do_not() {
        // (status, retryable, delegate's fault, reason)
        let table = [
            (500, true, true, "http_5xx"),
            (503, true, true, "http_5xx"),
            (429, true, false, "rate_limited"),
            (401, true, true, "http_4xx"),
            (404, true, true, "http_4xx"),
            (400, false, false, "http_4xx"),
            (413, false, false, "http_4xx"),
            (422, false, false, "http_4xx"),
            // A broken delegate's answers, never the request's own.
            (302, true, true, "http_3xx"),
            (304, true, true, "http_3xx"),
            (407, true, true, "http_4xx"),
            (409, true, true, "http_4xx"),
        ];
        for (code, retryable, fault, reason) in table {
            let e = status(code, None);
            assert_eq!(e.retryable(), retryable, "{code}");
            assert_eq!(e.is_delegate_fault(), fault, "{code}");
            assert_eq!(e.reason(), reason, "{code}");
            assert_eq!(e.pause().is_some(), code == 429, "{code}");
        }
        assert_eq!(
            status(429, Some(Duration::from_secs(7))).pause(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(status(429, None).pause(), Some(DEFAULT_PAUSE));
        let url = String::new();
        let broken = |relayed| ChatError::Broken {
            url: url.clone(),
            relayed,
        };
        assert!(broken(false).retryable());
        assert!(!broken(true).retryable(), "deltas went out: never retried");
        let timeout = ChatError::Transport(UpstreamError::Timeout {
            url: url.clone(),
            after: Duration::from_secs(1),
        });
        assert!(timeout.retryable() && timeout.timed_out() && timeout.is_delegate_fault());
    }
}
