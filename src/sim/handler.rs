//! One LDP message in, one reply out: the delegate's half of the session lifecycle.

use super::session::Missing;
use super::task::failure;
use super::{lock, task, SimState};
use crate::ldp::error::GatewayCode;
use crate::ldp::session_config::DEFAULT_TTL_SECS;
use crate::ldp::{
    self, Body, CapabilityManifest, DelegationContract, Envelope, ErrorCategory, LdpError,
    PayloadMode, SessionConfig,
};
use crate::recent::{StatusKey, TaskStatus};
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

/// Where TASK_UPDATE progress goes when the client streams.
pub(super) type Progress = mpsc::Sender<Envelope>;

/// A running task, as the in-flight table holds it.
pub(super) struct InFlight {
    /// Tells apart two tasks that reuse an id.
    serial: u64,
    session_id: String,
    cancel: Arc<Notify>,
}

/// Answers one envelope. `progress` receives TASK_UPDATEs while a task runs (streaming only).
pub(super) async fn handle(
    state: &SimState,
    env: Envelope,
    progress: Option<&Progress>,
) -> Envelope {
    let inner = &state.0;
    let card = &inner.card;
    let me = card.delegate_id.as_str();
    match &env.body {
        Body::Hello { .. } => {
            state.count(|s| &mut s.hellos);
            let capabilities = CapabilityManifest {
                capabilities: card.capabilities.clone(),
                supported_modes: card.supported_payload_modes.clone(),
            };
            env.reply(
                me,
                Body::CapabilityManifest { capabilities },
                PayloadMode::Text,
            )
        }
        Body::SessionPropose { config } => propose(state, &env, config),
        Body::TaskUpdate { .. } if env.body.status_query().is_some() => status_query(state, &env),
        Body::TaskSubmit {
            task_id,
            skill,
            input,
            contract,
        } => {
            state.count(|s| &mut s.tasks);
            inner
                .statuses
                .running("", &env.from, task_id, env.session_id.clone());
            let task = Task {
                state,
                env: &env,
                task_id,
                skill,
                // The simulated model reads its input (the gateway does not); a number out of
                // range or a lone surrogate reads as null.
                input: input.to_value().unwrap_or_default(),
                contract: contract.as_ref(),
            };
            let body = match task.run(progress).await {
                Ok(body) => {
                    state.count(|s| &mut s.results);
                    body
                }
                Err(error) => {
                    state.count(|s| &mut s.failures);
                    Body::TaskFailed {
                        task_id: task_id.clone(),
                        error,
                    }
                }
            };
            let reply = env.reply(me, body, reply_mode(&env));
            inner
                .statuses
                .done("", &env.from, task_id, Arc::new(reply.clone()));
            reply
        }
        Body::TaskCancel { task_id } => {
            // The reference Rust adapter cancels without a session: the task is the sender's.
            if env.session_id.is_empty() {
                let key = StatusKey::new("", &env.from, task_id);
                if let Some(TaskStatus::Running(session)) = inner.statuses.get(&key) {
                    state.signal_cancel(task_id, &session);
                }
            } else {
                state.signal_cancel(task_id, &env.session_id);
            }
            // The Python reference answers every cancel this way, running or not.
            let body = Body::TaskUpdate {
                task_id: task_id.clone(),
                progress: None,
                message: Some("cancelled".into()),
            };
            env.reply(me, body, reply_mode(&env))
        }
        Body::SessionClose { .. } => {
            if lock(&inner.sessions).close(&env.session_id) {
                state.count(|s| &mut s.closes);
            }
            let body = Body::SessionClose {
                reason: Some("acknowledged".into()),
            };
            env.reply(me, body, PayloadMode::Text)
        }
        Body::CapabilityManifest { .. }
        | Body::SessionAccept { .. }
        | Body::SessionReject { .. }
        | Body::TaskUpdate { .. }
        | Body::TaskResult { .. }
        | Body::TaskFailed { .. }
        | Body::Attestation { .. } => {
            let kind = env.body.message_type().as_str();
            let why = format!("a delegate does not accept {kind} messages");
            let error = failure("UNSUPPORTED_MESSAGE", ErrorCategory::Session, false, why);
            let task_id = env.body.task_id().unwrap_or_default().to_owned();
            env.reply(
                me,
                Body::TaskFailed {
                    task_id: task_id.into(),
                    error,
                },
                PayloadMode::Text,
            )
        }
    }
}

/// A status query, answered from the sender's recent tasks (see
/// [`crate::recent::RecentTasks::answer_query`]).
fn status_query(state: &SimState, env: &Envelope) -> Envelope {
    let task: crate::ldp::TaskId = env.body.task_id().unwrap_or_default().into();
    let key = StatusKey::new("", &env.from, &task);
    let me = state.0.card.delegate_id.as_str();
    (*state.0.statuses.answer_query(&key, env, me)).clone()
}

