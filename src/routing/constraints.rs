//! Hard constraints: the card-only part (`static_eval`, cached per policy by the registry) and
//! the per-task part (health, load, trust, latency, contract), with the figures they compare.

use super::badness::Bad;
use super::quality::{blend, plausible, Observed, Prior};
use super::{Load, Need, Offer, RoutingParams};
use crate::ldp::trust::session_allowed;
use crate::ldp::{ClaimType, TrustDomain};
use crate::policy::Policy;
use serde::Serialize;

/// The hard constraints, in the order they are checked and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Constraint {
    /// The delegate is up.
    Healthy,
    /// Not already tried for this task (failover).
    NotTried,
    /// Not cut out by outlier detection (ignored under the panic threshold).
    NotEjected,
    /// Below its `max_in_flight` (and at most one task while probing).
    Capacity,
    /// RFC §7.2: the delegate's domain trusts the client's, and is the required one if any.
    TrustDomain,
    /// Policy `trust_domains`.
    PolicyTrustDomains,
    /// Policy `jurisdictions` / `deny_jurisdictions`.
    Jurisdiction,
    /// Policy `min_quality`.
    MinQuality,
    /// Policy `max_cost_usd`.
    MaxCost,
    /// Policy `max_latency_ms`.
    MaxLatency,
    /// Policy `payload_modes`.
    PayloadModes,
    /// Policy `min_context_window`.
    ContextWindow,
    /// Policy `model_families` / `deny_model_families`.
    ModelFamily,
    /// The contract's budget.
    ContractBudget,
    /// The contract's deadline.
    ContractDeadline,
    /// A verifier's `[verify] min_reliability`.
    MinReliability,
}

impl Constraint {
    /// All, in order.
    pub const ALL: [Constraint; 16] = [
        Constraint::Healthy,
        Constraint::NotTried,
        Constraint::NotEjected,
        Constraint::Capacity,
        Constraint::TrustDomain,
        Constraint::PolicyTrustDomains,
        Constraint::Jurisdiction,
        Constraint::MinQuality,
        Constraint::MaxCost,
        Constraint::MaxLatency,
        Constraint::PayloadModes,
        Constraint::ContextWindow,
        Constraint::ModelFamily,
        Constraint::ContractBudget,
        Constraint::ContractDeadline,
        Constraint::MinReliability,
    ];

    /// Stable name for logs, metrics and the ledger.
    pub fn as_str(self) -> &'static str {
        match self {
            Constraint::Healthy => "healthy",
            Constraint::NotTried => "not_tried",
            Constraint::NotEjected => "not_ejected",
            Constraint::Capacity => "capacity",
            Constraint::TrustDomain => "trust_domain",
            Constraint::PolicyTrustDomains => "policy_trust_domains",
            Constraint::Jurisdiction => "jurisdiction",
            Constraint::MinQuality => "min_quality",
            Constraint::MaxCost => "max_cost_usd",
            Constraint::MaxLatency => "max_latency_ms",
            Constraint::PayloadModes => "payload_modes",
            Constraint::ContextWindow => "min_context_window",
            Constraint::ModelFamily => "model_family",
            Constraint::ContractBudget => "contract_budget",
            Constraint::ContractDeadline => "contract_deadline",
            Constraint::MinReliability => "min_reliability",
        }
    }

    pub(super) fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// Where a latency figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencySource {
    /// Measured by the gateway (EWMA).
    Observed,
    /// The card's p50 hint.
    Declared,
    /// Nobody says.
    Unknown,
}

/// The numbers one delegate is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// The quality routing uses: declared and observed blended ([`super::blend`]).
    pub quality: Option<f64>,
    /// What the card declares.
    pub declared_quality: Option<f64>,
    /// What the gateway has observed (verifier votes, client ratings), with its count.
    pub observed_quality: Option<Observed>,
    /// Price per call, USD (declared price, else tier price).
    pub cost_usd: Option<f64>,
    /// Latency, ms.
    pub latency_ms: Option<f64>,
    /// Where `latency_ms` came from.
    pub latency_source: LatencySource,
    /// How the quality claim was established.
    pub claim_type: Option<ClaimType>,
}

impl Figures {
    /// The quality `min_quality` is compared with ([`plausible`]).
    pub fn plausible_quality(&self) -> Option<f64> {
        plausible(
            self.declared_quality,
            self.claim_type,
            self.observed_quality,
        )
    }
}

/// One candidate's evaluation: figures and the set of constraints it failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Its figures.
    pub figures: Figures,
    pub(super) failed: u16,
}

impl Evaluation {
    /// Whether every hard constraint passed.
    pub fn eligible(&self) -> bool {
        self.failed == 0
    }

