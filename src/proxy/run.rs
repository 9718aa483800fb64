//! The task run: which delegates to try, in what order, and when to stop (failover within the
//! policy's `max_attempts`, the retry budget and the task's deadline).

use super::attempt::Attempt;
use super::bind::Choose;
use super::task::{Answer, Progress, TaskIn, TaskRun};
use super::{upstream_failed, Proxy};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode};
use crate::policy::Policy;
use crate::routing::{self, Need};
use crate::session::ClientSession;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Proxy {
    /// The task's deadline, across every attempt: the tighter of the global ceiling and the
    /// contract's deadline. (The policy's `max_latency_ms` bounds each attempt instead, so a
    /// hanging delegate is failed over while time is left: see [`Proxy::attempt_timeout`].)
    pub(super) fn task_timeout(&self, need: &Need<'_>) -> Duration {
        let mut t = self.cfg.upstream.task_timeout;
        if let Some(ms) = need.contract_ms_left {
            t = t.min(Duration::from_millis(ms));
        }
        t
    }

    /// Tries delegates until one answers, failing over on retryable failures within the
    /// policy's `max_attempts`, the retry budget and the task's deadline.
    pub(super) async fn run_task(
        &self,
        session: &ClientSession,
        policy: &Arc<Policy>,
        env: &Envelope,
        task: &TaskIn<'_>,
        run: &mut TaskRun,
        progress: Progress<'_>,
    ) -> Answer {
        let contract = task.contract;
        let mut tried: Vec<String> = Vec::new();
        let base = Need {
            skill: task.skill,
            exclude: &[],
            client_domain: &session.client_domain,
            required_domain: session.required_domain.as_deref(),
            contract_max_cost_usd: contract
                .and_then(|c| c.policy.budget.as_ref())
                .and_then(|b| b.max_cost_usd),
            contract_ms_left: contract
                .and_then(|c| c.deadline_at())
                .map(|d| (d - chrono::Utc::now()).num_milliseconds().max(0) as u64),
        };
        let deadline = Instant::now() + self.task_timeout(&base);
        let previous = session.binding(task.skill).map(|b| b.delegate.name.clone());
        let mut last: Option<LdpError> = None;
        loop {
            let need = Need {
                exclude: &tried,
                ..base
            };
            let chosen = if tried.is_empty() {
                self.binding_for(session, policy, &need, run).await
            } else {
                self.rebind(session, policy, &need, run).await
            };
            let failure = match chosen {
                Ok(binding) => {
                    run.delegates += 1;
                    let delegate = binding.delegate.clone();
                    match self
                        .attempt(session, policy, env, task, run, binding, deadline, progress)
                        .await
                    {
                        Attempt::Done(Answer::Result {
                            output,
                            mut provenance,
                        }) => {
                            if let Some(prev) = previous.as_ref().filter(|p| **p != delegate.name) {
                                let note =
                                    format!("context moved from {prev} to {}", delegate.name);
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
                        Attempt::Failed {
                            error,
                            reason,
                            retryable,
                        } => {
                            if session.unbind_delegate(task.skill, &delegate).is_some() {
                                self.unshare_binding(session, task.skill).await;
                            }
                            (delegate, error, reason, retryable)
                        }
                    }
                }
                Err(Choose::None(e)) => return Answer::Failed(last.unwrap_or(e)),
                Err(Choose::Open { delegate, error }) => {
                    run.delegates += 1;
                    if error.is_delegate_fault() {
                        delegate.record_failure(None);
                    }
                    let reason = error.reason();
                    let retryable = error.retryable();
                    (
                        delegate.clone(),
                        upstream_failed(&delegate, &error),
                        reason,
                        retryable,
                    )
                }
            };
            let (delegate, error, reason, retryable) = failure;
            tried.push(delegate.name.clone());
            if !retryable {
                return Answer::Failed(error);
            }
            let out_of_time = Instant::now() >= deadline;
            let exhausted = run.delegates >= policy.max_attempts;
            // Only a failover that can happen counts (and spends retry budget).
            let another = !out_of_time && !exhausted && {
                let need = Need {
                    exclude: &tried,
                    ..base
                };
                let index = self.registry.index();
                let (offers, statics) =
                    index.offers_with_statics(task.skill, policy, &self.cfg.routing);
                let mut rng = fastrand::Rng::new();
                routing::decide_with(offers, &statics, policy, &need, &self.cfg.routing, &mut rng)
                    .is_ok()
            };
            if !another || !self.budget.try_retry() {
                let why = if out_of_time {
                    "the task's deadline passed"
                } else if exhausted {
                    "the policy's max_attempts is reached"
                } else if !another {
                    "no other eligible delegate"
                } else {
                    "the retry budget is spent"
                };
                let mut e = LdpError::gateway(
                    GatewayCode::UpstreamFailed,
                    format!("every attempt failed ({why}); last: {}", error.message),
                );
                e.retryable = true;
                return Answer::Failed(e);
            }
            run.fallbacks.push(reason);
            run.notes
                .push(format!("failover from {} ({reason})", delegate.name));
            tracing::info!(delegate = %delegate.name, reason, task_id = task.task_id, "failing over");
            if let Some(tx) = progress {
                let update = env.reply(
                    self.id(),
                    Body::TaskUpdate {
                        task_id: task.task_id.to_owned(),
                        progress: None,
                        message: Some(format!(
                            "delegate {} failed ({reason}); retrying on another delegate",
                            delegate.name
                        )),
                    },
                    PayloadMode::Text,
                );
                let _ = tx.try_send(update);
            }
            last = Some(error);
        }
    }
}
