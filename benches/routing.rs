//! Routing micro-benches: one decision over 10, 100 and 10,000 delegates offering the skill
//! under a realistic policy, one in a 10,000-delegate fleet where 100 offer the skill, and one
//! `routing::explain` over 100.
//!
//! `cargo bench --bench routing` (quick run: `cargo bench --bench routing -- --warm-up-time 1
//! --measurement-time 3`).
//!
//! The offers are plain structs implementing `routing::Offer`, not the registry's
//! `SkillOffer`s: a `Registry` gets cards only by fetching them over HTTP (`poll_one`,
//! `poll_all`), and a `Delegate` built from config stays unhealthy until it has one. The
//! registry's `Offer` impl reads the same figures through its delegate (atomics, the outlier
//! state's and the latency EWMA's locks, the kept learned-quality reading), so it costs a
//! little more per offer than these. The offers keep what the registry keeps: an observed
//! latency with its logarithm, learned quality's kept reading (`Estimate::evidence`).
//!
//! Heap allocations per decision are counted (an instrumented system allocator) and printed
//! before each group's timings: `allocations/decision` for `decide/*`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ldp_gateway::ldp::{
    Capability, CapabilityHints, CostTier, IdentityCard, PayloadMode, TrustDomain,
};
use ldp_gateway::policy::{Glob, Policy, Require, Weights};
use ldp_gateway::registry::quality::{now_ms, Estimate, Learned};
use ldp_gateway::routing::{
    decide, decide_with, explain, statics, Evidence, Latency, Need, Observed, Offer, Prior,
    RoutingParams, Static,
};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap allocations (and reallocations) per call of `f`, over `n` calls after one to warm up.
fn allocations<R>(n: u32, mut f: impl FnMut() -> R) -> f64 {
    black_box(f());
    let region = Region::new(GLOBAL);
    for _ in 0..n {
        black_box(f());
    }
    let s = region.change();
    (s.allocations + s.reallocations) as f64 / f64::from(n)
}

const SKILL: &str = "summarize";

/// One delegate offering the skill.
struct BenchOffer {
    name: String,
    card: IdentityCard,
    hints: CapabilityHints,
    healthy: bool,
    /// Observed latency, kept with its logarithm as the registry keeps its EWMA.
    observed: Option<Latency>,
    weight: f64,
    /// Learned quality, as the registry's `SkillOffer` holds it.
    estimate: Option<Arc<Estimate>>,
}

impl Offer for BenchOffer {
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
        self.observed.map(|l| l.ms)
    }
    fn observed_latency(&self) -> Option<Latency> {
        self.observed
    }
    fn weight(&self) -> f64 {
        self.weight
    }
    fn observed_quality(&self, now_ms: i64, rater: Option<&str>) -> Option<Observed> {
        self.estimate.as_ref()?.observed(now_ms, rater)
    }
    fn evidence(&self, now_ms: i64, rater: Option<&str>, prior: Prior) -> Option<Evidence> {
        self.estimate.as_ref()?.evidence(now_ms, rater, prior)
    }
}

/// A mixed fleet, the same for a given `n`: most delegates healthy, in the client's domain,
/// in a few jurisdictions, with hints sometimes missing or given as a cost tier.
fn fleet(n: usize) -> Vec<BenchOffer> {
    let mut rng = fastrand::Rng::with_seed(n as u64);
    let jurisdictions = ["eu-west", "eu-central", "us-east", "us-west", "ap-south"];
    let families = ["llama", "claude", "gpt", "mistral"];
    (0..n)
        .map(|i| {
            let name = format!("delegate-{i}");
            let mut cap = Capability::named(SKILL);
            cap.hints = CapabilityHints {
                quality: (rng.u8(..10) != 0).then(|| 0.5 + rng.f64() * 0.45),
                latency_p50_ms: (rng.u8(..10) != 0).then(|| rng.u64(200..8_000)),
                cost_per_call_usd: (rng.u8(..3) != 0).then(|| rng.f64() * 0.05),
                cost_tier: Some([CostTier::Low, CostTier::Medium, CostTier::High][rng.usize(..3)]),
                ..CapabilityHints::default()
            };
            let card = IdentityCard {
                delegate_id: format!("ldp:delegate:{name}"),
                name: name.clone(),
                description: None,
                model_family: families[rng.usize(..families.len())].into(),
                model_version: "1".into(),
                weights_fingerprint: None,
                trust_domain: if rng.u8(..20) == 0 {
                    TrustDomain::named("partner")
                } else {
                    TrustDomain::named("acme")
                },
                context_window: Some([8_000, 32_000, 128_000][rng.usize(..3)]),
                reasoning_profile: None,
                cost_profile: None,
                latency_profile: None,
                jurisdiction: Some(jurisdictions[rng.usize(..jurisdictions.len())].into()),
                capabilities: vec![cap.clone()],
                supported_payload_modes: vec![PayloadMode::SemanticFrame, PayloadMode::Text],
                endpoint: None,
                metadata: BTreeMap::new(),
            };
            BenchOffer {
                name,
                card,
                hints: cap.hints,
                healthy: rng.u8(..20) != 0,
                observed: (rng.u8(..2) == 0).then(|| Latency::new(100.0 + rng.f64() * 5_000.0)),
                weight: 1.0,
                estimate: None,
            }
        })
        .collect()
}

