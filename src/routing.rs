//! Choosing a delegate for a task: hard constraints, then a weighted score, then a pick among
//! near-equals. Pure: it sees cards, hints and observed numbers handed to it, never sockets or
//! clocks; randomness comes in as an `fastrand::Rng`.
//!
//! Two entry points share one set of constraints and one score: [`decide_with`] for the hot
//! path (one pass over the offers with the card-only work cached, no allocation; why it
//! scans rather than keeps a sorted order is in `decide`'s module doc) and [`explain`] for
//! operators (every constraint with the value it compared, every score worked out afresh).
//! A property test holds the two, and the full evaluation the hot path replaced, to the
//! same decisions.

mod badness;
mod constraints;
mod decide;
mod explain;
mod quality;
mod score;

pub use badness::Bad;
pub use constraints::{
    evaluate, figures, static_eval, statics, Constraint, Evaluation, Figures, LatencySource, Static,
};
pub use decide::{decide, decide_with, scores, Exclusions, NoEligible, Pick, Trial};
pub use explain::{explain, ConstraintRow, Explanation, Picked, RowView};
pub use quality::{blend, claim_weight, plausible, Evidence, Observed, Prior};
pub use score::{score, Components, RULE as SCORING_RULE};

use crate::ldp::{CapabilityHints, CostTier, IdentityCard};
use serde::{Deserialize, Serialize};

/// Prices for the RFC cost tiers, USD per call (`[routing] tier_prices`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPrices {
    /// `low`.
    pub low: f64,
    /// `medium`.
    pub medium: f64,
    /// `high`.
    pub high: f64,
}

impl Default for TierPrices {
    fn default() -> Self {
        TierPrices {
            low: 0.001,
            medium: 0.01,
            high: 0.05,
        }
    }
}

impl TierPrices {
    /// The price of `tier`.
    pub fn of(&self, tier: CostTier) -> f64 {
        match tier {
            CostTier::Low => self.low,
            CostTier::Medium => self.medium,
            CostTier::High => self.high,
        }
    }
}

/// How routing treats what cards do not say (`[routing]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingParams {
    /// Cost tiers → USD per call.
    pub tier_prices: TierPrices,
    /// Normalised score (0..1) given to a quality, cost or latency a card does not declare:
    /// neither the best nor zero.
    pub missing_score: f64,
    /// Whether an undeclared value passes a bound on it (`min_quality`, `max_cost_usd`,
    /// `max_latency_ms`, `min_context_window`, the contract's budget and deadline). Default
    /// false: a bound is only met by a value that is known to meet it.
    pub unknown_passes_bounds: bool,
    /// If outlier ejections would leave fewer than this fraction of the otherwise eligible
    /// delegates, ejections are ignored for that decision (route to all).
    pub panic_threshold: f64,
    /// A task reserves its delegate's declared cost × this against budgets (actual costs run
    /// a little above the declared price; the margin keeps budgets from being overshot).
    pub budget_reserve_factor: f64,
    /// The share of decisions (0..1, default [`DEFAULT_EXPLORE`]; 0 turns it off) that may
    /// go to a trial: an eligible delegate outside the band that is unmeasured (no observed
    /// latency; under `[verify]`, little quality evidence), or, for a verified task, a
    /// producer on probation (excluded by quality evidence alone).
    pub explore: f64,
}

/// Default `[routing] explore`: one decision in twenty may measure the unknown.
pub const DEFAULT_EXPLORE: f64 = 0.05;

impl Default for RoutingParams {
    fn default() -> Self {
        RoutingParams {
            tier_prices: TierPrices::default(),
            missing_score: 0.5,
            unknown_passes_bounds: false,
            panic_threshold: 0.5,
            budget_reserve_factor: 1.25,
            explore: DEFAULT_EXPLORE,
        }
    }
}