    /// Whether evidence alone excludes it: `min_quality` is its only failure and its
    /// declared quality, without the evidence, would meet `min_quality` (a producer
    /// probation may try).
    pub fn excluded_by_evidence(&self, min_quality: Option<f64>) -> bool {
        self.failed == Constraint::MinQuality.bit()
            && self.figures.observed_quality.is_some()
            && min_quality.is_some_and(|m| self.figures.declared_quality.is_some_and(|d| d >= m))
    }

    /// Whether `c` failed.
    pub fn failed(&self, c: Constraint) -> bool {
        self.failed & c.bit() != 0
    }

    /// The constraints that failed, in order.
    pub fn failures(&self) -> impl Iterator<Item = Constraint> + '_ {
        Constraint::ALL.into_iter().filter(|c| self.failed(*c))
    }
}

/// The figures of an offer.
pub fn figures<O: Offer>(o: &O, params: &RoutingParams, now_ms: i64) -> Figures {
    declared(o, params).with_observed(o.observed_latency_ms(), o.observed_quality(now_ms, None))
}

/// What a policy concludes about an offer from its card alone: the constraints that depend
/// on nothing else (policy trust domains, jurisdictions, max cost, payload modes, context
/// window, model families) and the declared figures. The same for every task until the card
/// or the policy changes, so the registry keeps them per policy and skill ([`statics`]) and
/// a decision only checks what moves: health, load, the session's trust domains, observed
/// latency and quality (so `min_quality`), the task's contract.
///
/// It also keeps the declared figures' badness with their logarithms (quality's error rate,
/// cost, declared latency: [`Bad`]), so a decision takes no `ln` for what the card says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Static {
    pub(super) failed: u16,
    pub(super) quality: Option<f64>,
    pub(super) cost_usd: Option<f64>,
    pub(super) declared_latency_ms: Option<f64>,
    pub(super) claim_type: Option<ClaimType>,
    /// Badness of the declared quality, cost and latency, in the score's order.
    pub(super) bad: [Option<Bad>; 3],
    /// The first offer (index in the slice [`statics`] made) whose card has the same trust
    /// domain: a decision checks each distinct domain against the session once and reads
    /// the answer for the others. [`NO_DOMAIN`] from [`static_eval`] alone: checked per offer.
    pub(super) domain: u32,
}

/// [`Static::domain`] when no representative is known.
pub(super) const NO_DOMAIN: u32 = u32::MAX;

impl Static {
    /// Whether every card-only constraint passed.
    pub fn passes(&self) -> bool {
        self.failed == 0
    }

    /// The card's quality claim, the prior learned quality is blended with.
    pub fn prior(&self) -> Prior {
        Prior {
            declared: self.quality,
            claim: self.claim_type,
        }
    }
}

/// What the card declares: quality, price (declared, else the tier's), p50 latency.
fn declared<O: Offer>(o: &O, params: &RoutingParams) -> Static {
    let h = o.hints();
    let cost_usd = h
        .cost_per_call_usd
        .or_else(|| h.cost_tier.map(|t| params.tier_prices.of(t)));
    let declared_latency_ms = h.latency_p50_ms.map(|ms| ms as f64);
    Static {
        failed: 0,
        quality: h.quality,
        cost_usd,
        declared_latency_ms,
        claim_type: h.claim_type,
        bad: [
            h.quality.map(Bad::quality),
            cost_usd.map(Bad::amount),
            declared_latency_ms.map(Bad::amount),
        ],
        domain: NO_DOMAIN,
    }
}

impl Static {
    /// The figures: latency observed when measured, else declared; quality blended with
    /// what was observed.
    pub(super) fn with_observed(
        &self,
        observed_ms: Option<f64>,
        observed_quality: Option<Observed>,
    ) -> Figures {
        let (latency_ms, latency_source) = match (observed_ms, self.declared_latency_ms) {
            (Some(ms), _) => (Some(ms), LatencySource::Observed),
            (None, Some(ms)) => (Some(ms), LatencySource::Declared),
            (None, None) => (None, LatencySource::Unknown),
        };
        Figures {
            quality: blend(self.quality, self.claim_type, observed_quality),
            declared_quality: self.quality,
            observed_quality,
            cost_usd: self.cost_usd,
            latency_ms,
            latency_source,
            claim_type: self.claim_type,
        }
    }
}

