//! The pipeline's routing stage: the task's binding for its skill — the session's upstream
//! session reused while its delegate still fits (affinity), else the router's pick
//! (`crate::routing`, over the registry's skill index), claimed against its own rate limit,
//! and a new upstream session with it (an LDP delegate; the other kinds keep none).

use super::task::{RouteInfo, TaskCtx, TaskRun};
use crate::ldp::error::GatewayCode;
use crate::ldp::{LdpError, SessionConfig};
use crate::policy::Policy;
use crate::registry::Delegate;
use crate::routing::{self, Need, Offer};
use crate::session::{Binding, ClientSession};
use crate::state::SessionStore;
use crate::upstream::UpstreamError;
use std::sync::Arc;

super::stage!(
    /// Routing: a delegate and an upstream session for the task.
    Routing
);

/// Why no binding could be had.
pub(crate) enum NoBinding {
    /// Routing found no candidate (left).
    None(LdpError),
    /// The chosen delegate refused or failed the handshake.
    Open {
        delegate: Arc<Delegate>,
        error: UpstreamError,
    },
}

/// The delegate the router chose, and why.
pub(crate) struct Chosen {
    pub(crate) delegate: Arc<Delegate>,
    pub(crate) route: RouteInfo,
}

impl Routing<'_> {
    /// The upstream binding for the task's skill: the existing one while its delegate stays
    /// healthy, in service and passes the policy (session affinity), else a newly picked
    /// delegate with a new upstream session.
    pub(crate) async fn binding_for(
        &self,
        t: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
    ) -> Result<Binding, NoBinding> {
        let (session, policy) = (t.binds, &t.policy);
        if t.routed_afresh() {
            let picked = self.decide(policy, need).map_err(NoBinding::None)?;
            return self.bind_fresh(t, need, run, picked).await;
        }
        if let Some(b) = self.reusable(session, policy, need).await {
            return Ok(b);
        }
        let _guard = session.handshake.lock().await;
        if let Some(b) = self.reusable(session, policy, need).await {
            return Ok(b);
        }
        // Its first task ran on a lent session (an A2A context's): the same delegate, while it
        // fits, now with an upstream session of its own.
        if let Some(delegate) = session.take_lent(need.skill) {
            if self.fits(&delegate, policy, need) && self.admits(&delegate).await {
                return self
                    .open_binding(session, need.skill, delegate.clone())
                    .await
                    .map_err(|error| NoBinding::Open { delegate, error });
            }
        }
        // The bound delegate, if any, no longer fits or is at its own rate limit: choose
        // afresh without it.
        let stale = session.binding(need.skill).map(|b| b.delegate.name.clone());
        let exclude: Vec<String> = need.exclude.iter().cloned().chain(stale.clone()).collect();
        let without = Need {
            exclude: &exclude,
            ..*need
        };
        let picked = match self.decide(policy, &without) {
            Ok(picked) => picked,
            // Nobody else: decided again without the stale binding's exclusion, so that a
            // producer evidence excludes still serves on probation (a verified task) rather
            // than the session failing on every task while it stays bound.
            Err(_) if stale.is_some() => self.decide(policy, need).map_err(NoBinding::None)?,
            Err(e) => return Err(NoBinding::None(e)),
        };
        self.bind_picked(t, &without, run, picked).await
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
        (self.fits(&b.delegate, policy, need) && self.admits(&b.delegate).await).then_some(b)
    }

    /// Takes a token from the delegate's own rate limit, if it has one; a refusal is counted
    /// (`ldp_gateway_rate_limited_total{scope="delegate"}`) and the caller skips the delegate.
    async fn admits(&self, delegate: &Delegate) -> bool {
        // It answered 429: skipped, like a delegate at its own limit, for its Retry-After.
        if delegate.is_paused() {
            return false;
        }
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

    /// Binds the delegate the router chose for a failover (skipping `need.exclude`).
    pub(crate) async fn rebind(
        &self,
        t: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
        picked: Chosen,
    ) -> Result<Binding, NoBinding> {
        if t.routed_afresh() {
            return self.bind_fresh(t, need, run, picked).await;
        }
        let _guard = t.binds.handshake.lock().await;
        self.bind_picked(t, need, run, picked).await
    }

    /// A stateless task's binding: the delegate the router chose (claimed), with the
    /// upstream session the session already holds with it, else a new one.
    async fn bind_fresh(
        &self,
        t: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
        picked: Chosen,
    ) -> Result<Binding, NoBinding> {
        let delegate = self.claimed(t, need, run, picked).await?;
        if t.lent() {
            t.session.ran_lent(t.task.skill, &delegate);
        }
        let key = t.binding_key(&delegate.name);
        if let Some(b) = t.binds.binding(&key) {
            return Ok(b);
        }
        let _guard = t.binds.handshake.lock().await;
        if let Some(b) = t.binds.binding(&key) {
            return Ok(b);
        }
        self.open_binding(t.binds, &key, delegate.clone())
            .await
            .map_err(|error| NoBinding::Open { delegate, error })
    }

    /// Claims `picked` (its own rate limit) and opens an upstream session with it; the
    /// caller holds the session's handshake lock.
    async fn bind_picked(
        &self,
        t: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
        picked: Chosen,
    ) -> Result<Binding, NoBinding> {
        let delegate = self.claimed(t, need, run, picked).await?;
        // A trial is one task's: the session keeps no affinity to it.
        let trial = run.route.as_ref().is_some_and(|r| r.trial.is_some());
        let key = if trial {
            std::borrow::Cow::Owned(format!("{}\u{1f}{}", need.skill, delegate.name))
        } else {
            std::borrow::Cow::Borrowed(need.skill)
        };
        self.open_binding(t.binds, &key, delegate.clone())
            .await
            .map_err(|error| NoBinding::Open { delegate, error })
    }

    /// `picked` once claimed ([`Routing::claim`]), its routing decision kept for the row.
    async fn claimed(
        &self,
        t: &TaskCtx<'_>,
        need: &Need<'_>,
        run: &mut TaskRun,
        picked: Chosen,
    ) -> Result<Arc<Delegate>, NoBinding> {
        let Chosen { delegate, route } = self
            .claim(&t.policy, need, picked, run)
            .await
            .map_err(NoBinding::None)?;
        super::trace::route(t, &route, &delegate);
        run.route = Some(route);
        Ok(delegate)
    }

    /// Whether `delegate` still offers the skill, passes the policy and is not ejected.
    fn fits(&self, delegate: &Arc<Delegate>, policy: &Policy, need: &Need<'_>) -> bool {
        let index = self.registry.index();
        index
            .offers(need.skill)
            .iter()
            .find(|o| Arc::ptr_eq(&o.delegate, delegate))
            .is_some_and(|o| {
                routing::evaluate(o, policy, need, &self.cfg.routing).eligible()
                    && !o.load().ejected
            })
    }

    /// Asks the router for a delegate (pure: nothing is taken or counted).
    pub(crate) fn decide(&self, policy: &Arc<Policy>, need: &Need<'_>) -> Result<Chosen, LdpError> {
        let index = self.registry.index();
        let (offers, statics) = index.offers_with_statics(need.skill, policy, &self.cfg.routing);
        let mut rng = fastrand::Rng::new();
        let p = routing::decide_with(offers, &statics, policy, need, &self.cfg.routing, &mut rng)
            .map_err(|e| LdpError::gateway(GatewayCode::NoEligibleDelegate, e.to_string()))?;
        let chosen = &offers[p.index];
        Ok(Chosen {
            delegate: chosen.delegate.clone(),
            route: RouteInfo {
                score: p.score,
                eligible: p.eligible,
                band: p.band,
                excluded: p.excluded,
                trial: p.trial,
                components: p.components,
                candidates: offers.len(),
            },
        })
    }

    /// Takes the chosen delegate's own rate-limit token; a delegate at its limit is skipped,
    /// not failed, and the router asked again without it. When every one is limited, the
    /// run learns the shortest wait a 429 asked for.
    async fn claim(
        &self,
        policy: &Arc<Policy>,
        need: &Need<'_>,
        mut picked: Chosen,
        run: &mut TaskRun,
    ) -> Result<Chosen, LdpError> {
        // The delegates at their limits, by registry name (excluded) and as clients are told.
        let mut limited: Vec<String> = Vec::new();
        let mut told: Vec<String> = Vec::new();
        while !self.admits(&picked.delegate).await {
            if let Some(wait) = picked.delegate.paused_for() {
                run.retry_after = Some(run.retry_after.map_or(wait, |w| w.min(wait)));
            }
            limited.push(picked.delegate.name.clone());
            told.push(picked.delegate.client_name());
            let exclude: Vec<String> = need.exclude.iter().chain(&limited).cloned().collect();
            let need = Need {
                exclude: &exclude,
                ..*need
            };
            picked = self.decide(policy, &need).map_err(|_| {
                // Someone could serve it, but every one is at its limit: a rate limit, not
                // an impossibility.
                LdpError::gateway(
                    GatewayCode::RateLimited,
                    format!(
                        "every eligible delegate is at its own rate limit or asked to wait (HTTP 429): {}",
                        told.join(", ")
                    ),
                )
            })?;
        }
        let name = picked.delegate.name.as_str();
        self.metrics
            .routing_decisions
            .with_label_values(&[policy.name.0.as_str(), name])
            .inc();
        tracing::debug!(
            skill = need.skill,
            delegate = name,
            score = picked.route.score,
            eligible = picked.route.eligible,
            band = picked.route.band,
            "routed"
        );
        Ok(picked)
    }

    pub(crate) async fn open_binding(
        &self,
        session: &ClientSession,
        skill: &str,
        delegate: Arc<Delegate>,
    ) -> Result<Binding, UpstreamError> {
        let card = delegate.card().ok_or_else(|| UpstreamError::Malformed {
            url: delegate.base_url.clone(),
            reason: "no identity card".into(),
        })?;
        if !delegate.upstream.keeps_sessions() {
            return Ok(Self::bind_stateless(session, skill, delegate, &card));
        }
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
        match session.bind_first(skill, binding.clone()) {
            // Another task of the session bound the delegate while this one opened its own
            // (the first tasks of a session race so): theirs is used, this one closed
            // (nobody else knows it), and nobody's session is closed under them.
            Err(theirs) => {
                self.close_later(vec![std::mem::replace(&mut binding, theirs)]);
            }
            Ok(Some(old)) => {
                self.close_later(vec![old]);
                self.sessions.share_binding(session, skill, &binding).await;
            }
            Ok(None) => {
                // The session's first binding for the skill: another replica may have opened
                // one at the same moment. The first to publish wins; the other closes its
                // own (nobody else knows it) and uses the winner's.
                if let Some(winner) = self
                    .sessions
                    .share_first_binding(session, skill, &binding)
                    .await
                {
                    session.bind(skill, winner.clone());
                    self.close_later(vec![std::mem::replace(&mut binding, winner)]);
                }
            }
        }
        Ok(binding)
    }

    /// A binding to an OpenAI-backed delegate or an A2A agent: it keeps no LDP session, so
    /// none is opened (the gateway keeps the conversation instead, `openai::conversation`;
    /// an A2A agent keeps its context, `upstream/a2a.rs`). The id is the
    /// gateway's own, local to this replica; text is the only mode.
    fn bind_stateless(
        session: &ClientSession,
        skill: &str,
        delegate: Arc<Delegate>,
        card: &crate::ldp::IdentityCard,
    ) -> Binding {
        let upstream = crate::upstream::UpstreamSession {
            session_id: format!("openai-{}", crate::ldp::new_id()).into(),
            payload: crate::ldp::NegotiatedPayload {
                mode: crate::ldp::PayloadMode::Text,
                fallback_chain: Vec::new(),
            },
            delegate_id: card.delegate_id.as_str().into(),
        };
        let binding = Binding { delegate, upstream };
        session.bind(skill, binding.clone());
        binding
    }
}
