//! The gateway's LDP logic: answer each client message, opening and reusing upstream
//! sessions, translating payload modes and rewriting provenance. No HTTP here: the server
//! hands in parsed envelopes and sends back what this returns.

mod budget;
mod record;
mod sessions;
mod task;

pub use budget::RetryBudget;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::config::RateConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    negotiate, Body, Capability, Envelope, IdentityCard, LdpError, PayloadMode, SessionConfig,
};
use crate::limits::{BudgetBook, Scope};
use crate::policy::{PolicyProblem, PolicySet};
use crate::provenance::LedgerHandle;
use crate::registry::{Delegate, ExplainError, ExplainQuery, Registry};
use crate::routing::Explanation;
use crate::session::{Binding, NewSession, SessionTable};
use crate::telemetry::Metrics;
use crate::tenant::{Tenant, Tenants, ANONYMOUS};
use crate::upstream::{UpstreamClient, UpstreamError};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
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

/// What the transport knows about a request beyond its envelope.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    /// The caller's tenant (authenticated by its API key).
    pub tenant: Arc<Tenant>,
    /// The `x-ldp-policy` header.
    pub policy: Option<String>,
    /// Gateways the request passed through before this one (the `x-ldp-hops` header).
    pub hops: u32,
}

impl RequestCtx {
    /// A context for the built-in anonymous tenant (tests, tools).
    pub fn anonymous() -> RequestCtx {
        RequestCtx {
            tenant: Arc::new(Tenant::builtin_anonymous()),
            policy: None,
            hops: 0,
        }
    }
}

/// The gateway core shared by every request.
pub struct Proxy {
    cfg: Arc<Config>,
    registry: Arc<Registry>,
    policies: ArcSwap<PolicySet>,
    sessions: SessionTable,
    upstream: UpstreamClient,
    metrics: Arc<Metrics>,
    ledger: LedgerHandle,
    budget: RetryBudget,
    tenants: Tenants,
    budgets: BudgetBook,
    policy_limits: crate::limits::LimiterMap,
    replay: crate::ldp::replay::ReplayGuard,
    version: String,
    /// Cluster mode: limits, budgets, sessions and nonces shared through Redis.
    cluster: Option<Arc<Cluster>>,
    /// Local limiters at limit ÷ replicas, used while Redis does not answer.
    fallback_limits: crate::limits::LimiterMap,
    /// Work spawned on request paths that outlives its request (upstream closes, settle
    /// retries, cancels, tasks whose client left): shutdown waits for it.
    tasks: tokio_util::task::TaskTracker,
}

