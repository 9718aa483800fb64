//! One TASK_SUBMIT through the gateway: choose the policy, bind (or reuse) an upstream session,
//! translate, fall back along the payload chain, re-handshake once, rewrite provenance, then
//! record the outcome (ledger row and metrics) before answering.

use super::{upstream_failed, Proxy, Refusal, RequestCtx, MAX_TRIES};
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    Body, DelegationContract, Envelope, LdpError, LineageEntry, PayloadMode, Provenance,
    SessionConfig, VerificationStatus,
};
use crate::policy::Policy;
use crate::registry::Delegate;
use crate::routing::{self, Need, Offer};
use crate::session::{Binding, ClientSession};
use crate::translate::{is_mode_failure, translate_input};
use crate::upstream::UpstreamError;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The routing decision behind a new binding (absent when the session's binding was reused).
#[derive(Debug, Clone)]
pub(super) struct RouteInfo {
    pub(super) score: f64,
    pub(super) eligible: usize,
    pub(super) band: usize,
    pub(super) excluded: Vec<(routing::Constraint, usize)>,
}

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
    fn new(tenant: Arc<crate::tenant::Tenant>, hops: u32) -> TaskRun {
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

/// How one delegate's handling of the task ended.
enum Attempt {
    /// A final answer for the client.
    Done(Answer),
    /// The delegate failed; `retryable` says whether another may be tried.
    Failed {
        error: LdpError,
        reason: &'static str,
        retryable: bool,
    },
}

/// Money held against budgets while a task runs.
enum Held {
    /// In this process.
    Local(crate::limits::Reservation),
    /// In Redis (cluster mode).
    Shared(crate::cluster::SharedReservation),
}

/// Why no binding could be had.
enum Choose {
    /// Routing found no candidate (left).
    None(LdpError),
    /// The chosen delegate refused or failed the handshake.
    Open {
        delegate: Arc<Delegate>,
        error: UpstreamError,
    },
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
        if let Some(limit) = &ctx.tenant.skill_limit {
            // Skills no delegate offers share one key, so client text cannot grow the maps.
            let skill = self.skill_key(task.skill);
            // Length-prefixed: a skill (client text) cannot make two tenants share a key.
            let key = format!("{}:{}:{}", ctx.tenant.name.len(), ctx.tenant.name, skill);
            self.admit(crate::limits::Scope::TenantSkill, &key, &limit.rate, || {
                limit.check(skill)
            })
            .await?;
        }
        let started = Instant::now();
        let started_at = crate::ldp::now_rfc3339();
        // PRODUCT.md order: the session's own policy, then the request header.
        let named = session.policy.as_deref().or(ctx.policy.as_deref());
        let set = self.policies.load_full();
        let tenant = &ctx.tenant;
        let chosen = match set.select(
            named,
            tenant.default_policy.as_deref(),
            task.skill,
            &tenant.name,
        ) {
            Ok((p, _)) if tenant.may_use(&p.name.0) => Ok(p.clone()),
            Ok((p, _)) => {
                let reason = format!("policy '{}' is not allowed for this tenant", p.name);
                Err((
                    p.clone(),
                    LdpError::gateway(GatewayCode::UnknownPolicy, reason),
                ))
            }
            // No policy applies: the row names the set's default, for the record.
            Err(reason) => Err((
                set.default_policy().clone(),
                LdpError::gateway(GatewayCode::UnknownPolicy, reason),
            )),
        };
        // A task that has gone round gateways too often is refused before it takes a token.
        let max_hops = self.cfg.upstream.max_hops;
        let chosen = chosen.and_then(|p| {
            if (ctx.hops as usize) < max_hops {
                return Ok(p);
            }
            let reason = format!(
                "the task has passed through {} gateways (upstream.max_hops = {max_hops}): a routing loop?",
                ctx.hops
            );
            Err((p, LdpError::gateway(GatewayCode::LoopDetected, reason)))
        });
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
    async fn refuse(
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

    /// The task's deadline, across every attempt: the tighter of the global ceiling and the
    /// contract's deadline. (The policy's `max_latency_ms` bounds each attempt instead, so a
    /// hanging delegate is failed over while time is left: see [`Proxy::attempt_timeout`].)
    fn task_timeout(&self, need: &Need<'_>) -> Duration {
        let mut t = self.cfg.upstream.task_timeout;
        if let Some(ms) = need.contract_ms_left {
            t = t.min(Duration::from_millis(ms));
        }
        t
    }

    /// How long one delegate may take: the policy's `max_latency_ms`, within what is left of
    /// the task's deadline.
    fn attempt_timeout(policy: &Policy, left: Duration) -> Duration {
        policy
            .require
            .max_latency_ms
            .map_or(left, |ms| left.min(Duration::from_millis(ms)))
    }

    /// Tries delegates until one answers, failing over on retryable failures within the
    /// policy's `max_attempts`, the retry budget and the task's deadline.
    async fn run_task(
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

    /// One delegate's handling of the task: payload-mode fallback along the chain and one
    /// silent re-handshake stay on this delegate; anything else ends the attempt.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
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
        let reservation = match self.reserve(session, run, &delegate, task.skill).await {
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

    /// Settles a reservation held in Redis. Settling is idempotent, so a failed attempt is
    /// retried in the background (the reservation itself lapses after its hold time), as
    /// tracked work so that shutdown waits for it.
    async fn settle_shared(&self, r: crate::cluster::SharedReservation, charged: f64) {
        let Some(c) = &self.cluster else { return };
        if c.settle(&r, charged).await.is_ok() {
            return;
        }
        let c = c.clone();
        self.spawn_tracked(async move {
            for wait in [100, 1_000, 5_000, 30_000] {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                if c.settle(&r, charged).await.is_ok() {
                    return;
                }
            }
            tracing::error!(charged, "budget settle not recorded in the shared state");
        });
    }

    /// Reserves the delegate's declared cost against the tenant's and the session's budgets:
    /// in this process, or in cluster mode atomically across replicas (refused, retryable,
    /// when Redis does not answer: a budget is never guessed).
    async fn reserve(
        &self,
        session: &ClientSession,
        run: &TaskRun,
        delegate: &Delegate,
        skill: &str,
    ) -> Result<Option<Held>, LdpError> {
        let b = &run.tenant.budget;
        if b.usd_per_day.is_none() && b.usd_per_month.is_none() && b.usd_per_session.is_none() {
            return Ok(None);
        }
        let declared = self.declared_cost(delegate, skill).unwrap_or(0.0);
        let amount = declared * self.cfg.routing.budget_reserve_factor;
        let exceeded = |e: crate::limits::BudgetExceeded| {
            LdpError::gateway(GatewayCode::BudgetExceeded, e.to_string())
        };
        let Some(c) = &self.cluster else {
            return self
                .budgets
                .reserve(&run.tenant.name, b, &session.spend, amount)
                .map(|r| Some(Held::Local(r)))
                .map_err(exceeded);
        };
        let limits = crate::cluster::BudgetLimits {
            day: b.usd_per_day,
            month: b.usd_per_month,
            session: b.usd_per_session,
        };
        let unavailable = |e: String| {
            LdpError::gateway(GatewayCode::Unavailable, format!("budget not checked: {e}"))
        };
        // Longer than any task may take: a reservation stranded by a lost reply lapses.
        let hold = self.cfg.upstream.task_timeout * 2 + Duration::from_secs(60);
        for seeded in [false, true] {
            let reserved = c
                .reserve(
                    &run.tenant.name,
                    &session.id,
                    session.ttl,
                    limits,
                    amount,
                    hold,
                )
                .await
                .map_err(|e| unavailable(e.to_string()))?;
            match reserved {
                crate::cluster::Reserved::Held(r) => return Ok(Some(Held::Shared(r))),
                crate::cluster::Reserved::Exceeded(e) => return Err(exceeded(e)),
                crate::cluster::Reserved::Unseeded if !seeded => {
                    self.seed_spend(&run.tenant.name)
                        .await
                        .map_err(unavailable)?;
                }
                crate::cluster::Reserved::Unseeded => break,
            }
        }
        Err(unavailable("the tenant's spend could not be seeded".into()))
    }

    /// The card's price for `skill`: the declared price, else its cost tier's price.
    fn declared_cost(&self, delegate: &Delegate, skill: &str) -> Option<f64> {
        let h = delegate.card()?.effective_hints(skill)?;
        h.cost_per_call_usd
            .or_else(|| h.cost_tier.map(|t| self.cfg.routing.tier_prices.of(t)))
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempt_inner(
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
    fn route_provenance(
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

    /// The upstream binding for the task's skill: the existing one while its delegate stays
    /// healthy, in service and passes the policy (session affinity), else a newly picked
    /// delegate with a new upstream session.
    async fn binding_for(
        &self,
        session: &ClientSession,
        policy: &Arc<Policy>,
        need: &Need<'_>,
        run: &mut TaskRun,
    ) -> Result<Binding, Choose> {
        if let Some(b) = self.reusable(session, policy, need).await {
            return Ok(b);
        }
        let _guard = session.handshake.lock().await;
        if let Some(b) = self.reusable(session, policy, need).await {
            return Ok(b);
        }
        // The bound delegate, if any, no longer fits or is at its own rate limit: choose
        // afresh without it.
        let exclude: Vec<String> = need
            .exclude
            .iter()
            .cloned()
            .chain(session.binding(need.skill).map(|b| b.delegate.name.clone()))
            .collect();
        let need = Need {
            exclude: &exclude,
            ..*need
        };
        self.rebind_locked(session, policy, &need, run).await
    }

    /// The session's binding for the skill if its delegate still fits the policy and its own
    /// rate limit admits one more task (affinity must not let a session past that limit).
    async fn reusable(
        &self,
        session: &ClientSession,
        policy: &Policy,
        need: &Need<'_>,
    ) -> Option<Binding> {
        let b = session.binding(need.skill)?;
        (self.still_fits(&b, policy, need) && self.admits(&b.delegate).await).then_some(b)
    }

    /// Takes a token from the delegate's own rate limit, if it has one; a refusal is counted
    /// (`ldp_gateway_rate_limited_total{scope="delegate"}`) and the caller skips the delegate.
    async fn admits(&self, delegate: &Delegate) -> bool {
        match &delegate.limit {
            Some(limit) => self
                .admit(
                    crate::limits::Scope::Delegate,
                    &delegate.name,
                    &limit.rate,
                    || limit.check(),
                )
                .await
                .is_ok(),
            None => true,
        }
    }

    /// A new delegate and upstream session for the skill (failover), skipping `need.exclude`.
    async fn rebind(
        &self,
        session: &ClientSession,
        policy: &Arc<Policy>,
        need: &Need<'_>,
        run: &mut TaskRun,
    ) -> Result<Binding, Choose> {
        let _guard = session.handshake.lock().await;
        self.rebind_locked(session, policy, need, run).await
    }

    async fn rebind_locked(
        &self,
        session: &ClientSession,
        policy: &Arc<Policy>,
        need: &Need<'_>,
        run: &mut TaskRun,
    ) -> Result<Binding, Choose> {
        let (delegate, route) = self.pick(policy, need).await.map_err(Choose::None)?;
        run.route = Some(route);
        self.open_binding(session, need.skill, delegate.clone())
            .await
            .map_err(|error| Choose::Open { delegate, error })
    }

    fn still_fits(&self, b: &Binding, policy: &Policy, need: &Need<'_>) -> bool {
        let index = self.registry.index();
        index
            .offers(need.skill)
            .iter()
            .find(|o| Arc::ptr_eq(&o.delegate, &b.delegate))
            .is_some_and(|o| {
                routing::evaluate(o, policy, need, &self.cfg.routing).eligible()
                    && !o.load().ejected
            })
    }

    async fn pick(
        &self,
        policy: &Arc<Policy>,
        need: &Need<'_>,
    ) -> Result<(Arc<Delegate>, RouteInfo), LdpError> {
        let index = self.registry.index();
        let (offers, statics) = index.offers_with_statics(need.skill, policy, &self.cfg.routing);
        let mut rng = fastrand::Rng::new();
        // A delegate at its own rate limit is skipped, not failed: decide again without it.
        let mut limited: Vec<String> = Vec::new();
        loop {
            let exclude: Vec<String>;
            let need = if limited.is_empty() {
                *need
            } else {
                exclude = need.exclude.iter().chain(&limited).cloned().collect();
                Need {
                    exclude: &exclude,
                    ..*need
                }
            };
            let p =
                routing::decide_with(offers, &statics, policy, &need, &self.cfg.routing, &mut rng)
                    .map_err(|e| {
                        LdpError::gateway(GatewayCode::NoEligibleDelegate, e.to_string())
                    })?;
            let chosen = &offers[p.index];
            if !self.admits(&chosen.delegate).await {
                limited.push(chosen.delegate.name.clone());
                continue;
            }
            self.metrics
                .routing_decisions
                .with_label_values(&[policy.name.0.as_str(), chosen.name()])
                .inc();
            tracing::debug!(skill = need.skill, policy = %policy.name, delegate = chosen.name(),
                score = p.score, eligible = p.eligible, band = p.band, "routed");
            let info = RouteInfo {
                score: p.score,
                eligible: p.eligible,
                band: p.band,
                excluded: p.excluded,
            };
            return Ok((chosen.delegate.clone(), info));
        }
    }

    pub(super) async fn open_binding(
        &self,
        session: &ClientSession,
        skill: &str,
        delegate: Arc<Delegate>,
    ) -> Result<Binding, UpstreamError> {
        let card = delegate.card().ok_or_else(|| UpstreamError::Malformed {
            url: delegate.base_url.clone(),
            reason: "no identity card".into(),
        })?;
        let mut prefs = vec![session.payload.mode];
        prefs.extend(session.payload.fallback_chain.iter().copied());
        let config = SessionConfig {
            preferred_payload_modes: Some(prefs),
            payload_mode: Some(session.payload.mode),
            ttl_secs: Some(session.ttl.as_secs().max(1)),
            required_trust_domain: None,
            trust_domain: Some(session.client_domain.clone()),
            policy: None,
        };
        let upstream = self
            .upstream
            .open_session(&delegate.base_url, &card, config)
            .await?;
        let mut binding = Binding { delegate, upstream };
        match session.bind(skill, binding.clone()) {
            Some(old) => {
                self.close_later(vec![old]);
                self.share_binding(session, skill, &binding).await;
            }
            None => {
                // The session's first binding for the skill: another replica may have opened
                // one at the same moment. The first to publish wins; the other closes its
                // own (nobody else knows it) and uses the winner's.
                if let Some(winner) = self.share_first_binding(session, skill, &binding).await {
                    session.bind(skill, winner.clone());
                    self.close_later(vec![std::mem::replace(&mut binding, winner)]);
                }
            }
        }
        Ok(binding)
    }
}

/// Whether a per-task ledger failure should be logged now: at most one line a second, since
/// a failing store (a full disk) fails every task and the writer has logged the cause.
fn once_a_second() -> bool {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let now = chrono::Utc::now().timestamp();
    LAST.swap(now, std::sync::atomic::Ordering::Relaxed) != now
}
