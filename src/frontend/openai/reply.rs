//! The OpenAI front end's answers: a `chat.completion` written straight from the task's
//! reply, or `chat.completion.chunk` events (deltas relayed as they come, the finish, the
//! usage when asked, `[DONE]`), with the `x-ldp-*` headers; a refused or failed completion in
//! OpenAI's error form.

use super::chat::{reply_of, ChatReply};
use super::refusal::OpenAiErrors;
use crate::frontend::api_error::ApiError;
use crate::frontend::chat::{first_of, joined, ldp_headers, ChatRefusal, ChatTask};
use crate::frontend::request::refuse;
use crate::frontend::AppState;
use crate::ldp::TaskId;
use crate::proxy::ChatDelta;
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use openai_wire::{ErrorDetail, Usage};
use serde_json::{json, Map, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc;

/// A whole completion's answer, once its task is done.
pub(super) async fn whole(
    s: &AppState,
    reply: Reply,
    task_id: &TaskId,
    task: ChatTask,
) -> Result<Response, ApiError> {
    let outcome = joined(s, task.await)?;
    let headers = ldp_headers(task_id, Some(&outcome.policy), outcome.delegate.as_deref());
    match outcome.result {
        Ok(answer) => {
            let answer = reply_of(answer);
            Ok((headers, axum::Json(reply.completion(&answer))).into_response())
        }
        // A failed task has its ledger row too: its headers name it.
        Err(r) => {
            let mut resp = refuse(refusal(r).openai());
            resp.headers_mut().extend(headers);
            Ok(resp)
        }
    }
}

/// A refused or failed completion as an error answer: a chat delegate's own refusal of the
/// request as it came, else the LDP error with the LDP routes' status.
fn refusal(r: ChatRefusal) -> ApiError {
    match r.upstream {
        Some(u) => {
            let detail = ErrorDetail {
                message: u.message,
                kind: u.kind,
                param: u.param,
                code: u.code,
            };
            ApiError::openai_upstream(r.error, u.status, detail)
        }
        None => ApiError::task_failed(r.error).with_retry_after(r.retry_after),
    }
}

/// What every answer of one request shares.
pub(super) struct Reply {
    pub(super) id: String,
    pub(super) created: i64,
    /// The `model` the client asked for, echoed until the answering model is known.
    pub(super) model: String,
    pub(super) include_usage: bool,
}

impl Reply {
    /// A whole completion's answer: written straight from the reply (no `Value` tree built
    /// and then serialised).
    fn completion<'a>(&'a self, a: &'a ChatReply) -> Completion<'a> {
        Completion {
            id: &self.id,
            object: "chat.completion",
            created: self.created,
            model: model_of(&a.model, &self.model),
            choices: [Choice {
                index: 0,
                message: AssistantMessage(a),
                logprobs: None,
                finish_reason: &a.finish_reason,
            }],
            usage: &a.usage,
        }
    }

    fn chunk(&self, model: &str, delta: Value, finish: Option<&str>) -> Event {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        Event::default().data(c.to_string())
    }

    fn usage_chunk(&self, model: &str, u: &Usage) -> Event {
        let c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
            "choices": [],
            "usage": usage(u),
        });
        Event::default().data(c.to_string())
    }

    /// The events that end a stream that answered: the finish, the usage if asked, `[DONE]`.
    fn ending(&self, model: &str, a: &ChatReply, out: &mut VecDeque<Event>) {
        out.push_back(self.chunk(model, json!({}), Some(&a.finish_reason)));
        if self.include_usage {
            out.push_back(self.usage_chunk(model, &a.usage));
        }
        out.push_back(Event::default().data("[DONE]"));
    }
}

/// A relayed delta: the text, when there is some, and the delegate's other fields (a piece
/// of `tool_calls`, …) as they came.
fn delta_json(text: String, other: Option<Map<String, Value>>) -> Value {
    let mut d = other.unwrap_or_default();
    if !text.is_empty() || d.is_empty() {
        d.insert("content".into(), Value::String(text));
    }
    Value::Object(d)
}

