//! A2A agents as delegates (`kind = "a2a"`): the LDP identity card built from an agent's
//! Agent Card and what the operator declared (`card.rs`), the calls to the agent, JSON-RPC in
//! A2A 1.0 (or 0.3 for an agent whose card speaks only that) through the gateway's one
//! transport (`agent.rs`), and the task's translation to a message and back.

pub mod agent;
pub mod card;

pub use agent::{A2aCallError, Agent, Endpoint, EndpointError, Reply};

use super::{Answered, Call, Called, Failure, Health, Outcome, Relay, Update, UpstreamError};
use crate::ldp::{ErrorCategory, ErrorSeverity, Json, LdpError, PayloadMode, Provenance};
use a2a_wire::v1::{Message, Part, PartContent, Role, TaskState};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

impl Agent {
    /// One message: the task's input as a text part (a structured input also as a data
    /// part), in a context kept per client session (none for a task that carries its whole
    /// context); the Task it answers becomes the result (the text and data parts of its
    /// artifacts) with the agent's provenance, charged its declared price per call, or a
    /// failure. A transport error, an error status, a JSON-RPC error, an answer that is not
    /// A2A, or a `FAILED` task fails over; `REJECTED` is the client's answer;
    /// `INPUT_REQUIRED`/`AUTH_REQUIRED` end the task as failed (the gateway does not hold
    /// interrupted tasks). An agent whose card says it streams is sent
    /// `SendStreamingMessage` whether the client streams or not: it names its task at once,
    /// so a cancel becomes `CancelTask` for that task (an agent that does not stream is only
    /// no longer waited for); a streaming LDP client is told its status messages and
    /// artifacts' text.
    pub async fn call(&self, call: &Call<'_>, relay: &Relay<'_>) -> Outcome {
        let Some(at) = self.endpoint() else {
            let e = UpstreamError::Malformed {
                url: call.base_url.to_owned(),
                reason: "no Agent Card read yet".into(),
            };
            let failure = Failure::upstream(call.told, &e);
            return Outcome::of(
                Called::Failed(Box::new(failure)),
                Health::Unknown,
                Default::default(),
            );
        };
        let mut message = match message_of(call.input) {
            Ok(m) => m,
            Err(error) => {
                return Outcome::of(
                    Called::Refused(error, None),
                    Health::Unknown,
                    Default::default(),
                )
            }
        };
        if let Some(session) = call.session {
            message.context_id = context_id(session, call.name);
        }
        let sent = Instant::now();
        let named = std::sync::OnceLock::new();
        let calling = async {
            if !at.streaming {
                return self
                    .send(call.client, &at, message, call.forward, call.limit)
                    .await;
            }
            // A streaming agent names its task at once (so a cancel can name it too); a
            // streaming LDP client is told its status messages and artifacts as they come.
            let tell = |text: &str| {
                if let Relay::Updates(tell) = relay {
                    // Dropped if the client is not keeping up: its result carries it all.
                    let _ = tell(Update::Note(short(text)));
                }
            };
            self.stream(
                call.client,
                &at,
                message,
                call.forward,
                call.limit,
                &named,
                tell,
            )
            .await
        };
        let mut calling = std::pin::pin!(calling);
        let answered = tokio::select! {
            biased;
            a = calling.as_mut() => Some(a),
            () = call.abandon.cancelled() => None,
        };
        let took = sent.elapsed();
        let Some(answered) = answered else {
            // Cancelled. A stream cancelled before its first event named the task is read
            // on, within the handshake timeout, until the agent names it (or answers): the
            // cancel must reach the agent's task.
            let until = Instant::now() + call.handshake_timeout;
            while at.streaming && named.get().is_none() && Instant::now() < until {
                tokio::select! {
                    _ = calling.as_mut() => break,
                    () = tokio::time::sleep(std::time::Duration::from_millis(5)) => {}
                }
            }
            // The agent is asked to cancel the task it named, if it named one.
            if let Some(task_id) = named.get() {
                let sent = self
                    .cancel(call.client, &at, task_id, call.handshake_timeout)
                    .await;
                tracing::info!(delegate = %call.name, ok = sent.is_ok(), "task cancelled at the A2A agent");
            }
            return Outcome::of(Called::Refused(cancelled(), None), Health::Unknown, took);
        };
        let (called, health) = judge(call, answered, took);
        Outcome::of(called, health, took)
    }
}

