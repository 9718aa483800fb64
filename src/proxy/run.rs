//! The task run: which delegates to try, in what order, and when to stop (failover within the
//! policy's `max_attempts`, the retry budget and the task's deadline). The router is asked
//! once per failover: its choice is what the next attempt uses.

use super::attempt::{Attempt, Failure, Health};
use super::bind::{Chosen, NoBinding};
use super::task::{Answer, TaskCtx, TaskRun};
use super::Proxy;
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::routing::Need;
use crate::state::SessionStore;
use std::time::Duration;
use tokio::time::Instant;

impl Proxy {
    /// The task's deadline, across every attempt: the tighter of the global ceiling and the
    /// contract's deadline. (The policy's `max_latency_ms` bounds each attempt instead, so a
    /// hanging delegate is failed over while time is left.)
    pub(super) fn task_timeout(&self, need: &Need<'_>) -> Duration {
        let mut t = self.cfg.upstream.task_timeout;
        if let Some(ms) = need.contract_ms_left {
            t = t.min(Duration::from_millis(ms));
        }
        t
    }

    /// Tries delegates (never those in `exclude`) until one answers, failing over on
    /// retryable failures within the policy's `max_attempts`, the retry budget and
    /// `deadline`.
    pub(super) async fn run_task(
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
        let mut chosen = self.binding_for(t, &base, run).await;
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
                            if t.session.unbind_delegate(&key, &delegate).is_some() {
                                self.sessions.unshare_binding(t.session, &key).await;
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
            chosen = self.rebind(t, &need, run, next).await;
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
            match self.decide(&t.policy, need) {
                Err(_) => "no other eligible delegate",
                Ok(next) if self.retries.try_retry() => return Ok(next),
                Ok(_) => "the retry budget is spent",
            }
        };
        Err(stop(why))
    }
}