/// The mode to answer a task message in: the task's own, unless no SDK could parse it.
fn reply_mode(env: &Envelope) -> PayloadMode {
    if env.payload_mode.is_emittable() {
        env.payload_mode
    } else {
        PayloadMode::Text
    }
}

/// SESSION_PROPOSE: RFC §7.2 trust checks, §4.2 negotiation, a new session id.
fn propose(state: &SimState, env: &Envelope, config: &SessionConfig) -> Envelope {
    let inner = &state.0;
    let card = &inner.card;
    state.count(|s| &mut s.proposals);
    // RFC peers do not name their own domain; they are taken to be in ours.
    let initiator = config
        .trust_domain
        .as_deref()
        .unwrap_or(&card.trust_domain.name);
    let required = config.required_trust_domain.as_deref();
    if let Err(violation) = ldp::trust::check_session(&card.trust_domain, initiator, required) {
        state.count(|s| &mut s.rejected);
        let reason = violation.to_string();
        let error = Some(LdpError::gateway(
            GatewayCode::TrustViolation,
            reason.clone(),
        ));
        return env.reply(
            &card.delegate_id,
            Body::SessionReject { reason, error },
            PayloadMode::Text,
        );
    }
    let negotiated = ldp::negotiate(&config.preferences(), &card.supported_payload_modes);
    let ttl = Duration::from_secs(
        config
            .ttl_secs
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_TTL_SECS),
    );
    let session_id = ldp::new_id();
    lock(&inner.sessions).open(session_id.clone(), ttl, Instant::now());
    state.count(|s| &mut s.accepted);
    let body = Body::SessionAccept {
        session_id: session_id.clone(),
        negotiated_mode: negotiated.mode,
        fallback_chain: negotiated.fallback_chain,
    };
    let mut reply = env.reply(&card.delegate_id, body, PayloadMode::Text);
    reply.session_id = session_id.into();
    reply
}

/// One TASK_SUBMIT being answered.
struct Task<'a> {
    state: &'a SimState,
    env: &'a Envelope,
    task_id: &'a str,
    skill: &'a str,
    input: Value,
    contract: Option<&'a DelegationContract>,
}

impl Task<'_> {
    /// Session, skill and payload checks, the simulated latency, then a result or a failure.
    async fn run(&self, progress: Option<&Progress>) -> Result<Body, LdpError> {
        let inner = &self.state.0;
        let card = &inner.card;
        let session_id = self.env.session_id.as_str();
        let mode = self.env.payload_mode;
        self.state.touch(session_id)?;
        if card.capability(self.skill).is_none() {
            let offered: Vec<&str> = card.capabilities.iter().map(|c| c.name.as_str()).collect();
            let why = format!(
                "{} does not offer skill '{}' (offered: {})",
                card.delegate_id,
                self.skill,
                offered.join(", ")
            );
            return Err(failure(
                "SKILL_NOT_FOUND",
                ErrorCategory::Capability,
                false,
                why,
            ));
        }
        let judging = inner.verifier && self.skill == task::VERIFY_SKILL;
        // A verification task has its own shape, not a frame's `task_type`/`instruction`.
        task::validate(mode, &self.input, card, &inner.fail_modes, !judging)?;
        let verification = if judging {
            Some(task::verification(&self.input)?)
        } else {
            None
        };
        let (delay, fail_rate) = self.state.task_knobs(self.skill);
        let cancel = self.state.register(self.task_id, session_id);
        let mut shutdown = inner.shutdown.subscribe();
        let half = delay / 2;
        self.update(progress, 0.0, "started").await;
        self.pause(half, &cancel.notify, &mut shutdown).await?;
        self.update(progress, 0.5, "working").await;
        self.pause(delay - half, &cancel.notify, &mut shutdown)
            .await?;
        if fastrand::f64() < fail_rate {
            let why = format!(
                "{} failed on purpose (fail rate {fail_rate})",
                card.delegate_id
            );
            return Err(failure(
                "SIMULATED_FAILURE",
                ErrorCategory::Runtime,
                true,
                why,
            ));
        }
        // A running task is activity: the idle clock restarts when it ends.
        self.state.touch(session_id)?;
        let output = self.output(verification.as_ref(), mode);
        let tokens = task::tokens(&self.input, &output);
        let provenance =
            task::provenance(card, self.skill, mode, session_id, tokens, self.contract);
        Ok(Body::TaskResult {
            task_id: self.task_id.into(),
            output: output.into(),
            provenance: Some(provenance),
        })
    }

    /// The task's output: a verdict, a right or wrong answer to `expected`, or the digest.
    fn output(&self, verification: Option<&task::Verification<'_>>, mode: PayloadMode) -> Value {
        let inner = &self.state.0;
        if let Some(v) = verification {
            let accuracy = inner.accuracy.unwrap_or(1.0);
            let verdict = if inner.rubber_stamp {
                task::stamp(v, accuracy)
            } else {
                task::judge(v, accuracy, self.state.draw(accuracy))
            };
            if verdict.passed {
                self.state.count(|s| &mut s.verdicts_passed);
            } else {
                self.state.count(|s| &mut s.verdicts_failed);
            }
            if verdict.misjudged {
                self.state.count(|s| &mut s.verdicts_misjudged);
            }
            return verdict.output;
        }
        let card = &inner.card;
        match (inner.accuracy, task::expected(&self.input)) {
            (Some(accuracy), Some(expected)) => {
                let right = self.state.draw(accuracy);
                if right {
                    self.state.count(|s| &mut s.right_answers);
                } else {
                    self.state.count(|s| &mut s.wrong_answers);
                }
                task::answer(card, self.skill, &self.input, mode, expected, right)
            }
            _ => task::output(card, self.skill, &self.input, mode),
        }
    }

    /// Sends a TASK_UPDATE if the client streams. A closed stream (client gone) is not an error.
    async fn update(&self, progress: Option<&Progress>, fraction: f64, message: &str) {
        if let Some(tx) = progress {
            let body = Body::TaskUpdate {
                task_id: self.task_id.into(),
                progress: Some(fraction),
                message: Some(message.to_owned()),
            };
            let update = self
                .env
                .reply(&self.state.0.card.delegate_id, body, reply_mode(self.env));
            let _ = tx.send(update).await;
        }
    }

    /// Sleeps `d` unless TASK_CANCEL or shutdown comes first.
    async fn pause(
        &self,
        d: Duration,
        cancel: &Notify,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), LdpError> {
        if d.is_zero() {
            // tokio's timer has 1 ms granularity: a zero sleep would still cost a tick.
            return Ok(());
        }
        let cancelled =
            |retryable, why| failure("CANCELLED", ErrorCategory::Runtime, retryable, why);
        tokio::select! {
            () = tokio::time::sleep(d) => Ok(()),
            () = cancel.notified() => {
                self.state.count(|s| &mut s.cancels);
                Err(cancelled(false, format!("task '{}' was cancelled", self.task_id)))
            }
            _ = shutdown.wait_for(|down| *down) => Err(cancelled(true, "the delegate is shutting down".into())),
        }
    }
}

