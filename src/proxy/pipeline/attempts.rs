//! The pipeline's attempts stage: the task run through delegates in turn — which to try, in
//! what order, when to stop (failover within the policy's `max_attempts`, the retry budget and
//! the task's deadline; the router asked once per failover) — and each attempt: one
//! delegate's handling of the task, whatever its kind (`crate::upstream`: each kind's call,
//! translation, usage and errors are its own room's), with its budget held while it runs
//! (`attempts/hold.rs`); an LDP delegate's payload-mode fallback along the chain and one
//! silent re-handshake stay on the delegate. What each call says of the delegate's health is
//! applied in one place ([`Attempts::judge`]).

mod hold;

use super::routing::{Chosen, NoBinding, Routing};
use super::task::{Answer, ChatDelta, Progress, TaskCtx, TaskRun, Unfinished};
use crate::chat::Turn;
use crate::ldp::error::GatewayCode;
use crate::ldp::VerificationStatus;
use crate::ldp::{Body, LdpError, LineageEntry, PayloadMode, Provenance};
use crate::policy::Policy;
use crate::proxy::MAX_TRIES;
use crate::registry::Delegate;
use crate::routing::Need;
use crate::session::Binding;
use crate::state::{ConversationStore as _, SessionStore};
use crate::upstream::{Call, Called, Relay, Update};
pub(crate) use crate::upstream::{Failure, Health};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How long an LDP delegate sent TASK_CANCEL may still answer the cancelled call before it
/// is dropped: its own answer (TASK_FAILED `CANCELLED`, or the result it had) is kept, and a
/// dropped connection never races the cancel it was sent.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

super::stage!(
    /// Attempts: the task through delegates in turn, each one's handling of it.
    Attempts
);

/// How one delegate's handling of the task ended.
pub(crate) enum Attempt {
    /// A final answer for the client.
    Done(Answer),
    /// The delegate failed; the run decides whether another is tried.
    Failed(Failure),
}

