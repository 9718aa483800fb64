//! One attempt: one delegate's handling of the task (payload-mode fallback along the chain and
//! one silent re-handshake stay on the delegate), ending in a typed outcome. Each exchange
//! with the delegate is classified once ([`Exchange::of`]); what it says of the delegate's
//! health is applied in one place ([`Proxy::judge`]).

use super::task::{Answer, TaskCtx, TaskRun};
use super::{upstream_failed, Proxy, MAX_TRIES};
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    Body, Envelope, LdpError, LineageEntry, PayloadMode, Provenance, VerificationStatus,
};
use crate::policy::Policy;
use crate::registry::Delegate;
use crate::session::Binding;
use crate::state::SessionStore;
use crate::translate::{is_mode_failure, translate_input};
use crate::upstream::{Upstream, UpstreamError};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long an LDP delegate sent TASK_CANCEL may still answer the cancelled call before it
/// is dropped: its own answer (TASK_FAILED `CANCELLED`, or the result it had) is kept, and a
/// dropped connection never races the cancel it was sent.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How one delegate's handling of the task ended.
pub(super) enum Attempt {
    /// A final answer for the client.
    Done(Answer),
    /// The delegate failed; the run decides whether another is tried.
    Failed(Failure),
}

/// A delegate's failure at a task.
pub(super) struct Failure {
    /// What the client gets if no other delegate is tried: the delegate's name and a
    /// generic reason, never its address or its own words.
    pub(super) error: LdpError,
    /// The reason code for the row and `ldp_gateway_fallbacks_total` (`timeout`, …).
    pub(super) reason: &'static str,
    /// Whether another delegate may be tried.
    pub(super) retryable: bool,
    /// What happened, whole (the URL, the delegate's own message): for the log and the
    /// ledger row only.
    pub(super) detail: String,
    /// How long the delegate asked not to be called (a 429): if no other delegate takes
    /// the task, the client is answered with this rate limit.
    pub(super) pause: Option<Duration>,
}

impl Failure {
    /// The delegate could not be reached, timed out, or answered outside the protocol.
    pub(super) fn upstream(delegate: &Delegate, e: &UpstreamError) -> Failure {
        Failure {
            error: upstream_failed(delegate, e),
            reason: e.reason(),
            retryable: e.retryable(),
            detail: e.to_string(),
            pause: None,
        }
    }

    /// The delegate's own retryable TASK_FAILED: its code and category are kept, its
    /// message goes to the log and the ledger only.
    fn task_failed(delegate: &Delegate, mut error: LdpError) -> Failure {
        let told = match crate::upstream::code_shown(&error.code) {
            Some(code) => format!(
                "delegate '{}' failed the task ({code})",
                delegate.client_name()
            ),
            None => format!("delegate '{}' failed the task", delegate.client_name()),
        };
        let detail = std::mem::replace(&mut error.message, told);
        Failure {
            error,
            reason: "task_failed",
            retryable: true,
            detail,
            pause: None,
        }
    }
}

/// What one exchange says about the delegate's health.
#[derive(Debug, Clone, Copy)]
pub(super) enum Health {
    /// It answered within the protocol (a result, or the task's own failure) after this long.
    Answered(Duration),
    /// It is at fault (unreachable, an error status, a retryable failure, an answer outside
    /// the protocol); how long it took when it timed out.
    Faulted(Option<Duration>),
    /// Nothing learnt (a lost upstream session; a failure on the gateway's side).
    Unknown,
}

impl Health {
    /// What a transport error after `took` says about the delegate.
    pub(super) fn of_error(e: &UpstreamError, took: Option<Duration>) -> Health {
        if !e.is_delegate_fault() {
            return Health::Unknown;
        }
        let timed_out = matches!(e, UpstreamError::Timeout { .. });
        Health::Faulted(took.filter(|_| timed_out))
    }
}

/// How one upstream exchange ended.
enum Exchange {
    /// A result.
    Result {
        output: crate::ldp::Json,
        provenance: Option<Provenance>,
    },
    /// The delegate no longer knows the upstream session (its TTL ran out): re-handshake.
    SessionLost,
    /// The payload mode failed upstream: the next mode on the chain.
    ModeFailed(LdpError),
    /// The task's own failure, answered properly: the client's answer.
    Refused(LdpError),
    /// The delegate failed.
    Failed(Failure),
}

