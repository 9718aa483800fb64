//! Property tests of routing over random fleets, policies and needs: no hard constraint is
//! ever broken, the pick is healthy and within tolerance of the best, errors say why, weights
//! pull the pick the way they say, and explain agrees with decide.

use super::tests::TestOffer;
use super::*;
use crate::ldp::trust::session_allowed;
use crate::ldp::{Capability, PayloadMode, TrustDomain};
use crate::policy::{Glob, Policy, Require, Weights};
use proptest::prelude::*;
use proptest::sample::{select, subsequence};
use std::collections::BTreeMap;

const SKILL: &str = "s";
const DOMAINS: [&str; 3] = ["acme", "beta", "gamma"];
// Mixed case on purpose: globs match case-insensitively.
const JURISDICTIONS: [&str; 4] = ["eu-west", "EU-Central", "us-east", "ap-south"];
const FAMILIES: [&str; 4] = ["llama", "claude", "gpt", "Mistral"];
const MODES: [PayloadMode; 4] = [
    PayloadMode::Text,
    PayloadMode::SemanticFrame,
    PayloadMode::EmbeddingHints,
    PayloadMode::SemanticGraph,
];
/// Card-level `cost_profile` strings, one of which parses to nothing.
const CARD_TIERS: [&str; 5] = ["low", "Medium", "med", "HIGH", "premium"];

/// The raw facts one random delegate is built from; the oracle below reads these, not the
/// card, so it does not share the code under test.
#[derive(Debug, Clone)]
struct Spec {
    healthy: bool,
    domain: &'static str,
    cross_domain: bool,
    peers: Vec<&'static str>,
    jurisdiction: Option<&'static str>,
    family: &'static str,
    context_window: Option<u64>,
    modes: Vec<PayloadMode>,
    quality: Option<f64>,
    price: Option<f64>,
    tier: Option<CostTier>,
    card_tier: Option<&'static str>,
    p50: Option<u64>,
    /// Card-level `latency_profile`: the string and the p50 it means.
    card_latency: Option<(String, Option<u64>)>,
    observed: Option<f64>,
    weight: f64,
    /// Quality evidence: (mean, count).
    seen: Option<(f64, f64)>,
}

/// One random routing problem.
#[derive(Debug, Clone)]
struct Case {
    specs: Vec<Spec>,
    policy: Policy,
    need: Need<'static>,
    params: RoutingParams,
    seed: u64,
}

impl Case {
    fn offers(&self) -> Vec<TestOffer> {
        self.specs
            .iter()
            .enumerate()
            .map(|(i, s)| build(i, s))
            .collect()
    }
}

/// The quality routing should use: the declared one and the evidence blended (the oracle's own
/// arithmetic, a self-claim worth two observations).
fn spec_quality(s: &Spec) -> Option<f64> {
    match (s.quality, s.seen) {
        (q, None) => q,
        (_, Some((_, count))) if count <= 0.0 => s.quality,
        (q, Some((mean, count))) => {
            let (prior, k) = q.map_or((0.5, 1.0), |q| (q, 2.0));
            Some((k * prior + count * mean) / (k + count))
        }
    }
}

/// What `min_quality` is compared with: [`spec_quality`] plus one standard deviation of the
/// posterior once there is evidence.
fn spec_plausible(s: &Spec) -> Option<f64> {
    let b = spec_quality(s)?;
    match s.seen {
        Some((_, count)) if count > 0.0 => {
            let k = if s.quality.is_some() { 2.0 } else { 1.0 };
            Some((b + (b * (1.0 - b) / (k + count + 1.0)).max(0.0).sqrt()).min(1.0))
        }
        _ => Some(b),
    }
}