impl Proxy {
    /// A core over `registry` and `policies`, configured by `cfg`.
    pub fn new(
        cfg: Arc<Config>,
        registry: Arc<Registry>,
        policies: PolicySet,
        metrics: Arc<Metrics>,
        ledger: LedgerHandle,
        tenants: Tenants,
    ) -> Proxy {
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
        let version = cfg
            .identity
            .model_version
            .clone()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned());
        let replay = crate::ldp::replay::ReplayGuard::new(
            cfg.security.replay_window,
            cfg.security.replay_capacity,
        );
        Proxy {
            budget: RetryBudget::new(cfg.fallback.clone()),
            cfg,
            registry,
            policies: ArcSwap::from_pointee(policies),
            sessions: SessionTable::default(),
            upstream,
            metrics,
            ledger,
            tenants,
            budgets: BudgetBook::default(),
            policy_limits: Default::default(),
            replay,
            version,
            cluster: None,
            fallback_limits: Default::default(),
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// The same core in cluster mode: state shared with the other replicas through `cluster`.
    pub fn with_cluster(mut self, cluster: Option<Arc<Cluster>>) -> Proxy {
        self.cluster = cluster;
        self
    }

    /// The shared state, in cluster mode.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// One admission by the limit `rate` of `scope` at `key`. Cluster mode: shared by every
    /// replica (Redis GCRA); while Redis does not answer, a local limiter at limit ÷ replicas
    /// decides (counted in `ldp_gateway_rate_limit_local_fallbacks_total`). Single node:
    /// `local` decides.
    async fn admit(
        &self,
        scope: Scope,
        key: &str,
        rate: &RateConfig,
        local: impl FnOnce() -> Result<(), Duration>,
    ) -> Result<(), Refusal> {
        let decided = match &self.cluster {
            None => local(),
            Some(c) => {
                let key = format!("{}:{key}", scope.as_str());
                match c.admit(&key, rate).await {
                    Ok(decided) => decided,
                    Err(_) => {
                        self.metrics
                            .rate_limit_fallbacks
                            .with_label_values(&[scope.as_str()])
                            .inc();
                        let share = crate::limits::share(rate, c.replicas());
                        self.fallback_limits.check(&key, &share)
                    }
                }
            }
        };
        decided.map_err(|wait| self.limited(scope, wait))
    }

    /// The key a tenant × skill limit counts `skill` under: the skill if a delegate offers
    /// it, else one shared key, so client text cannot grow the limiter maps.
    pub(crate) fn skill_key<'a>(&self, skill: &'a str) -> &'a str {
        if self.registry.index().offers(skill).is_empty() {
            "\u{1f}unknown"
        } else {
            skill
        }
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
        self.fallback_limits.retain_recent();
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
        skill + self.policy_limits.len() + self.fallback_limits.len()
    }

    /// The tenants.
    pub fn tenants(&self) -> &Tenants {
        &self.tenants
    }

    /// Restores each budgeted tenant's spend for the current UTC day and month from the
    /// ledger, so budgets survive a restart.
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
            let find = |v: &[(String, f64)]| {
                v.iter()
                    .find(|(n, _)| *n == t.name)
                    .map_or(0.0, |(_, s)| *s)
            };
            match &self.cluster {
                // Every replica reads the same shared ledger; the first one seeds Redis.
                Some(c) => {
                    if let Err(e) = c.restore_spend(&t.name, find(&d), find(&m)).await {
                        tracing::warn!(tenant = %t.name, error = %e, "spend not restored into the shared state");
                    }
                }
                None => self.budgets.restore(&t.name, find(&d), find(&m)),
            }
        }
    }

    /// Cluster mode: seeds `tenant`'s day and month accounts in Redis from the ledger (Redis
    /// lost them, or was away when the replicas started). Replicas racing here write the
    /// same sums; the first wins.
    pub(crate) async fn seed_spend(&self, tenant: &str) -> Result<(), String> {
        let Some(c) = &self.cluster else {
            return Ok(());
        };
        let (day, month) = crate::limits::budget::period_starts(chrono::Utc::now());
        let d = self
            .ledger
            .spend_since(day)
            .await
            .map_err(|e| e.to_string())?;
        let m = self
            .ledger
            .spend_since(month)
            .await
            .map_err(|e| e.to_string())?;
        let find =
            |v: &[(String, f64)]| v.iter().find(|(n, _)| n == tenant).map_or(0.0, |(_, s)| *s);
        tracing::info!(tenant, "seeding shared budget accounts from the ledger");
        c.restore_spend(tenant, find(&d), find(&m))
            .await
            .map_err(|e| e.to_string())
    }

    /// Verifies the envelope's signature with the tenant's secret (refusing unsigned messages
    /// when the tenant requires signatures) and refuses replays of a signed message id + nonce
    /// within the window.
    /// Checks a signed message (signature, freshness, first use); the algorithm it was signed
    /// with, or `None` for an unsigned message the tenant accepts.
    async fn check_signature(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
    ) -> Result<Option<crate::ldp::signing::Algorithm>, Refusal> {
        let Some((secret, required)) = &ctx.tenant.signing else {
            return Ok(None);
        };
        if env.signature.is_none() {
            return if *required {
                Err(Refusal::Unauthenticated(
                    "this tenant requires signed messages".into(),
                ))
            } else {
                Ok(None)
            };
        }
        let alg = crate::ldp::signing::verify(env, secret.expose())
            .map_err(|e| Refusal::Unauthenticated(format!("signature rejected: {e}")))?;
        let Some(c) = &self.cluster else {
            return self
                .replay
                .check_envelope(env, chrono::Utc::now())
                .map(|()| Some(alg))
                .map_err(|e| Refusal::Unauthenticated(format!("message rejected: {e}")));
        };
        // Cluster mode: freshness here, first use anywhere in the cluster in Redis.
        let window = self.cfg.security.replay_window;
        crate::ldp::replay::check_fresh(&env.timestamp, chrono::Utc::now(), window)
            .map_err(|e| Refusal::Unauthenticated(format!("message rejected: {e}")))?;
        match c
            .first_use(&env.message_id, env.nonce.as_deref().unwrap_or(""), window)
            .await
        {
            Ok(true) => Ok(Some(alg)),
            Ok(false) => Err(Refusal::Unauthenticated(
                "message rejected: this message id and nonce were already used".into(),
            )),
            Err(e) => Err(Refusal::Unavailable(format!(
                "signed message not checked for replay: {e}"
            ))),
        }
    }

    /// The budget book (spend per tenant).
    pub fn budgets(&self) -> &BudgetBook {
        &self.budgets
    }

    /// Counts a refusal by a rate limit.
    fn limited(&self, scope: Scope, retry_after: Duration) -> Refusal {
        self.metrics
            .rate_limited
            .with_label_values(&[scope.as_str()])
            .inc();
        Refusal::RateLimited { scope, retry_after }
    }

    /// Takes a token from the policy's `[limits]`, if it has one.
    async fn check_policy_limit(&self, policy: &crate::policy::Policy) -> Result<(), Refusal> {
        let Some(l) = policy.limits else {
            return Ok(());
        };
        let rate = RateConfig {
            rps: l.rps,
            burst: Some(l.burst),
        };
        let local = || self.policy_limits.check(&policy.name.0, &rate);
        self.admit(Scope::Policy, &policy.name.0, &rate, local)
            .await
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The policy set in force.
    pub fn policies(&self) -> Arc<PolicySet> {
        self.policies.load_full()
    }

    /// Re-reads the policy directory. A complete, valid set replaces the old one atomically;
    /// anything wrong keeps the old set and returns every problem. Tasks already running
    /// finish under the policy they started with (they hold it).
    pub fn reload_policies(&self) -> Result<usize, Vec<PolicyProblem>> {
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

    /// The ledger.
    pub fn ledger(&self) -> &LedgerHandle {
        &self.ledger
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The client session table.
    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    /// The upstream client.
    pub fn upstream(&self) -> &UpstreamClient {
        &self.upstream
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
        Some(self.tasks.spawn_on(fut, &rt))
    }

    fn id(&self) -> &str {
        &self.cfg.identity.delegate_id
    }

    /// The gateway's identity card: its skills are those healthy delegates offer, each with the
    /// best hint any of them declares.
    pub fn identity_card(&self, endpoint: Option<String>) -> IdentityCard {
        let id = &self.cfg.identity;
        let mut skills: BTreeMap<String, Capability> = BTreeMap::new();
        let mut context_window = None;
        for d in self.registry.snapshot().iter().filter(|d| d.is_healthy()) {
            let Some(card) = d.card() else { continue };
            context_window = context_window.max(card.context_window);
            for cap in &card.capabilities {
                let Some(h) = card.effective_hints(&cap.name) else {
                    continue;
                };
                let entry = skills.entry(cap.name.clone()).or_insert_with(|| {
                    let mut c = Capability::named(cap.name.clone());
                    c.description = cap.description.clone();
                    c
                });
                let e = &mut entry.hints;
                e.quality = max_opt(e.quality, h.quality);
                e.latency_p50_ms = min_opt(e.latency_p50_ms, h.latency_p50_ms);
                e.latency_p99_ms = min_opt(e.latency_p99_ms, h.latency_p99_ms);
                e.cost_per_call_usd = min_opt(e.cost_per_call_usd, h.cost_per_call_usd);
                e.cost_tier = min_opt(e.cost_tier, h.cost_tier);
                e.max_tokens = max_opt(e.max_tokens, h.max_tokens);
                e.supports_streaming = max_opt(e.supports_streaming, h.supports_streaming);
            }
        }
        IdentityCard {
            delegate_id: id.delegate_id.clone(),
            name: id.name.clone(),
            description: Some("LDP gateway: routes each task to a delegate by policy".into()),
            model_family: id.model_family.clone(),
            model_version: self.version.clone(),
            weights_fingerprint: None,
            trust_domain: id.trust_domain.clone(),
            // The Rust reference requires the key; 0 says no healthy delegate declares one.
            context_window: Some(id.context_window.or(context_window).unwrap_or(0)),
            reasoning_profile: None,
            cost_profile: None,
            latency_profile: None,
            jurisdiction: None,
            capabilities: skills.into_values().collect(),
            supported_payload_modes: GATEWAY_MODES.to_vec(),
            endpoint: id.public_url.clone().or(endpoint),
            metadata: BTreeMap::from([("ldp.gateway".to_owned(), "true".to_owned())]),
        }
    }

    /// Answers one client envelope.
    pub async fn handle(&self, env: Envelope, ctx: &RequestCtx) -> Result<Envelope, Refusal> {
        self.handle_with(env, ctx, None).await
    }

    /// Answers one client envelope, sending TASK_UPDATE progress (the gateway's own and any
    /// the delegate streams) to `progress` while a task runs.
    pub async fn handle_with(
        &self,
        env: Envelope,
        ctx: &RequestCtx,
        progress: Option<&tokio::sync::mpsc::Sender<Envelope>>,
    ) -> Result<Envelope, Refusal> {
        self.check_ids(&env)?;
        if let Some(limit) = &ctx.tenant.limit {
            self.admit(Scope::Tenant, &ctx.tenant.name, &limit.rate, || {
                limit.check()
            })
            .await?;
        }
        let mut env = env;
        if self.check_signature(&env, ctx).await? == Some(crate::ldp::signing::Algorithm::Body) {
            // Forward what was verified: the payload's parsed form, not its original text
            // (which could, say, repeat a key that a delegate reads differently).
            env.body
                .canonicalize_payload()
                .map_err(|e| Refusal::BadRequest(format!("task payload: {e}")))?;
        }
        match &env.body {
            Body::Hello { .. } => Ok(self.hello(&env)),
            Body::SessionPropose { config } => Ok(self.propose(&env, config, ctx).await),
            Body::TaskSubmit {
                task_id,
                skill,
                input,
                contract,
            } => {
                self.submit(
                    &env,
                    ctx,
                    task::TaskIn {
                        task_id,
                        skill,
                        input,
                        contract: contract.as_ref(),
                    },
                    progress,
                )
                .await
            }
            Body::TaskCancel { task_id } => Ok(self.cancel(&env, ctx, task_id).await),
            Body::SessionClose { .. } => self.close(&env, ctx).await,
            other => Err(Refusal::BadRequest(format!(
                "the gateway does not accept {} from clients",
                other.message_type().as_str()
            ))),
        }
    }

    /// Refuses ids longer than `security.max_id_bytes`: they are stored per session (the
    /// owner key, running tasks), in limiter keys and in the ledger, so a client must not be
    /// able to make them large.
    fn check_ids(&self, env: &Envelope) -> Result<(), Refusal> {
        let max = self.cfg.security.max_id_bytes;
        let check = |field: &str, v: Option<&str>| match v {
            Some(v) if v.len() > max => Err(Refusal::BadRequest(format!(
                "{field} is {} bytes long; the most accepted is {max}",
                v.len()
            ))),
            _ => Ok(()),
        };
        check("message_id", Some(&env.message_id))?;
        check("session_id", Some(&env.session_id))?;
        check("from", Some(&env.from))?;
        check("to", Some(&env.to))?;
        check("nonce", env.nonce.as_deref())?;
        match &env.body {
            Body::TaskSubmit { task_id, skill, .. } => {
                check("body.task_id", Some(task_id))?;
                check("body.skill", Some(skill))
            }
            Body::TaskCancel { task_id } => check("body.task_id", Some(task_id)),
            Body::SessionPropose { config } => {
                check("body.config.trust_domain", config.trust_domain.as_deref())?;
                check(
                    "body.config.required_trust_domain",
                    config.required_trust_domain.as_deref(),
                )?;
                check("body.config.policy", config.policy.as_deref())
            }
            _ => Ok(()),
        }
    }

    fn hello(&self, env: &Envelope) -> Envelope {
        let card = self.identity_card(None);
        env.reply(
            self.id(),
            Body::CapabilityManifest {
                capabilities: crate::ldp::CapabilityManifest {
                    capabilities: card.capabilities,
                    supported_modes: GATEWAY_MODES.to_vec(),
                },
            },
            PayloadMode::Text,
        )
    }

    fn reject(&self, env: &Envelope, code: GatewayCode, reason: String) -> Envelope {
        env.reply(
            self.id(),
            Body::SessionReject {
                error: Some(LdpError::gateway(code, reason.clone())),
                reason,
            },
            PayloadMode::Text,
        )
    }

    async fn propose(&self, env: &Envelope, config: &SessionConfig, ctx: &RequestCtx) -> Envelope {
        let own = &self.cfg.identity.trust_domain;
        let tenant = &ctx.tenant;
        let claimed = match (&config.trust_domain, &tenant.trust_domains) {
            (Some(c), _) => c.clone(),
            (None, Some(list)) => list.first().cloned().unwrap_or_else(|| own.name.clone()),
            (None, None) => own.name.clone(),
        };
        match &tenant.trust_domains {
            // With tenants, the claim must be one the tenant owns.
            Some(list) if !list.contains(&claimed) => {
                let reason = format!("trust domain '{claimed}' is not one this tenant may claim");
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
            Some(_) => {}
            // Without tenants, RFC §7.2: the gateway's own domain must trust the claim.
            None if !own.trusts(&claimed) => {
                let reason = format!(
                    "client trust domain '{claimed}' is not trusted by gateway domain '{}'",
                    own.name
                );
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
            None => {}
        }
        if let Some(required) = &config.required_trust_domain {
            let any = self
                .registry
                .snapshot()
                .iter()
                .any(|d| d.card().is_some_and(|c| &c.trust_domain.name == required));
            if !any {
                let reason =
                    format!("no registered delegate is in required trust domain '{required}'");
                return self.reject(env, GatewayCode::TrustViolation, reason);
            }
        }
        if let Some(name) = &config.policy {
            if self.policies.load().get(name).is_none() {
                let reason = format!("unknown policy '{name}'");
                return self.reject(env, GatewayCode::UnknownPolicy, reason);
            }
            if !tenant.may_use(name) {
                let reason = format!("policy '{name}' is not allowed for this tenant");
                return self.reject(env, GatewayCode::UnknownPolicy, reason);
            }
        }
        let payload = negotiate(&config.preferences(), &GATEWAY_MODES);
        // Validation keeps max_ttl ≥ 1 s; the `max` keeps `clamp` from panicking regardless.
        let floor = Duration::from_secs(1);
        let ttl = config
            .ttl_secs
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.sessions.default_ttl)
            .clamp(floor, self.cfg.sessions.max_ttl.max(floor));
        let opened = self.sessions.open_limited(
            NewSession {
                owner: owner(ctx, env),
                tenant: tenant.name.clone(),
                client_domain: claimed,
                required_domain: config.required_trust_domain.clone(),
                payload: payload.clone(),
                policy: config.policy.clone(),
                ttl,
            },
            self.cfg.security.max_sessions,
            tenant.max_sessions,
        );
        let session = match opened {
            Ok(s) => s,
            Err(e) => return self.reject(env, GatewayCode::SessionLimit, e.to_string()),
        };
        if let Err(e) = self.share_session(&session).await {
            self.sessions.forget(&session.id);
            return self.reject(env, GatewayCode::Unavailable, e.message);
        }
        tracing::debug!(session_id = %session.id, mode = %payload.mode, "session accepted");
        let mut reply = env.reply(
            self.id(),
            Body::SessionAccept {
                session_id: session.id.clone(),
                negotiated_mode: payload.mode,
                fallback_chain: payload.fallback_chain,
            },
            PayloadMode::Text,
        );
        reply.session_id = session.id.clone();
        reply
    }

    fn task_failed(&self, env: &Envelope, task_id: &str, error: LdpError) -> Envelope {
        env.reply(
            self.id(),
            Body::TaskFailed {
                task_id: task_id.to_owned(),
                error: error.emittable(),
            },
            env.payload_mode,
        )
    }

    fn session_not_found(&self, env: &Envelope) -> LdpError {
        LdpError::gateway(
            GatewayCode::SessionNotFound,
            format!("session '{}' is unknown, expired or closed", env.session_id),
        )
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

    /// Cancels a running task upstream on behalf of a client that went away (a dropped
    /// stream). Returns whether a TASK_CANCEL reached the delegate.
    pub async fn cancel_for_disconnect(
        &self,
        session_id: &str,
        owner: &str,
        task_id: &str,
    ) -> bool {
        let Ok(Some(session)) = self.session(session_id, owner).await else {
            return false;
        };
        let Some(b) = session
            .running_skill(task_id)
            .and_then(|skill| session.binding(&skill))
        else {
            return false;
        };
        let cancel = Envelope::new(
            b.upstream.session_id.as_str(),
            self.id(),
            b.upstream.delegate_id.as_str(),
            Body::TaskCancel {
                task_id: task_id.to_owned(),
            },
            PayloadMode::Text,
        );
        let sent = self
            .upstream
            .send(
                &b.delegate.base_url,
                &cancel,
                self.cfg.upstream.handshake_timeout,
            )
            .await;
        tracing::info!(task_id, delegate = %b.delegate.name, ok = sent.is_ok(), "client went away; task cancelled upstream");
        sent.is_ok()
    }

    async fn cancel(&self, env: &Envelope, ctx: &RequestCtx, task_id: &str) -> Envelope {
        let session = match self.session(&env.session_id, &owner(ctx, env)).await {
            Ok(Some(s)) => s,
            Ok(None) => return self.task_failed(env, task_id, self.session_not_found(env)),
            Err(e) => return self.task_failed(env, task_id, e),
        };
        let binding = session
            .running_skill(task_id)
            .and_then(|skill| session.binding(&skill));
        let message = match binding {
            Some(b) => {
                let cancel = Envelope::new(
                    b.upstream.session_id.as_str(),
                    self.id(),
                    b.upstream.delegate_id.as_str(),
                    Body::TaskCancel {
                        task_id: task_id.to_owned(),
                    },
                    PayloadMode::Text,
                );
                match self
                    .upstream
                    .send(
                        &b.delegate.base_url,
                        &cancel,
                        self.cfg.upstream.handshake_timeout,
                    )
                    .await
                {
                    Ok(_) => "cancelled".to_owned(),
                    Err(e) => format!("cancel could not reach the delegate: {e}"),
                }
            }
            None => format!("task '{task_id}' is not running"),
        };
        env.reply(
            self.id(),
            Body::TaskUpdate {
                task_id: task_id.to_owned(),
                progress: None,
                message: Some(message),
            },
            PayloadMode::Text,
        )
    }

    async fn close(&self, env: &Envelope, ctx: &RequestCtx) -> Result<Envelope, Refusal> {
        // Closing twice, or closing an unknown session, is acknowledged the same way: the
        // caller cannot learn whether someone else's session id exists.
        let bindings = self
            .end_session(&env.session_id, &owner(ctx, env))
            .await
            .map_err(|e| Refusal::Unavailable(e.message))?;
        self.close_later(bindings);
        Ok(env.reply(
            self.id(),
            Body::SessionClose {
                reason: Some("acknowledged".into()),
            },
            PayloadMode::Text,
        ))
    }

    /// Closes upstream sessions in the background (each call has the handshake deadline).
    fn close_later(&self, bindings: Vec<Binding>) {
        if bindings.is_empty() {
            return;
        }
        let upstream = self.upstream.clone();
        self.spawn_tracked(async move { close_all(&upstream, bindings).await });
    }

    /// Removes expired sessions and closes their upstream sessions; returns how many expired.
    pub async fn sweep_expired(&self) -> usize {
        let (n, bindings) = self.expired_bindings().await;
        if n > 0 {
            tracing::debug!(sessions = n, upstream = bindings.len(), "sessions expired");
        }
        close_all(&self.upstream, bindings).await;
        n
    }

    /// Closes every session and its upstream sessions (shutdown). In cluster mode the
    /// sessions live on in the other replicas: only this replica's copies are dropped.
    pub async fn close_everything(&self) {
        let sessions = self.sessions.take_all();
        if self.cluster.is_some() {
            return;
        }
        let bindings: Vec<Binding> = sessions.iter().flat_map(|s| s.take_bindings()).collect();
        close_all(&self.upstream, bindings).await;
    }
}

/// The session owner key: tenant and envelope `from`, so a session id is useless to anyone else.
pub(crate) fn owner(ctx: &RequestCtx, env: &Envelope) -> String {
    let mut o = String::with_capacity(ctx.tenant.name.len() + 1 + env.from.len());
    o.push_str(&ctx.tenant.name);
    o.push('\u{1f}');
    o.push_str(&env.from);
    o
}

async fn close_all(upstream: &UpstreamClient, bindings: Vec<Binding>) {
    let closes = bindings
        .iter()
        .map(|b| upstream.close_session(&b.delegate.base_url, &b.upstream));
    futures_util::future::join_all(closes).await;
}

fn upstream_failed(delegate: &Delegate, e: &UpstreamError) -> LdpError {
    let mut err = LdpError::gateway(
        GatewayCode::UpstreamFailed,
        format!("delegate '{}' failed: {e}", delegate.name),
    );
    err.retryable = e.retryable();
    err
}

fn max_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b < a { b } else { a }),
        (a, b) => a.or(b),
    }
}
