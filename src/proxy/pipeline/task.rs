//! What a task carries through the pipeline: the task as its client sent it ([`TaskIn`]), the
//! context it runs in ([`TaskCtx`]), what its run produced ([`TaskRun`]), its answer, and the
//! trip a front end gets back ([`Trip`]).

use crate::chat::{Answer as ChatAnswer, Chat, Delta, Refusal as UpstreamRefusal, Usage};
use crate::ldp::{Body, DelegationContract, Envelope, LdpError, PayloadMode, Provenance, TaskId};
use crate::policy::Policy;
use crate::provenance::Ingress;
use crate::routing::Need;
use crate::session::{Binding, ClientSession, RunningTask};
use crate::tenant::Tenant;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One task as it runs: what the client sent and the context it runs in. Built once by
/// [`Proxy::submit`] and lent to every room (run, attempt, bind, hold, record), so none needs
/// a long argument list.
pub(crate) struct TaskCtx<'a> {
    /// The client's envelope (its session id, sender and payload mode).
    pub(crate) env: &'a Envelope,
    /// The task as the client sent it.
    pub(crate) task: TaskIn<'a>,
    /// The client session it runs in (its id in the provenance, its conversation).
    pub(crate) session: &'a ClientSession,
    /// The session whose upstream bindings serve it: `session`, or for an A2A context's
    /// first task its front end's session for the tenant ([`TaskIn::lender`]), so that a
    /// context that never continues opens and closes no upstream session of its own.
    pub(crate) binds: &'a ClientSession,
    /// The caller's tenant.
    pub(crate) tenant: &'a Arc<Tenant>,
    /// The policy it runs under (held: a reload does not change a running task).
    pub(crate) policy: Arc<Policy>,
    /// Gateways the task passed through before this one (`x-ldp-hops`).
    pub(crate) hops: u32,
    /// Where progress events go (streaming clients only).
    pub(crate) progress: Progress<'a>,
    /// When it arrived, for its latency, and the same as RFC 3339 text for its row.
    pub(crate) started: Instant,
    pub(crate) started_at: String,
    /// Its cancellation and the upstream calls it has running (its verifications share it).
    pub(crate) running: &'a Arc<RunningTask>,
    /// The span its own spans go under: the request's, or a verification vote's.
    pub(crate) trace: crate::telemetry::otel::Trace,
}

