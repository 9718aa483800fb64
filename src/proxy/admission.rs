//! Admission of a request: what it must pass before the gateway acts on it (id sizes, the
//! tenant's rate, signatures and replays). A task's own admission (its session, the policy it
//! runs under and their limits) is the pipeline's first stage (`pipeline/admission.rs`).

use super::{Proxy, Refusal, RequestCtx};
use crate::config::RateConfig;
use crate::ldp::{Body, Envelope};
use crate::limits::Scope;
use crate::state::{LimitStore, NonceRefusal, NonceStore};
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
}
