//! Learned quality: per delegate and skill, what verifier votes and client ratings say of the
//! answers it delivered, as a Beta posterior whose evidence halves in weight every
//! `[quality] half_life` (so a delegate that was bad can recover: its old evidence fades and
//! its declared quality counts again). Routing blends it with the card's claim
//! ([`crate::routing::blend`]).
//!
//! Whose evidence moves whose routing: the shared estimate learns only from sources the
//! operator trusts (verifier votes, and ratings of tenants marked `trusted_rater`); any other
//! tenant's ratings are kept as that tenant's own evidence, which only its own tasks see
//! (shared plus own, summed). A tenant alone therefore cannot move another tenant's routing
//! nor the verifier weights (read from the shared estimate), yet its ratings still steer its
//! own traffic. Per-tenant evidence is bounded: tenants are configured, and each estimate
//! keeps at most [`MAX_RATERS`] of them.
//!
//! A verifier's reliability is its estimate at the verify skill, fed by its calibration rounds
//! (`calibrated`: each round is a ledger row, so a rebuild reads them back, and in cluster mode
//! every replica learns the rounds any one of them ran) and by its other judgements
//! (`judged`): its agreement with a round's outcome when other verifiers voted, and trusted
//! raters' ratings of the tasks it judged. Those are this process's own (not in the ledger's
//! votes or ratings), so a rebuild keeps them.
//!
//! Reads are lock-free (`ArcSwapOption`): a decision reads every offer's estimate. Writes are
//! rare (a vote, a rating) and replace the small value whole.

use crate::routing::{claim_weight, Bad, Evidence, Observed, Prior};
use arc_swap::ArcSwapOption;
use dashmap::DashMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Default `[quality] half_life`: one hour.
pub const DEFAULT_HALF_LIFE_MS: u64 = 3_600_000;

/// Skills a delegate keeps estimates for; evidence for more is dropped (a card's
/// capabilities are capped well below this, and evidence only names skills it served).
const MAX_SKILLS: usize = 1024;

/// Tenants whose own ratings one estimate keeps; ratings of more are dropped (tenants are
/// configured, so this is only a ceiling).
pub const MAX_RATERS: usize = 1024;

/// Per tenant, its own ratings' evidence.
pub type Own = std::collections::HashMap<Box<str>, Beta>;

/// Whether an observation can be learnt: a score in 0..=1 and a finite positive weight.
pub fn usable(score: f64, weight: f64) -> bool {
    (0.0..=1.0).contains(&score) && weight.is_finite() && weight > 0.0
}

/// Decayed evidence: weighted good and bad, as of `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Beta {
    /// Σ weight × score.
    pub good: f64,
    /// Σ weight × (1 − score).
    pub bad: f64,
    /// When it was last updated, Unix ms.
    pub at_ms: i64,
}

impl Beta {
    /// This evidence aged to `now_ms` (never grown by a clock that went back). `exact`:
    /// always decay; else a read under a thousandth of a half-life after the last write skips
    /// the power (the weight has moved by under 0.07%; routing reads every offer's estimate
    /// per decision, and the power is most of its cost). Writes are exact: a skipped decay
    /// would be lost when `at_ms` moves on.
    fn aged(self, now_ms: i64, half_life_ms: u64, exact: bool) -> Beta {
        let dt = (now_ms - self.at_ms).max(0) as f64;
        let hl = half_life_ms as f64;
        let factor = if half_life_ms == 0 || (!exact && dt * 1000.0 < hl) {
            1.0
        } else {
            (-dt / hl).exp2()
        };
        Beta {
            good: self.good * factor,
            bad: self.bad * factor,
            at_ms: now_ms.max(self.at_ms),
        }
    }

    /// Adds one observation (score 0..1, weight > 0) at `at_ms`.
    pub fn observe(self, score: f64, weight: f64, at_ms: i64, half_life_ms: u64) -> Beta {
        let b = self.aged(at_ms, half_life_ms, true);
        Beta {
            good: b.good + weight * score,
            bad: b.bad + weight * (1.0 - score),
            at_ms: b.at_ms,
        }
    }

