//! Admission: what a request must pass before the gateway acts on it (id sizes, rate limits,
//! signatures and replays, the policy a task runs under and its limit).

use super::{Proxy, Refusal, RequestCtx};
use crate::config::RateConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::LdpError;
use crate::ldp::{Body, Envelope};
use crate::limits::Scope;
use crate::policy::Policy;
use crate::state::{LimitStore, NonceRefusal, NonceStore};
use std::sync::Arc;
use std::time::Duration;

impl Proxy {
    /// Refuses ids longer than `security.max_id_bytes`: they are stored per session (the
    /// owner key, running tasks), in limiter keys and in the ledger, so a client must not be
    /// able to make them large.
    pub(super) fn check_ids(&self, env: &Envelope) -> Result<(), Refusal> {
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
            Body::TaskCancel { task_id } | Body::TaskUpdate { task_id, .. } => {
                check("body.task_id", Some(task_id))
            }
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

    /// One admission by the limit `rate` of `scope` at `key`, decided by the limit store:
    /// single node, `local` (this process's limiter for it); cluster mode, shared by every
    /// replica (`crate::state::limit_store`).
    pub(super) async fn admit(
        &self,
        scope: Scope,
        key: &str,
        rate: &RateConfig,
        local: impl FnOnce() -> Result<(), Duration> + Send,
    ) -> Result<(), Refusal> {
        self.limits
            .admit(scope, key, rate, local)
            .await
            .map_err(|wait| self.limited(scope, wait))
    }

    /// Counts a refusal by a rate limit.
    pub(super) fn limited(&self, scope: Scope, retry_after: Duration) -> Refusal {
        self.metrics
            .rate_limited
            .with_label_values(&[scope.as_str()])
            .inc();
        Refusal::RateLimited { scope, retry_after }
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

    /// Verifies the envelope's signature with the tenant's secret (refusing unsigned messages
    /// when the tenant requires signatures) and refuses replays of a signed message id + nonce
    /// within the window; the algorithm it was signed with, or `None` for an unsigned message
    /// the tenant accepts.
    pub(super) async fn check_signature(
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
        match self.nonces.first_use(env, chrono::Utc::now()).await {
            Ok(()) => Ok(Some(alg)),
            Err(NonceRefusal::Rejected(e)) => {
                Err(Refusal::Unauthenticated(format!("message rejected: {e}")))
            }
            Err(NonceRefusal::Unavailable(e)) => Err(Refusal::Unavailable(format!(
                "signed message not checked for replay: {e}"
            ))),
        }
    }

    /// Takes a token from the policy's `[limits]`, if it has one.
    pub(super) async fn check_policy_limit(
        &self,
        policy: &crate::policy::Policy,
    ) -> Result<(), Refusal> {
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

    /// Takes a token from the tenant × skill limit, if the tenant has one.
    pub(super) async fn admit_task_skill(
        &self,
        ctx: &RequestCtx,
        skill: &str,
    ) -> Result<(), Refusal> {
        if let Some(limit) = &ctx.tenant.skill_limit {
            // Skills no delegate offers share one key, so client text cannot grow the maps.
            let skill = self.skill_key(skill);
            // Length-prefixed: a skill (client text) cannot make two tenants share a key.
            let key = format!("{}:{}:{}", ctx.tenant.name.len(), ctx.tenant.name, skill);
            self.admit(crate::limits::Scope::TenantSkill, &key, &limit.rate, || {
                limit.check(skill)
            })
            .await?;
        }
        Ok(())
    }

    /// The policy a task runs under — PRODUCT.md order: the session's own policy, the request
    /// header, the tenant's default, `[match]`, the set's default — if the tenant may use it
    /// and the task has not gone round gateways too often. A refusal names the policy the
    /// ledger row is recorded under.
    pub(super) fn task_policy(
        &self,
        session_policy: Option<&str>,
        ctx: &RequestCtx,
        skill: &str,
    ) -> Result<Arc<Policy>, (Arc<Policy>, LdpError)> {
        // PRODUCT.md order: the session's own policy, then the request header.
        let named = session_policy.or(ctx.policy.as_deref());
        let set = self.policies.load_full();
        let tenant = &ctx.tenant;
        let chosen = match set.select(named, tenant.default_policy.as_deref(), skill, &tenant.name)
        {
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
                LdpError::gateway(GatewayCode::UnknownPolicy, reason.to_string()),
            )),
        };
        // A task that has gone round gateways too often is refused before it takes a token.
        let max_hops = self.cfg.upstream.max_hops;
        chosen.and_then(|p| {
            if (ctx.hops as usize) < max_hops {
                return Ok(p);
            }
            let reason = format!(
                "the task has passed through {} gateways (upstream.max_hops = {max_hops}): a routing loop?",
                ctx.hops
            );
            Err((p, LdpError::gateway(GatewayCode::LoopDetected, reason)))
        })
    }
}
