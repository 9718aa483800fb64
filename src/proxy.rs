//! The gateway's LDP logic: answer each client message, opening and reusing upstream
//! sessions, translating payload modes and rewriting provenance. No HTTP here: the server
//! hands in parsed envelopes and sends back what this returns.

use crate::config::Config;
use crate::ldp::error::GatewayCode;
use crate::ldp::{
    negotiate, Body, Capability, DelegationContract, Envelope, IdentityCard, LdpError,
    LineageEntry, MessageType, PayloadMode, Provenance, SessionConfig, VerificationStatus,
};
use crate::policy::{Policy, PolicyProblem, PolicySet};
use crate::registry::{Delegate, Registry, SkillOffer};
use crate::routing::{self, Explanation, Need, Offer};
use crate::session::{Binding, ClientSession, NewSession, SessionTable};
use crate::telemetry::Metrics;
use crate::translate::{is_mode_failure, translate_input};
use crate::upstream::{UpstreamClient, UpstreamError};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Modes the gateway offers clients, preferred first (it translates between them).
pub const GATEWAY_MODES: [PayloadMode; 2] = [PayloadMode::SemanticFrame, PayloadMode::Text];

/// Bound on upstream tries for one task: mode fallbacks plus one re-handshake.
const MAX_TRIES: u32 = 8;

/// A client message the gateway will not take (answered with HTTP 400).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAccepted(pub String);

/// What the transport knows about a request beyond its envelope.
#[derive(Debug, Clone, Default)]
pub struct RequestCtx {
    /// The `x-ldp-policy` header.
    pub policy: Option<String>,
}

/// Tenant of every client until tenants are configured.
pub const ANONYMOUS: &str = "anonymous";

/// The gateway core shared by every request.
pub struct Proxy {
    cfg: Arc<Config>,
    registry: Arc<Registry>,
    policies: ArcSwap<PolicySet>,
    sessions: SessionTable,
    upstream: UpstreamClient,
    metrics: Arc<Metrics>,
    version: String,
}

/// What one task's trip upstream produced.
enum Outcome {
    Result {
        output: serde_json::Value,
        provenance: Provenance,
    },
    Failed(LdpError),
}