/// A few hard constraints and balanced weights, as an operator would write.
fn policy() -> Policy {
    Policy {
        require: Require {
            jurisdictions: vec![Glob("eu-*".into()), Glob("us-*".into())],
            min_quality: Some(0.6),
            max_cost_usd: Some(0.03),
            ..Require::default()
        },
        weights: Weights {
            quality: 0.5,
            cost: 0.3,
            latency: 0.2,
        },
        tolerance: 0.05,
        ..Policy::builtin_balanced()
    }
}

fn need() -> Need<'static> {
    Need {
        skill: SKILL,
        client_domain: "acme",
        ..Need::default()
    }
}

/// The hot path: `decide_with` over the offers of one skill, their card-only checks
/// ([`statics`]) computed once beforehand as the registry caches them per policy; every
/// delegate in the fleet offers the skill (the worst case). `decide/full/100` recomputes the
/// card-only checks each time, for comparison.
fn bench_decide(c: &mut Criterion) {
    let (policy, need, params) = (policy(), need(), RoutingParams::default());
    let mut group = c.benchmark_group("decide");
    for n in [10usize, 100, 10_000] {
        let offers = fleet(n);
        let st = statics(&offers, &policy, &params);
        let mut rng = fastrand::Rng::with_seed(7);
        match decide_with(&offers, &st, &policy, &need, &params, &mut rng) {
            Ok(p) => eprintln!("decide/{n}: {} eligible, {} in band", p.eligible, p.band),
            Err(e) => eprintln!("decide/{n}: {e}"),
        }
        let per = allocations(100, || {
            decide_with(&offers, &st, &policy, &need, &params, &mut rng)
        });
        eprintln!("decide/{n}: {per} allocations/decision");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &offers, |b, offers| {
            b.iter(|| {
                decide_with(
                    black_box(offers.as_slice()),
                    &st,
                    &policy,
                    &need,
                    &params,
                    &mut rng,
                )
            })
        });
    }
    // Every offer with learned quality (votes a minute old), read as the registry's offers
    // read it: the estimate's kept reading, worked out again when evidence arrives or a
    // thousandth of a half-life (3.6 s) has passed, so within one such window every decision
    // reads the kept one.
    let learned = Learned::default();
    let mut offers = fleet(100);
    for (i, o) in offers.iter_mut().enumerate() {
        if let Some(e) = learned.estimate(&o.name) {
            e.observe(if i % 3 == 0 { 0.0 } else { 1.0 }, 1.0, now_ms() - 60_000);
            o.estimate = Some(e);
        }
    }
    let st = statics(&offers, &policy, &params);
    let mut rng = fastrand::Rng::with_seed(7);
    let now = Need {
        now_ms: now_ms(),
        ..need
    };
    let per = allocations(100, || {
        decide_with(&offers, &st, &policy, &now, &params, &mut rng)
    });
    eprintln!("decide/evidence/100: {per} allocations/decision");
    group.throughput(Throughput::Elements(100));
    group.bench_function("evidence/100", |b| {
        b.iter(|| {
            decide_with(
                black_box(offers.as_slice()),
                &st,
                &policy,
                &now,
                &params,
                &mut rng,
            )
        })
    });
    let offers = fleet(100);
    let mut rng = fastrand::Rng::with_seed(7);
    group.bench_function("full/100", |b| {
        b.iter(|| {
            decide(
                black_box(offers.as_slice()),
                &policy,
                &need,
                &params,
                &mut rng,
            )
        })
    });
    group.finish();
}

/// A fleet of 10,000 delegates over 100 skills (100 offering each): the skill index lookup
/// and the decision among that skill's offers — what a task costs when the fleet is large
/// but each skill's share is not.
fn bench_fleet(c: &mut Criterion) {
    let (policy, params) = (policy(), RoutingParams::default());
    let mut index: HashMap<String, (Vec<BenchOffer>, Vec<Static>)> = HashMap::new();
    for (i, mut o) in fleet(10_000).into_iter().enumerate() {
        let skill = format!("skill-{}", i % 100);
        for cap in &mut o.card.capabilities {
            cap.name = skill.clone();
        }
        index.entry(skill).or_default().0.push(o);
    }
    for (offers, st) in index.values_mut() {
        *st = statics(offers, &policy, &params);
    }
    let skills: Vec<String> = (0..100).map(|i| format!("skill-{i}")).collect();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut k = 0usize;
    c.bench_function("fleet/10000 (100 offer the skill)", |b| {
        b.iter(|| {
            k = (k + 1) % skills.len();
            let need = Need {
                skill: &skills[k],
                ..need()
            };
            let (offers, st) = index.get(black_box(skills[k].as_str()))?;
            decide_with(offers, st, &policy, &need, &params, &mut rng).ok()
        })
    });
}

fn bench_explain(c: &mut Criterion) {
    let (policy, need, params) = (policy(), need(), RoutingParams::default());
    let offers = fleet(100);
    c.bench_function("explain/100", |b| {
        b.iter(|| explain(black_box(offers.as_slice()), &[], &policy, &need, &params))
    });
}

criterion_group!(benches, bench_decide, bench_fleet, bench_explain);
criterion_main!(benches);
