//! The gateway's LDP logic: answer each client message, opening and reusing upstream
//! sessions, translating payload modes and rewriting provenance. No HTTP here: the server
//! hands in parsed envelopes and sends back what this returns.

mod admission;
mod calibrate;
mod card;
mod close;
mod handshake;
mod ingress;
mod pipeline;
mod retries;
mod running;
mod status;

pub use calibrate::{load_reference, Item as CalibrationItem, ReferenceError};
pub use ingress::IngressTask;
pub use pipeline::{ChatDelta, Trip};
pub use retries::RetryBudget;
pub use running::Registration;

use crate::config::Config;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Body, Envelope, LdpError, PayloadMode, SessionId, TaskId};
use crate::limits::{BudgetBook, Scope};
use crate::policy::{PolicyProblem, PolicySet};
use crate::provenance::{LedgerError, LedgerHandle};
use crate::registry::{Delegate, ExplainError, ExplainQuery, Registry};
use crate::routing::Explanation;
use crate::session::SessionTable;
use crate::state::{
    BudgetStore, Budgets, LimitStore, Limits, Nonces, SessionStore, Sessions, StoreError, Stores,
};
use crate::telemetry::Metrics;
use crate::tenant::{Tenant, Tenants, ANONYMOUS};
use crate::upstream::UpstreamClient;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::time::Duration;

/// Modes the gateway offers clients, preferred first (it translates between them).
pub const GATEWAY_MODES: [PayloadMode; 2] = [PayloadMode::SemanticFrame, PayloadMode::Text];

/// Bound on upstream tries for one task: mode fallbacks plus one re-handshake.
const MAX_TRIES: u32 = 8;

/// A request the gateway refuses before it is a protocol exchange (answered with a 4xx).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Malformed or not acceptable from a client (400).
    #[error("{0}")]
    BadRequest(String),
    /// A signature is missing, wrong, stale or replayed (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// A rate limit refused it (429 with `Retry-After`).
    #[error("{} rate limit reached", scope.as_str())]
    RateLimited {
        /// Which limit.
        scope: crate::limits::Scope,
        /// When to retry.
        retry_after: Duration,
    },
    /// Cluster mode: a check that needs the shared state could not be made (503, retryable).
    #[error("{0}")]
    Unavailable(String),
}

/// A refusal, with the ids of the request it answers (for the log line of a server fault).
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub refusal: Refusal,
    /// The refused envelope's ids.
    pub ids: RequestIds,
}

/// The ids a log line about a request carries.
#[derive(Debug, Clone, Default)]
pub struct RequestIds {
    /// The envelope's `message_id`.
    pub message_id: String,
    /// The envelope's `session_id`.
    pub session_id: SessionId,
}

/// What the transport knows about a request beyond its envelope.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    /// The caller's tenant (authenticated by its API key).
    pub tenant: Arc<Tenant>,
    /// The `x-ldp-policy` header.
    pub policy: Option<String>,
    /// Gateways the request passed through before this one (the `x-ldp-hops` header).
    pub hops: u32,
    /// The request's span (its tasks' spans go under it); off when tracing is.
    pub trace: crate::telemetry::otel::Trace,
}

impl RequestCtx {
    /// A context for the built-in anonymous tenant (tests, tools).
    pub fn anonymous() -> RequestCtx {
        RequestCtx {
            tenant: Arc::new(Tenant::builtin_anonymous()),
            policy: None,
            hops: 0,
            trace: Default::default(),
        }
    }
}

/// What the proxy is built from. The server wires them once and lends the same registry,
/// ledger, metrics and upstream client to the admin routes directly.
pub struct Parts {
    /// The configuration.
    pub cfg: Arc<Config>,
    /// The delegates.
    pub registry: Arc<Registry>,
    /// The policy set to start with.
    pub policies: PolicySet,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The ledger's handle.
    pub ledger: LedgerHandle,
    /// The tenants.
    pub tenants: Tenants,
    /// The client to delegates ([`upstream_client`] builds it from the config).
    pub upstream: UpstreamClient,
}

/// The client to delegates the config describes: the gateway's id as sender, the
/// connect and handshake deadlines, the card caps.
pub fn upstream_client(cfg: &Config) -> UpstreamClient {
    let mut upstream = UpstreamClient::new(
        cfg.identity.delegate_id.clone(),
        cfg.upstream.connect_timeout,
        cfg.upstream.handshake_timeout,
    );
    upstream.set_card_limits(crate::upstream::CardLimits {
        max_bytes: cfg.discovery.max_card_bytes,
        max_capabilities: cfg.discovery.max_capabilities,
        concurrency: cfg.discovery.concurrency,
    });
    upstream
}