impl Proxy {
    /// A core over `registry` and `policies`, configured by `cfg`.
    pub fn new(
        cfg: Arc<Config>,
        registry: Arc<Registry>,
        policies: PolicySet,
        metrics: Arc<Metrics>,
    ) -> Proxy {
        let upstream = UpstreamClient::new(
            cfg.identity.delegate_id.clone(),
            cfg.upstream.connect_timeout,
            cfg.upstream.handshake_timeout,
        );
        let version = cfg
            .identity
            .model_version
            .clone()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned());
        Proxy {
            cfg,
            registry,
            policies: ArcSwap::from_pointee(policies),
            sessions: SessionTable::default(),
            upstream,
            metrics,
            version,
        }
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
    pub async fn handle(&self, env: Envelope, ctx: &RequestCtx) -> Result<Envelope, NotAccepted> {
        match &env.body {
            Body::Hello { .. } => Ok(self.hello(&env)),
            Body::SessionPropose { config } => Ok(self.propose(&env, config)),
            Body::TaskSubmit {
                task_id,
                skill,
                input,
                contract,
            } => Ok(self
                .submit(&env, ctx, task_id, skill, input, contract.as_ref())
                .await),
            Body::TaskCancel { task_id } => Ok(self.cancel(&env, task_id).await),
            Body::SessionClose { .. } => Ok(self.close(&env)),
            other => Err(NotAccepted(format!(
                "the gateway does not accept {} from clients",
                other.message_type().as_str()
            ))),
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

    fn propose(&self, env: &Envelope, config: &SessionConfig) -> Envelope {
        let own = &self.cfg.identity.trust_domain;
        let claimed = config
            .trust_domain
            .clone()
            .unwrap_or_else(|| own.name.clone());
        if !own.trusts(&claimed) {
            let reason = format!(
                "client trust domain '{claimed}' is not trusted by gateway domain '{}'",
                own.name
            );
            return self.reject(env, GatewayCode::TrustViolation, reason);
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
        }
        let payload = negotiate(&config.preferences(), &GATEWAY_MODES);
        let ttl = config
            .ttl_secs
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.sessions.default_ttl)
            .clamp(Duration::from_secs(1), self.cfg.sessions.max_ttl);
        let session = self.sessions.open(NewSession {
            owner: env.from.clone(),
            client_domain: claimed,
            required_domain: config.required_trust_domain.clone(),
            payload: payload.clone(),
            policy: config.policy.clone(),
            ttl,
        });
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

    #[allow(clippy::too_many_arguments)]
    async fn submit(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task_id: &str,
        skill: &str,
        input: &serde_json::Value,
        contract: Option<&DelegationContract>,
    ) -> Envelope {
        let Some(session) = self.sessions.get(&env.session_id, &env.from) else {
            return self.task_failed(env, task_id, self.session_not_found(env));
        };
        let named = ctx.policy.as_deref().or(session.policy.as_deref());
        let set = self.policies.load_full();
        let policy = match set.select(named, None, skill, ANONYMOUS) {
            Ok((p, _)) => p.clone(),
            Err(reason) => {
                let error = LdpError::gateway(GatewayCode::UnknownPolicy, reason);
                return self.task_failed(env, task_id, error);
            }
        };
        session.task_started(task_id, skill);
        let outcome = self
            .run_task(&session, &policy, env, task_id, skill, input, contract)
            .await;
        session.task_finished(task_id);
        match outcome {
            Outcome::Result { output, provenance } => env.reply(
                self.id(),
                Body::TaskResult {
                    task_id: task_id.to_owned(),
                    output,
                    provenance: Some(provenance),
                },
                env.payload_mode,
            ),
            Outcome::Failed(error) => self.task_failed(env, task_id, error),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_task(
        &self,
        session: &ClientSession,
        policy: &Policy,
        env: &Envelope,
        task_id: &str,
        skill: &str,
        input: &serde_json::Value,
        contract: Option<&DelegationContract>,
    ) -> Outcome {
        let need = Need {
            skill,
            client_domain: &session.client_domain,
            required_domain: session.required_domain.as_deref(),
            contract_max_cost_usd: contract
                .and_then(|c| c.policy.budget.as_ref())
                .and_then(|b| b.max_cost_usd),
            contract_ms_left: contract
                .and_then(|c| c.deadline_at())
                .map(|d| (d - chrono::Utc::now()).num_milliseconds().max(0) as u64),
        };
        let mut binding = match self.binding_for(session, policy, &need).await {
            Ok(b) => b,
            Err(e) => return Outcome::Failed(e),
        };
        let mut mode = binding.upstream.payload.mode;
        let mut notes: Vec<String> = Vec::new();
        let mut rehandshaken = false;
        let mut tries = 0;
        loop {
            tries += 1;
            let upstream_env = Envelope::new(
                binding.upstream.session_id.as_str(),
                self.id(),
                binding.upstream.delegate_id.as_str(),
                Body::TaskSubmit {
                    task_id: task_id.to_owned(),
                    skill: skill.to_owned(),
                    input: translate_input(input, env.payload_mode, mode),
                    contract: contract.cloned(),
                },
                mode,
            );
            let sent = Instant::now();
            let answer = self
                .upstream
                .send(
                    &binding.delegate.base_url,
                    &upstream_env,
                    self.cfg.upstream.task_timeout,
                )
                .await;
            if answer.is_ok() {
                binding.delegate.observe_latency(sent.elapsed());
            }
            let answer = match answer {
                Ok(a) => a,
                Err(e) => return Outcome::Failed(upstream_failed(&binding.delegate, &e)),
            };
            match answer.body {
                Body::TaskResult {
                    output, provenance, ..
                } => {
                    let provenance = self.route_provenance(
                        session, policy, &binding, mode, provenance, tries, &notes,
                    );
                    return Outcome::Result { output, provenance };
                }
                Body::TaskFailed { error, .. } if tries >= MAX_TRIES => {
                    return Outcome::Failed(error)
                }
                Body::TaskFailed { error, .. }
                    if error.code == "SESSION_NOT_FOUND" && !rehandshaken =>
                {
                    // The delegate's TTL ran out: one silent re-handshake with the same delegate.
                    rehandshaken = true;
                    session.unbind(skill, &binding.upstream.session_id);
                    binding = match self
                        .open_binding(session, skill, binding.delegate.clone())
                        .await
                    {
                        Ok(b) => b,
                        Err(e) => return Outcome::Failed(e),
                    };
                    mode = binding.upstream.payload.mode;
                    notes.push("upstream session expired; re-opened".into());
                }
                Body::TaskFailed { error, .. } if is_mode_failure(&error, mode) => {
                    let Some(next) = binding.upstream.payload.next_after(mode) else {
                        return Outcome::Failed(error);
                    };
                    notes.push(format!(
                        "{mode} failed upstream ({}); fell back to {next}",
                        error.code
                    ));
                    tracing::debug!(delegate = %binding.delegate.name, from = %mode, to = %next, "payload mode fallback");
                    mode = next;
                    // RFC §4.3: the session continues at the lower mode.
                    binding.upstream.payload.mode = next;
                    session.bind(skill, binding.clone());
                }
                Body::TaskFailed { error, .. } => return Outcome::Failed(error),
                other => {
                    let e = UpstreamError::Unexpected {
                        url: binding.delegate.base_url.clone(),
                        got: other.message_type().as_str(),
                    };
                    return Outcome::Failed(upstream_failed(&binding.delegate, &e));
                }
            }
        }
    }

    /// The delegate's provenance as the client sees it: the client's session id, and a first
    /// lineage entry for the gateway's routing step.
    #[allow(clippy::too_many_arguments)]
    fn route_provenance(
        &self,
        session: &ClientSession,
        policy: &Policy,
        binding: &Binding,
        mode: PayloadMode,
        provenance: Option<Provenance>,
        attempts: u32,
        notes: &[String],
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
                attempts: Some(attempts),
                note: (!notes.is_empty()).then(|| notes.join("; ")),
            },
        );
        p.normalize();
        p
    }

    /// The upstream binding for the task's skill: the existing one while its delegate stays
    /// healthy and passes the policy (session affinity), else a newly picked delegate with a
    /// new upstream session.
    async fn binding_for(
        &self,
        session: &ClientSession,
        policy: &Policy,
        need: &Need<'_>,
    ) -> Result<Binding, LdpError> {
        let skill = need.skill;
        if let Some(b) = session
            .binding(skill)
            .filter(|b| self.still_fits(b, policy, need))
        {
            return Ok(b);
        }
        let _guard = session.handshake.lock().await;
        if let Some(b) = session
            .binding(skill)
            .filter(|b| self.still_fits(b, policy, need))
        {
            return Ok(b);
        }
        let delegate = self.pick(policy, need)?;
        self.open_binding(session, skill, delegate).await
    }

    fn still_fits(&self, b: &Binding, policy: &Policy, need: &Need<'_>) -> bool {
        let index = self.registry.index();
        index
            .offers(need.skill)
            .iter()
            .find(|o| Arc::ptr_eq(&o.delegate, &b.delegate))
            .is_some_and(|o| routing::evaluate(o, policy, need, &self.cfg.routing).eligible())
    }

    fn pick(&self, policy: &Policy, need: &Need<'_>) -> Result<Arc<Delegate>, LdpError> {
        let index = self.registry.index();
        let offers: &[SkillOffer] = index.offers(need.skill);
        let mut rng = fastrand::Rng::new();
        match routing::decide(offers, policy, need, &self.cfg.routing, &mut rng) {
            Ok(p) => {
                let chosen = &offers[p.index];
                self.metrics
                    .routing_decisions
                    .with_label_values(&[policy.name.0.as_str(), chosen.name()])
                    .inc();
                tracing::debug!(skill = need.skill, policy = %policy.name, delegate = chosen.name(),
                    score = p.score, eligible = p.eligible, band = p.band, "routed");
                Ok(chosen.delegate.clone())
            }
            Err(e) => Err(LdpError::gateway(
                GatewayCode::NoEligibleDelegate,
                e.to_string(),
            )),
        }
    }

    /// Explains the routing decision for `skill` under `policy` (or the one selection would
    /// use) for a client in `client_domain`.
    pub fn explain(
        &self,
        skill: &str,
        policy: Option<&str>,
        tenant: Option<&str>,
        client_domain: Option<&str>,
    ) -> Result<Explanation, String> {
        let set = self.policies.load_full();
        let (policy, _) = set.select(policy, None, skill, tenant.unwrap_or(ANONYMOUS))?;
        let index = self.registry.index();
        let offers = index.offers(skill);
        let others: Vec<(String, String)> = self
            .registry
            .snapshot()
            .iter()
            .filter(|d| !offers.iter().any(|o| Arc::ptr_eq(&o.delegate, d)))
            .map(|d| {
                (
                    d.name.clone(),
                    d.card().map(|c| c.delegate_id.clone()).unwrap_or_default(),
                )
            })
            .collect();
        let need = Need {
            skill,
            client_domain: client_domain.unwrap_or(&self.cfg.identity.trust_domain.name),
            ..Need::default()
        };
        Ok(routing::explain(
            offers,
            &others,
            policy,
            &need,
            &self.cfg.routing,
        ))
    }

    async fn open_binding(
        &self,
        session: &ClientSession,
        skill: &str,
        delegate: Arc<Delegate>,
    ) -> Result<Binding, LdpError> {
        let card = delegate.card().ok_or_else(|| {
            LdpError::gateway(
                GatewayCode::UpstreamFailed,
                format!("delegate '{}' has no card", delegate.name),
            )
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
            .await
            .map_err(|e| upstream_failed(&delegate, &e))?;
        let binding = Binding { delegate, upstream };
        if let Some(old) = session.bind(skill, binding.clone()) {
            self.close_later(vec![old]);
        }
        Ok(binding)
    }

    async fn cancel(&self, env: &Envelope, task_id: &str) -> Envelope {
        let Some(session) = self.sessions.get(&env.session_id, &env.from) else {
            return self.task_failed(env, task_id, self.session_not_found(env));
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

    fn close(&self, env: &Envelope) -> Envelope {
        // Closing twice, or closing an unknown session, is acknowledged the same way: the
        // caller cannot learn whether someone else's session id exists.
        if let Some(session) = self.sessions.close(&env.session_id, &env.from) {
            self.close_later(session.take_bindings());
        }
        env.reply(
            self.id(),
            Body::SessionClose {
                reason: Some("acknowledged".into()),
            },
            PayloadMode::Text,
        )
    }

    /// Closes upstream sessions in the background (each call has the handshake deadline).
    fn close_later(&self, bindings: Vec<Binding>) {
        if bindings.is_empty() {
            return;
        }
        let upstream = self.upstream.clone();
        tokio::spawn(async move { close_all(&upstream, bindings).await });
    }

    /// Removes expired sessions and closes their upstream sessions; returns how many expired.
    pub async fn sweep_expired(&self) -> usize {
        let expired = self.sessions.take_expired();
        let n = expired.len();
        let bindings: Vec<Binding> = expired.iter().flat_map(|s| s.take_bindings()).collect();
        if n > 0 {
            tracing::debug!(sessions = n, upstream = bindings.len(), "sessions expired");
        }
        close_all(&self.upstream, bindings).await;
        n
    }

    /// Closes every session and its upstream sessions (shutdown).
    pub async fn close_everything(&self) {
        let bindings: Vec<Binding> = self
            .sessions
            .take_all()
            .iter()
            .flat_map(|s| s.take_bindings())
            .collect();
        close_all(&self.upstream, bindings).await;
    }

    /// Whether the gateway refuses `t` from clients (used by tests and docs).
    pub fn accepts(t: MessageType) -> bool {
        matches!(
            t,
            MessageType::Hello
                | MessageType::SessionPropose
                | MessageType::TaskSubmit
                | MessageType::TaskCancel
                | MessageType::SessionClose
        )
    }
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