impl Exchange {
    /// Classifies the delegate's answer to a TASK_SUBMIT sent in `mode` after `took`.
    fn of(
        answer: Result<Envelope, UpstreamError>,
        delegate: &Delegate,
        mode: PayloadMode,
        may_rehandshake: bool,
        took: Duration,
    ) -> (Exchange, Health) {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                let health = Health::of_error(&e, Some(took));
                return (Exchange::Failed(Failure::upstream(delegate, &e)), health);
            }
        };
        match answer.body {
            Body::TaskResult {
                output, provenance, ..
            } => (
                Exchange::Result { output, provenance },
                Health::Answered(took),
            ),
            Body::TaskFailed { error, .. }
                if error.code == "SESSION_NOT_FOUND" && may_rehandshake =>
            {
                (Exchange::SessionLost, Health::Unknown)
            }
            Body::TaskFailed { error, .. } if is_mode_failure(&error, mode) => {
                (Exchange::ModeFailed(error), Health::Answered(took))
            }
            Body::TaskFailed { error, .. } if error.retryable => {
                let failure = Failure::task_failed(delegate, error);
                (Exchange::Failed(failure), Health::Faulted(Some(took)))
            }
            Body::TaskFailed { error, .. } => (Exchange::Refused(error), Health::Answered(took)),
            other => {
                let e = UpstreamError::Unexpected {
                    url: delegate.base_url.clone(),
                    got: other.message_type().as_str(),
                };
                let failure = Failure {
                    retryable: true,
                    ..Failure::upstream(delegate, &e)
                };
                (Exchange::Failed(failure), Health::Faulted(None))
            }
        }
    }
}

impl Proxy {
    /// The start of one attempt at a delegate reached without an LDP session (OpenAI-backed,
    /// A2A): counted, bound, the client told where it went; the time left before
    /// `deadline`, or the timeout failure when none is.
    pub(super) fn begin_attempt(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: &Binding,
        deadline: Instant,
    ) -> Result<Duration, Box<Failure>> {
        let delegate = &binding.delegate;
        run.attempts += 1;
        run.mode = Some(PayloadMode::Text);
        run.binding = Some(binding.clone());
        t.tell(
            self.id(),
            Some(0.0),
            format_args!("routed to {}", delegate.client_name()),
        );
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let e = UpstreamError::Timeout {
                url: delegate.base_url.clone(),
                after: left,
            };
            return Err(Box::new(Failure {
                reason: "timeout",
                retryable: false,
                ..Failure::upstream(delegate, &e)
            }));
        }
        Ok(left)
    }
}

impl Proxy {
    /// Applies what an exchange says to the delegate's health (the EWMA of observed latency,
    /// the failure count behind ejection): the one place that judges a delegate.
    pub(super) fn judge(&self, delegate: &Delegate, health: Health) {
        match health {
            Health::Answered(took) => delegate.record_success(took),
            Health::Faulted(timed_out) => {
                delegate.record_failure(timed_out);
            }
            Health::Unknown => {}
        }
    }

    /// One delegate's handling of the task, with its budget held while it runs and settled
    /// with what it cost.
    pub(super) async fn attempt(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        binding: Binding,
        deadline: Instant,
    ) -> Attempt {
        let delegate = binding.delegate.clone();
        tracing::Span::current().record("delegate", delegate.name.as_str());
        // Listed in the task while it runs, so a cancel reaches this delegate too; checked
        // after listing, so a cancel that read the list a moment before is not missed.
        let _call = t.running.call(&binding, t.task.task_id);
        if t.cancelled() {
            return Attempt::Done(Answer::Failed(super::task::cancelled()));
        }
        let _in_flight = delegate.start_task();
        let held = match self.reserve(t, &delegate).await {
            Ok(r) => self.held(t, r),
            Err(e) => return Attempt::Done(Answer::Failed(e)),
        };
        // The reservation may have waited (on the shared state): a cancel meanwhile sends
        // nothing.
        if t.cancelled() {
            held.settle(0.0).await;
            return Attempt::Done(Answer::Failed(super::task::cancelled()));
        }
        let mut charged = 0.0;
        let span = super::trace::attempt(t, &delegate);
        run.span = span.clone();
        let started = Instant::now();
        let outcome = match &delegate.upstream {
            // A completion is not dropped by a cancel: a streamed one stops being read (and
            // what it used is charged), a whole one runs to its end within the answer cap.
            Upstream::OpenAi(openai) => {
                self.complete(t, run, binding, openai, deadline, &mut charged)
                    .await
            }
            // An A2A agent is sent CancelTask at a cancel, if it named its task by then.
            Upstream::A2a(agent) => {
                self.ask_agent(t, run, binding, agent, deadline, &mut charged)
                    .await
            }
            // An LDP exchange is dropped at the cancel, once the delegate was sent TASK_CANCEL
            // and had a moment to answer it (its own answer is kept).
            Upstream::Ldp(_) => {
                let exchanging = self.exchanges(t, run, binding, deadline, &mut charged);
                let dropped = async {
                    t.running.abandoned().await;
                    tokio::time::sleep(CANCEL_GRACE).await;
                };
                tokio::select! {
                    biased;
                    outcome = exchanging => outcome,
                    () = dropped => {
                        Attempt::Done(Answer::Failed(super::task::cancelled()))
                    }
                }
            }
        };
        held.settle(charged).await;
        let ended = match &outcome {
            Attempt::Done(Answer::Result { output, .. }) => Ok(output),
            Attempt::Done(Answer::Failed(e)) => Err((e.code.as_str(), "refused")),
            Attempt::Failed(f) => Err((f.error.code.as_str(), f.reason)),
        };
        self.attempt_traced(&span, &delegate, run, ended, started.elapsed());
        outcome
    }