/// The gateway core shared by every request.
pub struct Proxy {
    cfg: Arc<Config>,
    registry: Arc<Registry>,
    policies: ArcSwap<PolicySet>,
    /// The last policy reload asked for since start, and how it went.
    last_reload: arc_swap::ArcSwapOption<Reload>,
    /// Client sessions (a single node's table, or shared through Redis).
    sessions: Sessions,
    upstream: UpstreamClient,
    metrics: Arc<Metrics>,
    ledger: LedgerHandle,
    /// Failover's retry budget (not money: that is `budgets`).
    retries: RetryBudget,
    tenants: Tenants,
    /// Money held and spent (not failover's retry budget: that is `retries`).
    budgets: Budgets,
    /// Rate-limit admission.
    limits: Limits,
    policy_limits: crate::limits::LimiterMap,
    /// Replay nonces of signed messages.
    nonces: Nonces,
    /// Conversations kept for OpenAI-backed delegates.
    conversations: crate::state::Conversations,
    /// Recent task outcomes, for status queries.
    statuses: crate::state::Statuses,
    /// Each front end's session per tenant (one entry per configured tenant and front end
    /// at most).
    ingress_sessions: dashmap::DashMap<(String, crate::provenance::Ingress), crate::ldp::SessionId>,
    /// The tasks running in this process, for cancels (registered when admitted).
    running: Arc<running::RunningTasks>,
    /// Cluster mode: the Redis connection, which only `/readyz` asks directly.
    redis: Option<crate::state::redis::Redis>,
    /// Cluster mode: notes between replicas (a cancel of a task running elsewhere).
    bus: Option<crate::state::bus::Bus>,
    version: String,
    /// Work spawned on request paths that outlives its request (upstream closes, settle
    /// retries, cancels, tasks whose client left): shutdown waits for it.
    tasks: tokio_util::task::TaskTracker,
}

/// A policy reload and how it went.
#[derive(Debug, Clone)]
pub struct Reload {
    /// When, RFC 3339.
    pub at: String,
    /// The policies now in force, or every problem that kept the previous ones.
    pub outcome: Result<usize, Vec<String>>,
}