fn build(i: usize, s: &Spec) -> TestOffer {
    let name = format!("d{i}");
    let mut cap = Capability::named(SKILL);
    cap.hints = CapabilityHints {
        quality: s.quality,
        latency_p50_ms: s.p50,
        cost_per_call_usd: s.price,
        cost_tier: s.tier,
        ..CapabilityHints::default()
    };
    let card = IdentityCard {
        delegate_id: format!("ldp:delegate:{name}"),
        name: name.clone(),
        description: None,
        model_family: s.family.into(),
        model_version: "1".into(),
        weights_fingerprint: None,
        trust_domain: TrustDomain {
            name: s.domain.into(),
            allow_cross_domain: s.cross_domain,
            trusted_peers: s.peers.iter().map(|p| (*p).to_owned()).collect(),
        },
        context_window: s.context_window,
        reasoning_profile: None,
        cost_profile: s.card_tier.map(Into::into),
        latency_profile: s.card_latency.as_ref().map(|(text, _)| text.clone()),
        jurisdiction: s.jurisdiction.map(Into::into),
        capabilities: vec![cap],
        supported_payload_modes: s.modes.clone(),
        endpoint: None,
        metadata: BTreeMap::new(),
    };
    // The registry's path: capability hints with the card-level profiles folded in.
    let hints = card
        .effective_hints(SKILL)
        .expect("the card offers the skill");
    TestOffer {
        name,
        card,
        hints,
        healthy: s.healthy,
        observed: s.observed,
        weight: s.weight,
        quality_seen: s.seen.map(|(mean, count)| Observed { mean, count }),
        ejected: false,
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies

fn some_of<T: Clone + std::fmt::Debug + 'static>(
    pool: &'static [T],
) -> impl Strategy<Value = Vec<T>> {
    // Mostly unconstrained, so that something stays eligible often enough to test the pick.
    prop_oneof![
        3 => Just(Vec::new()),
        1 => subsequence(pool.to_vec(), 1..=pool.len()),
    ]
}

fn grid(steps: u32, step: f64) -> impl Strategy<Value = f64> {
    // A grid keeps exact ties (which the band must handle) frequent.
    (0..=steps).prop_map(move |k| f64::from(k) * step)
}

fn tier() -> impl Strategy<Value = CostTier> {
    select(vec![CostTier::Low, CostTier::Medium, CostTier::High])
}

fn card_latency() -> impl Strategy<Value = Option<(String, Option<u64>)>> {
    prop_oneof![
        2 => Just(None),
        1 => (0u64..8000).prop_map(|ms| Some((format!("p50:{ms}ms,p99:{}ms", ms * 4), Some(ms)))),
        1 => (0u64..8).prop_map(|s| Some((format!("p50:{s}s"), Some(s * 1000)))),
        1 => Just(Some(("fast".to_owned(), None))),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    let identity = (
        prop::bool::weighted(0.85),
        select(DOMAINS.to_vec()),
        prop::bool::weighted(0.4),
        subsequence(DOMAINS.to_vec(), 0..=DOMAINS.len()),
        prop::option::weighted(0.8, select(JURISDICTIONS.to_vec())),
        select(FAMILIES.to_vec()),
        prop::option::weighted(0.8, select(vec![4_000u64, 32_000, 128_000])),
        subsequence(MODES.to_vec(), 1..=MODES.len()),
    );
    let figures = (
        prop::option::weighted(0.8, grid(100, 0.01)),
        prop::option::weighted(0.5, grid(200, 0.0005)),
        prop::option::weighted(0.5, tier()),
        prop::option::weighted(0.3, select(CARD_TIERS.to_vec())),
        prop::option::weighted(0.6, 0u64..10_000),
        card_latency(),
        prop::option::weighted(0.3, grid(20_000, 0.5)),
        prop_oneof![1 => Just(0.0), 1 => Just(1.0), 2 => grid(40, 0.25)],
        prop::option::weighted(0.4, (grid(100, 0.01), grid(40, 0.5))),
    );
    (identity, figures).prop_map(
        |(
            (healthy, domain, cross_domain, peers, jurisdiction, family, context_window, modes),
            (quality, price, tier, card_tier, p50, card_latency, observed, weight, seen),
        )| Spec {
            healthy,
            domain,
            cross_domain,
            peers,
            jurisdiction,
            family,
            context_window,
            modes,
            quality,
            price,
            tier,
            card_tier,
            p50,
            card_latency,
            observed,
            weight,
            seen,
        },
    )
}

fn globs(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<Glob>> {
    some_of(pool).prop_map(|v| v.into_iter().map(|g| Glob(g.to_owned())).collect())
}

fn require() -> impl Strategy<Value = Require> {
    (
        globs(&["eu-*", "us-east", "*", "EU-CENTRAL"]),
        globs(&["eu-central", "ap-*", "*-south"]),
        some_of(&DOMAINS).prop_map(|v| v.into_iter().map(str::to_owned).collect()),
        prop::option::weighted(0.3, grid(100, 0.01)),
        prop::option::weighted(0.3, grid(200, 0.0005)),
        prop::option::weighted(0.3, 0u64..10_000),
        some_of(&MODES),
        prop::option::weighted(0.25, select(vec![8_000u64, 32_000, 100_000])),
        globs(&["llama*", "claude", "g*", "*"]),
        globs(&["mistral", "gpt"]),
    )
        .prop_map(
            |(
                jurisdictions,
                deny_jurisdictions,
                trust_domains,
                min_quality,
                max_cost_usd,
                max_latency_ms,
                payload_modes,
                min_context_window,
                model_families,
                deny_model_families,
            )| Require {
                jurisdictions,
                deny_jurisdictions,
                trust_domains,
                min_quality,
                max_cost_usd,
                max_latency_ms,
                payload_modes,
                min_context_window,
                model_families,
                deny_model_families,
            },
        )
}

fn weight_value() -> impl Strategy<Value = f64> {
    prop_oneof![1 => Just(0.0), 3 => 0.0..=1.0f64]
}

fn weights() -> impl Strategy<Value = Weights> {
    (weight_value(), weight_value(), weight_value())
        .prop_filter("at least one weight is positive", |(q, c, l)| {
            q + c + l > 0.0
        })
        .prop_map(|(quality, cost, latency)| Weights {
            quality,
            cost,
            latency,
        })
}

fn policy() -> impl Strategy<Value = Policy> {
    (
        require(),
        weights(),
        prop_oneof![1 => Just(0.0), 3 => 0.0..=0.5f64],
    )
        .prop_map(|(require, weights, tolerance)| Policy {
            require,
            weights,
            tolerance,
            ..Policy::builtin_balanced()
        })
}

fn need() -> impl Strategy<Value = Need<'static>> {
    (
        select(DOMAINS.to_vec()),
        prop::option::weighted(0.3, select(DOMAINS.to_vec())),
        prop::option::weighted(0.2, grid(200, 0.0005)),
        prop::option::weighted(0.2, 0u64..12_000),
    )
        .prop_map(
            |(client_domain, required_domain, contract_max_cost_usd, contract_ms_left)| Need {
                skill: SKILL,
                client_domain,
                required_domain,
                contract_max_cost_usd,
                contract_ms_left,
                exclude: &[],
                now_ms: 0,
                rater: None,
                probation: false,
                min_reliability: None,
            },
        )
}

fn params() -> impl Strategy<Value = RoutingParams> {
    let prices = prop_oneof![
        Just(TierPrices::default()),
        (grid(20, 0.0005), grid(40, 0.0005), grid(200, 0.0005)).prop_map(|(a, b, c)| {
            let mut v = [a, b, c];
            v.sort_by(f64::total_cmp);
            TierPrices {
                low: v[0],
                medium: v[1],
                high: v[2],
            }
        }),
    ];
    (
        prices,
        prop_oneof![Just(0.5), Just(1.0), 0.0..=1.0f64],
        prop::bool::weighted(0.25),
    )
        .prop_map(
            |(tier_prices, missing_score, unknown_passes_bounds)| RoutingParams {
                tier_prices,
                missing_score,
                unknown_passes_bounds,
                // The properties are of the score's decision; trials have their own tests.
                explore: 0.0,
                ..RoutingParams::default()
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(spec(), 1..40),
        policy(),
        need(),
        params(),
        any::<u64>(),
    )
        .prop_map(|(specs, policy, need, params, seed)| Case {
            specs,
            policy,
            need,
            params,
            seed,
        })
}

// ---------------------------------------------------------------------------------------------
// The oracle: every hard constraint restated from the raw spec.

/// `*`-globs as the policy reference describes them (at most one `*` in our patterns),
/// case-insensitive.
fn glob(pattern: &str, s: &str) -> bool {
    let (p, s) = (pattern.to_ascii_lowercase(), s.to_ascii_lowercase());
    match p.split_once('*') {
        Some((pre, post)) => {
            s.len() >= pre.len() + post.len() && s.starts_with(pre) && s.ends_with(post)
        }
        None => p == s,
    }
}

fn parse_tier(s: &str) -> Option<CostTier> {
    match s.to_ascii_lowercase().as_str() {
        "low" => Some(CostTier::Low),
        "medium" | "med" => Some(CostTier::Medium),
        "high" => Some(CostTier::High),
        _ => None,
    }
}

/// Price per call: the declared price, else the capability's tier, else the card's tier.
fn spec_cost(s: &Spec, params: &RoutingParams) -> Option<f64> {
    let p = params.tier_prices;
    s.price.or_else(|| {
        s.tier
            .or_else(|| s.card_tier.and_then(parse_tier))
            .map(|t| match t {
                CostTier::Low => p.low,
                CostTier::Medium => p.medium,
                CostTier::High => p.high,
            })
    })
}

/// Latency: observed, else the capability's p50, else the card's profile p50.
fn spec_latency(s: &Spec) -> Option<f64> {
    s.observed.or_else(|| {
        s.p50
            .or_else(|| s.card_latency.as_ref().and_then(|(_, ms)| *ms))
            .map(|ms| ms as f64)
    })
}

/// A bound is met by a known value that meets it, or by an unknown one if so configured.
fn meets(limit: Option<f64>, value: Option<f64>, lenient: bool, ok: fn(f64, f64) -> bool) -> bool {
    match (limit, value) {
        (None, _) => true,
        (Some(_), None) => lenient,
        (Some(l), Some(v)) => ok(v, l),
    }
}

/// The constraints `s` fails, in `Constraint::ALL` order.
fn oracle(s: &Spec, c: &Case) -> Vec<Constraint> {
    let r = &c.policy.require;
    let n = &c.need;
    let lenient = c.params.unknown_passes_bounds;
    let trusted = n.required_domain.is_none_or(|d| d == s.domain)
        && (n.client_domain == s.domain || (s.cross_domain && s.peers.contains(&n.client_domain)));
    let jurisdiction_ok = match s.jurisdiction {
        None => r.jurisdictions.is_empty(),
        Some(j) => {
            (r.jurisdictions.is_empty() || r.jurisdictions.iter().any(|g| glob(&g.0, j)))
                && !r.deny_jurisdictions.iter().any(|g| glob(&g.0, j))
        }
    };
    let family_ok = (r.model_families.is_empty()
        || r.model_families.iter().any(|g| glob(&g.0, s.family)))
        && !r.deny_model_families.iter().any(|g| glob(&g.0, s.family));
    let (cost, latency) = (spec_cost(s, &c.params), spec_latency(s));
    let passes = [
        (Constraint::Healthy, s.healthy),
        (Constraint::TrustDomain, trusted),
        (
            Constraint::PolicyTrustDomains,
            r.trust_domains.is_empty() || r.trust_domains.iter().any(|d| d == s.domain),
        ),
        (Constraint::Jurisdiction, jurisdiction_ok),
        (
            Constraint::MinQuality,
            meets(r.min_quality, spec_plausible(s), lenient, |v, l| v >= l),
        ),
        (
            Constraint::MaxCost,
            meets(r.max_cost_usd, cost, lenient, |v, l| v <= l),
        ),
        (
            Constraint::MaxLatency,
            meets(
                r.max_latency_ms.map(|m| m as f64),
                latency,
                lenient,
                |v, l| v <= l,
            ),
        ),
        (
            Constraint::PayloadModes,
            r.payload_modes.is_empty() || r.payload_modes.iter().any(|m| s.modes.contains(m)),
        ),
        (
            Constraint::ContextWindow,
            meets(
                r.min_context_window.map(|m| m as f64),
                s.context_window.map(|w| w as f64),
                lenient,
                |v, l| v >= l,
            ),
        ),
        (Constraint::ModelFamily, family_ok),
        (
            Constraint::ContractBudget,
            meets(n.contract_max_cost_usd, cost, lenient, |v, l| v <= l),
        ),
        (
            Constraint::ContractDeadline,
            meets(
                n.contract_ms_left.map(|m| m as f64),
                latency,
                lenient,
                |v, l| v <= l,
            ),
        ),
    ];
    passes
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(c, _)| c)
        .collect()
}

fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    ProptestConfig {
        // A few seconds by default; `PROPTEST_CASES=20000` for a deep run.
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            default.cases
        } else {
            256
        },
        // No persistence file: a failure prints its minimal case.
        failure_persistence: None,
        ..default
    }
}

