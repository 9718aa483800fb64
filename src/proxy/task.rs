//! One TASK_SUBMIT through the gateway: find the session, admit the task, run it, record its
//! ledger row and metrics, then answer (a result only once its provenance is committed).

use super::{Proxy, Refusal, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, DelegationContract, Envelope, LdpError, PayloadMode, Provenance, TaskId};
use crate::policy::Policy;
use crate::provenance::Ingress;
use crate::routing::Need;
use crate::session::{Binding, ClientSession, RunningTask};
use crate::state::StatusStore;
use crate::tenant::Tenant;
use openai_wire::{ChatRequest, ErrorDetail, Usage};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument as _;

/// One task as it runs: what the client sent and the context it runs in. Built once by
/// [`Proxy::submit`] and lent to every room (run, attempt, bind, hold, record), so none needs
/// a long argument list.
pub(super) struct TaskCtx<'a> {
    /// The client's envelope (its session id, sender and payload mode).
    pub(super) env: &'a Envelope,
    /// The task as the client sent it.
    pub(super) task: TaskIn<'a>,
    /// The client session it runs in.
    pub(super) session: &'a ClientSession,
    /// The caller's tenant.
    pub(super) tenant: &'a Arc<Tenant>,
    /// The policy it runs under (held: a reload does not change a running task).
    pub(super) policy: Arc<Policy>,
    /// Gateways the task passed through before this one (`x-ldp-hops`).
    pub(super) hops: u32,
    /// Where progress events go (streaming clients only).
    pub(super) progress: Progress<'a>,
    /// When it arrived, for its latency, and the same as RFC 3339 text for its row.
    pub(super) started: Instant,
    pub(super) started_at: String,
    /// Its cancellation and the upstream calls it has running (its verifications share it).
    pub(super) running: &'a Arc<RunningTask>,
    /// The span its own spans go under: the request's, or a verification vote's.
    pub(super) trace: crate::telemetry::otel::Trace,
}

impl<'a> TaskCtx<'a> {
    /// What routing needs to know of the task (no delegate excluded yet).
    pub(super) fn need(&self) -> Need<'_> {
        let contract = self.task.contract;
        let now = chrono::Utc::now();
        Need {
            skill: self.task.skill,
            exclude: &[],
            client_domain: &self.session.client_domain,
            required_domain: self.session.required_domain.as_deref(),
            contract_max_cost_usd: contract
                .and_then(|c| c.policy.budget.as_ref())
                .and_then(|b| b.max_cost_usd),
            contract_ms_left: contract
                .and_then(|c| c.deadline_at())
                .map(|d| (d - now).num_milliseconds().max(0) as u64),
            now_ms: now.timestamp_millis(),
            // The tenant's own ratings steer its own tasks (and only those).
            rater: Some(&self.tenant.name),
            probation: self.task.checked,
            min_reliability: None,
        }
    }

    /// The same task, quiet ([`TaskCtx::quiet`]), run verified: a producer on probation may
    /// serve it; `rerouted`: a vote-down's re-run, bound for this task only (the session's
    /// next task is decided afresh).
    pub(super) fn checked(&self, rerouted: bool) -> TaskCtx<'a> {
        let mut t = self.quiet();
        t.task.checked = true;
        t.task.rerouted = rerouted;
        t
    }

    /// The same task with nothing streamed to its client while it runs (a verified task: its
    /// answer is not known until the votes are in, so no producer's text or note goes out).
    pub(super) fn quiet(&self) -> TaskCtx<'a> {
        TaskCtx {
            env: self.env,
            task: self.task,
            session: self.session,
            tenant: self.tenant,
            policy: self.policy.clone(),
            hops: self.hops,
            progress: Progress::Quiet,
            started: self.started,
            started_at: self.started_at.clone(),
            running: self.running,
            trace: self.trace.clone(),
        }
    }

    /// Whether the task was cancelled (TASK_CANCEL, or its client left): nothing more is
    /// started for it.
    pub(super) fn cancelled(&self) -> bool {
        self.running.is_cancelled()
    }

    /// Whether the task carries its whole context (every front end's request does: the
    /// OpenAI ingress's send the conversation every time): it is routed afresh, with no
    /// affinity. An A2A task runs in its `contextId`'s own session
    /// ([`Proxy::ingress_task_in_session`]), which keeps affinity and conversation as an LDP
    /// client's does.
    pub(super) fn stateless(&self) -> bool {
        !matches!(self.task.ingress, Ingress::Ldp | Ingress::A2a) || self.task.verifying
    }

    /// Whether its binding is its own, not the session's for the skill: a stateless task,
    /// or a vote-down's re-run (affinity must not pin the producer it moved to).
    pub(super) fn routed_afresh(&self) -> bool {
        self.stateless() || self.task.rerouted
    }

    /// The session's key for the task's binding with `delegate`: the skill, since a session
    /// keeps one delegate per skill (affinity); for a stateless task, the skill and the
    /// delegate, so that the upstream session opened with each delegate is kept and reused
    /// while every request is routed afresh.
    pub(super) fn binding_key<'k>(&'k self, delegate: &str) -> std::borrow::Cow<'k, str> {
        if self.routed_afresh() {
            std::borrow::Cow::Owned(format!("{}\u{1f}{delegate}", self.task.skill))
        } else {
            std::borrow::Cow::Borrowed(self.task.skill)
        }
    }

    /// Sends a TASK_UPDATE to a streaming client (dropped if it is not keeping up). The
    /// message is formatted only then: most clients do not stream.
    pub(super) fn tell(&self, from: &str, progress: Option<f64>, message: std::fmt::Arguments<'_>) {
        if let Progress::Updates(tx) = self.progress {
            let message = message.to_string();
            let update = self.env.reply(
                from,
                Body::TaskUpdate {
                    task_id: self.task.task_id.clone(),
                    progress,
                    message: Some(message),
                },
                PayloadMode::Text,
            );
            let _ = tx.try_send(update);
        }
    }
}