/// What routing needs to know about one delegate offering the skill.
pub trait Offer {
    /// Registry name.
    fn name(&self) -> &str;
    /// Its card.
    fn card(&self) -> &IdentityCard;
    /// The skill's hints, card-level profiles already folded in.
    fn hints(&self) -> &CapabilityHints;
    /// Whether it is up.
    fn healthy(&self) -> bool;
    /// Observed latency EWMA in ms, once it has samples.
    fn observed_latency_ms(&self) -> Option<f64>;
    /// [`Offer::observed_latency_ms`] with its badness on the score's scale. The default
    /// takes the logarithm here; an offer that keeps it with the EWMA (the registry's) saves
    /// a decision that `ln` per candidate.
    fn observed_latency(&self) -> Option<Latency> {
        self.observed_latency_ms().map(Latency::new)
    }
    /// Observed quality at the skill (verifier votes, client ratings) as of `now_ms` (Unix
    /// ms), once there is any: the shared evidence, plus `rater`'s own ratings when named.
    fn observed_quality(&self, now_ms: i64, rater: Option<&str>) -> Option<Observed> {
        let _ = (now_ms, rater);
        None
    }
    /// [`Offer::observed_quality`] with what it makes of the card's claim `prior` (blend,
    /// plausible value, the blend's error rate and its logarithm): some exactly when
    /// `observed_quality` is. The default works it out per call; the registry keeps it per
    /// estimate until evidence arrives or its decay moves it.
    fn evidence(&self, now_ms: i64, rater: Option<&str>, prior: Prior) -> Option<Evidence> {
        self.observed_quality(now_ms, rater)
            .map(|o| Evidence::of(prior, o))
    }
    /// Relative share among near-equals.
    fn weight(&self) -> f64;
    /// Its load and outlier state now (default: idle, never ejected).
    fn load(&self) -> Load {
        Load::idle()
    }
}

/// An observed latency with its badness (the score's scale), its logarithm taken when it
/// was observed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// The latency, ms.
    pub ms: f64,
    /// Its badness: `ms` floored at 0, with its logarithm.
    pub bad: Bad,
}

impl Latency {
    /// `ms` and its badness.
    pub fn new(ms: f64) -> Latency {
        Latency {
            ms,
            bad: Bad::amount(ms),
        }
    }
}

/// An offer's load and outlier state at decision time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Tasks in flight.
    pub in_flight: u32,
    /// Most tasks it may have in flight.
    pub max_in_flight: Option<u32>,
    /// Cut out by outlier detection.
    pub ejected: bool,
    /// Back for one trial task (at most one in flight).
    pub probing: bool,
    /// Share multiplier during slow start (1 otherwise).
    pub weight_factor: f64,
}

impl Load {
    /// No tasks, no limits, not ejected.
    pub fn idle() -> Load {
        Load {
            in_flight: 0,
            max_in_flight: None,
            ejected: false,
            probing: false,
            weight_factor: 1.0,
        }
    }

    /// Whether it can take one more task.
    #[inline]
    pub fn has_room(&self) -> bool {
        let cap = if self.probing {
            Some(self.max_in_flight.map_or(1, |m| m.min(1)))
        } else {
            self.max_in_flight
        };
        cap.is_none_or(|c| self.in_flight < c)
    }
}

/// The task-side inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Need<'a> {
    /// The skill.
    pub skill: &'a str,
    /// The client's verified trust domain (C): the delegate's domain must trust it.
    pub client_domain: &'a str,
    /// The session's required delegate domain (R).
    pub required_domain: Option<&'a str>,
    /// Delegates already tried for this task (by registry name): failover skips them.
    pub exclude: &'a [String],
    /// The delegation contract's `policy.budget.max_cost_usd`.
    pub contract_max_cost_usd: Option<f64>,
    /// Milliseconds left until the contract's deadline (0 if already past).
    pub contract_ms_left: Option<u64>,
    /// Unix ms now: learned quality is aged to it (routing reads no clock of its own).
    pub now_ms: i64,
    /// The tenant whose own ratings count beside the shared evidence (none: the shared
    /// evidence only, as for choosing verifiers).
    pub rater: Option<&'a str>,
    /// The task will be verified: a producer excluded by quality evidence alone may be
    /// picked on probation, and one is when evidence excludes every producer.
    pub probation: bool,
    /// Choosing a verifier: the policy's `[verify] min_reliability` (its quality at the
    /// verify skill is its reliability). No trials are made for verifiers.
    pub min_reliability: Option<f64>,
}

/// Every offer's evaluation, the components and score of the eligible ones (`None` for the
/// rest), and the band floor.
pub type Scored = (Vec<Evaluation>, Vec<Option<(Components, f64)>>, f64);

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