    /// Empty evidence at `at_ms`.
    pub fn empty(at_ms: i64) -> Beta {
        Beta {
            good: 0.0,
            bad: 0.0,
            at_ms,
        }
    }
}

/// One delegate's estimate at one skill: the shared evidence, and each tenant's own.
#[derive(Debug)]
pub struct Estimate {
    beta: ArcSwapOption<Beta>,
    /// Evidence of its judgement as a verifier from agreement and ratings (shared, this
    /// process's own: kept by rebuilds).
    judged: ArcSwapOption<Beta>,
    /// Evidence of its judgement as a verifier from calibration rounds (shared, in the
    /// ledger: replaced by rebuilds).
    calibrated: ArcSwapOption<Beta>,
    own: ArcSwapOption<Own>,
    half_life_ms: Arc<AtomicU64>,
    /// Bumped after every write (0: never written, so no evidence).
    generation: AtomicU64,
    /// Whether any tenant's own evidence was ever kept (then a rater's reading is worked out
    /// each time, not kept).
    has_own: AtomicBool,
    /// The last reading routing made ([`Estimate::evidence`]).
    kept: Kept,
}

/// Words of a kept reading: generation, at_ms, half-life, declared quality, claim weight,
/// whether there is evidence, mean, count, blend, plausible, error rate, its logarithm.
const KEPT_WORDS: usize = 12;

/// `Option<f64>` in a word: a NaN no arithmetic makes stands for none.
const NONE_BITS: u64 = 0x7ff8_0000_dead_beef;

fn opt_bits(v: Option<f64>) -> u64 {
    v.map_or(NONE_BITS, f64::to_bits)
}

fn bits_opt(w: u64) -> Option<f64> {
    (w != NONE_BITS).then(|| f64::from_bits(w))
}

/// The last reading of the shared evidence with what it made of one prior ([`Evidence`]),
/// kept until the evidence is written again or its decay could have moved it (a thousandth
/// of a half-life after the reading, the same tolerance [`Beta`]'s reads allow). Routing
/// reads every offer's quality per decision: a kept reading costs a dozen atomic loads, no
/// lock, no power, no posterior. A sequence lock: readers retry never (a torn or busy read
/// just works the reading out), a writer that finds another writing skips keeping its own.
#[derive(Debug, Default)]
struct Kept {
    /// Odd while a writer writes.
    seq: AtomicU64,
    words: [AtomicU64; KEPT_WORDS],
}

impl Kept {
    fn read(&self) -> Option<[u64; KEPT_WORDS]> {
        let before = self.seq.load(Ordering::Acquire);
        if before & 1 == 1 {
            return None;
        }
        let mut w = [0u64; KEPT_WORDS];
        for (x, a) in w.iter_mut().zip(&self.words) {
            *x = a.load(Ordering::Relaxed);
        }
        // Orders the loads above before the check below: a word from a write that began
        // after `before` makes `seq` differ.
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == before).then_some(w)
    }

    fn write(&self, w: [u64; KEPT_WORDS]) {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1
            || self
                .seq
                .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        for (a, x) in self.words.iter().zip(w) {
            a.store(x, Ordering::Relaxed);
        }
        self.seq.store(s + 2, Ordering::Release);
    }
}

impl Estimate {
    /// Adds an observation to the shared evidence (every tenant's routing sees it); a score
    /// or weight out of range (or not finite) is ignored.
    pub fn observe(&self, score: f64, weight: f64, at_ms: i64) {
        self.add(&self.beta, score, weight, at_ms);
    }

    /// Adds an observation of its judgement as a verifier (shared; a rebuild from the
    /// ledger keeps it); ignored as [`Estimate::observe`] says.
    pub fn observe_judged(&self, score: f64, weight: f64, at_ms: i64) {
        self.add(&self.judged, score, weight, at_ms);
    }

    /// Adds a calibration round of it as a verifier (shared; its ledger row brings it back
    /// in a rebuild, which replaces it); ignored as [`Estimate::observe`] says.
    pub fn observe_calibrated(&self, score: f64, weight: f64, at_ms: i64) {
        self.add(&self.calibrated, score, weight, at_ms);
    }