/// What the task's trip produced and how: filled in by the run, read by the ledger row.
#[derive(Default)]
pub(super) struct TaskRun {
    pub(super) binding: Option<Binding>,
    pub(super) route: Option<RouteInfo>,
    /// Upstream requests sent (mode fallbacks and re-handshakes included).
    pub(super) attempts: u32,
    /// `attempts` when the current verification round began (the cap on upstream requests,
    /// `MAX_TRIES`, is per round).
    pub(super) attempts_before_round: u32,
    /// Delegates tried.
    pub(super) delegates: u32,
    /// Reason codes of extra attempts (`payload_mode`, `session_lost`, `timeout`, …).
    pub(super) fallbacks: Vec<&'static str>,
    pub(super) notes: Vec<String>,
    pub(super) mode: Option<PayloadMode>,
    pub(super) upstream: Duration,
    /// Token counts an OpenAI-backed delegate reported (or the gateway estimated).
    pub(super) usage: Option<Usage>,
    /// An OpenAI-backed delegate's refusal of the request (a 4xx that is the request's own),
    /// for the ingress to answer in kind.
    pub(super) refused_upstream: Option<(u16, ErrorDetail)>,
    /// Why an OpenAI-backed delegate's answer stopped (`stop`, `length`, …).
    pub(super) finish_reason: Option<String>,
    /// An OpenAI-backed delegate's message fields besides its text (`tool_calls`,
    /// `function_call`, `refusal`, …), for the ingress to answer with.
    pub(super) reply_fields: Option<serde_json::Map<String, serde_json::Value>>,
    /// What an answer that never finished used (an OpenAI stream that broke, passed the
    /// answer cap, or that nobody listened to any more): charged, and recorded in the row of
    /// the failed task.
    pub(super) unfinished: Option<Unfinished>,
    /// A verified task's votes, every round's, their reasons and their verifiers as the
    /// client is told of them ([`crate::registry::Delegate::client_name`]), index for index.
    pub(super) votes: Vec<crate::provenance::Vote>,
    pub(super) reasons: Vec<Option<String>>,
    pub(super) voters: Vec<String>,
    /// Each verification round's producer (as the client is told of it) and result (when
    /// the task keeps them).
    pub(super) rounds: Vec<(String, crate::ldp::Json)>,
    /// What the task cost besides its answer's own cost: voted-down results and the
    /// verifiers (USD; already counted under their delegates in the metrics).
    pub(super) extra_cost_usd: f64,
    /// Each failed attempt's whole story (`delegate: detail`), for the ledger row only: the
    /// client is told the delegate's name and a generic reason.
    pub(super) upstream_errors: Vec<String>,
    /// How long the client should wait when it is answered with a delegate's rate limit.
    pub(super) retry_after: Option<Duration>,
    /// The running attempt's span: its trace context goes with the call to the delegate.
    pub(super) span: crate::telemetry::otel::Trace,
}

/// Most bytes of one upstream error kept for the ledger row (a delegate's message can be as
/// long as its answer).
const MAX_ERROR_DETAIL: usize = 512;

/// Most upstream errors kept for one task's row (attempts are bounded anyway).
const MAX_ERRORS_KEPT: usize = 16;