/// The card-only part of [`evaluate`] for one offer.
pub fn static_eval<O: Offer>(o: &O, policy: &Policy, params: &RoutingParams) -> Static {
    let card = o.card();
    let req = &policy.require;
    let mut st = declared(o, params);
    let cost_usd = st.cost_usd;
    let mut failed = 0u16;
    let mut fail = |c: Constraint, bad: bool| {
        if bad {
            failed |= c.bit();
        }
    };
    // An unknown value meets a bound only if the operator said so.
    let unknown = !params.unknown_passes_bounds;
    fail(
        Constraint::PolicyTrustDomains,
        !req.trust_domains.is_empty() && !req.trust_domains.contains(&card.trust_domain.name),
    );
    let j = card.jurisdiction.as_deref();
    fail(
        Constraint::Jurisdiction,
        (!req.jurisdictions.is_empty()
            && !j.is_some_and(|j| req.jurisdictions.iter().any(|g| g.matches(j))))
            || j.is_some_and(|j| req.deny_jurisdictions.iter().any(|g| g.matches(j))),
    );
    fail(
        Constraint::MaxCost,
        bound(req.max_cost_usd, cost_usd, unknown, |max, c| c <= max),
    );
    fail(
        Constraint::PayloadModes,
        !req.payload_modes.is_empty()
            && !req
                .payload_modes
                .iter()
                .any(|m| card.supported_payload_modes.contains(m)),
    );
    fail(
        Constraint::ContextWindow,
        bound(
            req.min_context_window.map(|m| m as f64),
            card.context_window.map(|c| c as f64),
            unknown,
            |min, c| c >= min,
        ),
    );
    let fam = card.model_family.as_str();
    fail(
        Constraint::ModelFamily,
        (!req.model_families.is_empty() && !req.model_families.iter().any(|g| g.matches(fam)))
            || req.deny_model_families.iter().any(|g| g.matches(fam)),
    );
    st.failed = failed;
    st
}

/// [`static_eval`] of every offer, in order, each pointing at the first offer with its
/// trust domain ([`Static::domain`]).
pub fn statics<O: Offer>(offers: &[O], policy: &Policy, params: &RoutingParams) -> Vec<Static> {
    let mut first: std::collections::HashMap<&TrustDomain, u32> = Default::default();
    offers
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut st = static_eval(o, policy, params);
            if let Ok(i) = u32::try_from(i) {
                st.domain = *first.entry(&o.card().trust_domain).or_insert(i);
            }
            st
        })
        .collect()
}

/// Checks every hard constraint of `policy` and `need` against one offer.
pub fn evaluate<O: Offer>(
    o: &O,
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Evaluation {
    evaluate_with(o, &static_eval(o, policy, params), policy, need, params).0
}

/// [`evaluate`] given the offer's [`Static`] part: only what changes per task is checked.
/// Also returns the load it read.
pub(super) fn evaluate_with<O: Offer>(
    o: &O,
    st: &Static,
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> (Evaluation, Load) {
    let f = st.with_observed(
        o.observed_latency_ms(),
        o.observed_quality(need.now_ms, need.rater),
    );
    let mut failed = st.failed;
    let mut fail = |c: Constraint, bad: bool| {
        if bad {
            failed |= c.bit();
        }
    };
    let unknown = !params.unknown_passes_bounds;
    fail(Constraint::Healthy, !o.healthy());
    fail(
        Constraint::NotTried,
        need.exclude.iter().any(|n| n == o.name()),
    );
    // Ejection depends on the whole candidate set (the panic threshold): `decide` applies it.
    let load = o.load();
    fail(Constraint::Capacity, !load.has_room());
    fail(
        Constraint::TrustDomain,
        !session_allowed(
            &o.card().trust_domain,
            need.client_domain,
            need.required_domain,
        ),
    );
    // Worked out only when the policy has the bound.
    if let Some(min) = policy.require.min_quality {
        fail(
            Constraint::MinQuality,
            bound(Some(min), f.plausible_quality(), unknown, |min, q| q >= min),
        );
    }
    fail(
        Constraint::MaxLatency,
        bound(
            policy.require.max_latency_ms.map(|m| m as f64),
            f.latency_ms,
            unknown,
            |max, l| l <= max,
        ),
    );
    fail(
        Constraint::ContractBudget,
        bound(need.contract_max_cost_usd, f.cost_usd, unknown, |max, c| {
            c <= max
        }),
    );
    fail(
        Constraint::ContractDeadline,
        bound(
            need.contract_ms_left.map(|m| m as f64),
            f.latency_ms,
            unknown,
            |left, l| l <= left,
        ),
    );
    // The reliability is the vote's weight (the blend, no benefit of the doubt); an
    // unknown one passes: calibration measures it.
    fail(
        Constraint::MinReliability,
        bound(need.min_reliability, f.quality, false, |min, r| r >= min),
    );
    (Evaluation { figures: f, failed }, load)
}

/// True when a bound exists and the value does not meet it (or is unknown and unknowns fail).
#[inline]
pub(super) fn bound(
    limit: Option<f64>,
    value: Option<f64>,
    unknown_fails: bool,
    ok: impl Fn(f64, f64) -> bool,
) -> bool {
    match (limit, value) {
        (None, _) => false,
        (Some(_), None) => unknown_fails,
        (Some(l), Some(v)) => !ok(l, v),
    }
}