/// The answer of a task that was cancelled.
fn cancelled() -> LdpError {
    LdpError::new(
        "CANCELLED",
        ErrorCategory::Runtime,
        ErrorSeverity::Error,
        false,
        "the task was cancelled",
    )
}

/// The agent's answer as the call's outcome and what it says of the agent.
fn judge(
    call: &Call<'_>,
    answered: Result<Reply, A2aCallError>,
    took: std::time::Duration,
) -> (Called, Health) {
    let told = call.told;
    let task = match answered {
        Err(A2aCallError::Transport(e)) => {
            let health = Health::of_error(&e, Some(took));
            return (
                Called::Failed(Box::new(Failure::upstream(told, &e))),
                health,
            );
        }
        Err(e @ A2aCallError::Rpc { code, .. }) => {
            let failure = fails_over(
                told,
                "a2a_error",
                format!("answered JSON-RPC error {code}"),
                e.to_string(),
            );
            return (failed(failure), Health::Faulted(None));
        }
        Ok(Reply::Message(m)) => {
            return match output_of(m.parts.iter()) {
                Some(output) => (result(call, output), Health::Answered(took)),
                None => (failed(no_output(told)), Health::Faulted(None)),
            };
        }
        Ok(Reply::Task(task)) => task,
    };
    let state = &task.status.state;
    let said = task
        .status
        .message
        .as_ref()
        .and_then(|m| output_of(m.parts.iter()))
        .map(|o| short(&crate::translate::render_text(&o)))
        .unwrap_or_default();
    match state {
        TaskState::Completed => {
            let parts = task.artifacts.iter().flat_map(|a| a.parts.iter());
            let output = output_of(parts).or_else(|| {
                let m = task.status.message.as_ref()?;
                output_of(m.parts.iter())
            });
            match output {
                Some(output) => (result(call, output), Health::Answered(took)),
                None => (failed(no_output(told)), Health::Faulted(None)),
            }
        }
        TaskState::Failed => {
            let failure = fails_over(
                told,
                "task_failed",
                "failed the task (TASK_STATE_FAILED)".into(),
                said,
            );
            (failed(failure), Health::Faulted(Some(took)))
        }
        TaskState::Rejected => {
            let error = LdpError::new(
                "TASK_REJECTED",
                ErrorCategory::Capability,
                ErrorSeverity::Error,
                false,
                format!("agent '{told}' rejected the task: {said}"),
            );
            (Called::Refused(error, None), Health::Answered(took))
        }
        TaskState::Canceled => {
            let error = LdpError::new(
                "CANCELLED",
                ErrorCategory::Runtime,
                ErrorSeverity::Error,
                false,
                format!("agent '{told}' cancelled the task: {said}"),
            );
            (Called::Refused(error, None), Health::Answered(took))
        }
        TaskState::InputRequired | TaskState::AuthRequired => {
            let (code, asks) = if *state == TaskState::InputRequired {
                ("INPUT_REQUIRED", "more input")
            } else {
                ("AUTH_REQUIRED", "authentication")
            };
            let error = LdpError::new(
                code,
                ErrorCategory::Capability,
                ErrorSeverity::Error,
                false,
                format!(
                    "agent '{told}' asked for {asks} ({}): the gateway does not hold \
                     interrupted tasks; send the task again with what it asked for: {said}",
                    state.as_str()
                ),
            );
            (Called::Refused(error, None), Health::Answered(took))
        }
        TaskState::Submitted
        | TaskState::Working
        | TaskState::Unspecified
        | TaskState::Unrecognized(_) => {
            let failure = fails_over(
                told,
                "malformed",
                "answered before the task ended".into(),
                format!("the task came back in {}", state.as_str()),
            );
            (failed(failure), Health::Faulted(None))
        }
    }
}

fn failed(f: Failure) -> Called {
    Called::Failed(Box::new(f))
}