/// At most [`MAX_ERROR_DETAIL`] bytes of an upstream error (cut at a character), and
/// whether it was cut.
pub(super) fn cut_detail(detail: &str) -> (&str, bool) {
    let kept = crate::ldp::text::cut(detail, MAX_ERROR_DETAIL);
    (kept, kept.len() < detail.len())
}

/// What an answer that never finished used.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unfinished {
    /// Tokens, as charged.
    pub(super) tokens: u64,
    /// Their cost, USD.
    pub(super) cost_usd: f64,
}

impl TaskRun {
    /// Keeps a failed attempt's detail for the ledger row, cut to [`MAX_ERROR_DETAIL`].
    pub(super) fn upstream_error(&mut self, delegate: &str, detail: &str) {
        if self.upstream_errors.len() >= MAX_ERRORS_KEPT {
            return;
        }
        let (kept, cut) = cut_detail(detail);
        let more = if cut { "…" } else { "" };
        self.upstream_errors
            .push(format!("{delegate}: {kept}{more}"));
    }

    /// The trip, once the task is answered with `reply`.
    fn trip(self, reply: Arc<Envelope>, policy: Arc<Policy>) -> Trip {
        let task_id = match &reply.body {
            Body::TaskResult { task_id, .. } | Body::TaskFailed { task_id, .. } => task_id.clone(),
            _ => TaskId::default(),
        };
        Trip {
            task_id,
            votes: self.votes,
            reasons: self.reasons,
            voters: self.voters,
            rounds: self.rounds,
            reply,
            policy,
            delegate: self.binding.map(|b| b.delegate),
            usage: self.usage,
            refused_upstream: self.refused_upstream,
            finish_reason: self.finish_reason,
            retry_after: self.retry_after,
            reply_fields: self.reply_fields,
        }
    }
}

/// The task's final answer for the client.
pub(super) enum Answer {
    Result {
        output: crate::ldp::Json,
        provenance: Provenance,
    },
    Failed(LdpError),
}

/// The task as the client sent it.
#[derive(Clone, Copy)]
pub(super) struct TaskIn<'a> {
    pub task_id: &'a TaskId,
    /// The front end it came in through (its ledger row and metrics say so).
    pub ingress: Ingress,
    /// The caller opens a fresh session and submits again if this one is gone: a lost
    /// session is then answered without a row (the client never sees that answer).
    pub retried_if_session_lost: bool,
    pub skill: &'a str,
    pub input: &'a crate::ldp::Json,
    pub contract: Option<&'a DelegationContract>,
    /// The OpenAI ingress's request, whose messages an OpenAI-backed delegate is sent as
    /// they came (its input is their text, for an LDP delegate).
    pub chat: Option<&'a ChatRequest>,
    /// A verification task the gateway sends (`[verify]`): routed afresh each time, and its
    /// input (JSON the verifier reads) sent as it is in any payload mode.
    pub verifying: bool,
    /// The weighted yes a verified result needs (else the policy's `[verify] threshold`).
    pub quorum: Option<f64>,
    /// Keep each verification round's producer and result for the trip.
    pub keep_rounds: bool,
    /// What the ledger's input preview shows in place of `input` (a front end whose input
    /// carries text the ledger must not keep: LLMCP's context documents).
    pub ledger_input: Option<&'a crate::ldp::Json>,
    /// Run verified (`[verify]`): routing may pick a producer on probation.
    pub checked: bool,
    /// A vote-down's re-run: bound for this task only.
    pub rerouted: bool,
}

/// A piece of an answer as it streams, with who is answering (for the response's headers).
#[derive(Debug)]
pub struct ChatDelta {
    /// The text added (may be empty).
    pub text: String,
    /// The delta's other fields (a piece of `tool_calls` or `function_call`, …) as the
    /// delegate sent them.
    pub other: Option<serde_json::Map<String, serde_json::Value>>,
    /// The delegate answering.
    pub delegate: Arc<crate::registry::Delegate>,
    /// The policy the task runs under.
    pub policy: Arc<Policy>,
}

/// The routing decision behind a new binding (absent when the session's binding was reused).
#[derive(Debug, Clone)]
pub(super) struct RouteInfo {
    pub(super) score: f64,
    pub(super) eligible: usize,
    pub(super) band: usize,
    pub(super) excluded: crate::routing::Exclusions,
    /// A trial pick (`[routing] explore`), not one on the score.
    pub(super) trial: Option<crate::routing::Trial>,
    /// The pick's score components, and how many delegates offered the skill.
    pub(super) components: crate::routing::Components,
    pub(super) candidates: usize,
}