    fn add(&self, to: &ArcSwapOption<Beta>, score: f64, weight: f64, at_ms: i64) {
        if !usable(score, weight) {
            return;
        }
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        to.rcu(|old| {
            let b = old.as_deref().copied().unwrap_or(Beta::empty(at_ms));
            Some(Arc::new(b.observe(score, weight, at_ms, hl)))
        });
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Adds an observation to `rater`'s own evidence (only its routing sees it); ignored as
    /// [`Estimate::observe`] says, or when [`MAX_RATERS`] others are kept.
    pub fn observe_own(&self, rater: &str, score: f64, weight: f64, at_ms: i64) {
        if !usable(score, weight) {
            return;
        }
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        self.own.rcu(|old| {
            let mut next = old.as_deref().cloned().unwrap_or_default();
            if !next.contains_key(rater) && next.len() >= MAX_RATERS {
                return old.clone();
            }
            let b = next.entry(rater.into()).or_insert(Beta::empty(at_ms));
            *b = b.observe(score, weight, at_ms, hl);
            Some(Arc::new(next))
        });
        self.has_own.store(true, Ordering::Release);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// [`Estimate::observed`] with what it makes of the card's claim `prior`, as routing
    /// reads it ([`crate::routing::Offer::evidence`]): the shared evidence's reading is kept
    /// ([`Kept`]) and served again until the evidence is written or a thousandth of a
    /// half-life has passed; a rater with evidence of its own gets it worked out each time.
    pub fn evidence(&self, now_ms: i64, rater: Option<&str>, prior: Prior) -> Option<Evidence> {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 {
            return None;
        }
        if rater.is_some() && self.has_own.load(Ordering::Acquire) {
            return self.observed(now_ms, rater).map(|o| Evidence::of(prior, o));
        }
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        let declared = opt_bits(prior.declared);
        let k = claim_weight(prior.claim).to_bits();
        if let Some(w) = self.kept.read() {
            let at = w[1] as i64;
            let fresh = now_ms >= at && (hl == 0 || ((now_ms - at) as f64) * 1000.0 < hl as f64);
            if w[0] == generation && w[2] == hl && w[3] == declared && w[4] == k && fresh {
                return (w[5] == 1).then(|| Evidence {
                    observed: Observed {
                        mean: f64::from_bits(w[6]),
                        count: f64::from_bits(w[7]),
                    },
                    blend: bits_opt(w[8]),
                    plausible: bits_opt(w[9]),
                    error: bits_opt(w[10]).map(|value| Bad {
                        value,
                        ln: f64::from_bits(w[11]),
                    }),
                });
            }
        }
        let e = self.observed(now_ms, None).map(|o| Evidence::of(prior, o));
        let (mean, count) = e.map_or((0.0, 0.0), |e| (e.observed.mean, e.observed.count));
        self.kept.write([
            generation,
            now_ms as u64,
            hl,
            declared,
            k,
            u64::from(e.is_some()),
            mean.to_bits(),
            count.to_bits(),
            opt_bits(e.and_then(|e| e.blend)),
            opt_bits(e.and_then(|e| e.plausible)),
            opt_bits(e.and_then(|e| e.error).map(|b| b.value)),
            e.and_then(|e| e.error).map_or(0.0, |b| b.ln).to_bits(),
        ]);
        e
    }

    /// What has been observed, aged to `now_ms`: the shared evidence, plus `rater`'s own
    /// when one is named; none before the first observation.
    pub fn observed(&self, now_ms: i64, rater: Option<&str>) -> Option<Observed> {
        let hl = self.half_life_ms.load(Ordering::Relaxed);
        let shared = self
            .beta
            .load()
            .as_deref()
            .map(|b| b.aged(now_ms, hl, false));
        let judged = self
            .judged
            .load()
            .as_deref()
            .map(|b| b.aged(now_ms, hl, false));
        let calibrated = self
            .calibrated
            .load()
            .as_deref()
            .map(|b| b.aged(now_ms, hl, false));
        let own = rater.and_then(|r| {
            let own = self.own.load();
            own.as_deref()?.get(r).map(|b| b.aged(now_ms, hl, false))
        });
        let (good, bad) = [shared, judged, calibrated, own]
            .into_iter()
            .flatten()
            .fold((0.0, 0.0), |(g, b), x| (g + x.good, b + x.bad));
        let count = good + bad;
        (count > 1e-9).then(|| Observed {
            mean: good / count,
            count,
        })
    }

    /// The shared evidence, aged to now (the clock is read only when there is evidence).
    pub fn observed_now(&self) -> Option<Observed> {
        if self.beta.load().is_none()
            && self.judged.load().is_none()
            && self.calibrated.load().is_none()
        {
            return None;
        }
        self.observed(now_ms(), None)
    }

    /// Replaces the evidence, shared, own and calibrated (a rebuild from the ledger); the
    /// judged evidence stays.
    pub fn set(&self, beta: Option<Beta>, own: Option<Own>, calibrated: Option<Beta>) {
        self.beta.store(beta.map(Arc::new));
        self.calibrated.store(calibrated.map(Arc::new));
        let own = own.filter(|o| !o.is_empty());
        if own.is_some() {
            self.has_own.store(true, Ordering::Release);
        }
        self.own.store(own.map(Arc::new));
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// One skill's evidence as rebuilt from the ledger: shared, and per tenant.
#[derive(Debug, Default)]
pub struct Rebuilt {
    /// Votes and trusted raters' ratings.
    pub shared: Option<Beta>,
    /// Every other tenant's own ratings.
    pub own: Own,
    /// Calibration rounds of it as a verifier (at a verify skill).
    pub calibrated: Option<Beta>,
}

/// A delegate's estimates, per skill.
#[derive(Debug)]
pub struct Learned {
    skills: DashMap<String, Arc<Estimate>>,
    half_life_ms: Arc<AtomicU64>,
}

impl Default for Learned {
    fn default() -> Self {
        Learned {
            skills: DashMap::new(),
            half_life_ms: Arc::new(AtomicU64::new(DEFAULT_HALF_LIFE_MS)),
        }
    }
}

impl Learned {
    /// The estimate for `skill`, created empty when first asked; none when the delegate
    /// already keeps [`MAX_SKILLS`] others.
    pub fn estimate(&self, skill: &str) -> Option<Arc<Estimate>> {
        if let Some(e) = self.skills.get(skill) {
            return Some(e.clone());
        }
        if self.skills.len() >= MAX_SKILLS {
            return None;
        }
        let e = self
            .skills
            .entry(skill.to_owned())
            .or_insert_with(|| {
                Arc::new(Estimate {
                    beta: ArcSwapOption::empty(),
                    judged: ArcSwapOption::empty(),
                    calibrated: ArcSwapOption::empty(),
                    own: ArcSwapOption::empty(),
                    half_life_ms: self.half_life_ms.clone(),
                    generation: AtomicU64::new(0),
                    has_own: AtomicBool::new(false),
                    kept: Kept::default(),
                })
            })
            .clone();
        Some(e)
    }

    /// Sets how fast evidence fades (every estimate shares it).
    pub fn set_half_life_ms(&self, ms: u64) {
        self.half_life_ms.store(ms, Ordering::Relaxed);
    }

    /// Replaces every estimate by `rebuilt` (skills absent from it lose their evidence).
    pub fn replace(&self, rebuilt: &std::collections::HashMap<&str, Rebuilt>) {
        for e in self.skills.iter() {
            if !rebuilt.contains_key(e.key().as_str()) {
                e.value().set(None, None, None);
            }
        }
        for (skill, r) in rebuilt {
            if let Some(e) = self.estimate(skill) {
                e.set(r.shared, Some(r.own.clone()), r.calibrated);
            }
        }
    }
}

impl super::Registry {
    /// Rebuilds every delegate's learned quality from the ledger's evidence (votes, ratings
    /// and calibration rounds of the last eight half-lives, at most `max_evidence` of each):
    /// at start, so estimates survive a restart, and in cluster mode at each refresh, so
    /// every replica learns from every other's. A failed read keeps what is known (and says so).
    pub async fn restore_quality(
        &self,
        ledger: &crate::provenance::LedgerHandle,
        cfg: &crate::config::QualityConfig,
    ) {
        match ledger
            .evidence(cfg.since_ms(now_ms()), cfg.max_evidence)
            .await
        {
            Ok(evidence) => {
                self.rebuild_quality(&evidence);
                tracing::debug!(
                    pieces = evidence.len(),
                    "learned quality rebuilt from the ledger"
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, "learned quality not rebuilt from the ledger");
            }
        }
    }

    /// Cluster mode: rebuilds learned quality from the shared ledger every `cfg.refresh`
    /// until `shutdown` fires.
    pub fn spawn_quality_refresh(
        self: std::sync::Arc<Self>,
        ledger: crate::provenance::LedgerHandle,
        cfg: crate::config::QualityConfig,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(cfg.refresh) => {}
                    _ = shutdown.changed() => return,
                }
                self.restore_quality(&ledger, &cfg).await;
            }
        })
    }
}