    /// How long one delegate may take: the policy's `max_latency_ms`, within what is left of
    /// the task's deadline.
    pub(super) fn attempt_timeout(policy: &Policy, left: Duration) -> Duration {
        policy
            .require
            .max_latency_ms
            .map_or(left, |ms| left.min(Duration::from_millis(ms)))
    }

    /// The exchanges with one delegate: payload-mode fallback along the chain and one silent
    /// re-handshake stay here; anything else ends the attempt. `charged` gets the cost.
    async fn exchanges(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        mut binding: Binding,
        deadline: Instant,
        charged: &mut f64,
    ) -> Attempt {
        let (env, skill) = (t.env, t.task.skill);
        let delegate = binding.delegate.clone();
        let key = t.binding_key(&delegate.name);
        let mut mode = binding.upstream.payload.mode;
        let mut rehandshaken = false;
        let streams = matches!(t.progress, super::task::Progress::Updates(_))
            && delegate
                .card()
                .and_then(|c| {
                    c.capability(skill)
                        .and_then(|cap| cap.hints.supports_streaming)
                })
                .unwrap_or(false);
        t.tell(
            self.id(),
            Some(0.0),
            format_args!("routed to {}", delegate.client_name()),
        );
        let trace = run.span.headers();
        loop {
            run.attempts += 1;
            run.mode = Some(mode);
            run.binding = Some(binding.clone());
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let e = UpstreamError::Timeout {
                    url: delegate.base_url.clone(),
                    after: Duration::ZERO,
                };
                return Attempt::Failed(Failure {
                    reason: "timeout",
                    retryable: false,
                    ..Failure::upstream(&delegate, &e)
                });
            }
            if run.attempts - run.attempts_before_round > MAX_TRIES {
                let e =
                    LdpError::gateway(GatewayCode::UpstreamFailed, "too many upstream attempts");
                return Attempt::Done(Answer::Failed(e));
            }
            let translated = if t.task.verifying {
                Ok(t.task.input.clone())
            } else {
                translate_input(t.task.input, env.payload_mode, mode)
            };
            let input = match translated {
                Ok(i) => i,
                Err(e) => {
                    let reason = format!(
                        "the task input cannot be translated from {} to {mode}: {e}",
                        env.payload_mode
                    );
                    let error = LdpError::gateway(GatewayCode::BadRequest, reason);
                    return Attempt::Done(Answer::Failed(error));
                }
            };
            let upstream_env = Envelope::new(
                binding.upstream.session_id.as_str(),
                self.id(),
                binding.upstream.delegate_id.as_str(),
                Body::TaskSubmit {
                    task_id: t.task.task_id.clone(),
                    skill: skill.to_owned(),
                    input,
                    contract: t.task.contract.cloned(),
                },
                mode,
            );
            let limit = Self::attempt_timeout(&t.policy, left);
            let hops = crate::upstream::Forward {
                hops: Some(t.hops.saturating_add(1)),
                trace: &trace,
            };
            let sent = Instant::now();
            let answer = if streams {
                let relay = |update: Envelope| {
                    if let (super::task::Progress::Updates(tx), Body::TaskUpdate { .. }) =
                        (t.progress, &update.body)
                    {
                        let mut update = update;
                        update.session_id = env.session_id.clone();
                        update.from = self.id().to_owned();
                        update.to = env.from.clone();
                        // Dropped if the client is not keeping up: the delegate is never
                        // held back by a slow client.
                        let _ = tx.try_send(update);
                    }
                    std::future::ready(())
                };
                self.upstream
                    .send_stream(&delegate.base_url, &upstream_env, limit, hops, relay)
                    .await
            } else {
                self.upstream
                    .send_hops(&delegate.base_url, &upstream_env, limit, hops)
                    .await
            };
            let took = sent.elapsed();
            run.upstream += took;
            // What the delegate reports beside its output is capped before anything keeps it.
            let answer = answer.map(|mut a| {
                if let Some(note) = crate::provenance::bounds::cap_answer(&mut a.body) {
                    tracing::info!(delegate = %delegate.name, %note, "oversized provenance");
                    run.notes.push(note);
                }
                a
            });
            let (exchange, health) = Exchange::of(answer, &delegate, mode, !rehandshaken, took);
            self.judge(&delegate, health);
            match exchange {
                Exchange::Result { output, provenance } => {
                    let provenance = self.route_provenance(t, &binding, mode, provenance, run);
                    *charged = provenance
                        .cost_usd
                        .or_else(|| self.declared_cost(&delegate, skill))
                        .unwrap_or(0.0);
                    return Attempt::Done(Answer::Result { output, provenance });
                }
                Exchange::SessionLost => {
                    // Cancelled meanwhile: no new session, no second submit.
                    if t.cancelled() {
                        return Attempt::Done(Answer::Failed(super::task::cancelled()));
                    }
                    rehandshaken = true;
                    if session_unbound(t, &key, &binding) {
                        self.sessions.unshare_binding(t.session, &key).await;
                    }
                    // Someone already replaced it (another task here, or a replica that won
                    // the first binding): use theirs rather than open and replace again.
                    let current = t
                        .session
                        .binding(&key)
                        .filter(|b| Arc::ptr_eq(&b.delegate, &delegate));
                    binding = match current {
                        Some(b) => b,
                        None => match self.open_binding(t.session, &key, delegate.clone()).await {
                            Ok(b) => b,
                            Err(error) => {
                                return Attempt::Failed(Failure::upstream(&delegate, &error))
                            }
                        },
                    };
                    mode = binding.upstream.payload.mode;
                    run.fallbacks.push("session_lost");
                    run.notes.push("upstream session expired; re-opened".into());
                }
                Exchange::ModeFailed(error) => {
                    let Some(next) = binding.upstream.payload.next_after(mode) else {
                        return Attempt::Done(Answer::Failed(error));
                    };
                    run.fallbacks.push("payload_mode");
                    run.notes.push(format!(
                        "{mode} failed upstream ({}); fell back to {next}",
                        error.code
                    ));
                    tracing::debug!(from = %mode, to = %next, "payload mode fallback");
                    mode = next;
                    // RFC §4.3: the session continues at the lower mode.
                    binding.upstream.payload.mode = next;
                    t.session.bind(&key, binding.clone());
                    self.sessions.share_binding(t.session, &key, &binding).await;
                }
                Exchange::Refused(error) => return Attempt::Done(Answer::Failed(error)),
                Exchange::Failed(failure) => return Attempt::Failed(failure),
            }
        }
    }

    /// The delegate's provenance as the client sees it: the client's session id, and a first
    /// lineage entry for the gateway's routing step.
    pub(super) fn route_provenance(
        &self,
        t: &TaskCtx<'_>,
        binding: &Binding,
        mode: PayloadMode,
        provenance: Option<Provenance>,
        run: &TaskRun,
    ) -> Provenance {
        let mut p = provenance.unwrap_or_else(|| {
            let card = binding.delegate.card();
            let (id, version) = card
                .map(|c| (c.delegate_id.clone(), c.model_version.clone()))
                .unwrap_or_else(|| (binding.upstream.delegate_id.to_string(), String::new()));
            Provenance::new(id, version, mode)
        });
        p.session_id = Some(t.session.id.to_string());
        p.lineage.insert(
            0,
            LineageEntry {
                delegate_id: self.id().to_owned(),
                model_version: self.version.clone(),
                step: "route".into(),
                timestamp: Some(crate::ldp::now_rfc3339()),
                verification_status: VerificationStatus::Unverified,
                policy: Some(t.policy.name.0.clone()),
                routed_to: Some(binding.delegate.client_name()),
                attempts: Some(run.attempts),
                note: (!run.notes.is_empty()).then(|| run.notes.join("; ")),
            },
        );
        p.normalize();
        p
    }
}

/// Drops the session's binding under `key` if it is still `binding`'s upstream session;
/// whether it was.
fn session_unbound(t: &TaskCtx<'_>, key: &str, binding: &Binding) -> bool {
    t.session
        .unbind(key, &binding.upstream.session_id)
        .is_some()
}
