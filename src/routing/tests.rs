//! Unit tests of every constraint and of the score.

use super::*;
use crate::ldp::{Capability, PayloadMode, TrustDomain};
use crate::policy::{Glob, Policy, Weights};

/// A plain offer for tests.
#[derive(Debug, Clone)]
pub(crate) struct TestOffer {
    pub name: String,
    pub card: IdentityCard,
    pub hints: CapabilityHints,
    pub healthy: bool,
    pub observed: Option<f64>,
    pub weight: f64,
    pub quality_seen: Option<Observed>,
    pub ejected: bool,
}

impl Offer for TestOffer {
    fn name(&self) -> &str {
        &self.name
    }
    fn card(&self) -> &IdentityCard {
        &self.card
    }
    fn hints(&self) -> &CapabilityHints {
        &self.hints
    }
    fn healthy(&self) -> bool {
        self.healthy
    }
    fn observed_latency_ms(&self) -> Option<f64> {
        self.observed
    }
    fn observed_quality(&self, _now_ms: i64, _rater: Option<&str>) -> Option<Observed> {
        self.quality_seen
    }
    fn weight(&self) -> f64 {
        self.weight
    }
    fn load(&self) -> Load {
        Load {
            ejected: self.ejected,
            ..Load::idle()
        }
    }
}

pub(crate) fn offer(name: &str, q: Option<f64>, cost: Option<f64>, lat: Option<u64>) -> TestOffer {
    let mut card: IdentityCard = serde_json::from_value(serde_json::json!({
        "delegate_id": format!("ldp:delegate:{name}"), "name": name, "model_family": "llama",
        "model_version": "1", "trust_domain": "default", "context_window": 32000,
        "jurisdiction": "eu-west", "supported_payload_modes": ["semantic_frame", "text"]
    }))
    .unwrap();
    let mut cap = Capability::named("s");
    cap.hints = CapabilityHints {
        quality: q,
        cost_per_call_usd: cost,
        latency_p50_ms: lat,
        ..CapabilityHints::default()
    };
    card.capabilities.push(cap.clone());
    TestOffer {
        name: name.into(),
        card,
        hints: cap.hints,
        healthy: true,
        observed: None,
        weight: 1.0,
        quality_seen: None,
        ejected: false,
    }
}

fn need() -> Need<'static> {
    Need {
        skill: "s",
        client_domain: "default",
        ..Need::default()
    }
}

fn only(c: Constraint, e: &Evaluation) -> bool {
    e.failures().collect::<Vec<_>>() == vec![c]
}