impl Proxy {
    /// A core built from its parts, with a single node's stores.
    pub fn new(parts: Parts) -> Proxy {
        let Parts {
            cfg,
            registry,
            policies,
            metrics,
            ledger,
            tenants,
            upstream,
        } = parts;
        let version = cfg
            .identity
            .model_version
            .clone()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned());
        let Stores {
            limits,
            budgets,
            sessions,
            nonces,
            conversations,
            statuses,
            redis,
            bus,
        } = Stores::local(&cfg);
        Proxy {
            retries: RetryBudget::new(cfg.fallback.clone()),
            statuses,
            ingress_sessions: dashmap::DashMap::new(),
            running: Arc::default(),
            cfg,
            registry,
            policies: ArcSwap::from_pointee(policies),
            last_reload: arc_swap::ArcSwapOption::empty(),
            sessions,
            upstream,
            metrics,
            ledger,
            tenants,
            budgets,
            limits,
            policy_limits: Default::default(),
            nonces,
            conversations,
            redis,
            bus,
            version,
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// The same core with `stores` (chosen at start: [`Stores::from_config`]) in place of a
    /// single node's.
    pub fn with_stores(mut self, stores: Stores) -> Proxy {
        let Stores {
            limits,
            budgets,
            sessions,
            nonces,
            conversations,
            statuses,
            redis,
            bus,
        } = stores;
        (self.limits, self.budgets, self.sessions) = (limits, budgets, sessions);
        (self.nonces, self.conversations, self.redis) = (nonces, conversations, redis);
        (self.statuses, self.bus) = (statuses, bus);
        self
    }

    /// Bytes of conversation this node keeps for OpenAI-backed delegates (`None` in cluster
    /// mode: they are in Redis).
    pub fn conversation_bytes(&self) -> Option<usize> {
        self.conversations.local_bytes()
    }

    /// This node's conversation table's figures (`None` in cluster mode).
    pub fn conversation_stats(&self) -> Option<crate::fair::TableStats> {
        self.conversations.local_stats()
    }

    /// Cluster mode: whether the shared state (Redis) answers now; `None` on a single node.
    pub async fn shared_state_ready(&self) -> Option<bool> {
        match &self.redis {
            Some(r) => Some(r.ping().await && self.bus.as_ref().is_none_or(|b| b.ready())),
            None => None,
        }
    }

    /// Cluster mode: the notes between replicas (cancels, A2A events); `None` on a single
    /// node.
    pub fn bus(&self) -> Option<&crate::state::bus::Bus> {
        self.bus.as_ref()
    }

    /// Housekeeping, run by the sweeper: expired sessions closed, and every keyed map of
    /// limiters pruned of keys that have refilled (so none grows with what clients send).
    pub async fn housekeep(&self) -> usize {
        for t in self.tenants.all() {
            if let Some(l) = &t.skill_limit {
                l.cleanup();
            }
        }
        self.policy_limits.retain_recent();
        self.limits.prune();
        self.sweep_expired().await
    }

    /// Limiter keys held (tenant × skill, policy, fallback), for tests and diagnostics.
    pub fn limiter_keys(&self) -> usize {
        let skill: usize = self
            .tenants
            .all()
            .iter()
            .filter_map(|t| t.skill_limit.as_ref().map(|l| l.len()))
            .sum();
        skill + self.policy_limits.len() + self.limits.keys()
    }

    /// The tenants.
    pub fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    /// This process's budget book (a single node's spend per tenant; empty in cluster mode,
    /// whose spend is in Redis).
    pub fn budgets(&self) -> &BudgetBook {
        self.budgets.book()
    }

    /// The policy set in force.
    pub fn policies(&self) -> Arc<PolicySet> {
        self.policies.load_full()
    }

    /// Re-reads the policy directory. A complete, valid set replaces the old one atomically;
    /// anything wrong keeps the old set and returns every problem. Tasks already running
    /// finish under the policy they started with (they hold it).
    pub fn reload_policies(&self) -> Result<usize, Vec<PolicyProblem>> {
        let result = self.load_policies();
        self.last_reload.store(Some(Arc::new(Reload {
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            outcome: match &result {
                Ok(n) => Ok(*n),
                Err(problems) => Err(problems.iter().map(ToString::to_string).collect()),
            },
        })));
        result
    }

    /// The last policy reload since start (none yet: the policies are the ones loaded at
    /// start).
    pub fn last_reload(&self) -> Option<Arc<Reload>> {
        self.last_reload.load_full()
    }

    /// [`Proxy::reload_policies`] without the record of it.
    fn load_policies(&self) -> Result<usize, Vec<PolicyProblem>> {
        match crate::policy::load_dir(&self.cfg.policies.dir, &self.cfg.policies.default) {
            Ok(set) => {
                let n = set.policies.len();
                self.policies.store(Arc::new(set));
                self.metrics.policy_reloads.with_label_values(&["ok"]).inc();
                tracing::info!(policies = n, "policies reloaded");
                Ok(n)
            }
            Err(problems) => {
                self.metrics
                    .policy_reloads
                    .with_label_values(&["error"])
                    .inc();
                self.metrics.policy_reload_failures.inc();
                Err(problems)
            }
        }
    }

    /// This process's client sessions (its copies, in cluster mode).
    pub fn sessions(&self) -> &SessionTable {
        self.sessions.table()
    }

    /// Background work spawned on request paths; `Gateway::shutdown` closes it and waits for
    /// it within the grace period. Spawn through [`Proxy::spawn_tracked`].
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    /// Spawns `fut` as tracked work. Outside a runtime (a drop while the runtime shuts down)
    /// it is dropped instead of panicking: nothing would run it anyway.
    pub fn spawn_tracked<F>(&self, fut: F) -> Option<tokio::task::JoinHandle<F::Output>>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        // Boxed: a task's future is kilobytes, and tokio copies a spawned future into its
        // task cell and the whole cell's stage again when it finishes; boxed, those copies
        // are a pointer's. The box itself is one more copy of `fut`: a block that runs a task
        // makes the task's future with [`boxed`] inside it, so `fut` stays small.
        Some(self.tasks.spawn_on(Box::pin(fut), &rt))
    }

    fn id(&self) -> &str {
        &self.cfg.identity.delegate_id
    }

    /// Registers the TASK_SUBMIT `env` (none for another message) as running, for a cancel to
    /// find from now on: the route calls it before it spawns the task, and keeps the
    /// registration until the task's future ends.
    pub fn task_arrived(&self, ctx: &RequestCtx, env: &Envelope) -> Option<Registration> {
        let Body::TaskSubmit { task_id, .. } = &env.body else {
            return None;
        };
        let session = Some(env.session_id.clone());
        Some(
            self.running
                .register(owner(ctx, env), session, task_id.clone()),
        )
    }