/// Where progress goes while a task runs.
#[derive(Clone, Copy)]
pub(super) enum Progress<'a> {
    /// Nobody is listening (a plain request).
    Quiet,
    /// An LDP stream: TASK_UPDATE envelopes (the gateway's notes, the delegate's updates,
    /// an OpenAI-backed delegate's deltas).
    Updates(&'a mpsc::Sender<Envelope>),
    /// An OpenAI stream: the answer's text as it comes, nothing else.
    Deltas(&'a mpsc::Sender<ChatDelta>),
}

/// What a task's trip left besides its answer, for the front ends.
pub struct Trip {
    /// The task's id.
    pub task_id: TaskId,
    /// The answer: a TASK_RESULT or a TASK_FAILED.
    pub reply: Arc<Envelope>,
    /// The policy it ran under.
    pub policy: Arc<Policy>,
    /// The delegate that answered (or last failed).
    pub delegate: Option<Arc<crate::registry::Delegate>>,
    /// Token counts, for an OpenAI-backed delegate.
    pub usage: Option<Usage>,
    /// An OpenAI-backed delegate's refusal of the request.
    pub refused_upstream: Option<(u16, ErrorDetail)>,
    /// Why an OpenAI-backed delegate's answer stopped.
    pub finish_reason: Option<String>,
    /// How long to wait, when the answer is a delegate's rate limit.
    pub retry_after: Option<Duration>,
    /// An OpenAI-backed delegate's message fields besides its text (`tool_calls`, …).
    pub reply_fields: Option<serde_json::Map<String, serde_json::Value>>,
    /// A verified task's votes, every round's, each vote's reason (as the verifier gave it,
    /// cut to 512 bytes) and its verifier as the client is told of it, index for index.
    pub votes: Vec<crate::provenance::Vote>,
    pub reasons: Vec<Option<String>>,
    pub voters: Vec<String>,
    /// Each verification round's producer (as the client is told of it) and result, when the
    /// task asked to keep them.
    pub rounds: Vec<(String, crate::ldp::Json)>,
}

impl Trip {
    /// A task failed before it had a session to run in.
    pub(super) fn failed(task_id: TaskId, reply: Arc<Envelope>, policy: Arc<Policy>) -> Trip {
        let mut trip = TaskRun::default().trip(reply, policy);
        trip.task_id = task_id;
        trip
    }
}

impl Proxy {
    /// Answers one TASK_SUBMIT, inside a `task` span carrying the session, task, policy and
    /// delegate, so every log line of the task can be followed.
    pub(super) async fn submit(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task: TaskIn<'_>,
        progress: Progress<'_>,
    ) -> Result<Trip, Refusal> {
        let span = tracing::info_span!(
            "task",
            session_id = %env.session_id,
            task_id = %task.task_id,
            policy = tracing::field::Empty,
            delegate = tracing::field::Empty,
        );
        self.submit_in_span(env, ctx, task, progress)
            .instrument(span)
            .await
    }

    async fn submit_in_span(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task: TaskIn<'_>,
        progress: Progress<'_>,
    ) -> Result<Trip, Refusal> {
        let started = Instant::now();
        let started_at = crate::ldp::now_rfc3339();
        let owner = super::owner(ctx, env);
        // Before anything awaits: the task's place among the running ones, for a cancel to
        // find (joined: its route registered it when the request arrived). A front end's
        // task is known by its owner and id alone (its session is the front end's).
        let session_key = match task.ingress {
            Ingress::Ldp => Some(env.session_id.clone()),
            Ingress::Openai | Ingress::Llmcp | Ingress::Llmx | Ingress::Ladp | Ingress::A2a => None,
        };
        let registered = self
            .running
            .register(owner.clone(), session_key, task.task_id.clone());
        let (session, unchecked) = match self.session(&env.session_id, &owner).await {
            Ok(Some(s)) => (s, None),
            Ok(None) if task.retried_if_session_lost => {
                let reply = self.task_failed(env, task.task_id, self.session_not_found(env));
                let policy = self.policies.load().default_policy().clone();
                return Ok(TaskRun::default().trip(Arc::new(reply), policy));
            }
            found => {
                let error = found.err().unwrap_or_else(|| self.session_not_found(env));
                let tenant = ctx.tenant.name.clone();
                let stand_in = ClientSession::stand_in(&env.session_id, owner, tenant);
                (Arc::new(stand_in), Some(error))
            }
        };
        if unchecked.is_none() {
            self.admit_task_skill(ctx, task.skill).await?;
        }
        let (policy, refused) = match unchecked {
            // No session to run in: failed, and recorded like any other task.
            Some(error) => (self.policies.load().default_policy().clone(), Some(error)),
            None => match self.task_policy(session.policy.as_deref(), ctx, task.skill) {
                Ok(p) => (p, None),
                Err((p, error)) => (p, Some(error)),
            },
        };
        tracing::Span::current().record("policy", policy.name.0.as_str());
        let t = TaskCtx {
            env,
            task,
            session: &session,
            tenant: &ctx.tenant,
            policy,
            hops: ctx.hops,
            progress,
            started,
            started_at,
            running: registered.task(),
            trace: ctx.trace.clone(),
        };
        if let Some(error) = refused {
            // Refused before routing: the row is recorded all the same (every task has one).
            let run = TaskRun::default();
            let policy = t.policy.clone();
            let reply = self.finish(t, &run, Answer::Failed(error)).await;
            return Ok(run.trip(reply, policy));
        }
        self.check_policy_limit(&t.policy).await?;
        self.statuses
            .running(
                &t.tenant.name,
                &env.from,
                t.task.task_id,
                env.session_id.clone(),
            )
            .await;
        self.retries.task();
        let mut run = TaskRun::default();
        let answer = self.run_unwinding(&t, &mut run).await;
        registered.task().finish();
        let policy = t.policy.clone();
        let reply = self.finish(t, &run, answer).await;
        Ok(run.trip(reply, policy))
    }

    /// Runs the task; a panic on the way (a bug) is caught here, so the task still gets
    /// its ledger row, its status and an answer in the protocol: `INTERNAL`, with no panic
    /// text. Its budget hold was released on the way out (`hold.rs`: `Held`).
    async fn run_unwinding(&self, t: &TaskCtx<'_>, run: &mut TaskRun) -> Answer {
        use futures_util::FutureExt as _;
        let running = std::panic::AssertUnwindSafe(self.run_checked(t, run)).catch_unwind();
        match running.await {
            Ok(answer) => answer,
            Err(payload) => {
                self.metrics.panicked("task", payload.as_ref());
                Answer::Failed(LdpError::gateway(
                    GatewayCode::Internal,
                    "internal error in the gateway while the task ran",
                ))
            }
        }
    }

    /// Records the task's ledger row and metrics, then answers (a result only once its
    /// provenance is committed), keeping the answer for status queries.
    async fn finish(&self, t: TaskCtx<'_>, run: &TaskRun, answer: Answer) -> Arc<Envelope> {
        let row = self.ledger_row(&t, run, &answer);
        self.count(&row, t.started.elapsed(), run.upstream, run.extra_cost_usd);
        let recorded = self.ledger.record(row).await;
        let reply = Arc::new(self.answer(&t, answer, recorded));
        let (tenant, from) = (&t.tenant.name, &t.env.from);
        self.statuses
            .done(tenant, from, t.task.task_id, Arc::clone(&reply))
            .await;
        reply
    }

    /// The envelope that answers the task.
    fn answer(
        &self,
        t: &TaskCtx<'_>,
        answer: Answer,
        recorded: Result<(), crate::provenance::LedgerError>,
    ) -> Envelope {
        let (env, task_id) = (t.env, t.task.task_id);
        match (answer, recorded) {
            (Answer::Result { output, provenance }, Ok(())) => env.reply(
                self.id(),
                Body::TaskResult {
                    task_id: task_id.clone(),
                    output,
                    provenance: Some(provenance),
                },
                env.payload_mode,
            ),
            (Answer::Result { .. }, Err(e)) => {
                if once_a_second() {
                    tracing::error!(error = %e, "provenance not recorded; result withheld");
                }
                let error = LdpError::gateway(GatewayCode::Internal, e.client_message());
                self.task_failed(env, task_id, error)
            }
            (Answer::Failed(error), recorded) => {
                if let Err(e) = recorded {
                    if once_a_second() {
                        tracing::error!(error = %e, "provenance of a failure not recorded");
                    }
                }
                self.task_failed(env, task_id, error)
            }
        }
    }
}

/// The answer of a task that was cancelled (TASK_CANCEL, or its client left).
pub(super) fn cancelled() -> LdpError {
    LdpError::new(
        "CANCELLED",
        crate::ldp::ErrorCategory::Runtime,
        crate::ldp::ErrorSeverity::Error,
        false,
        "the task was cancelled",
    )
}

/// Whether a per-task ledger failure should be logged now: at most one line a second, since
/// a failing store (a full disk) fails every task and the writer has logged the cause.
fn once_a_second() -> bool {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp();
    LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}