/// A result: `output` with the agent's provenance (`produced_by` its card's id), charged
/// its declared price per call.
fn result(call: &Call<'_>, output: Value) -> Called {
    let (id, version) = match &call.card {
        Some(c) => (c.delegate_id.clone(), c.model_version.clone()),
        None => (
            call.upstream_session
                .map(|s| s.delegate_id.to_string())
                .unwrap_or_default(),
            String::new(),
        ),
    };
    let mut p = Provenance::new(id, version, PayloadMode::Text);
    let cost = call.declared_cost.unwrap_or(0.0);
    p.cost_usd = Some(cost);
    Called::Answered(Box::new(Answered {
        output: Json::from(output),
        provenance: Some(p),
        ..Answered::default()
    }))
}

/// The client session's context at `delegate`: `ldp-` and 32 hex digits of the SHA-256 of
/// both (a unit separator between them).
pub fn context_id(session: &str, delegate: &str) -> String {
    let digest = Sha256::digest(format!("{session}\u{1f}{delegate}").as_bytes());
    format!("ldp-{}", hex::encode(&digest[..16]))
}

/// The task's input as a user message: a string as one text part; anything else (a frame)
/// rendered to text as across the LDP hop, and as it is in a data part.
fn message_of(input: &Json) -> Result<Message, LdpError> {
    let input = input.to_value().map_err(|e| {
        LdpError::gateway(
            crate::ldp::error::GatewayCode::BadRequest,
            format!("the task input cannot be read: {e}"),
        )
    })?;
    let parts = match input {
        Value::String(s) => vec![Part::text(s)],
        other => vec![
            Part::text(crate::translate::render_text(&other)),
            Part::data(other),
        ],
    };
    let mut m = Message::new(crate::ldp::new_id(), Role::User, parts);
    m.task_id.clear();
    Ok(m)
}

/// The output of `parts`: their text, joined, if any has text; else the one data part's
/// value, or every data value in a list; `None` if there is neither.
fn output_of<'a>(parts: impl Iterator<Item = &'a Part>) -> Option<Value> {
    let mut text: Option<String> = None;
    let mut data = Vec::new();
    for p in parts {
        match &p.content {
            PartContent::Text(s) => text.get_or_insert_with(String::new).push_str(s),
            PartContent::Data(v) => data.push(v.clone()),
            PartContent::Raw(_) | PartContent::Url(_) => {}
        }
    }
    if let Some(text) = text {
        return Some(Value::String(text));
    }
    match data.len() {
        0 => None,
        1 => data.pop(),
        _ => Some(Value::Array(data)),
    }
}

/// The first 512 bytes of an agent's words (at a character boundary).
fn short(s: &str) -> String {
    crate::ldp::text::cut(s, 512).to_owned()
}

/// A failure of the agent's that another delegate may take: the client hears the agent's
/// name and `what`; the log and the row get `detail`.
fn fails_over(told: &str, reason: &'static str, what: String, detail: String) -> Failure {
    Failure {
        error: LdpError::upstream_failed(format!("agent '{told}' {what}"), true),
        reason,
        retryable: true,
        detail,
        pause: None,
    }
}

/// A completed task (or message) with no text or data part: nothing to answer with.
fn no_output(told: &str) -> Failure {
    fails_over(
        told,
        "malformed",
        "answered without a text or data part".into(),
        "no text or data part in its artifacts or status message".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_is_the_text_else_the_data_and_contexts_are_stable() {
        let t = [
            Part::text("a"),
            Part::data(json!({"x": 1})),
            Part::text("b"),
        ];
        assert_eq!(output_of(t.iter()), Some(json!("ab")));
        let d = [Part::data(json!({"x": 1}))];
        assert_eq!(output_of(d.iter()), Some(json!({"x": 1})));
        let dd = [Part::data(json!(1)), Part::data(json!(2))];
        assert_eq!(output_of(dd.iter()), Some(json!([1, 2])));
        assert_eq!(output_of([].iter()), None);
        let c = context_id("s1", "agent");
        assert_eq!(c, context_id("s1", "agent"));
        assert_ne!(c, context_id("s2", "agent"));
        assert_ne!(c, context_id("s1", "other"));
        assert_eq!(c.len(), 4 + 32);
    }
}