/// A whole answer as one delta (an answer that came whole, sent as a short stream): its text
/// (unless it has none but a call), and its other fields, each tool call given the `index`
/// a streamed one carries.
fn whole_delta(a: &mut ChatReply) -> Value {
    let mut d = std::mem::take(&mut a.other);
    if d.get("refusal").is_some_and(Value::is_null) {
        d.remove("refusal");
    }
    if let Some(Value::Array(calls)) = d.get_mut("tool_calls") {
        for (i, call) in calls.iter_mut().enumerate() {
            if let Value::Object(c) = call {
                c.entry("index").or_insert(json!(i));
            }
        }
    }
    let calls = d.contains_key("tool_calls") || d.contains_key("function_call");
    if !a.content.is_empty() || !calls {
        d.insert(
            "content".into(),
            Value::String(std::mem::take(&mut a.content)),
        );
    }
    Value::Object(d)
}

/// A chat completion (`object: "chat.completion"`).
#[derive(serde::Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: &'a Usage,
}

/// A completion's one choice.
#[derive(serde::Serialize)]
struct Choice<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    logprobs: Option<()>,
    finish_reason: &'a str,
}

/// The delegate's message as it came (`tool_calls`, `function_call`, …) with the answer's
/// role and text (`content` null when empty beside a call; `refusal` null unless it sent one).
struct AssistantMessage<'a>(&'a ChatReply);

impl serde::Serialize for AssistantMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let a = self.0;
        let calls = a.other.contains_key("tool_calls") || a.other.contains_key("function_call");
        let content = (!a.content.is_empty() || !calls).then_some(a.content.as_str());
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("role", "assistant")?;
        m.serialize_entry("content", &content)?;
        m.serialize_entry("refusal", a.other.get("refusal").unwrap_or(&Value::Null))?;
        for (k, v) in &a.other {
            if !matches!(k.as_str(), "role" | "content" | "refusal") {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

fn model_of<'a>(answered: &'a str, asked: &'a str) -> &'a str {
    if answered.is_empty() {
        asked
    } else {
        answered
    }
}

fn usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.total_tokens,
    })
}

