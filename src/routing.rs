//! Choosing a delegate for a task: hard constraints, then a weighted score, then a pick among
//! near-equals. Pure: it sees cards, hints and observed numbers handed to it, never sockets or
//! clocks; randomness comes in as an `fastrand::Rng`.
//!
//! Two entry points share one evaluation: [`decide`] for the hot path (no strings, no
//! per-candidate allocation beyond the score buffer) and [`explain`] for operators (every
//! constraint with the value it compared).

mod explain;

pub use explain::{explain, ConstraintRow, Explanation, Picked, RowView};

use crate::ldp::trust::session_allowed;
use crate::ldp::{CapabilityHints, ClaimType, CostTier, IdentityCard};
use crate::policy::Policy;
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
}

impl Default for RoutingParams {
    fn default() -> Self {
        RoutingParams {
            tier_prices: TierPrices::default(),
            missing_score: 0.5,
            unknown_passes_bounds: false,
            panic_threshold: 0.5,
            budget_reserve_factor: 1.25,
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
    /// Relative share among near-equals.
    fn weight(&self) -> f64;
    /// Its load and outlier state now (default: idle, never ejected).
    fn load(&self) -> Load {
        Load::idle()
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
}

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
}

impl Constraint {
    /// All, in order.
    pub const ALL: [Constraint; 15] = [
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
        }
    }

    fn bit(self) -> u16 {
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
    /// Declared quality.
    pub quality: Option<f64>,
    /// Price per call, USD (declared price, else tier price).
    pub cost_usd: Option<f64>,
    /// Latency, ms.
    pub latency_ms: Option<f64>,
    /// Where `latency_ms` came from.
    pub latency_source: LatencySource,
    /// How the quality claim was established.
    pub claim_type: Option<ClaimType>,
}

/// One candidate's evaluation: figures and the set of constraints it failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// Its figures.
    pub figures: Figures,
    failed: u16,
}

impl Evaluation {
    /// Whether every hard constraint passed.
    pub fn eligible(&self) -> bool {
        self.failed == 0
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
pub fn figures<O: Offer>(o: &O, params: &RoutingParams) -> Figures {
    declared(o, params).with_observed(o.observed_latency_ms())
}

/// What a policy concludes about an offer from its card alone: the constraints that depend
/// on nothing else (policy trust domains, jurisdictions, min quality, max cost, payload modes,
/// context window, model families) and the declared figures. The same for every task until
/// the card or the policy changes, so the registry keeps them per policy and skill
/// ([`statics`]) and a decision only checks what moves: health, load, the session's trust
/// domains, observed latency, the task's contract.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Static {
    failed: u16,
    quality: Option<f64>,
    cost_usd: Option<f64>,
    declared_latency_ms: Option<f64>,
    claim_type: Option<ClaimType>,
}

/// What the card declares: quality, price (declared, else the tier's), p50 latency.
fn declared<O: Offer>(o: &O, params: &RoutingParams) -> Static {
    let h = o.hints();
    Static {
        failed: 0,
        quality: h.quality,
        cost_usd: h
            .cost_per_call_usd
            .or_else(|| h.cost_tier.map(|t| params.tier_prices.of(t))),
        declared_latency_ms: h.latency_p50_ms.map(|ms| ms as f64),
        claim_type: h.claim_type,
    }
}

impl Static {
    /// The figures, latency observed when measured, else declared.
    fn with_observed(&self, observed_ms: Option<f64>) -> Figures {
        let (latency_ms, latency_source) = match (observed_ms, self.declared_latency_ms) {
            (Some(ms), _) => (Some(ms), LatencySource::Observed),
            (None, Some(ms)) => (Some(ms), LatencySource::Declared),
            (None, None) => (None, LatencySource::Unknown),
        };
        Figures {
            quality: self.quality,
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
    let (quality, cost_usd) = (st.quality, st.cost_usd);
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
        Constraint::MinQuality,
        bound(req.min_quality, quality, unknown, |min, q| q >= min),
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

/// [`static_eval`] of every offer, in order.
pub fn statics<O: Offer>(offers: &[O], policy: &Policy, params: &RoutingParams) -> Vec<Static> {
    offers
        .iter()
        .map(|o| static_eval(o, policy, params))
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
fn evaluate_with<O: Offer>(
    o: &O,
    st: &Static,
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> (Evaluation, Load) {
    let f = st.with_observed(o.observed_latency_ms());
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
    (Evaluation { figures: f, failed }, load)
}

/// True when a bound exists and the value does not meet it (or is unknown and unknowns fail).
fn bound(
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

/// Normalised score components, each in 0..=1 (1 = best in the candidate set).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Components {
    /// Quality ÷ best quality.
    pub quality: f64,
    /// Cheapest cost ÷ this cost.
    pub cost: f64,
    /// Fastest latency ÷ this latency.
    pub latency: f64,
}

/// Best figures among eligible candidates, the scale for normalising.
#[derive(Debug, Clone, Copy, Default)]
struct Scale {
    max_quality: Option<f64>,
    min_cost: Option<f64>,
    min_latency: Option<f64>,
}

impl Scale {
    fn add(&mut self, f: &Figures) {
        if let Some(q) = f.quality {
            self.max_quality = Some(self.max_quality.map_or(q, |m| m.max(q)));
        }
        if let Some(c) = f.cost_usd {
            self.min_cost = Some(self.min_cost.map_or(c, |m| m.min(c)));
        }
        if let Some(l) = f.latency_ms {
            self.min_latency = Some(self.min_latency.map_or(l, |m| m.min(l)));
        }
    }

    fn components(&self, f: &Figures, missing: f64) -> Components {
        // Small epsilons keep free (0 USD) and instant (0 ms) delegates finite and best.
        const COST_EPS: f64 = 1e-6;
        const LAT_EPS: f64 = 1.0;
        let quality = match (f.quality, self.max_quality) {
            (Some(q), Some(m)) if m > 0.0 => (q / m).clamp(0.0, 1.0),
            (Some(_), _) => 1.0,
            (None, _) => missing,
        };
        let cost = match (f.cost_usd, self.min_cost) {
            (Some(c), Some(m)) => ((m + COST_EPS) / (c + COST_EPS)).clamp(0.0, 1.0),
            _ => missing,
        };
        let latency = match (f.latency_ms, self.min_latency) {
            (Some(l), Some(m)) => ((m + LAT_EPS) / (l + LAT_EPS)).clamp(0.0, 1.0),
            _ => missing,
        };
        Components {
            quality,
            cost,
            latency,
        }
    }
}

/// The weighted score of some components under `policy` (0..=1).
pub fn score(c: &Components, policy: &Policy) -> f64 {
    let w = &policy.weights;
    let total = w.quality + w.cost + w.latency;
    if total <= 0.0 {
        return 0.0;
    }
    (w.quality * c.quality + w.cost * c.cost + w.latency * c.latency) / total
}

/// The outcome of a decision on the hot path.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    /// Index of the chosen offer.
    pub index: usize,
    /// Its score.
    pub score: f64,
    /// How many offers passed every constraint.
    pub eligible: usize,
    /// How many shared the top band.
    pub band: usize,
    /// `(constraint, offers it excluded)`, for constraints that excluded any.
    pub excluded: Vec<(Constraint, usize)>,
}

/// Why nothing could be picked: the skill, and per constraint how many offers it excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoEligible {
    /// The skill asked for.
    pub skill: String,
    /// How many delegates offer it.
    pub offering: usize,
    /// `(constraint, offers it excluded)`, for constraints that excluded any.
    pub excluded: Vec<(Constraint, usize)>,
}

impl std::fmt::Display for NoEligible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.offering == 0 {
            return write!(f, "no delegate offers skill '{}'", self.skill);
        }
        write!(
            f,
            "{} delegate(s) offer skill '{}' but none passes the constraints (",
            self.offering, self.skill
        )?;
        for (i, (c, n)) in self.excluded.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: {n} excluded", c.as_str())?;
        }
        f.write_str(")")
    }
}

/// The offers that pass every constraint, with outlier ejection applied unless that would
/// leave fewer than `panic_threshold` of them (then the ejected stay: route to all).
struct Survivors {
    index: Vec<usize>,
    figures: Vec<Figures>,
    loads: Vec<Load>,
    excluded: [usize; Constraint::ALL.len()],
    evaluated: usize,
}

fn survivors<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Survivors {
    let cap = offers.len().min(64);
    let mut s = Survivors {
        index: Vec::with_capacity(cap),
        figures: Vec::with_capacity(cap),
        loads: Vec::with_capacity(cap),
        excluded: [0; Constraint::ALL.len()],
        evaluated: offers.len(),
    };
    let mut ejected = 0usize;
    for (i, (o, st)) in offers.iter().zip(statics).enumerate() {
        let (e, load) = evaluate_with(o, st, policy, need, params);
        if e.eligible() {
            ejected += usize::from(load.ejected);
            s.index.push(i);
            s.figures.push(e.figures);
            s.loads.push(load);
        } else {
            // Each set bit is a failed constraint (`Constraint as u16` is its bit).
            let mut bits = e.failed;
            while bits != 0 {
                s.excluded[bits.trailing_zeros() as usize] += 1;
                bits &= bits - 1;
            }
        }
    }
    let n = s.index.len();
    if ejected > 0 && ((n - ejected) as f64) >= params.panic_threshold * n as f64 {
        let mut k = 0;
        while k < s.index.len() {
            if s.loads[k].ejected {
                s.index.swap_remove(k);
                s.figures.swap_remove(k);
                s.loads.swap_remove(k);
            } else {
                k += 1;
            }
        }
        s.excluded[Constraint::NotEjected as usize] += ejected;
    }
    s
}

fn exclusions(counts: &[usize; Constraint::ALL.len()]) -> Vec<(Constraint, usize)> {
    Constraint::ALL
        .into_iter()
        .zip(counts.iter().copied())
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Picks one of `band` (positions in the survivors) at random, weighted by `weight`,
/// skipping `not`; uniform if every weight is zero.
fn weighted(
    band: &[usize],
    weight: &dyn Fn(usize) -> f64,
    not: Option<usize>,
    rng: &mut fastrand::Rng,
) -> usize {
    let total: f64 = band
        .iter()
        .filter(|k| Some(**k) != not)
        .map(|k| weight(*k))
        .sum();
    let others = band.iter().copied().filter(|k| Some(*k) != not);
    if total <= 0.0 {
        let n = band.len() - usize::from(not.is_some_and(|x| band.contains(&x)));
        return others.clone().nth(rng.usize(..n.max(1))).unwrap_or(band[0]);
    }
    let mut ticket = rng.f64() * total;
    let mut last = band[0];
    for k in others {
        let w = weight(k);
        if ticket < w {
            return k;
        }
        ticket -= w;
        last = k;
    }
    last
}

/// Chooses among `offers` (the delegates offering `need.skill`): filter by every hard
/// constraint and outlier ejection, score the rest, then among those within
/// `policy.tolerance` of the best, the power of two random choices: two drawn by weight
/// (× slow-start factor), the one with less work queued — (in flight + 1) × observed latency
/// — wins (ties go to a weighted coin). An unmeasured delegate counts as fast, so it gets
/// explored, but its in-flight count still spreads the load.
pub fn decide<O: Offer>(
    offers: &[O],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    decide_with(
        offers,
        &statics(offers, policy, params),
        policy,
        need,
        params,
        rng,
    )
}

/// [`decide`] given every offer's [`Static`] part (`statics[i]` is `offers[i]`'s, computed
/// under this `policy` and `params`): the hot path's entry, with the card-only checks done.
pub fn decide_with<O: Offer>(
    offers: &[O],
    statics: &[Static],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
    rng: &mut fastrand::Rng,
) -> Result<Pick, NoEligible> {
    let s = survivors(offers, statics, policy, need, params);
    if s.index.is_empty() {
        return Err(NoEligible {
            skill: need.skill.to_owned(),
            offering: offers.len(),
            excluded: exclusions(&s.excluded),
        });
    }
    let mut scale = Scale::default();
    for f in &s.figures {
        scale.add(f);
    }
    let scores: Vec<f64> = s
        .figures
        .iter()
        .map(|f| score(&scale.components(f, params.missing_score), policy))
        .collect();
    let best = scores.iter().copied().fold(f64::MIN, f64::max);
    let floor = best * (1.0 - policy.tolerance);
    let band: Vec<usize> = (0..scores.len()).filter(|k| scores[*k] >= floor).collect();
    let weight = |k: usize| offers[s.index[k]].weight().max(0.0) * s.loads[k].weight_factor;
    let k = if band.len() == 1 {
        band[0]
    } else {
        let a = weighted(&band, &weight, None, rng);
        let b = weighted(&band, &weight, Some(a), rng);
        let cost = |k: usize| {
            let latency = offers[s.index[k]].observed_latency_ms().unwrap_or(0.0) + 1.0;
            (f64::from(s.loads[k].in_flight) + 1.0) * latency
        };
        let (ca, cb) = (cost(a), cost(b));
        if (ca - cb).abs() <= 1e-9 * ca.max(cb) {
            let (wa, wb) = (weight(a), weight(b));
            if wa + wb <= 0.0 || rng.f64() * (wa + wb) < wa {
                a
            } else {
                b
            }
        } else if ca < cb {
            a
        } else {
            b
        }
    };
    Ok(Pick {
        index: s.index[k],
        score: scores[k],
        eligible: s.index.len(),
        band: band.len(),
        excluded: if s.index.len() == s.evaluated {
            Vec::new()
        } else {
            exclusions(&s.excluded)
        },
    })
}

/// Every offer's evaluation, the components and score of the eligible ones (`None` for the
/// rest), and the band floor.
pub type Scored = (Vec<Evaluation>, Vec<Option<(Components, f64)>>, f64);

/// What [`decide`] computed, for explain and tests: every offer's evaluation (with
/// `NotEjected` marked where ejection applied), the scores of the survivors in offer order
/// (`None` for the rest), and the band floor.
pub fn scores<O: Offer>(
    offers: &[O],
    policy: &Policy,
    need: &Need<'_>,
    params: &RoutingParams,
) -> Scored {
    let s = survivors(
        offers,
        &statics(offers, policy, params),
        policy,
        need,
        params,
    );
    let mut evals: Vec<Evaluation> = offers
        .iter()
        .map(|o| evaluate(o, policy, need, params))
        .collect();
    if s.excluded[Constraint::NotEjected as usize] > 0 {
        for (i, e) in evals.iter_mut().enumerate() {
            if e.eligible() && !s.index.contains(&i) {
                e.failed |= Constraint::NotEjected.bit();
            }
        }
    }
    let mut scale = Scale::default();
    for f in &s.figures {
        scale.add(f);
    }
    let mut scored: Vec<Option<(Components, f64)>> = vec![None; offers.len()];
    for (k, &i) in s.index.iter().enumerate() {
        let c = scale.components(&s.figures[k], params.missing_score);
        scored[i] = Some((c, score(&c, policy)));
    }
    let best = scored
        .iter()
        .flatten()
        .map(|(_, s)| *s)
        .fold(f64::MIN, f64::max);
    (evals, scored, best * (1.0 - policy.tolerance))
}

#[cfg(test)]
mod tests;