impl<'a> TaskCtx<'a> {
    /// What routing needs to know of the task (no delegate excluded yet).
    pub(crate) fn need(&self) -> Need<'_> {
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
    pub(crate) fn checked(&self, rerouted: bool) -> TaskCtx<'a> {
        let mut t = self.quiet();
        t.task.checked = true;
        t.task.rerouted = rerouted;
        t
    }

    /// The same task with nothing streamed to its client while it runs (a verified task: its
    /// answer is not known until the votes are in, so no producer's text or note goes out).
    pub(crate) fn quiet(&self) -> TaskCtx<'a> {
        TaskCtx {
            env: self.env,
            task: self.task,
            session: self.session,
            binds: self.binds,
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
    pub(crate) fn cancelled(&self) -> bool {
        self.running.is_cancelled()
    }

    /// Whether the task carries its whole context (every front end's request does: the
    /// OpenAI ingress's send the conversation every time): it is routed afresh, with no
    /// affinity. An A2A task runs in its `contextId`'s own session
    /// ([`Proxy::ingress_task_in_session`]), which keeps affinity and conversation as an LDP
    /// client's does.
    pub(crate) fn stateless(&self) -> bool {
        !matches!(self.task.ingress, Ingress::Ldp | Ingress::A2a) || self.task.verifying
    }

    /// Whether its binding is its own, not the session's for the skill: a stateless task,
    /// a vote-down's re-run (affinity must not pin the producer it moved to), or a task on
    /// a lent session's bindings (its own session keeps no affinity from it).
    pub(crate) fn routed_afresh(&self) -> bool {
        self.stateless() || self.task.rerouted || self.lent()
    }

    /// Whether it runs on another session's bindings ([`TaskCtx::binds`]).
    pub(crate) fn lent(&self) -> bool {
        !std::ptr::eq(self.session, self.binds)
    }

    /// The session's key for the task's binding with `delegate`: the skill, since a session
    /// keeps one delegate per skill (affinity); for a stateless task, the skill and the
    /// delegate, so that the upstream session opened with each delegate is kept and reused
    /// while every request is routed afresh.
    pub(crate) fn binding_key<'k>(&'k self, delegate: &str) -> std::borrow::Cow<'k, str> {
        if self.routed_afresh() {
            std::borrow::Cow::Owned(format!("{}\u{1f}{delegate}", self.task.skill))
        } else {
            std::borrow::Cow::Borrowed(self.task.skill)
        }
    }

    /// Sends a TASK_UPDATE to a streaming client (dropped if it is not keeping up). The
    /// message is formatted only then: most clients do not stream.
    pub(crate) fn tell(&self, from: &str, progress: Option<f64>, message: std::fmt::Arguments<'_>) {
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
pub(crate) struct TaskRun {
    pub(crate) binding: Option<Binding>,
    pub(crate) route: Option<RouteInfo>,
    /// Upstream requests sent (mode fallbacks and re-handshakes included).
    pub(crate) attempts: u32,
    /// `attempts` when the current verification round began (the cap on upstream requests,
    /// `MAX_TRIES`, is per round).
    pub(crate) attempts_before_round: u32,
    /// Delegates tried.
    pub(crate) delegates: u32,
    /// Reason codes of extra attempts (`payload_mode`, `session_lost`, `timeout`, …).
    pub(crate) fallbacks: Vec<&'static str>,
    pub(crate) notes: Vec<String>,
    pub(crate) mode: Option<PayloadMode>,
    pub(crate) upstream: Duration,
    /// Token counts a chat delegate reported (or the gateway estimated).
    pub(crate) usage: Option<Usage>,
    /// A chat delegate's refusal of the request (a 4xx that is the request's own), for a
    /// chat front end to answer in kind.
    pub(crate) refused_upstream: Option<UpstreamRefusal>,
    /// A chat delegate's answer besides its text (why it stopped, the tools it called, its
    /// own parts), for a chat front end to answer with.
    pub(crate) chat: Option<ChatAnswer>,
    /// What an answer that never finished used (an OpenAI stream that broke, passed the
    /// answer cap, or that nobody listened to any more): charged, and recorded in the row of
    /// the failed task.
    pub(crate) unfinished: Option<Unfinished>,
    /// A verified task's votes, every round's, their reasons and their verifiers as the
    /// client is told of them ([`crate::registry::Delegate::client_name`]), index for index.
    pub(crate) votes: Vec<crate::provenance::Vote>,
    pub(crate) reasons: Vec<Option<String>>,
    pub(crate) voters: Vec<String>,
    /// Each verification round's producer (as the client is told of it) and result (when
    /// the task keeps them).
    pub(crate) rounds: Vec<(String, crate::ldp::Json)>,
    /// What the task cost besides its answer's own cost: voted-down results and the
    /// verifiers (USD; already counted under their delegates in the metrics).
    pub(crate) extra_cost_usd: f64,
    /// Each failed attempt's whole story (`delegate: detail`), for the ledger row only: the
    /// client is told the delegate's name and a generic reason.
    pub(crate) upstream_errors: Vec<String>,
    /// How long the client should wait when it is answered with a delegate's rate limit.
    pub(crate) retry_after: Option<Duration>,
    /// The running attempt's span: its trace context goes with the call to the delegate.
    pub(crate) span: crate::telemetry::otel::Trace,
}

/// Most bytes of one upstream error kept for the ledger row (a delegate's message can be as
/// long as its answer).
const MAX_ERROR_DETAIL: usize = 512;

/// Most upstream errors kept for one task's row (attempts are bounded anyway).
const MAX_ERRORS_KEPT: usize = 16;

/// At most [`MAX_ERROR_DETAIL`] bytes of an upstream error (cut at a character), and
/// whether it was cut.
pub(crate) fn cut_detail(detail: &str) -> (&str, bool) {
    let kept = crate::ldp::text::cut(detail, MAX_ERROR_DETAIL);
    (kept, kept.len() < detail.len())
}

/// What an answer that never finished used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unfinished {
    /// Tokens, as charged.
    pub(crate) tokens: u64,
    /// Their cost, USD.
    pub(crate) cost_usd: f64,
}