/// A streamed completion. The status is decided by the first thing that comes: a delta
/// (200, the stream goes on) or the outcome (an answer sent as a short stream, or an error
/// with its status). A failure after deltas went out ends the stream with an error event and
/// no `[DONE]`, so no client takes it for finished.
pub(super) async fn stream(
    s: &AppState,
    reply: Reply,
    task_id: TaskId,
    mut rx: mpsc::Receiver<ChatDelta>,
    mut task: ChatTask,
) -> Result<Response, ApiError> {
    let first = first_of(s, &mut rx, &mut task).await?;
    let mut out = VecDeque::new();
    let (headers, model, pending) = match first {
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
            let other = crate::chat::openai::delta_fields(&delta.delta);
            let content = if delta.delta.text.is_empty() && other.is_some() {
                Value::Null
            } else {
                json!("")
            };
            let first = json!({"role": "assistant", "content": content});
            out.push_back(reply.chunk(&model, first, None));
            if !delta.delta.text.is_empty() || other.is_some() {
                out.push_back(reply.chunk(&model, delta_json(delta.delta.text, other), None));
            }
            (headers, model, Some(task))
        }
        Err(outcome) => {
            let headers = ldp_headers(&task_id, Some(&outcome.policy), outcome.delegate.as_deref());
            let answer = match outcome.result {
                Ok(a) => reply_of(a),
                Err(r) => {
                    let mut resp = refuse(refusal(r).openai());
                    resp.headers_mut().extend(headers);
                    return Ok(resp);
                }
            };
            let mut answer = answer;
            let model = model_of(&answer.model, &reply.model).to_owned();
            let whole = whole_delta(&mut answer);
            let content = if whole.get("content").is_some() {
                json!("")
            } else {
                Value::Null
            };
            let first = json!({"role": "assistant", "content": content});
            out.push_back(reply.chunk(&model, first, None));
            out.push_back(reply.chunk(&model, whole, None));
            reply.ending(&model, &answer, &mut out);
            (headers, model, None)
        }
    };
    let state = Streaming {
        state: s.clone(),
        reply,
        model,
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

/// A stream under way: events ready to go, then deltas until the task ends.
struct Streaming {
    state: AppState,
    reply: Reply,
    model: String,
    rx: mpsc::Receiver<ChatDelta>,
    task: Option<ChatTask>,
    out: VecDeque<Event>,
}

impl Streaming {
    async fn next(&mut self) -> Option<Event> {
        if let Some(ev) = self.out.pop_front() {
            return Some(ev);
        }
        let task = self.task.as_mut()?;
        loop {
            tokio::select! {
                    biased;
                    Some(d) = self.rx.recv() => {
                        let other = crate::chat::openai::delta_fields(&d.delta);
                        // A piece with nothing for OpenAI's words (a block's start or stop, a
                        // thinking delta of an Anthropic delegate) is no chunk.
                        if d.delta.text.is_empty() && other.is_none() {
                            continue;
                        }
                        return Some(self.reply.chunk(&self.model, delta_json(d.delta.text, other), None));
                    }
                    j = &mut *task => {
                    self.task = None;
                    match joined(&self.state, j).and_then(|o| o.result.map_err(refusal)) {
                        Ok(answer) => {
                            self.reply.ending(&self.model, &reply_of(answer), &mut self.out)
                        }
                        Err(e) => {
                            let e = e.openai();
                            let body = json!({"error": {
                                "message": e.error().message,
                                "type": "server_error",
                                "code": e.telling().code,
                            }});
                            self.out.push_back(Event::default().data(body.to_string()));
                        }
                    }
                    return self.out.pop_front();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(content: &str, other: Value) -> ChatReply {
        ChatReply {
            content: content.to_owned(),
            model: "m".into(),
            usage: Usage::default(),
            finish_reason: "tool_calls".into(),
            other: match other {
                Value::Object(m) => m,
                _ => Map::new(),
            },
        }
    }

    #[test]
    fn a_delta_carries_its_text_and_its_tool_call_piece_as_they_came() {
        assert_eq!(delta_json("hé".into(), None), json!({"content": "hé"}));
        assert_eq!(delta_json(String::new(), None), json!({"content": ""}));
        let piece = json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a"}}]});
        let Value::Object(other) = piece.clone() else {
            unreachable!()
        };
        assert_eq!(delta_json(String::new(), Some(other)), piece);
    }

    #[test]
    fn a_whole_tool_call_answers_with_null_content_and_streams_with_indexes() {
        let calls = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]);
        let r = Reply {
            id: "x".into(),
            created: 0,
            model: "asked".into(),
            include_usage: false,
        };
        let a = reply("", json!({"tool_calls": calls, "refusal": null}));
        let c = serde_json::to_value(r.completion(&a)).unwrap();
        let m = &c["choices"][0]["message"];
        assert_eq!(m["content"], Value::Null, "{m}");
        assert_eq!(m["role"], "assistant");
        assert_eq!(m["tool_calls"], calls);
        assert_eq!(m["refusal"], Value::Null);
        // Text, when there is some, stays.
        let a = reply("hi", Value::Null);
        let c = serde_json::to_value(r.completion(&a)).unwrap();
        assert_eq!(c["choices"][0]["message"]["content"], "hi");
        assert_eq!(c["object"], "chat.completion");
        assert_eq!(c["model"], "m");
        assert_eq!(c["choices"][0]["logprobs"], Value::Null);
        assert_eq!(c["usage"]["total_tokens"], 0);

        let mut a = reply("", json!({"tool_calls": calls, "refusal": null}));
        let d = whole_delta(&mut a);
        assert_eq!(d.get("content"), None, "{d}");
        assert_eq!(d.get("refusal"), None, "{d}");
        assert_eq!(d["tool_calls"][1]["index"], 1);
        assert_eq!(d["tool_calls"][1]["function"]["name"], "g");
        let mut a = reply("plain", Value::Null);
        assert_eq!(whole_delta(&mut a), json!({"content": "plain"}));
    }
}
