//! The task pipeline: one task, whoever sent it (an LDP client's TASK_SUBMIT, or a front
//! end's request), through its stages in order, each a type in a file of its own with its
//! inputs and outputs in its signature:
//!
//! 1. [`Admission`] (`admission.rs`): the task's session, the tenant's limits, the policy it
//!    runs under; refused, it is recorded all the same.
//! 2. [`Routing`] (`routing.rs`): a delegate for the task's skill, the session's binding
//!    reused while it fits (affinity), else the router's pick and a new upstream session.
//! 3. [`Attempts`] (`attempts.rs`): each delegate's handling of the task through its kind's
//!    room (`crate::upstream`), its budget held meanwhile, failing over to the router's next
//!    pick within the policy's bounds.
//! 4. [`Verification`] (`verification.rs`): entered only under a policy's `[verify]`: the
//!    result judged by independent verifiers, voted-down results run again elsewhere.
//! 5. [`Record`] (`record.rs`): the ledger row and metrics, then the answer (a result only
//!    once its provenance is committed), kept for status queries.
//!
//! What a task carries through them is `task.rs`'s; its spans are `trace.rs`'s. Each stage is
//! a view of the gateway's core ([`Proxy`]), which owns every part and wires them.

mod admission;
mod attempts;
mod record;
mod routing;
mod task;
mod trace;
mod verification;

pub(crate) use admission::Admission;
pub(crate) use attempts::Attempts;
pub(crate) use record::Record;
pub(crate) use routing::Routing;
pub(crate) use task::{Answer, Progress, TaskCtx, TaskIn, TaskRun};
pub use task::{ChatDelta, Trip};
pub(crate) use verification::{read_verdict, verification_input, Verification};

use super::{Refusal, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Envelope, LdpError};
use crate::provenance::Ingress;
use tokio::time::Instant;
use tracing::Instrument as _;

/// A stage: one step of the pipeline, a view of the core that owns every part.
macro_rules! stage {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub(crate) struct $name<'a>(pub(crate) &'a $crate::proxy::Proxy);

        impl std::ops::Deref for $name<'_> {
            type Target = $crate::proxy::Proxy;
            fn deref(&self) -> &$crate::proxy::Proxy {
                self.0
            }
        }
    };
}
pub(crate) use stage;

stage!(
    /// The pipeline's runner: one task through the stages.
    Pipeline
);

impl Pipeline<'_> {
    /// Runs one task, inside a `task` span carrying the session, task, policy and delegate,
    /// so every log line of the task can be followed.
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
            Ingress::Openai
            | Ingress::Anthropic
            | Ingress::Llmcp
            | Ingress::Llmx
            | Ingress::Ladp
            | Ingress::A2a => None,
        };
        let registered = self
            .running
            .register(owner.clone(), session_key, task.task_id.clone());
        // 1. Admission.
        let admitted = match Admission(self.0).admit(env, ctx, task, owner).await? {
            admission::Admitted::Run(a) => a,
            admission::Admitted::Lost(trip) => return Ok(*trip),
        };
        tracing::Span::current().record("policy", admitted.policy.name.0.as_str());
        let t = TaskCtx {
            env,
            task,
            session: &admitted.session,
            binds: task.lender.unwrap_or(&admitted.session),
            tenant: &ctx.tenant,
            policy: admitted.policy,
            hops: ctx.hops,
            progress,
            started,
            started_at,
            running: registered.task(),
            trace: ctx.trace.clone(),
        };
        if let Some(error) = admitted.refused {
            // Refused before routing: the row is recorded all the same (every task has one).
            let run = TaskRun::default();
            let policy = t.policy.clone();
            let reply = Record(self.0).finish(t, &run, Answer::Failed(error)).await;
            return Ok(run.trip(reply, policy));
        }
        Admission(self.0).start(&t).await?;
        // 2–4. Routing, attempts with failover, verification.
        let mut run = TaskRun::default();
        let answer = self.run_unwinding(&t, &mut run).await;
        registered.task().finish();
        // 5. Record.
        let policy = t.policy.clone();
        let reply = Record(self.0).finish(t, &run, answer).await;
        Ok(run.trip(reply, policy))
    }

    /// Routes and runs the task, through verification under a policy with `[verify]` (not a
    /// verification's own task), within one deadline; a panic on the way (a bug) is caught
    /// here, so the task still gets its ledger row, its status and an answer in the protocol:
    /// `INTERNAL`, with no panic text. Its budget hold was released on the way out.
    async fn run_unwinding(&self, t: &TaskCtx<'_>, run: &mut TaskRun) -> Answer {
        use futures_util::FutureExt as _;
        let running = async {
            let attempts = Attempts(self.0);
            let deadline = Instant::now() + attempts.task_timeout(&t.need());
            match t.policy.verify.as_ref() {
                Some(verify) if !t.task.verifying => {
                    Verification(self.0).run(t, run, verify, deadline).await
                }
                _ => attempts.run(t, run, &[], deadline).await,
            }
        };
        match std::panic::AssertUnwindSafe(running).catch_unwind().await {
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
}