/// Removes its task from the in-flight table when the task ends, however it ends (including
/// the handler being dropped because the client hung up).
struct Registered<'a> {
    state: &'a SimState,
    task_id: String,
    serial: u64,
    notify: Arc<Notify>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut table = lock(&self.state.0.inflight);
        if table
            .get(&self.task_id)
            .is_some_and(|t| t.serial == self.serial)
        {
            table.remove(&self.task_id);
        }
    }
}

impl SimState {
    /// Marks a session used, or the SESSION_NOT_FOUND error that says why it is not usable.
    fn touch(&self, session_id: &str) -> Result<(), LdpError> {
        let found = lock(&self.0.sessions).touch(session_id, Instant::now());
        found.map_err(|missing| {
            let message = match missing {
                _ if session_id.is_empty() => {
                    "the envelope has no session_id; open a session with SESSION_PROPOSE first"
                        .into()
                }
                Missing::Unknown => format!("session '{session_id}' is unknown or closed"),
                Missing::Expired { ttl } => {
                    self.count(|s| &mut s.expired);
                    format!(
                        "session '{session_id}' expired after {}s idle",
                        ttl.as_secs()
                    )
                }
            };
            LdpError::gateway(GatewayCode::SessionNotFound, message)
        })
    }

    /// Latency (with jitter applied) and failure rate for one task of `skill`.
    fn task_knobs(&self, skill: &str) -> (Duration, f64) {
        let knobs = *lock(&self.0.knobs);
        let declared = knobs
            .card_latency
            .then(|| {
                self.0
                    .card
                    .effective_hints(skill)
                    .and_then(|h| h.latency_p50_ms)
            })
            .flatten()
            .map(Duration::from_millis);
        let base = declared.unwrap_or(knobs.latency);
        let jitter = u64::try_from(knobs.jitter.as_millis()).unwrap_or(u64::MAX / 4);
        let spread = Duration::from_millis(fastrand::u64(0..=jitter.saturating_mul(2)));
        let delay = base
            .saturating_add(spread)
            .saturating_sub(Duration::from_millis(jitter));
        (delay, knobs.fail_rate)
    }

    /// Enters a task in the in-flight table.
    fn register(&self, task_id: &str, session_id: &str) -> Registered<'_> {
        let serial = self.0.serials.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        let entry = InFlight {
            serial,
            session_id: session_id.to_owned(),
            cancel: Arc::clone(&notify),
        };
        lock(&self.0.inflight).insert(task_id.to_owned(), entry);
        Registered {
            state: self,
            task_id: task_id.to_owned(),
            serial,
            notify,
        }
    }

    /// Cancels a running task of that session, if there is one.
    fn signal_cancel(&self, task_id: &str, session_id: &str) {
        if let Some(task) = lock(&self.0.inflight).get(task_id) {
            if task.session_id == session_id {
                // `notify_one` keeps a permit, so a cancel between two pauses is not lost.
                task.cancel.notify_one();
            }
        }
    }
}
