//! One attempt at an A2A agent: the task becomes a `SendMessage` (its input as a text part, a
//! structured input also as a data part) in a context kept per client session; the Task it
//! answers becomes the result (the text and data parts of its artifacts) with the agent's
//! provenance, or a failure. A transport error, an error status, a JSON-RPC error, an answer
//! that is not A2A, or a `FAILED` task fails over as for LDP delegates; `REJECTED` is the
//! client's answer; `INPUT_REQUIRED`/`AUTH_REQUIRED` end the task as failed (the gateway
//! does not hold interrupted tasks). An agent whose card says it streams is sent
//! `SendStreamingMessage` instead, whether the client streams or not: it names its task at
//! once, so a cancel becomes `CancelTask` for that task (an agent that does not stream is
//! only no longer waited for); a streaming LDP client is told its status messages and
//! artifacts' text as TASK_UPDATEs.
//!
//! The `contextId`: the client session's tasks at one agent share one, derived from the
//! session id and the delegate's name (`ldp-` and 32 hex digits of their SHA-256), so
//! nothing is stored and every replica derives the same. A stateless task (a front end's,
//! a verification) carries its whole context and is sent without one.

use super::attempt::{Attempt, Failure, Health};
use super::task::{Answer, Progress, TaskCtx, TaskRun};
use super::Proxy;
use crate::a2a::{A2aCallError, Agent, Outcome};
use crate::ldp::{Body, ErrorCategory, ErrorSeverity, Json, LdpError, PayloadMode, Provenance};
use crate::registry::Delegate;
use crate::session::Binding;
use crate::upstream::UpstreamError;
use a2a_wire::v1::{Message, Part, PartContent, Role, TaskState};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

impl Proxy {
    /// One A2A agent's handling of the task; `charged` gets its declared price per call.
    pub(super) async fn ask_agent(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: Binding,
        agent: &Agent,
        deadline: Instant,
        charged: &mut f64,
    ) -> Attempt {
        let delegate = binding.delegate.clone();
        let left = match self.begin_attempt(t, run, &binding, deadline) {
            Ok(left) => left,
            Err(timed_out) => return Attempt::Failed(*timed_out),
        };
        let Some(at) = agent.endpoint() else {
            let e = UpstreamError::Malformed {
                url: delegate.base_url.clone(),
                reason: "no Agent Card read yet".into(),
            };
            return Attempt::Failed(Failure::upstream(&delegate, &e));
        };
        let mut message = match message_of(t) {
            Ok(m) => m,
            Err(error) => return Attempt::Done(Answer::Failed(error)),
        };
        if !t.stateless() {
            message.context_id = context_id(t.session.id.as_str(), &delegate.name);
        }
        let limit = Self::attempt_timeout(&t.policy, left);
        let trace = run.span.headers();
        let hops = crate::upstream::Forward {
            hops: Some(t.hops.saturating_add(1)),
            trace: &trace,
        };
        let sent = Instant::now();
        let named = std::sync::OnceLock::new();
        let calling = async {
            if !at.streaming {
                return agent.send(&self.upstream, &at, message, hops, limit).await;
            }
            // A streaming agent names its task at once (so a cancel can name it too); a
            // streaming LDP client is told its status messages and artifacts as they come.
            let relay = |text: &str| {
                if let Progress::Updates(tx) = t.progress {
                    let update = t.env.reply(
                        self.id(),
                        Body::TaskUpdate {
                            task_id: t.task.task_id.clone(),
                            progress: None,
                            message: Some(short(text)),
                        },
                        PayloadMode::Text,
                    );
                    // Dropped if the client is not keeping up: its result carries it all.
                    let _ = tx.try_send(update);
                }
            };
            agent
                .stream(&self.upstream, &at, message, hops, limit, &named, relay)
                .await
        };
        let mut calling = std::pin::pin!(calling);
        let answered = tokio::select! {
            biased;
            a = calling.as_mut() => Some(a),
            () = t.running.abandoned() => None,
        };
        let took = sent.elapsed();
        run.upstream += took;
        let Some(answered) = answered else {
            // Cancelled. A stream cancelled before its first event named the task is read
            // on, within the handshake timeout, until the agent names it (or answers): the
            // cancel must reach the agent's task.
            let until = Instant::now() + self.cfg.upstream.handshake_timeout;
            while at.streaming && named.get().is_none() && Instant::now() < until {
                tokio::select! {
                    _ = calling.as_mut() => break,
                    () = tokio::time::sleep(std::time::Duration::from_millis(5)) => {}
                }
            }
            // The agent is asked to cancel the task it named, if it named one.
            if let Some(task_id) = named.get() {
                let timeout = self.cfg.upstream.handshake_timeout;
                let sent = agent.cancel(&self.upstream, &at, task_id, timeout).await;
                tracing::info!(delegate = %delegate.name, ok = sent.is_ok(), "task cancelled at the A2A agent");
            }
            return Attempt::Done(Answer::Failed(super::task::cancelled()));
        };
        let (attempt, health) = self.judge_answer(t, run, &binding, answered, took, charged);
        self.judge(&delegate, health);
        attempt
    }