impl TaskRun {
    /// Keeps a failed attempt's detail for the ledger row, cut to [`MAX_ERROR_DETAIL`].
    pub(crate) fn upstream_error(&mut self, delegate: &str, detail: &str) {
        if self.upstream_errors.len() >= MAX_ERRORS_KEPT {
            return;
        }
        let (kept, cut) = cut_detail(detail);
        let more = if cut { "…" } else { "" };
        self.upstream_errors
            .push(format!("{delegate}: {kept}{more}"));
    }

    /// The trip, once the task is answered with `reply`.
    pub(crate) fn trip(self, reply: Arc<Envelope>, policy: Arc<Policy>) -> Trip {
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
            chat: self.chat,
            retry_after: self.retry_after,
        }
    }
}

/// The task's final answer for the client.
pub(crate) enum Answer {
    Result {
        output: crate::ldp::Json,
        provenance: Provenance,
    },
    Failed(LdpError),
}

/// The task as the client sent it.
#[derive(Clone, Copy)]
pub(crate) struct TaskIn<'a> {
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
    pub chat: Option<&'a Chat>,
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
    /// The session whose upstream bindings it runs on instead of its own (an A2A context's
    /// first task: its front end's session for the tenant); none: its own.
    pub lender: Option<&'a ClientSession>,
}

/// A piece of an answer as it streams, with who is answering (for the response's headers).
#[derive(Debug)]
pub struct ChatDelta {
    /// What is new.
    pub delta: Delta,
    /// The delegate answering.
    pub delegate: Arc<crate::registry::Delegate>,
    /// The policy the task runs under.
    pub policy: Arc<Policy>,
}

/// The routing decision behind a new binding (absent when the session's binding was reused).
#[derive(Debug, Clone)]
pub(crate) struct RouteInfo {
    pub(crate) score: f64,
    pub(crate) eligible: usize,
    pub(crate) band: usize,
    pub(crate) excluded: crate::routing::Exclusions,
    /// A trial pick (`[routing] explore`), not one on the score.
    pub(crate) trial: Option<crate::routing::Trial>,
    /// The pick's score components, and how many delegates offered the skill.
    pub(crate) components: crate::routing::Components,
    pub(crate) candidates: usize,
}

/// Where progress goes while a task runs.
#[derive(Clone, Copy)]
pub(crate) enum Progress<'a> {
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
    /// Token counts, for a chat delegate.
    pub usage: Option<Usage>,
    /// A chat delegate's refusal of the request.
    pub refused_upstream: Option<UpstreamRefusal>,
    /// A chat delegate's answer besides its text: why it stopped, the tools it called, its
    /// own parts as it gave them.
    pub chat: Option<ChatAnswer>,
    /// How long to wait, when the answer is a delegate's rate limit.
    pub retry_after: Option<Duration>,
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
    pub(crate) fn failed(task_id: TaskId, reply: Arc<Envelope>, policy: Arc<Policy>) -> Trip {
        let mut trip = TaskRun::default().trip(reply, policy);
        trip.task_id = task_id;
        trip
    }
}

/// The answer of a task that was cancelled (TASK_CANCEL, or its client left).
pub(crate) fn cancelled() -> LdpError {
    LdpError::new(
        "CANCELLED",
        crate::ldp::ErrorCategory::Runtime,
        crate::ldp::ErrorSeverity::Error,
        false,
        "the task was cancelled",
    )
}