#[test]
fn every_constraint_fails_alone() {
    let p = Policy::builtin_balanced();
    let params = RoutingParams::default();
    let base = offer("a", Some(0.8), Some(0.01), Some(500));
    assert!(evaluate(&base, &p, &need(), &params).eligible());

    let mut o = base.clone();
    o.healthy = false;
    assert!(only(
        Constraint::Healthy,
        &evaluate(&o, &p, &need(), &params)
    ));

    let mut o = base.clone();
    o.card.trust_domain = TrustDomain::named("other");
    assert!(only(
        Constraint::TrustDomain,
        &evaluate(&o, &p, &need(), &params)
    ));
    let n = Need {
        required_domain: Some("research.internal"),
        ..need()
    };
    assert!(only(
        Constraint::TrustDomain,
        &evaluate(&base, &p, &n, &params)
    ));

    let mut pol = p.clone();
    pol.require.trust_domains = vec!["research.internal".into()];
    assert!(only(
        Constraint::PolicyTrustDomains,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.jurisdictions = vec![Glob("us-*".into())];
    assert!(only(
        Constraint::Jurisdiction,
        &evaluate(&base, &pol, &need(), &params)
    ));
    let mut pol = p.clone();
    pol.require.deny_jurisdictions = vec![Glob("eu-*".into())];
    assert!(only(
        Constraint::Jurisdiction,
        &evaluate(&base, &pol, &need(), &params)
    ));
    let mut pol = p.clone();
    pol.require.jurisdictions = vec![Glob("eu-*".into())];
    assert!(evaluate(&base, &pol, &need(), &params).eligible());

    let mut pol = p.clone();
    pol.require.min_quality = Some(0.9);
    assert!(only(
        Constraint::MinQuality,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.max_cost_usd = Some(0.005);
    assert!(only(
        Constraint::MaxCost,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.max_latency_ms = Some(400);
    assert!(only(
        Constraint::MaxLatency,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.payload_modes = vec![PayloadMode::SemanticGraph];
    assert!(only(
        Constraint::PayloadModes,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.min_context_window = Some(64000);
    assert!(only(
        Constraint::ContextWindow,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let mut pol = p.clone();
    pol.require.model_families = vec![Glob("claude*".into())];
    assert!(only(
        Constraint::ModelFamily,
        &evaluate(&base, &pol, &need(), &params)
    ));
    let mut pol = p.clone();
    pol.require.deny_model_families = vec![Glob("llama".into())];
    assert!(only(
        Constraint::ModelFamily,
        &evaluate(&base, &pol, &need(), &params)
    ));

    let n = Need {
        contract_max_cost_usd: Some(0.001),
        ..need()
    };
    assert!(only(
        Constraint::ContractBudget,
        &evaluate(&base, &p, &n, &params)
    ));
    let n = Need {
        contract_ms_left: Some(100),
        ..need()
    };
    assert!(only(
        Constraint::ContractDeadline,
        &evaluate(&base, &p, &n, &params)
    ));
}

#[test]
fn unknown_values_fail_bounds_unless_configured() {
    let mut pol = Policy::builtin_balanced();
    pol.require.min_quality = Some(0.5);
    pol.require.max_cost_usd = Some(1.0);
    let o = offer("a", None, None, None);
    let strict = RoutingParams::default();
    let e = evaluate(&o, &pol, &need(), &strict);
    assert!(e.failed(Constraint::MinQuality) && e.failed(Constraint::MaxCost));
    let lenient = RoutingParams {
        unknown_passes_bounds: true,
        ..strict
    };
    assert!(evaluate(&o, &pol, &need(), &lenient).eligible());
}

#[test]
fn tier_prices_stand_in_for_missing_prices() {
    let mut o = offer("a", Some(0.8), None, Some(100));
    o.hints.cost_tier = Some(CostTier::High);
    let f = figures(&o, &RoutingParams::default(), 0);
    assert_eq!(f.cost_usd, Some(0.05));
}

#[test]
fn observed_latency_replaces_the_declared_one() {
    let mut o = offer("a", Some(0.8), Some(0.01), Some(100));
    assert_eq!(
        figures(&o, &RoutingParams::default(), 0).latency_source,
        LatencySource::Declared
    );
    o.observed = Some(900.0);
    let f = figures(&o, &RoutingParams::default(), 0);
    assert_eq!(
        (f.latency_ms, f.latency_source),
        (Some(900.0), LatencySource::Observed)
    );
}

#[test]
fn score_normalises_over_the_candidates() {
    let offers = [
        offer("good", Some(0.9), Some(0.02), Some(1000)),
        offer("cheap", Some(0.6), Some(0.001), Some(1000)),
        offer("fast", Some(0.6), Some(0.02), Some(100)),
    ];
    let params = RoutingParams::default();
    let mut p = Policy::builtin_balanced();
    p.tolerance = 0.0;
    let pick_with = |w: Weights| {
        let mut p = p.clone();
        p.weights = w;
        let mut rng = fastrand::Rng::with_seed(7);
        offers[decide(&offers, &p, &need(), &params, &mut rng)
            .unwrap()
            .index]
            .name
            .clone()
    };
    assert_eq!(
        pick_with(Weights {
            quality: 1.0,
            cost: 0.0,
            latency: 0.0
        }),
        "good"
    );
    assert_eq!(
        pick_with(Weights {
            quality: 0.0,
            cost: 1.0,
            latency: 0.0
        }),
        "cheap"
    );
    assert_eq!(
        pick_with(Weights {
            quality: 0.0,
            cost: 0.0,
            latency: 1.0
        }),
        "fast"
    );
    // Min–max: the best of each criterion 1, the worst 0.
    let (_, scored, _) = scores(&offers, &p, &need(), &params);
    let (c, _) = scored[0].unwrap();
    assert_eq!((c.quality, c.cost, c.latency), (1.0, 0.0, 0.0));
    let (c, _) = scored[1].unwrap();
    assert_eq!((c.quality, c.cost, c.latency), (0.0, 1.0, 0.0));
}

/// The normalisation rule: error rate for quality, min–max over the candidates, equal values
/// all 1, a spread under half the worst value not stretched.
#[test]
fn each_criterion_spans_the_same_range() {
    let params = RoutingParams::default();
    let p = Policy::builtin_balanced();
    let components = |offers: &[TestOffer]| -> Vec<Components> {
        let (_, scored, _) = scores(offers, &p, &need(), &params);
        scored.into_iter().map(|s| s.unwrap().0).collect()
    };
    // Quality 0.8 vs 0.95 is four times the errors: best and worst, like a 17x price or a
    // 4.5x latency.
    let c = components(&[
        offer("mini", Some(0.8), Some(0.00045), Some(200)),
        offer("large", Some(0.95), Some(0.0075), Some(900)),
    ]);
    assert_eq!((c[0].quality, c[0].cost, c[0].latency), (0.0, 1.0, 1.0));
    assert_eq!((c[1].quality, c[1].cost, c[1].latency), (1.0, 0.0, 0.0));
    // A middle value sits in proportion on a log scale: 0.02 is ln 2 / ln 5 of the way.
    let c = components(&[
        offer("a", Some(0.9), Some(0.01), Some(100)),
        offer("b", Some(0.9), Some(0.02), Some(100)),
        offer("c", Some(0.9), Some(0.05), Some(100)),
    ]);
    assert_eq!(c.iter().map(|c| c.quality).collect::<Vec<_>>(), [1.0; 3]);
    assert_eq!(c.iter().map(|c| c.latency).collect::<Vec<_>>(), [1.0; 3]);
    assert!(
        (c[1].cost - (1.0 - 2f64.ln() / 5f64.ln())).abs() < 1e-12,
        "{:?}",
        c[1]
    );
    // 100 vs 110 ms is not stretched to 1 vs 0: the divisor is at least ln 2.
    let c = components(&[
        offer("a", Some(0.9), Some(0.01), Some(100)),
        offer("b", Some(0.9), Some(0.01), Some(110)),
    ]);
    assert!(
        (c[1].latency - (1.0 - 1.1f64.ln() / 2f64.ln())).abs() < 1e-12,
        "{:?}",
        c[1]
    );
    // Free is a thousandth of the worst: 0.001 USD is half-way between it and 0.03 (ln 33/ln 1000).
    let c = components(&[
        offer("free", Some(0.62), Some(0.0), Some(250)),
        offer("mini", Some(0.8), Some(0.001), Some(250)),
        offer("dear", Some(0.93), Some(0.03), Some(250)),
    ]);
    assert_eq!((c[0].cost, c[2].cost), (1.0, 0.0));
    assert!((c[1].cost - (1.0 - (0.001f64 / 0.00003).ln() / 1000f64.ln())).abs() < 1e-9);
    let mut cheapest = Policy::builtin_balanced();
    cheapest.weights = Weights {
        quality: 0.2,
        cost: 0.7,
        latency: 0.1,
    };
    cheapest.tolerance = 0.05;
    let offers = [
        offer("free", Some(0.62), Some(0.0), Some(250)),
        offer("mini", Some(0.8), Some(0.001), Some(250)),
        offer("dear", Some(0.93), Some(0.03), Some(250)),
    ];
    let mut rng = fastrand::Rng::with_seed(3);
    let pick = decide(&offers, &cheapest, &need(), &params, &mut rng).unwrap();
    assert_eq!(
        (pick.index, pick.band),
        (0, 1),
        "the shipped cheapest weights take the free one"
    );
    // Free and instant delegates are simply the best; all free, all 1.
    let c = components(&[
        offer("free", Some(1.0), Some(0.0), Some(0)),
        offer("paid", Some(0.5), Some(0.01), Some(10)),
    ]);
    assert_eq!((c[0].quality, c[0].cost, c[0].latency), (1.0, 1.0, 1.0));
    assert_eq!((c[1].quality, c[1].cost, c[1].latency), (0.0, 0.0, 0.0));
    let c = components(&[
        offer("x", None, Some(0.0), None),
        offer("y", None, Some(0.0), None),
    ]);
    assert_eq!((c[0].cost, c[1].cost), (1.0, 1.0));
}

#[test]
fn missing_hints_score_neutral_not_zero() {
    let offers = [
        offer("known", Some(0.2), Some(0.01), Some(100)),
        offer("silent", None, Some(0.01), Some(100)),
    ];
    let mut p = Policy::builtin_balanced();
    p.weights = Weights {
        quality: 1.0,
        cost: 0.0,
        latency: 0.0,
    };
    let (_, scored, _) = scores(&offers, &p, &need(), &RoutingParams::default());
    assert_eq!(scored[1].unwrap().0.quality, 0.5);
}

#[test]
fn band_shares_near_equals_by_weight() {
    let mut offers = vec![
        offer("a", Some(0.80), Some(0.01), Some(100)),
        offer("b", Some(0.79), Some(0.01), Some(100)),
    ];
    offers[1].weight = 3.0;
    let mut p = Policy::builtin_balanced();
    p.tolerance = 0.05;
    let mut rng = fastrand::Rng::with_seed(1);
    let mut count = [0usize; 2];
    for _ in 0..4000 {
        let pick = decide(&offers, &p, &need(), &RoutingParams::default(), &mut rng).unwrap();
        assert_eq!(pick.band, 2);
        count[pick.index] += 1;
    }
    // weight 3 vs 1: about 75% / 25%.
    assert!((2700..3300).contains(&count[1]), "{count:?}");
    p.tolerance = 0.0;
    let pick = decide(&offers, &p, &need(), &RoutingParams::default(), &mut rng).unwrap();
    assert_eq!((pick.index, pick.band), (0, 1));
}

#[test]
fn no_eligible_names_skill_and_exclusions() {
    let mut o = offer("a", Some(0.5), Some(0.01), Some(100));
    o.healthy = false;
    let e = decide(
        &[o],
        &Policy::builtin_balanced(),
        &need(),
        &RoutingParams::default(),
        &mut fastrand::Rng::new(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "1 delegate(s) offer skill 's' but none passes the constraints (healthy: 1 excluded)"
    );
    let none: [TestOffer; 0] = [];
    let e = decide(
        &none,
        &Policy::builtin_balanced(),
        &need(),
        &RoutingParams::default(),
        &mut fastrand::Rng::new(),
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "no delegate offers skill 's'");
}

#[test]
fn explain_shows_values_compared() {
    let offers = [
        offer("a", Some(0.8), Some(0.01), Some(500)),
        offer("b", Some(0.6), Some(0.01), Some(500)),
    ];
    let mut p = Policy::builtin_balanced();
    p.require.min_quality = Some(0.7);
    let x = explain(
        &offers,
        &[("c".into(), "ldp:delegate:c".into())],
        &p,
        &need(),
        &RoutingParams::default(),
    );
    assert_eq!(x.pick, Picked::Delegate("a".into()));
    assert_eq!(x.band, vec!["a".to_string()]);
    let b = &x.delegates[1];
    let row = b
        .constraints
        .iter()
        .find(|c| c.constraint == Constraint::MinQuality)
        .unwrap();
    assert!(!row.pass);
    assert_eq!(row.detail, "quality 0.6 >= 0.7");
    assert!(!x.delegates[2].offers_skill);
    assert!(x.to_table().contains("FAIL min_quality"));
}

#[test]
fn evidence_moves_min_quality_and_the_quality_score() {
    let params = RoutingParams::default();
    let mut pol = Policy::builtin_balanced();
    pol.require.min_quality = Some(0.8);
    pol.weights = Weights {
        quality: 1.0,
        cost: 0.0,
        latency: 0.0,
    };
    let mut liar = offer("liar", Some(0.95), Some(0.001), Some(10));
    let honest = offer("honest", Some(0.85), Some(0.01), Some(10));
    // No evidence: the claim stands, and the liar scores best.
    let e = evaluate(&liar, &pol, &need(), &params);
    assert!(e.eligible() && e.figures.quality == Some(0.95));
    let (_, scored, _) = scores(&[liar.clone(), honest.clone()], &pol, &need(), &params);
    assert!(scored[0].unwrap().1 > scored[1].unwrap().1);
    // Ten votes at 0.5 outweigh a self-claim: below min_quality, shown with its parts.
    liar.quality_seen = Some(Observed {
        mean: 0.5,
        count: 10.0,
    });
    let e = evaluate(&liar, &pol, &need(), &params);
    assert!(only(Constraint::MinQuality, &e), "{e:?}");
    assert_eq!(e.figures.declared_quality, Some(0.95));
    assert!(e.figures.quality.unwrap() < 0.6);
    let x = explain(&[liar, honest], &[], &pol, &need(), &params);
    assert_eq!(x.pick, Picked::Delegate("honest".into()));
    let table = x.to_table();
    assert!(
        table.contains("quality: declared 0.95, observed 0.500 over 10.0, blended 0.575"),
        "{table}"
    );
}

#[test]
fn an_unmeasured_delegate_outside_the_band_is_explored_only_when_explore_allows() {
    // "a" and "b" measured and fast; "c" declares no latency and is unmeasured: its
    // latency scores missing_score, out of the band.
    let mut offers = vec![
        offer("a", Some(0.9), Some(0.01), Some(100)),
        offer("b", Some(0.9), Some(0.01), Some(100)),
        offer("c", Some(0.9), Some(0.01), None),
    ];
    offers[0].observed = Some(100.0);
    offers[1].observed = Some(100.0);
    let mut p = Policy::builtin_balanced();
    p.tolerance = 0.05;
    let mut rng = fastrand::Rng::with_seed(7);
    let off = RoutingParams {
        explore: 0.0,
        ..RoutingParams::default()
    };
    let on = RoutingParams {
        explore: 0.2,
        ..RoutingParams::default()
    };
    let count = |params: &RoutingParams, rng: &mut fastrand::Rng| {
        (0..2000)
            .filter(|_| {
                let pick = decide(&offers, &p, &need(), params, rng).unwrap();
                assert_eq!(pick.trial.is_some(), pick.index == 2, "{pick:?}");
                pick.index == 2
            })
            .count()
    };
    assert_eq!(count(&off, &mut rng), 0);
    let explored = count(&on, &mut rng);
    assert!(
        (300..500).contains(&explored),
        "about 20% of 2000: {explored}"
    );
    // Once measured, it is scored like the others and no longer explored.
    offers[2].observed = Some(100.0);
    let pick = decide(&offers, &p, &need(), &on, &mut rng).unwrap();
    assert_eq!(pick.trial, None);
}

#[test]
fn probation_tries_a_producer_excluded_by_evidence_and_serves_when_none_is_left() {
    let mut p = Policy::builtin_balanced();
    p.require.min_quality = Some(0.8);
    p.verify = Some(crate::policy::Verify::default());
    let bad = Some(Observed {
        mean: 0.2,
        count: 20.0,
    });
    let mut offers = vec![
        offer("good", Some(0.9), Some(0.01), Some(100)),
        offer("fallen", Some(0.9), Some(0.001), Some(100)),
    ];
    offers[0].observed = Some(100.0);
    offers[0].quality_seen = Some(Observed {
        mean: 0.9,
        count: 20.0,
    });
    offers[1].observed = Some(100.0);
    offers[1].quality_seen = bad;
    let params = RoutingParams {
        explore: 1.0,
        ..RoutingParams::default()
    };
    let mut rng = fastrand::Rng::with_seed(3);
    // Not verified: never.
    let pick = decide(&offers, &p, &need(), &params, &mut rng).unwrap();
    assert_eq!((pick.index, pick.trial), (0, None));
    // Verified: the fallen one gets its trial.
    let verified = Need {
        probation: true,
        ..need()
    };
    let pick = decide(&offers, &p, &verified, &params, &mut rng).unwrap();
    assert_eq!((pick.index, pick.trial), (1, Some(Trial::Probation)));
    // Every producer excluded by evidence: the best-evidenced one serves a verified task,
    // whatever explore says; an unverified one finds nobody.
    offers[0].quality_seen = Some(Observed {
        mean: 0.5,
        count: 20.0,
    });
    let off = RoutingParams {
        explore: 0.0,
        ..RoutingParams::default()
    };
    let pick = decide(&offers, &p, &verified, &off, &mut rng).unwrap();
    assert_eq!((pick.index, pick.trial), (0, Some(Trial::Probation)));
    assert!(decide(&offers, &p, &need(), &off, &mut rng).is_err());
    // An ejected delegate is no probation candidate, nor the last resort.
    offers[0].ejected = true;
    let pick = decide(&offers, &p, &verified, &off, &mut rng).unwrap();
    assert_eq!((pick.index, pick.trial), (1, Some(Trial::Probation)));
    offers[1].ejected = true;
    assert!(decide(&offers, &p, &verified, &params, &mut rng).is_err());
    offers[0].ejected = false;
    offers[1].ejected = false;
    // A verifier's floor: below it, not chosen; unknown passes.
    let choosing = Need {
        min_reliability: Some(0.6),
        ..need()
    };
    p.require.min_quality = None;
    offers[0].quality_seen = Some(Observed {
        mean: 0.7,
        count: 20.0,
    });
    let pick = decide(&offers, &p, &choosing, &off, &mut rng).unwrap();
    assert_eq!(pick.index, 0, "0.9 claimed, 0.7 seen: about 0.72");
    offers[0].quality_seen = bad;
    assert!(decide(&offers, &p, &choosing, &off, &mut rng).is_err());
    offers[0].hints.quality = None;
    offers[0].quality_seen = None;
    assert!(decide(&offers, &p, &choosing, &off, &mut rng).is_ok());
}
