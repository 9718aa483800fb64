//! One TASK_SUBMIT through the gateway: find the session, admit the task, run it, record its
//! ledger row and metrics, then answer (a result only once its provenance is committed).

use super::bind::RouteInfo;
use super::{Proxy, Refusal, RequestCtx};
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, DelegationContract, Envelope, LdpError, PayloadMode, Provenance};
use crate::policy::Policy;
use crate::session::{Binding, ClientSession};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the task's trip produced and how.
pub(super) struct TaskRun {
    pub(super) tenant: Arc<crate::tenant::Tenant>,
    /// Gateways the task passed through before this one (`x-ldp-hops`).
    pub(super) hops: u32,
    pub(super) binding: Option<Binding>,
    pub(super) route: Option<RouteInfo>,
    /// Upstream requests sent (mode fallbacks and re-handshakes included).
    pub(super) attempts: u32,
    /// Delegates tried.
    pub(super) delegates: u32,
    /// Reason codes of extra attempts (`payload_mode`, `session_lost`, `timeout`, …).
    pub(super) fallbacks: Vec<&'static str>,
    pub(super) notes: Vec<String>,
    pub(super) mode: Option<PayloadMode>,
    pub(super) upstream: Duration,
}

impl TaskRun {
    pub(super) fn new(tenant: Arc<crate::tenant::Tenant>, hops: u32) -> TaskRun {
        TaskRun {
            tenant,
            hops,
            binding: None,
            route: None,
            attempts: 0,
            delegates: 0,
            fallbacks: Vec::new(),
            notes: Vec::new(),
            mode: None,
            upstream: Duration::ZERO,
        }
    }
}

pub(super) enum Answer {
    Result {
        output: crate::ldp::Json,
        provenance: Provenance,
    },
    Failed(LdpError),
}

/// The task as the client sent it.
pub(super) struct TaskIn<'a> {
    pub task_id: &'a str,
    pub skill: &'a str,
    pub input: &'a crate::ldp::Json,
    pub contract: Option<&'a DelegationContract>,
}

/// Where progress events go while a task runs (streaming clients only).
pub(super) type Progress<'a> = Option<&'a mpsc::Sender<Envelope>>;

impl Proxy {
    pub(super) async fn submit(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task: TaskIn<'_>,
        progress: Progress<'_>,
    ) -> Result<Envelope, Refusal> {
        let session = match self.session(&env.session_id, &super::owner(ctx, env)).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Ok(self.task_failed(env, task.task_id, self.session_not_found(env)))
            }
            Err(e) => return Ok(self.task_failed(env, task.task_id, e)),
        };
        self.admit_task_skill(ctx, task.skill).await?;
        let started = Instant::now();
        let started_at = crate::ldp::now_rfc3339();
        let tenant = &ctx.tenant;
        let chosen = self.task_policy(session.policy.as_deref(), ctx, task.skill);
        let policy = match chosen {
            Ok(p) => p,
            Err((p, error)) => {
                return Ok(self
                    .refuse(
                        env,
                        &session,
                        &p,
                        &task,
                        error,
                        started,
                        started_at,
                        tenant.clone(),
                    )
                    .await)
            }
        };
        self.check_policy_limit(&policy).await?;
        self.budget.task();
        session.task_started(task.task_id, task.skill);
        let mut run = TaskRun::new(ctx.tenant.clone(), ctx.hops);
        let answer = self
            .run_task(&session, &policy, env, &task, &mut run, progress)
            .await;
        session.task_finished(task.task_id);
        let row = self.ledger_row(&session, &policy, &task, &run, &answer, started, started_at);
        self.count(&row, started.elapsed(), run.upstream);
        let recorded = self.ledger.record(row).await;
        Ok(match (answer, recorded) {
            (Answer::Result { output, provenance }, Ok(())) => env.reply(
                self.id(),
                Body::TaskResult {
                    task_id: task.task_id.to_owned(),
                    output,
                    provenance: Some(provenance),
                },
                env.payload_mode,
            ),
            (Answer::Result { .. }, Err(e)) => {
                // A result is only acknowledged once its provenance is committed.
                if once_a_second() {
                    tracing::error!(error = %e, task_id = task.task_id, "provenance not recorded; result withheld");
                }
                let error = LdpError::gateway(
                    GatewayCode::Internal,
                    "the provenance ledger is unavailable",
                );
                self.task_failed(env, task.task_id, error)
            }
            (Answer::Failed(error), recorded) => {
                if let Err(e) = recorded {
                    if once_a_second() {
                        tracing::error!(error = %e, task_id = task.task_id, "provenance of a failure not recorded");
                    }
                }
                self.task_failed(env, task.task_id, error)
            }
        })
    }

    /// Answers a task refused before routing, after recording its ledger row (every task
    /// outcome has one).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn refuse(
        &self,
        env: &Envelope,
        session: &ClientSession,
        policy: &Policy,
        task: &TaskIn<'_>,
        error: LdpError,
        started: Instant,
        started_at: String,
        tenant: Arc<crate::tenant::Tenant>,
    ) -> Envelope {
        let run = TaskRun::new(tenant, 0);
        let answer = Answer::Failed(error.clone());
        let row = self.ledger_row(session, policy, task, &run, &answer, started, started_at);
        self.count(&row, started.elapsed(), Duration::ZERO);
        if let Err(e) = self.ledger.record(row).await {
            if once_a_second() {
                tracing::error!(error = %e, task_id = task.task_id, "provenance of a refusal not recorded");
            }
        }
        self.task_failed(env, task.task_id, error)
    }
}

/// Whether a per-task ledger failure should be logged now: at most one line a second, since
/// a failing store (a full disk) fails every task and the writer has logged the cause.
fn once_a_second() -> bool {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp();
    LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}
