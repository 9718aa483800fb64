//! The Anthropic front end's answers: a message written from the task's answer, or named
//! events in order (`message_start`, `content_block_start`, `ping`, `content_block_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`; an Anthropic delegate's content
//! events relayed as they came), with the `x-ldp-*` headers; a refused or failed message in
//! Anthropic's error form, or `event: error` once events went out.

use super::refusal::AnthropicErrors as _;
use crate::chat::{self, anthropic::EventWriter, Delta, Usage};
use crate::frontend::api_error::ApiError;
use crate::frontend::chat::{first_of, joined, ldp_headers, Answered, ChatRefusal, ChatTask};
use crate::frontend::request::refuse;
use crate::frontend::AppState;
use crate::ldp::TaskId;
use crate::proxy::ChatDelta;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc;

/// What every answer of one request shares.
pub(super) struct Reply {
    /// `msg_<task id>`.
    pub(super) id: String,
    /// The `model` the client asked for, echoed until the answering model is known.
    pub(super) model: String,
    /// The input's tokens as estimated (a stream's `message_start` says them before the
    /// delegate's count is known; `message_delta` then gives the count charged).
    pub(super) input_tokens: u64,
}

impl Reply {
    /// A whole message.
    fn message(&self, a: &Answered) -> Value {
        let (stop_reason, stop_sequence) = stop_of(a);
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": model_of(&a.model, &self.model),
            "content": chat::anthropic::content(&a.text, &a.answer),
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": usage(&a.usage),
        })
    }

    /// `message_start`: the message with no content yet.
    fn start(&self, model: &str) -> Event {
        let m = json!({"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}});
        event("message_start", &m)
    }

    /// The events that end a stream that answered: the block left open closed, why it
    /// stopped, the usage charged, `message_stop`.
    fn ending(&self, writer: &mut EventWriter, a: &Answered, out: &mut VecDeque<Event>) {
        if let Some((kind, data)) = writer.close() {
            out.push_back(event(&kind, &data));
        }
        let (stop_reason, stop_sequence) = stop_of(a);
        let d = json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage(&a.usage)});
        out.push_back(event("message_delta", &d));
        out.push_back(event("message_stop", &json!({"type": "message_stop"})));
    }
}

/// Why the answer stopped, in Anthropic's words (`end_turn` when the delegate did not say),
/// and the stop sequence met.
fn stop_of(a: &Answered) -> (String, Option<String>) {
    let native = chat::Native::of(a.answer.native.as_ref(), chat::Dialect::Anthropic)
        .and_then(|f| f.get("stop_sequence"))
        .and_then(Value::as_str);
    match &a.answer.finish {
        Some(f) => {
            let (reason, seq) = chat::anthropic::stop_reason(f);
            (reason.to_owned(), seq.or(native).map(str::to_owned))
        }
        None => ("end_turn".to_owned(), None),
    }
}

/// Token counts in Anthropic's words: input apart from the cache's reads and writes.
fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
    })
}

fn model_of<'a>(answered: &'a str, asked: &'a str) -> &'a str {
    if answered.is_empty() {
        asked
    } else {
        answered
    }
}

/// A named event (the Python SDK drops events without an `event:` line).
fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// A refused or failed message as an error answer: a chat delegate's own refusal of the
/// request as it came, else the LDP error with the LDP routes' status.
fn refusal(r: ChatRefusal) -> ApiError {
    match r.upstream {
        Some(u) => ApiError::anthropic_upstream(r.error, u),
        None => ApiError::task_failed(r.error)
            .with_retry_after(r.retry_after)
            .anthropic(),
    }
}

/// A whole message's answer, once its task is done.
pub(super) async fn whole(
    s: &AppState,
    reply: Reply,
    task_id: &TaskId,
    task: ChatTask,
) -> Result<Response, ApiError> {
    let outcome = joined(s, task.await)?;
    let headers = ldp_headers(task_id, Some(&outcome.policy), outcome.delegate.as_deref());
    match outcome.result {
        Ok(answer) => Ok((headers, axum::Json(reply.message(&answer))).into_response()),
        // A failed task has its ledger row too: its headers name it.
        Err(r) => {
            let mut resp = refuse(refusal(r));
            resp.headers_mut().extend(headers);
            Ok(resp)
        }
    }
}

/// The events of an answer that came whole, as a short stream: each block opened, given
/// whole (text as one `text_delta`, a call's input as one `input_json_delta`; another block
/// whole in its start), and closed.
fn whole_blocks(a: &Answered, out: &mut VecDeque<Event>) {
    for (index, block) in chat::anthropic::content(&a.text, &a.answer)
        .into_iter()
        .enumerate()
    {
        let (start, delta) = match block["type"].as_str() {
            Some("text") => (
                json!({"type": "text", "text": ""}),
                Some(json!({"type": "text_delta", "text": block["text"]})),
            ),
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                Some(
                    json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
                ),
            ),
            _ => (block, None),
        };
        let s = json!({"type": "content_block_start", "index": index, "content_block": start});
        out.push_back(event("content_block_start", &s));
        if let Some(delta) = delta {
            let d = json!({"type": "content_block_delta", "index": index, "delta": delta});
            out.push_back(event("content_block_delta", &d));
        }
        let e = json!({"type": "content_block_stop", "index": index});
        out.push_back(event("content_block_stop", &e));
    }
}