    /// Answers one client envelope. The answer is shared: a task's is also kept for status
    /// queries.
    pub async fn handle(&self, env: Envelope, ctx: &RequestCtx) -> Result<Arc<Envelope>, Refused> {
        self.handle_with(env, ctx, None).await
    }

    /// Answers one client envelope, sending TASK_UPDATE progress (the gateway's own and any
    /// the delegate streams) to `progress` while a task runs.
    pub async fn handle_with(
        &self,
        mut env: Envelope,
        ctx: &RequestCtx,
        progress: Option<&tokio::sync::mpsc::Sender<Envelope>>,
    ) -> Result<Arc<Envelope>, Refused> {
        let progress = progress.map_or(pipeline::Progress::Quiet, pipeline::Progress::Updates);
        match self.dispatch(&mut env, ctx, progress).await {
            Ok(reply) => Ok(reply),
            Err(refusal) => Err(Refused {
                refusal,
                ids: RequestIds {
                    message_id: env.message_id,
                    session_id: env.session_id,
                },
            }),
        }
    }

    async fn dispatch(
        &self,
        env: &mut Envelope,
        ctx: &RequestCtx,
        progress: pipeline::Progress<'_>,
    ) -> Result<Arc<Envelope>, Refusal> {
        self.check_ids(env)?;
        self.admit_tenant(ctx).await?;
        if self.check_signature(env, ctx).await? == Some(crate::ldp::signing::Algorithm::Body) {
            // Forward what was verified: the payload's parsed form, not its original text
            // (which could, say, repeat a key that a delegate reads differently).
            env.body
                .canonicalize_payload()
                .map_err(|e| Refusal::BadRequest(format!("task payload: {e}")))?;
        }
        let env = &*env;
        if let Some(task_id) = env.body.status_query() {
            return Ok(self.status_query(env, ctx, task_id).await);
        }
        match &env.body {
            Body::Hello { .. } => Ok(Arc::new(self.hello(env))),
            Body::SessionPropose { config } => Ok(Arc::new(self.propose(env, config, ctx).await)),
            Body::TaskSubmit {
                task_id,
                skill,
                input,
                contract,
            } => pipeline::Pipeline(self)
                .submit(
                    env,
                    ctx,
                    pipeline::TaskIn {
                        task_id,
                        ingress: crate::provenance::Ingress::Ldp,
                        retried_if_session_lost: false,
                        skill,
                        input,
                        contract: contract.as_ref(),
                        chat: None,
                        verifying: false,
                        quorum: None,
                        keep_rounds: false,
                        ledger_input: None,
                        checked: false,
                        rerouted: false,
                        lender: None,
                    },
                    progress,
                )
                .await
                .map(|trip| trip.reply),
            Body::TaskCancel { task_id } => Ok(Arc::new(self.cancel(env, ctx, task_id).await)),
            Body::SessionClose { .. } => self.close(env, ctx).await.map(Arc::new),
            other => Err(Refusal::BadRequest(format!(
                "the gateway does not accept {} from clients",
                other.message_type().as_str()
            ))),
        }
    }

    /// The tenant's own rate limit for a request that is no LDP message (client feedback):
    /// it draws on the same allowance (429 when reached; Redis GCRA in cluster mode).
    pub async fn admit_request(&self, ctx: &RequestCtx) -> Result<(), Refusal> {
        self.admit_tenant(ctx).await
    }

    /// The tenant's own rate limit (429 when reached).
    async fn admit_tenant(&self, ctx: &RequestCtx) -> Result<(), Refusal> {
        if let Some(limit) = &ctx.tenant.limit {
            self.admit(Scope::Tenant, &ctx.tenant.name, &limit.rate, || {
                limit.check()
            })
            .await?;
        }
        Ok(())
    }

    fn task_failed(&self, env: &Envelope, task_id: &TaskId, error: LdpError) -> Envelope {
        env.reply(
            self.id(),
            Body::TaskFailed {
                task_id: task_id.clone(),
                error: error.emittable(),
            },
            env.payload_mode,
        )
    }

