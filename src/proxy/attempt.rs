//! One attempt: one delegate's handling of the task (payload-mode fallback along the chain and
//! one silent re-handshake stay on the delegate), ending in a typed outcome.

use super::hold::Held;
use super::task::{Answer, Progress, TaskIn, TaskRun};
use super::{upstream_failed, Proxy, MAX_TRIES};
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    Body, Envelope, LdpError, LineageEntry, PayloadMode, Provenance, VerificationStatus,
};
use crate::policy::Policy;
use crate::session::{Binding, ClientSession};
use crate::translate::{is_mode_failure, translate_input};
use crate::upstream::UpstreamError;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How one delegate's handling of the task ended.
pub(super) enum Attempt {
    /// A final answer for the client.
    Done(Answer),
    /// The delegate failed; `retryable` says whether another may be tried.
    Failed {
        error: LdpError,
        reason: &'static str,
        retryable: bool,
    },
}

impl Proxy {
    /// One delegate's handling of the task: payload-mode fallback along the chain and one
    /// silent re-handshake stay on this delegate; anything else ends the attempt.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt(
        &self,
        session: &ClientSession,
        policy: &Policy,
        env: &Envelope,
        task: &TaskIn<'_>,
        run: &mut TaskRun,
        binding: Binding,
        deadline: Instant,
        progress: Progress<'_>,
    ) -> Attempt {
        let delegate = binding.delegate.clone();
        let _in_flight = delegate.start_task();
        let reservation = match self
            .reserve(session, &run.tenant, &delegate, task.skill)
            .await
        {
            Ok(r) => r,
            Err(e) => return Attempt::Done(Answer::Failed(e)),
        };
        let mut charged = 0.0;
        let outcome = self
            .attempt_inner(
                session,
                policy,
                env,
                task,
                run,
                binding,
                deadline,
                progress,
                &mut charged,
            )
            .await;
        match reservation {
            Some(Held::Local(r)) => self.budgets.settle(r, &session.spend, charged),
            Some(Held::Shared(r)) => self.settle_shared(r, charged).await,
            None => {}
        }
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

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt_inner(
        &self,
        session: &ClientSession,
        policy: &Policy,
        env: &Envelope,
        task: &TaskIn<'_>,
        run: &mut TaskRun,
        mut binding: Binding,
        deadline: Instant,
        progress: Progress<'_>,
        charged: &mut f64,
    ) -> Attempt {
        let skill = task.skill;
        let delegate = binding.delegate.clone();
        let mut mode = binding.upstream.payload.mode;
        let mut rehandshaken = false;
        let streams = progress.is_some()
            && delegate
                .card()
                .and_then(|c| {
                    c.capability(skill)
                        .and_then(|cap| cap.hints.supports_streaming)
                })
                .unwrap_or(false);
        if let Some(tx) = progress {
            let routed = env.reply(
                self.id(),
                Body::TaskUpdate {
                    task_id: task.task_id.to_owned(),
                    progress: Some(0.0),
                    message: Some(format!("routed to {}", delegate.name)),
                },
                PayloadMode::Text,
            );
            let _ = tx.try_send(routed);
        }
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
                return Attempt::Failed {
                    error: upstream_failed(&delegate, &e),
                    reason: "timeout",
                    retryable: false,
                };
            }
            if run.attempts > MAX_TRIES {
                let e =
                    LdpError::gateway(GatewayCode::UpstreamFailed, "too many upstream attempts");
                return Attempt::Done(Answer::Failed(e));
            }
            let input = match translate_input(task.input, env.payload_mode, mode) {
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
                    task_id: task.task_id.to_owned(),
                    skill: skill.to_owned(),
                    input,
                    contract: task.contract.cloned(),
                },
                mode,
            );
            let limit = Self::attempt_timeout(policy, left);
            let hops = Some(run.hops.saturating_add(1));
            let sent = Instant::now();
            let answer = if streams {
                let relay = |update: Envelope| {
                    if let (Some(tx), Body::TaskUpdate { .. }) = (progress, &update.body) {
                        let mut update = update;
                        update.session_id = env.session_id.clone();
                        update.from = self.id().to_owned();
                        update.to = env.from.clone();
                        let _ = tx.try_send(update);
                    }
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
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    if e.is_delegate_fault() {
                        let timed_out = matches!(e, UpstreamError::Timeout { .. });
                        delegate.record_failure(timed_out.then_some(took));
                    }
                    return Attempt::Failed {
                        error: upstream_failed(&delegate, &e),
                        reason: e.reason(),
                        retryable: e.retryable(),
                    };
                }
            };
            match answer.body {
                Body::TaskResult {
                    output, provenance, ..
                } => {
                    delegate.record_success(took);
                    let provenance =
                        self.route_provenance(session, policy, &binding, mode, provenance, run);
                    *charged = provenance
                        .cost_usd
                        .or_else(|| self.declared_cost(&delegate, skill))
                        .unwrap_or(0.0);
                    return Attempt::Done(Answer::Result { output, provenance });
                }
                Body::TaskFailed { error, .. }
                    if error.code == "SESSION_NOT_FOUND" && !rehandshaken =>
                {
                    // The delegate's TTL ran out: one silent re-handshake with the same delegate.
                    rehandshaken = true;
                    if session
                        .unbind(skill, &binding.upstream.session_id)
                        .is_some()
                    {
                        self.unshare_binding(session, skill).await;
                    }
                    // Someone already replaced it (another task here, or a replica that won
                    // the first binding): use theirs rather than open and replace again.
                    let current = session
                        .binding(skill)
                        .filter(|b| Arc::ptr_eq(&b.delegate, &delegate));
                    binding = match current {
                        Some(b) => b,
                        None => match self.open_binding(session, skill, delegate.clone()).await {
                            Ok(b) => b,
                            Err(error) => {
                                return Attempt::Failed {
                                    reason: error.reason(),
                                    retryable: error.retryable(),
                                    error: upstream_failed(&delegate, &error),
                                }
                            }
                        },
                    };
                    mode = binding.upstream.payload.mode;
                    run.fallbacks.push("session_lost");
                    run.notes.push("upstream session expired; re-opened".into());
                }
                Body::TaskFailed { error, .. } if is_mode_failure(&error, mode) => {
                    delegate.record_success(took);
                    let Some(next) = binding.upstream.payload.next_after(mode) else {
                        return Attempt::Done(Answer::Failed(error));
                    };
                    run.fallbacks.push("payload_mode");
                    run.notes.push(format!(
                        "{mode} failed upstream ({}); fell back to {next}",
                        error.code
                    ));
                    tracing::debug!(delegate = %delegate.name, from = %mode, to = %next, "payload mode fallback");
                    mode = next;
                    // RFC §4.3: the session continues at the lower mode.
                    binding.upstream.payload.mode = next;
                    session.bind(skill, binding.clone());
                    self.share_binding(session, skill, &binding).await;
                }
                Body::TaskFailed { error, .. } if error.retryable => {
                    delegate.record_failure(Some(took));
                    return Attempt::Failed {
                        reason: "task_failed",
                        retryable: true,
                        error,
                    };
                }
                Body::TaskFailed { error, .. } => {
                    // The task's own failure, answered properly: not the delegate's health.
                    delegate.record_success(took);
                    return Attempt::Done(Answer::Failed(error));
                }
                other => {
                    delegate.record_failure(None);
                    let e = UpstreamError::Unexpected {
                        url: delegate.base_url.clone(),
                        got: other.message_type().as_str(),
                    };
                    return Attempt::Failed {
                        error: upstream_failed(&delegate, &e),
                        reason: e.reason(),
                        retryable: true,
                    };
                }
            }
        }
    }

    /// The delegate's provenance as the client sees it: the client's session id, and a first
    /// lineage entry for the gateway's routing step.
    pub(super) fn route_provenance(
        &self,
        session: &ClientSession,
        policy: &Policy,
        binding: &Binding,
        mode: PayloadMode,
        provenance: Option<Provenance>,
        run: &TaskRun,
    ) -> Provenance {
        let mut p = provenance.unwrap_or_else(|| {
            let card = binding.delegate.card();
            let (id, version) = card
                .map(|c| (c.delegate_id.clone(), c.model_version.clone()))
                .unwrap_or_else(|| (binding.upstream.delegate_id.clone(), String::new()));
            Provenance::new(id, version, mode)
        });
        p.session_id = Some(session.id.clone());
        p.lineage.insert(
            0,
            LineageEntry {
                delegate_id: self.id().to_owned(),
                model_version: self.version.clone(),
                step: "route".into(),
                timestamp: Some(crate::ldp::now_rfc3339()),
                verification_status: VerificationStatus::Unverified,
                policy: Some(policy.name.0.clone()),
                routed_to: Some(binding.delegate.name.clone()),
                attempts: Some(run.attempts),
                note: (!run.notes.is_empty()).then(|| run.notes.join("; ")),
            },
        );
        p.normalize();
        p
    }
}