/// A streamed message. The status is decided by the first thing that comes: a piece (200,
/// the stream goes on) or the outcome (an answer sent as a short stream, or an error with its
/// status). A failure after events went out ends the stream with `event: error` and no
/// `message_stop`, so no client takes it for finished.
pub(super) async fn stream(
    s: &AppState,
    reply: Reply,
    task_id: TaskId,
    mut rx: mpsc::Receiver<ChatDelta>,
    mut task: ChatTask,
) -> Result<Response, ApiError> {
    let first = first_of(s, &mut rx, &mut task).await?;
    let mut out = VecDeque::new();
    let mut writer = EventWriter::default();
    let (headers, pending) = match first {
        Ok(delta) => {
            let model = delta
                .delegate
                .card()
                .map(|c| c.model_version.clone())
                .unwrap_or_else(|| reply.model.clone());
            let headers = ldp_headers(
                &task_id,
                Some(&delta.policy.name.0),
                Some(&delta.delegate.client_name()),
            );
            out.push_back(reply.start(&model));
            push_piece(&mut writer, &delta.delta, &mut out);
            pinged(&mut out);
            (headers, Some(task))
        }
        Err(outcome) => {
            let headers = ldp_headers(&task_id, Some(&outcome.policy), outcome.delegate.as_deref());
            let answer = match outcome.result {
                Ok(a) => a,
                Err(r) => {
                    let mut resp = refuse(refusal(r));
                    resp.headers_mut().extend(headers);
                    return Ok(resp);
                }
            };
            let model = model_of(&answer.model, &reply.model).to_owned();
            out.push_back(reply.start(&model));
            whole_blocks(&answer, &mut out);
            pinged(&mut out);
            reply.ending(&mut writer, &answer, &mut out);
            (headers, None)
        }
    };
    let state = Streaming {
        state: s.clone(),
        reply,
        writer,
        rx,
        task: pending,
        out,
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        let ev = st.next().await?;
        Some((Ok::<Event, Infallible>(ev), st))
    });
    let mut resp = Sse::new(events).into_response();
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().extend(headers);
    Ok(resp)
}

/// A `ping` put where Anthropic sends one: after the first block's start (after
/// `message_start` when there is none yet).
fn pinged(out: &mut VecDeque<Event>) {
    let at = out.len().min(2);
    out.insert(at, event("ping", &json!({"type": "ping"})));
}

/// The events of piece `d`.
fn push_piece(writer: &mut EventWriter, d: &Delta, out: &mut VecDeque<Event>) {
    for (kind, data) in writer.events(d) {
        out.push_back(event(&kind, &data));
    }
}

/// A stream under way: events ready to go, then pieces until the task ends.
struct Streaming {
    state: AppState,
    reply: Reply,
    writer: EventWriter,
    rx: mpsc::Receiver<ChatDelta>,
    task: Option<ChatTask>,
    out: VecDeque<Event>,
}

impl Streaming {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(ev) = self.out.pop_front() {
                return Some(ev);
            }
            let task = self.task.as_mut()?;
            tokio::select! {
                biased;
                Some(d) = self.rx.recv() => push_piece(&mut self.writer, &d.delta, &mut self.out),
                j = task => {
                    self.task = None;
                    match joined(&self.state, j).and_then(|o| o.result.map_err(refusal)) {
                        Ok(answer) => self.reply.ending(&mut self.writer, &answer, &mut self.out),
                        Err(e) => {
                            let kind = match e.telling().status.as_u16() {
                                503 => "overloaded_error",
                                _ => "api_error",
                            };
                            let body = anthropic_wire::ErrorBody::new(kind, e.error().message.clone());
                            let data = serde_json::to_value(body).unwrap_or(Value::Null);
                            self.out.push_back(event("error", &data));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(text: &str, answer: chat::Answer) -> Answered {
        Answered {
            text: text.into(),
            model: String::new(),
            usage: Usage::with_cache(3, 4, 5, 6),
            answer,
        }
    }

    #[test]
    fn a_message_from_another_dialect_has_its_text_and_tool_use_blocks() {
        let r = Reply {
            id: "msg_1".into(),
            model: "chat".into(),
            input_tokens: 1,
        };
        let call = chat::ToolCall {
            id: "c1".into(),
            name: "f".into(),
            input: json!({"a": 1}),
        };
        let a = answered(
            "",
            chat::Answer {
                finish: Some(chat::Finish::ToolUse),
                tool_calls: vec![call],
                native: None,
            },
        );
        let m = r.message(&a);
        assert_eq!(m["model"], "chat");
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(
            m["content"],
            json!([{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}])
        );
        assert_eq!(
            m["usage"],
            json!({"input_tokens": 3, "output_tokens": 4,
                "cache_creation_input_tokens": 6, "cache_read_input_tokens": 5})
        );
        // A delegate that says nothing of why it stopped: it ended its turn.
        let m = r.message(&answered("hi", chat::Answer::default()));
        assert_eq!(m["content"], json!([{"type": "text", "text": "hi"}]));
        assert_eq!(m["stop_reason"], "end_turn");
        let mut out = VecDeque::new();
        whole_blocks(&a, &mut out);
        assert_eq!(out.len(), 3, "start, the input whole, stop");
    }
}