/// Picks made for one case: several draws from one seeded generator.
fn picks(c: &Case, offers: &[TestOffer], n: usize) -> Vec<Result<Pick, NoEligible>> {
    let mut rng = fastrand::Rng::with_seed(c.seed);
    (0..n)
        .map(|_| decide(offers, &c.policy, &c.need, &c.params, &mut rng))
        .collect()
}

/// One figure of a spec (quality, cost or latency), if known.
type FigureOf<'a> = dyn Fn(&Spec) -> Option<f64> + 'a;

/// A copy of `c` with other weights and no tolerance: the pick is a top scorer.
fn with_weights(c: &Case, quality: f64, cost: f64, latency: f64) -> Case {
    let mut c = c.clone();
    c.policy.weights = Weights {
        quality,
        cost,
        latency,
    };
    c.policy.tolerance = 0.0;
    c
}

// ---------------------------------------------------------------------------------------------
// Properties

proptest! {
    #![proptest_config(config())]

    /// (a) `evaluate` agrees with the oracle on every constraint of every offer, and `decide`
    /// never returns an offer that fails one; (b) the pick is healthy; (d) `decide` fails iff
    /// nothing is eligible, with counts that add up.
    #[test]
    fn decide_never_breaks_a_hard_constraint(c in case()) {
        let offers = c.offers();
        let failures: Vec<Vec<Constraint>> = c.specs.iter().map(|s| oracle(s, &c)).collect();
        for (i, o) in offers.iter().enumerate() {
            let e = evaluate(o, &c.policy, &c.need, &c.params);
            prop_assert_eq!(e.failures().collect::<Vec<_>>(), failures[i].clone(), "offer {}", i);
            prop_assert_eq!(
                e.failed(Constraint::TrustDomain),
                !session_allowed(&o.card.trust_domain, c.need.client_domain, c.need.required_domain)
            );
        }
        let eligible = failures.iter().filter(|f| f.is_empty()).count();
        for r in picks(&c, &offers, 8) {
            match r {
                Ok(p) => {
                    prop_assert!(eligible > 0);
                    let (o, s) = (&offers[p.index], &c.specs[p.index]);
                    prop_assert!(evaluate(o, &c.policy, &c.need, &c.params).eligible());
                    prop_assert!(failures[p.index].is_empty(), "picked {:?}", failures[p.index]);
                    prop_assert!(o.healthy() && s.healthy);
                    prop_assert!(session_allowed(
                        &o.card.trust_domain, c.need.client_domain, c.need.required_domain
                    ));
                    let r = &c.policy.require;
                    if let Some(j) = &o.card.jurisdiction {
                        prop_assert!(!r.deny_jurisdictions.iter().any(|g| g.matches(j)));
                    }
                    if !r.jurisdictions.is_empty() {
                        let j = o.card.jurisdiction.as_deref();
                        prop_assert!(j.is_some_and(|j| r.jurisdictions.iter().any(|g| g.matches(j))));
                    }
                    if let (Some(min), Some(q)) = (r.min_quality, spec_plausible(s)) {
                        prop_assert!(q >= min);
                    }
                    if let (Some(max), Some(cost)) = (r.max_cost_usd, spec_cost(s, &c.params)) {
                        prop_assert!(cost <= max);
                    }
                    prop_assert_eq!(p.eligible, eligible);
                }
                Err(e) => {
                    prop_assert_eq!(eligible, 0);
                    prop_assert_eq!(e.skill.as_str(), SKILL);
                    prop_assert_eq!(e.offering, offers.len());
                    let expected: Vec<(Constraint, usize)> = Constraint::ALL
                        .into_iter()
                        .map(|k| (k, failures.iter().filter(|f| f.contains(&k)).count()))
                        .filter(|(_, n)| *n > 0)
                        .collect();
                    prop_assert_eq!(&e.excluded, &expected);
                    // Every offer is excluded by at least one constraint.
                    prop_assert!(e.excluded.iter().map(|(_, n)| n).sum::<usize>() >= e.offering);
                }
            }
        }
    }

    /// (c) The pick's score is the one `scores` gives it and within tolerance of the best;
    /// `eligible` and `band` count what `scores` says.
    #[test]
    fn pick_is_within_tolerance_of_the_best(c in case()) {
        let offers = c.offers();
        let (evals, scored, floor) = scores(&offers, &c.policy, &c.need, &c.params);
        let best = scored.iter().flatten().map(|(_, s)| *s).fold(f64::MIN, f64::max);
        let in_band = scored.iter().flatten().filter(|(_, s)| *s >= floor).count();
        for r in picks(&c, &offers, 8) {
            let Ok(p) = r else {
                prop_assert!(evals.iter().all(|e| !e.eligible()));
                continue;
            };
            let (_, s) = scored[p.index].expect("a pick is eligible");
            prop_assert_eq!(p.score, s);
            prop_assert!((0.0..=1.0).contains(&p.score));
            prop_assert!(p.score >= floor);
            prop_assert!(p.score >= best * (1.0 - c.policy.tolerance) - 1e-12);
            prop_assert!(p.score <= best);
            prop_assert_eq!(p.eligible, evals.iter().filter(|e| e.eligible()).count());
            prop_assert_eq!(p.band, in_band);
            prop_assert!(p.band >= 1);
        }
    }

    /// Near-equals share by weight: an offer of weight 0 is never picked while another in
    /// the band has a positive weight.
    #[test]
    fn zero_weight_is_not_picked_over_a_positive_one(c in case()) {
        let offers = c.offers();
        let (_, scored, floor) = scores(&offers, &c.policy, &c.need, &c.params);
        let band_has_weight = scored
            .iter()
            .zip(&offers)
            .any(|(s, o)| s.is_some_and(|(_, s)| s >= floor) && o.weight > 0.0);
        for p in picks(&c, &offers, 8).into_iter().flatten() {
            if band_has_weight {
                prop_assert!(offers[p.index].weight > 0.0);
            }
        }
    }

    /// (e) One weight alone, no tolerance: the pick has the best value of that figure among
    /// the eligible offers that declare it (ties allowed), as the scoring rule counts it: a
    /// badness under a thousandth of the worst counts as that thousandth, so 0 ms and 0.5 ms
    /// beside 500 ms tie. An offer that does not declare it scores `missing_score`, so it can
    /// share the top only when that is 1 or nobody declares.
    #[test]
    fn a_single_weight_picks_the_best_of_its_figure(c in case()) {
        let offers = c.offers();
        let eligible: Vec<usize> = (0..offers.len())
            .filter(|&i| oracle(&c.specs[i], &c).is_empty())
            .collect();
        // A figure's badness (lower is better: quality's error rate, a cost, a latency).
        let badness = |v: f64, max: bool| if max { (1.0 - v).clamp(0.0, 1.0) } else { v.max(0.0) };
        // The best badness among the eligible that declare the figure, floored as scored, and
        // the floor, to count the pick's by.
        let extreme = |f: &FigureOf<'_>, max: bool| {
            let declared = || eligible.iter().filter_map(|&i| f(&c.specs[i]).map(|v| badness(v, max)));
            let floor = declared().reduce(f64::max)? * 1e-3;
            declared().map(|b| b.max(floor)).reduce(f64::min).map(|best| (best, floor))
        };
        let params = c.params;
        let cost = move |s: &Spec| spec_cost(s, &params);
        let quality = |s: &Spec| spec_quality(s);
        let checks: [(Case, &FigureOf<'_>, bool); 3] = [
            (with_weights(&c, 1.0, 0.0, 0.0), &quality, true),
            (with_weights(&c, 0.0, 1.0, 0.0), &cost, false),
            (with_weights(&c, 0.0, 0.0, 1.0), &spec_latency, false),
        ];
        for (k, (case, figure, max)) in checks.iter().enumerate() {
            let best = extreme(figure, *max);
            for r in picks(case, &offers, 8) {
                let Ok(p) = r else {
                    prop_assert!(eligible.is_empty());
                    continue;
                };
                match figure(&c.specs[p.index]) {
                    Some(v) => prop_assert_eq!(
                        best.map(|(_, floor)| badness(v, *max).max(floor)),
                        best.map(|(b, _)| b),
                        "weight {} picked d{}", k, p.index
                    ),
                    None => prop_assert!(
                        best.is_none() || c.params.missing_score >= 1.0,
                        "weight {} picked d{} which declares nothing over {:?}", k, p.index, best
                    ),
                }
            }
        }
    }

    /// (e) Raising the quality weight (others fixed, no tolerance) never lowers the quality
    /// component of the pick: for top scorers a under w and b under w' with w'q > wq, adding
    /// the two optimality inequalities gives (w'q - wq)(qb - qa) >= 0.
    #[test]
    fn more_quality_weight_never_lowers_the_quality_picked(
        c in case(),
        raise in 0.1..2.0f64,
    ) {
        let offers = c.offers();
        let w = c.policy.weights;
        let low = with_weights(&c, w.quality, w.cost, w.latency);
        let high = with_weights(&c, w.quality + raise, w.cost, w.latency);
        let (_, scored, _) = scores(&offers, &low.policy, &low.need, &low.params);
        let component = |i: usize| scored[i].map(|(k, _)| k.quality);
        let lo: Vec<Pick> = picks(&low, &offers, 8).into_iter().flatten().collect();
        let hi: Vec<Pick> = picks(&high, &offers, 8).into_iter().flatten().collect();
        let best_low = lo.iter().filter_map(|p| component(p.index)).fold(f64::MIN, f64::max);
        for p in &hi {
            let q = component(p.index).expect("a pick is eligible");
            prop_assert!(q >= best_low - 1e-9, "quality component {} < {}", q, best_low);
            // Same normalisation, so declared qualities move the same way.
            if let Some(qh) = spec_quality(&c.specs[p.index]) {
                for a in &lo {
                    if let Some(ql) = spec_quality(&c.specs[a.index]) {
                        prop_assert!(qh >= ql - 1e-9, "quality {} < {}", qh, ql);
                    }
                }
            }
        }
    }

    /// Weights are relative: scaling all three by the same factor changes no score.
    #[test]
    fn scaling_all_weights_changes_no_score(c in case(), k in 0.01..100.0f64) {
        let offers = c.offers();
        let w = c.policy.weights;
        let scaled = with_weights(&c, w.quality * k, w.cost * k, w.latency * k);
        let plain = with_weights(&c, w.quality, w.cost, w.latency);
        let (_, a, _) = scores(&offers, &plain.policy, &plain.need, &plain.params);
        let (_, b, _) = scores(&offers, &scaled.policy, &scaled.need, &scaled.params);
        for (x, y) in a.iter().zip(&b) {
            match (x, y) {
                (Some((_, x)), Some((_, y))) => prop_assert!((x - y).abs() < 1e-12),
                (None, None) => {}
                _ => prop_assert!(false, "eligibility changed with weights"),
            }
        }
    }

    /// (f) Explain's band is exactly the offers scoring at least the floor, its pick is in
    /// its band, and when nothing is eligible it says what `decide` says.
    #[test]
    fn explain_pick_is_in_its_band(c in case()) {
        let offers = c.offers();
        let others = vec![("x".to_owned(), "ldp:delegate:x".to_owned())];
        let x = explain(&offers, &others, &c.policy, &c.need, &c.params);
        let (evals, scored, floor) = scores(&offers, &c.policy, &c.need, &c.params);
        let band: Vec<String> = offers
            .iter()
            .zip(&scored)
            .filter(|(_, s)| s.is_some_and(|(_, s)| s >= floor))
            .map(|(o, _)| o.name.clone())
            .collect();
        prop_assert_eq!(&x.band, &band);
        prop_assert_eq!(x.delegates.len(), offers.len() + others.len());
        for ((row, e), s) in x.delegates.iter().zip(&evals).zip(&scored) {
            prop_assert_eq!(row.in_band, band.contains(&row.delegate));
            prop_assert_eq!(row.score, s.map(|(_, s)| s));
            for cr in &row.constraints {
                prop_assert_eq!(cr.pass, !e.failed(cr.constraint));
            }
        }
        prop_assert!(!x.delegates[offers.len()].offers_skill);
        match &x.pick {
            Picked::Delegate(name) => {
                prop_assert!(band.contains(name), "{} not in {:?}", name, band)
            }
            Picked::NoneEligible(why) => {
                prop_assert!(band.is_empty());
                let mut rng = fastrand::Rng::with_seed(c.seed);
                let e = decide(&offers, &c.policy, &c.need, &c.params, &mut rng);
                prop_assert_eq!(Some(why.clone()), e.err());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scores that follow the weights (issue 25)

/// A "clear leader" problem: offer 0 is best on criterion `x` (0 quality, 1 cost, 2 latency)
/// by a clear margin — the worst at least twice its value, every other at least
/// (worst / leader)^0.6 times it — and on each other criterion at most the geometric mean of
/// the others' best and worst (the better half, never the worst). The criteria as "badness":
/// quality's error rate, cost, latency.
#[derive(Debug, Clone)]
struct Leader {
    x: usize,
    /// `[criterion][offer]` badness, offer 0 the leader.
    bad: [Vec<f64>; 3],
    weights: Weights,
    tolerance: f64,
    seed: u64,
}

impl Leader {
    fn offers(&self) -> Vec<TestOffer> {
        (0..self.bad[0].len())
            .map(|i| {
                super::tests::offer(
                    &format!("d{i}"),
                    Some(1.0 - self.bad[0][i]),
                    Some(self.bad[1][i]),
                    Some(self.bad[2][i] as u64),
                )
            })
            .collect()
    }

    fn policy(&self) -> Policy {
        Policy {
            weights: self.weights,
            tolerance: self.tolerance,
            ..Policy::builtin_balanced()
        }
    }
}

/// Badness ranges (least, greatest) per criterion: error rate, USD, whole ms.
const BAD_RANGE: [(f64, f64); 3] = [(0.005, 0.95), (1e-5, 10.0), (1.0, 60_000.0)];

fn leader() -> impl Strategy<Value = Leader> {
    (
        0usize..3,
        1usize..6,
        0.5..=1.0f64,
        0.0..=1.0f64,
        0.0..=0.04f64,
        any::<u64>(),
    )
        .prop_flat_map(|(x, others, w, split, tolerance, seed)| {
            let fractions = || prop::collection::vec(0.0..=1.0f64, others);
            (
                Just((x, w, split, tolerance, seed)),
                // On x: the leader's value (a fraction of the lower half of the range), the
                // worst as a multiple of it, where the others sit between.
                (0.0..=0.5f64, 2.0..=50.0f64, fractions()),
                // On each criterion: where the others sit in its range, and where the leader
                // sits in the better half of their spread (used unless it is x).
                [
                    (fractions(), 0.0..=0.5f64),
                    (fractions(), 0.0..=0.5f64),
                    (fractions(), 0.0..=0.5f64),
                ],
            )
        })
        .prop_map(|((x, w, split, tolerance, seed), (lead, times, at), ys)| {
            // Geometric placement in a range, so tiny and huge values both occur; latency in
            // whole ms.
            let place = |k: usize, f: f64| {
                let (lo, hi) = BAD_RANGE[k];
                let v = lo * (hi / lo).powf(f);
                if k == 2 {
                    v.round()
                } else {
                    v
                }
            };
            let bad: [Vec<f64>; 3] = std::array::from_fn(|k| {
                if k == x {
                    // Leader a, the worst a * t (t >= 2, the first other), the rest at
                    // a * t^e for e in [0.6, 1].
                    let a = place(k, lead);
                    let t = times.min(BAD_RANGE[k].1 / a).max(2.0);
                    let worst = if k == 2 { (a * t).ceil() } else { a * t };
                    let t = worst / a;
                    let others = at.iter().enumerate().map(|(i, f)| {
                        let b = if i == 0 {
                            worst
                        } else {
                            a * t.powf(0.6 + 0.4 * f)
                        };
                        if k == 2 {
                            b.ceil()
                        } else {
                            b
                        }
                    });
                    std::iter::once(a).chain(others).collect()
                } else {
                    let (at, pos) = &ys[k];
                    let v: Vec<f64> = at.iter().map(|f| place(k, *f)).collect();
                    let lo = v.iter().copied().fold(f64::MAX, f64::min);
                    let hi = v.iter().copied().fold(f64::MIN, f64::max);
                    let a = lo * (hi / lo).powf(*pos);
                    let a = if k == 2 { a.floor().max(lo) } else { a };
                    std::iter::once(a).chain(v).collect()
                }
            });
            let mut rest = [(1.0 - w) * split, (1.0 - w) * (1.0 - split)].into_iter();
            let weights: [f64; 3] = std::array::from_fn(|k| {
                if k == x {
                    w
                } else {
                    rest.next().unwrap_or(0.0)
                }
            });
            Leader {
                x,
                bad,
                weights: Weights {
                    quality: weights[0],
                    cost: weights[1],
                    latency: weights[2],
                },
                tolerance,
                seed,
            }
        })
}

/// `c` with every price (declared, tier prices, the bounds on cost) times `k`.
fn prices_times(c: &Case, k: f64) -> Case {
    let mut c = c.clone();
    for s in &mut c.specs {
        s.price = s.price.map(|p| p * k);
    }
    let t = &mut c.params.tier_prices;
    (t.low, t.medium, t.high) = (t.low * k, t.medium * k, t.high * k);
    c.policy.require.max_cost_usd = c.policy.require.max_cost_usd.map(|m| m * k);
    c.need.contract_max_cost_usd = c.need.contract_max_cost_usd.map(|m| m * k);
    c
}

/// `c` with every latency (declared, observed, the bounds on latency) times `k`.
fn latencies_times(c: &Case, k: u64) -> Case {
    let mut c = c.clone();
    for s in &mut c.specs {
        s.p50 = s.p50.map(|ms| ms * k);
        s.observed = s.observed.map(|ms| ms * k as f64);
        if let Some((text, Some(ms))) = &mut s.card_latency {
            *ms *= k;
            *text = format!("p50:{ms}ms");
        }
    }
    c.policy.require.max_latency_ms = c.policy.require.max_latency_ms.map(|m| m * k);
    c.need.contract_ms_left = c.need.contract_ms_left.map(|m| m * k);
    c
}

/// The same decisions: the same offers eligible with the same scores (to rounding), the same
/// band (but for a score within rounding of the floor), then the same picks.
fn same_decisions(a: &Case, b: &Case) -> Result<(), TestCaseError> {
    let (oa, ob) = (a.offers(), b.offers());
    let (_, sa, fa) = scores(&oa, &a.policy, &a.need, &a.params);
    let (_, sb, fb) = scores(&ob, &b.policy, &b.need, &b.params);
    let mut edge = false;
    for (i, (x, y)) in sa.iter().zip(&sb).enumerate() {
        match (x, y) {
            (Some((_, x)), Some((_, y))) => {
                prop_assert!((x - y).abs() < 1e-9, "offer {}: score {} vs {}", i, x, y);
                if (x - fa).abs() < 1e-9 || (y - fb).abs() < 1e-9 {
                    edge = true;
                } else {
                    prop_assert_eq!(*x >= fa, *y >= fb, "offer {} in band", i);
                }
            }
            (None, None) => {}
            _ => prop_assert!(false, "offer {} eligible in one case only", i),
        }
    }
    if !edge {
        let pa: Vec<_> = picks(a, &oa, 8)
            .into_iter()
            .map(|p| p.map(|p| p.index))
            .collect();
        let pb: Vec<_> = picks(b, &ob, 8)
            .into_iter()
            .map(|p| p.map(|p| p.index))
            .collect();
        prop_assert_eq!(pa, pb);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// A weight of at least 0.5 decides: an offer best on that criterion by a clear margin
    /// (60% of the spread on the log scale, the worst at least twice its value) and in the
    /// better half on every other criterion is the pick, alone in its band.
    #[test]
    fn a_dominant_weight_picks_the_clear_leader(l in leader()) {
        let offers = l.offers();
        let policy = l.policy();
        let need = Need { skill: "s", client_domain: "default", ..Need::default() };
        let params = RoutingParams {
            explore: 0.0,
            ..RoutingParams::default()
        };
        let mut rng = fastrand::Rng::with_seed(l.seed);
        for _ in 0..4 {
            let p = decide(&offers, &policy, &need, &params, &mut rng).expect("all eligible");
            let (_, scored, _) = scores(&offers, &policy, &need, &params);
            prop_assert_eq!(
                (p.index, p.band), (0, 1),
                "criterion {} weights {:?}: scores {:?}", l.x, l.weights,
                scored.iter().map(|s| s.map(|(_, s)| s)).collect::<Vec<_>>()
            );
        }
    }

    /// Prices are a ratio scale: every price (declared, tier, bounds) times the same factor
    /// changes no score, no band and no pick.
    #[test]
    fn scaling_every_price_changes_no_decision(c in case(), k in 0.001..1000.0f64) {
        same_decisions(&c, &prices_times(&c, k))?;
    }

    /// So are latencies (whole ms, so a whole factor).
    #[test]
    fn scaling_every_latency_changes_no_decision(c in case(), k in 2u64..50) {
        same_decisions(&c, &latencies_times(&c, k))?;
    }

    /// An offer equal to another on every figure scores the same: both in the band or
    /// neither.
    #[test]
    fn a_candidate_equal_on_all_criteria_ties(c in case(), which in any::<prop::sample::Index>()) {
        let mut c = c;
        let twin = c.specs[which.index(c.specs.len())].clone();
        c.specs.push(twin);
        let offers = c.offers();
        let (_, scored, floor) = scores(&offers, &c.policy, &c.need, &c.params);
        let (i, j) = (which.index(c.specs.len() - 1), c.specs.len() - 1);
        prop_assert_eq!(scored[i], scored[j]);
        if let Some((_, s)) = scored[i] {
            prop_assert_eq!(s >= floor, scored[j].is_some_and(|(_, s)| s >= floor));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scan against the full evaluation (issue 30)

/// What a case adds to exercise every path of a decision: trials, probation, outlier
/// ejection, failover exclusions, a verifier's reliability bound, a `[verify]` policy.
#[derive(Debug, Clone)]
struct Twists {
    explore: f64,
    probation: bool,
    verify: bool,
    ejected: Vec<bool>,
    exclude: Vec<usize>,
    min_reliability: Option<f64>,
    panic_threshold: f64,
}

fn twists() -> impl Strategy<Value = Twists> {
    (
        prop_oneof![Just(0.0), Just(0.3), Just(1.0)],
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(prop::bool::weighted(0.2), 40),
        prop::collection::vec(0usize..40, 0..3),
        prop::option::weighted(0.2, grid(100, 0.01)),
        prop_oneof![Just(0.0), Just(0.5), Just(1.0)],
    )
        .prop_map(
            |(explore, probation, verify, ejected, exclude, min_reliability, panic_threshold)| {
                Twists {
                    explore,
                    probation,
                    verify,
                    ejected,
                    exclude,
                    min_reliability,
                    panic_threshold,
                }
            },
        )
}

proptest! {
    #![proptest_config(config())]

    /// `decide_with` (the scan: cached logarithms and evidence, one trust check per domain,
    /// buffers reused) makes the decisions the full evaluation made before it
    /// (`decide::reference`): draw for draw from the same seed, the same pick, score,
    /// components, eligible and band counts, exclusions and trial, or the same error.
    #[test]
    fn the_scan_decides_as_the_full_evaluation(c in case(), t in twists()) {
        let mut offers = c.offers();
        for (o, e) in offers.iter_mut().zip(&t.ejected) {
            o.ejected = *e;
        }
        let exclude: Vec<String> = t.exclude.iter().map(|i| format!("d{i}")).collect();
        let need = Need {
            exclude: &exclude,
            probation: t.probation,
            min_reliability: t.min_reliability,
            ..c.need
        };
        let mut policy = c.policy.clone();
        if t.verify {
            policy.verify = Some(crate::policy::Verify::default());
        }
        let params = RoutingParams {
            explore: t.explore,
            panic_threshold: t.panic_threshold,
            ..c.params
        };
        let st = statics(&offers, &policy, &params);
        let (mut a, mut b) = (
            fastrand::Rng::with_seed(c.seed),
            fastrand::Rng::with_seed(c.seed),
        );
        for _ in 0..8 {
            let scan = decide_with(&offers, &st, &policy, &need, &params, &mut a);
            let full = super::decide::reference::decide_with(
                &offers, &st, &policy, &need, &params, &mut b,
            );
            prop_assert_eq!(scan, full);
        }
    }
}