    /// The live session `id` if `owner` opened it (its idle clock restarts everywhere); a
    /// copy of a session found gone has its upstream sessions closed. `Err` when the shared
    /// state does not answer.
    async fn session(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<Option<Arc<crate::session::ClientSession>>, LdpError> {
        let found = self.sessions.get(id, owner).await.map_err(|e| {
            LdpError::gateway(
                GatewayCode::Unavailable,
                format!("session not checked: {e}"),
            )
        })?;
        self.close_later(found.stale);
        Ok(found.session)
    }

    fn session_not_found(&self, env: &Envelope) -> LdpError {
        LdpError::gateway(
            GatewayCode::SessionNotFound,
            format!("session '{}' is unknown, expired or closed", env.session_id),
        )
    }

    /// The card's price for `skill`: the declared price, else its cost tier's price.
    pub(crate) fn declared_cost(&self, delegate: &Delegate, skill: &str) -> Option<f64> {
        let h = delegate.card()?.effective_hints(skill)?;
        h.cost_per_call_usd
            .or_else(|| h.cost_tier.map(|t| self.cfg.routing.tier_prices.of(t)))
    }

    /// Explains the routing decision for `skill` under `policy` (or the one selection would
    /// use) for a client in `client_domain`.
    pub fn explain(
        &self,
        skill: &str,
        policy: Option<&str>,
        tenant: Option<&str>,
        client_domain: Option<&str>,
    ) -> Result<Explanation, ExplainError> {
        crate::registry::explain(
            &self.registry,
            &self.policies.load(),
            &self.cfg.routing,
            &self.cfg.identity.trust_domain.name,
            &ExplainQuery {
                skill,
                policy,
                tenant: tenant.unwrap_or(ANONYMOUS),
                client_domain,
            },
        )
    }
}

/// The session owner key: tenant and envelope `from`, so a session id is useless to anyone else.
pub(crate) fn owner(ctx: &RequestCtx, env: &Envelope) -> String {
    owner_of(&ctx.tenant.name, &env.from)
}

/// [`owner`] of `tenant`'s sender `from`.
fn owner_of(tenant: &str, from: &str) -> String {
    let mut o = String::with_capacity(tenant.len() + 1 + from.len());
    o.push_str(tenant);
    o.push('\u{1f}');
    o.push_str(from);
    o
}

/// Why a tenant's spend could not be seeded from the ledger.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SeedError {
    /// The ledger could not be read.
    #[error("past spend not read from the ledger: {0}")]
    Ledger(#[from] LedgerError),
    /// The budget store did not take it.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Proxy {
    /// Restores each budgeted tenant's spend for the current UTC day and month from the
    /// ledger, so budgets survive a restart. In cluster mode every replica reads the same
    /// shared ledger; the first one seeds Redis.
    pub async fn restore_spend(&self) {
        let budgeted = self
            .tenants
            .all()
            .iter()
            .any(|t| t.budget.usd_per_day.is_some() || t.budget.usd_per_month.is_some());
        if !budgeted {
            return;
        }
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let (Ok(d), Ok(m)) = (
            self.ledger.spend_since(day).await,
            self.ledger.spend_since(month).await,
        ) else {
            tracing::warn!("could not read past spend from the ledger; budgets start from zero");
            return;
        };
        for t in self.tenants.all() {
            if let Err(e) = self
                .budgets
                .seed(&t.name, spend_of(&d, &t.name), spend_of(&m, &t.name))
                .await
            {
                tracing::warn!(tenant = %t.name, error = %e, "spend not restored into the shared state");
            }
        }
    }

    /// Seeds `tenant`'s day and month accounts from the ledger (cluster mode: Redis lost
    /// them, or was away when the replicas started). Replicas racing here write the same
    /// sums; the first wins.
    pub(crate) async fn seed_spend(&self, tenant: &str) -> Result<(), SeedError> {
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let d = self.ledger.spend_since(day).await?;
        let m = self.ledger.spend_since(month).await?;
        tracing::info!(tenant, "seeding shared budget accounts from the ledger");
        self.budgets
            .seed(tenant, spend_of(&d, tenant), spend_of(&m, tenant))
            .await?;
        Ok(())
    }
}

/// `tenant`'s sum in a ledger spend list (0 if it spent nothing).
fn spend_of(spend: &[(String, f64)], tenant: &str) -> f64 {
    spend
        .iter()
        .find(|(n, _)| n == tenant)
        .map_or(0.0, |(_, s)| *s)
}

/// The future `make` returns, made straight on the heap: a task's future is kilobytes (the
/// whole pipeline's states), and made first and then boxed (or passed by value, as to a
/// spawn) it is copied whole each time. Awaited inside a spawned block, it keeps the block,
/// and the copies a spawn makes of it, small.
pub fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    // Allocated before `make` runs, so the compiler can have it write its future in place.
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