    /// The agent's answer as the attempt's outcome and what it says of the agent.
    fn judge_answer(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: &Binding,
        answered: Result<Outcome, A2aCallError>,
        took: std::time::Duration,
        charged: &mut f64,
    ) -> (Attempt, Health) {
        let delegate = &binding.delegate;
        let task = match answered {
            Err(A2aCallError::Transport(e)) => {
                let health = Health::of_error(&e, Some(took));
                return (Attempt::Failed(Failure::upstream(delegate, &e)), health);
            }
            Err(e @ A2aCallError::Rpc { code, .. }) => {
                let failure = fails_over(
                    delegate,
                    "a2a_error",
                    format!("answered JSON-RPC error {code}"),
                    e.to_string(),
                );
                return (Attempt::Failed(failure), Health::Faulted(None));
            }
            Ok(Outcome::Message(m)) => {
                return match output_of(m.parts.iter()) {
                    Some(output) => (
                        self.result(t, run, binding, output, charged),
                        Health::Answered(took),
                    ),
                    None => (Attempt::Failed(no_output(delegate)), Health::Faulted(None)),
                };
            }
            Ok(Outcome::Task(task)) => task,
        };
        let state = &task.status.state;
        let said = task
            .status
            .message
            .as_ref()
            .and_then(|m| output_of(m.parts.iter()))
            .map(|o| short(&crate::translate::render_text(&o)))
            .unwrap_or_default();
        let name = delegate.client_name();
        match state {
            TaskState::Completed => {
                let parts = task.artifacts.iter().flat_map(|a| a.parts.iter());
                let output = output_of(parts).or_else(|| {
                    let m = task.status.message.as_ref()?;
                    output_of(m.parts.iter())
                });
                match output {
                    Some(output) => (
                        self.result(t, run, binding, output, charged),
                        Health::Answered(took),
                    ),
                    None => (Attempt::Failed(no_output(delegate)), Health::Faulted(None)),
                }
            }
            TaskState::Failed => {
                let failure = fails_over(
                    delegate,
                    "task_failed",
                    "failed the task (TASK_STATE_FAILED)".into(),
                    said,
                );
                (Attempt::Failed(failure), Health::Faulted(Some(took)))
            }
            TaskState::Rejected => {
                let error = LdpError::new(
                    "TASK_REJECTED",
                    ErrorCategory::Capability,
                    ErrorSeverity::Error,
                    false,
                    format!("agent '{name}' rejected the task: {said}"),
                );
                (Attempt::Done(Answer::Failed(error)), Health::Answered(took))
            }
            TaskState::Canceled => {
                let error = LdpError::new(
                    "CANCELLED",
                    ErrorCategory::Runtime,
                    ErrorSeverity::Error,
                    false,
                    format!("agent '{name}' cancelled the task: {said}"),
                );
                (Attempt::Done(Answer::Failed(error)), Health::Answered(took))
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
                        "agent '{name}' asked for {asks} ({}): the gateway does not hold \
                         interrupted tasks; send the task again with what it asked for: {said}",
                        state.as_str()
                    ),
                );
                (Attempt::Done(Answer::Failed(error)), Health::Answered(took))
            }
            TaskState::Submitted
            | TaskState::Working
            | TaskState::Unspecified
            | TaskState::Unrecognized(_) => {
                let failure = fails_over(
                    delegate,
                    "malformed",
                    "answered before the task ended".into(),
                    format!("the task came back in {}", state.as_str()),
                );
                (Attempt::Failed(failure), Health::Faulted(None))
            }
        }
    }

    /// A result: `output` with the agent's provenance (`produced_by` its card's id), charged
    /// its declared price per call.
    fn result(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: &Binding,
        output: Value,
        charged: &mut f64,
    ) -> Attempt {
        let card = binding.delegate.card();
        let (id, version) = card
            .map(|c| (c.delegate_id.clone(), c.model_version.clone()))
            .unwrap_or_else(|| (binding.upstream.delegate_id.to_string(), String::new()));
        let mut p = Provenance::new(id, version, PayloadMode::Text);
        let cost = self
            .declared_cost(&binding.delegate, t.task.skill)
            .unwrap_or(0.0);
        p.cost_usd = Some(cost);
        *charged = cost;
        let provenance = self.route_provenance(t, binding, PayloadMode::Text, Some(p), run);
        Attempt::Done(Answer::Result {
            output: Json::from(output),
            provenance,
        })
    }
}

/// The client session's context at `delegate`: `ldp-` and 32 hex digits of the SHA-256 of
/// both (a unit separator between them).
pub(super) fn context_id(session: &str, delegate: &str) -> String {
    let digest = Sha256::digest(format!("{session}\u{1f}{delegate}").as_bytes());
    format!("ldp-{}", hex::encode(&digest[..16]))
}

/// The task's input as a user message: a string as one text part; anything else (a frame)
/// rendered to text as across the LDP hop, and as it is in a data part.
fn message_of(t: &TaskCtx<'_>) -> Result<Message, LdpError> {
    let input = t.task.input.to_value().map_err(|e| {
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
fn fails_over(delegate: &Delegate, reason: &'static str, what: String, detail: String) -> Failure {
    Failure {
        error: LdpError::upstream_failed(
            format!("agent '{}' {what}", delegate.client_name()),
            true,
        ),
        reason,
        retryable: true,
        detail,
        pause: None,
    }
}

/// A completed task (or message) with no text or data part: nothing to answer with.
fn no_output(delegate: &Delegate) -> Failure {
    fails_over(
        delegate,
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