/// Unix ms now (evidence is stamped and aged in wall-clock time: it is stored in the ledger
/// and rebuilt after a restart).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_a_weighted_mean_that_fades() {
        let l = Learned::default();
        l.set_half_life_ms(1000);
        let e = l.estimate("qa").unwrap();
        assert_eq!(e.observed(0, None), None);
        e.observe(1.0, 1.0, 0);
        e.observe(0.0, 3.0, 0);
        let o = e.observed(0, None).unwrap();
        assert!((o.mean - 0.25).abs() < 1e-9 && (o.count - 4.0).abs() < 1e-9);
        let later = e.observed(1000, None).unwrap();
        assert!((later.mean - 0.25).abs() < 1e-9, "fading keeps the mean");
        assert!((later.count - 2.0).abs() < 1e-9, "and halves the count");
        // An old observation counts for less than a new one.
        e.observe(1.0, 1.0, 3000);
        assert!(e.observed(3000, None).unwrap().mean > 0.6);
        // Out-of-range input is ignored.
        e.observe(2.0, 1.0, 3000);
        e.observe(0.5, f64::NAN, 3000);
        assert!((e.observed(3000, None).unwrap().count - 1.5).abs() < 1e-9);
    }

    #[test]
    fn steady_evidence_still_fades() {
        // One observation a second for eight half-lives of an hour: the count settles near
        // 1 / (1 − 2^(−1/3600)) ≈ 5,194, far below the 28,800 observations made.
        let e = Learned::default().estimate("qa").unwrap();
        for s in 0..28_800i64 {
            e.observe(1.0, 1.0, s * 1000);
        }
        let n = e.observed(28_799_000, None).unwrap().count;
        assert!((5_000.0..5_300.0).contains(&n), "{n}");
    }

    #[test]
    fn a_kept_reading_is_served_until_evidence_or_decay_moves_it() {
        let l = Learned::default();
        l.set_half_life_ms(1_000_000);
        let e = l.estimate("qa").unwrap();
        let prior = Prior {
            declared: Some(0.9),
            claim: None,
        };
        let fresh =
            |now: i64, rater: Option<&str>| e.observed(now, rater).map(|o| Evidence::of(prior, o));
        assert_eq!(e.evidence(0, None, prior), None, "no evidence yet");
        e.observe(0.0, 2.0, 0);
        let first = e.evidence(1_500, None, prior);
        assert!(first.is_some());
        assert_eq!(first, fresh(1_500, None));
        // Within a thousandth of a half-life of the reading: the kept one, not a new one.
        assert_eq!(e.evidence(2_400, None, prior), first);
        assert_ne!(
            fresh(2_400, None),
            first,
            "the exact reading has decayed a little"
        );
        // Past it, or after a write, or under another claim: worked out again.
        assert_eq!(e.evidence(2_600, None, prior), fresh(2_600, None));
        e.observe(1.0, 1.0, 2_600);
        assert_eq!(e.evidence(2_610, None, prior), fresh(2_610, None));
        let other = Prior {
            declared: Some(0.5),
            claim: None,
        };
        assert_eq!(
            e.evidence(2_610, None, other),
            e.observed(2_610, None).map(|o| Evidence::of(other, o))
        );
        // A rater with ratings of its own sees them; the shared reading stays shared.
        e.observe_own("acme", 0.0, 5.0, 2_620);
        let acme = fresh(2_630, Some("acme"));
        assert_eq!(e.evidence(2_630, Some("acme"), prior), acme);
        assert_eq!(e.evidence(2_630, None, prior), fresh(2_630, None));
        assert_ne!(acme, fresh(2_630, None));
        // A clock that went back is not served a reading from its future.
        assert_eq!(e.evidence(500, None, prior), fresh(500, None));
    }

    #[test]
    fn replace_clears_skills_without_evidence() {
        let l = Learned::default();
        l.estimate("a").unwrap().observe(1.0, 1.0, 0);
        let mut rebuilt = std::collections::HashMap::new();
        rebuilt.insert(
            "b",
            Rebuilt {
                shared: Some(Beta {
                    good: 1.0,
                    bad: 1.0,
                    at_ms: 0,
                }),
                own: Own::new(),
                calibrated: None,
            },
        );
        l.replace(&rebuilt);
        let seen = |s: &str| l.estimate(s).unwrap().observed(0, None);
        assert_eq!(seen("a"), None);
        assert_eq!(seen("b").map(|o| o.count), Some(2.0));
    }

    #[test]
    fn a_rebuild_replaces_calibration_rounds_and_keeps_other_judgements() {
        let l = Learned::default();
        let e = l.estimate("verify").unwrap();
        e.observe_judged(1.0, 1.0, 0);
        e.observe_calibrated(0.5, 12.0, 0);
        assert_eq!(e.observed(0, None).map(|o| o.count), Some(13.0));
        // The ledger holds the round (and one another replica ran): they replace the live one.
        let mut rebuilt = std::collections::HashMap::new();
        let rounds = Beta {
            good: 6.0,
            bad: 18.0,
            at_ms: 0,
        };
        rebuilt.insert(
            "verify",
            Rebuilt {
                calibrated: Some(rounds),
                ..Rebuilt::default()
            },
        );
        l.replace(&rebuilt);
        let o = e.observed(0, None).unwrap();
        assert!((o.count - 25.0).abs() < 1e-9 && (o.mean - 7.0 / 25.0).abs() < 1e-9);
        // A ledger without rounds forgets them; the agreement stays.
        l.replace(&std::collections::HashMap::new());
        assert_eq!(e.observed(0, None).map(|o| o.count), Some(1.0));
    }

    #[test]
    fn a_tenants_own_ratings_are_seen_by_it_alone() {
        let e = Learned::default().estimate("qa").unwrap();
        e.observe(1.0, 1.0, 0);
        for _ in 0..3 {
            e.observe_own("acme", 0.0, 1.0, 0);
        }
        let shared = e.observed(0, None).unwrap();
        assert!((shared.mean - 1.0).abs() < 1e-9 && (shared.count - 1.0).abs() < 1e-9);
        assert_eq!(e.observed(0, Some("other")), Some(shared));
        let acme = e.observed(0, Some("acme")).unwrap();
        assert!((acme.mean - 0.25).abs() < 1e-9 && (acme.count - 4.0).abs() < 1e-9);
        // Own evidence alone is an estimate too, for its tenant only.
        let fresh = Learned::default().estimate("qa").unwrap();
        fresh.observe_own("acme", 0.0, 1.0, 0);
        assert_eq!(fresh.observed(0, None), None);
        assert_eq!(fresh.observed_now(), None);
        assert!(fresh.observed(0, Some("acme")).is_some());
        // Bounded: past MAX_RATERS tenants, a new one's ratings are dropped.
        for i in 0..MAX_RATERS {
            fresh.observe_own(&format!("t{i}"), 1.0, 1.0, 0);
        }
        fresh.observe_own("late", 1.0, 1.0, 0);
        assert_eq!(fresh.observed(0, Some("late")), None);
    }
}