impl Attempts<'_> {
    /// The routing stage, asked for bindings and failovers.
    fn routing(&self) -> Routing<'_> {
        Routing(self.0)
    }

    /// Applies what an exchange says to the delegate's health (the EWMA of observed latency,
    /// the failure count behind ejection): the one place that judges a delegate.
    pub(crate) fn judge(&self, delegate: &Delegate, health: Health) {
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
    pub(crate) async fn attempt(
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
        let exchanging = self.exchanges(t, run, binding, deadline, &mut charged);
        let outcome = if delegate.upstream.keeps_sessions() {
            // An LDP exchange is dropped at the cancel, once the delegate was sent TASK_CANCEL
            // and had a moment to answer it (its own answer is kept). A completion is not
            // dropped (a streamed one stops being read, and what it used is charged); an A2A
            // agent is sent CancelTask at a cancel, if it named its task by then.
            let dropped = async {
                t.running.abandoned().await;
                tokio::time::sleep(CANCEL_GRACE).await;
            };
            tokio::select! {
                biased;
                outcome = exchanging => outcome,
                () = dropped => Attempt::Done(Answer::Failed(super::task::cancelled())),
            }
        } else {
            exchanging.await
        };
        held.settle(charged).await;
        let ended = match &outcome {
            Attempt::Done(Answer::Result { output, .. }) => Ok(output),
            Attempt::Done(Answer::Failed(e)) => Err((e.code.as_str(), "refused")),
            Attempt::Failed(f) => Err((f.error.code.as_str(), f.reason)),
        };
        super::trace::attempt_ended(
            &self.metrics,
            &span,
            &delegate,
            run,
            ended,
            started.elapsed(),
        );
        outcome
    }

    /// How long one delegate may take: the policy's `max_latency_ms`, within what is left of
    /// the task's deadline.
    pub(crate) fn attempt_timeout(policy: &Policy, left: Duration) -> Duration {
        policy
            .require
            .max_latency_ms
            .map_or(left, |ms| left.min(Duration::from_millis(ms)))
    }

    /// The calls to one delegate: an LDP delegate's payload-mode fallback along the chain and
    /// one silent re-handshake stay here; anything else ends the attempt. `charged` gets the
    /// cost.
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
        let upstream = &delegate.upstream;
        let told = delegate.client_name();
        let key = t.binding_key(&delegate.name);
        let mut mode = binding.upstream.payload.mode;
        let mut rehandshaken = false;
        t.tell(self.id(), Some(0.0), format_args!("routed to {told}"));
        let trace = run.span.headers();
        let most_out = upstream.output_tokens(t.task.chat, self.cfg.openai.default_max_tokens);
        // A chat delegate keeping no state is sent the session's remembered turns (fitted
        // to its window) before the input. A verification is judged on its own, and a front
        // end's task carries its whole context: no conversation read or kept for them.
        let turns = match (t.task.chat, upstream.keeps_conversation() && !t.stateless()) {
            (None, true) => {
                match crate::upstream::chat::user_text(t.task.input, env.payload_mode) {
                    Ok(user) => self.fitted_turns(t, upstream, &user, most_out).await,
                    Err(error) => return Attempt::Done(Answer::Failed(error)),
                }
            }
            _ => Vec::new(),
        };
        let relay_updates = |update: Update| match t.progress {
            Progress::Updates(tx) if tx.is_closed() || t.cancelled() => ControlFlow::Break(()),
            Progress::Updates(tx) => {
                let update = match update {
                    Update::Envelope(mut update) => {
                        update.session_id = env.session_id.clone();
                        update.from = self.id().to_owned();
                        update.to = env.from.clone();
                        update
                    }
                    Update::Note(text) if text.is_empty() => return ControlFlow::Continue(()),
                    Update::Note(text) => env.reply(
                        self.id(),
                        Body::TaskUpdate {
                            task_id: t.task.task_id.clone(),
                            progress: None,
                            message: Some(text),
                        },
                        PayloadMode::Text,
                    ),
                };
                // Dropped if the client is not keeping up: the delegate is never held back
                // by a slow client, and the answer carries it all.
                let _ = tx.try_send(update);
                ControlFlow::Continue(())
            }
            Progress::Quiet | Progress::Deltas(_) => ControlFlow::Continue(()),
        };
        let relay_pieces = |piece: crate::chat::Delta| -> crate::upstream::PieceSent<'_> {
            let delta = (!piece.is_empty()).then(|| ChatDelta {
                delta: piece,
                delegate: Arc::clone(&delegate),
                policy: Arc::clone(&t.policy),
            });
            let cancelled = t.cancelled();
            let tx = match t.progress {
                Progress::Deltas(tx) => Some(tx),
                Progress::Quiet | Progress::Updates(_) => None,
            };
            Box::pin(async move {
                let Some(tx) = tx else {
                    return ControlFlow::Continue(());
                };
                match delta {
                    // Cancelled: nobody is to be answered.
                    _ if cancelled => ControlFlow::Break(()),
                    // The answer itself: waited for, never dropped (a slow client slows the
                    // read); nobody to take it stops the read.
                    Some(d) => match tx.send(d).await {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(_) => ControlFlow::Break(()),
                    },
                    None if tx.is_closed() => ControlFlow::Break(()),
                    None => ControlFlow::Continue(()),
                }
            })
        };
        let relay = match t.progress {
            Progress::Quiet => Relay::Quiet,
            Progress::Updates(_) => Relay::Updates(&relay_updates),
            Progress::Deltas(_) => Relay::Pieces(&relay_pieces),
        };
        let declared = self.declared_cost(&delegate, skill);
        loop {
            run.attempts += 1;
            run.mode = Some(mode);
            run.binding = Some(binding.clone());
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let f = Failure::timed_out(&told, &delegate.base_url, Duration::ZERO);
                return Attempt::Failed(f);
            }
            // Mode fallbacks and re-handshakes stay on one LDP delegate: bounded per round.
            let retried_in_place = upstream.keeps_sessions();
            if retried_in_place && run.attempts - run.attempts_before_round > MAX_TRIES {
                let e =
                    LdpError::gateway(GatewayCode::UpstreamFailed, "too many upstream attempts");
                return Attempt::Done(Answer::Failed(e));
            }
            let call = Call {
                client: &self.upstream,
                base_url: &delegate.base_url,
                told: &told,
                name: &delegate.name,
                card: delegate.card(),
                task_id: t.task.task_id,
                skill,
                input: t.task.input,
                input_mode: env.payload_mode,
                verifying: t.task.verifying,
                contract: t.task.contract,
                chat: t.task.chat,
                session: (!t.stateless()).then_some(t.session.id.as_str()),
                upstream_session: Some(&binding.upstream),
                mode,
                may_rehandshake: !rehandshaken,
                turns: &turns,
                max_output_tokens: most_out,
                declared_cost: declared,
                limit: Self::attempt_timeout(&t.policy, left),
                handshake_timeout: self.cfg.upstream.handshake_timeout,
                forward: crate::upstream::Forward {
                    hops: Some(t.hops.saturating_add(1)),
                    trace: &trace,
                },
                cancel: t.running.cancelled_token(),
                abandon: t.running.abandoned_token(),
            };
            let outcome = upstream.call(&call, &relay).await;
            run.upstream += outcome.took;
            run.notes.extend(outcome.notes);
            if outcome.clamped {
                self.metrics
                    .usage_clamped
                    .with_label_values(&[delegate.name.as_str()])
                    .inc();
            }
            if let Some(p) = outcome.pause {
                delegate.pause(p);
            }
            // An answer cut short (the client left, the cap, a break) was used all the same:
            // it is charged and recorded.
            if let Some((usage, cost)) = outcome.used {
                *charged = cost;
                run.usage = Some(usage);
                run.unfinished = Some(Unfinished {
                    tokens: usage.total_tokens,
                    cost_usd: cost,
                });
            }
            self.judge(&delegate, outcome.health);
            match outcome.called {
                Called::Answered(a) => {
                    let a = *a;
                    let provenance = self.route_provenance(t, &binding, mode, a.provenance, run);
                    *charged = provenance.cost_usd.or(declared).unwrap_or(0.0);
                    run.usage = a.usage;
                    run.chat = a.chat;
                    if let Some(turn) = a.turn.filter(|_| upstream.keeps_conversation()) {
                        self.remember(t, turn).await;
                    }
                    return Attempt::Done(Answer::Result {
                        output: a.output,
                        provenance,
                    });
                }
                Called::SessionLost => {
                    // Cancelled meanwhile: no new session, no second submit.
                    if t.cancelled() {
                        return Attempt::Done(Answer::Failed(super::task::cancelled()));
                    }
                    rehandshaken = true;
                    if session_unbound(t, &key, &binding) {
                        self.sessions.unshare_binding(t.binds, &key).await;
                    }
                    // Someone already replaced it (another task here, or a replica that won
                    // the first binding): use theirs rather than open and replace again.
                    let current = t
                        .binds
                        .binding(&key)
                        .filter(|b| Arc::ptr_eq(&b.delegate, &delegate));
                    binding = match current {
                        Some(b) => b,
                        None => match self
                            .routing()
                            .open_binding(t.binds, &key, delegate.clone())
                            .await
                        {
                            Ok(b) => b,
                            Err(error) => return Attempt::Failed(Failure::upstream(&told, &error)),
                        },
                    };
                    mode = binding.upstream.payload.mode;
                    run.fallbacks.push("session_lost");
                    run.notes.push("upstream session expired; re-opened".into());
                }
                Called::ModeFailed(error) => {
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
                    t.binds.bind(&key, binding.clone());
                    self.sessions.share_binding(t.binds, &key, &binding).await;
                }
                Called::Refused(error, refused) => {
                    if refused.is_some() {
                        run.refused_upstream = refused;
                    }
                    return Attempt::Done(Answer::Failed(error));
                }
                Called::Failed(failure) => return Attempt::Failed(*failure),
            }
        }
    }

    /// The session's turns for the skill that fit the delegate's context window with `user`'s
    /// text and room for an answer of `answer` tokens; older ones are forgotten and counted.
    async fn fitted_turns(
        &self,
        t: &TaskCtx<'_>,
        upstream: &crate::upstream::Upstream,
        user: &str,
        answer: u64,
    ) -> Vec<Turn> {
        let (tenant, session) = (&t.session.tenant, &t.session.id);
        let mut turns = self
            .conversations
            .turns(tenant, session, t.task.skill)
            .await;
        let keep = upstream.turns_that_fit(&turns, user, answer);
        let drop = turns.len() - keep.min(turns.len());
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

    /// The delegate's provenance as the client sees it: the client's session id, and a first
    /// lineage entry for the gateway's routing step.
    pub(crate) fn route_provenance(
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

/// Drops the binding under `key` if it is still `binding`'s upstream session; whether it
/// was.
fn session_unbound(t: &TaskCtx<'_>, key: &str, binding: &Binding) -> bool {
    t.binds.unbind(key, &binding.upstream.session_id).is_some()
}

impl Attempts<'_> {
    /// The task's deadline, across every attempt: the tighter of the global ceiling and the
    /// contract's deadline. (The policy's `max_latency_ms` bounds each attempt instead, so a
    /// hanging delegate is failed over while time is left.)
    pub(crate) fn task_timeout(&self, need: &Need<'_>) -> Duration {
        let mut t = self.cfg.upstream.task_timeout;
        if let Some(ms) = need.contract_ms_left {
            t = t.min(Duration::from_millis(ms));
        }
        t
    }

    /// Tries delegates (never those in `exclude`) until one answers, failing over on
    /// retryable failures within the policy's `max_attempts`, the retry budget and
    /// `deadline`.
    pub(crate) async fn run(
        &self,
        t: &TaskCtx<'_>,
        run: &mut TaskRun,
        exclude: &[String],
        deadline: Instant,
    ) -> Answer {
        let skill = t.task.skill;
        let base = Need {
            exclude,
            ..t.need()
        };
        // A stateless request has no context to move.
        let previous = (!t.stateless())
            .then(|| t.session.binding(skill).map(|b| b.delegate.clone()))
            .flatten();
        let mut tried: Vec<String> = exclude.to_vec();
        let mut last: Option<LdpError> = None;
        if t.cancelled() {
            return Answer::Failed(super::task::cancelled());
        }
        let mut chosen = self.routing().binding_for(t, &base, run).await;
        loop {
            let (delegate, failure) = match chosen {
                Ok(binding) => {
                    run.delegates += 1;
                    let delegate = binding.delegate.clone();
                    match self.attempt(t, run, binding, deadline).await {
                        Attempt::Done(Answer::Result {
                            output,
                            mut provenance,
                        }) => {
                            if let Some(prev) =
                                previous.as_ref().filter(|p| p.name != delegate.name)
                            {
                                let note = format!(
                                    "context moved from {} to {}",
                                    prev.client_name(),
                                    delegate.client_name()
                                );
                                if let Some(first) = provenance.lineage.first_mut() {
                                    first.note = Some(match first.note.take() {
                                        Some(n) => format!("{n}; {note}"),
                                        None => note,
                                    });
                                }
                            }
                            return Answer::Result { output, provenance };
                        }
                        Attempt::Done(answer) => return answer,
                        Attempt::Failed(failure) => {
                            let key = t.binding_key(&delegate.name);
                            if t.binds.unbind_delegate(&key, &delegate).is_some() {
                                self.sessions.unshare_binding(t.binds, &key).await;
                            }
                            (delegate, failure)
                        }
                    }
                }
                Err(NoBinding::None(e)) => return Answer::Failed(last.unwrap_or(e)),
                Err(NoBinding::Open { delegate, error }) => {
                    run.delegates += 1;
                    self.judge(&delegate, Health::of_error(&error, None));
                    let failure = Failure::upstream(&delegate.client_name(), &error);
                    (delegate, failure)
                }
            };
            // The whole story for the operator (log and ledger row); the client's answer
            // names the delegate and a generic reason only.
            tracing::info!(delegate = %delegate.name, reason = failure.reason,
                error = super::task::cut_detail(&failure.detail).0, "delegate failed the task");
            run.upstream_error(&delegate.name, &failure.detail);
            // Cancelled: no other delegate is tried.
            if t.cancelled() {
                return Answer::Failed(super::task::cancelled());
            }
            tried.push(delegate.name.clone());
            let need = Need {
                exclude: &tried,
                ..base
            };
            let next = match self.failover(t, run, &need, deadline, &failure) {
                Ok(next) => next,
                Err(stop) => {
                    // A 429 that no other delegate takes up: a rate limit, with its wait.
                    if stop.code == GatewayCode::RateLimited.as_str() {
                        run.retry_after = failure.pause;
                    }
                    return Answer::Failed(stop);
                }
            };
            let reason = failure.reason;
            run.fallbacks.push(reason);
            run.notes.push(format!(
                "failover from {} ({reason})",
                delegate.client_name()
            ));
            tracing::debug!(delegate = %delegate.name, reason, "failing over");
            t.tell(
                self.id(),
                None,
                format_args!(
                    "delegate {} failed ({reason}); retrying on another delegate",
                    delegate.client_name()
                ),
            );
            last = Some(failure.error);
            chosen = self.routing().rebind(t, &need, run, next).await;
        }
    }

    /// Whether the task fails over after `failure`, and to whom: the router is asked once,
    /// and only a failover that can happen spends retry budget. `Err` is the client's answer.
    fn failover(
        &self,
        t: &TaskCtx<'_>,
        run: &TaskRun,
        need: &Need<'_>,
        deadline: Instant,
        failure: &Failure,
    ) -> Result<Chosen, LdpError> {
        if !failure.retryable {
            return Err(failure.error.clone());
        }
        let stop = |why: &str| {
            if failure.pause.is_some() {
                // The delegate asked to wait (429) and nobody else can take the task: the
                // client is told so, as it will be while the delegate waits.
                return failure.error.clone();
            }
            // A gateway behind the last delegate refused a loop (HTTP 508): told as one, so
            // every gateway on the way back tells its client the same.
            let code = match failure.reason {
                "loop_detected" => GatewayCode::LoopDetected,
                _ => GatewayCode::UpstreamFailed,
            };
            LdpError::gateway(
                code,
                format!(
                    "every attempt failed ({why}); last: {}",
                    failure.error.message
                ),
            )
        };
        let why = if Instant::now() >= deadline {
            "the task's deadline passed"
        } else if run.delegates >= t.policy.max_attempts {
            "the policy's max_attempts is reached"
        } else {
            match self.routing().decide(&t.policy, need) {
                Err(_) => "no other eligible delegate",
                Ok(next) if self.retries.try_retry() => return Ok(next),
                Ok(_) => "the retry budget is spent",
            }
        };
        Err(stop(why))
    }
}
