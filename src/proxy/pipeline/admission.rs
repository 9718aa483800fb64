//! The pipeline's first stage: a task's admission. Its session (owner-bound, its idle clock
//! restarted; the shared state asked in cluster mode), the tenant × skill limit, the policy it
//! runs under (the session's, the request's, the tenant's default, `[match]`, the default;
//! one the tenant may use, on a task that has not gone round gateways too often), then the
//! policy's own limit, and the task marked running for status queries.

use super::task::{TaskCtx, TaskIn, TaskRun, Trip};
use crate::config::RateConfig;
use crate::ldp::error::GatewayCode;
use crate::ldp::{Envelope, LdpError};
use crate::limits::Scope;
use crate::policy::Policy;
use crate::proxy::{Refusal, RequestCtx};
use crate::session::ClientSession;
use crate::state::StatusStore;
use std::sync::Arc;

super::stage!(
    /// Admission: the session, the limits, the policy.
    Admission
);

/// What admission found.
pub(crate) enum Admitted {
    /// The task runs (or is answered refused, with a row: `refused`).
    Run(Admittance),
    /// Its session is gone and its caller opens a fresh one and submits again: answered
    /// without a row (its client never sees that answer).
    Lost(Box<Trip>),
}

/// A task admitted to run, or to be answered refused.
pub(crate) struct Admittance {
    /// The session it runs in (a stand-in when it has none: it is refused).
    pub(crate) session: Arc<ClientSession>,
    /// The policy it runs under (held: a reload does not change a running task).
    pub(crate) policy: Arc<Policy>,
    /// Why it is refused before routing, if it is.
    pub(crate) refused: Option<LdpError>,
}

impl Admission<'_> {
    /// Finds `task`'s session for `owner`, takes the tenant × skill token and chooses its
    /// policy. `Err` is a refusal without a row (a rate limit: 429).
    pub(crate) async fn admit(
        &self,
        env: &Envelope,
        ctx: &RequestCtx,
        task: TaskIn<'_>,
        owner: String,
    ) -> Result<Admitted, Refusal> {
        let (session, unchecked) = match self.session(&env.session_id, &owner).await {
            Ok(Some(s)) => (s, None),
            Ok(None) if task.retried_if_session_lost => {
                let reply = self.task_failed(env, task.task_id, self.session_not_found(env));
                let policy = self.policies.load().default_policy().clone();
                let trip = TaskRun::default().trip(Arc::new(reply), policy);
                return Ok(Admitted::Lost(Box::new(trip)));
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
        Ok(Admitted::Run(Admittance {
            session,
            policy,
            refused,
        }))
    }

    /// The admitted task starts: the policy's limit taken, the task marked running for status
    /// queries, the retry budget told. `Err` is a refusal without a row (429).
    pub(crate) async fn start(&self, t: &TaskCtx<'_>) -> Result<(), Refusal> {
        self.check_policy_limit(&t.policy).await?;
        self.statuses
            .running(
                &t.tenant.name,
                &t.env.from,
                t.task.task_id,
                t.env.session_id.clone(),
            )
            .await;
        self.retries.task();
        Ok(())
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
        self.0
            .admit(Scope::Policy, &policy.name.0, &rate, local)
            .await
    }

    /// Takes a token from the tenant × skill limit, if the tenant has one.
    async fn admit_task_skill(&self, ctx: &RequestCtx, skill: &str) -> Result<(), Refusal> {
        if let Some(limit) = &ctx.tenant.skill_limit {
            // Skills no delegate offers share one key, so client text cannot grow the maps.
            let skill = self.skill_key(skill);
            // Length-prefixed: a skill (client text) cannot make two tenants share a key.
            let key = format!("{}:{}:{}", ctx.tenant.name.len(), ctx.tenant.name, skill);
            self.0
                .admit(crate::limits::Scope::TenantSkill, &key, &limit.rate, || {
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
    fn task_policy(
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
